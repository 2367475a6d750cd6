"""PuLP models as MAP oracles, solved by CBC (bundled with PuLP) or HiGHS; the objective changes per call.

What PuLP costs per call, and what this adapter keeps instead (5×5-grid shortest path, see
``docs/benchmarks.md``):

* ``problem.solve(PULP_CBC_CMD())`` re-walks the model in Python and writes it as MPS, starts a
  ``cbc`` process and parses its solution file. [`PulpOracle`][imle_solvers.PulpOracle] reads the constraints
  **once**,
  keeps the MPS text of every column and per call only inserts the objective coefficients; what
  remains is CBC's own cost (process start, reading the file, solving), which PuLP offers no way to
  avoid: CBC has no in-process API in PuLP, and a long-lived interactive CBC process gives wrong
  answers after the objective changes (it keeps the old incumbent).
* ``pulp.HiGHS`` rebuilds a ``highspy`` model on every solve. [`PulpOracle`][imle_solvers.PulpOracle] builds
the
  ``highspy.Highs`` model once and per call only runs ``changeColsCost`` and ``run``.
* Any other PuLP solver object is used through PuLP itself (``setObjective`` + ``solve``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import (
    ImleSolversError,
    InfeasibleError,
    SolverTimeoutError,
    UnboundedError,
    require,
)
from ..oracle import MapOracle
from ._linear import SMALL, LinearForm, check_single, unproven

__all__ = ["PulpOracle"]

# Outcome of one engine call: "optimal" | "feasible" (time limit, unproven) | "infeasible" | "unbounded"
# | "timeout" (time limit, no feasible state) | "error".
Outcome = tuple[str, "Sequence[float] | None", str]

_CBC_PATH: str | None = None


def scratch_root() -> str | None:
    """Where CBC's model and solution files go: a RAM disk (``/dev/shm``) when there is one."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _fmt(value: float) -> str:
    return repr(float(value))  # shortest exact round-trip representation


