"""ILP declarations: back ends agree, PuLP import, validation, errors, time limits, gradients."""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pulp
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from imle_solvers import ILP, IMLE, NoNoise, PerturbedTarget, hamming_loss
from imle_solvers.adapters import CPSATOracle, PulpOracle
from imle_solvers.errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidSolutionError,
    InvalidWeightsError,
    SolverTimeoutError,
    UnboundedError,
)
from tests.support.ilp_cases import assignment, grid_flow, independent_set, market_split
from tests.support.paths import ROOT

# every test solves with CP-SAT, CBC or HiGHS: none may hang the suite (subprocess tests set their own)
pytestmark = pytest.mark.timeout(30)

BACKENDS = ["cpsat", "cbc", "highs", "gurobi", "scip"]
MIP_BACKENDS = ["cbc", "highs", "gurobi", "scip"]  # the floating-point branch-and-bound solvers


def _knapsack(rng: np.random.Generator, n: int) -> dict[str, object]:
    weights = rng.integers(1, 10, size=n)
    return {"A_ub": weights[None].astype(float), "b_ub": [float(weights.sum() // 2)], "sense": "max"}


def _agree(kwargs: dict[str, object], m: int, w: np.ndarray) -> None:
    """Every back end reaches the same optimal objective (states may differ on ties)."""
    values = []
    for backend in BACKENDS:
        oracle = ILP(m, backend=backend, **kwargs)  # type: ignore[arg-type]
        z = oracle.solve(w)
        values.append(float(z @ w))
    tol = 1e-6 + np.abs(w).max() * m / 2**20  # CP-SAT's documented scaling bound
    assert max(values) - min(values) <= tol, values


@settings(max_examples=8)
@given(st.integers(0, 2**31), st.integers(3, 9))
def test_backends_agree_on_knapsack(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    _agree(_knapsack(rng, n), n, rng.normal(size=n) + 0.5)


@settings(max_examples=6)
@given(st.integers(0, 2**31), st.integers(2, 4))
def test_backends_agree_on_assignment(seed: int, n: int) -> None:
    A, b = assignment(n)
    rng = np.random.default_rng(seed)
    _agree({"A_eq": A, "b_eq": b}, n * n, rng.normal(size=n * n))


@settings(max_examples=6)
@given(st.integers(0, 2**31), st.integers(2, 4), st.integers(2, 4))
def test_backends_agree_on_shortest_path_flow(seed: int, h: int, w: int) -> None:
    A, b, arcs = grid_flow(h, w)
    costs = np.random.default_rng(seed).normal(size=len(arcs))  # negative costs too: a DAG, no cycles
    _agree({"A_eq": A, "b_eq": b}, len(arcs), costs)


def test_shortest_path_flow_is_a_path_and_matches_dynamic_programming() -> None:
    A, b, arcs = grid_flow(4, 4)
    rng = np.random.default_rng(3)
    for backend in BACKENDS:
        oracle = ILP(len(arcs), A_eq=sp.csr_matrix(A), b_eq=b, backend=backend)  # sparse input
        for _ in range(3):
            c = rng.normal(size=len(arcs))
            z = oracle.solve(c)
            dist = np.full(16, np.inf)
            dist[0] = 0.0
            for k, (u, v) in sorted(enumerate(arcs), key=lambda t: t[1][0]):  # topological order
                dist[v] = min(dist[v], dist[u] + c[k])
            assert z @ c == pytest.approx(dist[15], abs=1e-4)
            np.testing.assert_allclose(A @ z, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_pulp_agrees_with_matrices(backend: str) -> None:
    rng = np.random.default_rng(0)
    A = rng.integers(0, 5, size=(3, 6)).astype(float)
    b = A.sum(axis=1) // 2
    prob = pulp.LpProblem("p", pulp.LpMinimize)
    x = [prob.add_variable(f"x{j}", cat="Binary") for j in range(6)]
    for i in range(3):
        prob += pulp.lpSum(A[i, j] * x[j] for j in range(6)) <= b[i]
    prob += pulp.lpSum(x) >= 2
    from_pulp = ILP.from_pulp(prob, x, backend=backend)  # type: ignore[arg-type]
    direct = ILP(6, A_ub=np.vstack([A, -np.ones((1, 6))]), b_ub=np.append(b, -2), backend=backend)  # type: ignore[arg-type]
    assert from_pulp.sense == "min" and from_pulp.n_vars == 6
    for _ in range(4):
        w = rng.normal(size=6)
        assert from_pulp.solve(w) @ w == pytest.approx(direct.solve(w) @ w, abs=1e-4)


def test_from_pulp_takes_the_problem_sense_and_auxiliary_variables() -> None:
    prob = pulp.LpProblem("p", pulp.LpMaximize)
    x = [prob.add_variable(f"x{j}", cat="Binary") for j in range(3)]
    t = prob.add_variable("t", lowBound=0, upBound=3, cat="Integer")  # auxiliary
    prob += pulp.lpSum(x) == t
    prob += t <= 2
    for backend in BACKENDS:
        oracle = ILP.from_pulp(prob, x, backend=backend)  # type: ignore[arg-type]
        assert oracle.sense == "max" and oracle.n_vars == 3
        assert oracle.solve(np.array([1.0, 2.0, 3.0])).tolist() == [0.0, 1.0, 1.0]
        assert oracle.expected_nonzeros is None  # ⟨z, 1⟩ depends on the auxiliary t


def test_expected_nonzeros() -> None:
    A, b = assignment(3)
    assert ILP(9, A_eq=A, b_eq=b).expected_nonzeros == 3.0  # rows partition the variables
    assert ILP(4, A_eq=np.ones((1, 4)), b_eq=[2]).expected_nonzeros == 2.0
    assert ILP(4, A_ub=np.ones((1, 4)), b_ub=[2]).expected_nonzeros is None  # ≤: not fixed
    assert ILP(4, A_eq=[[1, 1, 0, 0]], b_eq=[1]).expected_nonzeros is None  # x2, x3 free
    assert ILP(4, A_eq=[[2, 2, 2, 2]], b_eq=[2]).expected_nonzeros is None  # not a row of ones
    assert ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], bounds=(0, 2)).expected_nonzeros is None  # not 0/1
    assert ILP(3, A_eq=[[1, 1, 0]], b_eq=[1], bounds=([0, 0, 0], [1, 1, 0])).expected_nonzeros == 1.0
    A_sp, b_sp, arcs = grid_flow(3, 3)
    assert ILP(len(arcs), A_eq=A_sp, b_eq=b_sp, backend="highs").expected_nonzeros is None


def test_declaration_shorthands() -> None:
    from imle_solvers.adapters.ilp._linear import LinearForm

    one_row = LinearForm.from_matrices(4, A_ub=[2, 3, 4, 1], b_ub=5)  # a vector and a scalar: one row
    assert one_row.A.toarray().tolist() == [[2.0, 3.0, 4.0, 1.0]] and one_row.row_ub.tolist() == [5.0]
    assert one_row.row_lb.tolist() == [-np.inf]
    two = LinearForm.from_matrices(2, A_eq=np.ones((2, 2)), b_eq=3)  # a scalar for every row
    assert two.row_lb.tolist() == two.row_ub.tolist() == [3.0, 3.0]
    # m = 2: two pairs are (lower, upper), not one pair per variable
    pair = LinearForm.from_matrices(2, bounds=[(0, 1), (2, 3)])
    assert pair.col_lb.tolist() == [0.0, 1.0] and pair.col_ub.tolist() == [2.0, 3.0]
    per_variable = LinearForm.from_matrices(3, bounds=[(0, 1), (2, 3), (4, 5)])
    assert per_variable.col_lb.tolist() == [0.0, 2.0, 4.0] and per_variable.col_ub.tolist() == [1.0, 3.0, 5.0]
    # ⟨z, 1⟩ is fixed by a row of ones only for 0/1 integers: an LP's vertex may be fractional
    assert LinearForm.from_matrices(3, A_eq=[[1, 1, 1]], b_eq=[2]).expected_nonzeros() == 2.0
    assert LinearForm.from_matrices(3, A_eq=[[1, 1, 1]], b_eq=[2], integer=False).expected_nonzeros() is None


def test_bounds_forms_and_integrality_mask() -> None:
    w = np.array([1.0, -1.0, -1.0])
    pairs = ILP(3, bounds=[(0, 2), (-1, 3), (0, 1)], backend="cpsat")
    assert pairs.solve(w).tolist() == [0.0, 3.0, 1.0]
    arrays_ = ILP(3, bounds=(np.array([0, -1, 0]), np.array([2, 3, 1])), backend="highs")
    assert arrays_.solve(w).tolist() == [0.0, 3.0, 1.0]
    mixed = ILP(2, A_ub=[[2, 2]], b_ub=[3], integer=[True, False], sense="max", backend="highs")
    np.testing.assert_allclose(mixed.solve(np.array([1.0, 1.0])), [1.0, 0.5])
    lp = ILP(2, A_ub=[[2, 2]], b_ub=[3], integer=False, sense="max", backend="cbc")
    assert lp.solve(np.array([1.0, 2.0])).tolist() == [0.5, 1.0]  # an LP vertex
    rational = ILP(3, A_ub=[[0.5, 0.25, 1.5]], b_ub=[0.8], sense="max", backend="cpsat")  # scaled ×100
    assert rational.solve(np.ones(3)).tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"c_size": 0}, "c_size"),
        ({"c_size": 3, "A_ub": np.ones((2, 4)), "b_ub": np.ones(2)}, "A_ub has 4 columns"),
        ({"c_size": 3, "A_ub": np.ones((2, 3)), "b_ub": np.ones(3)}, r"b_ub must have shape \(2,\)"),
        ({"c_size": 3, "A_ub": np.ones((2, 3))}, "given together"),
        ({"c_size": 3, "A_eq": np.ones((1, 3, 1)), "b_eq": [1]}, "2-D"),
        ({"c_size": 3, "A_eq": [[1, np.nan, 1]], "b_eq": [1]}, "NaN"),
        ({"c_size": 3, "A_ub": [[1, np.inf, 1]], "b_ub": [1]}, r"^A_ub contains NaN or inf entries$"),
        ({"c_size": 3, "A_eq": [[1, 1, 1]], "b_eq": [np.inf]}, "finite"),
        ({"c_size": 3, "bounds": (0, 1, 2)}, "pair"),
        ({"c_size": 3, "bounds": (np.zeros(2), 1)}, r"shape \(3,\)"),
        ({"c_size": 3, "bounds": (2, 1)}, "lower > upper"),
        ({"c_size": 3, "integer": [True, False]}, "mask"),
        ({"c_size": 2, "integer": np.array([1.0, 0.0])}, r"boolean mask, got shape \(2,\) and dtype float64"),
        ({"c_size": 3, "sense": "maximize"}, "sense"),
        ({"c_size": 3, "backend": "xpress"}, "backend"),
        # options a back end does not take: refused, naming the option and what the back end takes
        (
            {"c_size": 3, "backend": "highs", "resolution": 4.0},
            r"resolution= does not apply to backend='highs'",
        ),
        ({"c_size": 3, "backend": "cbc", "workers": 2}, r"workers= does not apply to backend='cbc'"),
        (
            {"c_size": 3, "backend": "gurobi", "hint": True},
            r"hint= does not apply to backend='gurobi', which",
        ),
        (
            {"c_size": 3, "backend": "cpsat", "parameters": {"nope": 1}},
            "'nope' is not a field of CP-SAT's SatParameters",
        ),
        ({"c_size": 3, "backend": "gurobi", "parameters": {"MIPGap": -1.0}}, "Gurobi refuses MIPGap=-1.0"),
        ({"c_size": 3, "backend": "gurobi", "workers": 0}, "workers"),
        ({"c_size": 3, "backend": "scip", "parameters": {"limits/time": -3}}, "SCIP refuses limits/time=-3"),
        ({"c_size": 3, "backend": "scip", "workers": 4}, "workers must be 1 with backend='scip'"),
        ({"c_size": 3, "time_limit": -1.0}, "time_limit"),
        ({"c_size": 3, "integer": False, "backend": "cpsat"}, "continuous"),
        ({"c_size": 3, "bounds": (0, None), "backend": "cpsat"}, "finite bounds"),
        # these gave a raw pybind RuntimeError / TypeError; now a ValueError naming the row or variable
        ({"c_size": 2, "A_ub": [[1e20, 1]], "b_ub": [2], "backend": "cpsat"}, "row 0: .*64-bit"),
        ({"c_size": 2, "A_ub": [[2**62 + 2**60, 1]], "b_ub": [2], "backend": "cpsat"}, "row 0: .*64-bit"),
        ({"c_size": 2, "A_ub": [[1, 1]], "b_ub": [2**62 + 2**60], "backend": "cpsat"}, "row 0: .*64-bit"),
        ({"c_size": 2, "A_eq": [[1, 1]], "b_eq": [-(2**62) - 2**60], "backend": "cpsat"}, "row 0: .*64-bit"),
        ({"c_size": 2, "bounds": (0, 1e19), "backend": "cpsat"}, "variable 0 .*backend='highs'"),
        (
            {"c_size": 2, "A_ub": [[2**40, 1]], "b_ub": [2], "bounds": (0, 2**30), "backend": "cpsat"},
            "row 0: .*64-bit",
        ),
        (
            {"c_size": 2, "A_ub": [[1e16, 1]], "b_ub": [2], "backend": "highs"},
            "HiGHS rejected the constraint rows .*at/below tolerance",
        ),  # HiGHS's own words, not hidden
        # A_ub z ≤ -inf: the same error on every back end (CBC wrote no solution file, the others [1, 1])
        *[
            (
                {"c_size": 2, "A_ub": [[1, 1], [1, 0]], "b_ub": [1, -np.inf], "backend": b},
                r"b_ub\[1\] is -inf",
            )
            for b in BACKENDS
        ],
    ],
)
def test_bad_declarations_raise_at_construction(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ILP(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_infeasible_and_batch_rows(backend: str) -> None:
    oracle = ILP(3, A_eq=np.ones((1, 3)), b_eq=[5], backend=backend)  # type: ignore[arg-type]
    with pytest.raises(InfeasibleError) as err:
        oracle.solve_batch(np.zeros((3, 3)))
    assert err.value.rows == (0,)
    fractional = ILP(2, A_eq=[[2, 2]], b_eq=[1], bounds=(0, 3), backend=backend)  # type: ignore[arg-type]
    with pytest.raises(InfeasibleError):
        fractional.solve(np.ones(2))
    no_integer = ILP(2, bounds=(0.2, 0.8), backend=backend)  # type: ignore[arg-type]
    with pytest.raises(InfeasibleError):
        no_integer.solve(np.ones(2))


@pytest.mark.parametrize("backend", MIP_BACKENDS)
def test_unbounded(backend: str) -> None:
    oracle = ILP(2, A_ub=[[1, -1]], b_ub=[1], bounds=(None, None), backend=backend)  # type: ignore[arg-type]
    with pytest.raises(UnboundedError):
        oracle.solve(np.array([1.0, 0.0]))
    assert oracle.solve(np.zeros(2)) @ np.zeros(2) == 0.0  # a zero objective is bounded
    with pytest.raises(UnboundedError) as err:
        oracle.solve_batch(np.array([[0.0, 0.0], [1.0, 0.0]]))
    assert err.value.rows == (1,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_weight_errors_name_rows(backend: str) -> None:
    oracle = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend=backend)  # type: ignore[arg-type]
    w = np.zeros((5, 3))
    w[3, 0] = np.nan
    w[1, 2] = np.inf
    with pytest.raises(InvalidWeightsError) as err:
        oracle.solve_batch(w)
    assert err.value.rows == (1, 3)
    with pytest.raises(InvalidWeightsError, match="n_vars=3"):
        oracle.solve_batch(np.zeros((2, 4)))
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.zeros(4))


@pytest.mark.parametrize("backend", MIP_BACKENDS)  # CP-SAT: tests/adapters/test_cpsat.py
def test_time_limit_without_a_feasible_state(backend: str) -> None:
    A, b = market_split()
    oracle = ILP(A.shape[1], A_eq=A, b_eq=b, backend=backend, time_limit=0.01)  # type: ignore[arg-type]
    with pytest.raises(SolverTimeoutError, match="no feasible state"):
        oracle.solve(np.ones(A.shape[1]))


@pytest.mark.parametrize("backend", MIP_BACKENDS)
def test_time_limit_with_unproven_state(backend: str) -> None:
    A = independent_set()
    n = A.shape[1]
    # proving this optimal takes minutes; finding z = 0 or better takes milliseconds, given a second even
    # on a loaded machine (0.3 s was too little for CBC's process start there)
    kwargs = {"A_ub": A, "b_ub": np.ones(len(A)), "sense": "max", "backend": backend, "time_limit": 1.0}
    with pytest.warns(RuntimeWarning, match="not proven optimal"):
        z = ILP(n, **kwargs).solve(np.ones(n))  # type: ignore[arg-type]
    assert (A @ z <= 1).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SolverTimeoutError, match="strict"):
            ILP(n, strict=True, **kwargs).solve(np.ones(n))  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickle_round_trip(backend: str) -> None:
    A, b = assignment(3)
    oracle = ILP(9, A_eq=A, b_eq=b, sense="max", backend=backend)  # type: ignore[arg-type]
    w = np.random.default_rng(1).normal(size=9)
    before = oracle.solve(w)
    copy = pickle.loads(pickle.dumps(oracle))
    assert isinstance(copy.oracle, CPSATOracle if backend == "cpsat" else PulpOracle)
    np.testing.assert_array_equal(copy.solve(w), before)
    assert copy.expected_nonzeros == 3.0 and copy.backend == backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_imle_forward_backward_on_a_batch(backend: str) -> None:
    A, b = assignment(3)
    oracle = ILP(9, A_eq=A, b_eq=b, sense="max", backend=backend)  # type: ignore[arg-type]
    layer = IMLE(oracle, samples=2)
    theta = torch.randn(4, 9, requires_grad=True)
    z = layer(theta)  # [4, 2, 9]
    assert z.shape == (4, 2, 9)
    assert torch.all(z.sum(-1) == 3)
    target = torch.eye(3).flatten().expand(4, 2, 9)
    hamming_loss(z, target).backward()
    assert theta.grad is not None and theta.grad.shape == (4, 9) and torch.isfinite(theta.grad).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sgd_reduces_hamming_loss_to_a_target(backend: str) -> None:
    """A few SGD steps on θ move MAP(θ) onto a target assignment (paper, sec. 5 learning setup)."""
    A, b = assignment(3)
    oracle = ILP(9, A_eq=A, b_eq=b, sense="min", backend=backend)  # type: ignore[arg-type]
    target = torch.tensor([0, 1, 0, 0, 0, 1, 1, 0, 0], dtype=torch.float64)  # a permutation
    costs = torch.zeros(9, dtype=torch.float64)
    costs[[0, 4, 8]] = -1.0  # the identity is optimal at the start
    costs.requires_grad_(True)
    layer = IMLE(oracle, noise=NoNoise(), target=PerturbedTarget(10.0))  # the blackbox rule, λ = 10
    optim = torch.optim.SGD([costs], lr=1.0)
    losses = []
    for _ in range(6):
        optim.zero_grad()
        loss = hamming_loss(layer(costs[None]), target[None])
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    final = float(hamming_loss(layer.eval()(costs[None]), target[None]).detach())
    assert losses[0] > 0.5 and final == 0.0, (losses, final)


