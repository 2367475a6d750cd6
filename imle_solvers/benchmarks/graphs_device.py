"""Device-native graph oracles vs their host solvers, measured in one run (``imle-solvers bench graphs``).

Rows: ``problem``, ``instance``, ``solver``, ``device``, ``batch``, ``batch_ms`` (one call on the whole
batch), ``us_per_instance`` and ``speedup`` (the reference row's time over this row's, per instance):

* grid shortest path on terrain maps (8 neighbours), 12×12 and 30×30, batches of 256 and 4096:
  [`TorchGridShortestPath`][imle_solvers.adapters.TorchGridShortestPath] on the CPU (and on CUDA when
  available) against SciPy's batched Dijkstra in
  [`GridShortestPath`][imle_solvers.GridShortestPath] (the reference);
* PyEPO's 2-D knapsack (32 items), a batch of 320:
  [`TorchKnapsack`][imle_solvers.adapters.TorchKnapsack] (its enumeration of the feasible sets on the
  data set's weights ×100, and its dynamic programme on integer weights 3-7 with capacities 20)
  against CP-SAT per instance (the reference; rows skipped when OR-Tools is missing);
* bipartite assignment, ``n × n`` uniform random scores, ``n`` from 8 to 256, batches of 1 to 4096:
  [`TorchMatching`][imle_solvers.TorchMatching] on the CPU (and on CUDA when available) against SciPy's
  ``linear_sum_assignment`` called in a loop on a float64 array (the reference);
* spanning tree, a random connected graph of ``n`` nodes and ``4n`` edges, ``n`` from 8 to 256, batches
  of 1 to 4096: [`TorchSpanningTree`][imle_solvers.TorchSpanningTree] and the host Kruskal
  [`SpanningTree`][imle_solvers.SpanningTree] against NetworkX's ``minimum_spanning_tree`` in a loop
  (the reference; rows skipped when NetworkX is missing).

Host and CPU rows interleave their rounds and report the lower quartile (a shared machine loads both
alike); CUDA rows synchronise around each call. A slow reference is timed on the first instances of
the batch only (at least one call) and counted per instance. ``instances_per_s`` is the batch's
throughput, ``1e6 / us_per_instance``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from ..adapters.graphs import (
    GridShortestPath,
    SpanningTree,
    TorchGridShortestPath,
    TorchMatching,
    TorchSpanningTree,
)
from ..adapters.knapsack import TorchKnapsack
from ._timing import time_per_call

__all__ = ["run"]


def _quartile_ms(fns: list[Callable[[], Any]], rounds: int) -> list[float]:
    """Lower quartile of ``rounds`` interleaved single-call timings of each function, in ms."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, times):
            out.append(1e3 * time_per_call(fn, repeat=1, number=1))
    return [float(np.percentile(t, 25)) for t in times]


def _cuda_ms(fn: Callable[[], Any], rounds: int) -> float:
    def synced() -> None:
        fn()
        torch.cuda.synchronize()

    return _quartile_ms([synced], rounds)[0]


def _row(
    problem: str,
    instance: str,
    solver: str,
    device: str,
    batch: int,
    ms: float,
    ref_ms: float,
    ref_batch: int,
) -> dict[str, Any]:
    per = 1e3 * ms / batch
    return {
        "problem": problem,
        "instance": instance,
        "solver": solver,
        "device": device,
        "batch": batch,
        "batch_ms": ms,
        "us_per_instance": per,
        "instances_per_s": 1e6 / per,
        "speedup": (1e3 * ref_ms / ref_batch) / per,
    }


