"""``imle-solvers bench pto --problem tsp``: the option keeps the default suite, the quick run's rows."""

from __future__ import annotations

import math

import pytest
import torch

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


# --- the arithmetic of the published tables, on stubs (no solver, no clock) ------------------------------


class _Epoch:
    def __init__(self, epoch_time: float, regret: float) -> None:
        self.epoch_time, self.regret = epoch_time, regret


class _Pool:
    """Stands in for SolverPool: records what was made, solves nothing."""

    def __init__(self, workers: int, backend: str) -> None:
        self.label = f"{backend}-{workers}"

    def start(self) -> None:
        pass

    def solve_batch(self, oracle: object, weights: object) -> None:
        pass

    def close(self) -> None:
        pass


def _stubbed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Stub every measurement of ``pto_tsp.run`` by a table of made-up seconds; returns the calls.

    Our epoch: 2 s (S=1), 4 s (S=10), 1 s (SPO+), 0.5 s (two-stage), each plus the seed. PyEPO's I-MLE takes
    3 s (S=1) and 12 s (S=10) on its first 4 instances of 64; SPO+ 6 s, two-stage 0.25 s. The pool epochs:
    40 s serial, 30 s on one process, 16 s on two, 20 s on Dask."""
    import imle_solvers.benchmarks.pto_tsp as bench
    import imle_solvers.pool as pool_module
    import imle_solvers.training as training

    calls: list[tuple[object, ...]] = []

    class Problem:
        train = test = type("Data", (), {"costs": torch.zeros(8, 10)})()
        eval_oracle = train_oracle = object()

    def train_model(plan: object, problem: object, method: str, seed: int, pool: object = None) -> _Epoch:
        samples = plan.options.samples  # type: ignore[attr-defined]
        batch, epochs = plan.schedule.batch_size, plan.schedule.epochs  # type: ignore[attr-defined]
        calls.append(("ours", method, samples, batch, epochs, getattr(pool, "label", None), seed))
        if pool is not None or (method == "imle" and batch == bench.POOL_BATCH):
            label = getattr(pool, "label", "serial")
            return _Epoch({"serial": 40.0, "process-1": 30.0, "process-2": 16.0, "dask-2": 20.0}[label], 0.0)
        base = {("imle", 1): 2.0, ("imle", 10): 4.0, ("spo+", 1): 1.0, ("two-stage", 1): 0.5}[method, samples]
        return _Epoch(base + seed, 0.1 * (seed + 1))

    def pyepo_train(
        kind: str,
        epo: object,
        proto: object,
        train: object,
        seed: int,
        samples: int = 10,
        limit: int | None = None,
    ) -> tuple[object, list[float]]:
        calls.append(("pyepo", kind, samples, limit, seed))
        if kind == "imle":
            return object(), [{1: 3.0, 10: 12.0}[samples]]
        return object(), [{"spo+": 6.0, "two-stage": 0.25}[kind]]

    monkeypatch.setattr(bench, "_pyepo", lambda: object())
    monkeypatch.setattr(bench, "_pyepo_train", pyepo_train)
    monkeypatch.setattr(training, "train_model", train_model)
    monkeypatch.setattr(training, "make_problem", lambda plan, seed: Problem())
    monkeypatch.setattr(training, "evaluate", lambda model, test, oracle: {"regret": 0.3})
    monkeypatch.setattr(pool_module, "SolverPool", _Pool)
    return calls


def test_the_side_by_side_table_projects_pyepo_s_epoch_and_divides_the_right_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import imle_solvers.benchmarks.pto_tsp as bench

    calls = _stubbed(monkeypatch)
    proto = bench.Protocol(
        nodes=5, n_train=64, n_test=8, epochs=3, seeds=(0, 2), pyepo_instances=4, batch_size=8
    )
    rows = bench.run(protocol=proto)
    side = {r["configuration"]: r for r in rows if r["suite"] == "side by side"}
    # PyEPO's I-MLE: timed on its first 4 instances, projected to 64: 3 s → 48 s, 12 s → 192 s a epoch
    assert side["PyEPO: I-MLE, S=1 (projected)"]["s_per_epoch"] == 48.0
    assert side["PyEPO: I-MLE, S=10 (projected)"]["s_per_epoch"] == 192.0
    assert {c[3] for c in calls if c[0] == "pyepo" and c[1] == "imle"} == {4}  # the first 4 instances
    # our I-MLE against PyEPO's at equal S, seed by seed: S=1 48/2 = 24 and 48/4 = 12; S=10 192/4, 192/6
    s1, s10 = side["ours: I-MLE, S=1"], side["ours: I-MLE, S=10"]
    assert (s1["speed-up min"], s1["speed-up max"], s1["speed-up vs PyEPO I-MLE"]) == (12.0, 24.0, 18.0)
    assert (s10["speed-up min"], s10["speed-up max"]) == (32.0, 48.0)
    assert s1["s_per_epoch"] == 3.0 and s10["s_per_epoch"] == 5.0  # medians over the seeds (2 and 4, 4 and 6)
    for label, row in side.items():  # speed-ups only on our I-MLE rows
        assert ("speed-up vs PyEPO I-MLE" in row) == label.startswith("ours: I-MLE"), label
    assert side["PyEPO: SPO+"]["s_per_epoch"] == 6.0 and side["PyEPO: SPO+"]["regret_mean"] == pytest.approx(
        0.3
    )
    assert "regret_mean" not in side["PyEPO: I-MLE, S=10 (projected)"]
    assert side["ours: SPO+"]["regret_mean"] == pytest.approx(0.2) and side["ours: SPO+"]["regret_std"] > 0


def test_the_pool_table_measures_each_pool_against_the_serial_epoch_at_pyepo_s_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import imle_solvers.benchmarks.pto_tsp as bench

    calls = _stubbed(monkeypatch)
    proto = bench.Protocol(
        nodes=5, n_train=64, n_test=8, epochs=3, seeds=(0,), pyepo_instances=4, batch_size=8
    )
    pools = [r for r in bench.run(protocol=proto) if r["suite"] == "pools"]
    assert [r["s_per_epoch"] for r in pools] == [40.0, 30.0, 16.0, 20.0]
    assert [r["speed-up vs serial"] for r in pools] == [1.0, 40 / 30, 2.5, 2.0]
    pool_calls = [c for c in calls if c[0] == "ours" and c[3] == bench.POOL_BATCH]
    assert [c[5] for c in pool_calls] == [None, "process-1", "process-2", "dask-2"]
    assert {(c[1], c[2], c[4]) for c in pool_calls} == {("imle", 10, 1)}  # S = 10, one epoch, batch 32
    table = [c for c in calls if c[0] == "ours" and c[3] == proto.batch_size and c[6] == 0]
    assert {c[4] for c in table} == {3}  # the side-by-side runs keep the protocol's epochs and batch
