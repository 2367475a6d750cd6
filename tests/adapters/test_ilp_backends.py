"""The Gurobi and SCIP engines of the ILP family, and the objective scaling every engine shares."""

from __future__ import annotations

import itertools
import signal
import sys
import threading

import numpy as np
import pytest

from imle_solvers import ILP
from imle_solvers.errors import (
    ImleSolversError,
    InfeasibleError,
    MissingExtraError,
    SolverLicenseError,
    UnboundedError,
)
from tests.support.ilp_cases import assignment, market_split

pytestmark = pytest.mark.timeout(40)

BACKENDS = ["cpsat", "cbc", "highs", "gurobi", "scip"]


def _knapsack() -> dict[str, object]:
    return {"A_ub": [[2.0, 3.0, 4.0, 1.0, 5.0]], "b_ub": [9.0], "bounds": (0, 2), "sense": "max"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_and_tiny_weights_give_the_states_of_weights_near_one(backend: str) -> None:
    # every engine gets the costs scaled by a power of two into [1/2, 1): weights near 1e15 (CBC called such
    # models unbounded), 1e18, 1e20 (HiGHS's infinite cost), the largest float and 1e-300 (where an absolute
    # gap of 1e-6 accepts any state) give the states of the same weights near 1
    rng = np.random.default_rng(0)
    knapsack = ILP(5, backend=backend, **_knapsack())  # type: ignore[arg-type]
    A, b = assignment(3)
    matching = ILP(9, A_eq=A, b_eq=b, backend=backend)  # type: ignore[arg-type]
    top = np.finfo(np.float64).max
    for oracle, m in ((knapsack, 5), (matching, 9)):
        for _ in range(3):
            w = rng.permutation(np.arange(1.0, m + 1.0)) + rng.uniform(0, 0.1, m)  # no ties
            expected = oracle.solve(w)
            for scale in (1e15, 1e18, 1e20, 1e-300, top / w.max()):
                assert oracle.solve(w * scale).tolist() == expected.tolist(), (backend, scale)


@pytest.mark.parametrize("backend", ["cbc", "highs", "gurobi", "scip"])
def test_huge_weights_on_a_linear_programme(backend: str) -> None:
    lp = ILP(2, A_ub=[[1, 1]], b_ub=[1.5], bounds=(0, None), integer=False, sense="max", backend=backend)
    for scale in (1.0, 1e15, 1e20, 1e300):
        assert lp.solve(np.array([1.0, 2.0]) * scale).tolist() == [0.0, 1.5]
    with pytest.raises(UnboundedError):  # unbounded stays unbounded, whatever the scale
        ILP(2, bounds=(0, None), integer=False, sense="max", backend=backend).solve(np.array([1e20, 0.0]))


# ------------------------------------------------------------------ Gurobi
def test_gurobi_beyond_the_size_limited_licence_is_our_error_when_made() -> None:
    n = 2001
    with pytest.raises(SolverLicenseError, match=r"2001 variables, 1 linear constraints.*at most 2000"):
        ILP(n, A_ub=np.ones((1, n)), b_ub=[3.0], backend="gurobi")
    rows = np.eye(2001, 5)  # 5 variables, 2,001 rows
    with pytest.raises(SolverLicenseError, match=r"5 variables, 2001 linear constraints"):
        ILP(5, A_ub=rows, b_ub=np.ones(2001), backend="gurobi")
    at_limit = ILP(2000, A_ub=np.ones((1, 2000)), b_ub=[3.0], sense="max", backend="gurobi")
    assert at_limit.solve(np.ones(2000)).sum() == 3.0


def test_gurobi_size_error_at_solve_time_is_ours_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # another process's licence may be smaller than the one the oracle was made under
    import gurobipy as gp

    oracle = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="gurobi")
    local = oracle.oracle._engine._local  # type: ignore[attr-defined]

    class Refusing:  # gurobipy's Model takes no new attributes: a stand-in whose optimize raises
        def __init__(self, model: object, errno: int, message: str) -> None:
            self.model, self.errno, self.message = model, errno, message

        def __getattr__(self, name: str) -> object:
            return getattr(self.model, name)

        def optimize(self) -> None:
            raise gp.GurobiError(self.errno, self.message)

    model = local.model
    monkeypatch.setattr(local, "model", Refusing(model, 10010, "Model too large for size-limited license"))
    with pytest.raises(SolverLicenseError, match="3 variables, 1 linear constraints"):
        oracle.solve(np.ones(3))
    monkeypatch.setattr(local, "model", Refusing(model, 10001, "Out of memory"))
    with pytest.raises(ImleSolversError, match="Gurobi: Out of memory"):
        oracle.solve(np.ones(3))