def test_adapters_page_snippets_run() -> None:
    """Every code block of docs/adapters.md runs as printed, and prints what the page says."""
    import contextlib
    import io
    import re

    page = ROOT / "docs" / "adapters.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) >= 4
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(page), "exec"), {"__name__": "adapters_doc"})
        for line in block.splitlines():  # "print(...)   # expected output" comments must match
            if line.startswith("print(") and "# " in line:
                expected = line.split("# ", 1)[1].replace(" twice", "")
                assert expected in out.getvalue(), (expected, out.getvalue())


@pytest.mark.parametrize("pool_backend", ["process", "thread"])
@pytest.mark.timeout(45)  # worker processes import the three solvers
def test_solver_pool_ships_every_backend(pool_backend: str) -> None:
    """A real SolverPool (processes unpickle the oracles, threads share them) gives the serial answers."""
    from imle_solvers import SolverPool

    A, b = assignment(3)
    weights = np.random.default_rng(2).normal(size=(12, 9))
    with SolverPool(workers=2, backend=pool_backend, fallback=False, min_parallel_seconds=0.0) as pool:
        for backend in BACKENDS:
            oracle = ILP(9, A_eq=A, b_eq=b, sense="max", backend=backend)  # type: ignore[arg-type]
            np.testing.assert_array_equal(pool.solve_batch(oracle, weights), oracle.solve_batch(weights))
        infeasible = ILP(3, A_eq=np.ones((1, 3)), b_eq=[5], backend="highs")
        with pytest.raises(InfeasibleError) as err:
            pool.solve_batch(infeasible, np.zeros((4, 3)))
        assert err.value.rows and 0 <= err.value.rows[0] < 4
        workers = pool.worker_pids() if pool_backend == "process" else [os.getpid()]
    # CBC's scratch directories went with each call (one leaked per worker per pool under forkserver)
    from imle_solvers.adapters.ilp._cbc import scratch_root

    root = scratch_root() or tempfile.gettempdir()
    assert not [n for n in os.listdir(root) if any(n.startswith(f"imle-cbc-{pid}-") for pid in workers)]


