"""Graph adapters vs their bare solver calls, per call, measured in one run.

Rows: ``adapter``, ``instance``, ``adapter_ms`` (the oracle's ``solve``, or ``solve_batch`` per row),
``bare_ms`` (the library call alone on a graph built beforehand with its weights in place; a
``solve_batch`` row gives the time per row of a batch short enough to take about as long as one
bare measurement round, so that both are equally exposed to preemption on a shared machine),
``ratio = adapter_ms / bare_ms`` and ``reference_ms`` (empty: no reference time).

These rows are the first part of ``imle-solvers bench adapters``. Run alone:

```python
from imle_solvers.app.report import format_table
from imle_solvers.benchmarks import adapters_graphs

print(format_table(adapters_graphs.run(quick=True)))
```
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..adapters.graphs import GridShortestPath, Matching, ShortestPath, SpanningTree
from ..errors import require
from ._timing import time_per_call

__all__ = ["run"]


def _row(
    adapter: str,
    instance: str,
    adapter_fn: Callable[[], Any],
    bare_fn: Callable[[], Any],
    rounds: int,
    min_time: float,
    reference_ms: float | None = None,
    per: int = 1,
) -> dict[str, Any]:
    """Interleave ``rounds`` short measurements (``time_per_call`` rounds of about ``min_time``) of the
    adapter and of the bare call, and report the lower quartile of each: on a shared machine both
    sides then see the same load, and the quartile ignores the rounds that were preempted."""
    a_s, b_s = [], []
    for _ in range(rounds):
        a_s.append(1e3 * time_per_call(adapter_fn, repeat=1, min_time=min_time) / per)
        b_s.append(1e3 * time_per_call(bare_fn, repeat=1, min_time=min_time))
    a_ms, b_ms = float(np.percentile(a_s, 25)), float(np.percentile(b_s, 25))
    row: dict[str, Any] = {
        "adapter": adapter,
        "instance": instance,
        "adapter_ms": a_ms,
        "bare_ms": b_ms,
        "ratio": a_ms / b_ms,
    }
    row["reference_ms"] = reference_ms if reference_ms is not None else ""
    return row


def _king_graph(h: int, w: int) -> Any:
    nx: Any = require("networkx", "graphs")
    graph = nx.grid_2d_graph(h, w)
    graph.add_edges_from(
        ((r, c), (r + 1, c + dc)) for r in range(h - 1) for c in range(w) for dc in (-1, 1) if 0 <= c + dc < w
    )
    return graph


def _grid_rows(rounds: int, min_time: float) -> list[dict[str, Any]]:
    nx: Any = require("networkx", "graphs")
    rng = np.random.default_rng(0)
    oracle = GridShortestPath(12, 12)
    cells = rng.random(oracle.n_vars) + 0.1
    batch = rng.random((16, oracle.n_vars)) + 0.1  # one 16-row chunk: ~1 ms calls, like the bare rounds
    # bare SciPy: the vertex-weighted grid as a directed graph (arc u → v costs w_v), prebuilt
    tail, head = oracle._tail, oracle._head
    matrix = sp.csr_matrix((cells[head], (tail, head)), shape=(oracle.n_vars, oracle.n_vars))

    def bare_scipy() -> Any:
        return csgraph.dijkstra(matrix, directed=True, indices=0, return_predecessors=True)

    # bare NetworkX: the same directed graph with its arc weights set
    graph = _king_graph(12, 12).to_directed()
    nx.set_edge_attributes(graph, {(u, v): cells[v[0] * 12 + v[1]] for u, v in graph.edges}, "weight")

    def bare_networkx() -> Any:
        return nx.dijkstra_path(graph, (0, 0), (11, 11), weight="weight")

    inst = "12×12 cells, 8-neighbour"
    return [
        _row(
            "GridShortestPath.solve",
            f"{inst} vs scipy dijkstra",
            lambda: oracle.solve(cells),
            bare_scipy,
            rounds,
            min_time,
            0.11,
        ),
        _row(
            "GridShortestPath.solve_batch (per row, B=16)",
            f"{inst} vs scipy dijkstra",
            lambda: oracle.solve_batch(batch),
            bare_scipy,
            rounds,
            min_time,
            0.11,
            per=16,
        ),
        _row(
            "GridShortestPath.solve",
            f"{inst} vs networkx dijkstra",
            lambda: oracle.solve(cells),
            bare_networkx,
            rounds,
            min_time,
            0.75,
        ),
    ]


def _shortest_path_rows(rounds: int, min_time: float) -> list[dict[str, Any]]:
    nx: Any = require("networkx", "graphs")
    rng = np.random.default_rng(1)
    dag = nx.DiGraph()
    for r in range(5):
        for c in range(5):
            if c + 1 < 5:
                dag.add_edge((r, c), (r, c + 1))  # east
            if r + 1 < 5:
                dag.add_edge((r, c), (r + 1, c))  # north
    oracle = ShortestPath(dag, (0, 0), (4, 4))
    costs = rng.random(oracle.n_vars)
    nx.set_edge_attributes(dag, dict(zip(oracle.edges, costs)), "weight")
    batch = rng.random((64, oracle.n_vars))
    rows = [
        _row(
            "ShortestPath (DAG DP)",
            "5×5 grid DAG (east/north arcs) vs networkx dijkstra",
            lambda: oracle.solve(costs),
            lambda: nx.dijkstra_path(dag, (0, 0), (4, 4)),
            rounds,
            min_time,
        ),
        _row(
            "ShortestPath.solve_batch (DAG DP, per row, B=64)",
            "5×5 grid DAG (east/north arcs) vs networkx dijkstra",
            lambda: oracle.solve_batch(batch),
            lambda: nx.dijkstra_path(dag, (0, 0), (4, 4)),
            rounds,
            min_time,
            per=64,
        ),
        _row(
            "ShortestPath (DAG DP)",
            "5×5 grid DAG (east/north arcs) vs networkx bellman-ford",
            lambda: oracle.solve(costs),
            lambda: nx.bellman_ford_path(dag, (0, 0), (4, 4)),
            rounds,
            min_time,
        ),
    ]
    # a cyclic digraph: non-negative costs (Dijkstra) and costs c_uv + p_u − p_v (negative arcs,
    # no negative cycle: Bellman-Ford)
    graph = nx.gnp_random_graph(60, 0.08, seed=3, directed=True)
    general = ShortestPath(graph, 0, 59)
    pos = rng.random(general.n_vars)
    pot = 3 * rng.random(60)
    neg = pos + np.array([pot[u] - pot[v] for u, v in general.edges])
    inst = f"gnp(60, 0.08) digraph, {general.n_vars} arcs"
    for name, w, bare_nx, bare_sp in (
        ("dijkstra", pos, nx.dijkstra_path, csgraph.dijkstra),
        ("bellman-ford", neg, nx.bellman_ford_path, csgraph.bellman_ford),
    ):
        weighted = graph.copy()
        nx.set_edge_attributes(weighted, dict(zip(general.edges, w)), "weight")
        matrix = general._matrix(general._arc_costs(w)).copy()  # the matrix the adapter fills, prebuilt
        rows.append(
            _row(
                f"ShortestPath ({name})",
                f"{inst} vs scipy {name}",
                partial(general.solve, w),
                partial(bare_sp, matrix, directed=True, indices=general._s, return_predecessors=True),
                rounds,
                min_time,
            )
        )
        rows.append(
            _row(
                f"ShortestPath ({name})",
                f"{inst} vs networkx",
                partial(general.solve, w),
                partial(bare_nx, weighted, 0, 59),
                rounds,
                min_time,
            )
        )
        if name == "dijkstra":
            batch = pos[None, :] * (0.5 + rng.random((16, 1)))  # 16 non-negative rows: one SciPy call
            rows.append(
                _row(
                    "ShortestPath.solve_batch (dijkstra, per row, B=16)",
                    f"{inst} vs scipy {name}",
                    partial(general.solve_batch, batch),
                    partial(bare_sp, matrix, directed=True, indices=general._s, return_predecessors=True),
                    rounds,
                    min_time,
                    per=16,
                )
            )
    return rows


def _matching_tree_rows(rounds: int, min_time: float) -> list[dict[str, Any]]:
    nx: Any = require("networkx", "graphs")
    rng = np.random.default_rng(2)
    rows = []
    for name, graph in (
        ("K_12 (general)", nx.complete_graph(12)),
        ("K_8,8 (bipartite)", nx.complete_bipartite_graph(8, 8)),
    ):
        oracle = Matching(graph)
        w = rng.random(oracle.n_vars)
        weighted = graph.copy()
        nx.set_edge_attributes(weighted, dict(zip(oracle.edges, w)), "weight")
        rows.append(
            _row(
                "Matching",
                f"{name}, {oracle.n_vars} edges vs networkx max_weight_matching",
                partial(oracle.solve, w),
                partial(nx.max_weight_matching, weighted),
                rounds,
                min_time,
            )
        )
    graph = nx.gnm_random_graph(100, 400, seed=4)
    tree = SpanningTree(graph)
    w = rng.normal(size=tree.n_vars)
    weighted = graph.copy()
    nx.set_edge_attributes(weighted, dict(zip(tree.edges, w)), "weight")
    rows.append(
        _row(
            "SpanningTree",
            "gnm(100, 400) vs networkx minimum_spanning_tree",
            lambda: tree.solve(w),
            lambda: nx.minimum_spanning_tree(weighted),
            rounds,
            min_time,
        )
    )
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time every graph adapter against its bare solver call; returns one dict per row."""
    rounds, min_time = (8, 0.001) if quick else (60, 0.001)
    return [
        *_grid_rows(rounds, min_time),
        *_shortest_path_rows(rounds, min_time),
        *_matching_tree_rows(rounds, min_time),
    ]
