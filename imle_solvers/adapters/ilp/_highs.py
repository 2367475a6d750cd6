"""The HiGHS engine: a `LinearForm` as a ``highspy`` model built once per thread, objective replaced per call.

The back end of [`PulpOracle`][imle_solvers.PulpOracle] (and [`ILP`][imle_solvers.ILP]) for
``solver="highs"``. ``pulp.HiGHS`` rebuilds a ``highspy`` model on every solve; `HighsEngine` builds the
``highspy.Highs`` model once (per thread) and per call only runs ``changeColsCost`` and ``run``, stopped
through HiGHS's interrupt callback on Ctrl-C and `stop_solves`.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import numpy as np

from ..._interrupt import default_sigint, set_sigint, solving
from ...errors import ImleSolversError, require
from ._engine import Outcome, PerThreadModel, Status
from ._linear import LinearForm

__all__ = ["HighsEngine"]


def _new_highs(highspy: Any) -> Any:
    """A bare ``highspy`` model: the C++ object without the Python wrapper's callbacks and banner."""
    core = getattr(highspy, "_core", None)
    cls = getattr(core, "_Highs", None) or highspy.Highs
    return cls()


class _HighsStop:
    """What HiGHS's interrupt callback reads: set to stop the solve through HiGHS's own API."""

    __slots__ = ("flag",)

    def __init__(self) -> None:
        self.flag = False


def _highs_log(kind: Any, message: Any, data_out: Any, data_in: Any, log: list[str]) -> None:
    log.append(str(message))


def _highs_interrupt(kind: Any, message: Any, data_out: Any, data_in: Any, stop: _HighsStop) -> None:
    if stop.flag and data_in is not None:
        data_in.user_interrupt = True


