from __future__ import annotations

import re
from pathlib import Path

import pytest

from imle_solvers import __version__, cli
from imle_solvers.benchmarks import SUITES
from imle_solvers.benchmarks import build_parser as bench_parser
from imle_solvers.errors import MissingExtraError
from imle_solvers.experiments import pto_demo
from imle_solvers.report import format_table, write_outputs

# reST/Markdown/Sphinx markup that must not reach a terminal
MARKUP = re.compile(r"\*\*|``|:(?:class|meth|func|data|attr|mod|exc):|\]\[|::\s*$|^\s*\.\. ", re.M)

TOP_HELP = f"""\
usage: imle-solvers [-h] [-V] COMMAND ...

Differentiable combinatorial solvers for PyTorch (Implicit MLE).

Run 'imle-solvers COMMAND --help' for the options of a command.

options:
  -h, --help     show this help message and exit
  -V, --version  show the version and exit

commands:
  COMMAND
    demo         {cli.COMMANDS["demo"][1]}
    toy          {cli.COMMANDS["toy"][1]}
    vae          {cli.COMMANDS["vae"][1]}
    l2x          {cli.COMMANDS["l2x"][1]}
    train        {cli.COMMANDS["train"][1]}
    bench        {cli.COMMANDS["bench"][1]}

examples:
  imle-solvers demo                       # a first run: writes runs/demo/curves.png
  imle-solvers train --method all --deg 4
  imle-solvers bench backends --quick
"""


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # argparse wraps help to the terminal width


def test_top_level_help_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out == TOP_HELP
    assert not MARKUP.search(out)


def test_command_summaries_are_one_line() -> None:
    for _, summary in cli.COMMANDS.values():
        assert "\n" not in summary and len(summary) <= 80 and not MARKUP.search(summary)


@pytest.mark.parametrize("argv", [[], ["--quick"], ["frobnicate"]])
def test_missing_or_unknown_command_exits_2_with_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: imle-solvers [-h] [-V] COMMAND ...")
    assert "required: COMMAND" in err or "invalid choice: 'frobnicate'" in err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([flag]) == 0
    assert capsys.readouterr().out == f"imle-solvers {__version__}\n"


def test_bench_help_lists_every_suite_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert not MARKUP.search(out)
    for name in [*SUITES, "all"]:
        assert re.search(rf"^  {name}\s+\S", out, flags=re.M), name
    for suite in ("pto", "backends"):
        assert suite in SUITES
    parser = bench_parser()
    for action in parser._actions:
        assert action.help, action.dest


def test_bench_rejects_unknown_suite(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "nope"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_demo_help_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    out = capsys.readouterr().out
    assert not MARKUP.search(out)
    assert re.search(r"--epochs EPOCHS +training epochs of each method \(default: 10\)", out)
    assert re.search(
        r"--out DIR +directory for curves.png \(the learning curves\) \(default: runs/demo\)", out
    )
    for action in pto_demo.build_parser()._actions:
        assert action.help, action.dest


def test_every_command_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in cli.COMMANDS:
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: imle-solvers {command}")
        if command != "train":  # train's options are documented by its own module
            assert not MARKUP.search(out), command


def test_demo_plots_what_training_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's reporting and plotting on given training results (the training is tested elsewhere)."""
    pytest.importorskip("matplotlib")
    import imle_solvers.training as training

    def fake_run(config: training.TrainConfig) -> list[dict[str, object]]:
        assert config.problem == "shortest-path" and config.epochs == 2 and config.n_test == 1000
        return [
            {
                "method": m,
                "regret": 0.1 + i / 100,
                "accuracy": 0.5,
                "epoch_time": 0.01,
                "curve": [0.6, 0.2, 0.1 + i / 100],
            }
            for i, m in enumerate(config.methods)
        ]

    monkeypatch.setattr(training, "run", fake_run)
    assert cli.main(["demo", "--epochs", "2", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    png = tmp_path / "curves.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"learning curves: {png.resolve()}" in out
    assert "best: imle-mumu (regret 0.1000)" in out


@pytest.mark.slow
def test_demo_writes_learning_curve_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out_dir = tmp_path / "demo"
    argv = ["demo", "--epochs", "1", "--n-train", "64", "--n-test", "64", "--quiet", "--out", str(out_dir)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    png = out_dir / "curves.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"learning curves: {png.resolve()}" in out
    assert "imle-mumu" in out and "spo+" in out and "two-stage" in out


def test_format_table() -> None:
    table = format_table([{"a": 1, "b": 0.123456}, {"a": 22, "c": "x"}])
    lines = table.splitlines()
    assert lines[0].split("|")[1].strip() == "a" and "c" in lines[0]
    assert "0.1235" in table and len(lines) == 4


def test_write_outputs_and_no_matplotlib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def save(path: Path) -> None:
        path.write_text('{"x": 1}')

    def drawn() -> list[Path]:
        (tmp_path / "a" / "f.png").write_bytes(b"png")
        return [tmp_path / "a" / "f.png"]

    def no_matplotlib() -> list[Path]:
        raise MissingExtraError("matplotlib is missing: pip install 'imle-solvers[plot]'")

    written = write_outputs(tmp_path / "a", "run", save, "# header\n\n| t |", " cmd --x 1 ", plots=drawn)
    assert written == [tmp_path / "a" / n for n in ("run.json", "run.md", "f.png")]
    assert (tmp_path / "a" / "run.md").read_text() == "# header\n\n| t |\n\nCommand: `cmd --x 1`\n"
    assert (tmp_path / "a" / "run.json").read_text() == '{"x": 1}'
    written = write_outputs(tmp_path / "b", "run", save, "h", "cmd", plots=no_matplotlib)
    assert written == [tmp_path / "b" / "run.json", tmp_path / "b" / "run.md"]
    assert "no plot: matplotlib is missing" in capsys.readouterr().err
