"""``scripts/mutants.py``: the mutants it plants, the sample it draws, and a round on a tiny repository
(killed, survived, timed out, recorded equivalents; the repository itself never written to)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mutants = _load()

SOURCE = '''"""A module docstring: not mutated."""
import warnings
from typing import TYPE_CHECKING

__all__ = ["f"]

if TYPE_CHECKING:
    X = 1 + 2


def f(x: int = 3, *, y: float = 0.5) -> float:
    """A docstring."""
    check(x)
    if x < 0 and y >= 1:
        raise ValueError(f"x must be >= {0 + 1}, got {x}")
    total: float = min(x * 2, 10) - torch.where(x > 0, a, b) + t.clamp(min=0)
    total += -x if not y else 0
    assert x is not None
    warnings.warn("careful", RuntimeWarning, stacklevel=2 + 1)
    return total


def g(items: list[int]) -> None:
    for i in items:
        print(i)


def h() -> None:  # pragma: no cover
    g([1 + 1])
'''


def test_every_operator_plants_its_documented_changes() -> None:
    found = {(m.line, m.operator, m.description) for m in mutants.generate("pkg.py", SOURCE.encode())}
    want = {
        (11, "constant", "`3` → `4`"),
        (11, "constant", "`3` → `0`"),
        (11, "constant", "`3` → `(-3)`"),
        (11, "constant", "`0.5` → `1.5`"),
        (11, "constant", "`0.5` → `0.0`"),
        (11, "constant", "`0.5` → `(-0.5)`"),
        (13, "remove", "`check(x)` → `pass`"),
        (14, "negate", "`x < 0 and y >= 1` → `not (x < 0 and y >= 1)`"),
        (14, "boolop", "`x < 0 and y >= 1` → `x < 0 or y >= 1`"),
        (14, "compare", "`x < 0` → `x <= 0`"),
        (14, "compare", "`y >= 1` → `y > 1`"),
        (14, "constant", "`0` → `1`"),
        (14, "constant", "`1` → `2`"),
        (14, "constant", "`1` → `0`"),
        (14, "constant", "`1` → `(-1)`"),
        (15, "remove", '`raise ValueError(f"x must be >= {0 + 1}, got {x}")` → `pass`'),
    }
    line_16 = {
        "`min(x * 2, 10) - torch.where(x > 0, a, b) + t.clamp(min=0)` → "
        "`min(x * 2, 10) - torch.where(x > 0, a, b) - t.clamp(min=0)`",
        "`min(x * 2, 10) - torch.where(x > 0, a, b)` → `min(x * 2, 10) + torch.where(x > 0, a, b)`",
        "`min` → `max`",
        "`x * 2` → `x / 2`",
        "`x > 0` → `x >= 0`",
        "`torch.where(x > 0, a, b)` → `(a)`",
        "`torch.where(x > 0, a, b)` → `(b)`",
        "`t.clamp(min=0)` → `(t)`",
    }
    line_17 = {
        "`total += -x if not y else 0` → `pass`",
        "`total += -x if not y else 0` → `total -= -x if not y else 0`",
        "`not y` → `not (not y)`",
        "`not y` → `(y)`",
        "`-x` → `(x)`",
    }
    assert want <= found
    assert line_16 <= {d for line, _, d in found if line == 16}
    assert line_17 <= {d for line, _, d in found if line == 17}
    assert (19, "remove", '`warnings.warn("careful", RuntimeWarning, stacklevel=2 + 1)` → `pass`') in found
    lines = {line for line, _, _ in found}
    # docstrings, imports, __all__, TYPE_CHECKING, raise's message, annotations, assert, warn's
    # arguments, a `pragma: no cover` function: nothing
    assert lines <= {11, 12, 13, 14, 15, 16, 17, 19, 24, 25}
    assert (24, "return", "`def g: …` → `def g: return`") in found  # returns nothing: an early return
    assert not any(op == "return" and line == 12 for line, op, _ in found)  # f returns a value
    assert not any(op == "constant" and line in (14, 15) and "0 + 1" in d for line, op, d in found)


def test_a_mutant_is_one_change_that_compiles() -> None:
    data = SOURCE.encode()
    every = mutants.generate("pkg.py", data)
    assert len({m.id for m in every}) == len(every)  # ids are unique
    for mutant in every:
        changed = mutant.apply(data)
        assert mutants.compiles(mutant, data) and changed != data
        before, after = data.decode().splitlines(), changed.decode().splitlines()
        if mutant.operator != "return":  # the others change one place, the lines around it stay
            assert before[: mutant.line - 1] == after[: mutant.line - 1]


def test_the_library_s_mapped_files_give_mutants_of_every_operator() -> None:
    mapping = mutants.load_map(ROOT / "scripts" / "mutants.toml")
    operators = set()
    for file in mapping:
        assert (ROOT / file).is_file(), file
        assert all((ROOT / t.split("::")[0]).is_file() for t in mapping[file]), file
        operators |= {m.operator for m in mutants.generate(file, (ROOT / file).read_bytes())}
    assert operators == set(mutants.OPERATORS)


def test_the_sample_is_deterministic_and_gives_every_operator_its_share() -> None:
    file = "imle_solvers/noise.py"
    every = mutants.generate(file, (ROOT / file).read_bytes())
    first = mutants.sample(every, 20, 0, file)
    assert first == mutants.sample(every, 20, 0, file) and len(first) == 20
    assert first != mutants.sample(every, 20, 1, file)  # another seed, another draw
    assert first == sorted(first, key=lambda m: (m.line, m.col, m.index))  # in source order
    counts = {op: sum(m.operator == op for m in first) for op in mutants.OPERATORS}
    available = {op: len({(m.line, m.col) for m in every if m.operator == op}) for op in mutants.OPERATORS}
    for op in mutants.OPERATORS:  # two of each operator that has two sites, before any third
        assert counts[op] >= min(2, available[op]), op
    assert mutants.sample(every, None, 0, file) == every
    assert mutants.sample(every[:5], 20, 0, file) == every[:5]


# --- a round on a tiny repository ---------------------------------------------------------------------

TINY = """def clamp01(x):
    if x < 0:
        return 0
    return min(x, 1)


