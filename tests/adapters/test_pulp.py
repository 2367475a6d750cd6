"""PulpOracle: CBC (session and one-shot) and HiGHS against brute force; PuLP models, pickling, errors."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pulp
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from imle_solvers import ILP
from imle_solvers.adapters import PulpOracle
from imle_solvers.adapters.ilp._linear import LinearForm
from imle_solvers.errors import (
    InfeasibleError,
    InvalidWeightsError,
    MissingExtraError,
    UnboundedError,
)
from tests.support.ilp_cases import SmallILP, small_ilps

pytestmark = pytest.mark.timeout(30)  # every test solves with CP-SAT, CBC or HiGHS: none may hang the suite


def _check(oracle: ILP, ilp: SmallILP, sense: str) -> None:
    if len(ilp.states) == 0:
        with pytest.raises(InfeasibleError):
            oracle.solve(ilp.w)
        return
    for w in (ilp.w, -ilp.w[::-1]):  # two objectives on the same oracle: nothing stale carries over
        z = oracle.solve(w)
        assert ilp.is_feasible(z)
        assert float(z @ w) == pytest.approx(ilp.optimum(w, sense), abs=1e-6)  # ties: same objective


@given(small_ilps(max_vars=6, max_ub=2), st.sampled_from(["min", "max"]))
def test_highs_matches_brute_force(ilp: SmallILP, sense: str) -> None:
    _check(ILP(ilp.m, sense=sense, backend="highs", **ilp.kwargs()), ilp, sense)  # type: ignore[arg-type]


@settings(max_examples=20)
@given(small_ilps(max_vars=6, max_ub=2), st.sampled_from(["min", "max"]))
def test_cbc_matches_brute_force(ilp: SmallILP, sense: str) -> None:
    _check(ILP(ilp.m, sense=sense, backend="cbc", **ilp.kwargs()), ilp, sense)  # type: ignore[arg-type]


def test_cbc_objective_changes_between_calls() -> None:
    """The same oracle, many objectives: each answer is the new optimum (a kept-alive interactive CBC
    process fails this: it prunes with the previous call's incumbent)."""
    feasible = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="cbc")
    infeasible = ILP(3, A_eq=np.ones((1, 3)), b_eq=[5], backend="cbc")
    for w in ([1.0, -2.0, 0.5], [-1.0, 2.0, 0.5], [3.0, 2.0, -0.5], [3.0, -2.0, -0.5]):
        z = feasible.solve(np.array(w))
        assert z.tolist() == np.eye(3)[int(np.argmin(w))].tolist()
    with pytest.raises(InfeasibleError):
        infeasible.solve(np.zeros(3))
    assert feasible.solve(np.array([2.0, 1.0, 0.0])).tolist() == [0.0, 0.0, 1.0]


def _scratch_dirs() -> set[str]:
    from imle_solvers.adapters.ilp._cbc import scratch_root

    root = scratch_root() or tempfile.gettempdir()
    return {name for name in os.listdir(root) if name.startswith("imle-cbc-")}