class _CbcEngine:
    """CBC on a `LinearForm`: the MPS text of every column is kept, only ``OBJ`` entries change.

    Each call writes the model file and runs ``cbc model.mps [sec T] branch solution sol.txt``. A CBC
    process kept alive between calls (its interactive mode) was tried and rejected: after a second
    ``import`` CBC keeps the previous model's incumbent with its *old* objective value and prunes the
    true optimum away (see ``tests/test_pulp.py::test_cbc_objective_changes_between_calls``).
    """

    def __init__(self, form: LinearForm, time_limit: float | None) -> None:
        self.form = form
        self.time_limit = time_limit
        self._head, self._columns, self._tail = self._mps_parts(form)
        self._dir: str | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    # -------------------------------------------------------------- MPS text, built once
    @staticmethod
    def _mps_parts(form: LinearForm) -> tuple[str, list[tuple[str, str]], str]:
        A = form.A.tocsc()
        lb, ub = form.row_lb, form.row_ub
        kinds: list[str | None] = []
        rows = ["NAME imle", "ROWS", " N OBJ"]
        rhs, ranges = [], []
        for i in range(form.n_rows):
            lo, hi = lb[i], ub[i]
            if lo == hi:
                kind, value = "E", lo
            elif np.isfinite(hi):
                kind, value = "L", hi
                if np.isfinite(lo):
                    ranges.append(f"    RNG R{i} {_fmt(hi - lo)}")  # L row with range: lo ≤ a x ≤ hi
            elif np.isfinite(lo):
                kind, value = "G", lo
            else:
                kinds.append(None)  # a free row constrains nothing: left out
                continue
            kinds.append(kind)
            rows.append(f" {kind} R{i}")
            if value != 0:
                rhs.append(f"    RHS R{i} {_fmt(value)}")
        rows.append("COLUMNS")
        head = "\n".join(rows) + "\n"
        columns = []
        for j in range(form.n_cols):
            entries = "".join(
                f"    C{j} R{i} {_fmt(v)}\n"
                for i, v in zip(A.indices[A.indptr[j]:A.indptr[j + 1]], A.data[A.indptr[j]:A.indptr[j + 1]])
                if kinds[i] is not None
            )
            if form.integer[j]:
                pre = f"    M{j} 'MARKER' 'INTORG'\n    C{j} OBJ "
                post = f"\n{entries}    M{j}E 'MARKER' 'INTEND'\n"
            else:
                pre, post = f"    C{j} OBJ ", "\n" + entries
            columns.append((pre, post))
        bounds = []
        for j in range(form.n_cols):
            lo, hi = form.col_lb[j], form.col_ub[j]
            if lo == hi:
                bounds.append(f" FX BND C{j} {_fmt(lo)}")
                continue
            bounds.append(f" LO BND C{j} {_fmt(lo)}" if np.isfinite(lo) else f" MI BND C{j}")
            bounds.append(f" UP BND C{j} {_fmt(hi)}" if np.isfinite(hi) else f" PL BND C{j}")
        tail = ["RHS", *rhs]
        if ranges:
            tail += ["RANGES", *ranges]
        tail += ["BOUNDS", *bounds, "ENDATA", ""]
        return head, columns, "\n".join(tail)

    def mps(self, costs: np.ndarray) -> str:
        """The MPS text of the model with objective ``costs`` (auxiliary columns: 0)."""
        parts = [self._head]
        values = costs.tolist()
        for j, (pre, post) in enumerate(self._columns):
            parts.append(pre)
            parts.append(repr(values[j]) if j < len(values) else "0")
            parts.append(post)
        parts.append(self._tail)
        return "".join(parts)

    @staticmethod
    def binary() -> str:
        """The CBC executable: the one bundled with PuLP, else a ``cbc`` on the ``PATH`` (PuLP ≥ 4)."""
        global _CBC_PATH
        if _CBC_PATH is None:
            require("pulp", "pulp")
            coin_api: Any = require("pulp.apis.coin_api", "pulp")
            candidates = [getattr(coin_api, "pulp_cbc_path", None), shutil.which("cbc")]
            found = [c for c in candidates if c and os.path.isfile(c)]
            if not found:  # pragma: no cover - broken PuLP install
                raise ImleSolversError("no CBC executable: PuLP's bundled CBC is missing and `cbc` is not on "
                                       "the PATH (pip install 'pulp[cbc]')")
            path = os.path.realpath(found[0])
            if not os.access(path, os.X_OK):  # PuLP ships it without the execute bit on some installs
                os.chmod(path, os.stat(path).st_mode | 0o111)
            _CBC_PATH = path
        return _CBC_PATH

    def _workdir(self) -> str:
        """A scratch directory of this process (a forked or unpickled copy makes its own)."""
        with self._lock:
            if self._dir is None or self._pid != os.getpid():
                self._dir = tempfile.mkdtemp(prefix="imle-cbc-", dir=scratch_root())
                self._pid = os.getpid()
                self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
            return self._dir

    def close(self) -> None:
        """Remove the scratch directory (also done when the engine is garbage-collected)."""
        if self._finalizer is not None and self._pid == os.getpid():
            self._finalizer()
        self._dir, self._finalizer = None, None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_dir=None, _pid=-1, _finalizer=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def solve(self, costs: np.ndarray) -> Outcome:
        directory = self._workdir()
        tag = threading.get_ident()  # threads of a pool solve side by side: one file pair each
        mps_path = os.path.join(directory, f"model-{tag}.mps")
        sol_path = os.path.join(directory, f"solution-{tag}.txt")
        with open(mps_path, "w") as fh:
            fh.write(self.mps(costs))
        args = [self.binary(), mps_path]
        if self.time_limit is not None:
            args += ["timeMode", "elapsed", "sec", repr(float(self.time_limit))]  # wall clock, as elsewhere
        args += ["branch", "solution", sol_path]
        started = time.perf_counter()
        try:
            subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            with open(sol_path) as fh:
                raw = fh.read()
        except FileNotFoundError:
            return "error", None, "CBC wrote no solution file"
        finally:
            os.remove(mps_path)  # fresh files every call: rewriting one in place can force a disk flush
        os.remove(sol_path)
        outcome = self._parse(raw)
        if (outcome[0] == "infeasible" and self.time_limit is not None
                and time.perf_counter() - started >= self.time_limit):
            # CBC can print "Integer infeasible" for a feasible model when its clock runs out (its root cut
            # loop, interrupted, returns a bogus bound; seen on planted market-split instances): only a
            # run that ended before the limit proves infeasibility.
            return "timeout", None, outcome[2]
        if outcome[0] == "infeasible" and costs.any():
            # CBC may call an unbounded MIP "infeasible": a zero objective tells the two apart.
            if self.solve(np.zeros_like(costs))[0] == "optimal":
                return "unbounded", None, outcome[2]
        return outcome

    @staticmethod
    def _parse(raw: str) -> Outcome:
        lines = raw.splitlines()
        if not lines:
            return "error", None, "empty CBC solution file"
        words = lines[0].split()
        head = words[0] if words else ""
        if head == "Optimal":
            outcome = "optimal"
        elif head in ("Infeasible", "Integer"):
            return "infeasible", None, lines[0]
        elif head == "Unbounded":
            return "unbounded", None, lines[0]
        elif head == "Stopped":
            # "Stopped on time - objective value …" has a solution; "Stopped on time - no …" has none
            outcome = "feasible" if len(words) > 4 and words[4] == "objective" else "timeout"
            if outcome == "timeout":
                return outcome, None, lines[0]
        else:
            return "error", None, lines[0]
        values: dict[int, float] = {}
        for line in lines[1:]:
            tokens = line.split()
            if tokens and tokens[0] == "**":  # CBC marks values outside a bound with "**"
                tokens = tokens[1:]
            if len(tokens) >= 3:
                values[int(tokens[0])] = float(tokens[2])
        x = [0.0] * (max(values, default=-1) + 1)
        for j, v in values.items():
            x[j] = v
        return outcome, x, lines[0]