class HighsEngine(PerThreadModel):
    """A ``highspy`` model built once (per thread) from a `LinearForm` (an `Engine`); per call
    ``changeColsCost`` + ``run``. Threads of a pool each get their own model.

    Rows are scaled by powers of two (exact) so that their largest coefficient is about 1: HiGHS rejects
    coefficients above 10¹⁵ and checks feasibility with absolute tolerances, set here to 10⁻⁹ (its defaults,
    10⁻⁶ and 10⁻⁷, accept ``1.0000001 + 1 ≤ 2``).
    """

    integral = False  # HiGHS's values carry its tolerances: snapped and checked by the oracle

    def __init__(self, form: LinearForm, time_limit: float | None) -> None:
        self.form = form
        self.time_limit = time_limit
        self._local = threading.local()
        self._build()  # at construction: a model HiGHS rejects raises here, not on the first solve

    def _build(self) -> Any:
        highspy = require("highspy", "pulp")
        form = self.form
        h = _new_highs(highspy)
        callbacks = highspy.cb.HighsCallbackType  # type: ignore[attr-defined]
        log: list[str] = []  # HiGHS's own messages while the model is loaded: quoted if it complains
        h.setOptionValue("log_to_console", False)
        h.setCallback(_highs_log, log)
        h.startCallback(callbacks.kCallbackLogging)
        for option, value in (
            ("output_flag", True),
            ("threads", 1),
            ("mip_rel_gap", 0.0),  # optimal, not within HiGHS's default 0.01 % gap
            ("mip_feasibility_tolerance", 1e-9),
            ("primal_feasibility_tolerance", 1e-9),
        ):
            h.setOptionValue(option, value)
        if self.time_limit is not None:
            h.setOptionValue("time_limit", float(self.time_limit))
        ok = highspy.HighsStatus.kOk  # type: ignore[attr-defined]
        self._complain(h.addVars(form.n_cols, form.col_lb, form.col_ub), ok, "the variable bounds", log)
        if form.integer.any():
            cols = np.flatnonzero(form.integer).astype(np.int32)
            kinds = np.array([highspy.HighsVarType.kInteger] * cols.size)  # type: ignore[attr-defined]
            self._complain(h.changeColsIntegrality(cols.size, cols, kinds), ok, "the integrality", log)
        A = form.A
        if form.n_rows:
            data, lb, ub = form.power_of_two_rows()  # rows scaled exactly to a largest |a| ≈ 1
            self._complain(
                h.addRows(
                    form.n_rows,
                    lb,
                    ub,
                    A.nnz,
                    A.indptr[:-1].astype(np.int32),
                    A.indices.astype(np.int32),
                    data,
                ),
                ok,
                "the constraint rows",
                log,
            )
        h.stopCallback(callbacks.kCallbackLogging)
        h.setOptionValue("output_flag", False)
        stop = _HighsStop()
        h.setCallback(_highs_interrupt, stop)
        for kind in (
            callbacks.kCallbackSimplexInterrupt,
            callbacks.kCallbackIpmInterrupt,
            callbacks.kCallbackMipInterrupt,
        ):
            h.startCallback(kind)
        self._cols = np.arange(form.n_vars, dtype=np.int32)
        self._status = highspy.HighsModelStatus  # type: ignore[attr-defined]
        self._local.h, self._local.stop = h, stop
        return h

    @staticmethod
    def _complain(status: Any, ok: Any, what: str, log: list[str]) -> None:
        if status != ok:
            said = " ".join(line.strip() for line in log) or "no message"
            raise ValueError(
                f"HiGHS rejected {what} ({status}; HiGHS: {said!r}). Each row is scaled by a "
                "power of two to a largest coefficient ≈ 1, after which HiGHS takes magnitudes "
                "within [1e-9, 1e15]: a row mixes coefficients too far apart; rescale the model"
            )

    def solve(self, costs: np.ndarray) -> Outcome:
        h = getattr(self._local, "h", None)
        if h is None:
            h = self._build()
        stop: _HighsStop = self._local.stop
        stop.flag = False
        h.changeColsCost(self.form.n_vars, self._cols, costs)
        self._run(h, stop)
        status = h.getModelStatus()
        codes = self._status
        if status == codes.kNotset:  # another HiGHS user of this process (Pyomo's, PyEPO's) started HiGHS's
            h.resetGlobalScheduler(True)  # shared scheduler with more threads than our 1: restart it, once
            self._run(h, stop)
            status = h.getModelStatus()
        if status == codes.kOptimal:
            return Outcome("optimal", h.getSolution().col_value)
        if status == codes.kInfeasible:
            return Outcome("infeasible")
        if status == codes.kUnbounded:
            return Outcome("unbounded")
        if status == codes.kUnboundedOrInfeasible:
            return Outcome(self._infeasible_or_unbounded(h, costs))
        if status == codes.kTimeLimit:
            if h.getInfo().primal_solution_status == 2:  # kSolutionStatusFeasible
                return Outcome("feasible", h.getSolution().col_value)
            return Outcome("timeout")
        return Outcome("error", None, h.modelStatusToString(status))

    @staticmethod
    def _run(h: Any, stop: _HighsStop) -> None:
        """``h.run()``, stopped through HiGHS's interrupt callback on Ctrl-C or `stop_solves`.

        On the main thread Python's SIGINT handler is swapped for one that only sets the flag for the
        duration: the default one would raise ``KeyboardInterrupt`` inside the callback, across C++.
        """

        def on_sigint(signum: int, frame: Any) -> None:
            stop.flag = True

        def stop_now() -> None:
            stop.flag = True

        swapped = default_sigint()
        if swapped:
            set_sigint(on_sigint)
        try:
            with solving(stop_now):
                h.run()
        finally:
            if swapped:
                set_sigint(signal.default_int_handler)
        if stop.flag:
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt
            raise ImleSolversError("HiGHS: the solve was stopped (interpreter exit or stop_solves)")

    def _infeasible_or_unbounded(self, h: Any, costs: np.ndarray) -> Status:
        """Tell them apart: with a zero objective a feasible model is optimal, an infeasible one is not."""
        h.changeColsCost(self.form.n_vars, self._cols, np.zeros_like(costs))
        self._run(h, self._local.stop)  # stopped by Ctrl-C and `stop_solves` as the first solve
        feasible = h.getModelStatus() == self._status.kOptimal
        return "unbounded" if feasible else "infeasible"
