"""``imle-solvers bench pto --problem tsp``: the option keeps the default suite, the quick run's rows."""

from __future__ import annotations

import math

import pytest

import imle_solvers.benchmarks.pto as pto
from imle_solvers.benchmarks import BenchConfig
from imle_solvers.errors import ConfigError


def test_problem_option_reaches_pto_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BenchConfig(suite="pto").suite_options("pto") == {}  # the shortest-path suite, unchanged
    assert BenchConfig(suite="pto", problem="tsp").suite_options("pto") == {"problem": "tsp"}
    assert BenchConfig(suite="all", problem="tsp").suite_options("layer") == {}
    with pytest.raises(ConfigError, match="pto suite only"):
        BenchConfig(suite="backends", problem="tsp")
    seen: list[bool] = []
    monkeypatch.setattr("imle_solvers.benchmarks.pto_tsp.run", lambda quick: seen.append(quick) or [])
    assert pto.run(quick=True, problem="tsp") == [] and seen == [True]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_quick_run_gives_both_tables() -> None:
    pytest.importorskip("pyomo.environ")
    pytest.importorskip("distributed")
    rows = pto.run(quick=True, problem="tsp")
    side = {r["configuration"]: r for r in rows if r["suite"] == "side by side"}
    pools = {r["configuration"]: r for r in rows if r["suite"] == "pools"}
    assert len(side) + len(pools) == len(rows)
    ours = [f"ours: {name}" for name in ("I-MLE, S=1", "I-MLE, S=10", "SPO+", "two-stage")]
    theirs = [
        "PyEPO: SPO+",
        "PyEPO: two-stage",
        "PyEPO: I-MLE, S=1 (projected)",
        "PyEPO: I-MLE, S=10 (projected)",
    ]
    assert list(side) == ours + theirs
    for name in ours + theirs[:2]:
        assert 0 <= side[name]["regret_mean"] < math.inf and side[name]["s_per_epoch"] > 0
    for name in ours[:2]:
        assert side[name]["speed-up vs PyEPO I-MLE"] > 0
    assert "regret_mean" not in side[theirs[3]]  # timed only
    assert len(pools) == 4 and all(r["s_per_epoch"] > 0 for r in pools.values())
    assert next(iter(pools.values()))["speed-up vs serial"] == 1.0
