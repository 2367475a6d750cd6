"""``imle-solvers bench pool``: serial vs thread vs process pools, and the layer step vs its bare solves.

All timings of a part are taken in one run, round-robin (one call of each variant per round, in a
shuffled order; median over rounds), so that a load change on a shared machine hits every variant alike.

Parts:

* ``ilp`` — a 0/1 knapsack with two capacity rows on CP-SAT (``ILP(backend="cpsat")``, ≥ 1 ms per
  solve), ``B·S = 64·4`` rows;
* ``grid`` — ``GridShortestPath(12, 12)`` (SciPy Dijkstra, ~0.1–0.3 ms per row), ``B·S = 64·4`` rows;
* ``overhead`` — the process pool's fixed cost per call (a no-op oracle, 2 and 8 chunks);
* ``layer`` — one I-MLE step (forward + backward = two pool calls of ``B·S`` rows) against the same
  two batches solved bare (``oracle.solve_batch``) and through the pool alone.

Goals: process ≥ 1.8× serial on 2 cores for ``ilp``; ≥ 0.95× serial for ``grid`` (the pool falls back to
in-process solving when parallelism does not pay); layer + pool overhead ≤ 10 %.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..oracle import MapOracle
from ..pool import SolverPool
from ..target import PerturbedTarget

__all__ = ["NoopOracle", "grid_instance", "ilp_instance", "run"]

BATCH, SAMPLES = 64, 4


def ilp_instance(seed: int = 0) -> MapOracle:
    """A 12-item 0/1 knapsack with two capacity constraints on CP-SAT (one search worker per solve)."""
    from ..adapters.ilp import ILP

    rng = np.random.default_rng(seed)
    a = rng.integers(1, 20, size=(2, 12))  # item sizes in two dimensions   [2, m]
    return ILP(12, A_ub=a, b_ub=a.sum(1) // 3, sense="max", backend="cpsat")


def grid_instance() -> MapOracle:
    """``GridShortestPath(12, 12)`` with 8 neighbours (the Warcraft setting)."""
    from ..adapters.graphs import GridShortestPath

    return GridShortestPath(12, 12)


def _weights(oracle: MapOracle, rows: int, seed: int) -> np.ndarray:
    """Oracle-sense weights: knapsack values in [0, 10), or grid costs in [10, 20) (no negative cycle
    after perturbation)."""
    rng = np.random.default_rng(seed)
    low = 0.0 if oracle.sense == "max" else 10.0
    return rng.uniform(low, low + 10.0, size=(rows, oracle.n_vars))


class NoopOracle(MapOracle):
    """Returns zeros at once: what is left of a pool call is the pool's own cost (dispatch, pipes)."""

    def __init__(self, n_vars: int) -> None:
        self.n_vars = n_vars

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return np.zeros(self.n_vars)

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(weights))


