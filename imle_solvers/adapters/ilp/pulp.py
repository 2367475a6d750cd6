"""PuLP models as MAP oracles, solved by CBC (bundled with PuLP) or HiGHS; the objective changes per call.

What PuLP costs per call, and what this adapter keeps instead (5×5-grid shortest path, see
``docs/benchmarks.md``):

* ``problem.solve(PULP_CBC_CMD())`` re-walks the model in Python and writes it as MPS, starts a
  ``cbc`` process and parses its solution file. [`PulpOracle`][imle_solvers.PulpOracle] reads the
  constraints **once**, keeps the MPS text of every column and per call only inserts the objective
  coefficients (the CBC engine, ``_cbc.py``).
* ``pulp.HiGHS`` rebuilds a ``highspy`` model on every solve. [`PulpOracle`][imle_solvers.PulpOracle] builds
  the ``highspy.Highs`` model once and per call only runs ``changeColsCost`` and ``run`` (the HiGHS engine,
  ``_highs.py``).
* Any other PuLP solver object is used through PuLP itself (``setObjective`` + ``solve``, `PulpEngine`
  below).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..._checks import one_of, positive
from ...errors import require
from ._cbc import CbcEngine
from ._check import FeasibilityCheck
from ._engine import Engine, EngineOracle, Outcome
from ._highs import HighsEngine
from ._linear import LinearForm

__all__ = ["PulpEngine", "PulpOracle"]


class PulpEngine:
    """Any PuLP solver object through PuLP itself (an `Engine`): a private copy of the problem, objective
    set per call."""

    integral = False  # the solver's values carry its tolerances: snapped and checked by the oracle

    def __init__(self, problem: Any, names: Sequence[str], solver: Any) -> None:
        self._data = problem.toDict()
        self._names = list(names)  # every column of the form: the weighted variables first
        self.solver = solver
        self._problem: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_problem"] = None
        return state

    def solve(self, costs: np.ndarray) -> Outcome:
        pulp: Any = require("pulp", "pulp")
        if self._problem is None:
            by_name, self._problem = pulp.LpProblem.fromDict(self._data)
            self._problem.sense = pulp.LpMinimize
            self._vars = [by_name[name] for name in self._names]
        problem = self._problem
        problem.setObjective(pulp.LpAffineExpression(zip(self._vars, costs.tolist())))
        problem.solve(self.solver)
        sol = problem.sol_status
        if sol == pulp.LpSolutionOptimal or sol == pulp.LpSolutionIntegerFeasible:
            x = [float(v.varValue or 0.0) for v in self._vars]
            return Outcome("optimal" if sol == pulp.LpSolutionOptimal else "feasible", x)
        if sol == pulp.LpSolutionInfeasible or problem.status == pulp.LpStatusInfeasible:
            # Solvers (and PuLP's status mapping) often say "infeasible" for "infeasible or unbounded":
            # with a zero objective a feasible model is solved to optimality, an infeasible one is not.
            problem.setObjective(pulp.LpAffineExpression())
            problem.solve(self.solver)
            feasible = problem.sol_status == pulp.LpSolutionOptimal
            return Outcome("unbounded" if feasible else "infeasible")
        if sol == pulp.LpSolutionUnbounded or problem.status == pulp.LpStatusUnbounded:
            return Outcome("unbounded")
        if problem.status == pulp.LpStatusNotSolved:
            return Outcome("timeout")
        return Outcome("error", None, pulp.LpStatus[problem.status])


class PulpOracle(EngineOracle):
    """MAP oracle over the constraints of a PuLP ``LpProblem`` (paper, eq. 3), objective replaced per call.

    Parameters
    ----------
    problem
        The ``pulp.LpProblem``; only its constraints and variable bounds/categories are used (read once,
        so later edits of ``problem`` have no effect). Its objective is ignored.
    variables
        The ``m`` ``pulp.LpVariable`` s whose values form the state, in weight order. Other variables of
        the problem are auxiliary (objective coefficient 0).
    solver
        ``"cbc"`` (default; PuLP's bundled CBC, fed a model file per call), ``"highs"`` (a ``highspy``
        model kept in memory) or any PuLP solver object (used through ``problem.solve``).
    sense
        ``"min"`` or ``"max"``; default: the problem's own sense.
    time_limit
        Seconds per solve (``None``: no limit). Ignored for a PuLP solver object (set it there).
    strict
        Time limit with a feasible but unproven state: ``False`` returns it with a warning, ``True``
        raises [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError].
    expected_nonzeros
        ``⟨z, 1⟩`` if known; default: estimated from the constraints where possible.

    Notes
    -----
    `solve` raises [`InfeasibleError`][imle_solvers.errors.InfeasibleError] (no feasible state),
    [`UnboundedError`][imle_solvers.errors.UnboundedError] (objective unbounded for these weights) and
    [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] (time limit with no feasible state),
    and [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] rather than return a state
    that violates the model's rows, bounds or integrality (checked relative to each row's scale).

    CBC runs as a child process per call, killed on Ctrl-C and when this process dies (Linux); its
    files live in a scratch directory of their own, removed when the call ends.

    The oracle pickles without its ``highspy`` model, which is rebuilt on first use in the receiving
    process.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * PuLP documentation, <https://coin-or.github.io/pulp/>.
    * COIN-OR CBC (branch and cut), <https://github.com/coin-or/Cbc>.
    * HiGHS, high-performance linear and mixed-integer optimisation, <https://highs.dev/>.

    Examples
    --------
    >>> import pulp
    >>> prob = pulp.LpProblem("pick_two", pulp.LpMaximize)
    >>> x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(4)]
    >>> prob += pulp.lpSum(x) == 2
    >>> PulpOracle(prob, x, solver="highs").solve(np.array([0.5, -1.0, 2.0, 0.1])).tolist()
    [1.0, 0.0, 1.0, 0.0]
    """

    def __init__(
        self,
        problem: Any,
        variables: Sequence[Any],
        solver: Any = "cbc",
        sense: Literal["max", "min"] | None = None,
        *,
        time_limit: float | None = None,
        strict: bool = False,
        expected_nonzeros: float | None = None,
    ) -> None:
        pulp: Any = require("pulp", "pulp")
        form = LinearForm.from_pulp(problem, variables)
        if sense is None:
            sense = "max" if problem.sense == pulp.LpMaximize else "min"
        engine: Engine | None = None
        if not isinstance(solver, str):
            if not isinstance(solver, pulp.LpSolver):
                raise TypeError(f"solver must be 'cbc', 'highs' or a pulp solver object, got {solver!r}")
            engine = PulpEngine(problem, form.names, solver)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros, engine)

    def _init(
        self,
        form: LinearForm,
        solver: Any,
        sense: str,
        time_limit: float | None,
        strict: bool,
        expected_nonzeros: float | None,
        engine: Engine | None = None,
    ) -> None:
        one_of("sense", sense, ("max", "min"))
        if time_limit is not None:
            positive("time_limit", time_limit)  # seconds
        if engine is None:
            if solver == "cbc":
                require("pulp", "pulp")
                engine = CbcEngine(form, time_limit)
            elif solver == "highs":
                require("highspy", "pulp")
                engine = HighsEngine(form, time_limit)
            else:
                raise ValueError(f"solver must be 'cbc', 'highs' or a pulp solver object, got {solver!r}")
        self.sense = sense  # type: ignore[assignment]
        self.n_vars = form.n_vars
        self.expected_nonzeros = form.expected_nonzeros() if expected_nonzeros is None else expected_nonzeros
        self.solver = solver if isinstance(solver, str) else type(solver).__name__
        self.label = f"PulpOracle({self.solver})"
        self.time_limit = time_limit
        self.strict = bool(strict)
        self.form = form
        self._check = FeasibilityCheck(form)
        self._engine = engine

    @classmethod
    def from_linear_form(
        cls,
        form: LinearForm,
        solver: str = "cbc",
        sense: str = "min",
        *,
        time_limit: float | None = None,
        strict: bool = False,
        expected_nonzeros: float | None = None,
    ) -> PulpOracle:
        """An oracle on an already validated `LinearForm` (used by [`ILP`][imle_solvers.ILP])."""
        self = cls.__new__(cls)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros)
        return self

    def __repr__(self) -> str:
        return (
            f"PulpOracle(n_vars={self.n_vars}, sense={self.sense!r}, solver={self.solver!r}, "
            f"time_limit={self.time_limit})"
        )
