"""The CBC engine: a `LinearForm` solved by one CBC child process per call, fed the model as an MPS file.

The back end of [`PulpOracle`][imle_solvers.PulpOracle] (and [`ILP`][imle_solvers.ILP]) for ``solver="cbc"``.
``problem.solve(PULP_CBC_CMD())`` re-walks the model in Python, writes it as MPS, starts a ``cbc`` process and
parses its solution file; `CbcEngine` keeps the MPS text of every column and per call only inserts the
objective coefficients. What remains is CBC's own cost (process start, reading the file, solving), which PuLP
offers no way to avoid: CBC has no in-process API in PuLP, and a long-lived interactive CBC process gives
wrong answers after the objective changes (it keeps the old incumbent).

CBC runs as a child process that dies with this one (Linux), killed on Ctrl-C and `stop_solves`; its
files live in a scratch directory of its own (a RAM disk where there is one), removed when the call
ends and swept by the next process when a killed one left it behind.
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
from typing import Any

import numpy as np

from ..._interrupt import solving
from ...errors import ImleSolversError, require
from ._engine import Outcome, Status
from ._linear import LinearForm

__all__ = ["CbcEngine", "scratch_root"]

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


class CbcEngine:
    """CBC on a `LinearForm` (an `Engine`): the MPS text of every column is kept, only ``OBJ`` entries
    change.

    Each call writes the model file and runs ``cbc model.mps [sec T] branch solution sol.txt``. A CBC
    process kept alive between calls (its interactive mode) was tried and rejected: after a second
    ``import`` CBC keeps the previous model's incumbent with its *old* objective value and prunes the
    true optimum away (see ``tests/adapters/test_pulp.py::test_cbc_objective_changes_between_calls``).
    """

    integral = False  # CBC's values carry its tolerances: snapped and checked by the oracle

    def __init__(self, form: LinearForm, time_limit: float | None) -> None:
        self.form = form
        self.time_limit = time_limit
        self._head, self._columns, self._tail = self._mps_parts(form)
        # an unbounded objective needs a variable without a bound (auxiliary columns included)
        self.can_be_unbounded = not (np.isfinite(form.col_lb).all() and np.isfinite(form.col_ub).all())
        # a row no integer state satisfies: CBC may search forever, or call the model unbounded
        self._infeasible_row = form.infeasible_row()

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

    def solve(self, costs: np.ndarray) -> Outcome:
        if self._infeasible_row is not None:
            return Outcome("infeasible", None, f"row {self._infeasible_row} has no integer solution")
        outcome, elapsed = self._run(costs)
        status = outcome.status
        if status == "infeasible" and self.time_limit is not None and elapsed >= self.time_limit:
            # CBC can print "Integer infeasible" for a feasible model when its clock runs out (its root cut
            # loop, interrupted, returns a bogus bound; seen on planted market-split instances): only a
            # run that ended before the limit proves infeasibility.
            return Outcome("timeout", None, outcome.detail)
        if status == "unbounded" or (status == "infeasible" and costs.any()):
            return self._infeasible_or_unbounded(costs, outcome)
        return outcome

    def _infeasible_or_unbounded(self, costs: np.ndarray, claim: Outcome) -> Outcome:
        """Check CBC's "infeasible" or "unbounded" verdict, which it gives for either.

        CBC calls an unbounded MIP "infeasible", and a model whose LP relaxation is unbounded but which has
        no integer point "unbounded". A model is unbounded for some objective exactly when it is feasible
        and has an unbounded direction, so feasibility decides: a solve with a zero objective. (A row that
        no integer state satisfies, which CBC's search may never prove, was ruled out before the first
        solve: `LinearForm.infeasible_row`.)
        """
        feasible, _ = self._run(np.zeros_like(costs))
        if feasible.status in ("optimal", "feasible"):  # a state exists
            if self.can_be_unbounded:
                return Outcome("unbounded", None, claim.detail)
            return Outcome(
                "error",
                None,
                f"CBC called the model {claim.status} ({claim.detail!r}), but it has a feasible state and "
                "no unbounded variable: numerical trouble; rescale the model or use backend='highs'",
            )
        if feasible.status == "infeasible":
            return Outcome("infeasible", None, feasible.detail)
        return Outcome("timeout" if feasible.status == "timeout" else "error", None, feasible.detail)

    def _run(self, costs: np.ndarray) -> tuple[Outcome, float]:
        """One CBC process on the model with objective ``costs``: its outcome and the seconds it took."""
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
            elapsed = time.perf_counter() - started
            try:
                with open(sol_path) as fh:
                    raw = fh.read()
            except FileNotFoundError:
                return Outcome("error", None, "CBC wrote no solution file"), elapsed
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return self._parse(raw, self.form.n_cols), elapsed

    @staticmethod
    def _parse(raw: str, n_cols: int) -> Outcome:
        """Read CBC's solution file: its first line says how the solve ended, the others list the
        non-zero columns (``index name value reduced-cost``)."""
        lines = raw.splitlines()
        if not lines:
            return Outcome("error", None, "empty CBC solution file")
        words = lines[0].split()
        head = words[0] if words else ""
        status: Status
        if head == "Optimal":
            status = "optimal"
        elif head in ("Infeasible", "Integer"):
            return Outcome("infeasible", None, lines[0])
        elif head == "Unbounded":
            return Outcome("unbounded", None, lines[0])
        elif head == "Stopped":
            # "Stopped on time - objective value …" has a solution; "Stopped on time - no …" has none
            if not (len(words) > 4 and words[4] == "objective"):
                return Outcome("timeout", None, lines[0])
            status = "feasible"
        else:
            return Outcome("error", None, lines[0])
        x = [0.0] * n_cols  # CBC lists the columns up to the last non-zero one
        for line in lines[1:]:
            tokens = line.split()
            if tokens and tokens[0] == "**":  # CBC marks values outside a bound with "**"
                tokens = tokens[1:]
            if len(tokens) >= 3:
                x[int(tokens[0])] = float(tokens[2])
        return Outcome(status, x, lines[0])
