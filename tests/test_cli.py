from __future__ import annotations

import pytest

from imle_solvers import cli
from imle_solvers.report import format_table


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert "imle-solvers" in capsys.readouterr().out


def test_format_table() -> None:
    table = format_table([{"a": 1, "b": 0.123456}, {"a": 22, "c": "x"}])
    lines = table.splitlines()
    assert lines[0].split("|")[1].strip() == "a" and "c" in lines[0]
    assert "0.1235" in table and len(lines) == 4
