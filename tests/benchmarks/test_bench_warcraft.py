"""``imle-solvers bench warcraft``: the protocol's rows, its projection, ``--full``, its options' checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import imle_solvers.benchmarks.warcraft as bench
from imle_solvers import cli
from imle_solvers.benchmarks import BenchConfig
from imle_solvers.errors import ConfigError
from tests.support.warcraft import write_warcraft


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("warcraft")
    write_warcraft(root, 4)  # 28 training, 7 validation and 14 test maps of 4 × 4 cells
    return root


def _tables(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    epochs = [r for r in rows if r["suite"] == "epochs"]
    summary = {r["quantity"]: r["value"] for r in rows if r["suite"] == "warcraft"}
    assert len(epochs) + len(summary) == len(rows)
    return epochs, summary


@pytest.mark.timeout(120)
def test_quick_run_prints_both_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "cache"))
    target = tmp_path / "rows.json"
    argv = ["bench", "warcraft", "--quick", "--size", "6", "--device", "cpu", "--json", str(target)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "## bench warcraft" in printed and "| epochs | 1" in printed and "projected 50 epochs" in printed
    epochs, summary = _tables(json.loads(target.read_text())["warcraft"])
    (epoch,) = epochs
    assert epoch["train_s"] > 0 and epoch["maps_per_s"] == pytest.approx(70 / epoch["train_s"])
    assert 0.0 <= epoch["test_accuracy"] <= 1.0 and epoch["test_regret"] >= 0
    assert summary["epochs run"] == "1 of 50, 70 training maps each"
    assert summary["s per 1,000 maps"] == pytest.approx(1000 * epoch["train_s"] / 70)
    projected_epoch = summary["s per epoch of 10,000 maps (projected from the s per map)"]
    assert projected_epoch == pytest.approx(10_000 * epoch["train_s"] / 70)
    eval_s = summary["evaluation of 1,000 test maps (s)"]
    assert eval_s == pytest.approx(epoch["eval_s"] * 1000 / 70)
    assert summary["projected 50 epochs with their evaluations (s)"] == pytest.approx(
        50 * projected_epoch + 51 * eval_s
    )
    assert summary["settings"] == "--compile off --amp off --channels-last off"  # the CPU's auto rules
    assert (
        summary["the steps ran"] == "off"
        and "Warcraft 6×6 (generated maps), resnet-stem" in summary["protocol"]
    )
    assert summary["device"].startswith("cpu, ")


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:the batch size 70 is larger:RuntimeWarning")  # 14 maps, on purpose
def test_published_files_epochs_and_the_projection(published: Path) -> None:
    rows = bench.run(data=str(published), size=4, maps=14, epochs=3, device="cpu")
    epochs, summary = _tables(rows)
    assert [r["epoch"] for r in epochs] == [1, 2, 3]
    times = [r["train_s"] for r in epochs]
    steady = sorted(times[1:])[0] / 2 + sorted(times[1:])[1] / 2  # the median of the later epochs
    assert summary["s per epoch (median of the later epochs)"] == pytest.approx(steady)
    assert summary["first epoch (s)"] == times[0]
    evals = sorted(r["eval_s"] for r in epochs)[1] * 1000 / 14
    overhead = max(0.0, times[0] - steady)
    assert summary["projected 50 epochs with their evaluations (s)"] == pytest.approx(
        overhead + 50 * steady * 10_000 / 14 + 51 * evals
    )
    assert (
        f"Warcraft 4×4 ({published})" in summary["protocol"]
        and "lr 0.0005 ÷ 10 after epochs 30 and 40" in (summary["protocol"])
    )
    assert "test accuracy" not in " ".join(summary)  # only with --full
    stopped = bench.run(data=str(published), size=4, maps=14, epochs=3, device="cpu", time_limit=1e-9)
    assert _tables(stopped)[1]["epochs run"] == "1 of 50, 14 training maps each"


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:the batch size 70 is larger:RuntimeWarning")  # 28 maps, on purpose
def test_full_reports_the_accuracy_beside_the_papers(
    published: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "PROTOCOL_MAPS", 28)  # the whole protocol, scaled to the small files
    monkeypatch.setattr(bench, "PROTOCOL_TEST_MAPS", 14)
    monkeypatch.setattr(bench, "PROTOCOL_EPOCHS", 2)
    monkeypatch.setattr(bench, "PAPER_ACCURACY", {4: (97.0, 0.5)})
    epochs, summary = _tables(bench.run(full=True, data=str(published), size=4, device="cpu"))
    assert len(epochs) == 2 and summary["epochs run"] == "2 of 2, 28 training maps each"
    assert summary["test accuracy after 2 epochs (%)"] == pytest.approx(100 * epochs[-1]["test_accuracy"])
    assert summary["test regret"] == pytest.approx(epochs[-1]["test_regret"])
    assert summary["paper's accuracy, I-MLE μ-μ (%)"] == "97.0 ± 0.5"
    assert "s per epoch of 10,000 maps" in " ".join(summary)  # measured on the protocol's maps: no projection
    assert not any("projected from" in q for q in summary)
    _, stopped = _tables(bench.run(full=True, data=str(published), size=4, device="cpu", time_limit=1e-9))
    assert stopped["test accuracy"] == "not reported: 1 of 2 epochs ran"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["layer", "--full"], "argument --full: applies to the warcraft suite only, got suite 'layer'"),
        (["pool", "--epochs", "3"], "argument --epochs: applies to the warcraft suite only"),
        (["warcraft", "--epochs", "0"], "argument --epochs: must be a positive integer, got 0"),
        (["warcraft", "--maps", "-5"], "argument --maps: must be a positive integer"),
        (["warcraft", "--time-limit", "0"], "argument --time-limit: must be a finite number > 0"),
        (["warcraft", "--size", "1"], "argument --size: must be an integer >= 2"),
        (
            ["warcraft", "--compile", "fast"],
            "argument --compile: must be one of 'auto', 'off', 'graph', 'model', 'model+graph', got 'fast'",
        ),
        (["warcraft", "--device", "tpu"], "argument --device: must be cpu, cuda, cuda:N or auto"),
        (
            ["warcraft", "--data", "{data}", "--size", "4", "--full"],
            "train_maps.npy holds 28 maps, 10000 are asked for",
        ),
        (["warcraft", "--data", "{data}", "--size", "5"], "argument --data: "),
    ],
)
def test_bad_options_are_refused_before_any_work(
    argv: list[str],
    message: str,
    published: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the suite ran")

    monkeypatch.setattr(bench, "train_model", boom, raising=False)
    monkeypatch.setattr("imle_solvers.training.train_model", boom)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", *[a.replace("{data}", str(published)) for a in argv]])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_graph_and_cuda_need_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (
            ["--compile", "graph", "--device", "cpu"],
            "argument --compile: graph records the training step as a CUDA graph, but it needs a CUDA device",
        ),
        (["--device", "cuda"], "argument --device: cuda: CUDA is not available"),
    ):
        with pytest.raises(SystemExit):
            cli.main(["bench", "warcraft", *argv])
        assert message in capsys.readouterr().err
    assert BenchConfig(suite="all").suite_options("layer") == {}
    with pytest.raises(ConfigError, match="applies to the warcraft suite only"):
        BenchConfig(suite="graphs", size=12)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(300)
def test_quick_run_on_cuda_records_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    _, summary = _tables(bench.run(quick=True, size=12, device="cuda"))
    assert summary["the steps ran"] == "graph" and summary["settings"].startswith("--compile graph")
    assert "TorchGridShortestPath" in summary["training oracle"]
