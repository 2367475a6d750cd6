"""Every option of every command against hostile values: a usage error, one line and a pointer to
``--help``, exit status 2, before any work and without a traceback.

The sweep calls each command's ``main`` in this process with its work replaced by a function that fails
the test, so that a value that passes the checks shows at once; a value the checks let through to
torch (an int beyond int64, a thread count torch cannot take) would crash only after work started.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from imle_solvers import cli
from imle_solvers.app.config import COUNT_MAX, THREADS_MAX, fields
from tests.support.paths import ROOT

HUGE = ["4294967296", "9223372036854775808", "18446744073709551616", "1e18", "1e400", "9" * 5000]
"""Integers beyond every integer option: 2**32 (above any seed and count), 2**63, 2**64, 10**18
(which ``10**digits`` once tried to build), a float overflowing to inf, 5,000 digits."""

INTEGERS = [*HUGE, "-1", "-9223372036854775809", "nan", "inf", "-inf", "1.5", "", "0x10", "one"]
FLOATS = ["nan", "inf", "-inf", "1e400", "-1", "", "one"]
WORDS = ["", " ", " padded"]  # names, paths, addresses: empty, blank, a quoting slip
CHOICES = [*WORDS, "nan", "-1", "x" * 300, "imle-mumu-typo"]
DASK = ["abc", "host", "inproc://x", "tcp://[::1", "tcp://[::1]", "ucx://host:8786", "tcp://host:0"]
DASK += ["tcp://host:65536", "tcp://host:port", "tcp://:8786", "tcp://a b:8786", "tcp://::1:8786"]


def hostile(spec: Any) -> list[str]:
    """The values every option of ``spec``'s kind must refuse."""
    if spec.base is int:
        return INTEGERS
    if spec.base is float:
        return FLOATS
    if spec.name == "dask_address":
        return [*WORDS, *DASK]
    if spec.choices() is not None or spec.name == "device":
        return CHOICES
    return WORDS


def label(spec: Any) -> str:
    """How argparse names the option in its messages."""
    return spec.name.upper() if spec.option.positional else "/".join(spec.flags)


