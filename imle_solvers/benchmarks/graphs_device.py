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
  against CP-SAT per instance (the reference; rows skipped when OR-Tools is missing).

Host and CPU rows interleave their rounds and report the lower quartile (a shared machine loads both
alike); CUDA rows synchronise around each call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from ..adapters.graphs import GridShortestPath, TorchGridShortestPath
from ..adapters.knapsack import TorchKnapsack
from . import time_per_call

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


def run(quick: bool = False) -> list[dict[str, Any]]:
    """All rows: grid paths, then knapsack."""
    return [*_grid_rows(quick), *_knapsack_rows(quick)]