def _new_highs(highspy: Any) -> Any:
    """A bare ``highspy`` model: the C++ object without the Python wrapper's callbacks and banner."""
    core = getattr(highspy, "_core", None)
    cls = getattr(core, "_Highs", None) or highspy.Highs
    return cls()


class _HighsEngine:
    """A ``highspy`` model built once (per thread) from a `LinearForm`; per call
    ``changeColsCost`` + ``run``. Threads of a pool each get their own model."""

    def __init__(self, form: LinearForm, time_limit: float | None) -> None:
        self.form = form
        self.time_limit = time_limit
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _build(self) -> Any:
        highspy = require("highspy", "pulp")
        form = self.form
        h = _new_highs(highspy)
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_rel_gap", 0.0)  # optimal, not within HiGHS's default 0.01 % gap
        if self.time_limit is not None:
            h.setOptionValue("time_limit", float(self.time_limit))
        h.addVars(form.n_cols, form.col_lb, form.col_ub)
        if form.integer.any():
            cols = np.flatnonzero(form.integer).astype(np.int32)
            kinds = np.array([highspy.HighsVarType.kInteger] * cols.size)  # type: ignore[attr-defined]
            h.changeColsIntegrality(cols.size, cols, kinds)
        A = form.A
        if form.n_rows:
            h.addRows(form.n_rows, form.row_lb, form.row_ub, A.nnz, A.indptr[:-1].astype(np.int32),
                      A.indices.astype(np.int32), A.data)
        self._cols = np.arange(form.n_vars, dtype=np.int32)
        self._status = highspy.HighsModelStatus  # type: ignore[attr-defined]
        self._local.h = h
        return h

    def solve(self, costs: np.ndarray) -> Outcome:
        h = getattr(self._local, "h", None)
        if h is None:
            h = self._build()
        h.changeColsCost(self.form.n_vars, self._cols, costs)
        h.run()
        status = h.getModelStatus()
        codes = self._status
        if status == codes.kOptimal:
            return "optimal", h.getSolution().col_value, ""
        if status == codes.kInfeasible:
            return "infeasible", None, ""
        if status == codes.kUnbounded:
            return "unbounded", None, ""
        if status == codes.kUnboundedOrInfeasible:
            return self._infeasible_or_unbounded(h, costs), None, ""
        if status == codes.kTimeLimit:
            if h.getInfo().primal_solution_status == 2:  # kSolutionStatusFeasible
                return "feasible", h.getSolution().col_value, ""
            return "timeout", None, ""
        return "error", None, h.modelStatusToString(status)

    def _infeasible_or_unbounded(self, h: Any, costs: np.ndarray) -> str:
        """Tell them apart: with a zero objective a feasible model is optimal, an infeasible one is not."""
        h.changeColsCost(self.form.n_vars, self._cols, np.zeros_like(costs))
        h.run()
        feasible = h.getModelStatus() == self._status.kOptimal
        return "unbounded" if feasible else "infeasible"