def test_cbc_scratch_directory_removed_after_each_call_and_swept_after_a_kill() -> None:
    import imle_solvers.adapters.ilp._cbc as cbc_module  # where the scratch-sweep state lives

    before = _scratch_dirs()
    oracle = ILP(4, A_ub=[[2, 3, 4, 1]], b_ub=[5], sense="max", backend="cbc")
    assert oracle.solve(np.array([3.0, 4.0, 5.0, 1.0])).tolist() == [1.0, 1.0, 0.0, 0.0]
    copy = pickle.loads(pickle.dumps(oracle))
    assert copy.solve(np.array([3.0, 4.0, 5.0, 1.0])).tolist() == [1.0, 1.0, 0.0, 0.0]
    mine = f"imle-cbc-{os.getpid()}-"
    assert not [n for n in _scratch_dirs() - before if n.startswith(mine)]  # nothing left by a finished call
    # a process killed in the middle of a call leaves its directory behind: the next process to run CBC
    # removes it (and only the directories of processes that no longer exist)
    dead = subprocess.Popen(["true"])
    dead.wait()
    root = cbc_module.scratch_root() or tempfile.gettempdir()
    left = tempfile.mkdtemp(prefix=f"imle-cbc-{dead.pid}-", dir=root)
    alive = tempfile.mkdtemp(prefix=f"imle-cbc-{os.getppid()}-", dir=root)
    try:
        cbc_module._SWEPT = -1  # as in a fresh process
        oracle.solve(np.array([3.0, 4.0, 5.0, 1.0]))
        assert not os.path.exists(left) and os.path.isdir(alive)
    finally:
        shutil.rmtree(alive, ignore_errors=True)
        shutil.rmtree(left, ignore_errors=True)


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_threads_share_one_oracle(solver: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    oracle = ILP(6, A_eq=np.ones((1, 6)), b_eq=[2], sense="max", backend=solver)  # type: ignore[arg-type]
    weights = np.random.default_rng(1).normal(size=(12 if solver == "cbc" else 40, 6))
    serial = oracle.solve_batch(weights)
    with ThreadPoolExecutor(3) as pool:
        threaded = np.array(list(pool.map(oracle.solve, weights)))
    np.testing.assert_array_equal(threaded, serial)
    np.testing.assert_array_equal(serial.sum(axis=1), 2.0)


def test_mps_rows_of_every_kind() -> None:
    """≥ rows and ranged rows (only PuLP models or hand-made forms have them) reach CBC correctly."""
    import scipy.sparse as sp

    A = sp.csr_matrix(
        np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    )
    form = LinearForm(
        4,
        A,
        row_lb=np.array([2.0, -np.inf, 1.0, -np.inf]),
        row_ub=np.array([2.0, 1.0, 2.0, np.inf]),  # =, ≤, range, free
        col_lb=np.zeros(4),
        col_ub=np.ones(4),
        integer=np.ones(4, bool),
        names=("a", "b", "c", "d"),
    )
    cbc = PulpOracle.from_linear_form(form, "cbc", "max")
    highs = PulpOracle.from_linear_form(form, "highs", "max")
    text = cbc._engine.mps(np.zeros(4))  # type: ignore[attr-defined]
    assert "RANGES" in text and " E R0" in text and " L R1" in text and "R3" not in text
    rng = np.random.default_rng(0)
    states = np.array([[a, b, c, d] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)], float)
    ok = (
        (states[:, :3].sum(1) == 2)
        & (states[:, 0] + states[:, 3] <= 1)
        & (states[:, 1:].sum(1) >= 1)
        & (states[:, 1:].sum(1) <= 2)
    )
    for _ in range(5):
        w = rng.normal(size=4)
        best = (states[ok] @ w).max()
        assert cbc.solve(w) @ w == pytest.approx(best)
        assert highs.solve(w) @ w == pytest.approx(best)


def _pulp_model() -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    """Pick at least two of four items, at most one of the first pair, via an auxiliary count."""
    prob = pulp.LpProblem("choose", pulp.LpMaximize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(4)]
    count = prob.add_variable("count", lowBound=0, upBound=4, cat="Continuous")
    prob += pulp.lpSum(x) - count == 0
    prob += count >= 2
    prob += x[0] + x[1] <= 1
    prob += 100 * x[0]  # an objective that the oracle must ignore
    return prob, x


@pytest.mark.parametrize("solver", ["cbc", "highs", "pulp-object"])
def test_pulp_problem_with_auxiliary_variable(solver: str) -> None:
    prob, x = _pulp_model()
    chosen = pulp.HiGHS(msg=False) if solver == "pulp-object" else solver
    oracle = PulpOracle(prob, x, solver=chosen)
    assert oracle.sense == "max" and oracle.n_vars == 4
    assert oracle.solve(np.array([-1.0, -2.0, -0.5, -3.0])).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert oracle.solve(np.array([5.0, 4.0, -0.5, 1.0])).tolist() == [1.0, 0.0, 0.0, 1.0]
    again = pickle.loads(pickle.dumps(oracle))
    assert again.solve(np.array([1.0, 2.0, 3.0, 4.0])).tolist() == [0.0, 1.0, 1.0, 1.0]


