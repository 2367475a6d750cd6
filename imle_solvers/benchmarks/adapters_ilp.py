"""ILP back ends on a fixed instance: adapter per call vs the bare solver call, and vs rebuilding per call.

Instance: shortest path on a 5×5 grid, top-left to bottom-right, as a flow ILP — one 0/1 variable per
arc, 40 arcs (every cell to its east and south neighbour), 25 flow-conservation equalities
(``+1`` out of the source, ``−1`` into the sink, 0 elsewhere). Costs are uniform in ``[0.1, 1)``,
a different vector on each call (cycled from 64 pre-drawn ones).

Rows (``ratio = adapter_ms / bare_ms``):

* ``CPSATOracle`` / ``PulpOracle(cbc)`` / ``PulpOracle(highs)`` — ``adapter_ms``: ``oracle.solve(w)``
  through [`ILP`][imle_solvers.ILP]; ``bare_ms``: the solver call alone on the same reused model —
  CP-SAT: write the integer coefficients + ``SolveWrapper.solve`` + read the solution; CBC: run
  ``cbc`` on an already written MPS file and read its solution file; HiGHS: ``changeColsCost`` +
  ``run`` + read the solution. The two are called in turn, one call each, and the medians compared,
  so both see the same machine load. The adapter's overhead is everything else: validation, float →
  integer scaling, the hint, the MPS text, snapping the state to integers, error handling.
* ``… rebuild per call`` — ``adapter_ms``: building the model from scratch and solving it on every
  call (``cp_model`` model; PuLP ``LpProblem`` with ``PULP_CBC_CMD`` / ``pulp.HiGHS``), with the
  time once measured for it on 2 cores as ``reference_ms``; ``bare_ms``: the reusing adapter's time, so
  ``ratio`` is how much slower rebuilding is.
* ``PuLP objective-only`` — ``LpProblem`` kept, ``setObjective`` + ``solve`` per call: what PuLP
  itself costs when only the objective changes.
* ``… feasibility check`` — ``adapter_ms``: the check every adapter runs on the returned state
  (rows against ``b`` relative to each row's scale, bounds, integrality; ``FeasibilityCheck``), timed
  right after a bare solve of this instance as in a real call (the solver has just run, so caches are
  cold: several times its cost in a tight loop), in CPU time of the calling thread (on a loaded
  machine wall time would add the waits for a core that follow a solve); ``bare_ms``: the adapter's
  whole call (wall time); ``ratio``: the check's share (goal ≤ 0.03).
* ``CP-SAT hint=True`` — ``adapter_ms``: an oracle that hints the previous solution (ties then depend
  on the previous call); ``bare_ms``: the default oracle, without hint; ``ratio``: what dropping the
  hint costs is ``1 / ratio``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["grid_flow", "run"]

REFERENCE_MS = {"cpsat": 2.5, "cbc": 6.1, "highs": 1.6}  # rebuilt per call, measured once on 2 cores


def grid_flow(height: int = 5, width: int = 5) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Flow formulation of the grid shortest path: ``A_eq`` (nodes × arcs), ``b_eq``, the arcs."""
    arcs = []
    for i in range(height):
        for j in range(width):
            if j + 1 < width:
                arcs.append((i * width + j, i * width + j + 1))  # east
            if i + 1 < height:
                arcs.append((i * width + j, (i + 1) * width + j))  # south
    A = np.zeros((height * width, len(arcs)))
    for k, (u, v) in enumerate(arcs):
        A[u, k], A[v, k] = 1.0, -1.0  # +1 leaves u, −1 enters v
    b = np.zeros(height * width)
    b[0], b[-1] = 1.0, -1.0
    return A, b, arcs


def _alternating(fns: list[Callable[[], Any]], budget_s: float) -> list[float]:
    """Median seconds per call of each ``fn``, calling them in turn (one call each, repeatedly).

    Alternating single calls puts every function under the same machine load, so their ratio is
    meaningful on a shared machine; the median drops the spikes.
    """
    start = time.perf_counter()
    for fn in fns:  # warm-up
        fn()
        fn()
    per_round = max((time.perf_counter() - start) / 2, 1e-6)
    rounds = int(min(2000, max(15, budget_s / per_round)))
    samples = np.empty((rounds, len(fns)))
    clock = time.perf_counter
    for r in range(rounds):
        for k, fn in enumerate(fns):
            t0 = clock()
            fn()
            samples[r, k] = clock() - t0
    return [float(v) for v in np.median(samples, axis=0)]


def _cycle(weights: np.ndarray) -> Callable[[], np.ndarray]:
    it = itertools.cycle(list(weights))
    return lambda: next(it)


