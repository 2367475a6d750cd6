"""``imle-solvers bench backends``: which ILP back end to use for which problem shape.

Times one `ILP` per problem shape on every back end that accepts it, per call with new weights
every call (the model is built once, as a layer uses it):

* a 3 × 3 assignment (9 binary variables, 6 equality rows);
* a 12-item 0/1 knapsack with two capacity rows;
* the LP relaxation of a 5 × 5 grid shortest path as a flow problem (40 arcs, 25 flow rows; the
  constraint matrix is totally unimodular, so the LP optimum is a path). CP-SAT takes no continuous
  variables, so it solves the integer model there.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = ["BACKENDS", "problems", "run"]

BACKENDS: tuple[Literal["cpsat", "cbc", "highs", "gurobi", "scip"], ...] = (
    "cpsat",
    "cbc",
    "highs",
    "gurobi",
    "scip",
)
"""The back ends timed, each where its package is installed (`PACKAGES`)."""
PACKAGES = {"cpsat": "ortools", "cbc": "pulp", "highs": "highspy", "gurobi": "gurobipy", "scip": "pyscipopt"}
"""The package each back end needs; a back end without it gets a row that says so instead of a time."""


def _assignment(n: int) -> dict[str, Any]:
    a_eq = np.zeros((2 * n, n * n))
    for i in range(n):
        a_eq[i, i * n : (i + 1) * n] = 1.0  # each row assigned once
        a_eq[n + i, i::n] = 1.0  # each column assigned once
    return {"c_size": n * n, "A_eq": a_eq, "b_eq": np.ones(2 * n), "sense": "max"}


def _knapsack(n_items: int, rng: np.random.Generator) -> dict[str, Any]:
    weights = rng.integers(3, 8, size=(2, n_items)).astype(float)  # [2, n]
    return {"c_size": n_items, "A_ub": weights, "b_ub": np.full(2, 20.0), "sense": "max"}


def _grid_flow(size: int) -> dict[str, Any]:
    nodes = size * size
    arcs = [(v, v + 1) for v in range(nodes) if (v + 1) % size] + [(v, v + size) for v in range(nodes - size)]
    a_eq = np.zeros((nodes, len(arcs)))
    for j, (u, v) in enumerate(arcs):
        a_eq[u, j] -= 1.0  # out of u
        a_eq[v, j] += 1.0  # into v
    b_eq = np.zeros(nodes)
    b_eq[0], b_eq[-1] = -1.0, 1.0  # one unit from the first node to the last
    return {"c_size": len(arcs), "A_eq": a_eq, "b_eq": b_eq, "sense": "min"}


def problems() -> list[tuple[str, dict[str, Any], bool]]:
    """``(name, ILP keyword arguments, is an LP)`` for each problem shape."""
    rng = np.random.default_rng(0)
    return [
        ("3×3 assignment (9 binaries)", _assignment(3), False),
        ("12-item knapsack, 2 capacity rows", _knapsack(12, rng), False),
        ("LP: 5×5 grid shortest path as flow (40 arcs)", _grid_flow(5), True),
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Milliseconds per `solve` of each (problem, back end); one row per pair."""
    import importlib.util

    from ..adapters.ilp import ILP
    from ._timing import time_per_call

    rng = np.random.default_rng(1)
    rows: list[dict[str, Any]] = []
    for name, kwargs, is_lp in problems():
        weights = rng.uniform(1.0, 10.0, size=(64, kwargs["c_size"]))  # new weights every call
        for backend in BACKENDS:
            integer = not (is_lp and backend != "cpsat")
            if importlib.util.find_spec(PACKAGES[backend]) is None:
                rows.append({"problem": name, "backend": backend, "not installed": PACKAGES[backend]})
                continue
            oracle = ILP(**kwargs, integer=integer, backend=backend)
            counter = iter(range(10**9))

            def call(oracle: Any = oracle, counter: Any = counter, weights: Any = weights) -> None:
                oracle.solve(weights[next(counter) % len(weights)])

            seconds = time_per_call(call, repeat=3 if quick else 5, min_time=0.05 if quick else 0.2)
            rows.append(
                {
                    "problem": name,
                    "backend": backend,
                    "model": "integer" if integer else "LP",
                    "ms_per_solve": round(1e3 * seconds, 3),
                }
            )
    timed = [row for row in rows if "ms_per_solve" in row]
    fastest: dict[str, float] = {}
    for row in timed:
        fastest[row["problem"]] = min(fastest.get(row["problem"], np.inf), row["ms_per_solve"])
    for row in timed:
        row["vs_fastest"] = round(row["ms_per_solve"] / fastest[row["problem"]], 2)
    return rows