def test_pulp_object_reports_infeasible_and_unbounded() -> None:
    prob = pulp.LpProblem("bad", pulp.LpMinimize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(2)]
    prob += x[0] + x[1] >= 3
    with pytest.raises(InfeasibleError):
        PulpOracle(prob, x, solver=pulp.HiGHS(msg=False)).solve(np.zeros(2))
    free = pulp.LpProblem("free", pulp.LpMinimize)
    y = [free.add_variable(f"y{i}", cat="Integer") for i in range(2)]
    free += y[0] - y[1] <= 1
    with pytest.raises(UnboundedError):
        PulpOracle(free, y, solver=pulp.HiGHS(msg=False)).solve(np.array([1.0, 0.0]))


def test_sense_override_and_validation() -> None:
    prob, x = _pulp_model()
    oracle = PulpOracle(prob, x, solver="highs", sense="min")
    assert oracle.solve(np.array([-1.0, -2.0, -0.5, -3.0])).tolist() == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.zeros(3))
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(TypeError, match="solver"):
        PulpOracle(prob, x, solver=42)
    with pytest.raises(ValueError, match="solver must be one of 'cbc', 'highs', 'gurobi', 'scip'"):
        PulpOracle(prob, x, solver="xpress")
    assert PulpOracle(prob, x, solver="gurobi").solver == "gurobi"  # and "scip": see test_ilp_backends.py
    with pytest.raises(ValueError, match="workers= applies to the solvers 'gurobi' and 'scip' only"):
        PulpOracle(prob, x, solver="highs", workers=2)
    with pytest.raises(ValueError, match=r"parameters= applies to .* not to 'HiGHS'"):
        PulpOracle(prob, x, solver=pulp.HiGHS(msg=False), parameters={"presolve": "off"})
    with pytest.raises(TypeError, match="parameters must be a dict of scip parameters"):
        PulpOracle(prob, x, solver="scip", parameters=[("limits/time", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        PulpOracle(prob, [x[0], x[0]])
    with pytest.raises(TypeError, match="LpVariable"):
        PulpOracle(prob, [x[0], "x1"])
    with pytest.raises(TypeError, match="LpProblem"):
        PulpOracle("prob", x)


@pytest.mark.parametrize(("module", "solver"), [("pulp", "cbc"), ("highspy", "highs")])
def test_missing_extra_names_pulp(monkeypatch: pytest.MonkeyPatch, module: str, solver: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import now fails
    with pytest.raises(MissingExtraError, match=r"imle-solvers\[pulp\]"):
        ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend=solver)  # type: ignore[arg-type]


def test_cbc_infeasible_claim_at_the_time_limit_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """CBC may say "Integer infeasible" for a feasible model when its clock runs out: not trusted."""
    from imle_solvers.adapters.ilp._cbc import CbcEngine
    from imle_solvers.adapters.ilp._engine import Outcome
    from imle_solvers.errors import SolverTimeoutError

    claim = Outcome("infeasible", None, "Integer infeasible")
    monkeypatch.setattr(CbcEngine, "_parse", staticmethod(lambda raw, n_cols: claim))
    limited = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="cbc", time_limit=1e-4)  # CBC takes longer
    with pytest.raises(SolverTimeoutError):
        limited.solve(np.ones(3))
    unlimited = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="cbc")
    with pytest.raises(InfeasibleError):
        unlimited.solve(np.ones(3))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("solver", ["cbc", "highs"])
@pytest.mark.parametrize(
    ("row", "rhs", "bounds", "w"),
    [
        ([2.0, -2.0], 1.0, (None, None), [1.0, 1.0]),  # 2x − 2y = 1: LP unbounded, no integer point
        ([1.0, -1.0], 0.5, (0, None), [-1.0, 0.0]),  # x − y = 0.5
        ([0.1, -0.1], 0.05, (None, None), [0.0, 0.0]),  # decimals: x − y = 0.5 again
    ],
)
def test_integrality_infeasible_model_is_infeasible_not_unbounded(
    solver: str, row: list[float], rhs: float, bounds: tuple, w: list[float]
) -> None:
    """CBC called these models unbounded (its LP relaxation is) or searched forever; no integer state
    satisfies the row, so the model is infeasible for every objective."""
    oracle = ILP(2, A_eq=[row], b_eq=[rhs], bounds=bounds, backend=solver)  # type: ignore[arg-type]
    for weights in (w, [-1.0, -1.0], [1.0, -3.0]):
        with pytest.raises(InfeasibleError):
            oracle.solve(np.array(weights))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_unbounded_integer_models_stay_unbounded(solver: str) -> None:
    """A feasible model with an unbounded direction is unbounded, whichever word the solver uses."""
    free = ILP(2, A_eq=[[2.0, -2.0]], b_eq=[2.0], bounds=(None, None), backend=solver)  # type: ignore[arg-type]
    with pytest.raises(UnboundedError):
        free.solve(np.array([1.0, 1.0]))
    assert free.solve(np.array([1.0, -1.0])) @ np.array([2.0, -2.0]) == 2.0  # bounded for this objective


@pytest.mark.parametrize(
    ("claim", "zero_objective", "unbounded_variables", "expected"),
    [
        ("unbounded", "optimal", True, "unbounded"),
        ("unbounded", "infeasible", True, "infeasible"),
        ("unbounded", "timeout", True, "timeout"),
        ("unbounded", "error", True, "error"),
        ("infeasible", "optimal", True, "unbounded"),
        ("infeasible", "feasible", True, "unbounded"),
        ("infeasible", "infeasible", True, "infeasible"),
        ("infeasible", "optimal", False, "error"),
        ("unbounded", "optimal", False, "error"),
    ],
)
def test_cbc_verdicts_are_checked_by_a_zero_objective_solve(
    monkeypatch: pytest.MonkeyPatch, claim: str, zero_objective: str, unbounded_variables: bool, expected: str
) -> None:
    """CBC says "infeasible" for unbounded MIPs and "unbounded" for integer-infeasible ones: whether a
    state exists (a solve with a zero objective) and whether a variable is unbounded decide."""
    from imle_solvers.adapters.ilp._cbc import CbcEngine
    from imle_solvers.adapters.ilp._engine import Outcome

    form = LinearForm.from_matrices(2, A_ub=[[1.0, 1.0]], b_ub=[1.0], bounds=(0, None))
    engine = CbcEngine(form, None)
    engine.can_be_unbounded = unbounded_variables
    runs: list[list[float]] = []

    def run(costs: np.ndarray) -> tuple[Outcome, float]:
        runs.append(costs.tolist())
        status = claim if len(runs) == 1 else zero_objective
        values = [0.0, 0.0] if status in ("optimal", "feasible") else None
        return Outcome(status, values, "said"), 0.0  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "_run", run)
    assert engine.solve(np.array([-1.0, 1.0])).status == expected
    assert runs == [[-1.0, 1.0], [0.0, 0.0]]