class _Model:
    """What `GurobiEngine._outcome` reads of a solved model."""

    def __init__(self, status: int, sol_count: int = 0) -> None:
        self.Status, self.SolCount = status, sol_count


def test_gurobi_statuses_map_to_typed_outcomes() -> None:
    import gurobipy as gp

    oracle = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="gurobi", time_limit=5.0)
    engine = oracle.oracle._engine  # type: ignore[attr-defined]
    codes = gp.GRB.Status
    costs = np.ones(3)
    for status, words in [
        (codes.NUMERIC, "NUMERIC: numerical trouble"),
        (codes.SUBOPTIMAL, "SUBOPTIMAL: numerical trouble"),
        (codes.NODE_LIMIT, "NODE_LIMIT"),
    ]:
        outcome = engine._outcome(_Model(status, sol_count=1), costs)
        assert outcome.status == "error" and words in outcome.detail
    assert engine._outcome(_Model(codes.TIME_LIMIT), costs).status == "timeout"
    assert engine._outcome(_Model(codes.INFEASIBLE), costs).status == "infeasible"
    with pytest.raises(ImleSolversError, match=r"solver failed .*NUMERIC: numerical trouble"):
        oracle.oracle._state(engine._outcome(_Model(codes.NUMERIC, 1), costs))  # type: ignore[attr-defined]


def test_gurobi_infeasible_or_unbounded_is_told_apart() -> None:
    # presolve answers INF_OR_UNBD for both; a zero objective decides
    unbounded = ILP(2, A_ub=[[1, -1]], b_ub=[1], bounds=(None, None), backend="gurobi")
    with pytest.raises(UnboundedError):
        unbounded.solve(np.array([1.0, 0.0]))
    empty = ILP(2, A_ub=[[1, 1], [-1, -1]], b_ub=[1, -3], bounds=(None, None), backend="gurobi")
    with pytest.raises(InfeasibleError):
        empty.solve(np.array([1.0, 0.0]))


def test_gurobi_and_scip_take_their_parameters_and_threads() -> None:
    gurobi = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="gurobi", workers=2, parameters={"Presolve": 0})
    params = gurobi.oracle._engine._local.model.Params  # type: ignore[attr-defined]
    assert (params.Threads, params.Presolve, params.MIPGap, params.TimeLimit) == (2, 0, 0.0, np.inf)
    timed = ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="gurobi", time_limit=2.5)
    assert timed.oracle._engine._local.model.Params.TimeLimit == 2.5  # type: ignore[attr-defined]
    scip = ILP(
        3, A_eq=np.ones((1, 3)), b_eq=[1], backend="scip", time_limit=2.5, parameters={"lp/threads": 1}
    )
    model = scip.oracle._engine._local.model  # type: ignore[attr-defined]
    assert (model.getParam("limits/time"), model.getParam("numerics/feastol")) == (2.5, 1e-9)
    for oracle in (gurobi, scip):
        assert oracle.solve(np.array([3.0, -1.0, 2.0])).tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize(("backend", "extra"), [("gurobi", "gurobipy"), ("scip", "pyscipopt")])
def test_a_missing_solver_names_its_extra(backend: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # `import extra` now raises ImportError
    with pytest.raises(MissingExtraError, match=rf"imle-solvers\[{backend}\]"):
        ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["gurobi", "scip"])
def test_ties_do_not_depend_on_the_previous_call(backend: str) -> None:
    A, b = assignment(3)
    oracle = ILP(9, A_eq=A, b_eq=b, backend=backend)  # type: ignore[arg-type]
    ties = np.zeros(9)
    first = oracle.solve(ties)
    for w in np.random.default_rng(0).normal(size=(5, 9)):
        oracle.solve(w)
        assert oracle.solve(ties).tolist() == first.tolist()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the C-level handler (sigaction)")
