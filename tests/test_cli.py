"""The `imle-solvers` command: the top level, and what every command shares (configuration, errors)."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from imle_solvers import __version__, cli
from imle_solvers.app.command import Command
from imle_solvers.app.config import CommandConfig, fields, option, render
from imle_solvers.app.registry import Registry
from imle_solvers.app.report import format_table
from imle_solvers.app.results import Metric, ResultWriter, Summary, mean_std
from imle_solvers.app.session import command_line
from imle_solvers.benchmarks import SUITES
from imle_solvers.errors import ConfigError, MissingExtraError
from tests.support.paths import ROOT

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
    sort         {cli.COMMANDS["sort"][1]}
    train        {cli.COMMANDS["train"][1]}
    bench        {cli.COMMANDS["bench"][1]}

examples:
  imle-solvers demo --out runs/demo       # a first run: writes runs/demo/curves.png
  imle-solvers train --methods all --deg 4
  imle-solvers bench backends --quick
"""


def command(name: str) -> Command[Any, Any]:
    """The `Command` of an `imle-solvers` command (its module is imported)."""
    return importlib.import_module(cli.COMMANDS[name][0]).COMMAND  # type: ignore[no-any-return]


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


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ([], "a command is required: demo, toy, vae, l2x, sort, train, bench"),
        (["--quick"], "the following arguments are required: COMMAND"),
        (["frobnicate"], "unknown command 'frobnicate': the commands are demo, toy"),
        (["trian"], "unknown command 'trian' (did you mean train?)"),
        (["TRAIN"], "unknown command 'TRAIN' (did you mean train?)"),
    ],
)
def test_missing_or_unknown_command_is_one_line_and_a_hint(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith(f"imle-solvers: error: {reason}")
    assert hint == "Try 'imle-solvers --help' for more information."


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([flag]) == 0
    assert capsys.readouterr().out == f"imle-solvers {__version__}\n"


@pytest.mark.timeout(50)  # two fresh interpreters
def test_python_dash_m_imle_solvers() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "imle_solvers", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=24,
    )
    assert done.returncode == 0 and done.stdout == f"imle-solvers {__version__}\n"
    bad = subprocess.run(
        [sys.executable, "-m", "imle_solvers", "demo", "--epochs", "-3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=24,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines() == [
        "imle-solvers demo: error: argument --epochs: must be a positive integer, got -3",
        "Try 'imle-solvers demo --help' for more information.",
    ]


# --- every command: one configuration type, its parser generated from it -----------------------------


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_is_a_config_and_a_run(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cmd = command(name)
    config_type = cmd.config
    assert issubclass(config_type, CommandConfig) and config_type.command == name
    assert config_type.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        config_type("positional")  # keyword-only
    parser = config_type.parser()
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    specs = fields(config_type)
    assert set(actions) == {spec.name for spec in specs}  # every option is a field and back
    for spec in specs:
        action = actions[spec.name]
        assert action.help, spec.name
        if spec.default is dataclasses.MISSING:
            continue
        assert action.default == spec.default, spec.name  # the default comes from the field alone
        if spec.base is not bool:
            assert "(default: " in action.help, spec.name  # help shows every default
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: imle-solvers {name}") and not MARKUP.search(out)


@pytest.mark.parametrize("name", [n for n in cli.COMMANDS if n != "bench"])
def test_defaults_round_trip_through_the_command_line(name: str, tmp_path: Path) -> None:
    config_type = command(name).config
    argv = ["--out", str(tmp_path)] if any(s.name == "out" for s in fields(config_type)) else []
    config = config_type.from_argv(argv)
    words = command_line(config).split()
    assert words[:2] == ["imle-solvers", name]
    assert config_type.from_argv(words[2:]) == config


# (command, argv, message): each is an error before any work, one line, exit status 2
BAD = [
    ("demo", ["--epochs", "-3"], "argument --epochs: must be a positive integer, got -3"),
    ("demo", ["--deg", "0"], "argument --deg: must be a positive integer, got 0"),
    ("demo", ["--n-train", "0"], "argument --n-train: must be a positive integer, got 0"),
    ("demo", ["--epochs", "many"], "argument --epochs: not a number: 'many'"),
    ("demo", ["--out", "{file}"], "argument --out: '{file}' is a file: it must name a folder"),
    ("toy", ["--out", "{file}"], "argument --out: '{file}' is a file: it must name a folder"),
    ("toy", ["--steps", "1.5"], "argument --steps: must be an integer, got 1.5"),
    ("toy", ["--seed", "-1"], "argument --seed: must be an integer in [0, 2**32), got -1"),
    ("vae", ["--epochs", "0"], "argument --epochs: must be a positive integer, got 0"),
    ("vae", ["--lr", "nan"], "argument --lr: must be a finite number > 0, got nan"),
    ("vae", ["--methods", "x"], "argument --methods/--method: must be one of 'imle-sog-1'"),
    ("vae", ["--out", "{file}/sub"], "argument --out: '{file}/sub' lies below the file '{file}'"),
    ("vae", ["--data", "{missing}"], "argument --data: '{missing}': no such file or folder"),
    ("vae", ["--device", "tpu"], "argument --device: must be cpu, cuda, cuda:N or auto, got 'tpu'"),
    ("l2x", ["--ks", "50"], "argument --ks: must be in [1, 50) (the review length), got [50]"),
    ("l2x", ["--train", "0"], "argument --n-train/--train: must be a positive integer, got 0"),
    ("l2x", ["--seeds", "1", "1"], "argument --seeds/--seed: must be non-empty and without repeats"),
    ("l2x", ["--out", "{file}"], "argument --out: '{file}' is a file: it must name a folder"),
    ("train", ["--epochs", "-3"], "argument --epochs: must be a positive integer, got -3"),
    ("train", ["--out", "{file}"], "argument --out: '{file}' is a file: it must name a folder"),
    (
        "bench",
        ["layer", "--json", "{missing}/rows.json"],
        "argument --json: '{missing}/rows.json': the folder",
    ),
    ("bench", ["layer", "--json", "{dir}"], "argument --json: '{dir}' is a folder: it must name a file"),
    ("bench", ["nope"], "argument SUITE: must be one of 'adapters', 'backends'"),
]
if not torch.cuda.is_available():
    BAD += [
        (name, ["--device", "cuda"], "argument --device: cuda: CUDA is not available on this machine")
        for name in ("train", "vae", "l2x")
    ]


@pytest.mark.parametrize(("name", "argv", "message"), BAD, ids=lambda v: v if isinstance(v, str) else None)
def test_bad_options_stop_before_any_work(
    name: str,
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = importlib.import_module(cli.COMMANDS[name][0])

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started working before its options were checked")

    monkeypatch.setattr(module, "COMMAND", dataclasses.replace(module.COMMAND, run=boom))
    a_file, a_dir = tmp_path / "a-file", tmp_path / "a-dir"
    a_file.write_text("x")
    a_dir.mkdir()
    names = {"file": str(a_file), "dir": str(a_dir), "missing": str(tmp_path / "missing")}
    argv = [a.format(**names) for a in argv]
    if name != "bench" and "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exc:
        cli.main([name, *argv])
    assert exc.value.code == 2
    first, hint = capsys.readouterr().err.splitlines()  # one line and a pointer to --help
    assert first.startswith(f"imle-solvers {name}: error: ") and message.format(**names) in first
    assert hint == f"Try 'imle-solvers {name} --help' for more information."


def test_old_spellings_are_aliases(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path)]
    vae = command("vae").config
    assert vae.from_argv(["--method", "ste-sog", "--seed", "4", "--quiet", *out]) == vae.from_argv(
        ["--methods", "ste-sog", "--seeds", "4", "--no-progress", *out]
    )
    l2x = command("l2x").config
    assert l2x.from_argv(["--train", "9", "--val", "8", "--test", "7", *out]) == l2x.from_argv(
        ["--n-train", "9", "--n-val", "8", "--n-test", "7", *out]
    )
    demo = command("demo").config
    assert demo.from_argv(["--quiet", *out]) == demo.from_argv(["--no-progress", *out])


@pytest.mark.parametrize(
    ("name", "module", "step"),
    [
        ("vae", "imle_solvers.experiments.vae.run", "_train_one"),
        ("l2x", "imle_solvers.experiments.l2x.run", "_train_one"),
        ("toy", "imle_solvers.experiments.topk_toy.run", "_best_row"),
    ],
)
def test_every_experiment_keeps_the_finished_runs_on_ctrl_c(
    name: str,
    module: str,
    step: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    runner = importlib.import_module(module)
    real, calls = getattr(runner, step), []

    def interrupted_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, step, interrupted_second)
    small = {
        "vae": [
            "--methods",
            "ste-gumbel",
            "--seeds",
            "0",
            "1",
            "--epochs",
            "1",
            "--max-train",
            "50",
            "--max-test",
            "20",
        ],
        "l2x": [
            "--methods",
            "ste",
            "--ks",
            "3",
            "--seeds",
            "0",
            "1",
            "--train",
            "20",
            "--val",
            "10",
            "--test",
            "10",
            "--epochs",
            "1",
        ],
        "toy": [
            "--quick",
            "--runs",
            "2",
            "--steps",
            "2",
            "--long-steps",
            "0",
            "--methods",
            "ste-gumbel",
            "sfe",
        ],
    }[name]
    out = tmp_path / "out"
    assert cli.main([name, *small, "--out", str(out), "--no-progress"]) == 130
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False and len(saved["runs"]) == 1
    assert saved["runs"][0].get("seed", 0) == 0 and saved["runs"][0].get("key", "ste-gumbel") == "ste-gumbel"
    assert len(list((out / "runs").iterdir())) == 1
    captured = capsys.readouterr()
    assert f"1 finished run(s) kept in {out / 'runs'}" in captured.err and "Traceback" not in captured.err


def test_bench_writes_its_json_suite_by_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import types

    import imle_solvers.benchmarks as bench

    fake = types.ModuleType("fake_suite")
    fake.run = lambda quick: [{"configuration": "x", "s": 0.5 if quick else 1.0}]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_suite", fake)
    monkeypatch.setattr(bench, "SUITES", {"fake": ("fake_suite", "a fake suite"), **SUITES})
    target = tmp_path / "rows.json"
    assert cli.main(["bench", "fake", "--quick", "--json", str(target)]) == 0
    assert json.loads(target.read_text()) == {"fake": [{"configuration": "x", "s": 0.5}]}
    assert "## bench fake" in capsys.readouterr().out


# --- the shared machinery ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Demo(CommandConfig):
    command = "x"

    count: int = option(
        3, "a count", check=lambda v: v if v > 0 else (_ for _ in ()).throw(ValueError("bad"))
    )
    names: tuple[str, ...] = option(("a",), "names", choices=("a", "b"))
    drops: tuple[int, ...] | None = option(None, "optional list", default_text="the schedule's")
    rate: float = option(0.5, "a rate")
    flag: bool = option(False, "a flag")
    keep: bool = option(True, "turn off", flags=("--no-keep",))
    extra: str = "python only"


def test_config_generator_declares_each_setting_once() -> None:
    assert [s.name for s in fields(_Demo)] == ["count", "names", "drops", "rate", "flag", "keep"]
    config = _Demo.from_argv(["--count", "2", "--names", "b", "a", "--drops", "3", "--flag", "--no-keep"])
    assert config == _Demo(count=2, names=("b", "a"), drops=(3,), flag=True, keep=False)
    assert _Demo(drops=()).drops == ()  # an optional sequence may say "none" explicitly
    for bad, message in [
        ({"count": 0}, "count bad"),
        ({"names": ("c",)}, "names must be one of 'a', 'b', got 'c'"),
        ({"names": ()}, "names must be non-empty and without repeats"),
        ({"names": "ab"}, "names must be a sequence of values, got 'ab'"),
        ({"rate": "fast"}, "rate must be a number, got 'fast'"),
        ({"flag": 1}, "flag must be True or False, got 1"),
        ({"count": None}, "count must be given, got None"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            _Demo(**bad)
    help_text = _Demo.parser().format_help()
    assert "(default: the schedule's)" in help_text and "(default: 3)" in help_text
    assert (render(None), render((1.0, 2.5)), render(()), render(1e-3)) == ("none", "1 2.5", "none", "0.001")
    with pytest.raises(TypeError, match="needs flags="):

        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Bad(CommandConfig):
            on: bool = option(True, "on")

        fields(Bad)


def test_registry_is_a_documented_mapping() -> None:
    def alpha() -> int:
        """First line.

        More."""
        return 1

    def undocumented() -> int:
        return 2

    registry = Registry("thing", {"alpha": alpha})
    assert list(registry) == ["alpha"] and registry["alpha"]() == 1 and len(registry) == 1
    assert registry.help("alpha") == "First line" and registry.listing() == "  alpha  First line"
    two = Registry("thing", {"alpha": alpha, "b": alpha})
    assert two.listing() == "  alpha  First line\n  b      First line"
    assert two.listing(width=6).splitlines()[1] == "  b       First line"
    with pytest.raises(KeyError, match="unknown thing 'beta'; choose from alpha"):
        registry["beta"]
    with pytest.raises(TypeError, match="has no docstring"):
        Registry("thing", {"u": undocumented})


def test_summary_gives_numbers_and_a_table() -> None:
    @dataclasses.dataclass(frozen=True)
    class Run:
        method: str
        x: float
        t: float

        @property
        def key(self) -> str:
            return self.method

    summary = Summary(by=("method",), metrics=(Metric("x", "x", 2), Metric("t", "time", 1, spread=False)))
    rows = summary.rows([Run("a", 1.0, 3.0), Run("b", 5.0, 1.0), Run("a", 3.0, 1.0)])
    assert rows == [
        {"method": "a", "seeds": 2, "x_mean": 2.0, "x_std": pytest.approx(2**0.5), "t_mean": 2.0},
        {"method": "b", "seeds": 1, "x_mean": 5.0, "x_std": 0.0, "t_mean": 1.0},
    ]
    table = summary.table([Run("a", 1.0, 3.0), Run("a", 3.0, 1.0)])
    assert "| 2.00 ± 1.41 | 2.0" in table
    assert mean_std([1.0, float("inf")]) == (float("inf"), 0.0)


def test_result_writer_and_a_missing_matplotlib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    @dataclasses.dataclass(frozen=True)
    class Run:
        method: str
        value: float

        @property
        def key(self) -> str:
            return f"{self.method}-run"

    def drawn(path: Path) -> None:
        path.write_bytes(b"png")

    def no_matplotlib(path: Path) -> None:
        raise MissingExtraError("matplotlib is missing: pip install 'imle-solvers[plot]'")

    writer = ResultWriter(tmp_path, "imle-solvers x --y 1", {"y": (1, 2)})
    writer.add(Run("a", 0.5))
    assert json.loads((tmp_path / "runs" / "a-run.json").read_text()) == {
        "command": "imle-solvers x --y 1",
        "config": {"y": [1, 2]},
        "run": {"method": "a", "value": 0.5},
    }
    written = writer.finish(
        complete=True,
        runs=[Run("a", 0.5)],
        summary=[{"method": "a", "value_mean": 0.5}],
        markdown="# header\n\n| t |",
        plots=[("f.png", drawn), ("g.png", no_matplotlib)],
    )
    assert written == [tmp_path / n for n in ("results.json", "results.md", "f.png")]
    assert (tmp_path / "results.md").read_text() == "# header\n\n| t |\n\nCommand: `imle-solvers x --y 1`\n"
    assert (tmp_path / "f.png").read_bytes() == b"png" and not (tmp_path / "g.png").exists()
    assert "no plot: matplotlib is missing" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "results.json", "results.md", "runs"]


def test_format_table() -> None:
    table = format_table([{"a": 1, "b": 0.123456}, {"a": 22, "c": "x"}])
    lines = table.splitlines()
    assert lines[0].split("|")[1].strip() == "a" and "c" in lines[0]
    assert "0.1235" in table and len(lines) == 4


def test_demo_prints_and_writes_what_training_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's configuration and report on given training results (the training is tested elsewhere)."""
    pytest.importorskip("matplotlib")
    from imle_solvers.experiments import pto_demo
    from imle_solvers.training import TrainConfig, TrainRun

    seen: list[TrainConfig] = []

    def fake_train(config: TrainConfig, on_result: Any = None) -> list[TrainRun]:
        seen.append(config)
        return [
            TrainRun(
                m,
                0,
                0.1 + i / 100,
                0.5,
                [0.6, 0.2, 0.1 + i / 100],
                [0.0] * 3,
                0.01,
                [0.01] * 2,
                [1.0] * 2,
                [0.01] * 2,
            )
            for i, m in enumerate(config.methods)
        ]

    monkeypatch.setattr(pto_demo, "train", fake_train)
    argv = ["demo", "--epochs", "2", "--seed", "3", "--n-train", "50", "--quiet", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    (config,) = seen
    assert (config.seeds, config.n_train) == ((3,), 50)
    assert (config.problem, config.epochs, config.n_test, config.deg, config.out) == (
        "shortest-path",
        2,
        1000,
        4,
        str(tmp_path),
    )
    assert config.methods == pto_demo.METHODS and config.threads == 1 and not config.show_progress
    out = capsys.readouterr().out
    assert "best: imle-mumu (regret 0.1000)" in out and "| imle-mumu | 0.1" in out


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


def test_ctrl_c_while_a_command_loads_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert cli.main(["train"]) == 130  # 128 + SIGINT, as a shell reports it
    assert capsys.readouterr().err == "interrupted\n"
