"""OR-Tools CP-SAT as a MAP oracle: the model is built once, each call only replaces the objective.

CP-SAT optimises integer objectives, so float weights are scaled to integers (see
[`CPSATOracle`][imle_solvers.CPSATOracle], *Resolution*); the returned state is optimal for the float weights
up to a documented, tested bound. `CpsatEngine` is the CP-SAT engine of the ILP family (an `Engine`), and
[`CPSATOracle`][imle_solvers.CPSATOracle] its oracle, for a ``CpModel`` of your own or an
[`ILP`][imle_solvers.ILP] declaration.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from ..._checks import in_range, one_of, positive, positive_int
from ..._interrupt import solving
from ...errors import ImleSolversError, require
from ._check import FeasibilityCheck
from ._engine import EngineOracle, Outcome, check_single
from ._linear import SMALL, LinearForm

__all__ = ["CPSATOracle", "CpsatEngine", "check_parameters"]

_MAX_OBJECTIVE = 2.0**60  # |Σ q_i z_i| must stay well inside int64 for CP-SAT's objective domain
_MAX_BOUND = 2**53  # variable bounds: integers a float holds exactly
_MAX_ACTIVITY = 2**62  # Σ_j |a_ij| · max|x_j| of a row: CP-SAT rejects a row that could overflow int64


def check_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` if every key is a field of CP-SAT's ``SatParameters`` taking its value; else a
    ``ValueError`` naming the field, when the oracle is made (not at its first solve, on a pool's worker)."""
    cmh = require("ortools.sat.python.cp_model_helper", "cpsat")
    probe = cmh.SatParameters()  # type: ignore[attr-defined]
    for key, value in parameters.items():
        if not isinstance(key, str) or not hasattr(probe, key):
            raise ValueError(f"parameters: {key!r} is not a field of CP-SAT's SatParameters")
        try:
            setattr(probe, key, value)
        except (TypeError, ValueError) as exc:
            kind = type(getattr(probe, key)).__name__
            raise ValueError(
                f"parameters: CP-SAT's {key} takes a {kind}, got {value!r} ({type(value).__name__})"
            ) from exc
    return dict(parameters)


