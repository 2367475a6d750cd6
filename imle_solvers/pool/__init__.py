"""Batched MAP solving on a pool of workers: serial, threads, persistent processes or a Dask cluster.

An I-MLE step makes ``2·N·S`` oracle calls (paper, Algorithm 1: the forward ``MAP(θ + ε)`` and the
target ``MAP(θ' + ε)`` for every row and sample). `map_solve` hands each of the two ``(N·S, m)`` host
batches to a pool in ONE call; [`SolverPool`][imle_solvers.pool.SolverPool] spreads the rows over
workers and returns the states in row order, or solves them in the caller when parallelism would not
pay (see [`PoolPlan`][imle_solvers.pool.PoolPlan]).

[`SolutionCache`][imle_solvers.pool.SolutionCache] (solution caching, Mulamba et al. 2021) wraps an
oracle and lives here too; to the pool it is an oracle like any other.

Modules: ``_pool`` (the pool: options, lifecycle, one call), ``_plan`` (the cost model: pure
functions of records), ``_runner`` (the one backend interface and the records it shares),
``_backends`` (backend names → runners), ``_serial``, ``_thread``, ``_process``, ``_dask`` (the
runners; ``_dask`` also holds the task its workers run), ``_worker_process`` (a worker process seen
from the caller), ``_worker`` (the worker main loop and its watchdog), ``_chunk`` (chunk solving, on
every backend), ``_failure`` (failure transport), ``_cache``.
"""

from __future__ import annotations

from ._cache import SolutionCache
from ._plan import PoolPlan
from ._pool import SolverPool

__all__ = ["PoolPlan", "SolutionCache", "SolverPool"]
