"""The tutorials in examples/ (percent-format notebooks) run top to bottom and reach their results."""

from __future__ import annotations

import re
import runpy
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


@pytest.mark.timeout(90)  # the TSP tutorial starts a process pool and a Dask cluster
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IMLE_SOLVERS_TUTORIAL_QUICK", "1")  # the TSP tutorial's small sizes
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # its pool workers import this checkout, whatever the cwd
    namespace = runpy.run_path(str(path), run_name="tutorial")
    out = capsys.readouterr().out
    if path.stem == "tutorial_declare_ilp":
        curve = [float(v) for v in re.findall(r"test regret (?:before training: )?([0-9.]+)", out)]
        assert len(curve) == 4 and curve[-1] < 0.5 * curve[0]
    elif path.stem == "tutorial_tsp":
        seconds = namespace["seconds"]
        assert list(seconds) == ["in this process", "process pool, 2 workers", "Dask, 2 workers"]
        assert all(s > 0 for s in seconds.values()) and "a predicted tour: [0, " in out
    elif path.stem == "tutorial_custom_adapter":
        assert "agrees with brute force" in out and "batch row 2" in out
    else:
        results = namespace["results"]
        assert set(results) == {"I-MLE", "SPO+", "two-stage"}
        assert results["I-MLE"] < 0.3 and results["SPO+"] < 0.3  # from 0.63 untrained