def test_infeasible_row_finds_rows_without_an_integer_solution() -> None:
    def row_of(**kwargs: object) -> int | None:
        return LinearForm.from_matrices(2, **kwargs).infeasible_row()  # type: ignore[arg-type]

    assert row_of(A_eq=[[2.0, -2.0]], b_eq=[1.0], bounds=(None, None)) == 0  # gcd 2 does not divide 1
    assert row_of(A_eq=[[1.0, 1.0], [4.0, 6.0]], b_eq=[1.0, 3.0]) == 1  # gcd 2 does not divide 3
    assert row_of(A_eq=[[0.1, 0.3]], b_eq=[0.05]) == 0  # exactly x + 3y = 0.5
    assert row_of(A_ub=[[2.0, 4.0], [-2.0, -4.0]], b_ub=[2.0, -3.0]) is None  # rows judged one at a time
    assert row_of(A_ub=[[0.0, 0.0]], b_ub=[-1.0]) == 0  # an empty row: 0 ≤ −1
    assert row_of(A_eq=[[2.0, -2.0]], b_eq=[1.0], integer=[True, False]) is None  # y continuous
    assert row_of(A_eq=[[2.0, -2.0]], b_eq=[2.0]) is None
    assert row_of(A_ub=[[0.0, 0.0]], b_ub=[0.0]) is None
    assert row_of(A_ub=[[0.1, 0.2]], b_ub=[0.3]) is None
    ranged = LinearForm(  # 1 ≤ 2x + 2y ≤ 1.5 has no integer x, y
        2,
        sp.csr_matrix(np.array([[2.0, 2.0]])),
        np.array([1.0]),
        np.array([1.5]),
        np.zeros(2),
        np.full(2, 3.0),
        np.ones(2, bool),
        ("x", "y"),
    )
    assert ranged.infeasible_row() == 0


