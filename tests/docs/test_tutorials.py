"""The tutorials in examples/ (percent-format notebooks) run top to bottom and reach their results."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TUTORIALS = sorted(ROOT.joinpath("examples").glob("tutorial_*.py"))


def test_four_tutorials_exist() -> None:
    names = {p.stem for p in TUTORIALS}
    assert names == {
        "tutorial_declare_ilp",
        "tutorial_custom_adapter",
        "tutorial_predict_then_optimize",
        "tutorial_tsp",
    }


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_is_a_notebook(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# %% [markdown]\n# # Tutorial")
    assert len(re.findall(r"^# %%$", text, flags=re.M)) >= 3  # code cells
    assert "__main__" not in text  # cells run top to bottom, as in a notebook


# the TSP tutorial starts a process pool and a Dask cluster in a fresh interpreter (about a minute):
# `make test-slow` runs it; tests/pool/test_pool_scripts.py keeps the unguarded-script case in the default run
RUNS = [pytest.param(p, marks=pytest.mark.slow) if p.stem == "tutorial_tsp" else p for p in TUTORIALS]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_tutorial_runs_the_obvious_way(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # as `python examples/tutorial_x.py` runs it: as __main__, with no main guard (cells run top to
    # bottom). The TSP tutorial starts process and Dask workers, which must not re-run the script: it runs
    # in a fresh interpreter, exactly that way; the others run in this one as __main__ (the same thing
    # without workers, and seconds faster)
    monkeypatch.setenv("IMLE_SOLVERS_TUTORIAL_QUICK", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(tmp_path)
    if path.stem == "tutorial_tsp":
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=140)
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
    else:
        runpy.run_path(str(path), run_name="__main__")
        out = capsys.readouterr().out
    if path.stem == "tutorial_declare_ilp":
        curve = [float(v) for v in re.findall(r"test regret (?:before training: )?([0-9.]+)", out)]
        assert len(curve) == 4 and curve[-1] < 0.5 * curve[0]
    elif path.stem == "tutorial_tsp":
        rows = re.findall(
            r"^(in this process|process pool, 2 workers|Dask, 2 workers) +([0-9.]+) s/epoch", out, re.M
        )
        assert [name for name, _ in rows] == ["in this process", "process pool, 2 workers", "Dask, 2 workers"]
        assert all(float(s) > 0 for _, s in rows) and "a predicted tour: [0, " in out
    elif path.stem == "tutorial_custom_adapter":
        assert "agrees with brute force" in out and "batch row 2" in out
    else:
        after = dict(re.findall(r"^(I-MLE|SPO\+|two-stage) +test regret [0-9.]+ → ([0-9.]+)", out, re.M))
        assert set(after) == {"I-MLE", "SPO+", "two-stage"}
        assert float(after["I-MLE"]) < 0.3 and float(after["SPO+"]) < 0.3  # from 0.63 untrained