def _cpsat_fns(A: np.ndarray, b: np.ndarray, weights: np.ndarray) -> dict[str, Callable[[], Any]]:
    from ortools.sat.python import cp_model

    from ..adapters.ilp import ILP

    ilp = ILP(A.shape[1], A_eq=A, b_eq=b, backend="cpsat")
    oracle: Any = ilp.oracle
    nxt = _cycle(weights)
    oracle.solve(weights[0])  # builds everything (and sets the hint the bare call then shares)
    local = oracle._engine._state()  # this thread's model copy
    proto, params, wrapper_cls = local.proto, local.params, local.wrapper_cls
    q_lists = itertools.cycle([oracle.scaled_costs(w).tolist() for w in weights])
    idx = oracle._engine._indices

    def bare() -> Any:
        coeffs = proto.objective.coeffs
        coeffs.clear()
        coeffs.extend(next(q_lists))
        wrapper = wrapper_cls()
        wrapper.set_parameters(params)
        response = wrapper.solve(proto)
        return [response.solution[i] for i in idx]

    rows_, cols_ = np.nonzero(A)

    def rebuild() -> Any:
        w = nxt()
        model = cp_model.CpModel()
        x = [model.new_bool_var(f"x{k}") for k in range(A.shape[1])]
        for i in range(A.shape[0]):
            ks = cols_[rows_ == i]
            model.add(
                cp_model.LinearExpr.weighted_sum([x[k] for k in ks], [int(A[i, k]) for k in ks]) == int(b[i])
            )
        top = float(np.abs(w).max())
        model.minimize(cp_model.LinearExpr.weighted_sum(x, np.rint(w * (2**20 / top)).astype(int).tolist()))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.solve(model)
        return [solver.value(v) for v in x]

    hinted = ILP(A.shape[1], A_eq=A, b_eq=b, backend="cpsat", hint=True)

    def check() -> float:  # a bare solve, then the check on its solution, timed alone
        solution = bare_solution()
        t0 = time.thread_time()
        oracle._check(solution, "CPSATOracle", integral=True)
        return time.thread_time() - t0

    def bare_solution() -> list[int]:
        coeffs = proto.objective.coeffs
        coeffs.clear()
        coeffs.extend(next(q_lists))
        wrapper = wrapper_cls()
        wrapper.set_parameters(params)
        response = wrapper.solve(proto)
        return list(response.solution)  # copied while the response is alive

    return {
        "adapter": lambda: ilp.solve(nxt()),
        "bare": bare,
        "rebuild": rebuild,
        "hinted": lambda: hinted.solve(nxt()),
        "check": check,
    }


def _pulp_problem(A: np.ndarray, b: np.ndarray) -> tuple[Any, list[Any]]:
    import pulp

    prob = pulp.LpProblem("grid_path", pulp.LpMinimize)
    x = [prob.add_variable(f"x{k}", cat="Binary") for k in range(A.shape[1])]
    for i in range(A.shape[0]):
        prob += pulp.lpSum(A[i, k] * x[k] for k in np.flatnonzero(A[i])) == b[i]
    return prob, x


def _pulp_solver(name: str) -> Any:
    import pulp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PULP_CBC_CMD: deprecated in PuLP 3.3
        return pulp.PULP_CBC_CMD(msg=False) if name == "cbc" else pulp.HiGHS(msg=False)


