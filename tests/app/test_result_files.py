"""Result files get the permissions a plain ``open(path, "w")`` gives: ``0o666`` less the umask for a new
file, the old file's for one that is replaced; and they are still written atomically."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from imle_solvers.app.results import ResultWriter, atomic_path, atomic_write_json, atomic_write_text


@dataclasses.dataclass(frozen=True)
class _Run:
    method: str
    regret: float

    @property
    def key(self) -> str:
        return self.method


@pytest.fixture
def restore_umask() -> Iterator[None]:
    """The test sets the process umask; it is restored afterwards."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002], ids=oct)
def test_every_result_file_gets_0666_less_the_umask(tmp_path: Path, restore_umask: None, mask: int) -> None:
    os.umask(mask)
    writer = ResultWriter(tmp_path, "imle-solvers train", {"seeds": [0, 1]})
    runs = [_Run("a", 0.5), _Run("b", 0.25)]
    written = [writer.add(run) for run in runs]
    written += writer.finish(
        complete=True,
        runs=runs,
        summary=[{"method": "a"}],
        markdown="| method |",
        plots=[("curves.png", lambda path: path.write_bytes(b"\x89PNG"))],
    )
    atomic_write_json(tmp_path / "bench.json", {"suites": []})  # what bench --json writes
    atomic_write_text(tmp_path / "notes.md", "text")
    written += [tmp_path / "bench.json", tmp_path / "notes.md"]
    assert {p.name for p in written} >= {"a.json", "b.json", "results.json", "results.md", "curves.png"}
    with open(tmp_path / "plain.txt", "w") as fh:  # what a plain open() gives, for reference
        fh.write("x")
    assert _mode(tmp_path / "plain.txt") == 0o666 & ~mask
    for path in written:
        assert _mode(path) == 0o666 & ~mask, path.name
    assert json.loads((tmp_path / "runs" / "b.json").read_text())["run"] == {"method": "b", "regret": 0.25}
    leftovers = [p.name for p in (*tmp_path.iterdir(), *(tmp_path / "runs").iterdir()) if p.name[0] == "."]
    assert leftovers == []  # no temporary file left behind


def test_a_replaced_file_keeps_its_permissions_as_with_open(tmp_path: Path, restore_umask: None) -> None:
    os.umask(0o077)
    target = tmp_path / "results.json"
    atomic_write_json(target, {"n": 1})
    assert _mode(target) == 0o600
    target.chmod(0o640)
    atomic_write_json(target, {"n": 2})
    assert _mode(target) == 0o640 and json.loads(target.read_text()) == {"n": 2}
    os.umask(0o022)
    target.unlink()
    atomic_write_json(target, {"n": 3})
    assert _mode(target) == 0o644


def test_an_interrupted_write_leaves_the_old_file_and_its_permissions(
    tmp_path: Path, restore_umask: None
) -> None:
    os.umask(0o022)
    target = tmp_path / "curves.png"
    target.write_bytes(b"old")
    target.chmod(0o604)
    with pytest.raises(KeyboardInterrupt), atomic_path(target, suffix=".png") as tmp:
        assert tmp.parent == tmp_path and tmp.exists() and _mode(tmp) == 0o604
        tmp.write_bytes(b"new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old" and _mode(target) == 0o604
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc")
def test_writing_files_leaves_no_descriptor_open(tmp_path: Path) -> None:
    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    atomic_write_text(tmp_path / "warm.txt", "x")
    before = open_descriptors()
    for i in range(20):
        atomic_write_json(tmp_path / "results.json", {"i": i})
        with atomic_path(tmp_path / "curves.png", suffix=".png") as tmp:
            tmp.write_bytes(b"png")
    assert open_descriptors() == before
