"""``imle-solvers train``: methods, a short training run, the CLI's JSON and PNG, the demo."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts, NoNoise
from imle_solvers.app.machine import check_output_dir
from imle_solvers.app.results import atomic_write_json
from imle_solvers.data import shortest_path
from imle_solvers.data.dataset import PTODataset
from imle_solvers.errors import ConfigError
from imle_solvers.oracle import MapOracle
from imle_solvers.training import (
    METHODS,
    TrainConfig,
    TrainPlan,
    build_method,
    evaluate,
    main,
    make_problem,
    run,
    train_model,
)
from imle_solvers.training.methods import MethodOptions, scale_grad
from imle_solvers.training.models import ResNetStemCNN, TerrainCNN, linear_model
from imle_solvers.training.plan import Schedule
from imle_solvers.training.problems import Problem
from tests.support.oracles import EnumOracle
from tests.support.paths import ROOT
from tests.support.training import plan_of, problem_of


def sp_plan(**fields: object) -> TrainPlan:
    """The plan of the shortest-path problem with these settings."""
    return plan_of(problem="shortest-path", **fields)


def linear(train: PTODataset, test: PTODataset, oracle: MapOracle | None = None) -> Problem:
    """``train`` and ``test`` (5 features, 40 arcs) as a problem of the linear model."""
    return Problem(
        train, test, lambda: linear_model(5, 40), oracle or train.oracle, oracle or test.oracle, {}
    )


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``np.testing.assert_allclose`` for tensors (``torch.testing`` costs seconds to import)."""
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1.3e-6, atol=1e-5)


@pytest.fixture(scope="module")
def data() -> tuple:
    return shortest_path(160, deg=2, noise_width=0.5, seed=4).split(96)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_gives_a_finite_gradient(name: str, data: tuple) -> None:
    train, _ = data
    torch.manual_seed(0)
    model = linear_model(5, 40)
    # PG's default width (0.1 of the true costs) leaves the untrained model's 8 decisions unchanged: a
    # true zero; a width of 1 moves them
    method = build_method(name, train.oracle, samples=3, pg_sigma=1.0)
    batch = (train.features[:8], train.costs[:8], train.solutions[:8], train.objectives[:8])
    loss, per = method.loss(model(batch[0]), batch)
    loss.backward()
    assert per.shape == (8,) and torch.isfinite(loss)
    grad = model.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize("seed", [1, 8])
def test_short_training_run_reduces_regret(data: tuple, seed: int) -> None:
    train, test = data
    torch.manual_seed(seed)
    model = linear_model(5, 40)
    before = evaluate(model, test)["regret"]
    plan = sp_plan(epochs=4, batch_size=16, lr=0.05, samples=5)
    out = train_model(plan, linear(train, test), "imle-mumu", seed, model=model)
    assert out.curve[0] == pytest.approx(before)
    assert len(out.curve) == 5 and len(out.epoch_times) == 4 and len(out.train_loss) == 4
    # checked over seeds 0-9: untrained 0.23-0.31, after 4 epochs 0.13-0.18, a ratio of 0.51-0.68
    # (seed 8 is the worst); untrained or with the gradient's sign flipped the ratio is >= 1
    assert out.regret < 0.75 * before


def test_evaluate_matches_losses_regret(data: tuple) -> None:
    from imle_solvers.losses import regret

    _, test = data
    torch.manual_seed(3)
    model = linear_model(5, 40)
    with torch.no_grad():
        expected = regret(test.oracle, model(test.features), test.costs).item()
    assert evaluate(model, test, batch=25)["regret"] == pytest.approx(expected, rel=1e-5)


def test_evaluate_is_zero_for_the_true_costs(data: tuple) -> None:
    _, test = data

    class Oracle(torch.nn.Module):  # "predicts" the true costs of each test instance
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            index = (test.features.unsqueeze(0) == x.unsqueeze(1)).all(-1).float().argmax(1)
            return test.costs[index]

    ev = evaluate(Oracle(), test)
    assert ev["accuracy"] == 1.0 and abs(ev["regret"]) < 1e-6  # float32 objectives: rounding only


def test_scale_grad_and_unknown_method() -> None:
    x = torch.ones(3, requires_grad=True)
    (scale_grad(x, 0.25) * 2).sum().backward()
    close(x.grad, torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="unknown method"):
        build_method("nope", shortest_path(2).oracle)


def test_cli_writes_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "--problem",
            "shortest-path",
            "--method",
            "spo+",
            "two-stage",
            "--epochs",
            "2",
            "--n-train",
            "64",
            "--n-test",
            "64",
            "--seeds",
            "0",
            "1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in result["summary"]] == ["spo+", "two-stage"]
    assert len(result["runs"]) == 4 and len(result["runs"][0]["curve"]) == 3
    # the configuration as used: every default resolved, nothing left null
    config = result["config"]
    assert (config["batch_size"], config["lr"], config["samples"], config["model"]) == (
        32,
        0.01,
        10,
        "linear",
    )
    assert (config["lr_drops"], config["bb_loss"], config["epochs"]) == ([], "regret", 2)
    assert (config["schedule"], config["compile"], config["amp"], config["channels_last"]) == (
        "constant",
        "off",
        "off",
        "off",
    )  # the CPU's rule for "auto"
    assert config["data"] is None  # generated data
    assert all(value is not None for key, value in config.items() if key not in ("data", "dask_address"))
    row = result["summary"][0]
    assert set(row) >= {"regret_mean", "regret_std", "accuracy_mean", "accuracy_std", "epoch_time_mean"}
    regrets = [r["regret"] for r in result["runs"] if r["method"] == "spo+"]
    assert row["regret_mean"] == pytest.approx(float(np.mean(regrets)))
    assert row["regret_std"] == pytest.approx(float(np.std(regrets, ddof=1)))  # sample std over seeds
    assert (out / "results.md").read_text().count("±") >= 4
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    printed = capsys.readouterr().out
    assert "| method" in printed and "spo+" in printed