def _round_robin(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each function, one call of each per round in a shuffled order."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fn()
    order = np.random.default_rng(0)
    names = list(fns)
    for _ in range(rounds):
        for name in order.permutation(names):
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


class _Recorder:
    """A pool wrapper that keeps a copy of every batch the layer sends."""

    def __init__(self, pool: SolverPool) -> None:
        self.pool = pool
        self.batches: list[np.ndarray] = []

    def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        self.batches.append(weights.copy())
        return self.pool.solve_batch(oracle, weights)


def _backend_rows(
    part: str, oracle: MapOracle, weights: np.ndarray, pools: dict[str, SolverPool], rounds: int, goal: float
) -> list[dict[str, Any]]:
    fns: dict[str, Callable[[], Any]] = {"bare oracle.solve_batch": lambda: oracle.solve_batch(weights)}
    rows: list[dict[str, Any]] = []
    reference = oracle.solve_batch(weights)
    for name, pool in list(pools.items()):  # let each pool time the oracle before the clock runs
        try:
            if not np.array_equal(pool.solve_batch(oracle, weights), reference):
                raise AssertionError("states differ from oracle.solve_batch")
        except Exception as exc:  # reported as a row, not hidden: e.g. an oracle that is not thread-safe
            rows.append(
                {
                    "part": part,
                    "variant": name,
                    "rows": weights.shape[0],
                    "ms": None,
                    "per_row_ms": None,
                    "vs_serial": None,
                    "plan": f"error: {type(exc).__name__}: {str(exc)[:60]}",
                    "goal": "",
                    "met": "",
                }
            )
            pools = {k: v for k, v in pools.items() if k != name}
            continue
        fns[name] = (lambda p: lambda: p.solve_batch(oracle, weights))(pool)
    plans: dict[str, str] = {}
    before = {name: dict(pool.stats) for name, pool in pools.items()}
    medians = _round_robin(fns, rounds)
    for name, pool in pools.items():  # which path the timed calls took
        par = pool.stats["parallel_calls"] - before[name]["parallel_calls"]
        calls = pool.stats["calls"] - before[name]["calls"]
        chunks = pool.last_plan.chunks if pool.last_plan is not None else 0
        plans[name] = f"parallel {par}/{calls} calls" + (f", {chunks} chunks" if par else "")
    base = medians["bare oracle.solve_batch"]
    for name, sec in medians.items():
        speedup = base / sec
        row: dict[str, Any] = {
            "part": part,
            "variant": name,
            "rows": weights.shape[0],
            "ms": sec * 1e3,
            "per_row_ms": sec * 1e3 / weights.shape[0],
            "vs_serial": speedup,
            "plan": plans.get(name, "-"),
            "goal": "",
            "met": "",
        }
        if name == "process×2":
            row["goal"] = f"≥ {goal}× serial"
            row["met"] = "yes" if speedup >= goal else "no"
        rows.append(row)
    return rows


def _layer_rows(
    part: str, oracle: MapOracle, pool: SolverPool, label: str, rounds: int, noise: NoiseDistribution
) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(0)
    m = oracle.n_vars
    weights = torch.from_numpy(_weights(oracle, BATCH, seed=7))  # oracle-sense weights   [B, m]
    upstream = 0.05 * torch.randn(BATCH, SAMPLES, m, generator=gen, dtype=torch.float64)
    recorder = _Recorder(pool)
    layer = IMLE(oracle, noise, PerturbedTarget(10.0), samples=SAMPLES, pool=recorder, generator=gen)

    def step() -> None:
        w = weights.clone().requires_grad_(True)
        (layer(w) * upstream).sum().backward()

    step()
    fwd, bwd = recorder.batches[-2:]  # the two batches of one step   [B·S, m] each
    medians = _round_robin(
        {
            "step": step,
            "bare": lambda: (oracle.solve_batch(fwd), oracle.solve_batch(bwd)),
            "pool": lambda: (pool.solve_batch(oracle, fwd), pool.solve_batch(oracle, bwd)),
        },
        rounds,
    )
    # serial pool: layer + pool against the bare solves; a parallel pool: the layer against that pool's
    # own two calls (what the step adds on top of solving its rows)
    reference = medians["bare"] if pool.backend == "serial" else medians["pool"]
    over = medians["step"] / reference - 1.0
    what = "bare solves" if pool.backend == "serial" else "pool solves"
    return [
        {
            "part": part,
            "variant": f"I-MLE step, {label}, {type(noise).__name__} (2 × {BATCH * SAMPLES} rows)",
            "rows": 2 * BATCH * SAMPLES,
            "ms": medians["step"] * 1e3,
            "per_row_ms": medians["step"] * 1e3 / (2 * BATCH * SAMPLES),
            "vs_serial": medians["bare"] / medians["step"],
            "plan": (
                f"bare {medians['bare'] * 1e3:.1f} ms, pool {medians['pool'] * 1e3:.1f} ms: step {over:+.1%}"
            ),
            "goal": f"step ≤ 1.10× {what}",
            "met": "yes" if over <= 0.10 else "no",
        }
    ]


def _cpu_rows(part: str, oracle: MapOracle, weights: np.ndarray, forced: SolverPool) -> list[dict[str, Any]]:
    """CPU seconds, not wall: does the work divide, and how many cores did each side get?

    On a machine whose cores are taken by others (or whose scheduler shares CPU per session, Linux
    autogroup), more processes get no more CPU; the CPU times still show whether the pool divides the
    work without inflating it. ``projected`` = serial CPU / busiest worker's CPU: the speed-up on free
    cores, ignoring the pool's fixed cost (see the ``overhead`` rows). Needs ``psutil``.
    """
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with dask[distributed]
        return []

    def cpu(proc: Any) -> float:
        times = proc.cpu_times()
        return float(times.user + times.system)

    me = psutil.Process()
    c0, t0 = cpu(me), time.perf_counter()
    oracle.solve_batch(weights)
    serial_cpu, serial_wall = cpu(me) - c0, time.perf_counter() - t0
    workers = [psutil.Process(pid) for pid in forced.worker_pids()]
    before = [cpu(w) for w in workers]
    t0 = time.perf_counter()
    forced.solve_batch(oracle, weights)
    wall = time.perf_counter() - t0
    used = [cpu(w) - b for w, b in zip(workers, before)]
    projected = serial_cpu / max(max(used), 1e-9)
    return [
        {
            "part": part,
            "variant": "CPU time: serial vs process×2 (fallback=False)",
            "rows": weights.shape[0],
            "ms": None,
            "per_row_ms": None,
            "vs_serial": None,
            "plan": (
                f"serial {serial_cpu:.2f} s CPU on {serial_cpu / serial_wall:.2f} cores; workers "
                f"{' + '.join(f'{u:.2f}' for u in used)} s CPU on {sum(used) / wall:.2f} cores"
            ),
            "goal": f"projected on 2 free cores: {projected:.2f}×",
            "met": "",
        }
    ]


def _overhead_rows(forced: SolverPool, rounds: int) -> list[dict[str, Any]]:
    """The process pool's fixed cost per call: a no-op oracle on a 256 × 144 batch, 2 and 8 chunks."""
    oracle = NoopOracle(144)
    weights = _weights(oracle, BATCH * SAMPLES, seed=3)
    rows = []
    for chunks in (2, 8):
        forced.chunksize = weights.shape[0] // chunks
        try:
            sec = _round_robin({"noop": lambda: forced.solve_batch(oracle, weights)}, rounds)["noop"]
        finally:
            forced.chunksize = None
        rows.append(
            {
                "part": "overhead",
                "variant": f"process×2, no-op oracle, {chunks} chunks",
                "rows": weights.shape[0],
                "ms": sec * 1e3,
                "per_row_ms": sec * 1e3 / weights.shape[0],
                "vs_serial": None,
                "plan": f"{2 * weights.nbytes / 1e6:.2f} MB through the pipes",
                "goal": "",
                "met": "",
            }
        )
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the three parts; returns one row per variant (``vs_serial`` = bare serial time / this time)."""
    rows: list[dict[str, Any]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the cores belong to the pool's workers (and torch ops here are small)
    try:
        rows = _run(quick)
    finally:
        torch.set_num_threads(threads)
    return rows


def _run(quick: bool) -> list[dict[str, Any]]:
    slow, fast = (2, 5) if quick else (4, 40)  # rounds for ~2 s calls and for ~40 ms calls
    rows: list[dict[str, Any]] = []
    with (
        SolverPool(2, "thread") as thread2,
        SolverPool(2, "process") as proc2,
        SolverPool(2, "process", fallback=False) as forced2,
        SolverPool(backend="serial") as serial,
    ):
        proc2.start()
        forced2.start()
        pools = {
            "serial pool": serial,
            "thread×2": thread2,
            "process×2": proc2,
            "process×2, fallback=False": forced2,
        }
        ilp = ilp_instance()
        ilp_rows = (16 if quick else BATCH) * SAMPLES
        rows += _backend_rows("ilp", ilp, _weights(ilp, ilp_rows, seed=1), pools, slow, 1.8)
        rows += _cpu_rows("ilp", ilp, _weights(ilp, ilp_rows, seed=1), forced2)
        grid = grid_instance()
        rows += _backend_rows("grid", grid, _weights(grid, BATCH * SAMPLES, seed=2), pools, fast, 0.95)
        rows += _overhead_rows(forced2, 3 * fast)
        if not quick:
            rows += _layer_rows("layer/ilp", ilp, proc2, "process×2", slow, SumOfGamma(k=4.0))
        rows += _layer_rows("layer/grid", grid, proc2, "process×2", fast, SumOfGamma(k=12.0))
        rows += _layer_rows("layer/grid", grid, serial, "serial pool", fast, SumOfGamma(k=12.0))
        rows += _layer_rows("layer/grid", grid, serial, "serial pool", fast, Gumbel())
    return rows
