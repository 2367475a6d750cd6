"""The SCIP engine: a `LinearForm` as a ``pyscipopt`` model built once per thread, new objective per call.

The back end of [`ILP`][imle_solvers.ILP] and [`PulpOracle`][imle_solvers.PulpOracle] for ``"scip"`` (extra
``scip``). Each thread builds its own ``pyscipopt.Model`` from the form, once; a call frees SCIP's
transformed problem (``freeTransform``: presolved data of the previous objective), sets the new objective and
runs ``optimizeNogil`` (without Python's lock, so threads of a pool solve in parallel).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..._interrupt import solving
from ...errors import ImleSolversError, require
from ._engine import Outcome, PerThreadModel, Status
from ._linear import LinearForm

__all__ = ["ScipEngine"]

_SETTINGS: dict[str, Any] = {
    "numerics/feastol": 1e-9,  # rows and integrality (default 10⁻⁶: 0.999999 would count as 1)
    "limits/gap": 0.0,  # optimal (SCIP's defaults, stated)
    "limits/absgap": 0.0,
    "limits/maxorigsol": 0,  # keep no solution of the previous call: ties do not depend on history
}
"""SCIP parameters of every model, before `time_limit` and the caller's ``parameters``."""


class ScipEngine(PerThreadModel):
    """A ``pyscipopt`` model per thread built from a `LinearForm` (an `Engine`); per call
    ``freeTransform``, ``setObjective`` and ``optimizeNogil``.

    Rows are scaled by powers of two (exact, `LinearForm.power_of_two_rows`) and checked by SCIP with a
    feasibility tolerance of 10⁻⁹.

    Parameters
    ----------
    form
        The model.
    time_limit
        Seconds per solve (``None``: none).
    workers
        Must be 1: SCIP solves on one thread (a [`SolverPool`][imle_solvers.SolverPool] parallelises across
        instances).
    parameters
        SCIP parameters by name (``{"presolving/maxrounds": 0}``), over this engine's settings; each is set
        when the engine is made, so an unknown name or a value out of range raises ``ValueError`` there.
    """

    integral = False  # SCIP's values carry its tolerances: snapped and checked by the oracle

    def __init__(
        self,
        form: LinearForm,
        time_limit: float | None,
        *,
        workers: int = 1,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if workers != 1:
            raise ValueError(
                f"workers must be 1 with backend='scip' (SCIP solves on one thread), got {workers!r}; "
                "a SolverPool solves instances in parallel"
            )
        self.form = form
        self.time_limit = time_limit
        self.parameters = dict(parameters or {})
        for key in self.parameters:
            if not isinstance(key, str):
                raise TypeError(f"parameters: SCIP parameter names are strings, got {key!r}")
        self._local = threading.local()
        self._build()  # at construction: parameters and model checked here, not at the first solve

    def _build(self) -> Any:
        ps: Any = require("pyscipopt", "scip")
        form = self.form
        model = ps.Model()
        model.hideOutput()
        settings = dict(_SETTINGS)
        settings["misc/catchctrlc"] = (
            False  # Ctrl-C reaches `solving`, which calls interruptSolve: no message
        )
        if self.time_limit is not None:
            settings["limits/time"] = float(self.time_limit)
        for name, value in (*settings.items(), *self.parameters.items()):
            try:
                model.setParam(name, value)
            except (KeyError, LookupError, TypeError, ValueError) as exc:
                raise ValueError(f"parameters: SCIP refuses {name}={value!r} ({exc})") from exc
        lbs = [None if not np.isfinite(v) else v for v in form.col_lb.tolist()]
        ubs = [None if not np.isfinite(v) else v for v in form.col_ub.tolist()]
        xs = [
            model.addVar(name=f"x{j}", vtype="I" if integer else "C", lb=lo, ub=hi)
            for j, (integer, lo, hi) in enumerate(zip(form.integer.tolist(), lbs, ubs))
        ]
        if form.n_rows:
            data, row_lb, row_ub = form.power_of_two_rows()  # exact   [nnz], [rows], [rows]
            A = form.A
            for i in range(form.n_rows):
                start, stop = A.indptr[i], A.indptr[i + 1]
                expr = ps.quicksum(
                    a * xs[j] for a, j in zip(data[start:stop].tolist(), A.indices[start:stop])
                )
                lo, hi = float(row_lb[i]), float(row_ub[i])
                model.addCons(
                    ps.scip.ExprCons(
                        expr, lhs=lo if np.isfinite(lo) else None, rhs=hi if np.isfinite(hi) else None
                    ),
                    name=f"r{i}",
                )
        self._quicksum = ps.quicksum
        local = self._local
        local.model, local.xs, local.weighted = model, xs, xs[: form.n_vars]
        return local

    def solve(self, costs: np.ndarray) -> Outcome:
        local = self._local
        if getattr(local, "model", None) is None:
            self._build()
        model = local.model
        self._set_objective(model, costs)
        self._optimize(model)
        status = model.getStatus()
        if status == "optimal":
            return Outcome("optimal", self._values(model))
        if status == "infeasible":
            return Outcome("infeasible")
        if status in ("unbounded", "inforunbd"):
            return Outcome(self._infeasible_or_unbounded(model, costs))
        if status == "timelimit":
            if model.getNSols() > 0:
                return Outcome("feasible", self._values(model))
            return Outcome("timeout")
        return Outcome("error", None, f"SCIP status {status!r}")

    def _set_objective(self, model: Any, costs: np.ndarray) -> None:
        model.freeTransform()  # back to the original problem: its objective may change again
        weighted = self._local.weighted
        model.setObjective(self._quicksum(c * x for c, x in zip(costs.tolist(), weighted) if c != 0.0))

    def _values(self, model: Any) -> list[float]:
        solution = model.getBestSol()
        return [model.getSolVal(solution, x) for x in self._local.xs]

    def _optimize(self, model: Any) -> None:
        """``model.optimizeNogil()``, stopped through ``interruptSolve`` on Ctrl-C and `stop_solves`."""
        stopped: list[bool] = []

        def stop() -> None:
            stopped.append(True)
            model.interruptSolve()  # SCIP's own interruption API: the solve returns "userinterrupt"

        with solving(stop):
            model.optimizeNogil()
        if stopped or model.getStatus() == "userinterrupt":
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt
            raise ImleSolversError("SCIP: the solve was stopped (interpreter exit or stop_solves)")

    def _infeasible_or_unbounded(self, model: Any, costs: np.ndarray) -> Status:
        """``"unbounded"`` when the model has a state (a zero objective finds one), else ``"infeasible"``."""
        self._set_objective(model, np.zeros_like(costs))
        self._optimize(model)  # stopped by Ctrl-C and `stop_solves` as the first solve
        status = model.getStatus()
        if status == "optimal" or model.getNSols() > 0:
            return "unbounded"
        return "infeasible" if status == "infeasible" else "timeout"
