"""A solver-neutral linear model ``{x : row_lb ≤ A x ≤ row_ub, col_lb ≤ x ≤ col_ub, x_j ∈ ℤ for j ∈ I}``.

[`ILP`][imle_solvers.ILP] validates a declaration into a `LinearForm`; the CP-SAT, CBC and HiGHS back ends are
all built from it, so the three see exactly the same model. It also reads the constraints of a PuLP problem
(`LinearForm.from_pulp`) and estimates ``⟨z, 1⟩`` where the constraints fix it
(`LinearForm.expected_nonzeros`).

The objective is *not* part of the form: MAP oracles replace it on every call (paper, eq. 3). Columns
``0 … n_vars − 1`` carry the weights; any further columns are auxiliary variables of a PuLP model (objective
coefficient 0, not returned).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..._checks import positive_int
from ...errors import require

__all__ = ["SMALL", "LinearForm"]

SMALL = 256
"""Up to this many variables, per-call arithmetic runs in plain Python (cheaper than NumPy calls)."""


def _as_matrix(name: str, value: Any, n_cols: int) -> sp.csr_matrix:
    """A 2-D numpy array or scipy.sparse matrix with ``n_cols`` columns → CSR float64."""
    if sp.issparse(value):
        mat = sp.csr_matrix(value, dtype=np.float64)
    else:
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 1 and arr.size == n_cols:
            arr = arr[None]  # a single row given as a vector
        if arr.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array or scipy.sparse matrix, got {arr.ndim} dimensions")
        mat = sp.csr_matrix(arr)
    if mat.shape[1] != n_cols:
        raise ValueError(f"{name} has {mat.shape[1]} columns but c_size={n_cols}; shape {mat.shape}")
    if not np.isfinite(mat.data).all():
        raise ValueError(f"{name} contains NaN or inf entries")
    mat.eliminate_zeros()
    return mat


def _as_rhs(name: str, value: Any, n_rows: int, matrix_name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n_rows, float(arr))
    if arr.shape != (n_rows,):
        raise ValueError(
            f"{name} must have shape ({n_rows},) to match {matrix_name} with {n_rows} rows, got {arr.shape}"
        )
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    return arr


def _bound_array(name: str, value: Any, n: int, default: float) -> np.ndarray:
    if value is None:
        return np.full(n, default)
    arr = np.asarray(
        [default if v is None else v for v in value] if isinstance(value, (list, tuple)) else value,
        dtype=np.float64,
    )
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{name} bounds must be a scalar or have shape ({n},), got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} bounds contain NaN (use None or ±inf for no bound)")
    return arr


def _parse_bounds(bounds: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` of scalars/None/arrays, or ``n`` pairs ``[(lo_j, hi_j), …]`` → two ``(n,)`` arrays."""
    if bounds is None:
        return np.full(n, -np.inf), np.full(n, np.inf)
    if isinstance(bounds, np.ndarray) and bounds.shape == (n, 2) and n != 2:
        return _bound_array("lower", bounds[:, 0], n, -np.inf), _bound_array("upper", bounds[:, 1], n, np.inf)
    seq = list(bounds)
    if len(seq) == n and n != 2 and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in seq):
        lo = [p[0] for p in seq]
        hi = [p[1] for p in seq]
        return _bound_array("lower", lo, n, -np.inf), _bound_array("upper", hi, n, np.inf)
    if len(seq) != 2:
        raise ValueError(
            f"bounds must be a pair (lower, upper) of scalars or ({n},) arrays, or {n} pairs; "
            f"got a sequence of length {len(seq)}"
        )
    return _bound_array("lower", seq[0], n, -np.inf), _bound_array("upper", seq[1], n, np.inf)


