"""The scripts behind the numbers of the performance and PyEPO pages measure both sides in one run."""

from __future__ import annotations

import runpy

import pytest

from tests.support.paths import ROOT

pytest.importorskip("pyepo")


@pytest.mark.slow  # about 4 s: PyEPO's models and eight short trainings
@pytest.mark.timeout(120)
def test_pyepo_migration_times_both_sides_repeat_by_repeat(capsys: pytest.CaptureFixture[str]) -> None:
    script = runpy.run_path(str(ROOT / "examples" / "pyepo_migration.py"), run_name="example")
    results = script["compare"](n_train=16, n_test=8, epochs=1, pyepo_imle=False, repeats=2)
    ours = results["imle_solvers SPO+ (PyEPOOracle)"]
    assert ours["regret"] == pytest.approx(results["PyEPO SPO+"]["regret"], abs=0.02)  # one loss, one solver
    assert ours["speed-up"] > 0 and results["PyEPO SPO+"]["seconds"] > 0
    assert "imle_solvers I-MLE (DAGShortestPath)" in results and "PyEPO I-MLE" not in results
    out = capsys.readouterr().out
    assert "speed-up " in out and "over 2 repeats" in out  # the spread over repeats is printed


@pytest.mark.timeout(120)
def test_bench_pto_times_pyepo_in_the_same_run() -> None:
    from imle_solvers.benchmarks import pto
    from imle_solvers.data import shortest_path

    train, _ = shortest_path(24, deg=2, noise_width=0.5, seed=0).split(16)
    epoch = pto._pyepo_epoch(train)
    assert epoch is not None
    assert 0 < epoch(0) < 60
