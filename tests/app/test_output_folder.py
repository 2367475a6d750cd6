"""An output folder describes one run: a run into a folder of an earlier run replaces that run's files
(and only those) when it writes its first result; Ctrl-C says where the finished results are, in the
words of the command (``--out`` or bench's ``--json``)."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from imle_solvers import cli
from imle_solvers.app.command import Command
from imle_solvers.app.config import Written, option
from imle_solvers.app.results import Metric, Summary, earlier_results
from imle_solvers.app.session import Session


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Config(Written):
    command: ClassVar[str] = "probe"
    runs: int = option(1, "how many runs")
    figure: bool = option(False, "draw a figure")


@dataclasses.dataclass(frozen=True)
class _Run:
    name: str
    value: float

    @property
    def key(self) -> str:
        return self.name


SUMMARY = Summary(by=("name",), metrics=(Metric("value", "value"),))


def _run(config: _Config, on_result: Any = None, stop_after: int | None = None) -> list[_Run]:
    with Session(config, SUMMARY, on_result=on_result) as session:
        for i in range(config.runs):
            if i == stop_after:
                raise KeyboardInterrupt
            session.add(_Run(f"run{i}", float(i)))
        plots = [("figure.png", lambda path: Path(path).write_bytes(b"png"))] if config.figure else []
        session.finish(plots=plots)
    return session.records


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _foreign(folder: Path) -> list[str]:
    """Files that are not a command's: they must survive every run."""
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("my notes")
    (folder / "other.png").write_bytes(b"not a figure of the run")
    (folder / "runs" / "mine.json").write_text(json.dumps({"mine": 1}))
    (folder / "runs" / "broken.json").write_text("{not json")
    return ["notes.txt", "other.png", "runs/broken.json", "runs/mine.json"]


def test_a_second_run_replaces_the_first_run_s_files_and_keeps_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    kept = _foreign(out)
    _run(_Config(out=str(out), runs=3, figure=True))
    first = ["figure.png", "results.json", "results.md", "runs/run0.json", "runs/run1.json", "runs/run2.json"]
    assert _listing(out) == sorted([*first, *kept])
    assert json.loads((out / "results.json").read_text())["figures"] == ["figure.png"]
    assert "replacing" not in capsys.readouterr().err  # nothing of an earlier run was there
    assert [p.name for p in earlier_results(out)] == [
        "results.json",
        "figure.png",
        "results.md",
        "run0.json",
        "run1.json",
        "run2.json",
    ]
    _run(_Config(out=str(out), runs=1))  # fewer runs, no figure: nothing of the first may stay
    assert _listing(out) == sorted(["results.json", "results.md", "runs/run0.json", *kept])
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["runs"] == 1 and [r["name"] for r in saved["runs"]] == ["run0"]
    assert json.loads((out / "runs" / "run0.json").read_text())["config"]["runs"] == 1
    err = capsys.readouterr().err
    assert err == f"{out}: replacing the results of an earlier run (6 file(s))\n"


def test_a_run_stopped_before_its_first_result_leaves_the_folder_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    _run(_Config(out=str(out), runs=2, figure=True))
    before = {p: (out / p).read_bytes() for p in _listing(out)}
    with pytest.raises(KeyboardInterrupt):
        _run(_Config(out=str(out), runs=2), stop_after=0)
    assert {p: (out / p).read_bytes() for p in _listing(out)} == before
    with pytest.raises(KeyboardInterrupt):  # one finished: the earlier run is gone, this one is kept
        _run(_Config(out=str(out), runs=3), stop_after=1)
    assert _listing(out) == ["results.json", "results.md", "runs/run0.json"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False and saved["config"]["runs"] == 3


def test_a_command_rerun_into_its_folder_describes_the_second_run(tmp_path: Path) -> None:
    out = tmp_path / "toy"
    small = [
        "toy",
        "--quick",
        "--runs",
        "2",
        "--steps",
        "2",
        "--long-steps",
        "0",
        "--quiet",
        "--out",
        str(out),
    ]
    assert cli.main([*small, "--methods", "ste-gumbel", "imle-sog"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["imle-sog.json", "ste-gumbel.json"]
    assert cli.main([*small, "--methods", "imle-sog"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["imle-sog.json"]
    saved = json.loads((out / "results.json").read_text())
    assert [row["key"] for row in saved["runs"]] == ["imle-sog"] and saved["config"]["methods"] == [
        "imle-sog"
    ]


# --- what Ctrl-C says ----------------------------------------------------------------------------------


def _suites(monkeypatch: pytest.MonkeyPatch, interrupt_at: int) -> None:
    """Two fake bench suites; the one numbered ``interrupt_at`` is interrupted by Ctrl-C."""
    import imle_solvers.benchmarks as bench

    for i in range(2):
        fake = types.ModuleType(f"fake_suite{i}")

        def run(quick: bool, i: int = i) -> list[dict[str, Any]]:
            if i == interrupt_at:
                raise KeyboardInterrupt
            return [{"suite": f"fake{i}", "s": 0.5}]

        fake.run = run  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, f"fake_suite{i}", fake)
    monkeypatch.setattr(bench, "SUITES", {f"fake{i}": (f"fake_suite{i}", "a fake suite") for i in range(2)})


@pytest.mark.parametrize(("interrupt_at", "json_file"), [(1, True), (0, True), (1, False), (0, False)])
def test_ctrl_c_of_bench_names_its_json_file_not_an_out_folder(
    interrupt_at: int,
    json_file: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _suites(monkeypatch, interrupt_at)
    target = tmp_path / "rows.json"
    target.write_text('{"earlier": []}')
    argv = ["bench", "all", "--quick", *(["--json", str(target)] if json_file else [])]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err.splitlines()[-1]
    expected = {
        (1, True): f"interrupted: 1 finished suite(s), printed above; their rows are in {target}",
        (0, True): f"interrupted: no suite had finished; {target} left as it was",
        (1, False): "interrupted: 1 finished suite(s), printed above (add --json PATH to keep their rows)",
        (0, False): "interrupted: no suite had finished",
    }
    assert err == expected[(interrupt_at, json_file)]
    assert "--out" not in err
    saved = json.loads(target.read_text())
    assert saved == (
        {"fake0": [{"suite": "fake0", "s": 0.5}]} if json_file and interrupt_at else {"earlier": []}
    )


def test_ctrl_c_of_a_command_that_writes_names_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(config: _Config, on_result: Any) -> list[_Run]:
        return _run(config, on_result, stop_after=1)

    command = Command(_Config, interrupted, lambda config, result: None, SUMMARY)
    assert command.main(["--runs", "3", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"interrupted: 1 finished run(s) kept in {tmp_path / 'runs'} (summary in {tmp_path / 'results.json'})"
    )
    assert command.main(["--runs", "3"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: 1 finished run(s), printed above (add --out DIR to keep them)"
    )