def _pulp_fns(
    name: str, A: np.ndarray, b: np.ndarray, weights: np.ndarray, scratch: str
) -> dict[str, Callable[[], Any]]:
    import pulp

    from ..adapters.ilp import ILP
    from ..adapters.ilp._cbc import CbcEngine
    from ..adapters.ilp._highs import HighsEngine

    ilp = ILP(A.shape[1], A_eq=A, b_eq=b, backend=name)  # type: ignore[arg-type]
    oracle: Any = ilp.oracle
    nxt = _cycle(weights)
    solver = _pulp_solver(name)

    def rebuild() -> Any:
        w = nxt()
        prob, x = _pulp_problem(A, b)
        prob.setObjective(pulp.LpAffineExpression(zip(x, w.tolist())))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            prob.solve(solver)
        return [v.varValue for v in x]

    kept, kept_x = _pulp_problem(A, b)

    def objective_only() -> Any:
        kept.setObjective(pulp.LpAffineExpression(zip(kept_x, nxt().tolist())))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            kept.solve(solver)
        return [v.varValue for v in kept_x]

    if name == "cbc":
        engine: CbcEngine = oracle._engine
        mps_files = []
        for k, w in enumerate(weights[:8]):
            path = os.path.join(scratch, f"m{k}.mps")
            with open(path, "w") as fh:
                fh.write(engine.mps(w))
            mps_files.append(path)
        files = itertools.cycle(mps_files)
        sol = os.path.join(scratch, "bare.sol")
        cbc = engine.binary()

        def bare() -> Any:
            subprocess.run(
                [cbc, next(files), "branch", "solution", sol],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            with open(sol) as fh:
                text = fh.read()
            os.remove(sol)  # as the adapter does: a fresh file each call
            return text
    else:
        form = oracle.form
        h = HighsEngine(form, None)._build()  # a second model with the adapter's exact options
        cols = np.arange(form.n_cols, dtype=np.int32)

        def bare() -> Any:
            h.changeColsCost(form.n_cols, cols, nxt())
            h.run()
            return h.getSolution().col_value

    solver_engine: Any = oracle._engine

    def check() -> float:  # the engine's solve (the solver's own values), then the check, timed alone
        raw = list(solver_engine.solve(nxt()).values)
        t0 = time.thread_time()
        oracle._check(raw, "PulpOracle")
        return time.thread_time() - t0

    return {
        "adapter": lambda: ilp.solve(nxt()),
        "bare": bare,
        "rebuild": rebuild,
        "objective_only": objective_only,
        "check": check,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``{adapter, instance, adapter_ms, bare_ms, ratio, reference_ms}`` for CP-SAT, CBC and HiGHS."""
    A, b, arcs = grid_flow(5, 5)
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.1, 1.0, size=(64, len(arcs)))
    instance = f"5x5 grid shortest path, flow ILP ({len(arcs)} arcs E/S)"
    budget = 0.5 if quick else 4.0  # seconds of alternating calls per back end
    rows: list[dict[str, Any]] = []
    from ..adapters.ilp._cbc import scratch_root

    with tempfile.TemporaryDirectory(prefix="imle-bench-", dir=scratch_root()) as scratch:
        labels = (("cpsat", "CPSATOracle"), ("cbc", "PulpOracle(cbc)"), ("highs", "PulpOracle(highs)"))
        for name, label in labels:
            fns = _cpsat_fns(A, b, weights) if name == "cpsat" else _pulp_fns(name, A, b, weights, scratch)
            # two passes: adapter vs bare alone (their ratio is the overhead), then the slow variants
            # against the adapter (their garbage would otherwise land in whichever call allocates next)
            ms = dict(
                zip(
                    ("adapter", "bare"),
                    (1e3 * t for t in _alternating([fns["adapter"], fns["bare"]], budget)),
                )
            )
            slow = [k for k in ("rebuild", "objective_only") if k in fns]
            times = _alternating([fns["adapter"], *[fns[k] for k in slow]], budget / 2)
            scale = ms["adapter"] / (1e3 * times[0])  # express them on the first pass's scale
            ms.update({k: 1e3 * t * scale for k, t in zip(slow, times[1:])})
            rows.append(
                {
                    "adapter": label,
                    "instance": instance,
                    "adapter_ms": ms["adapter"],
                    "bare_ms": ms["bare"],
                    "ratio": ms["adapter"] / ms["bare"],
                    "reference_ms": "",
                }
            )
            if "objective_only" in ms:
                rows.append(
                    {
                        "adapter": f"PuLP/{name} objective-only",
                        "instance": instance,
                        "adapter_ms": ms["objective_only"],
                        "bare_ms": ms["adapter"],
                        "ratio": ms["objective_only"] / ms["adapter"],
                        "reference_ms": "",
                    }
                )
            solver = "CP-SAT" if name == "cpsat" else f"PuLP/{name.upper() if name == 'cbc' else 'HiGHS'}"
            rounds = int(min(400, max(30, budget / 2 / (ms["adapter"] / 1e3))))  # about budget/2 seconds
            check_ms = 1e3 * float(np.median([fns["check"]() for _ in range(rounds)]))
            rows.append(
                {
                    "adapter": f"{label} feasibility check",
                    "instance": instance,
                    "adapter_ms": check_ms,
                    "bare_ms": ms["adapter"],
                    "ratio": check_ms / ms["adapter"],
                    "reference_ms": "",
                    "goal": "≤ 0.03",
                }
            )
            if "hinted" in fns:
                hinted, plain = (1e3 * t for t in _alternating([fns["hinted"], fns["adapter"]], budget / 2))
                rows.append(
                    {
                        "adapter": "CP-SAT hint=True",
                        "instance": instance,
                        "adapter_ms": hinted,
                        "bare_ms": plain,
                        "ratio": hinted / plain,
                        "reference_ms": "",
                    }
                )
            rows.append(
                {
                    "adapter": f"{solver} rebuild per call",
                    "instance": instance,
                    "adapter_ms": ms["rebuild"],
                    "bare_ms": ms["adapter"],
                    "ratio": ms["rebuild"] / ms["adapter"],
                    "reference_ms": REFERENCE_MS[name],
                }
            )
    return rows