# ------------------------------------------------------- Ctrl-C, stopped solves, processes left behind
# Each scenario runs in a child interpreter (as the pool's Ctrl-C test does): a stray SIGINT must not stop the
# test run. The instance is a market-split ILP that no back end solves in under a minute.

_ROOT = str(ROOT)

_HARD = """
import os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, os.getcwd())
from tests.support.ilp_cases import market_split
from imle_solvers import ILP

A, b = market_split(5, 40)
w = np.random.default_rng(0).normal(size=40)
names = ("cpsat", "highs", "gurobi", "scip", "cbc")
oracles = {name: ILP(40, A_eq=A, b_eq=b, backend=name) for name in names}


def ctrl_c(after):
    timer = threading.Timer(after, signal.pthread_kill, args=(threading.main_thread().ident, signal.SIGINT))
    timer.start()
    return timer


def cbc_children():
    mine = f"imle-cbc-{os.getpid()}-"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if mine.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
"""

_SERIAL = (
    _HARD
    + """
for name, oracle in oracles.items():
    ctrl_c(0.5)
    t0 = time.perf_counter()
    try:
        oracle.solve(w)
    except KeyboardInterrupt:
        print(name, "interrupted", time.perf_counter() - t0 < 3.0, flush=True)
    else:
        sys.exit(f"{name}: not interrupted")
    time.sleep(0.2)
    assert cbc_children() == [], "a cbc process survived Ctrl-C"
ctrl_c(0.2)
try:
    time.sleep(5)  # CP-SAT's own SIGINT handler used to leave SIGINT at SIG_DFL: Ctrl-C then killed Python
except KeyboardInterrupt:
    print("ok", flush=True)
# last: a CBC solve on a thread, then the parent SIGKILLs this process
threading.Thread(target=oracles["cbc"].solve, args=(w,), daemon=True).start()
while not cbc_children():
    time.sleep(0.05)
print(os.getpid(), *cbc_children(), flush=True)
time.sleep(60)
"""
)

