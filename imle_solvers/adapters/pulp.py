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
import signal
import subprocess
import sys
import tempfile
import threading
import time
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
from ._check import FeasibilityCheck
from ._interrupt import default_sigint, set_sigint, solving
from ._linear import LinearForm, check_single, unproven

__all__ = ["PulpOracle"]

# Outcome of one engine call: "optimal" | "feasible" (time limit, unproven) | "infeasible" | "unbounded"
# | "timeout" (time limit, no feasible state) | "error".
Outcome = tuple[str, "Sequence[float] | None", str]

_CBC_PATH: str | None = None
_CHILD: dict[str, Any] | None = None  # how CBC is started (`_child_options`)
_SWEPT = -1  # pid of the process that last swept stale scratch directories


def scratch_root() -> str | None:
    """Where CBC's model and solution files go: a RAM disk (``/dev/shm``) when there is one."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _scratch_dir() -> str:
    """A fresh scratch directory for one CBC call, named after this process.

    The caller removes it; a process killed mid-call leaves one behind, which the next process to
    start a CBC call removes (`_sweep`).
    """
    global _SWEPT
    root = scratch_root()
    if _SWEPT != os.getpid():
        _SWEPT = os.getpid()
        _sweep(root or tempfile.gettempdir())
    return tempfile.mkdtemp(prefix=f"imle-cbc-{os.getpid()}-", dir=root)


def _sweep(root: str) -> None:
    """Remove the scratch directories of processes that no longer exist."""
    try:
        names = os.listdir(root)
    except OSError:  # pragma: no cover - unreadable scratch root
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["imle", "cbc"] or not parts[2].isdigit():
            continue
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:  # alive, another user's
            continue


def _child_options() -> dict[str, Any]:
    """How CBC is started so that it dies with this process (Linux: ``PR_SET_PDEATHSIG``).

    Through util-linux's ``setpriv --pdeathsig KILL`` when it exists (an extra ``exec``, about 1 ms);
    otherwise a ``preexec_fn`` calling ``prctl`` (correct, but it makes Python ``fork`` instead of
    ``vfork``: tens of ms in a large process); elsewhere nothing.
    """
    global _CHILD
    if _CHILD is None:
        setpriv = shutil.which("setpriv")
        if (
            sys.platform.startswith("linux")
            and setpriv is not None
            and subprocess.run(
                [setpriv, "--pdeathsig", "KILL", "true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            ).returncode
            == 0
        ):
            _CHILD = {"prefix": [setpriv, "--pdeathsig", "KILL"]}
        elif sys.platform.startswith("linux"):
            _CHILD = {"preexec_fn": _die_with_parent}
        else:  # pragma: no cover - not Linux
            _CHILD = {}
    return _CHILD


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes

    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1


def _run_child(args: list[str]) -> None:
    """Run ``args`` to completion; the child is killed when this call is interrupted or stopped, or when
    this process dies."""
    options = dict(_child_options())
    prefix = options.pop("prefix", [])
    proc = subprocess.Popen(
        [*prefix, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **options,
    )
    stopped: list[bool] = []

    def stop() -> None:
        stopped.append(True)
        proc.kill()

    try:
        with solving(stop):
            proc.wait()
    except BaseException:  # Ctrl-C on the main thread: no CBC left behind
        proc.kill()
        proc.wait()
        raise
    if stopped:
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        raise ImleSolversError("CBC: the solve was stopped (interpreter exit or stop_solves)")


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
        # an unbounded objective needs a variable without a bound (auxiliary columns included)
        self.can_be_unbounded = not (np.isfinite(form.col_lb).all() and np.isfinite(form.col_ub).all())

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
                for i, v in zip(
                    A.indices[A.indptr[j] : A.indptr[j + 1]], A.data[A.indptr[j] : A.indptr[j + 1]]
                )
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
                raise ImleSolversError(
                    "no CBC executable: PuLP's bundled CBC is missing and `cbc` is not on "
                    "the PATH (pip install 'pulp[cbc]')"
                )
            path = os.path.realpath(found[0])
            if not os.access(path, os.X_OK):  # PuLP ships it without the execute bit on some installs
                os.chmod(path, os.stat(path).st_mode | 0o111)
            _CBC_PATH = path
        return _CBC_PATH

    def close(self) -> None:
        """Nothing to release: each call removes its own scratch directory."""

    def solve(self, costs: np.ndarray) -> Outcome:
        directory = _scratch_dir()
        mps_path = os.path.join(directory, "model.mps")
        sol_path = os.path.join(directory, "solution.txt")
        try:
            with open(mps_path, "w") as fh:
                fh.write(self.mps(costs))
            args = [self.binary(), mps_path, "integerTolerance", "1e-9"]  # CBC's 1e-7 accepts 0.9999999
            if self.time_limit is not None:
                args += ["timeMode", "elapsed", "sec", repr(float(self.time_limit))]  # wall clock
            args += ["branch", "solution", sol_path]
            started = time.perf_counter()
            _run_child(args)
            try:
                with open(sol_path) as fh:
                    raw = fh.read()
            except FileNotFoundError:
                return "error", None, "CBC wrote no solution file"
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        outcome = self._parse(raw)
        if (
            outcome[0] == "infeasible"
            and self.time_limit is not None
            and time.perf_counter() - started >= self.time_limit
        ):
            # CBC can print "Integer infeasible" for a feasible model when its clock runs out (its root cut
            # loop, interrupted, returns a bogus bound; seen on planted market-split instances): only a
            # run that ended before the limit proves infeasibility.
            return "timeout", None, outcome[2]
        if outcome[0] == "infeasible" and costs.any():
            # CBC may call an unbounded MIP "infeasible": a zero objective tells the two apart.
            if self.solve(np.zeros_like(costs))[0] == "optimal":
                if self.can_be_unbounded:
                    return "unbounded", None, outcome[2]
                return (
                    "error",
                    None,
                    (
                        f"CBC called the model infeasible ({outcome[2]!r}) but it has a "
                        "feasible "
                        "state: numerical trouble; rescale the model or use backend='highs'"
                    ),
                )
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


class _HighsEngine:
    """A ``highspy`` model built once (per thread) from a `LinearForm`; per call
    ``changeColsCost`` + ``run``. Threads of a pool each get their own model.

    Rows are scaled by powers of two (exact) so that their largest coefficient is about 1: HiGHS
    rejects coefficients above 10¹⁵ and checks feasibility with absolute tolerances, set here to
    10⁻⁹ (its defaults, 10⁻⁶ and 10⁻⁷, accept ``1.0000001 + 1 ≤ 2``).
    """

    def __init__(self, form: LinearForm, time_limit: float | None) -> None:
        self.form = form
        self.time_limit = time_limit
        self._local = threading.local()
        self._build()  # at construction: a model HiGHS rejects raises here, not on the first solve

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
            top = np.zeros(form.n_rows)
            np.maximum.at(top, np.repeat(np.arange(form.n_rows), np.diff(A.indptr)), np.abs(A.data))
            top[top == 0] = 1.0
            scale = np.exp2(-np.round(np.log2(top)))  # 2^-k: exact   [rows]
            data = A.data * np.repeat(scale, np.diff(A.indptr))
            with np.errstate(invalid="ignore"):
                lb, ub = form.row_lb * scale, form.row_ub * scale
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

    def _infeasible_or_unbounded(self, h: Any, costs: np.ndarray) -> str:
        """Tell them apart: with a zero objective a feasible model is optimal, an infeasible one is not."""
        h.changeColsCost(self.form.n_vars, self._cols, np.zeros_like(costs))
        h.run()
        feasible = h.getModelStatus() == self._status.kOptimal
        return "unbounded" if feasible else "infeasible"


class _PulpEngine:
    """Any PuLP solver object through PuLP itself: a private copy of the problem, objective set per call."""

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
    [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] (time limit with no feasible state),
    and [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] rather than return a state
    that violates the model's rows, bounds or integrality (checked relative to each row's scale).

    CBC runs as a child process per call, killed on Ctrl-C and when this process dies (Linux); its
    files live in a scratch directory of their own, removed when the call ends.

    The oracle pickles without its ``highspy`` model, which is rebuilt on first use in the receiving
    process.

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
            engine = _PulpEngine(problem, form.names, solver)
        self._init(form, solver, sense, time_limit, strict, expected_nonzeros, engine)

    def _init(
        self,
        form: LinearForm,
        solver: Any,
        sense: str,
        time_limit: float | None,
        strict: bool,
        expected_nonzeros: float | None,
        engine: Any = None,
    ) -> None:
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
        self.expected_nonzeros = form.expected_nonzeros() if expected_nonzeros is None else expected_nonzeros
        self.solver = solver if isinstance(solver, str) else type(solver).__name__
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

    def close(self) -> None:
        """Release the back end's resources (CBC keeps none: each call removes its own scratch files)."""
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
            values = list(x)
            if len(values) < self.form.n_cols:  # CBC lists the columns up to the last non-zero one
                values += [0.0] * (self.form.n_cols - len(values))
            z = self._check(values, name)[: self.n_vars]  # integer columns snapped, rows and bounds checked
            if outcome == "feasible":
                unproven(name, self.time_limit, self.strict)
            return z
        if outcome == "infeasible":
            raise InfeasibleError(f"{name}: the model is infeasible")
        if outcome == "unbounded":
            raise UnboundedError(f"{name}: the objective is unbounded for these weights")
        if outcome == "timeout":
            raise SolverTimeoutError(
                f"{name}: no feasible state found within the time limit of {self.time_limit} s"
            )
        raise ImleSolversError(f"{name}: solver failed ({detail})")

    def __repr__(self) -> str:
        return (
            f"PulpOracle(n_vars={self.n_vars}, sense={self.sense!r}, solver={self.solver!r}, "
            f"time_limit={self.time_limit})"
        )