def _grid_rows(quick: bool) -> list[dict[str, Any]]:
    from ..data.terrain import terrain_maps

    rows: list[dict[str, Any]] = []
    cuda = torch.cuda.is_available()
    for size in (12, 30):
        maps = terrain_maps(256, size=size, seed=0).costs.float()  # [256, K·K]
        host, dev = GridShortestPath(size, size), TorchGridShortestPath(size, size)
        for batch in (256, 4096):
            w = maps.repeat(batch // 256, 1)  # [B·S, K·K]
            w_host = w.double().numpy()
            rounds = 1 if quick or (size == 30 and batch == 4096) else 3
            ref_ms, cpu_ms = _quartile_ms(
                [partial(host.solve_batch, w_host), partial(dev.solve_torch, w)], rounds
            )
            name = f"terrain {size}×{size}"
            rows.append(
                _row(
                    "grid path",
                    name,
                    "SciPy Dijkstra (GridShortestPath)",
                    "cpu",
                    batch,
                    ref_ms,
                    ref_ms,
                    batch,
                )
            )
            rows.append(_row("grid path", name, "TorchGridShortestPath", "cpu", batch, cpu_ms, ref_ms, batch))
            if cuda:
                w_gpu = w.cuda()
                gpu_ms = _cuda_ms(partial(dev.solve_torch, w_gpu), 3 if quick else 10)
                rows.append(
                    _row(
                        "grid path",
                        name,
                        "TorchGridShortestPath",
                        torch.cuda.get_device_name(),
                        batch,
                        gpu_ms,
                        ref_ms,
                        batch,
                    )
                )
    return rows


def _knapsack_rows(quick: bool) -> list[dict[str, Any]]:
    from ..data.knapsack import knapsack

    try:
        from ..adapters.ilp import ILP

        ILP(1, A_ub=[[1.0]], b_ub=[1.0], backend="cpsat").solve(np.ones(1))
        have_cpsat = True
    except ImportError:
        have_cpsat = False
    data = knapsack(320, seed=0)
    values = data.costs.float()  # [320, 32]
    item_w = np.array(data.info["item_weights"])  # [2, 32], hundredths
    small_w = np.round(item_w).astype(np.int64)  # integer weights 3-8 for the DP instance
    cases = [
        (
            "PyEPO 2-D, W×100, C = 2000",
            TorchKnapsack(np.round(100 * item_w.T).astype(np.int64), [2000, 2000]),
            item_w,
            20.0,
        ),
        ("2-D integer W 3-8, C = 20", TorchKnapsack(small_w.T, [20, 20], method="dp"), small_w, 20.0),
    ]
    rows: list[dict[str, Any]] = []
    cuda = torch.cuda.is_available()
    n_ref = 16 if quick else 64
    for name, oracle, a_ub, cap in cases:
        dev_ms = _quartile_ms([partial(oracle.solve_torch, values)], 3 if quick else 7)[0]
        if have_cpsat:
            ilp = ILP(32, A_ub=a_ub.astype(float), b_ub=[cap, cap], sense="max", backend="cpsat")
            host = values[:n_ref].double().numpy()
            ref_ms = _quartile_ms([partial(ilp.solve_batch, host)], 1 if quick else 3)[0]
            rows.append(
                _row("knapsack", name, "CP-SAT per instance (ILP)", "cpu", n_ref, ref_ms, ref_ms, n_ref)
            )
        else:
            ref_ms = float("nan")
        label = f"TorchKnapsack ({oracle.method})"
        rows.append(_row("knapsack", name, label, "cpu", 320, dev_ms, ref_ms, n_ref))
        if cuda:
            v_gpu = values.cuda()
            gpu_ms = _cuda_ms(partial(oracle.solve_torch, v_gpu), 3 if quick else 10)
            rows.append(
                _row("knapsack", name, label, torch.cuda.get_device_name(), 320, gpu_ms, ref_ms, n_ref)
            )
    return rows


_REF_INSTANCES = {8: 1024, 16: 512, 32: 256, 64: 64, 128: 16, 256: 8}
"""Instances of a batch that a per-instance reference solves (at most), by problem size."""


def _matching_rows(quick: bool) -> list[dict[str, Any]]:
    from scipy.optimize import linear_sum_assignment

    def scipy_loop(w: np.ndarray) -> None:
        for x in w:  # [n, n] float64, SciPy's own dtype
            linear_sum_assignment(x, True)

    rows: list[dict[str, Any]] = []
    cuda = torch.cuda.is_available()
    rng = np.random.default_rng(0)
    for n in (8, 32) if quick else (8, 16, 32, 64, 128, 256):
        oracle = TorchMatching(n, n)
        batches = (1, 256) if quick else (1, 16, 256, 4096) if n <= 64 else (1, 16, 256)
        for batch in batches:
            w = torch.from_numpy(rng.random((batch, n * n))).float()  # θ   [B, n·n], the layer's dtype
            k = min(batch, _REF_INSTANCES[n])
            w_ref = w[:k].double().numpy().reshape(k, n, n)
            rounds = 1 if quick or batch * n**3 > 1 << 28 else 3
            ref_ms, cpu_ms = _quartile_ms(
                [partial(scipy_loop, w_ref), partial(oracle.solve_torch, w)], rounds
            )
            name, ref = f"{n}×{n} uniform", "SciPy linear_sum_assignment, loop"
            rows.append({"suite": "matching", **_row("assignment", name, ref, "cpu", k, ref_ms, ref_ms, k)})
            row = _row(
                "assignment",
                name,
                f"TorchMatching ({torch.get_num_threads()} threads)",
                "cpu",
                batch,
                cpu_ms,
                ref_ms,
                k,
            )
            rows.append({"suite": "matching", **row})
            if cuda:
                gpu_ms = _cuda_ms(partial(oracle.solve_torch, w.cuda()), 3 if quick else 10)
                device = torch.cuda.get_device_name()
                rows.append(
                    {
                        "suite": "matching",
                        **_row("assignment", name, "TorchMatching", device, batch, gpu_ms, ref_ms, k),
                    }
                )
    return rows


def _connected_graph(n: int, m: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """``m`` distinct edges on nodes ``0 … n−1``: a random spanning path, then random pairs."""
    order = rng.permutation(n)
    edges = {(min(a, b), max(a, b)) for a, b in zip(order[:-1].tolist(), order[1:].tolist())}
    while len(edges) < min(m, n * (n - 1) // 2):
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            edges.add((min(a, b), max(a, b)))
    return sorted(edges)


def _tree_rows(quick: bool) -> list[dict[str, Any]]:
    try:
        import networkx as nx
    except ImportError:
        nx = None
    rows: list[dict[str, Any]] = []
    cuda = torch.cuda.is_available()
    rng = np.random.default_rng(0)
    for n in (8, 32) if quick else (8, 32, 128, 256):
        edges = _connected_graph(n, 4 * n, rng)
        oracle = TorchSpanningTree(n, edges)
        name = f"{n} nodes, {len(edges)} edges"
        for batch in (1, 256) if quick else (1, 256, 4096):
            w = torch.from_numpy(rng.random((batch, len(edges)))).float()  # edge costs   [B, E]
            k = min(batch, _REF_INSTANCES[n])
            w_ref = w[:k].double().numpy()
            rounds = 1 if quick else 3
            fns: list[Callable[[], Any]] = [partial(oracle.solve_torch, w)]
            if nx is not None:
                graph = nx.Graph(edges)
                fns += [
                    partial(_networkx_loop, nx, graph, edges, w_ref),
                    partial(SpanningTree(graph).solve_batch, w_ref),
                ]
            times = _quartile_ms(fns, rounds)
            ref_ms = times[1] if nx is not None else float("nan")
            if nx is not None:
                for solver, ms in (
                    ("NetworkX minimum_spanning_tree, loop", times[1]),
                    ("SpanningTree (Kruskal)", times[2]),
                ):
                    rows.append(
                        {
                            "suite": "spanning tree",
                            **_row("spanning tree", name, solver, "cpu", k, ms, ref_ms, k),
                        }
                    )
            rows.append(
                {
                    "suite": "spanning tree",
                    **_row("spanning tree", name, "TorchSpanningTree", "cpu", batch, times[0], ref_ms, k),
                }
            )
            if cuda:
                gpu_ms = _cuda_ms(partial(oracle.solve_torch, w.cuda()), 3 if quick else 10)
                device = torch.cuda.get_device_name()
                rows.append(
                    {
                        "suite": "spanning tree",
                        **_row("spanning tree", name, "TorchSpanningTree", device, batch, gpu_ms, ref_ms, k),
                    }
                )
    return rows


def _networkx_loop(nx: Any, graph: Any, edges: list[tuple[int, int]], w: np.ndarray) -> None:
    for row in w:  # weights written into the graph, then NetworkX's Kruskal
        for (a, b), x in zip(edges, row.tolist()):
            graph[a][b]["weight"] = x
        nx.minimum_spanning_tree(graph)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """All rows: grid paths and knapsack, then assignment, then spanning trees."""
    return [*_grid_rows(quick), *_knapsack_rows(quick), *_matching_rows(quick), *_tree_rows(quick)]
