"""The Gurobi engine: a `LinearForm` as a ``gurobipy`` model built once per thread, new objective per call.

The back end of [`ILP`][imle_solvers.ILP] and [`PulpOracle`][imle_solvers.PulpOracle] for ``"gurobi"`` (extra
``gurobi``). Each thread builds its own ``gurobipy.Model`` in an environment of its own (Gurobi's models are
not to be shared between threads) from the form's matrices, once; a call sets the ``Obj`` attribute of the
weighted columns and runs ``optimize``. ``pip install gurobipy`` brings Gurobi's size-limited licence
(models of at most 2,000 variables and 2,000 linear constraints): a larger model is refused with
[`SolverLicenseError`][imle_solvers.errors.SolverLicenseError] when the oracle is made.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from typing import Any

import numpy as np

from ..._interrupt import solving, stop_solves
from ...errors import ImleSolversError, SolverLicenseError, require
from ._engine import Outcome, PerThreadModel, Status
from ._linear import LinearForm

__all__ = ["GurobiEngine"]

SIZE_LIMIT = 2000
"""Variables and linear constraints of the largest model Gurobi's size-limited licence solves."""
_SIZE_LIMIT_EXCEEDED = 10010  # GRB_ERROR_SIZE_LIMIT_EXCEEDED

_SETTINGS: dict[str, Any] = {
    "OutputFlag": 0,
    "MIPGap": 0.0,  # optimal, not within Gurobi's default relative gap of 10⁻⁴
    "FeasibilityTol": 1e-9,  # the smallest Gurobi takes (default 10⁻⁶)
    "IntFeasTol": 1e-9,  # (default 10⁻⁵: 0.99999 would count as 1)
}
"""Gurobi parameters of every model, before `time_limit`, ``workers`` and the caller's ``parameters``."""