def count_up(n):
    i = 0
    while i < n:
        i += 1
    return i
"""

TESTS = """from pkg import clamp01, count_up


def test_clamp():
    assert clamp01(-1) == 0 and clamp01(0.5) == 0.5 and clamp01(2) == 1


def test_count():
    assert count_up(3) == 3
"""


@pytest.mark.slow  # a whole round in copies of the repository (half a minute)
@pytest.mark.timeout(120)
def test_a_round_kills_survives_times_out_and_leaves_the_repository_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pkg.py").write_text(TINY)
    (repo / "test_pkg.py").write_text(TESTS)
    (repo / "mutants.toml").write_text('[map]\n"pkg.py" = ["test_pkg.py"]\n')
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    monkeypatch.setattr(mutants, "ROOT", repo)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the copies go
    every = {m.description: m for m in mutants.generate("pkg.py", TINY.encode())}
    killed = every["`min` → `max`"]
    survivor = every["`x < 0` → `x <= 0`"]  # clamp01(0) is 0 either way: equivalent
    loops = every["`i += 1` → `i -= 1`"]
    equivalents = repo / "equivalent.toml"
    common = ["--map", str(repo / "mutants.toml"), "--equivalents", str(equivalents), "--min-timeout", "8"]
    out = tmp_path / "round.json"
    status = mutants.main([*common, "--only", killed.id, survivor.id, loops.id, "--json", str(out)])
    assert status == 1  # a survivor
    printed = capsys.readouterr().out
    assert "score: 2 / 3 non-equivalent mutants detected (66.7 %)" in printed
    assert f"survived: {survivor.id} [compare] `x < 0` → `x <= 0`" in printed
    records = {r["id"]: r["status"] for r in json.loads(out.read_text())}
    assert records == {killed.id: "killed", survivor.id: "survived", loops.id: "timeout"}
    assert (repo / "pkg.py").read_text() == TINY  # never written to
    assert list(scratch.iterdir()) == []  # the copies are gone

    assert mutants.main([*common, "--mark-equivalent", survivor.id, "clamp01(0) is 0 on both branches"]) == 0
    entry = equivalents.read_text()
    assert "line = 2" in entry and "clamp01(0) is 0 on both branches" in entry
    capsys.readouterr()
    assert mutants.main([*common, "--only", killed.id, survivor.id, "--show-survivors"]) == 0
    printed = capsys.readouterr().out
    assert "score: 1 / 1 non-equivalent mutants detected (100.0 %)" in printed
    assert "(1 recorded equivalents skipped)" in printed

    equivalents.write_text(entry.replace("line = 2", "line = 3"))  # the code moved: a stale entry
    assert mutants.main([*common, "--only", killed.id]) == 0
    assert "recorded equivalent matches no mutant: pkg.py:3" in capsys.readouterr().out


def test_at_most_two_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutants.main(["--jobs", "3", "--list"]) == 2
    assert "--jobs must be between 1 and 2, got 3" in capsys.readouterr().err