def sweep(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run every hostile value of every option of command ``name``; returns what went wrong."""
    module = importlib.import_module(cli.COMMANDS[name][0])

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started working")

    monkeypatch.setattr(module, "COMMAND", dataclasses.replace(module.COMMAND, run=boom))
    base = ["warcraft"] if name == "bench" else []  # the suite whose options are every option
    wrong = []
    for spec in fields(module.COMMAND.config):
        cases: list[list[str]] = []
        if spec.base is bool:  # a flag takes no value
            cases = [[f"{flag}={value}"] for flag in spec.flags for value in ("1", "nan", "")]
        elif spec.option.positional:
            cases = [[value] for value in hostile(spec) if not value.startswith("-")]
        else:
            cases = [[f"{flag}={value}"] for flag in spec.flags for value in hostile(spec)]
        for argv in cases:
            words = argv if spec.option.positional else [*base, *argv]
            try:
                status = cli.main([name, *words])
            except SystemExit as exc:
                status = exc.code  # type: ignore[assignment]
            except AssertionError as exc:  # boom: the value passed every check
                status = str(exc)  # type: ignore[assignment]
            err = capsys.readouterr().err
            lines = err.splitlines()
            expected = f"imle-solvers {name}: error: argument {label(spec)}: "
            if (
                status != 2
                or len(lines) != 2
                or not lines[0].startswith(expected)
                or lines[1] != f"Try 'imle-solvers {name} --help' for more information."
                or "Traceback" in err
            ):
                wrong.append(f"{name} {' '.join(words)[:80]}: status {status}, {err[:300]!r}")
    return wrong


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_option_refuses_hostile_values_in_one_line(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # a value taken for a folder would be made here, not in the checkout
    start = time.monotonic()
    wrong = sweep(name, monkeypatch, capsys)
    assert not wrong, "\n".join(wrong[:20])
    assert time.monotonic() - start < 30  # checks, not work: about a second per command
    assert os.listdir(tmp_path) == []  # and nothing was written


@pytest.mark.parametrize("name", [n for n in cli.COMMANDS if n != "bench"])
def test_counts_and_threads_stop_at_what_torch_takes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config_type = importlib.import_module(cli.COMMANDS[name][0]).COMMAND.config
    specs = {spec.name: spec for spec in fields(config_type)}
    if "threads" in specs:  # --threads 2147483648 crashed in torch.set_num_threads after work started
        config = config_type.from_argv(["--threads", str(THREADS_MAX)])
        assert config.threads == THREADS_MAX  # type: ignore[attr-defined]
        with pytest.raises(SystemExit):
            config_type.from_argv(["--threads", str(THREADS_MAX + 1)])
        said = capsys.readouterr().err
        assert f"argument --threads: must be at most {THREADS_MAX}, got {THREADS_MAX + 1}" in said
    counts = [s for s in specs.values() if s.base is int and s.name not in ("threads", "seeds", "seed")]
    assert counts, name
    for spec in counts:
        with pytest.raises(SystemExit):
            config_type.from_argv([spec.flags[0], str(COUNT_MAX + 1)])
        assert "must be at most" in capsys.readouterr().err, spec.name


@pytest.mark.timeout(60)  # one fresh interpreter; `sort --digits 1e18` used to hang in its checks
def test_the_reported_command_lines_fail_fast_in_a_fresh_interpreter(tmp_path: Path) -> None:
    lines = [
        ["sort", "--digits", "1e18"],
        ["sort", "--digits", "5000", "--ns", "1"],
        ["sort", "--digits", "19", "--quick", "--out", str(tmp_path / "sort")],
        ["train", "--threads", "2147483648", "--out", str(tmp_path / "train")],
        ["toy", "--seed", "18446744073709551616", "--quick"],
        ["demo", "--seed", "4294967296"],
        ["train", "--deg", "1000"],
        ["train", "--dist-timeout", "1e300"],
        ["train", "--dist-timeout", "1e-9"],
        ["train", "--dask-address", "tcp://[::1"],
        ["train", "--methods", "imle-mumo"],
    ]
    driver = (
        "import sys, json\nfrom imle_solvers import cli\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    try:\n        status = cli.main(argv)\n"
        "    except SystemExit as exc:\n        status = exc.code\n"
        "    print(status, file=sys.stderr)\n"
    )
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", driver, json.dumps(lines)],
        capture_output=True,
        text=True,
        env=env,
        timeout=50,
        cwd=tmp_path,
    )
    err = done.stderr.splitlines()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert err[2::3] == ["2"] * len(lines), done.stderr  # each: two lines, then its status 2
    said = err[0::3]
    assert said[0].endswith(
        "argument --digits: must be at most 18 (the numbers are 64-bit integers), got 1000000000000000000"
    )
    assert said[1].endswith(
        "argument --digits: must be at most 18 (the numbers are 64-bit integers), got 5000"
    )
    assert said[2].endswith("argument --digits: must be at most 18 (the numbers are 64-bit integers), got 19")
    assert said[3].endswith("argument --threads: must be at most 1024, got 2147483648")
    assert said[4].endswith("argument --seed: must be an integer in [0, 2**32), got 18446744073709551616")
    assert said[5].endswith("argument --seeds/--seed: must be an integer in [0, 2**32), got 4294967296")
    assert said[6].endswith(
        "argument --deg: must be at most 69 (the cost model's costs must fit float32), got 1000"
    )
    assert said[7].endswith(
        "argument --dist-timeout: must be in [1, 604800] seconds (a second to a week), got 1e+300"
    )
    assert "got 1e-09" in said[8]
    assert said[9].endswith("got 'tcp://[::1': the '[' of an IPv6 address is not closed")
    assert said[10].endswith("(did you mean 'imle-mumu'?)")
    assert sorted(os.listdir(tmp_path)) == []  # no output folder was made


def test_the_largest_count_is_torch_s_32_bit_int_and_is_itself_accepted() -> None:
    from imle_solvers.app.config import count, count_at_least, non_negative_count

    assert COUNT_MAX == 2**31 - 1  # torch's C int
    for check in (count, non_negative_count, count_at_least(3)):
        assert check(2**31 - 1) == 2**31 - 1
        with pytest.raises(ValueError, match=rf"must be at most {2**31 - 1}, got {2**31}"):
            check(2**31)


@pytest.mark.parametrize("typed", ["9" * 5000, "1e400", "-1e309"])
def test_a_float_option_that_overflows_says_what_was_typed_not_inf(
    typed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from imle_solvers.training.config import TrainConfig

    with pytest.raises(SystemExit):
        TrainConfig.from_argv([f"--lr={typed}"])
    said = capsys.readouterr().err
    assert f"argument --lr: must be a finite number, got {typed[:39]}" in said
    assert "got inf" not in said and len(said) < 400
    with pytest.raises(SystemExit):
        TrainConfig.from_argv(["--lr", "inf"])  # typed as inf: it is inf
    assert "got inf" in capsys.readouterr().err
