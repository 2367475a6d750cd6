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

from ..._checks import one_of, positive, positive_int
from ...errors import require
from ._cbc import CbcEngine
from ._check import FeasibilityCheck
from ._engine import Engine, EngineOracle, Outcome
from ._highs import HighsEngine
from ._linear import LinearForm

__all__ = ["SOLVERS", "PulpEngine", "PulpOracle"]

SOLVERS = ("cbc", "highs", "gurobi", "scip")
"""The solvers [`PulpOracle`][imle_solvers.PulpOracle] (and [`ILP`][imle_solvers.ILP]) name by string."""
_TUNABLE = ("gurobi", "scip")  # the solvers that take ``workers`` and ``parameters``


def _no_tuning(solver: str, workers: int | None, parameters: dict[str, Any] | None) -> None:
    """``ValueError`` for ``workers`` or ``parameters`` given to a solver that does not take them."""
    for name, value in (("workers", workers), ("parameters", parameters)):
        if value is not None:
            raise ValueError(
                f"{name}= applies to the solvers {' and '.join(map(repr, _TUNABLE))} only, not to "
                f"{solver!r} (got {name}={value!r})"
            )


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
        model kept in memory), ``"gurobi"`` (a ``gurobipy`` model kept in memory, extra ``gurobi``),
        ``"scip"`` (a ``pyscipopt`` model kept in memory, extra ``scip``) or any PuLP solver object (used
        through ``problem.solve``).
    sense
        ``"min"`` or ``"max"``; default: the problem's own sense.
    time_limit
        Seconds per solve (``None``: no limit). Ignored for a PuLP solver object (set it there).
    strict
        Time limit with a feasible but unproven state: ``False`` returns it with a warning, ``True``
        raises [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError].
    expected_nonzeros
        ``⟨z, 1⟩`` if known; default: estimated from the constraints where possible.
    workers
        Threads per solve, ``"gurobi"`` only (Gurobi's ``Threads``, default 1: a
        [`SolverPool`][imle_solvers.SolverPool] parallelises across instances); ``"scip"`` takes 1 only.
    parameters
        The solver's own parameters by name, ``"gurobi"`` (``{"Presolve": 2}``) and ``"scip"``
        (``{"presolving/maxrounds": 0}``) only; each is set when the oracle is made, so an unknown name
        or a value out of range raises ``ValueError`` there.

    Notes
    -----
    `solve` raises [`InfeasibleError`][imle_solvers.errors.InfeasibleError] (no feasible state),
    [`UnboundedError`][imle_solvers.errors.UnboundedError] (objective unbounded for these weights) and
    [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] (time limit with no feasible state),
    and [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] rather than return a state
    that violates the model's rows, bounds or integrality (checked relative to each row's scale).

    CBC runs as a child process per call, killed on Ctrl-C and when this process dies (Linux); its
    files live in a scratch directory of their own, removed when the call ends.

    The costs reach the solver scaled by the power of two that brings ``max|c|`` into ``[1, 2)`` (exact:
    the same optimal states), so costs from ``1e-300`` to ``1e308`` are solved alike.

    Gurobi's size-limited licence (``pip install gurobipy`` without a licence file) solves models of at
    most 2,000 variables and 2,000 constraints; a larger one raises
    [`SolverLicenseError`][imle_solvers.errors.SolverLicenseError] when the oracle is made.

    The oracle pickles without its ``highspy``, ``gurobipy`` or ``pyscipopt`` model, which is rebuilt on
    first use in the receiving process (and in each thread).

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * PuLP documentation, <https://coin-or.github.io/pulp/>.
    * COIN-OR CBC (branch and cut), <https://github.com/coin-or/Cbc>.
    * HiGHS, high-performance linear and mixed-integer optimisation, <https://highs.dev/>.
    * Gurobi Optimizer reference manual, <https://docs.gurobi.com/projects/optimizer/en/current/>.
    * Bolusani et al., "The SCIP Optimization Suite 9.0", 2024, <https://arxiv.org/abs/2402.17702>.

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
        workers: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        pulp: Any = require("pulp", "pulp")
        form = LinearForm.from_pulp(problem, variables)
        if sense is None:
            sense = "max" if problem.sense == pulp.LpMaximize else "min"
        engine: Engine | None = None
        if not isinstance(solver, str):
            if not isinstance(solver, pulp.LpSolver):
                raise TypeError(
                    f"solver must be one of {', '.join(map(repr, SOLVERS))} or a pulp solver object, "
                    f"got {solver!r}"
                )
            _no_tuning(type(solver).__name__, workers, parameters)
            engine = PulpEngine(problem, form.names, solver)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros, engine, workers, parameters)

    def _init(
        self,
        form: LinearForm,
        solver: Any,
        sense: str,
        time_limit: float | None,
        strict: bool,
        expected_nonzeros: float | None,
        engine: Engine | None = None,
        workers: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        one_of("sense", sense, ("max", "min"))
        if time_limit is not None:
            positive("time_limit", time_limit)  # seconds
        if engine is None:
            if not isinstance(solver, str) or solver not in SOLVERS:
                raise ValueError(
                    f"solver must be one of {', '.join(map(repr, SOLVERS))} or a pulp solver object, "
                    f"got {solver!r}"
                )
            if solver in _TUNABLE:
                if workers is not None:
                    positive_int("workers", workers)
                if parameters is not None and not isinstance(parameters, dict):
                    raise TypeError(f"parameters must be a dict of {solver} parameters, got {parameters!r}")
                tuning: dict[str, Any] = {
                    "workers": 1 if workers is None else int(workers),
                    "parameters": parameters,
                }
            else:
                _no_tuning(solver, workers, parameters)
            if solver == "cbc":
                require("pulp", "pulp")
                engine = CbcEngine(form, time_limit)
            elif solver == "highs":
                require("highspy", "pulp")
                engine = HighsEngine(form, time_limit)
            elif solver == "gurobi":
                from ._gurobi import GurobiEngine

                engine = GurobiEngine(form, time_limit, **tuning)
            else:
                from ._scip import ScipEngine

                engine = ScipEngine(form, time_limit, **tuning)
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
        workers: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> PulpOracle:
        """An oracle on an already validated `LinearForm` (used by [`ILP`][imle_solvers.ILP])."""
        self = cls.__new__(cls)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros, None, workers, parameters)
        return self

    def __repr__(self) -> str:
        return (
            f"PulpOracle(n_vars={self.n_vars}, sense={self.sense!r}, solver={self.solver!r}, "
            f"time_limit={self.time_limit})"
        )
