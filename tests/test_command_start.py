"""Ctrl-C while the `imle-solvers` command loads (PyTorch's import): one line and exit status 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from imle_solvers import _command_start as start
from imle_solvers import cli
from tests.support.paths import ROOT

SCRIPT = Path(sys.executable).with_name("imle-solvers")  # the console script pip installed

# A stand-in for PyTorch whose import is interrupted by Ctrl-C (SIGINT sent to the process itself): the
# KeyboardInterrupt is left to rise, turned into another error (as NumPy does when a part of itself
# failed to import), or swallowed (the import then goes on without what it needed)
FAKE_TORCH = """
import os, signal, time
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
except KeyboardInterrupt:
    if {how!r} == "converted":
        raise AttributeError("module 'torch' has no attribute '_C'")
    if {how!r} == "raised":
        raise
"""

COMMANDS = {
    "console script": [str(SCRIPT)],
    "python -m imle_solvers": [sys.executable, "-m", "imle_solvers"],
    "python -m imle_solvers.cli": [sys.executable, "-X", "utf8", "-m", "imle_solvers.cli"],
}


@pytest.mark.parametrize("how", ["raised", "converted", "swallowed"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_ctrl_c_while_torch_loads_prints_one_line(command: str, how: str, tmp_path: Path) -> None:
    if command == "console script" and not SCRIPT.exists():
        pytest.skip("the imle-solvers console script is not installed next to this interpreter")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH.format(how=how), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [*COMMANDS[command], "train", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv0", "orig_argv", "expected"),
    [
        ("/venv/bin/imle-solvers", ["/venv/bin/python", "/venv/bin/imle-solvers", "train"], True),
        ("imle-solvers", ["python", "imle-solvers"], True),
        (r"C:\venv\Scripts\imle-solvers.exe", ["python"], True),
        (r"C:\venv\Scripts\IMLE-SOLVERS-script.py", ["python"], True),
        ("-m", ["python", "-m", "imle_solvers", "train"], True),
        ("-m", ["python", "-X", "dev", "-u", "-m", "imle_solvers.cli"], True),
        ("-m", ["python", "-mimle_solvers.__main__"], True),
        ("-m", ["python", "-m", "imle_solvers.benchmarks"], False),  # a module, not the command
        ("-m", ["python", "-m", "pytest", "imle_solvers"], False),
        ("-m", ["python", "-m"], False),
        ("-m", ["python", "-mpytest"], False),
        ("-c", ["python", "-c", "import imle_solvers", "-m", "imle_solvers"], False),
        ("train.py", ["python", "train.py"], False),
        ("imle-solvers.py", ["python", "imle-solvers.py"], False),
        ("my-imle-solvers", ["python", "my-imle-solvers"], False),
        ("", ["python"], False),  # the interactive interpreter
    ],
)
def test_is_command(argv0: str, orig_argv: list[str], expected: bool) -> None:
    assert start.is_command(argv0, orig_argv) is expected


def test_a_program_that_imports_the_package_keeps_python_s_handler_and_hooks() -> None:
    assert signal.getsignal(signal.SIGINT) is not start._exit_at_once
    assert not getattr(sys.excepthook, "_imle_solvers", False)
    assert start.guard("train.py", ["python", "train.py"]) is False
    assert start.guard() is False  # pytest is not the command
    assert signal.getsignal(signal.SIGINT) is not start._exit_at_once
    assert not getattr(sys.excepthook, "_imle_solvers", False)


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> Any:
    """`guard` installed in this process as in the command's, undone afterwards."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc: seen.append(exc[1]))
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    monkeypatch.setattr(start, "_said", False)
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert start.guard("/venv/bin/imle-solvers", ["python", "/venv/bin/imle-solvers"]) is True
        assert start.guard("/venv/bin/imle-solvers", ["python", "/venv/bin/imle-solvers"]) is False  # once
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def test_guard_answers_ctrl_c_at_once_until_released(guarded: list[Any]) -> None:
    assert signal.getsignal(signal.SIGINT) is start._exit_at_once
    start.release()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command's own handling
    start.release()  # twice: nothing more
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_release_leaves_another_handler_alone() -> None:
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        start.release()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _converted() -> BaseException:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise AttributeError("partly imported") from None  # a cause hides nothing: the context stays
    except AttributeError as exc:
        return exc


def _caused() -> BaseException:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RecursionError("while importing") from interrupt
    except RecursionError as exc:
        return exc


def test_interrupted_follows_causes_and_contexts() -> None:
    assert start.interrupted(KeyboardInterrupt())
    assert start.interrupted(_converted()) and start.interrupted(_caused())
    assert not start.interrupted(ValueError("x")) and not start.interrupted(None)
    assert not start.interrupted(_raised(ValueError("y")))
    looped = ValueError("a")
    other = TypeError("b")
    looped.__context__, other.__context__ = other, looped  # a cycle ends the walk
    assert not start.interrupted(looped)


def test_after_release_an_uncaught_interrupt_prints_one_line_and_other_errors_pass_through(
    guarded: list[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    start.release()
    error = ValueError("a bug")
    sys.excepthook(ValueError, error, None)
    assert guarded == [error]  # not ours: the previous hook reports it
    for exc in (KeyboardInterrupt(), _converted(), _caused()):
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert guarded == [error] and capfd.readouterr().err == "interrupted\n"  # one line, once
    unraisable = types.SimpleNamespace(exc_value=ValueError("in an exit handler"))
    sys.unraisablehook(unraisable)  # type: ignore[arg-type]
    assert guarded == [error, unraisable.exc_value]


def test_an_interrupted_shutdown_prints_one_line(
    guarded: list[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    sys.unraisablehook(types.SimpleNamespace(exc_value=_converted()))  # type: ignore[arg-type]
    assert guarded == [] and capfd.readouterr().err == "interrupted\n"


def test_cli_main_releases_ctrl_c_before_the_command_runs(
    guarded: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    handlers: list[Any] = []
    fake = types.SimpleNamespace(main=lambda argv: handlers.append(signal.getsignal(signal.SIGINT)) or 0)
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: fake)
    assert cli.main(["train"]) == 0
    assert handlers == [signal.default_int_handler]
