"""The solution check every ILP adapter runs before handing a state back.

A solver works with tolerances of its own (HiGHS and CBC accept ``A x ≤ b + 10⁻⁶`` in their scaled
model; a row whose coefficients are tiny or huge slips through them). `FeasibilityCheck` tests the
returned state against the *declared* `LinearForm` with a tolerance relative to each row's own scale,

``max(A_i x − ub_i, lb_i − A_i x) ≤ rtol · (|A_i|·|x| + |b_i|) + ftol · Σ_{j continuous} |A_ij|``,

so ``4e-7·x ≤ 5e-7`` is checked as strictly as ``4·x ≤ 5``; integer columns must be within ``int_tol`` of an
integer (they are then snapped to it, and the rows are checked with the snapped values). A failure raises
[`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] instead of returning a wrong state.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...errors import InvalidSolutionError
from ._linear import SMALL, LinearForm

__all__ = ["FeasibilityCheck"]

_DENSE_LIMIT = 1 << 16  # up to this many matrix entries the check uses a dense copy (no scipy call overhead)


class FeasibilityCheck:
    """Vectorised check of a full solution vector (all columns, auxiliary ones too) against a form.

    Parameters
    ----------
    form
        The declared model.
    rtol
        Relative tolerance on each row (and bound), see the module notes. ``1e-9`` absorbs
        floating-point rounding of ``A x`` (``0.1 + 0.2 > 0.3``), nothing a solver tolerance hides.
    ftol
        Absolute slack per unit of coefficient on continuous columns only (solvers return them with
        their own primal tolerance; integer columns are exact after snapping).
    int_tol
        How far an integer column may be from an integer before it counts as fractional.
    """

    def __init__(
        self, form: LinearForm, rtol: float = 1e-9, ftol: float = 1e-6, int_tol: float = 1e-6
    ) -> None:
        self.form = form
        self.rtol, self.int_tol = rtol, int_tol
        A = form.A
        self._A: Any = A.toarray() if A.shape[0] * A.shape[1] <= _DENSE_LIMIT else A
        self._absA: Any = np.abs(self._A) if isinstance(self._A, np.ndarray) else abs(A)
        self._lb, self._ub = form.row_lb, form.row_ub
        finite = np.where(np.isfinite(form.row_lb), np.abs(form.row_lb), 0.0)
        self._b_scale = np.maximum(finite, np.where(np.isfinite(form.row_ub), np.abs(form.row_ub), 0.0))
        cont = ~form.integer
        self._cont_slack = (
            ftol * np.asarray(self._absA[:, cont].sum(axis=1)).ravel()
            if cont.any()
            else np.zeros(form.n_rows)
        )  # ftol · Σ_cont |A_ij|   [rows]
        # bounds: integer columns exact (after snapping), continuous ones with rtol·|bound| + ftol
        slack = np.where(cont, ftol, 0.0)
        with np.errstate(invalid="ignore"):
            lo, hi = form.col_lb, form.col_ub
            self._col_lo = lo - np.where(np.isfinite(lo), rtol * np.abs(lo), 0) - slack
            self._col_hi = hi + np.where(np.isfinite(hi), rtol * np.abs(hi), 0) + slack
        self._int_cols = np.flatnonzero(form.integer)
        self._all_integer = bool(form.integer.all())
        self._has_rows = form.n_rows > 0
        # fast path: one product checks rows and bounds exactly, [M, −c] · [x; 1] ≤ 0 with
        # M = [A; I; −A; −I] and c = [ub_row; ub_col; −lb_row; −lb_col] (an infinite bound becomes ∓1e300:
        # never / always violated); the tolerances only come in when it fails. Few numpy calls: right
        # after a solve each one runs with cold caches, so their number is what the check costs
        c = np.concatenate([form.row_ub, form.col_ub, -form.row_lb, -form.col_lb])
        last = np.clip(-c, -1e300, 1e300)[:, None]  # −c   [2·(rows + cols), 1]
        if isinstance(self._A, np.ndarray):
            eye = np.eye(form.n_cols)
            self._M: Any = np.hstack([np.vstack([self._A, eye, -self._A, -eye]), last])
        else:
            eye = sp.identity(form.n_cols, format="csr")
            stacked = sp.vstack([self._A, eye, -self._A, -eye])
            self._M = sp.hstack([stacked, sp.csr_matrix(last)], format="csr")
        self._int_tol_sq = int_tol**2
        # small all-integer models (the common case): snap and compare in plain Python around a single
        # product [A; I] z. Right after a solve every numpy call runs cold, and reductions cost most
        self._small = isinstance(self._A, np.ndarray) and form.n_cols <= SMALL and self._all_integer
        if self._small:
            self._AI = np.vstack([self._A, np.eye(form.n_cols)])  # [A; I]   [rows + cols, cols]
            self._lo = [*form.row_lb.tolist(), *form.col_lb.tolist()]
            self._hi = [*form.row_ub.tolist(), *form.col_ub.tolist()]

    def __call__(self, values: Any, owner: str, *, integral: bool = False) -> np.ndarray:
        """Check ``values`` (``(n_cols,)``) and return them as float64, integer columns snapped.

        ``integral=True`` says the values are integers already (CP-SAT): no integrality test. Raises
        [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError] naming the violated constraint row
        or variable.
        """
        if self._small:
            return self._small_check(values, owner, integral)
        x = np.array([*values, 1.0], dtype=np.float64)  # [x; 1]: the fast path's product   [n_cols + 1]
        if not integral:
            if self._all_integer:
                z = np.rint(x)
            else:
                z = x.copy()
                z[self._int_cols] = np.rint(x[self._int_cols])
            d = x - z
            if not d @ d <= self._int_tol_sq:  # ‖x − z‖₂ ≤ tol implies max|x − z| ≤ tol (`not ≤`: NaN too)
                self._fractional(values, np.abs(d[:-1]), owner)
            z += 0.0  # no −0.0
            x = z
        if not (self._M @ x).max() <= 0.0:  # a row or bound violated (or NaN), before tolerances
            self._slow(x[:-1], owner)
        return x[:-1]

    def _small_check(self, values: Any, owner: str, integral: bool) -> np.ndarray:
        if integral:
            z = np.array(values, dtype=np.float64)  # [n_cols]
        else:
            try:
                snapped = [round(v) for v in values]  # ints: no −0.0
            except (ValueError, OverflowError):  # NaN or inf
                snapped = None
            if snapped is None or max(map(abs, map(operator.sub, values, snapped))) > self.int_tol:
                x = np.asarray(values, dtype=np.float64)
                self._fractional(values, np.abs(x - np.rint(x)), owner)  # raises unless within relative tol
                z = np.rint(x) + 0.0
            else:
                z = np.array(snapped, dtype=np.float64)
        for a, lo, hi in zip((self._AI @ z).tolist(), self._lo, self._hi):  # A z and z against their bounds
            if not lo <= a <= hi:  # (`not`: NaN fails too)
                self._slow(z, owner)
                break
        return z

    def _fractional(self, values: Any, off: np.ndarray, owner: str) -> None:
        """The fast integrality test failed: test each integer column (relative to the largest value)."""
        if not self._all_integer:
            off = off[self._int_cols]
        if off.max() <= self.int_tol * max(1.0, float(np.max(np.abs(np.asarray(values, dtype=np.float64))))):
            # (NaN fails this test)
            return  # a large value: its integrality tolerance is relative
        j = int(np.argmax(off))
        j = j if self._all_integer else int(self._int_cols[j])
        self._fail(
            owner,
            f"integer variable {j} ({self.form.names[j]!r}) has the fractional value {float(values[j])!r}",
            None,
            float(off.max()),
        )

    def _slow(self, x: np.ndarray, owner: str) -> None:
        """The exact test failed: check bounds and rows with their tolerances, raise naming the first."""
        if not np.isfinite(x).all():
            j = int(np.flatnonzero(~np.isfinite(x))[0])
            self._fail(owner, f"variable {j} ({self.form.names[j]!r}) = {float(x[j])!r}", None, float("inf"))
        if ((x < self._col_lo) | (x > self._col_hi)).any():
            j = int(np.flatnonzero((x < self._col_lo) | (x > self._col_hi))[0])
            self._fail(
                owner,
                f"variable {j} ({self.form.names[j]!r}) = {float(x[j])!r} is outside its bounds "
                f"[{self.form.col_lb[j]}, {self.form.col_ub[j]}]",
                None,
                float(max(self.form.col_lb[j] - x[j], x[j] - self.form.col_ub[j])),
            )
        if self._has_rows:
            r = self._A @ x  # A x   [rows]
            over = np.maximum(r - self._ub, self._lb - r)  # > 0 where a row is violated   [rows]
            if over.max() > 0.0:
                scale = self._absA @ np.abs(x) + self._b_scale  # |A|·|x| + |b|   [rows]
                bad = over > self.rtol * scale + self._cont_slack
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    self._fail(
                        owner,
                        f"constraint row {i} is violated: A x = {float(r[i])!r} outside "
                        f"[{self._lb[i]}, {self._ub[i]}] by {over[i]:.3g} (relative "
                        f"{over[i] / max(scale[i], 1e-300):.3g})",
                        i,
                        float(over[i]),
                    )

    @staticmethod
    def _fail(owner: str, what: str, row: int | None, violation: float) -> None:
        err = InvalidSolutionError(
            f"{owner}: the solver returned a state that violates the model: {what}. "
            "This is numerical trouble in the solver (coefficients far apart in "
            "magnitude?): rescale the model or try another backend"
        )
        err.constraint, err.violation = row, violation
        raise err