@dataclasses.dataclass(frozen=True, eq=False)
class LinearForm:
    """``row_lb ≤ A x ≤ row_ub``, ``col_lb ≤ x ≤ col_ub``, ``x_j`` integer where ``integer[j]``.

    Attributes
    ----------
    n_vars
        Number of weighted columns (the oracle's ``m``); columns ``n_vars …`` are auxiliary.
    A
        ``(rows, cols)`` CSR matrix.
    row_lb
        ``(rows,)`` lower row bounds (``-inf`` when absent; equal to `row_ub` for an equality).
    row_ub
        ``(rows,)`` upper row bounds (``inf`` when absent).
    col_lb
        ``(cols,)`` lower variable bounds (``-inf`` when absent).
    col_ub
        ``(cols,)`` upper variable bounds (``inf`` when absent).
    integer
        ``(cols,)`` integrality mask.
    names
        Column names (PuLP names when read from PuLP, ``x0, x1, …`` otherwise).
    """

    n_vars: int
    A: sp.csr_matrix
    row_lb: np.ndarray
    row_ub: np.ndarray
    col_lb: np.ndarray
    col_ub: np.ndarray
    integer: np.ndarray
    names: tuple[str, ...]

    @property
    def n_cols(self) -> int:
        return int(self.A.shape[1])

    @property
    def n_rows(self) -> int:
        return int(self.A.shape[0])

    @classmethod
    def from_matrices(
        cls,
        c_size: int,
        A_ub: Any = None,
        b_ub: Any = None,
        A_eq: Any = None,
        b_eq: Any = None,
        bounds: Any = (0, 1),
        integer: bool | Sequence[bool] | np.ndarray = True,
    ) -> LinearForm:
        """Validate an ``ILP`` declaration (see [`ILP`][imle_solvers.ILP]); raises ``ValueError``."""
        n = positive_int("c_size", int(c_size) if isinstance(c_size, np.integer) else c_size)
        blocks: list[sp.csr_matrix] = []
        lbs: list[np.ndarray] = []
        ubs: list[np.ndarray] = []
        for a_name, b_name, mat, rhs, kind in (
            ("A_ub", "b_ub", A_ub, b_ub, "ub"),
            ("A_eq", "b_eq", A_eq, b_eq, "eq"),
        ):
            if mat is None and rhs is None:
                continue
            if mat is None or rhs is None:
                raise ValueError(f"{a_name} and {b_name} must be given together")
            a = _as_matrix(a_name, mat, n)
            b = _as_rhs(b_name, rhs, a.shape[0], a_name)
            if kind == "eq" and not np.isfinite(b).all():
                raise ValueError(f"{b_name} must be finite (an equality with an infinite right-hand side)")
            if (b == -np.inf).any():
                i = int(np.flatnonzero(b == -np.inf)[0])
                raise ValueError(
                    f"{b_name}[{i}] is -inf: no state satisfies {a_name}[{i}] z ≤ -inf "
                    "(use +inf for a row without a bound)"
                )
            blocks.append(a)
            ubs.append(b)
            lbs.append(b.copy() if kind == "eq" else np.full(b.shape, -np.inf))
        A = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, n))
        col_lb, col_ub = _parse_bounds(bounds, n)
        if (col_lb > col_ub).any():
            j = int(np.flatnonzero(col_lb > col_ub)[0])
            raise ValueError(f"bounds: lower > upper for variable {j} ({col_lb[j]} > {col_ub[j]})")
        if isinstance(integer, (bool, np.bool_)):
            mask = np.full(n, bool(integer))
        else:
            mask = np.asarray(integer)
            if mask.shape != (n,) or mask.dtype.kind not in "bui":
                raise ValueError(
                    f"integer must be a bool or a ({n},) boolean mask, got shape {mask.shape} "
                    f"and dtype {mask.dtype}"
                )
            mask = mask.astype(bool)
        return cls(
            n,
            A,
            np.concatenate(lbs) if lbs else np.zeros(0),
            np.concatenate(ubs) if ubs else np.zeros(0),
            col_lb,
            col_ub,
            mask,
            tuple(f"x{j}" for j in range(n)),
        )

    @classmethod
    def from_pulp(cls, problem: Any, variables: Sequence[Any]) -> LinearForm:
        """Read a PuLP ``LpProblem``'s constraints; ``variables`` (in weight order) come first.

        Other variables of the problem become auxiliary columns. The problem's objective is ignored.
        """
        pulp: Any = require("pulp", "pulp")
        if not isinstance(problem, pulp.LpProblem):
            raise TypeError(f"problem must be a pulp.LpProblem, got {type(problem).__name__}")
        variables = list(variables)
        if not variables:
            raise ValueError("variables must list at least one pulp.LpVariable")
        col: dict[str, int] = {}
        for j, v in enumerate(variables):
            if not isinstance(v, pulp.LpVariable):
                raise TypeError(f"variables[{j}] is a {type(v).__name__}, not a pulp.LpVariable")
            if v.name in col:
                raise ValueError(f"variable {v.name!r} appears twice in variables")
            col[v.name] = j
        extra = [v for v in problem.variables() if v.name not in col]
        all_vars = [*variables, *extra]
        for v in extra:
            col[v.name] = len(col)
        rows, cols, vals = [], [], []
        row_lb, row_ub = [], []
        # PuLP ≥ 3.3 (and 4.0): constraints() lists them; older PuLP: a dict of them
        listed = problem.constraints() if callable(problem.constraints) else problem.constraints.values()
        for i, con in enumerate(listed):
            for v, coef in con.items():
                if v.name not in col:  # pragma: no cover - problem.variables() lists them all
                    raise ValueError(f"constraint variable {v.name!r} is unknown")
                rows.append(i)
                cols.append(col[v.name])
                vals.append(float(coef))
            rhs = -float(con.constant)  # Σ a x + constant (sense) 0   →   Σ a x (sense) −constant
            if con.sense == pulp.LpConstraintEQ:
                row_lb.append(rhs)
                row_ub.append(rhs)
            elif con.sense == pulp.LpConstraintLE:
                row_lb.append(-np.inf)
                row_ub.append(rhs)
            else:
                row_lb.append(rhs)
                row_ub.append(np.inf)
        A = sp.csr_matrix((vals, (rows, cols)), shape=(len(row_lb), len(all_vars)), dtype=np.float64)
        A.sum_duplicates()
        A.eliminate_zeros()
        col_lb = np.array([-np.inf if v.lowBound is None else float(v.lowBound) for v in all_vars])
        col_ub = np.array([np.inf if v.upBound is None else float(v.upBound) for v in all_vars])
        integer = np.array([v.cat == pulp.LpInteger for v in all_vars])
        return cls(
            len(variables),
            A,
            np.array(row_lb, dtype=np.float64),
            np.array(row_ub, dtype=np.float64),
            col_lb,
            col_ub,
            integer,
            tuple(v.name for v in all_vars),
        )

    def expected_nonzeros(self) -> float | None:
        """``⟨z, 1⟩`` when the constraints fix it, else ``None``.

        Holds when every weighted column is a 0/1 variable (or fixed to 0) and equality rows whose
        coefficients are all 1 partition the weighted columns that can be non-zero: ``⟨z, 1⟩`` is then
        the sum of their right-hand sides (one row of ones over everything: its rhs; an assignment
        problem: the number of rows of one side).
        """
        n = self.n_vars
        lb, ub = self.col_lb[:n], self.col_ub[:n]
        live = ub > 0
        if not ((lb >= 0) & (ub <= 1) & (self.integer[:n] | ~live)).all() or self.n_cols != n:
            return None
        covered = np.zeros(n, dtype=bool)
        total = 0.0
        A = self.A
        for i in range(self.n_rows):
            if self.row_lb[i] != self.row_ub[i]:
                continue
            start, stop = A.indptr[i], A.indptr[i + 1]
            cols, vals = A.indices[start:stop], A.data[start:stop]
            if cols.size == 0 or not np.all(vals == 1.0) or covered[cols].any():
                continue
            covered[cols] = True
            total += float(self.row_ub[i])
        return total if bool(covered[live].all()) and live.any() else None

    def power_of_two_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row multiplied by a power of two (exact) so that its largest ``|coefficient|`` is about 1.

        Returns ``(data, row_lb, row_ub)``: ``A.data`` scaled row by row (CSR order) and the bounds scaled
        alike (``±inf`` stay). The scale of row ``i`` is ``2^-round(log2 max_j |A_ij|)``, so the largest
        coefficient lands in ``[2^-½, 2^½]``; an empty row keeps scale 1. The floating-point back ends
        (HiGHS, Gurobi, SCIP) check rows with absolute tolerances, which this makes mean the same on
        every row.
        """
        A = self.A
        top = np.zeros(self.n_rows)
        np.maximum.at(top, np.repeat(np.arange(self.n_rows), np.diff(A.indptr)), np.abs(A.data))
        top[top == 0] = 1.0
        scale = np.exp2(-np.round(np.log2(top)))  # 2^-k: exact   [rows]
        data = A.data * np.repeat(scale, np.diff(A.indptr))  # [nnz]
        with np.errstate(invalid="ignore"):
            return data, self.row_lb * scale, self.row_ub * scale

    def integral_rows(self, limit: int = 2**62) -> tuple[list[list[int]], list[int | None], list[int | None]]:
        """Each row scaled exactly to coprime integer coefficients, its bounds rounded inwards.

        Every coefficient and bound is read as the shortest decimal that prints it (``repr``: ``4e-07``
        is ``4/10⁷``, ``0.1`` is ``1/10``); a row is multiplied by the least common denominator of its
        coefficients and divided by their greatest common divisor, so no coefficient is rounded. For
        integer variables ``A x`` is then an integer, so ``A x ≤ b`` ⇔ ``A x ≤ ⌊b⌋``.

        Returns the integer coefficients of each row (in ``A``'s CSR order) and the scaled bounds
        (``None``: no bound). Raises ``ValueError`` naming the row when a scaled coefficient or bound
        exceeds ``limit`` in magnitude (CP-SAT works in 64-bit integers).
        """
        coefs: list[list[int]] = []
        lbs: list[int | None] = []
        ubs: list[int | None] = []
        for i in range(self.n_rows):
            ints, lb, ub = self._integral_row(i)
            big = max([abs(v) for v in ints] + [abs(b) for b in (lb, ub) if b is not None], default=0)
            if big > limit:
                raise ValueError(
                    f"row {i}: scaled exactly to integers (CP-SAT is integer-only), its coefficients or "
                    f"bounds reach {big:.3g}, beyond CP-SAT's 64-bit range (limit {limit:.3g}); rescale the "
                    "row or use backend='highs'"
                )
            coefs.append(ints)
            lbs.append(lb)
            ubs.append(ub)
        return coefs, lbs, ubs

    def infeasible_row(self) -> int | None:
        """The first row that no integer state satisfies, judged on its own; ``None`` if there is none.

        A row over integer columns only, scaled exactly to coprime integer coefficients
        (`integral_rows`), takes integer values, so it has no solution when no integer lies between its
        rounded bounds: ``2 x − 2 y = 1``, ``x − y = 0.5``. Branch and bound cannot prove that when the
        variables are unbounded (CBC calls such a model unbounded, or searches forever), so the CBC
        engine asks here once, before its first solve.
        """
        A = self.A
        for i in range(self.n_rows):
            if not self.integer[A.indices[A.indptr[i] : A.indptr[i + 1]]].all():
                continue  # a continuous column: A_i x can take any value in between
            _, lb, ub = self._integral_row(i)
            if (lb is not None and ub is not None and lb > ub) or (
                A.indptr[i] == A.indptr[i + 1]
                and ((lb is not None and lb > 0) or (ub is not None and ub < 0))
            ):
                return i
        return None

    def _integral_row(self, i: int) -> tuple[list[int], int | None, int | None]:
        """Row ``i`` as coprime integer coefficients and its bounds scaled alike, rounded inwards."""
        A = self.A
        vals = A.data[A.indptr[i] : A.indptr[i + 1]].tolist()
        if all(v == math.floor(v) for v in vals):  # integer already: the common case, no fractions
            ints = [int(v) for v in vals]
            divisor = math.gcd(*ints) if ints else 1
            scale = Fraction(1, divisor or 1)
        else:
            fracs = [_decimal(v) for v in vals]
            denominator = math.lcm(*(f.denominator for f in fracs))
            ints = [int(f * denominator) for f in fracs]
            divisor = math.gcd(*ints)
            scale = Fraction(denominator, divisor or 1)
        if divisor > 1:
            ints = [v // divisor for v in ints]
        lb = math.ceil(_decimal(self.row_lb[i]) * scale) if np.isfinite(self.row_lb[i]) else None
        ub = math.floor(_decimal(self.row_ub[i]) * scale) if np.isfinite(self.row_ub[i]) else None
        return ints, lb, ub


def _decimal(value: float) -> Fraction:
    """The shortest decimal that prints ``value``, as an exact fraction (``0.1`` → ``1/10``)."""
    return Fraction(Decimal(repr(float(value))))
