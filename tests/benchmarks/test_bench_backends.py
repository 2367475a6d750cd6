"""bench backends: every back end timed where its package is installed, the ratios to the fastest exact."""

from __future__ import annotations

import importlib.util

import pytest

from imle_solvers.benchmarks import _timing, backends


def test_rows_time_every_installed_backend_and_name_the_missing_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    seconds = {"cpsat": 0.0020004, "cbc": 0.008, "highs": 0.0010004, "gurobi": 0.004, "scip": 0.016}
    calls: list[str] = []
    solved: list[str] = []

    def fake_time(call, repeat: int, min_time: float) -> float:  # type: ignore[no-untyped-def]
        oracle = call.__defaults__[0]  # the oracle bound to the timed call
        calls.append(oracle.backend)
        solve = oracle.solve
        oracle.solve = lambda w: solved.append(oracle.backend) or solve(w)  # counts the timed call's solves
        call()  # one real solve: the oracle is built and solves
        return seconds[oracle.backend]

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(_timing, "time_per_call", fake_time)
    hidden = lambda name, *a: None if name == "pyscipopt" else real_find_spec(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hidden)  # SCIP as if not installed
    rows = backends.run(quick=True)
    names = [name for name, _, _ in backends.problems()]
    assert [(r["problem"], r["backend"]) for r in rows] == [(n, b) for n in names for b in backends.BACKENDS]
    for row in rows:
        if row["backend"] == "scip":
            assert row == {"problem": row["problem"], "backend": "scip", "not installed": "pyscipopt"}
            continue
        assert row["ms_per_solve"] == round(1e3 * seconds[row["backend"]], 3)  # 3 decimals of a ms
        fastest = round(1e3 * seconds["highs"], 3)  # HiGHS is the fastest here
        assert row["vs_fastest"] == round(row["ms_per_solve"] / fastest, 2)
    assert "scip" not in calls and len(calls) == 4 * len(names)
    assert solved == calls  # the timed call solves, with the back end it names
    lp = [r for r in rows if r["problem"] == names[-1] and "model" in r]
    assert {r["backend"]: r["model"] for r in lp} == {
        "cpsat": "integer",  # CP-SAT takes no continuous variables
        "cbc": "LP",
        "highs": "LP",
        "gurobi": "LP",
    }