class _SigintGuard:
    """Keeps Python's SIGINT handler in place around Gurobi's solves.

    Gurobi installs a SIGINT handler of its own for each ``optimize`` and puts back the one it found when the
    solve ends. Solves that overlap on threads put back each other's: after them Gurobi's handler stayed
    for good, and Ctrl-C never reached Python again. The first solve to start records the process's
    handler (C level, ``sigaction``, Linux), the last to end puts it back. A Ctrl-C that Gurobi caught
    itself stops one of its solves (status INTERRUPTED); the engine then does what Python's handler would
    have done: stops every solve (`stop_solves`) and raises ``KeyboardInterrupt`` on the main thread
    (``_thread.interrupt_main``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved: Any = None
        self._libc: Any = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                import ctypes

                self._libc = ctypes.CDLL(None, use_errno=True)
                self._buffer = ctypes.create_string_buffer  # struct sigaction: 152 bytes on Linux

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0 and self._libc is not None:
                saved = self._buffer(256)
                if self._libc.sigaction(int(signal.SIGINT), None, saved) == 0:
                    self._saved = saved
            self._running += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._saved is not None:
                self._libc.sigaction(int(signal.SIGINT), self._saved, None)  # the handler found first
                self._saved = None


_GUARD = _SigintGuard()
_ONE_AT_A_TIME = threading.Lock()
"""Gurobi solves of one process run one at a time: its SIGINT handler is process-wide, and overlapping
solves on threads could still leave it in place (about one run in nine of the overlap test). Parallelise
Gurobi across processes (a process [`SolverPool`][imle_solvers.SolverPool]) or with ``workers``."""


def _license_error(form: LinearForm, rows: int, error: Any) -> SolverLicenseError:
    return SolverLicenseError(
        f"Gurobi: the model ({form.n_cols} variables, {rows} linear constraints) is beyond the licence "
        f"of this installation ({error}); the size-limited licence that comes with `pip install gurobipy` "
        f"solves at most {SIZE_LIMIT} variables and {SIZE_LIMIT} constraints: use backend='highs', "
        "'scip', 'cbc' or 'cpsat', or install a full Gurobi licence"
    )


class GurobiEngine(PerThreadModel):
    """A ``gurobipy`` model per thread built from a `LinearForm` (an `Engine`); per call the ``Obj`` of the
    weighted columns and ``optimize``.

    Rows are scaled by powers of two (exact, `LinearForm.power_of_two_rows`); feasibility and integrality
    tolerances are Gurobi's smallest, 10⁻⁹, and the MIP gap 0.

    Parameters
    ----------
    form
        The model.
    time_limit
        Seconds per solve (``None``: none).
    workers
        Gurobi's ``Threads`` per solve (default 1: a [`SolverPool`][imle_solvers.SolverPool] parallelises
        across instances instead).
    parameters
        Gurobi parameters by name (``{"Presolve": 2}``), over this engine's settings; each is set when the
        engine is made, so an unknown name or a value out of range raises ``ValueError`` there.
    """

    integral = False  # Gurobi's values carry its tolerances: snapped and checked by the oracle

    def __init__(
        self,
        form: LinearForm,
        time_limit: float | None,
        *,
        workers: int = 1,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.form = form
        self.time_limit = time_limit
        self.workers = int(workers)
        self.parameters = dict(parameters or {})
        for key in self.parameters:
            if not isinstance(key, str):
                raise TypeError(f"parameters: Gurobi parameter names are strings, got {key!r}")
        self._local = threading.local()
        self._build()  # at construction: parameters, licence and model checked here, not at the first solve

    def _build(self) -> Any:
        with _ONE_AT_A_TIME, _GUARD:  # Gurobi's environment start-up touches the SIGINT handler too
            return self._build_model()

    def _build_model(self) -> Any:
        gp: Any = require("gurobipy", "gurobi")
        form = self.form
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        try:
            env.start()
        except gp.GurobiError as exc:  # no licence at all
            raise SolverLicenseError(f"Gurobi: no usable licence ({exc})") from exc
        model = gp.Model(env=env)
        settings = {**_SETTINGS, "Threads": self.workers}
        if self.time_limit is not None:
            settings["TimeLimit"] = float(self.time_limit)
        for name, value in (*settings.items(), *self.parameters.items()):
            try:
                model.setParam(name, value)
            except (gp.GurobiError, TypeError, ValueError) as exc:
                raise ValueError(f"parameters: Gurobi refuses {name}={value!r} ({exc})") from exc
        kinds = np.where(form.integer, gp.GRB.INTEGER, gp.GRB.CONTINUOUS)
        lb = np.where(np.isfinite(form.col_lb), form.col_lb, -gp.GRB.INFINITY)
        ub = np.where(np.isfinite(form.col_ub), form.col_ub, gp.GRB.INFINITY)
        x = model.addMVar(form.n_cols, lb=lb, ub=ub, vtype=kinds)
        rows = 0
        if form.n_rows:
            import scipy.sparse as sp

            data, row_lb, row_ub = form.power_of_two_rows()  # exact   [nnz], [rows], [rows]
            A = sp.csr_matrix((data, form.A.indices, form.A.indptr), shape=form.A.shape)
            equal = row_lb == row_ub
            upper = ~equal & np.isfinite(row_ub)
            lower = ~equal & np.isfinite(row_lb)
            for mask, sense, rhs in ((equal, "=", row_ub), (upper, "<", row_ub), (lower, ">", row_lb)):
                if mask.any():  # a ranged row becomes two constraints
                    model.addMConstr(A[mask], x, sense, rhs[mask])
                    rows += int(mask.sum())
        model.update()
        if form.n_cols > SIZE_LIMIT or rows > SIZE_LIMIT:
            self._check_license(gp, model, rows)
        self._status = gp.GRB.Status
        self._error = gp.GurobiError
        self._rows = rows
        local = self._local
        local.model, local.weighted = model, x[: form.n_vars]
        local.all = x
        return local

    def _check_license(self, gp: Any, model: Any, rows: int) -> None:
        """Probe a model beyond the size-limited licence with a zero-second solve: the licence refuses it
        with its own error code, which becomes a `SolverLicenseError` here, when the oracle is made."""
        limit = model.Params.TimeLimit
        model.Params.TimeLimit = 0.0
        try:
            model.optimize()
        except gp.GurobiError as exc:
            if exc.errno == _SIZE_LIMIT_EXCEEDED:
                raise _license_error(self.form, rows, exc) from exc
            raise
        finally:
            model.Params.TimeLimit = limit

    def solve(self, costs: np.ndarray) -> Outcome:
        local = self._local
        if getattr(local, "model", None) is None:
            self._build()
        model = local.model
        local.weighted.Obj = costs  # the new objective   [m]
        model.reset()  # no start from the previous call's solution: ties do not depend on history
        self._optimize(model)
        return self._outcome(model, costs)

    def _optimize(self, model: Any) -> None:
        """``model.optimize()``, stopped through ``terminate`` on Ctrl-C and `stop_solves`."""
        stopped: list[bool] = []

        def stop() -> None:
            stopped.append(True)
            model.terminate()  # Gurobi's own interruption API: the solve returns INTERRUPTED

        try:
            with _ONE_AT_A_TIME, _GUARD, solving(stop):
                model.optimize()
        except self._error as exc:
            if exc.errno == _SIZE_LIMIT_EXCEEDED:
                raise _license_error(self.form, self._rows, exc) from exc
            raise ImleSolversError(f"Gurobi: {exc}") from exc
        if stopped or model.Status == self._status.INTERRUPTED:
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt
            if not stopped:  # Gurobi's handler caught a Ctrl-C: what Python's would have done, done here
                stop_solves()  # every solve of the process stops (Gurobi stopped only this one)
                _thread.interrupt_main()  # KeyboardInterrupt on the main thread
            raise ImleSolversError("Gurobi: the solve was stopped (Ctrl-C, interpreter exit or stop_solves)")

    def _outcome(self, model: Any, costs: np.ndarray) -> Outcome:
        codes = self._status
        status = model.Status
        if status == codes.OPTIMAL:
            return Outcome("optimal", self._local.all.X.tolist())
        if status == codes.INFEASIBLE:
            return Outcome("infeasible")
        if status == codes.INF_OR_UNBD or status == codes.UNBOUNDED:
            # UNBOUNDED only says that the relaxation has an unbounded ray, not that a state exists, and
            # INF_OR_UNBD is either: with a zero objective a feasible model is solved, an infeasible one not
            return Outcome(self._infeasible_or_unbounded(model, costs))
        if status == codes.TIME_LIMIT:
            if model.SolCount > 0:
                return Outcome("feasible", self._local.all.X.tolist())
            return Outcome("timeout")
        names = {getattr(codes, k): k for k in dir(codes) if k.isupper()}
        said = names.get(status, str(status))
        if status in (codes.NUMERIC, codes.SUBOPTIMAL):
            said += ": numerical trouble, optimality not proven; rescale the model or try another back end"
        return Outcome("error", None, f"Gurobi status {said}")

    def _infeasible_or_unbounded(self, model: Any, costs: np.ndarray) -> Status:
        """``"unbounded"`` when the model has a state (a zero objective finds one), else ``"infeasible"``."""
        self._local.weighted.Obj = np.zeros_like(costs)
        model.reset()
        self._optimize(model)  # stopped by Ctrl-C and `stop_solves` as the first solve
        if model.Status == self._status.OPTIMAL or model.SolCount > 0:
            return "unbounded"
        if model.Status == self._status.INFEASIBLE:
            return "infeasible"
        return "timeout"