def test_cli_rejects_unknown_method() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--method", "magic"])
    assert exc.value.code == 2


def test_clamped_costs_and_terrain_model() -> None:
    from imle_solvers import GridShortestPath, NegativeCycleError

    grid = GridShortestPath(3, 3)
    w = np.full((1, 9), -1.0)
    with pytest.raises(NegativeCycleError):
        grid.solve_batch(w)
    z = ClampedCosts(grid).solve_batch(w)  # clamped to 0: a valid path
    assert z[0, 0] == 1 and z[0, 8] == 1
    with pytest.raises(ValueError, match="min"):
        ClampedCosts(EnumOracle(np.eye(3), "max"))
    net = TerrainCNN(size=4, pixels=4)
    costs = net(torch.rand(2, 3, 16, 16))
    assert costs.shape == (2, 16) and torch.all(costs > 0)


def test_demo_command_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from imle_solvers import cli

    assert cli.main(["demo", "--epochs", "1", "--n-train", "200", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| method" in out and "test regret" in out
    for name in ("imle-mumu", "spo+", "two-stage"):
        assert name in out


# --- the command: options checked at parse time, output kept run by run --------------------------------


TINY = ["--problem", "shortest-path", "--n-train", "32", "--n-test", "16", "--quiet"]


def _no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command gets as far as training."""
    import imle_solvers.training.command as command
    import imle_solvers.training.runner as runner

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("training started before the options were checked")

    monkeypatch.setattr(command, "run", boom)
    monkeypatch.setattr(runner, "train_model", boom)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], "--epochs: must be a positive integer, got 0"),
        (["--epochs", "-1"], "--epochs: must be a positive integer, got -1"),
        (["--epochs", "1.5"], "--epochs: must be an integer"),
        (["--epochs", "inf"], "--epochs: must be an integer, got inf"),
        (["--batch-size", "0"], "--batch-size: must be a positive integer"),
        (["--lr", "0"], "--lr: must be a finite number > 0"),
        (["--lr", "-1"], "--lr: must be a finite number > 0"),
        (["--lr", "nan"], "--lr: must be a finite number > 0"),
        (["--lr", "fast"], "--lr: not a number"),
        (["--samples", "0"], "--samples: must be a positive integer"),
        (["--n-train", "0"], "--n-train: must be a positive integer"),
        (["--n-test", "0"], "--n-test: must be a positive integer"),
        (["--tau", "0"], "--tau: must be a finite number > 0"),
        (["--lam", "-2"], "--lam: must be a finite number > 0"),
        (["--threads", "0"], "--threads: must be a positive integer"),
        (["--workers", "-1"], "--workers: must be a non-negative integer"),
        (["--deg", "0"], "--deg: must be a positive integer"),
        (["--noise-width", "1"], "--noise-width: must be in [0, 1)"),
        (["--size", "1"], "--size: must be an integer >= 2"),
        (["--seeds", "-3"], "--seeds/--seed: must be an integer in [0, 2**32)"),
        (["--seeds", "4294967296"], "--seeds/--seed: must be an integer in [0, 2**32), got 4294967296"),
        (["--seed", "1", "1"], "--seeds/--seed: must be non-empty and without repeats, got [1, 1]"),
        (["--method", "spo+", "spo+"], "--methods/--method: must be non-empty and without repeats"),
        (["--method", "magic"], "--methods/--method: must be one of 'imle', 'imle-large-step', 'imle-pid'"),
        (["--methods", "all", "spo+"], "--methods/--method: must be 'all' alone or method names"),
        (["--lr-drops", "0"], "--lr-drops: must be a positive integer"),
        (["--device", "gpu"], "--device: must be cpu, cuda, cuda:N or auto"),
        (["--model", "resnet-stem"], "model 'resnet-stem' does not fit problem 'shortest-path'"),
        (["--problem", "terrain", "--model", "linear"], "model 'linear' does not fit problem 'terrain'"),
    ],
)
def test_every_bad_option_is_an_argparse_error(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_training(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main([*TINY, *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_seeds_span_the_32_bit_range() -> None:
    assert TrainConfig(seeds=(0, 2**32 - 1)).seeds == (0, 4294967295)  # what numpy's seeds take


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_is_a_parse_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_training(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main([*TINY, "--device", "cuda"])
    assert exc.value.code == 2 and "CUDA is not available" in capsys.readouterr().err


def test_out_is_checked_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_training(monkeypatch)
    a_file = tmp_path / "results.json"
    a_file.write_text("{}")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    unwritable = locked / "out"
    if os.access(locked, os.W_OK):  # root writes anywhere: take a place the kernel refuses
        unwritable = Path("/proc/imle-solvers-test/out")
    cases = [(a_file, "is a file"), (a_file / "sub", "lies below the file"), (unwritable, "cannot write to")]
    for out, message in cases:
        with pytest.raises(SystemExit) as exc:
            main([*TINY, "--out", str(out)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "error: argument --out:" in err and message in err and str(out) in err
    assert check_output_dir(tmp_path / "new" / "deep") == tmp_path / "new" / "deep"  # created


def test_config_checks_the_python_api_too() -> None:
    with pytest.raises(ConfigError, match="epochs must be a positive integer, got 0"):
        TrainConfig(epochs=0)
    with pytest.raises(ConfigError, match="problem must be one of"):
        TrainConfig(problem="portfolio")  # PyEPO has it; we do not (yet)
    with pytest.raises(ConfigError, match=r"lr_drops must be a positive integer, got -1"):
        TrainConfig(lr_drops=(30, -1))
    with pytest.raises(ConfigError, match=r"epochs must be an integer, got '3'"):
        TrainConfig(epochs="3")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"show_progress must be True or False, got 0"):
        TrainConfig(show_progress=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TrainConfig("shortest-path")  # type: ignore[misc]   # keyword-only
    config = TrainConfig(methods=["spo+"], seeds=[3], epochs=2.0)  # type: ignore[arg-type]
    assert config.methods == ("spo+",) and config.seeds == (3,) and config.epochs == 2
    assert TrainConfig(methods=("all",)).methods == tuple(METHODS)
    assert isinstance(ConfigError("x"), ValueError)  # callers that caught ValueError still do
    from_argv = TrainConfig.from_argv(["--method", "dbb", "--tau", "2", "--lam", "5", "--seed", "4", "7"])
    assert (from_argv.tau, from_argv.lam, from_argv.methods, from_argv.seeds) == (2.0, 5.0, ("dbb",), (4, 7))
    aliases = TrainConfig.from_argv(["--methods", "dbb", "--seeds", "4", "7", "--no-progress"])
    assert aliases == TrainConfig.from_argv(["--method", "dbb", "--seed", "4", "7", "--quiet"])
    assert not aliases.show_progress and TrainConfig.from_argv(["--no-cache"]).cache is False


def test_schedules_and_defaults_resolve_without_substitution() -> None:
    paper = plan_of(problem="terrain", schedule="paper")
    assert paper.schedule == Schedule(name="paper", epochs=50, batch_size=70, lr=5e-4, lr_drops=(30, 40))
    assert (paper.data.n_train, paper.model, paper.options.samples, paper.options.bb_loss) == (
        10_000,
        "terrain-cnn",
        1,
        "hamming",
    )
    mine = plan_of(problem="terrain", schedule="paper", epochs=3, lr=1e-3, lr_drops=(1,), model="resnet-stem")
    assert mine.schedule == Schedule(name="paper", epochs=3, batch_size=70, lr=1e-3, lr_drops=(1,))
    assert mine.model == "resnet-stem"
    sp = plan_of()
    assert sp.schedule == Schedule(name="constant", epochs=10, batch_size=32, lr=1e-2, lr_drops=())
    assert (sp.data.n_train, sp.data.n_test, sp.options.samples, sp.model, sp.options.bb_loss) == (
        1000,
        1000,
        10,
        "linear",
        "regret",
    )
    assert plan_of(lr_drops=()).schedule.lr_drops == ()  # explicit: no drops
    config = TrainConfig()
    assert config.plan() is config.plan()  # resolved once
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    from imle_solvers.app.machine import resolve_device

    assert str(resolve_device("auto")) == auto


def test_run_on_a_device_drops_the_lr_and_reports_each_run(data: tuple) -> None:
    seen: list[str] = []
    results = run(
        TrainConfig(
            methods=("imle-mumu", "two-stage"),
            epochs=2,
            lr_drops=(1,),
            n_train=32,
            n_test=16,
            samples=2,
            device="cpu",
            show_progress=False,
        ),
        on_result=lambda r: seen.append(r.method),
    )
    assert seen == ["imle-mumu", "two-stage"] == [r.method for r in results]
    for r in results:
        assert r.device == "cpu" and r.lr == pytest.approx([1e-2, 1e-3]) and len(r.curve) == 3
        assert "DAGShortestPath" in r.oracle  # a TorchOracle: solved where the weights are
    assert results[0].settings["samples"] == 2 and "OptimalTarget" in results[0].settings["target"]


def test_train_model_moves_model_data_and_layers_to_the_device(data: tuple) -> None:
    train, test = data
    torch.manual_seed(0)
    model = linear_model(5, 40)
    plan = sp_plan(epochs=1, batch_size=32, samples=2, device="cpu")
    out = train_model(plan, linear(train.to("cpu"), test), "aimle", 0, model=model)
    assert out.epoch_times[0] > 0 and np.isfinite(out.regret)
    assert train.to("cpu") is train  # already there: no copy


def _stand_in_torch_grid() -> type:
    """A TorchOracle with TorchGridShortestPath's signature (SciPy inside), for the device-native path."""
    from imle_solvers import GridShortestPath, TorchOracle

    class StandIn(TorchOracle):
        sense = "min"

        def __init__(self, height: int, width: int, neighbourhood: int = 8) -> None:
            self.host = GridShortestPath(height, width)
            self.n_vars, self.expected_nonzeros = height * width, self.host.expected_nonzeros
            self.calls = 0

        def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            assert float(weights.min()) >= 0  # clamped before it
            flat = weights.reshape(-1, self.n_vars).detach().cpu().double().numpy()
            return torch.from_numpy(self.host.solve_batch(flat)).to(weights).reshape(weights.shape)

    return StandIn


def test_terrain_picks_the_device_native_oracle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import imle_solvers.adapters as adapters
    from imle_solvers import TorchOracle

    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    monkeypatch.setattr(adapters, "TorchGridShortestPath", _stand_in_torch_grid(), raising=False)
    plan = plan_of(
        problem="terrain",
        n_train=12,
        n_test=6,
        size=4,
        model="resnet-stem",
        oracle="device",
        epochs=1,
        batch_size=6,
        lr=1e-3,
        samples=1,
    )
    prob = make_problem(plan, 0)
    assert isinstance(prob.train_oracle, TorchOracle) and isinstance(prob.eval_oracle, TorchOracle)
    assert prob.train.features.dtype == torch.uint8
    torch.manual_seed(0)
    out = train_model(plan, prob, "imle-mumu", 0)
    assert prob.train_oracle.oracle is prob.eval_oracle  # type: ignore[attr-defined]
    assert prob.eval_oracle.calls == 2 + 2 * 2  # type: ignore[attr-defined]   # 2 evaluations, 2 batches × 2
    assert np.isfinite(out.regret)
    host = problem_of("terrain", 12, 6, 0, size=4, oracle="auto", device="cpu", batch_size=6)  # CPU: host
    assert "GridShortestPath" in repr(host.eval_oracle) and not isinstance(host.eval_oracle, TorchOracle)


def test_missing_device_native_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.training.problems as problems

    monkeypatch.setattr(problems, "_torch_grid", lambda size: None)  # as on a branch without it
    with pytest.raises(ValueError, match="no device-native oracle"):
        problem_of("terrain", 4, 2, 0, size=3, oracle="device", batch_size=2)
    prob = problem_of("terrain", 4, 2, 0, size=3, oracle="host", batch_size=2)  # the host one is there
    assert "ClampedCosts(GridShortestPath" in repr(prob.train_oracle)


def test_knapsack_uses_the_device_native_oracle_unless_the_host_is_asked_for() -> None:
    from imle_solvers import TorchOracle
    from imle_solvers.adapters import TorchKnapsack

    for choice in ("device", "auto"):
        prob = problem_of("knapsack", 4, 2, 0, oracle=choice, batch_size=2)
        assert isinstance(prob.train_oracle, TorchKnapsack) and prob.eval_oracle is prob.train_oracle
        assert prob.train_oracle.expected_nonzeros == prob.train.oracle.expected_nonzeros  # κ carried over
    pytest.importorskip("ortools")
    host = problem_of("knapsack", 4, 2, 0, oracle="host", batch_size=2)
    assert not isinstance(host.train_oracle, TorchOracle)
    # equally good decisions either way (integer values tie often: compare objectives)
    native = problem_of("knapsack", 4, 2, 0, oracle="device", batch_size=2)
    values = native.train.costs.double().numpy()
    np.testing.assert_allclose(
        (native.train_oracle.solve_batch(values) * values).sum(1),
        (host.train_oracle.solve_batch(values) * values).sum(1),
    )


def test_resnet_stem_is_the_first_resnet18_block() -> None:
    torch.manual_seed(0)
    net = ResNetStemCNN(size=12).eval()
    conv = net.stem[0]
    assert (conv.kernel_size, conv.stride, conv.out_channels) == ((7, 7), (2, 2), 64)
    assert len(net.stage) == 2 and isinstance(net.stem[3], torch.nn.MaxPool2d)
    images = torch.randint(0, 256, (2, 3, 96, 96), dtype=torch.uint8)
    costs = net(images)
    assert costs.shape == (2, 144) and torch.all(costs > 0)
    close(costs, net(images.float() / 255))  # bytes are read as /255
    small = TerrainCNN(size=12).eval()
    close(small(images), small(images.float() / 255))


def test_results_are_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.app.results as results

    target = tmp_path / "results.json"
    atomic_write_json(target, {"good": 1})

    def interrupted(fd: int) -> None:  # the new text is written, the rename has not happened
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_json(target, {"good": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"good": 1}  # the previous file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left
    # two writers into one folder at once: each uses its own temporary name
    names = []
    with results.atomic_path(target) as first, results.atomic_path(target) as second:
        names += [first.name, second.name]
        first.write_text('{"a": 1}')
        second.write_text('{"b": 2}')
    assert names[0] != names[1] and json.loads(target.read_text()) == {"a": 1}


def test_interrupt_keeps_the_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import imle_solvers.training.runner as runner

    real, calls = runner.train_model, []

    def second_run_interrupted(*args: object, **kwargs: object) -> dict:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "train_model", second_run_interrupted)
    out = tmp_path / "run"
    code = main([*TINY, "--method", "two-stage", "spo+", "--epochs", "1", "--out", str(out)])
    assert code == 130
    assert [p.name for p in (out / "runs").iterdir()] == ["two-stage-seed0.json"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False and [r["method"] for r in saved["runs"]] == ["two-stage"]
    assert saved["config"]["methods"] == ["two-stage", "spo+"]
    captured = capsys.readouterr()
    assert f"1 finished run(s) kept in {out / 'runs'}" in captured.err and "| two-stage" in captured.out
    assert "Interrupted" in (out / "results.md").read_text()
    calls.clear()
    code = main([*TINY, "--method", "two-stage", "spo+", "--epochs", "1"])  # no --out: printed only
    assert code == 130 and "1 finished run(s), printed above" in capsys.readouterr().err


def test_a_full_disk_prints_the_finished_runs_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    import imle_solvers.app.results as results

    real, calls = results.ResultWriter.add, []

    def disk_full(self: results.ResultWriter, record: object) -> Path:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, record)  # type: ignore[arg-type]

    monkeypatch.setattr(results.ResultWriter, "add", disk_full)
    out = tmp_path / "run"
    code = main([*TINY, "--method", "two-stage", "spo+", "--epochs", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert "| two-stage" in captured.out and "| spo+" in captured.out  # both runs' metrics, printed
    lines = captured.err.strip().splitlines()
    assert lines == [
        f"imle-solvers train: error: cannot write the results to {str(out)!r}: No space left on device"
    ]
    assert [p.name for p in (out / "runs").iterdir()] == ["two-stage-seed0.json"]


@pytest.mark.slow  # a fresh interpreter imports torch: seconds; the in-process test above covers the logic
@pytest.mark.timeout(200)  # its own deadlines: 120 s for the first run, 60 s to stop
def test_ctrl_c_in_a_child_process_keeps_the_finished_runs(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    seeds = [str(s) for s in range(400)]
    cmd = [
        sys.executable,
        "-m",
        "imle_solvers.cli",
        "train",
        *TINY,
        "--method",
        "two-stage",
        "--epochs",
        "5",
        "--seeds",
        *seeds,
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (out / "runs").exists() or not any((out / "runs").glob("*.json")):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "no run finished in 120 s"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    kept = sorted(p.name for p in (out / "runs").glob("*.json"))
    assert 1 <= len(kept) < 400
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False and len(saved["runs"]) >= len(kept)
    assert f"kept in {out / 'runs'}" in err


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_short_terrain_run_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "cache"))
    for model in ("terrain-cnn", "resnet-stem"):
        results = run(
            TrainConfig(
                problem="terrain",
                size=12,
                model=model,
                methods=("imle-mumu", "dbb"),
                n_train=70,
                n_test=35,
                epochs=2,
                device="cuda",
                show_progress=False,
            )
        )
        for r in results:
            assert r.device.startswith("cuda") and np.isfinite(r.regret) and len(r.curve) == 3
    prob = problem_of("terrain", 8, 4, 0, size=12, device="cuda", oracle="auto", batch_size=4)
    print("terrain oracle on cuda:", prob.train_oracle)


def test_run_from_python_does_what_the_command_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads_seen: list[int] = []
    out = tmp_path / "api"
    config = TrainConfig(
        methods=("two-stage",), epochs=1, n_train=32, n_test=16, threads=3, out=str(out), show_progress=False
    )
    torch.set_num_threads(1)
    results = run(config, on_result=lambda r: threads_seen.append(torch.get_num_threads()))
    assert threads_seen == [3] and torch.get_num_threads() == 1  # applied during the run, restored after
    assert [p.name for p in (out / "runs").iterdir()] == ["two-stage-seed0.json"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is True and saved["runs"][0]["regret"] == pytest.approx(results[0].regret)
    options = f"--methods two-stage --epochs 1 --n-train 32 --n-test 16 --threads 3 --out {out} --quiet"
    assert saved["command"] == f"imle-solvers train {options}"
    assert TrainConfig.from_argv(saved["command"].split()[2:]) == config  # the command reproduces the config
    a_file = tmp_path / "file"
    a_file.write_text("x")

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("training started")

    import imle_solvers.training.runner as runner

    monkeypatch.setattr(runner, "make_problem", boom)
    with pytest.raises(ConfigError, match=r"out '.*file' is a file: it must name a folder") as err:
        run(config.replace(out=str(a_file)))
    assert err.value.field == "out"
    assert torch.get_num_threads() == 1
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            run(config.replace(device="cuda", out=None))


def test_method_options_reach_the_methods(data: tuple) -> None:
    train, _ = data
    pid = build_method("imle-pid", train.oracle, lam=3.0, samples=2)
    assert pid.settings["lam"] == 3.0 and pid.settings["samples"] == 2
    assert pid.modules[0].target.lam == 3.0 and pid.modules[0].samples == 2
    bb = build_method("dbb", train.oracle, bb_lam=7.0, bb_loss="hamming")
    assert bb.settings == {"bb_lam": 7.0, "bb_loss": "hamming"} and bb.modules[0].lam == 7.0
    dpo = build_method("dpo", train.oracle, samples=4, dpo_samples=3, sigma=0.5)
    assert dpo.settings == {"sigma": 0.5, "samples": 3} and dpo.modules[0].samples == 3
    assert dpo.modules[0].sigma == 0.5
    pfyl = build_method("pfyl", train.oracle, samples=4, dpo_samples=3, sigma=0.5)
    assert pfyl.modules[0].samples == 3 and pfyl.modules[0].noise.sigma == 0.5
    with pytest.raises(TypeError):
        build_method("imle", train.oracle, lamda=3.0)
    with pytest.raises(ValueError, match="bb_loss must be one of"):
        MethodOptions(bb_loss="l1")
    assert MethodOptions() == MethodOptions(samples=10, lam=10.0, bb_lam=20.0, bb_loss="regret", sigma=1.0)
    for name in METHODS:
        assert METHODS.help(name) and "\n" not in METHODS.help(name)
    # each factory is named after what it builds, and none shadows the library's `imle`
    from imle_solvers.training import methods

    assert METHODS["imle"] is methods.imle_default and not hasattr(methods, "imle")
    assert METHODS["imle-large-step"] is methods.imle_large_step


def test_layer_methods_average_their_gradient_over_instances_and_samples(data: tuple) -> None:
    # the loss is summed over B instances and S samples and the weights' gradient scaled by 1/(B·S): with
    # no noise the S samples are one state S times, so any S gives the one-sample gradient
    train, _ = data
    batch = (train.features[:8], train.costs[:8], train.solutions[:8], train.objectives[:8])
    torch.manual_seed(0)
    model = linear_model(5, 40)
    grads = []
    for samples in (1, 3):
        model.zero_grad()
        method = build_method("imle-mumu", train.oracle, samples=samples, noise=NoNoise())
        method.loss(model(batch[0]), batch)[0].backward()
        grads.append(model.weight.grad.clone())
    assert grads[0].abs().sum() > 0
    close(grads[1], grads[0])


def test_dbb_reports_the_loss_it_was_built_with(data: tuple) -> None:
    train, _ = data
    x, c, z_star, f_star = train.features[:6], train.costs[:6], train.solutions[:6], train.objectives[:6]
    c_hat = c.flip(-1)  # other costs, other decisions
    decided = torch.from_numpy(train.oracle.solve_batch(c_hat.double().numpy())).float()  # MAP(ĉ), no noise
    hamming = build_method("dbb", train.oracle, bb_loss="hamming")
    _, per = hamming.loss(c_hat, (x, c, z_star, f_star))
    close(per, (decided - z_star).abs().sum(-1))  # Σ_i |z_i − z*_i|: the number of arcs that differ
    regret = build_method("dbb", train.oracle)  # bb_loss="regret": ⟨c, z⟩, minimised
    _, per = regret.loss(c_hat, (x, c, z_star, f_star))
    close(per, (c * decided).sum(-1))


def test_the_decision_loss_follows_the_oracles_sense() -> None:
    from imle_solvers.training.methods import decision_loss

    z = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    c = torch.tensor([[2.0, 5.0, 3.0], [1.0, 4.0, 2.0]])
    assert decision_loss(z, c, EnumOracle(np.eye(3), "min")).tolist() == [5.0, 4.0]  # ⟨c, z⟩: costs
    assert decision_loss(z, c, EnumOracle(np.eye(3), "max")).tolist() == [-5.0, -4.0]  # −⟨v, z⟩: values
    samples = z.unsqueeze(1).expand(2, 3, 3)  # (B, S, m) against (B, m) costs
    assert decision_loss(samples, c, EnumOracle(np.eye(3), "min")).tolist() == [[5.0] * 3, [4.0] * 3]


def test_spo_plus_uses_the_data_sets_optimal_states(data: tuple) -> None:
    # z* comes with the batch: one solve per step (of 2ĉ − c), not two
    train, _ = data
    oracle = EnumOracle(np.unique(train.solutions.numpy(), axis=0), "min")
    batch = (train.features[:8], train.costs[:8], train.solutions[:8], train.objectives[:8])
    method = build_method("spo+", oracle)
    method.loss(linear_model(5, 40)(batch[0]), batch)[0].backward()
    assert oracle.batch_calls == [8]


def test_the_documented_defaults_of_train_are_pinned() -> None:
    # what `imle-solvers train --help`, docs/predict-then-optimize.md and the papers' protocols state: a
    # change must be a decision, made here too
    from imle_solvers.training.problems import DEFAULTS, SCHEDULE_DEFAULTS

    config = TrainConfig()
    pinned = {
        "problem": "shortest-path",
        "methods": ("imle-mumu", "spo+", "two-stage"),
        "seeds": (0,),
        "deg": 1,
    }
    pinned |= {"noise_width": 0.5, "size": 12, "noise": "sog", "tau": 1.0, "lam": 10.0, "workers": 0}
    pinned |= {"threads": 1, "device": "cpu", "oracle": "auto", "compile": "auto", "amp": "auto"}
    pinned |= {"channels_last": "auto", "cache": True, "show_progress": True, "dist_timeout": 300.0}
    pinned |= {"nodes": 20, "solve_ratio": 1.0}  # PyEPO's TSP size; every training row solved
    assert {name: getattr(config, name) for name in pinned} == pinned
    per_problem = (
        "epochs",
        "batch_size",
        "lr",
        "schedule",
        "n_train",
        "n_test",
        "samples",
        "model",
        "bb_loss",
    )
    assert all(getattr(config, name) is None for name in per_problem)  # the problem's, below
    pyepo = {"lr": 0.01, "batch_size": 32, "epochs": 10, "samples": 10, "n_train": 1000, "n_test": 1000}
    pyepo |= {"model": "linear", "bb_loss": "regret", "eval_batch": 1000, "dpo_samples": None}
    pyepo |= {"native_on_cpu": True}  # their device-native oracles are their fastest on the CPU too
    images = {"lr": 5e-4, "epochs": 10, "samples": 1, "n_train": 10_000, "n_test": 1000, "eval_batch": 250}
    images |= {"bb_loss": "hamming", "dpo_samples": 10}
    assert DEFAULTS == {
        "shortest-path": pyepo | {"host_oracle": False},  # DAGShortestPath on every setting: no pool
        "knapsack": pyepo,
        "tsp": pyepo | {"native_on_cpu": False, "native_oracle": False},  # no device-native TSP oracle
        "terrain": images | {"batch_size": 35, "model": "terrain-cnn"},  # the blackbox paper's 12 × 12 runs
        "warcraft": images | {"batch_size": 70, "epochs": 50, "model": "resnet-stem"},  # the I-MLE paper's
    }
    assert SCHEDULE_DEFAULTS == {"warcraft": "paper"}


@pytest.mark.parametrize(
    ("device", "oracle", "native"),
    [
        ("cpu", "auto", False),
        ("cuda", "auto", True),
        ("cuda:1", "auto", True),
        ("cpu", "device", True),
        ("cuda", "host", False),
        ("cpu", "host", False),
    ],
)
def test_device_native_oracles_are_asked_for_off_the_cpu_or_by_name(
    device: str, oracle: str, native: bool
) -> None:
    from imle_solvers.training.problems import ProblemSpec

    spec = ProblemSpec(n_train=1, n_test=1, seed=0, device=torch.device(device), oracle=oracle)
    assert spec.native is native  # a ProblemSpec builds nothing: no CUDA needed to ask


def test_problem_factories_refuse_a_model_of_another_problem() -> None:
    # the configuration refuses it (as the command line does), and the factories themselves
    from imle_solvers.training.problems import PROBLEMS, ProblemSpec

    for name in ("shortest-path", "knapsack"):
        with pytest.raises(ConfigError, match=f"model 'terrain-cnn' does not fit problem {name!r}"):
            TrainConfig(problem=name, model="terrain-cnn")
        with pytest.raises(ValueError, match=f"problem {name!r} uses the linear model"):
            PROBLEMS[name](ProblemSpec(n_train=4, n_test=4, seed=0, model="terrain-cnn"))


def test_warcraft_paths_set_the_noise_kappa_of_every_oracle() -> None:
    # SumOfGamma's κ is the mean number of cells of a training path (the I-MLE paper's sec. 6), on the
    # training layers' clamped oracle and on evaluation's (generated maps here)
    from imle_solvers.adapters.graphs import GridShortestPath

    problem = problem_of("warcraft", 12, 4, 0, size=6, batch_size=4)
    kappa = float(problem.train.solutions.sum(-1).mean())
    assert kappa != GridShortestPath(6, 6).expected_nonzeros  # not the oracle's own guess
    assert problem.train_oracle.expected_nonzeros == pytest.approx(kappa)
    assert problem.eval_oracle.expected_nonzeros == pytest.approx(kappa)


class _Fixed(torch.nn.Module):
    """A model that predicts the same weights for every instance."""

    def __init__(self, weights: list[float]) -> None:
        super().__init__()
        self.weights = torch.nn.Parameter(torch.tensor(weights))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights.expand(len(x), -1)


def test_evaluation_counts_only_optimal_objectives_and_keeps_the_regrets_sign() -> None:
    from imle_solvers.data.dataset import PTODataset

    oracle = EnumOracle(np.eye(2), "min")  # two states, costs
    x = torch.zeros(4, 1)
    costs = torch.tensor([[1.0, 1.001]] * 4, dtype=torch.float64)  # state 1 is 0.1 % worse than state 0
    labelled = PTODataset(x, costs, oracle)  # z* = state 0, f* = 1
    model = _Fixed([2.0, 1.0])  # decides state 1 everywhere
    model.train()
    result = evaluate(model, labelled)
    assert result["accuracy"] == 0.0  # 0.1 % off the optimum is not optimal (|Δ| ≤ 1e-5·|f*| + 1e-6)
    assert result["regret"] == pytest.approx(0.001, rel=1e-6)  # Σ(⟨c, ẑ⟩ − f*) / Σ|f*|
    assert model.training  # evaluation runs in eval mode and gives the model back as it found it
    model.eval()
    evaluate(model, labelled)
    assert not model.training
    # labels worse than the decisions (state 1 labelled): a negative regret, not its magnitude
    worse_labels = PTODataset(x, costs, oracle, solutions=torch.tensor([[0.0, 1.0]] * 4))
    better = evaluate(_Fixed([1.0, 2.0]), worse_labels)
    assert better["regret"] == pytest.approx(-0.001 / 1.001, rel=1e-6) and better["accuracy"] == 0.0


def test_a_time_limit_stops_after_the_epoch_that_passes_it_in_total(
    monkeypatch: pytest.MonkeyPatch, data: tuple
) -> None:
    from imle_solvers.training import loop

    clock = [0.0]  # every epoch takes exactly one second of this clock; evaluation none
    real_epoch = loop._train_epoch

    def epoch(*args: object, **kwargs: object) -> None:
        real_epoch(*args, **kwargs)  # type: ignore[arg-type]
        clock[0] += 1.0

    monkeypatch.setattr(loop, "_train_epoch", epoch)
    monkeypatch.setattr(loop.time, "perf_counter", lambda: clock[0])
    train, test = data
    plan = sp_plan(epochs=6, batch_size=48)
    out = train_model(plan, linear(train, test), "two-stage", 0, time_limit=2.5)
    assert out.epoch_times == [1.0, 1.0, 1.0] and len(out.curve) == 4  # 1 + 1 + 1 ≥ 2.5 s


def test_the_training_loss_is_the_epochs_mean_over_instances(data: tuple) -> None:
    train, test = data
    torch.manual_seed(0)
    model = linear_model(5, 40)
    before = [p.detach().clone() for p in model.parameters()]
    # a learning rate of 1e-12 leaves the model as it was: the epoch's loss is that of the initial model
    out = train_model(
        sp_plan(epochs=1, batch_size=32, lr=1e-12), linear(train, test), "two-stage", 0, model=model
    )
    assert all(torch.allclose(a, b) for a, b in zip(before, model.parameters()))
    batch = (train.features, train.costs, train.solutions, train.objectives)
    with torch.no_grad():
        _, per = build_method("two-stage", train.oracle).loss(model(train.features), batch)
    assert out.train_loss[0] == pytest.approx(float(per.mean()), rel=1e-4)


def test_the_seed_fixes_the_noise_and_the_batch_order(data: tuple) -> None:
    train, test = data
    torch.manual_seed(0)
    initial = linear_model(5, 40).state_dict()

    def trained(method: str, seed: int, global_seed: int) -> list[float]:
        model = linear_model(5, 40)
        model.load_state_dict(initial)
        torch.manual_seed(global_seed)  # what ran before must not matter
        plan = sp_plan(epochs=1, batch_size=16, samples=2)
        return train_model(plan, linear(train, test), method, seed, model=model).train_loss

    assert trained("imle-mumu", 3, 0) == trained("imle-mumu", 3, 99)  # the noise follows `seed` only
    assert trained("two-stage", 3, 0) != trained("two-stage", 4, 0)  # no noise: the batch order differs


def test_the_pool_reaches_the_methods_layers(data: tuple) -> None:
    train, test = data
    oracle = EnumOracle(np.unique(train.solutions.numpy(), axis=0), "min")

    class Counting:
        def __init__(self) -> None:
            self.calls: list[int] = []

        def solve_batch(self, oracle: EnumOracle, weights: np.ndarray) -> np.ndarray:
            self.calls.append(len(weights))
            return oracle.solve_batch(weights)

    pool = Counting()
    train_model(sp_plan(epochs=1, batch_size=48), linear(train, test, oracle), "imle-mumu", 0, pool=pool)
    assert len(pool.calls) > 2  # two evaluations and the layers' solves
    assert pool.calls == oracle.batch_calls  # every solve, training and evaluation, went through the pool


@pytest.mark.parametrize("noise", ["sog", "gumbel"])
def test_run_hands_every_setting_to_training(noise: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers import Gumbel, SumOfGamma
    from imle_solvers.training import runner
    from imle_solvers.training.problems import DEFAULTS

    monkeypatch.setitem(
        DEFAULTS, "shortest-path", DEFAULTS["shortest-path"] | {"dpo_samples": 3, "eval_batch": 7}
    )
    seen: list[dict] = []
    real = runner.train_model

    def recording(plan: object, *args: object, **kwargs: object) -> object:
        seen.append(plan)
        return real(plan, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "train_model", recording)
    config = TrainConfig(methods=("dpo",), epochs=2, lr_drops=(1,), n_train=16, n_test=8, samples=2, tau=2.5)
    run(config.replace(lam=3.0, noise=noise, batch_size=8, lr=0.05, show_progress=False))
    (plan,) = seen
    options = plan.options  # type: ignore[attr-defined]
    assert isinstance(options.noise, SumOfGamma if noise == "sog" else Gumbel) and options.noise.tau == 2.5
    assert (options.samples, options.lam, options.dpo_samples) == (2, 3.0, 3)
    schedule = plan.schedule  # type: ignore[attr-defined]
    assert (schedule.epochs, schedule.batch_size, schedule.lr, schedule.lr_drops) == (2, 8, 0.05, (1,))
    assert plan.eval_batch == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--problem", "tsp", "--oracle", "device"],
            "argument --oracle: problem 'tsp' has no device-native oracle",
        ),
        (
            ["--problem", "tsp", "--size", "30"],
            "argument --size: needs --problem terrain or --problem warcraft",
        ),
        (["--problem", "knapsack", "--size", "16"], "argument --size: needs --problem terrain"),
        (["--problem", "terrain", "--deg", "4"], "argument --deg: needs --problem shortest-path or"),
        (["--problem", "warcraft", "--noise-width", "0.1"], "argument --noise-width: needs --problem"),
        (["--channels-last", "on"], "argument --channels-last: applies to the CNN models"),
        (["--workers", "2"], "argument --workers: problem 'shortest-path' solves on torch"),
        (
            ["--problem", "knapsack", "--oracle", "device", "--workers", "2"],
            "argument --workers: a solver pool",
        ),
        (
            ["--problem", "terrain", "--oracle", "device", "--dask-address", "tcp://127.0.0.1:8786"],
            "argument --dask-address: a solver pool solves the host oracles",
        ),
    ],
)
def test_a_setting_the_run_would_not_use_is_a_usage_error_before_any_work(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from imle_solvers import cli

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", *argv, "--out", str(out)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and said in err[0] and err[1].startswith("Try 'imle-solvers train --help'")
    assert not out.exists()  # refused before --out is made


def test_a_pool_makes_auto_pick_the_host_oracles_that_it_solves() -> None:
    assert plan_of(problem="knapsack").oracle == "device"  # TorchKnapsack on the CPU
    assert plan_of(problem="knapsack", workers=2).oracle == "host"  # the pool's CP-SAT
    assert plan_of(problem="knapsack", oracle="host", workers=2).oracle == "host"
    assert plan_of(problem="terrain", channels_last="off").oracle == "host"  # accepted: off applies anywhere