class _PulpEngine:
    """Any PuLP solver object through PuLP itself: a private copy of the problem, objective set per call."""

    def __init__(self, problem: Any, variables: Sequence[Any], solver: Any) -> None:
        self._data = problem.toDict()
        self._names = [v.name for v in variables]
        self.solver = solver
        self._problem: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_problem"] = None
        return state

    def solve(self, costs: np.ndarray) -> Outcome:
        pulp = require("pulp", "pulp")
        if self._problem is None:
            by_name, self._problem = pulp.LpProblem.fromDict(self._data)  # type: ignore[attr-defined]
            self._problem.sense = pulp.LpMinimize  # type: ignore[attr-defined]
            self._vars = [by_name[name] for name in self._names]
        problem = self._problem
        problem.setObjective(pulp.LpAffineExpression(zip(self._vars, costs.tolist())))  # type: ignore[attr-defined]
        problem.solve(self.solver)
        sol = problem.sol_status
        if sol == pulp.LpSolutionOptimal or sol == pulp.LpSolutionIntegerFeasible:  # type: ignore[attr-defined]
            x = [float(v.varValue or 0.0) for v in self._vars]
            return ("optimal" if sol == pulp.LpSolutionOptimal else "feasible"), x, ""  # type: ignore[attr-defined]
        if sol == pulp.LpSolutionInfeasible or problem.status == pulp.LpStatusInfeasible:  # type: ignore[attr-defined]
            # Solvers (and PuLP's status mapping) often say "infeasible" for "infeasible or unbounded":
            # with a zero objective a feasible model is solved to optimality, an infeasible one is not.
            problem.setObjective(pulp.LpAffineExpression())  # type: ignore[attr-defined]
            problem.solve(self.solver)
            feasible = problem.sol_status == pulp.LpSolutionOptimal  # type: ignore[attr-defined]
            return ("unbounded" if feasible else "infeasible"), None, ""
        if sol == pulp.LpSolutionUnbounded or problem.status == pulp.LpStatusUnbounded:  # type: ignore[attr-defined]
            return "unbounded", None, ""
        if problem.status == pulp.LpStatusNotSolved:  # type: ignore[attr-defined]
            return "timeout", None, ""
        return "error", None, pulp.LpStatus[problem.status]  # type: ignore[attr-defined]


