"""Shared helpers of the ILP adapter tests: random small ILPs, brute force, hard instances."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

# Weight values drawn from a small set make ties frequent; floats cover the rest (negative included).
WEIGHT = st.one_of(
    st.sampled_from([-3.0, -1.5, -1.0, 0.0, 1.0, 2.0, 2.5]),
    st.floats(-10, 10, allow_nan=False, allow_infinity=False, width=32),
)


@dataclass
class SmallILP:
    """``A_ub z ≤ b_ub, A_eq z = b_eq, lb ≤ z ≤ ub`` (integers) with weights ``w``."""

    A_ub: np.ndarray
    b_ub: np.ndarray
    A_eq: np.ndarray
    b_eq: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    w: np.ndarray
    states: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        box = itertools.product(*(range(int(lo), int(hi) + 1) for lo, hi in zip(self.lb, self.ub)))
        grid = np.array(list(box), dtype=np.float64).reshape(-1, self.lb.size)
        ok = np.ones(len(grid), dtype=bool)
        if self.A_ub.size:
            ok &= (grid @ self.A_ub.T <= self.b_ub + 1e-9).all(axis=1)
        if self.A_eq.size:
            ok &= (np.abs(grid @ self.A_eq.T - self.b_eq) <= 1e-9).all(axis=1)
        self.states = grid[ok]  # the feasible set C, enumerated

    @property
    def m(self) -> int:
        return int(self.lb.size)

    def kwargs(self) -> dict[str, object]:
        out: dict[str, object] = {"bounds": (self.lb, self.ub)}
        if self.A_ub.size:
            out.update(A_ub=self.A_ub, b_ub=self.b_ub)
        if self.A_eq.size:
            out.update(A_eq=self.A_eq, b_eq=self.b_eq)
        return out

    def optimum(self, w: np.ndarray, sense: str = "min") -> float:
        values = self.states @ w
        return float(values.min() if sense == "min" else values.max())

    def is_feasible(self, z: np.ndarray) -> bool:
        return bool((np.abs(self.states - z).max(axis=1) < 1e-9).any())


@st.composite
def small_ilps(draw: st.DrawFn, max_vars: int = 6, max_ub: int = 1) -> SmallILP:
    """Random small bounded ILPs (about a quarter infeasible), brute-forceable."""
    m = draw(st.integers(2, max_vars))
    k_ub = draw(st.integers(0, 3))
    k_eq = draw(st.integers(0, 1))
    A_ub = draw(arrays(np.int64, (k_ub, m), elements=st.integers(-3, 3))).astype(float)
    b_ub = draw(arrays(np.int64, (k_ub,), elements=st.integers(-2, 6))).astype(float)
    A_eq = draw(arrays(np.int64, (k_eq, m), elements=st.integers(0, 2))).astype(float)
    b_eq = draw(arrays(np.int64, (k_eq,), elements=st.integers(0, 4))).astype(float)
    ub = draw(arrays(np.int64, (m,), elements=st.integers(1, max_ub))).astype(float)
    lb = np.zeros(m)
    w = draw(arrays(np.float64, (m,), elements=WEIGHT))
    return SmallILP(A_ub, b_ub, A_eq, b_eq, lb, ub, w)


def grid_flow(height: int, width: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Shortest-path flow ILP on a grid DAG (arcs east and south), top-left → bottom-right.

    Returns ``A_eq`` (nodes × arcs incidence, +1 out / −1 in), ``b_eq`` (+1 at the source, −1 at the
    sink) and the arcs.
    """
    arcs = []
    for i in range(height):
        for j in range(width):
            if j + 1 < width:
                arcs.append((i * width + j, i * width + j + 1))
            if i + 1 < height:
                arcs.append((i * width + j, (i + 1) * width + j))
    A = np.zeros((height * width, len(arcs)))
    for k, (u, v) in enumerate(arcs):
        A[u, k] += 1.0
        A[v, k] -= 1.0
    b = np.zeros(height * width)
    b[0], b[-1] = 1.0, -1.0
    return A, b, arcs


def assignment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n × n`` assignment: rows then columns sum to one; variable ``i·n + j``."""
    A = np.zeros((2 * n, n * n))
    for i in range(n):
        A[i, i * n : (i + 1) * n] = 1.0
        A[n + i, i::n] = 1.0
    return A, np.ones(2 * n)


def market_split(rows: int = 5, n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Cornuéjols–Dawande market split ``A z = A x*`` with a planted 0/1 ``x*``: feasible, yet no solver
    finds a feasible point in 10 ms (nor can it prove infeasibility: there is none)."""
    rng = np.random.default_rng(seed)
    A = rng.integers(0, 100, size=(rows, n)).astype(float)
    planted = (rng.random(n) < 0.5).astype(float)
    return A, A @ planted


def independent_set(n: int = 300, p: float = 0.02, seed: int = 0) -> np.ndarray:
    """Edge rows ``z_u + z_v ≤ 1`` of a random graph: feasible at once (z = 0), hard to prove optimal."""
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.size) < p
    rows = np.zeros((int(keep.sum()), n))
    rows[np.arange(rows.shape[0]), iu[keep]] = 1.0
    rows[np.arange(rows.shape[0]), ju[keep]] = 1.0
    return rows