class CpsatEngine:
    """CP-SAT on a fixed ``CpModel`` (an `Engine`): each thread solves its own copy of the model, and a call
    only rewrites the objective coefficients ``q = round(s · c)``, ``s = R / max|c|``.

    Parameters
    ----------
    model
        The ``CpModel`` (copied).
    indices
        Model indices of the weighted variables, in weight order.
    resolution
        ``R``, already capped by the caller.
    time_limit
        Seconds per solve (``None``: no limit).
    workers
        CP-SAT search workers per solve.
    hint
        Hint the previous solution to CP-SAT.
    parameters
        ``SatParameters`` fields over `DEFAULT_PARAMETERS`, as for [`CPSATOracle`][imle_solvers.CPSATOracle].
    """

    integral = True  # CP-SAT computes in exact integers

    def __init__(
        self,
        model: Any,
        indices: list[int],
        *,
        resolution: float,
        time_limit: float | None,
        workers: int,
        hint: bool,
        parameters: dict[str, Any],
    ) -> None:
        self.resolution = resolution
        self.time_limit = time_limit
        self.workers = workers
        self.hint = hint
        self.parameters = check_parameters(parameters)  # here, not at the first solve on a worker
        self._indices = np.asarray(indices, dtype=np.int64)
        self._index_list: list[int] = list(indices)
        self.every_column = False
        """Return every model variable's value (an ILP declaration, checked column by column), not only
        the weighted variables'."""
        self._leading = self._index_list == list(range(len(indices)))  # the state is solution[:m]
        self._text: str | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._base: Any = self._make_base(model)

    # ------------------------------------------------------------------ model handling
    def _make_base(self, source: Any) -> Any:
        """Our own copy of ``source`` (a CpModel or its text proto) with the objective over our variables.

        The base model is never mutated after this; each thread solves on its own copy of it
        (`_state`), so a thread pool can share one engine.
        """
        cp_model = require("ortools.sat.python.cp_model", "cpsat")
        own = cp_model.CpModel()  # type: ignore[attr-defined]
        proto = own.proto
        if isinstance(source, str):
            proto.parse_text_format(source)
        else:
            proto.copy_from(source.proto)
        proto.clear_objective()
        proto.clear_floating_point_objective()
        proto.clear_solution_hint()
        proto.objective.vars.extend(self._index_list)  # objective over the weighted variables
        proto.objective.coeffs.extend([0] * len(self._index_list))  # coefficients set per call
        return own

    def _state(self) -> Any:
        """This thread's model copy, parameters and hint flag (built on first use in the thread)."""
        local = self._local
        if getattr(local, "proto", None) is None:
            cp_model = require("ortools.sat.python.cp_model", "cpsat")
            cmh = require("ortools.sat.python.cp_model_helper", "cpsat")
            with self._lock:
                if self._base is None:  # unpickled: rebuild from the text proto, once
                    assert self._text is not None
                    self._base = self._make_base(self._text)
                model = cp_model.CpModel()  # type: ignore[attr-defined]
                model.proto.copy_from(self._base.proto)
            params = cmh.SatParameters()  # type: ignore[attr-defined]
            params.num_workers = self.workers
            params.catch_sigint_signal = False  # its handler would replace Python's; stop_search instead
            if self.time_limit is not None:
                params.max_time_in_seconds = float(self.time_limit)
            for key, value in self.parameters.items():
                setattr(params, key, value)
            local.model, local.proto, local.params, local.has_hint = model, model.proto, params, False
            local.wrapper_cls = cmh.SolveWrapper  # type: ignore[attr-defined]
            local.codes = cmh.CpSolverStatus  # type: ignore[attr-defined]
        return local

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._text is None and self._base is not None:
            with self._lock:
                self._text = str(self._base.proto)  # constraints + zero objective: what a worker needs
            state["_text"] = self._text
        state.update(_base=None, _lock=None, _local=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ solving
    def scaled(self, costs: np.ndarray) -> list[int]:
        """``q = round(s · c)``, ``s = R / max|c|``, as ints (plain Python for small ``m``: fewer NumPy
        calls per solve). ``costs`` are finite, checked by the caller."""
        if costs.size <= SMALL:
            cl = costs.tolist()
            top = max(max(cl), -min(cl))
            if top == 0.0:
                return [0] * len(cl)
            s = self.resolution / top  # s = R / max|c|
            if math.isinf(s):  # subnormal costs (max|c| < R / 1.8e308): normalise first
                return [round(x / top * self.resolution) for x in cl]
            return [round(x * s) for x in cl]  # round half to even, as np.rint
        top = float(np.abs(costs).max())
        if top == 0.0:
            return [0] * costs.size
        s = self.resolution / top
        if math.isinf(s):  # subnormal costs: normalise first
            return np.rint(costs / top * self.resolution).astype(np.int64).tolist()
        return np.rint(costs * s).astype(np.int64).tolist()

    def solve(self, costs: np.ndarray) -> Outcome:
        q = self.scaled(costs)
        local = self._state()
        proto = local.proto
        coeffs = proto.objective.coeffs
        coeffs.clear()
        coeffs.extend(q)
        wrapper = local.wrapper_cls()
        wrapper.set_parameters(local.params)
        stopped: list[bool] = []

        def stop() -> None:
            stopped.append(True)
            wrapper.stop_search()  # CP-SAT's own interruption API: the solve returns what it has

        with solving(stop):
            response = wrapper.solve(proto)  # the bare CP-SAT call on the reused model
        if stopped:
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt  # Ctrl-C (Python's handler raises it too, at the latest here)
            raise ImleSolversError("CP-SAT: the solve was stopped (interpreter exit or stop_solves)")
        status = response.status
        codes = local.codes
        if status == codes.OPTIMAL or status == codes.FEASIBLE:
            solution = list(response.solution)
            if self.hint:
                self._set_hint(local, [solution[i] for i in self._index_list])
            if not (self.every_column or self._leading):
                solution = [solution[i] for i in self._index_list]
            return Outcome("optimal" if status == codes.OPTIMAL else "feasible", solution)
        if status == codes.INFEASIBLE:
            return Outcome("infeasible")
        if status == codes.UNKNOWN:
            return Outcome("timeout")
        return Outcome("error", None, f"CP-SAT returned status {status!r}: {response.solution_info}")

    def _set_hint(self, local: Any, values: list[int]) -> None:
        hint = local.proto.solution_hint
        if not local.has_hint:
            hint.vars.extend(self._index_list)
            local.has_hint = True
        hint.values.clear()
        hint.values.extend(values)


class CPSATOracle(EngineOracle):
    """MAP oracle over an OR-Tools CP-SAT model (paper, eq. 3: ``MAP(θ) = argmax_{z ∈ C} ⟨z, θ⟩``).

    The constraints (the set ``C``) come from a ``cp_model.CpModel`` built once; each `solve` only rewrites
    the objective coefficients in the model's proto. Any objective the model already has is discarded.

    Parameters
    ----------
    model
        A ``cp_model.CpModel``; it is copied, so later edits of ``model`` have no effect.
    variables
        The ``m`` model variables (``IntVar`` / ``BoolVar``, not negated literals) whose values form
        the state, in weight order. Other model variables are auxiliary (objective coefficient 0).
    sense
        ``"min"`` (weights are costs, the default) or ``"max"`` (weights are scores).
    resolution
        ``R`` in the scaling below (default ``2**20``). Capped so that ``R · ‖U‖₁ ≤ 2**60``.
    time_limit
        Seconds per solve (``None``: no limit).
    workers
        CP-SAT search workers per solve (default 1: a [`SolverPool`][imle_solvers.pool.SolverPool]
        parallelises across instances instead).
    strict
        When the time limit stops the search with a feasible but unproven state: ``False`` returns it
        with an [`UnprovenSolutionWarning`][imle_solvers.errors.UnprovenSolutionWarning], ``True`` raises
        [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError].
    hint
        Hint the previous solution to CP-SAT (default ``False``). With one worker CP-SAT is deterministic, so
        without a hint equal weights give the same state whatever was solved before; a hint makes ties depend
        on the previous call.
    expected_nonzeros
        ``⟨z, 1⟩`` of a typical state if known (used by ``SumOfGamma(k=None)``).
    parameters
        ``SatParameters`` fields, e.g. ``{"random_seed": 1}``. They update `DEFAULT_PARAMETERS`, which switch
        off symmetry detection and probing: a MAP oracle solves many small instances, where these fixed
        per-solve costs dominate (about 35 % of a 5×5-grid path solve); pass
        ``{"symmetry_level": 2, "cp_model_probing_level": 2}`` to get CP-SAT's own defaults back.

    Notes
    -----
    **Resolution.** With costs ``c`` (``c = w`` for ``"min"``, ``c = −w`` for ``"max"``), CP-SAT minimises
    ``⟨q, z⟩`` with ``q = round(s · c)``, ``s = R / max|c|``. Since ``|q_i − s c_i| ≤ ½``, the returned
    ``z*`` satisfies, with ``U_i = max(|lb_i|, |ub_i|)`` over the variable's domain,

    ``⟨c, z*⟩ ≤ min_{z ∈ C} ⟨c, z⟩ + max|c| · ‖U‖₁ / R``          (`objective_tolerance`).

    For 0/1 variables ``‖U‖₁ = m``: with the default ``R = 2**20`` and ``m = 40`` the gap is below
    ``4·10⁻⁵ · max|c|``. Equal weights stay equal after scaling, so ties are kept, and broken the same
    way on every call with the same weights (one worker, no hint).

    **Checked states.** An oracle built by [`ILP`][imle_solvers.ILP] checks every state against the
    declared rows and bounds (``FeasibilityCheck``) and raises
    [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] rather than return a violating
    one. A model given as a ``CpModel`` is solved in CP-SAT's exact integer arithmetic, unchecked.

    **Ctrl-C.** CP-SAT's own SIGINT handler is switched off (it would replace Python's); a solve is
    stopped with ``stop_search`` instead: Ctrl-C during a solve on the main thread raises
    ``KeyboardInterrupt`` at once, and solves on other threads stop when the main thread ends.

    **Pickling and threads.** The model travels as its text-format proto and is rebuilt lazily on
    first use, so the oracle can be shipped to process-pool workers. Each thread solves on its own
    copy of the model, so one oracle can serve a thread pool.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Google OR-Tools, "CP-SAT Solver", <https://developers.google.com/optimization/cp/cp_solver>.

    Examples
    --------
    >>> from ortools.sat.python import cp_model
    >>> model = cp_model.CpModel()
    >>> x = [model.new_bool_var(f"x{i}") for i in range(4)]
    >>> _ = model.add(sum(x) == 2)
    >>> oracle = CPSATOracle(model, x, sense="max")
    >>> oracle.solve(np.array([0.5, -1.0, 2.0, 0.1])).tolist()
    [1.0, 0.0, 1.0, 0.0]
    """

    DEFAULT_PARAMETERS: ClassVar[dict[str, Any]] = {"symmetry_level": 0, "cp_model_probing_level": 0}

    def __init__(
        self,
        model: Any,
        variables: Sequence[Any],
        sense: Literal["max", "min"] = "min",
        *,
        resolution: float = 2**20,
        time_limit: float | None = None,
        workers: int = 1,
        strict: bool = False,
        hint: bool = False,
        expected_nonzeros: float | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        cp_model = require("ortools.sat.python.cp_model", "cpsat")
        if not isinstance(model, cp_model.CpModel):  # type: ignore[attr-defined]
            raise TypeError(f"model must be an ortools cp_model.CpModel, got {type(model).__name__}")
        one_of("sense", sense, ("max", "min"))
        if time_limit is not None:
            positive("time_limit", time_limit)  # seconds
        positive_int("workers", workers)
        in_range("resolution", resolution, 1, math.inf)
        indices = []
        for j, var in enumerate(variables):
            index = getattr(var, "index", None)
            if not isinstance(index, int) or index < 0 or index >= len(model.proto.variables):
                raise TypeError(
                    f"variables[{j}] ({var!r}) is not a variable of this model "
                    "(negated literals and constants are not allowed)"
                )
            indices.append(index)
        if not indices:
            raise ValueError("variables must contain at least one model variable")
        if len(set(indices)) != len(indices):
            raise ValueError("variables contains the same model variable twice")
        self.sense = sense
        self.n_vars = len(indices)
        self.expected_nonzeros = expected_nonzeros
        self.label = "CPSATOracle"
        self.time_limit = time_limit
        self.workers = int(workers)
        self.strict = bool(strict)
        self.hint = bool(hint)
        self.parameters = {**self.DEFAULT_PARAMETERS, **(parameters or {})}
        proto = model.proto
        domains = [list(proto.variables[i].domain) for i in indices]
        bound = np.array([max(abs(d[0]), abs(d[-1])) for d in domains], dtype=np.float64)  # U_i
        self.u_norm1 = float(bound.sum())  # ‖U‖₁
        cap = _MAX_OBJECTIVE / max(self.u_norm1, 1.0)
        self.resolution = float(min(resolution, cap))
        self._engine: CpsatEngine = CpsatEngine(
            model,
            indices,
            resolution=self.resolution,
            time_limit=time_limit,
            workers=self.workers,
            hint=self.hint,
            parameters=self.parameters,
        )
        self._check = None  # a CpModel of your own is solved in CP-SAT's exact arithmetic, unchecked

    @classmethod
    def from_linear_form(
        cls, form: LinearForm, sense: Literal["max", "min"] = "min", **kwargs: Any
    ) -> CPSATOracle:
        """Build the CP-SAT model of an ILP declaration (see [`ILP`][imle_solvers.ILP]).

        Every variable must be integer with finite bounds; rows are scaled to integer coefficients
        (`LinearForm.integral_rows`). Raises ``ValueError`` otherwise.
        """
        cp_model = require("ortools.sat.python.cp_model", "cpsat")
        if not form.integer.all():
            j = int(np.flatnonzero(~form.integer)[0])
            raise ValueError(
                f"CP-SAT only handles integer variables; variable {j} ({form.names[j]!r}) is "
                "continuous: use backend='highs' or 'cbc'"
            )
        lo, hi = np.ceil(form.col_lb - 1e-9), np.floor(form.col_ub + 1e-9)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            j = int(np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi)))[0])
            raise ValueError(
                f"CP-SAT needs finite bounds on every variable; variable {j} "
                f"({form.names[j]!r}) has [{form.col_lb[j]}, {form.col_ub[j]}]: give bounds "
                "or use backend='highs'"
            )
        big = np.maximum(np.abs(lo), np.abs(hi))  # max|x_j|   [cols]
        if (big > _MAX_BOUND).any():
            j = int(np.flatnonzero(big > _MAX_BOUND)[0])
            raise ValueError(
                f"CP-SAT needs integer bounds within ±2**53; variable {j} ({form.names[j]!r}) "
                "has "
                f"[{form.col_lb[j]}, {form.col_ub[j]}]: tighten them or use backend='highs'"
            )
        coefs, row_lb, row_ub = form.integral_rows()
        A = form.A
        model = cp_model.CpModel()  # type: ignore[attr-defined]
        if (lo > hi).any():  # an integer variable with no integer in its bounds: the model is infeasible
            hi = np.maximum(hi, lo)
            model.add_bool_or([])
        xs = [model.new_int_var(int(a), int(b), name) for a, b, name in zip(lo, hi, form.names)]
        lin = cp_model.LinearExpr  # type: ignore[attr-defined]
        reach = [int(v) for v in big.tolist()]
        for i in range(form.n_rows):
            cols = A.indices[A.indptr[i] : A.indptr[i + 1]].tolist()
            row = coefs[i]
            if sum(abs(a) * reach[j] for a, j in zip(row, cols)) > _MAX_ACTIVITY:
                raise ValueError(
                    f"row {i}: scaled to integers, |coefficients| · |bounds| reach beyond "
                    "CP-SAT's 64-bit range: rescale the row or use backend='highs'"
                )
            low, high = row_lb[i], row_ub[i]
            lb: int = cp_model.INT_MIN if low is None else low  # type: ignore[attr-defined]
            ub: int = cp_model.INT_MAX if high is None else high  # type: ignore[attr-defined]
            if lb > ub:
                model.add_bool_or([])  # e.g. an equality with a fractional rhs: no integer solution
                continue
            model.add_linear_constraint(lin.weighted_sum([xs[j] for j in cols], row), lb, ub)
        kwargs.setdefault("expected_nonzeros", form.expected_nonzeros())
        oracle = cls(model, xs[: form.n_vars], sense, **kwargs)
        oracle._engine.every_column = True  # solution[:n_cols], the form's columns in order
        oracle._check = FeasibilityCheck(form)
        return oracle

    # ------------------------------------------------------------------ solving
    def objective_tolerance(self, weights: np.ndarray) -> float:
        """Sub-optimality bound (weights' units) caused by the integer scaling: ``max|w| · ‖U‖₁ / R``."""
        return float(np.max(np.abs(weights))) * self.u_norm1 / self.resolution

    def scaled_costs(self, weights: np.ndarray) -> np.ndarray:
        """The integer costs ``q = round(s · c)`` CP-SAT minimises for ``weights``   ``(m,) int64``."""
        w = check_single(weights, self.n_vars, self.label)
        return np.asarray(self._engine.scaled(w if self.sense == "min" else -w), dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"CPSATOracle(n_vars={self.n_vars}, sense={self.sense!r}, resolution={self.resolution:g}, "
            f"time_limit={self.time_limit})"
        )
