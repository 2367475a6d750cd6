"""The application layer on its own: value checks of the configuration generator, JSON of non-finite
numbers, the device and output-folder checks, and how `Command.main` ends on each kind of failure."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from imle_solvers.app.command import Command
from imle_solvers.app.config import CommandConfig, Written, integer, number, option
from imle_solvers.app.machine import check_device, check_output_dir, device_name
from imle_solvers.app.results import Metric, Summary, to_json
from imle_solvers.errors import ConfigError, MissingExtraError, OutputError


# --------------------------------------------------------------------------- values of the Python API
@pytest.mark.parametrize("value", [True, False, 2.5, math.inf, math.nan, "3", None, [1]])
def test_integer_refuses_what_is_not_an_integer(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^must be an integer, got "):
        integer(value)


def test_integer_and_number_take_integral_floats_and_numbers() -> None:
    assert integer(3.0) == 3 and type(integer(3.0)) is int and integer(-2) == -2
    assert number(2) == 2.0 and number(math.inf) == math.inf
    for value in (True, "1.5", None):
        with pytest.raises(ValueError, match=r"^must be a number, got "):
            number(value)


def test_a_bool_is_not_a_count_nor_a_rate_of_a_command() -> None:
    from imle_solvers.training import TrainConfig

    with pytest.raises(ConfigError, match=r"^epochs must be an integer, got True$"):
        TrainConfig(epochs=True)
    with pytest.raises(ConfigError, match=r"^lr must be a number, got True$"):
        TrainConfig(lr=True)


# --------------------------------------------------------------------------- results
def test_json_keeps_infinities_and_writes_nan_as_null() -> None:
    assert to_json({"a": math.inf, "b": -math.inf, "c": math.nan, "d": (1.5, math.inf)}) == {
        "a": math.inf,
        "b": -math.inf,
        "c": None,
        "d": [1.5, math.inf],
    }


def test_mean_and_sample_standard_deviation_over_seeds() -> None:
    from imle_solvers.app.results import mean_std

    assert mean_std([1.0, 2.0, 6.0]) == (3.0, pytest.approx(math.sqrt(7.0)))  # Σ(v − 3)² / (n − 1) = 14 / 2
    assert mean_std([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2.0)))
    assert mean_std([5.0]) == (5.0, 0.0)  # one seed: no spread
    assert mean_std([1.0, math.inf]) == (math.inf, 0.0) and mean_std([math.nan, 1.0]) == (math.inf, 0.0)
    assert all(math.isnan(v) for v in mean_std([]))


def test_a_metric_without_spread_has_no_std_column() -> None:
    @dataclasses.dataclass(frozen=True)
    class Run:
        method: str
        seed: int
        x: float

    summary = Summary(by=("method", "seed"), metrics=(Metric("x", "x", spread=False),), count="runs")
    rows = summary.rows([Run("a", 0, 1.0), Run("a", 1, 2.0), Run("a", 0, 3.0)])
    assert rows == [
        {"method": "a", "seed": 0, "runs": 2, "x_mean": 2.0},  # grouped by both keys
        {"method": "a", "seed": 1, "runs": 1, "x_mean": 2.0},
    ]


def test_a_group_of_one_run_shows_no_spread() -> None:
    @dataclasses.dataclass(frozen=True)
    class Run:
        method: str
        x: float

    summary = Summary(by=("method",), metrics=(Metric("x", "x", 2),))
    table = summary.table([Run("a", 1.0), Run("b", 1.0), Run("b", 2.0)])
    lines = table.splitlines()
    assert (
        "| a " in lines[2] and "1.00 " in lines[2] and "±" not in lines[2]
    )  # one seed: the spread is unknown
    assert "| b " in lines[3] and "1.50 ± 0.71" in lines[3]
    assert summary.rows([Run("a", 1.0)])[0]["x_std"] == 0.0  # the number stays in results.json


def test_choices_take_any_case_and_suggest_the_closest() -> None:
    from imle_solvers.app.config import choose
    from imle_solvers.training import TrainConfig

    assert TrainConfig(methods=("IMLE-MuMu", "SPO+"), problem="Knapsack").methods == ("imle-mumu", "spo+")
    assert TrainConfig(problem="KNAPSACK").problem == "knapsack"
    with pytest.raises(ConfigError, match=r"got 'imle-mumo' \(did you mean 'imle-mumu'\?\)$"):
        TrainConfig(methods=("imle-mumo",))
    with pytest.raises(ValueError, match=r"must be one of 'a', 'b', got 'zzz'$"):  # nothing close: no hint
        choose("zzz", ("a", "b"))
    with pytest.raises(ValueError, match="got 'AB'"):  # two choices differ only in case: no guess
        choose("AB", ("ab", "Ab"))
    assert choose("Ab", ("ab", "Ab")) == "Ab"


def test_an_integer_option_without_a_kind_still_fits_64_bits() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bare(CommandConfig):
        command: ClassVar[str] = "bare"
        n: int = option(0, "an integer of no particular kind")

    assert Bare(n=-(2**63)).n == -(2**63) and Bare(n=2**63 - 1).n == 2**63 - 1
    for huge in (2**63, -(2**63) - 1, 10**30):
        with pytest.raises(ConfigError, match="n must fit in 64 bits"):
            Bare(n=huge)


def test_a_misspelt_option_is_answered_with_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    from imle_solvers.training import TrainConfig

    with pytest.raises(SystemExit) as exc:
        TrainConfig.from_argv(["--methds", "spo+"])
    assert exc.value.code == 2
    first, hint = capsys.readouterr().err.splitlines()
    assert (
        first == "imle-solvers train: error: unrecognized arguments: --methds spo+ (did you mean --methods?)"
    )
    assert hint == "Try 'imle-solvers train --help' for more information."


# --------------------------------------------------------------------------- the machine
@pytest.mark.parametrize("value", ["cpu:1", "cuda:x", "cuda:", "auto:0", "gpu", "CUDA", ""])
def test_device_names_are_cpu_cuda_cuda_n_or_auto(value: str) -> None:
    with pytest.raises(ValueError, match=r"^must be cpu, cuda, cuda:N or auto, got "):
        device_name(value)


def test_device_names_that_pass() -> None:
    assert [device_name(v) for v in ("cpu", "cuda", "cuda:0", "cuda:12", "auto")] == [
        "cpu",
        "cuda",
        "cuda:0",
        "cuda:12",
        "auto",
    ]


def test_a_cuda_device_index_must_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device("cuda:1")  # the second of two devices
    check_device("cuda")
    with pytest.raises(ConfigError, match=r"^device cuda:2: this machine has 2 CUDA device\(s\)$"):
        check_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"CUDA is not available on this machine"):
        check_device("cuda:0")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_an_existing_folder_that_cannot_be_written_is_refused_before_any_work() -> None:
    # /proc exists and is a folder, but nobody (not even root) can create a file in it
    with pytest.raises(ConfigError, match=r"^out cannot write to '/proc': "):
        check_output_dir("/proc")


def test_an_output_folder_below_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="lies below the file"):
        check_output_dir(tmp_path / "file" / "sub" / "dir")
    assert check_output_dir(tmp_path / "new" / "dir") == tmp_path / "new" / "dir"


# --------------------------------------------------------------------------- Command.main
@dataclasses.dataclass(frozen=True, kw_only=True)
class _Config(Written):
    command: ClassVar[str] = "probe"
    count: int = option(1, "how many")


def _main(run: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    shown: list[Any] = []
    summary = Summary(by=("name",), metrics=(Metric("value", "value"),))
    status = Command(_Config, run, lambda config, result: shown.append(result), summary).main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@dataclasses.dataclass(frozen=True)
class _Run:
    name: str
    value: float

    @property
    def key(self) -> str:
        return self.name


def test_a_configuration_error_found_while_running_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    def run(config: _Config, on_result: Any) -> None:
        raise ConfigError("must be 3 here, got 1", "count")  # e.g. files found wanting once opened

    status, _, err = _main(run, [], capsys)
    assert status == 2 and err.splitlines() == [
        "imle-solvers probe: error: argument --count: must be 3 here, got 1",
        "Try 'imle-solvers probe --help' for more information.",
    ]


def test_a_typed_error_of_the_library_exits_1_with_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    def run(config: _Config, on_result: Any) -> None:
        raise MissingExtraError("matplotlib is missing: pip install 'imle-solvers[plot]'")

    status, _, err = _main(run, [], capsys)
    assert status == 1 and "Traceback" not in err
    assert err == "imle-solvers probe: error: matplotlib is missing: pip install 'imle-solvers[plot]'\n"


def test_a_failed_write_prints_the_finished_runs_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    def run(config: _Config, on_result: Any) -> None:
        on_result(_Run("a", 0.25))
        raise OutputError("cannot write the results to 'x': No space left on device")

    status, out, err = _main(run, [], capsys)
    assert status == 1 and "| a " in out and "0.2500" in out
    assert err == "imle-solvers probe: error: cannot write the results to 'x': No space left on device\n"


@pytest.mark.parametrize("finished", [0, 2])
@pytest.mark.parametrize("out", [None, "somewhere"])
def test_ctrl_c_says_what_finished_and_where_it_is(
    finished: int, out: str | None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = None if out is None else str(tmp_path / out)

    def run(config: _Config, on_result: Any) -> None:
        for i in range(finished):
            on_result(_Run(f"r{i}", float(i)))
        raise KeyboardInterrupt

    status, printed, err = _main(run, [] if folder is None else ["--out", folder], capsys)
    assert status == 130
    assert ("| r1 " in printed) == bool(finished)  # the finished runs' table
    expected = {
        (0, False): "interrupted: no run had finished\n",
        (2, False): "interrupted: 2 finished run(s), printed above (add --out DIR to keep them)\n",
        (0, True): f"interrupted: no run had finished; {folder} left as it was\n",
        (2, True): f"interrupted: 2 finished run(s) kept in {folder}/runs"
        f" (summary in {folder}/results.json)\n",
    }
    assert err == expected[(finished, folder is not None)]


# --------------------------------------------------------------------------- the shared run settings
def test_every_command_inherits_its_run_settings_declared_once() -> None:
    import importlib

    from imle_solvers import cli
    from imle_solvers.app.config import (
        OnDevice,
        Progress,
        RunSettings,
        Seeded,
        Threaded,
        Written,
        fields,
        inherit,
    )

    shared = {
        cls: {f.name: f.metadata["option"] for f in dataclasses.fields(cls)}
        for cls in (Seeded, OnDevice, Threaded, Written, Progress)
    }
    expected = {
        "train": RunSettings,
        "demo": RunSettings,
        "vae": RunSettings,
        "l2x": RunSettings,
        "sort": RunSettings,
        "toy": (Written, Progress),
        "bench": OnDevice,
    }
    assert set(expected) == set(cli.COMMANDS)
    for name, bases in expected.items():
        config = importlib.import_module(cli.COMMANDS[name][0]).COMMAND.config
        assert issubclass(config, bases)  # type: ignore[arg-type]
        specs = {spec.name: spec for spec in fields(config)}
        for cls, declared in shared.items():
            if not issubclass(config, cls):
                continue
            for field, option_ in declared.items():  # the declaration itself: flags, check, help
                spec = specs[field].option
                assert (spec.flags, spec.check, spec.help, spec.shared) == (
                    option_.flags,
                    option_.check,
                    option_.help,
                    True,
                ), (name, field)
        # listed after the command's own options
        kinds = [spec.option.shared for spec in fields(config)]
        assert kinds == sorted(kinds), name
    from imle_solvers.experiments.l2x import L2XConfig
    from imle_solvers.training import TrainConfig

    assert (L2XConfig().seeds, TrainConfig().seeds) == ((0, 1, 2), (0,))
    for name in cli.COMMANDS:  # nothing is written without --out, whatever the command
        config = importlib.import_module(cli.COMMANDS[name][0]).COMMAND.config
        assert not issubclass(config, Written) or {s.name: s for s in fields(config)}["out"].default is None
    with pytest.raises(ConfigError, match=r"seeds must be an integer in \[0, 2\*\*32\), got -1"):
        L2XConfig(seeds=(-1,))
    with pytest.raises(ValueError, match="'epochs' is not a shared run setting"):
        inherit("epochs", 3)
