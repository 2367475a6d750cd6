"""``imle-solvers bench pto-methods``: the arithmetic of its rows, with the training and the clock stubbed."""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest
import torch

import imle_solvers.benchmarks.pto_methods as bench
from imle_solvers.benchmarks import SUITES
from imle_solvers.training import METHODS


def test_summarize_means_spreads_and_ratio() -> None:
    regrets = {"a": [0.1, 0.2, 0.3], "b": [0.25, 0.45, 0.35]}
    seconds = {"a": [1.0, 3.0, 2.0], "b": [10.0, 4.0, 8.0]}
    row = bench.summarize(regrets, seconds, "a", "b")
    assert row["regret_ours"] == pytest.approx(0.2) and row["regret_pyepo"] == pytest.approx(0.35)
    assert row["regret_ours_std"] == pytest.approx(0.1) and row["regret_pyepo_std"] == pytest.approx(0.1)
    assert row["within_spread"] is False  # |0.2 − 0.35| > 0.1
    assert row["time_ratio"] == pytest.approx(2.0 / 8.0)  # medians
    row = bench.summarize({"a": [0.1, 0.3], "b": [0.3, 0.3]}, {}, "a", "b")
    assert row["within_spread"] is True and "time_ratio" not in row  # |0.2 − 0.3| ≤ std 0.141
    assert bench.summarize({"a": [0.5]}, {}, "a", "b") == {"regret_ours": 0.5, "regret_ours_std": 0.0}


def test_pairs_name_registered_methods_and_every_pyepo_family() -> None:
    assert all(ours in METHODS for ours, _ in bench.PAIRS)
    assert "pto-methods" in SUITES
    func = pytest.importorskip("pyepo.func")
    acronyms = {name for name in func.__all__ if name[0].isupper() or name.endswith("LTR")}
    assert acronyms <= {theirs for _, theirs in bench.PAIRS}


def test_run_projects_pyepo_own_model_and_reports_each_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every number of a row from stubbed runs: regrets per seed, epoch times, the projected epoch."""
    import imle_solvers.training as training

    proto = bench.Protocol(problems=(("knapsack", 10, 4, 1, 5),), seeds=(0, 1), own_model_instances=2)
    ours_time = {0: 2.0, 1: 4.0}
    calls: list[tuple[str, int | None]] = []

    def train_model(plan: Any, problem: Any, method: str, seed: int) -> Any:
        return types.SimpleNamespace(regret=0.1 * (seed + 1), epoch_time=ours_time[seed])

    def pyepo_train(pyepo: Any, name: str, model: Any, problem: Any, seed: int, p: Any, epochs: int,
                    limit: int | None = None) -> tuple[Any, float]:  # fmt: skip
        calls.append((name, limit))
        return f"model{seed}", (0.5 if limit == 2 else 10.0 + seed)

    fake_problem = types.SimpleNamespace(train=types.SimpleNamespace(split=lambda n: (None, None)),
                                         eval_oracle=None, test=None)  # fmt: skip
    monkeypatch.setattr(training, "train_model", train_model)
    monkeypatch.setattr(training, "make_problem", lambda plan, seed: fake_problem)
    monkeypatch.setattr(
        training, "evaluate", lambda model, test, oracle: {"regret": 0.3 if model == "model0" else 0.5}
    )
    monkeypatch.setattr(bench, "dataclasses", types.SimpleNamespace(replace=lambda obj, **kw: obj))
    monkeypatch.setattr(bench, "_plan", lambda *a: types.SimpleNamespace(schedule=None))
    monkeypatch.setattr(bench, "_pyepo", lambda: object())
    monkeypatch.setattr(bench, "_oracle_model", lambda pyepo, oracle: "oracle-model")

    class Own:
        def setObj(self, c: Any) -> None: ...
        def solve(self) -> None: ...

    monkeypatch.setattr(bench, "_pyepo_model", lambda *a: Own())
    monkeypatch.setattr(bench, "_pyepo_train", pyepo_train)
    fake_problem.train.costs = torch.zeros(1, 3)  # type: ignore[attr-defined]
    rows = bench.run(protocol=proto)
    assert [r["method"] for r in rows] == [ours for ours, _ in bench.PAIRS]
    row = rows[0]
    assert row["regret_ours"] == pytest.approx(0.15) and row["regret_pyepo"] == pytest.approx(0.4)
    assert row["regret_ours_std"] == pytest.approx(np.std([0.1, 0.2], ddof=1))
    assert row["s_per_epoch_ours"] == 3.0 and row["s_per_epoch_pyepo"] == 10.5
    assert row["time_ratio"] == pytest.approx(3.0 / 10.5)
    assert row["s_per_epoch_pyepo_own_model"] == pytest.approx(0.5 * 10 / 2)  # 2 instances → 10
    assert row["speed-up vs PyEPO's own model"] == pytest.approx(2.5 / 3.0)
    projections = [c for c in calls if c[1] == 2]
    assert len(projections) == len(bench.PAIRS)  # once per method, on the first seed


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_gives_a_row_per_problem_and_method() -> None:
    pytest.importorskip("pyepo")
    pytest.importorskip("pyomo.environ")
    pytest.importorskip("clarabel")
    rows = bench.run(quick=True)
    assert len(rows) == 3 * len(bench.PAIRS)
    for row in rows:
        assert 0 <= row["regret_ours"] < math.inf and 0 <= row["regret_pyepo"] < math.inf
        assert row["s_per_epoch_ours"] > 0 and row["s_per_epoch_pyepo"] > 0
        assert ("s_per_epoch_pyepo_own_model" in row) == (row["problem"] != "shortest-path")
