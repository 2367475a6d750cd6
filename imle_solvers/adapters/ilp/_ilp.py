"""`ILP`: declare an integer linear programme, get a MAP oracle on CP-SAT, CBC, HiGHS, Gurobi or SCIP.

``ILP`` is the set ``C = {z : A_ub z ≤ b_ub, A_eq z = b_eq, lb ≤ z ≤ ub, z_j ∈ ℤ for integer j}`` of the
paper's constrained exponential family (eq. 1); its MAP oracle (eq. 3) solves ``min_{z ∈ C} ⟨c, z⟩``
(``sense="min"``, weights are costs) or ``max_{z ∈ C} ⟨θ, z⟩`` (``sense="max"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..._checks import one_of, positive
from ...errors import require
from ...oracle import MapOracle
from ._engine import EngineOracle
from ._linear import LinearForm

__all__ = ["ILP"]

Backend = Literal["cpsat", "cbc", "highs", "gurobi", "scip"]
_BACKENDS = ("cpsat", "cbc", "highs", "gurobi", "scip")
_OPTIONS = {
    "cpsat": ("resolution", "workers", "hint", "parameters", "expected_nonzeros"),
    "cbc": ("expected_nonzeros",),
    "highs": ("expected_nonzeros",),
    "gurobi": ("workers", "parameters", "expected_nonzeros"),
    "scip": ("workers", "parameters", "expected_nonzeros"),
}
"""The keyword options each back end takes (`ILP`'s ``**options``)."""


class ILP(MapOracle):
    """An integer linear programme as a MAP oracle (paper, eq. 1 and 3; Example 3 for ``sense="min"``).

    The constraints are fixed at construction; each call replaces only the objective, on a model built once by
    the chosen back end.

    Parameters
    ----------
    c_size
        ``m``, the number of variables (= length of a weight vector and of a state).
    A_ub
        Left-hand side of the inequalities ``A_ub z ≤ b_ub``: a ``(k, m)`` numpy array or scipy.sparse
        matrix.
    b_ub
        Right-hand side of the inequalities, a ``(k,)`` vector.
    A_eq
        Left-hand side of the equalities ``A_eq z = b_eq``: a ``(k', m)`` array or sparse matrix.
    b_eq
        Right-hand side of the equalities, a ``(k',)`` vector.
    bounds
        ``(lower, upper)`` with scalars, ``None`` (no bound) or ``(m,)`` arrays; or, for ``m ≠ 2``,
        ``m`` pairs ``[(lower_j, upper_j), …]`` as in ``scipy.optimize.linprog``. Default ``(0, 1)``.
    integer
        ``True`` (all variables integer, the default), ``False`` (an LP) or an ``(m,)`` boolean mask.
    sense
        ``"min"`` (weights are costs, the default) or ``"max"`` (weights are scores).
    backend
        ``"cpsat"`` (OR-Tools CP-SAT; integer variables, finite bounds; rational coefficients are
        scaled to integers), ``"cbc"`` (PuLP's CBC), ``"highs"`` (HiGHS through ``highspy``),
        ``"gurobi"`` (Gurobi through ``gurobipy``, extra ``gurobi``; without a licence file up to 2,000
        variables and 2,000 constraints) or ``"scip"`` (SCIP through ``pyscipopt``, extra ``scip``).
    time_limit
        Seconds per solve, or ``None``.
    strict
        Time limit reached with a feasible but unproven state: ``False`` (default) returns it with a
        warning, ``True`` raises [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError].
    **options
        Passed to the back end's oracle: ``resolution=``, ``workers=``, ``hint=`` or ``parameters=`` for
        CP-SAT (see [`CPSATOracle`][imle_solvers.CPSATOracle]); ``workers=`` (threads) and
        ``parameters=`` (the solver's own, by name) for Gurobi and SCIP (see
        [`PulpOracle`][imle_solvers.PulpOracle]); ``expected_nonzeros=`` for any. An option the back end
        does not take raises ``ValueError``.

    Attributes
    ----------
    expected_nonzeros
        ``⟨z, 1⟩`` when the constraints fix it: every variable 0/1 and equality rows of ones that
        partition the variables (their right-hand sides add up); otherwise ``None``.
    oracle
        The back-end oracle ([`CPSATOracle`][imle_solvers.CPSATOracle] or
        [`PulpOracle`][imle_solvers.PulpOracle]).

    Raises
    ------
    ValueError
        At construction, for inconsistent shapes, NaN entries, a ``b_ub`` entry ``-inf``, lower > upper
        bounds, an unknown back end, or a model the back end cannot represent faithfully (CP-SAT:
        continuous or unbounded variables, integers beyond 64 bits once a row is scaled exactly;
        HiGHS: coefficients of one row too far apart in magnitude); the message names the row or
        variable.
    MissingExtraError
        When the back end's package is not installed (extra ``cpsat``, ``pulp``, ``gurobi`` or ``scip``).
    SolverLicenseError
        ``"gurobi"`` on a model beyond its licence (the size-limited one: more than 2,000 variables or
        constraints).

    Notes
    -----
    `solve` raises [`InfeasibleError`][imle_solvers.errors.InfeasibleError] (no feasible state),
    [`UnboundedError`][imle_solvers.errors.UnboundedError] (``"cbc"``/``"highs"``; CP-SAT needs finite
    bounds) and [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] (time limit without a
    feasible state). Every state is checked against the declared rows (tolerance relative to each row's
    scale), bounds and integrality; a violation raises
    [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] instead of returning it. Ctrl-C
    during a solve on the main thread raises ``KeyboardInterrupt`` at once on every back end.

    Negative weights are fine, and so are weights of any finite size: every back end is handed the
    weights times a power of two that brings the largest to ``[1/2, 1)`` (exact; the same optimum), so that
    HiGHS (which takes costs from 10²⁰ as infinite) and CBC (numerical trouble from about 10¹⁵) see the
    costs their tolerances are made for; their absolute optimality gap of 10⁻⁶ on that scale is at most
    ``2·10⁻⁶ · max|w|`` on yours. On CP-SAT, float weights are scaled to integers: the state is optimal up
    to ``CPSATOracle.objective_tolerance`` (``max|w| · ‖U‖₁ / 2**20`` by default).

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 1 (the constrained family) and eq. 3 (its MAP oracle),
      <https://arxiv.org/abs/2106.01798>.
    * Google OR-Tools, "CP-SAT Solver", <https://developers.google.com/optimization/cp/cp_solver>.
    * COIN-OR CBC (branch and cut), <https://github.com/coin-or/Cbc>.
    * HiGHS, high-performance linear and mixed-integer optimisation, <https://highs.dev/>.
    * Gurobi Optimizer reference manual, <https://docs.gurobi.com/projects/optimizer/en/current/>.
    * Bolusani et al., "The SCIP Optimization Suite 9.0", 2024, <https://arxiv.org/abs/2402.17702>.

    Examples
    --------
    A 0/1 knapsack (maximise value, weight ≤ 5):

    >>> import numpy as np
    >>> knap = ILP(4, A_ub=[[2, 3, 4, 1]], b_ub=[5], sense="max")
    >>> knap.solve(np.array([3.0, 4.0, 5.0, 1.0])).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """

    def __init__(
        self,
        c_size: int,
        A_ub: Any = None,
        b_ub: Any = None,
        A_eq: Any = None,
        b_eq: Any = None,
        bounds: Any = (0, 1),
        integer: bool | Sequence[bool] | np.ndarray = True,
        sense: Literal["max", "min"] = "min",
        backend: Backend = "cpsat",
        time_limit: float | None = None,
        *,
        strict: bool = False,
        **options: Any,
    ) -> None:
        form = LinearForm.from_matrices(c_size, A_ub, b_ub, A_eq, b_eq, bounds, integer)
        self._setup(form, sense, backend, time_limit, strict, options)

    def _setup(
        self,
        form: LinearForm,
        sense: str,
        backend: str,
        time_limit: float | None,
        strict: bool,
        options: dict[str, Any],
    ) -> None:
        one_of("sense", sense, ("max", "min"))
        one_of("backend", backend, _BACKENDS)
        for name in options:
            if name not in _OPTIONS[backend]:
                raise ValueError(
                    f"{name}= does not apply to backend={backend!r}, which takes "
                    f"{', '.join(o + '=' for o in _OPTIONS[backend])}"
                )
        if time_limit is not None:
            positive("time_limit", time_limit)  # seconds
        oracle: EngineOracle
        if backend == "cpsat":
            from .cpsat import CPSATOracle

            oracle = CPSATOracle.from_linear_form(
                form,
                sense,  # type: ignore[arg-type]
                time_limit=time_limit,
                strict=strict,
                **options,
            )
        else:
            from .pulp import PulpOracle

            oracle = PulpOracle.from_linear_form(
                form, backend, sense, time_limit=time_limit, strict=strict, **options
            )
        self.sense = sense  # type: ignore[assignment]
        self.n_vars = form.n_vars
        self.expected_nonzeros = oracle.expected_nonzeros
        self.backend = backend
        self.time_limit = time_limit
        self.strict = strict
        self.form = form
        self.oracle = oracle

    @classmethod
    def from_pulp(
        cls,
        problem: Any,
        variables: Sequence[Any],
        sense: Literal["max", "min"] | None = None,
        backend: Backend = "cbc",
        time_limit: float | None = None,
        *,
        strict: bool = False,
        **options: Any,
    ) -> ILP:
        """The constraints of a PuLP model as an ``ILP``; its objective is replaced per call.

        Parameters
        ----------
        problem
            A ``pulp.LpProblem`` (read once; its objective is ignored).
        variables
            The ``pulp.LpVariable`` s that form the state, in weight order; other problem variables
            are auxiliary.
        sense
            Default: the problem's sense.
        backend
            ``"cbc"`` (default), ``"highs"``, ``"gurobi"``, ``"scip"`` or ``"cpsat"`` (integer variables
            with finite bounds only), as for [`ILP`][imle_solvers.ILP].
        time_limit
            Seconds per solve, or ``None``.
        strict
            ``True`` raises where a time limit leaves an unproven state, as for [`ILP`][imle_solvers.ILP].
        **options
            Passed to the back end's oracle, as for [`ILP`][imle_solvers.ILP].
        """
        pulp: Any = require("pulp", "pulp")
        form = LinearForm.from_pulp(problem, variables)
        if sense is None:
            sense = "max" if problem.sense == pulp.LpMaximize else "min"
        self = cls.__new__(cls)
        self._setup(form, sense, backend, time_limit, strict, options)
        return self

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` instance on the back end (weights in `sense`, negative ones included)."""
        return self.oracle.solve(weights)

    def __repr__(self) -> str:
        return (
            f"ILP(c_size={self.n_vars}, rows={self.form.n_rows}, sense={self.sense!r}, "
            f"backend={self.backend!r}, time_limit={self.time_limit})"
        )