def test_our_pulp_paths_use_the_api_that_pulp_4_keeps() -> None:
    """Reading a model and building the TSP's ILP raise none of PuLP's 4.0 deprecation warnings (a
    30-node MTZ model gave 8,600); PuLP is bounded below 4 (pyproject.toml) until 4.0 can be tested."""
    from imle_solvers.adapters.graphs.tsp import tsp_ilp

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for formulation in ("flow", "mtz"):
            assert tsp_ilp(5, formulation).solve(np.arange(10.0)).sum() == 5  # type: ignore[arg-type]
        prob = pulp.LpProblem("two", pulp.LpMaximize)
        x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(3)]
        prob += pulp.lpSum(x) == 2
        oracle = PulpOracle(prob, x, solver="highs")
        assert oracle.solve(np.array([1.0, 3.0, 2.0])).tolist() == [0.0, 1.0, 1.0]
        assert ILP.from_pulp(prob, x, backend="cbc").solve(np.array([1.0, 3.0, 2.0])).tolist() == [
            0.0,
            1.0,
            1.0,
        ]


@pytest.mark.parametrize("solver", ["cbc", "highs", "gurobi", "scip"])
def test_expected_nonzeros_is_read_off_the_constraints_or_taken_as_given(solver: str) -> None:
    prob = pulp.LpProblem("pick_two", pulp.LpMaximize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(5)]
    prob += pulp.lpSum(x) == 2
    assert PulpOracle(prob, x, solver=solver).expected_nonzeros == 2.0  # Σ x = 2 fixes it
    assert PulpOracle(prob, x, solver=solver, expected_nonzeros=3.5).expected_nonzeros == 3.5


class _Reports(pulp.LpSolver):
    """A PuLP solver object that only reports a fixed (status, solution status) pair."""

    def __init__(self, status: int, sol_status: int) -> None:
        super().__init__(msg=False)
        self.pair = (status, sol_status)

    def available(self) -> bool:
        return True

    def actualSolve(self, lp: object, **kwargs: object) -> int:  # PuLP names it so
        lp.assignStatus(*self.pair)  # type: ignore[attr-defined]
        return self.pair[0]


@pytest.mark.parametrize(
    "pair",
    [
        (pulp.LpStatusUnbounded, pulp.LpSolutionUnbounded),
        (pulp.LpStatusUnbounded, pulp.LpSolutionNoSolutionFound),  # the status alone says it
        (pulp.LpStatusNotSolved, pulp.LpSolutionUnbounded),  # the solution status alone says it
    ],
)
def test_a_solver_object_that_reports_unbounded_gives_unbounded_error(pair: tuple[int, int]) -> None:
    prob = pulp.LpProblem("any", pulp.LpMinimize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(3)]
    prob += pulp.lpSum(x) <= 2
    with pytest.raises(UnboundedError):
        PulpOracle(prob, x, solver=_Reports(*pair)).solve(np.ones(3))