_THREADS = (
    _HARD
    + """
from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(5)
futures = [pool.submit(oracle.solve, w) for oracle in oracles.values()]
print(os.getpid(), flush=True)
ctrl_c(0.5)
futures[0].result()  # Ctrl-C ends the program: the solves stop with it and the interpreter exits
"""
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def _cbc_of(owner: int) -> list[int]:
    """CBC processes started by process ``owner`` (their model file is in its scratch directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if f"imle-cbc-{owner}-".encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc; PR_SET_PDEATHSIG")
@pytest.mark.timeout(45)  # a fresh interpreter imports torch and three solvers
def test_ctrl_c_interrupts_in_process_solves_and_cbc_dies_with_its_owner() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERIAL],
        cwd=_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        lines: list[list[str]] = []
        for raw in proc.stdout:  # Gurobi also prints "Interrupt request received" when Ctrl-C stops it
            words = raw.split()
            if words and words[0] != "Interrupt":
                lines.append(words)
            if len(lines) == 7:
                break
        assert lines[:6] == [
            ["cpsat", "interrupted", "True"],
            ["highs", "interrupted", "True"],
            ["gurobi", "interrupted", "True"],
            ["scip", "interrupted", "True"],
            ["cbc", "interrupted", "True"],
            ["ok"],
        ], lines
        owner, *children = (int(p) for p in lines[6])
        assert children and all(_alive(c) for c in children)
        proc.kill()  # SIGKILL: no cleanup code runs in the owner
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(c) for c in children), "cbc outlived its owner"
    finally:
        proc.kill()
        proc.wait()
    from imle_solvers.adapters.ilp._cbc import _sweep, scratch_root

    root = scratch_root() or tempfile.gettempdir()
    _sweep(root)  # what the next process to run CBC does: the killed owner's directory goes
    assert not [n for n in os.listdir(root) if n.startswith(f"imle-cbc-{owner}-")]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
@pytest.mark.timeout(90)
def test_ctrl_c_with_solves_on_threads_ends_the_program() -> None:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _THREADS],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=80,
        stdin=subprocess.DEVNULL,
    )
    # CP-SAT used to abort here (std::bad_function_call, rc 134) and HiGHS/CBC to keep the interpreter
    # alive until their solves ended; now the solves stop at shutdown, long before they would finish
    assert done.returncode in (1, 130, -signal.SIGINT), done.stdout + done.stderr
    assert "bad_function_call" not in done.stderr and "KeyboardInterrupt" in done.stderr
    assert time.perf_counter() - t0 < 60
    time.sleep(0.2)
    assert _cbc_of(int(done.stdout.split()[0])) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
def test_stop_solves_stops_solves_on_threads_through_the_solvers_apis() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from imle_solvers._interrupt import stop_solves

    A, b = market_split(5, 40)
    w = np.random.default_rng(0).normal(size=40)
    oracles = [ILP(40, A_eq=A, b_eq=b, backend=name) for name in ("cpsat", "highs", "gurobi", "scip", "cbc")]
    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(o.solve, w) for o in oracles]
        deadline = time.monotonic() + 10
        while not _cbc_of(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        t0 = time.perf_counter()
        assert stop_solves() == 5  # what a pool giving up on its threads (or the interpreter's exit) calls
        for future in futures:
            with pytest.raises(ImleSolversError, match="stopped"):
                future.result(timeout=10)
        assert time.perf_counter() - t0 < 5
    assert _cbc_of(os.getpid()) == []
    from imle_solvers import _interrupt

    assert _interrupt._active == {}  # nothing stays registered; later solves run normally
    for name in BACKENDS:
        small = ILP(2, A_ub=[[1, 1]], b_ub=[1], backend=name)
        assert small.solve(np.array([-1.0, 0.0])).tolist() == [1.0, 0.0]


# ---------------------------------------------------------------- no silently wrong state
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("row", "rhs"),
    [
        ([4e-7, 4e-7], 5e-7),  # CP-SAT rounded the coefficients to 0 and returned [1, 1]
        ([1e16, 1e16], 1e16),  # HiGHS rejected the row silently and returned [1, 1]
        ([1.0000001, 1.0], 2.0),  # CBC: UnboundedError; CP-SAT and HiGHS: [1, 1] (2.0000001 > 2)
        ([1e15, 1e15], 1.5e15),
        ([0.1, 0.2], 0.3),  # feasible in decimals; 0.1 + 0.2 > 0.3 in floats only by rounding
    ],
)
def test_badly_scaled_rows_give_the_right_state(backend: str, row: list[float], rhs: float) -> None:
    ilp = ILP(2, A_ub=[row], b_ub=[rhs], sense="max", backend=backend)
    z = ilp.solve(np.array([1.0, 1.5]))
    expected = [1.0, 1.0] if row == [0.1, 0.2] else [0.0, 1.0]
    assert z.tolist() == expected


def test_cbc_calls_a_bounded_model_it_cannot_solve_a_solver_failure_not_unbounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imle_solvers.adapters.ilp._cbc import CbcEngine
    from imle_solvers.adapters.ilp._engine import Outcome

    ilp = ILP(2, A_ub=[[1.0, 1.0]], b_ub=[1.0], sense="max", backend="cbc")
    engine = ilp.oracle._engine  # type: ignore[attr-defined]
    parse = CbcEngine._parse
    calls: list[str] = []

    def wrong_once(raw: str, n_cols: int):  # type: ignore[no-untyped-def]
        calls.append(raw)
        return Outcome("infeasible", None, "Integer infeasible") if len(calls) == 1 else parse(raw, n_cols)

    monkeypatch.setattr(engine, "_parse", wrong_once)
    with pytest.raises(ImleSolversError, match="numerical trouble") as info:
        ilp.solve_batch(np.array([[1.0, 2.0]]))
    assert not isinstance(info.value, UnboundedError) and info.value.rows == (0,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_state_is_checked_against_the_declared_model(backend: str) -> None:
    from imle_solvers.adapters.ilp._check import FeasibilityCheck
    from imle_solvers.adapters.ilp._linear import LinearForm

    ilp = ILP(3, A_ub=[[1, 1, 1]], b_ub=[2], sense="max", backend=backend)
    assert ilp.solve_batch(np.ones((2, 3))).sum(axis=1).tolist() == [2.0, 2.0]
    # the solver sees "≤ 2", the check a stricter declared row "≤ 1": every state it returns violates it
    stricter = FeasibilityCheck(LinearForm.from_matrices(3, A_ub=[[1, 1, 1]], b_ub=[1]))
    ilp.oracle._check = stricter  # type: ignore[attr-defined]
    with pytest.raises(InvalidSolutionError, match="constraint row 0 is violated") as info:
        ilp.solve_batch(np.array([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]))  # row 0: z = 0, a unique optimum
    assert info.value.rows == (1,) and info.value.constraint == 0 and info.value.violation == 1.0


def test_feasibility_check_is_relative_to_each_row() -> None:
    from imle_solvers.adapters.ilp._check import FeasibilityCheck
    from imle_solvers.adapters.ilp._linear import LinearForm

    for scale in (4e-7, 1.0, 4e6):  # 4e-7·x ≤ 5e-7 is held to the standard of 4·x ≤ 5
        check = FeasibilityCheck(LinearForm.from_matrices(2, A_ub=[[scale, scale]], b_ub=[1.25 * scale]))
        assert check([1.0, 0.0], "t").tolist() == [1.0, 0.0]
        with pytest.raises(InvalidSolutionError, match="row 0"):
            check([1.0, 1.0], "t")
    check = FeasibilityCheck(LinearForm.from_matrices(2, A_ub=[[0.1, 0.2]], b_ub=[0.3]))
    assert check([1.0, 1.0], "t").tolist() == [1.0, 1.0]  # float rounding (0.1 + 0.2 > 0.3) is no violation
    check = FeasibilityCheck(LinearForm.from_matrices(2, A_eq=[[1, 1]], b_eq=[1], bounds=(0, 1)))
    assert check([1.0 - 1e-9, -0.0], "t").tolist() == [1.0, 0.0]  # snapped, no −0
    with pytest.raises(InvalidSolutionError, match="fractional"):
        check([0.5, 0.5], "t")
    with pytest.raises(InvalidSolutionError, match="outside its bounds"):
        check([2.0, -1.0], "t")
    with pytest.raises(InvalidSolutionError, match="nan"):
        check([np.nan, 1.0], "t")
    lp = FeasibilityCheck(LinearForm.from_matrices(2, A_eq=[[1, 1]], b_eq=[1], integer=False))
    assert lp([0.5 + 1e-9, 0.5], "t").tolist() == [0.5 + 1e-9, 0.5]  # continuous: solver tolerance allowed
    with pytest.raises(InvalidSolutionError):
        lp([0.5 + 1e-4, 0.5], "t")


def test_cpsat_subnormal_weights() -> None:
    ilp = ILP(2, A_ub=[[1, 1]], b_ub=[1], sense="max")
    assert ilp.solve(np.array([1e-310, 0.0])).tolist() == [1.0, 0.0]  # was OverflowError
    assert ilp.solve(np.array([-1e-310, 3e-310])).tolist() == [0.0, 1.0]


def test_cpsat_ties_do_not_depend_on_the_previous_call() -> None:
    A, b = assignment(4)
    tie = np.ones(16)  # every assignment is optimal
    rng = np.random.default_rng(0)
    previous = rng.uniform(0, 1, size=(6, 16))
    fresh = ILP(16, A_eq=A, b_eq=b).solve(tie)
    ilp = ILP(16, A_eq=A, b_eq=b)
    for w in previous:
        ilp.solve(w)
        assert ilp.solve(tie).tolist() == fresh.tolist()
    hinted = ILP(16, A_eq=A, b_eq=b, hint=True)
    answers = set()
    for w in previous:  # with the hint the tie follows the previous answer: why it is off by default
        hinted.solve(w)
        answers.add(tuple(hinted.solve(tie).tolist()))
    assert len(answers) > 1


@pytest.mark.parametrize("backend", ["cpsat", "highs", "cbc"])
@pytest.mark.parametrize("scale", [1e-300, 1e-12, 1e15, 1e18, 1e20, 1e300])
def test_weights_of_any_finite_size_give_the_optimum_of_their_shape(backend: str, scale: float) -> None:
    # a 2-dimensional knapsack and a cover: the optimum of c·scale is the optimum of c (exact power-of-two
    # scaling of the objective; HiGHS took 1e20 as infinite and CBC failed from about 1e15 without it)
    rng = np.random.default_rng(3)
    A = rng.integers(1, 6, size=(2, 7)).astype(float)
    oracle = ILP(7, A_ub=A, b_ub=A.sum(axis=1) / 2, sense="max", backend=backend)  # type: ignore[arg-type]
    states = np.array(list(itertools.product([0.0, 1.0], repeat=7)))
    feasible = states[(states @ A.T <= A.sum(axis=1) / 2 + 1e-9).all(axis=1)]
    for _ in range(4):
        w = rng.uniform(-1.0, 2.0, size=7)
        best = float((feasible @ w).max())
        z = oracle.solve(w * scale)
        assert float(z @ w) >= best - 1e-6 * float(np.abs(w).max())
        assert bool(((feasible - z) == 0).all(axis=1).any())  # a feasible state


def test_the_scaling_is_an_exact_power_of_two() -> None:
    from imle_solvers.adapters.ilp._engine import scaled_costs

    for top in (1e-300, 3.0, 2.0**40, 1e300, 1.7e308):
        c = np.array([top, -top / 3, 0.0, top * 2.0**-60])
        s = scaled_costs(c)
        assert 0.5 <= float(np.abs(s).max()) < 1.0
        (m_c, e_c), (m_s, e_s) = np.frexp(c), np.frexp(s)
        np.testing.assert_array_equal(m_s, m_c)  # the same mantissas: a power of two, nothing rounded
        nonzero = c != 0
        assert len(set((e_c - e_s)[nonzero].tolist())) == 1  # one exponent shift for every entry
    np.testing.assert_array_equal(scaled_costs(np.zeros(3)), np.zeros(3))