def test_overlapping_gurobi_solves_leave_python_its_sigint_handler() -> None:
    # Gurobi installs its own SIGINT handler per solve and puts back the one it found: solves overlapping on
    # threads put back each other's, and Ctrl-C never reached Python again (now one solve at a time)
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    libc = ctypes.CDLL(None)

    def handler() -> bytes:
        buffer = ctypes.create_string_buffer(256)
        assert libc.sigaction(int(signal.SIGINT), None, buffer) == 0
        return buffer.raw[:8]  # sa_handler

    before = handler()
    A, b = market_split(5, 40)
    oracle = ILP(40, A_eq=A, b_eq=b, backend="gurobi", time_limit=0.3)
    seen = []
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(oracle.solve, np.full(40, float(k))) for k in range(3)]
        for _ in itertools.repeat(None, 20):
            seen.append(handler())
            threading.Event().wait(0.01)
        for future in futures:
            future.exception()
    # Gurobi's own handler is in place while it solves (when a sample falls inside a solve: not asserted,
    # it depends on the machine's speed); afterwards Python's is back, however the solves overlapped
    assert handler() == before


def test_the_sigint_guard_puts_back_the_handler_found_by_the_first_solve() -> None:
    import ctypes

    from imle_solvers.adapters.ilp._gurobi import _SigintGuard

    guard = _SigintGuard()
    if guard._libc is None:
        pytest.skip("the guard reads sigaction on Linux only")
    libc = ctypes.CDLL(None)

    def handler() -> bytes:
        buffer = ctypes.create_string_buffer(256)
        assert libc.sigaction(int(signal.SIGINT), None, buffer) == 0
        return buffer.raw[:8]  # sa_handler

    previous = signal.getsignal(signal.SIGINT)
    before = handler()
    try:
        with guard:  # two solves that overlap: the outer one found Python's handler
            with guard:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a solver's own handler would be
            assert handler() != before  # the inner solve ended: not put back while another runs
        assert handler() == before  # the last solve to end puts back the one found first
    finally:
        signal.signal(signal.SIGINT, previous)


def test_gurobi_without_any_licence_is_our_error_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    gp = pytest.importorskip("gurobipy")

    class NoLicence:
        def __init__(self, empty: bool = False) -> None:
            pass

        def setParam(self, name: str, value: object) -> None:  # gurobipy's name
            pass

        def start(self) -> None:
            raise gp.GurobiError(10009, "No Gurobi license found")

    monkeypatch.setattr(gp, "Env", NoLicence)
    with pytest.raises(SolverLicenseError, match="no usable licence"):
        ILP(3, A_ub=[[1.0, 1.0, 1.0]], b_ub=[2.0], backend="gurobi")


@pytest.mark.parametrize(
    ("status", "solutions", "expected"),
    [
        ("OPTIMAL", 1, "unbounded"),  # a zero objective finds a state: the model has one
        ("TIME_LIMIT", 1, "unbounded"),  # the probe ran out of time holding a state: it has one too
        ("INFEASIBLE", 0, "infeasible"),
        ("TIME_LIMIT", 0, "timeout"),  # nothing found in time: unknown
    ],
)
def test_gurobi_tells_infeasible_from_unbounded_by_a_zero_objective_probe(
    status: str, solutions: int, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gp = pytest.importorskip("gurobipy")
    import types

    oracle = ILP(3, A_ub=[[1.0, 1.0, 1.0]], b_ub=[2.0], backend="gurobi")
    engine = oracle.oracle._engine  # type: ignore[attr-defined]
    engine.solve(np.zeros(3))  # this thread's model
    probe = types.SimpleNamespace(
        Status=getattr(gp.GRB.Status, status), SolCount=solutions, reset=lambda: None
    )
    monkeypatch.setattr(engine, "_optimize", lambda model: None)  # the probe's outcome is set above
    assert engine._infeasible_or_unbounded(probe, np.ones(3)) == expected