class PulpOracle(MapOracle):
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
    [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] (time limit with no feasible state).

    The oracle pickles without its ``highspy`` model or scratch directory; both are rebuilt on first
    use in the receiving process.

    Examples
    --------
    >>> import pulp
    >>> prob = pulp.LpProblem("pick_two", pulp.LpMaximize)
    >>> x = [pulp.LpVariable(f"x{i}", cat="Binary") for i in range(4)]
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
        pulp = require("pulp", "pulp")
        form = LinearForm.from_pulp(problem, variables)
        if sense is None:
            sense = "max" if problem.sense == pulp.LpMaximize else "min"  # type: ignore[attr-defined]
        engine: Any = None
        if not isinstance(solver, str):
            if not isinstance(solver, pulp.LpSolver):  # type: ignore[attr-defined]
                raise TypeError(f"solver must be 'cbc', 'highs' or a pulp solver object, got {solver!r}")
            engine = _PulpEngine(problem, variables, solver)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros, engine)

    def _init(self, form: LinearForm, solver: Any, sense: str, time_limit: float | None, strict: bool,
              expected_nonzeros: float | None, engine: Any = None) -> None:
        if sense not in ("max", "min"):
            raise ValueError(f"sense must be 'max' or 'min', got {sense!r}")
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"time_limit must be positive seconds or None, got {time_limit!r}")
        if engine is None:
            if solver == "cbc":
                require("pulp", "pulp")
                engine = _CbcEngine(form, time_limit)
            elif solver == "highs":
                require("highspy", "pulp")
                engine = _HighsEngine(form, time_limit)
            else:
                raise ValueError(f"solver must be 'cbc', 'highs' or a pulp solver object, got {solver!r}")
        self.sense = sense  # type: ignore[assignment]
        self.n_vars = form.n_vars
        self.expected_nonzeros = (form.expected_nonzeros() if expected_nonzeros is None
                                  else expected_nonzeros)
        self.solver = solver if isinstance(solver, str) else type(solver).__name__
        self.time_limit = time_limit
        self.strict = bool(strict)
        self.form = form
        self._integer = form.integer[: form.n_vars].copy()
        self._all_integer = bool(self._integer.all())
        self._some_integer = bool(self._integer.any())
        self._engine = engine

    @classmethod
    def from_linear_form(cls, form: LinearForm, solver: str = "cbc", sense: str = "min", *,
                         time_limit: float | None = None, strict: bool = False,
                         expected_nonzeros: float | None = None) -> PulpOracle:
        """An oracle on an already validated `LinearForm` (used by [`ILP`][imle_solvers.ILP])."""
        self = cls.__new__(cls)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros)
        return self

    def close(self) -> None:
        """Remove CBC's scratch files now (also done when the oracle is garbage-collected)."""
        if isinstance(self._engine, _CbcEngine):
            self._engine.close()

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` instance (weights in `sense`)."""
        w = check_single(weights, self.n_vars, "PulpOracle")
        costs = w if self.sense == "min" else -w  # always minimise c   [m]
        outcome, x, detail = self._engine.solve(costs)
        name = f"PulpOracle({self.solver})"
        if outcome == "optimal" or outcome == "feasible":
            assert x is not None
            n = self.n_vars
            values = list(x[:n])
            if len(values) < n:  # CBC lists only the non-zero columns up to the last one
                values += [0.0] * (n - len(values))
            if self._all_integer and n <= SMALL:
                z = np.array([round(v) for v in values], dtype=np.float64)  # snap solver noise, no −0
            else:
                z = np.array(values, dtype=np.float64)
                if self._all_integer:
                    np.rint(z, out=z)
                elif self._some_integer:
                    z[self._integer] = np.rint(z[self._integer])
                z += 0.0  # no −0.0
            if outcome == "feasible":
                unproven(name, self.time_limit, self.strict)
            return z
        if outcome == "infeasible":
            raise InfeasibleError(f"{name}: the model is infeasible")
        if outcome == "unbounded":
            raise UnboundedError(f"{name}: the objective is unbounded for these weights")
        if outcome == "timeout":
            raise SolverTimeoutError(f"{name}: no feasible state found within the time limit of "
                                     f"{self.time_limit} s")
        raise ImleSolversError(f"{name}: solver failed ({detail})")

    def __repr__(self) -> str:
        return (f"PulpOracle(n_vars={self.n_vars}, sense={self.sense!r}, solver={self.solver!r}, "
                f"time_limit={self.time_limit})")
