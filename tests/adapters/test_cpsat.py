"""CPSATOracle: brute-force optimality within the documented resolution, model reuse, hints, pickling."""

from __future__ import annotations

import pickle
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from imle_solvers import ILP
from imle_solvers.adapters import CPSATOracle
from imle_solvers.errors import (
    InfeasibleError,
    InvalidWeightsError,
    MissingExtraError,
    SolverTimeoutError,
)
from tests.support.ilp_cases import SmallILP, independent_set, market_split, small_ilps

pytestmark = pytest.mark.timeout(30)  # every test solves with CP-SAT, CBC or HiGHS: none may hang the suite


def _exactly(k: int, m: int) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(m)]
    model.add(sum(x) == k)
    return model, x


@given(small_ilps(max_vars=6, max_ub=2), st.sampled_from(["min", "max"]))
def test_matches_brute_force_within_resolution(ilp: SmallILP, sense: str) -> None:
    oracle = ILP(ilp.m, sense=sense, backend="cpsat", **ilp.kwargs())  # type: ignore[arg-type]
    if len(ilp.states) == 0:
        with pytest.raises(InfeasibleError):
            oracle.solve(ilp.w)
        return
    for w in (ilp.w, -ilp.w[::-1]):  # two objectives on the same model (the first one's state is hinted)
        z = oracle.solve(w)
        assert ilp.is_feasible(z)
        tol = oracle.oracle.objective_tolerance(w)  # type: ignore[attr-defined]
        best = ilp.optimum(w, sense)
        value = float(z @ w)
        # ⟨c, z*⟩ ≤ min ⟨c, z⟩ + max|c|·‖U‖₁/R   (costs c = w for "min", −w for "max")
        assert (value - best if sense == "min" else best - value) <= tol + 1e-12
        assert tol <= np.abs(w).max() * 2 * ilp.m / 2**20  # the default R = 2**20, U ≤ 2


@given(small_ilps(max_vars=5, max_ub=1))
def test_coarse_resolution_still_within_bound(ilp: SmallILP) -> None:
    """With R = 3 the scaling really loses information; the proved bound must still hold."""
    if len(ilp.states) == 0:
        return
    oracle = ILP(ilp.m, backend="cpsat", resolution=3, **ilp.kwargs())  # type: ignore[arg-type]
    z = oracle.solve(ilp.w)
    tol = np.abs(ilp.w).max() * ilp.m / 3  # max|c|·‖U‖₁/R with 0/1 variables
    assert oracle.oracle.objective_tolerance(ilp.w) == pytest.approx(tol)  # type: ignore[attr-defined]
    assert ilp.is_feasible(z)
    assert float(z @ ilp.w) <= ilp.optimum(ilp.w) + tol + 1e-12


def test_ties_and_tiny_differences() -> None:
    model, x = _exactly(1, 3)
    oracle = CPSATOracle(model, x, sense="max")
    z = oracle.solve(np.array([1.0, 1.0, -5.0]))  # a tie: either of the first two
    assert z[2] == 0 and z.sum() == 1
    # differences above the resolution are resolved exactly
    assert oracle.solve(np.array([1.0, 1.0 + 1e-4, 0.5])).tolist() == [0.0, 1.0, 0.0]


def test_constructor_from_cp_model_with_auxiliary_variables() -> None:
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(4)]
    count = model.new_int_var(0, 4, "count")  # auxiliary, not part of the state
    model.add(count == sum(x))
    model.add(count >= 2)
    model.minimize(sum(x))  # any objective of the model is discarded
    oracle = CPSATOracle(model, x, sense="max")
    assert oracle.n_vars == 4 and oracle.sense == "max"
    np.testing.assert_array_equal(oracle.solve(np.array([-1.0, -2.0, -0.5, -3.0])), [1, 0, 1, 0])
    np.testing.assert_array_equal(oracle.solve(np.array([1.0, 2.0, 0.5, 3.0])), [1, 1, 1, 1])
    model.add(count <= 0)  # later edits of the user's model do not leak into the oracle
    np.testing.assert_array_equal(oracle.solve(np.array([1.0, 2.0, 0.5, 3.0])), [1, 1, 1, 1])


def test_model_built_once_and_hint_only_on_request() -> None:
    model, x = _exactly(2, 5)
    oracle = CPSATOracle(model, x)
    proto = oracle._engine._state().proto
    z1 = oracle.solve(np.array([3.0, -1.0, 2.0, -2.0, 0.0]))
    np.testing.assert_array_equal(z1, [0, 1, 0, 1, 0])
    assert oracle._engine._state().proto is proto  # no rebuild, only the objective changed
    assert len(proto.constraints) == 1
    assert list(proto.solution_hint.values) == []  # no hint by default: ties do not depend on history
    hinted = CPSATOracle(model, x, hint=True)
    hinted.solve(np.array([3.0, -1.0, 2.0, -2.0, 0.0]))
    hint = hinted._engine._state().proto.solution_hint
    assert list(hint.values) == [0, 1, 0, 1, 0]
    z2 = hinted.solve(np.array([-3.0, 1.0, -2.0, 2.0, 0.0]))
    np.testing.assert_array_equal(z2, [1, 0, 1, 0, 0])
    assert list(hint.values) == [1, 0, 1, 0, 0]
    assert (
        list(hinted._engine._state().proto.objective.coeffs)
        == hinted.scaled_costs(np.array([-3.0, 1.0, -2.0, 2.0, 0.0])).tolist()
    )


def test_scaled_costs_resolution_and_zero_weights() -> None:
    model, x = _exactly(1, 3)
    oracle = CPSATOracle(model, x, sense="max", resolution=1000)
    np.testing.assert_array_equal(oracle.scaled_costs(np.array([0.5, -1.0, 0.25])), [-500, 1000, -250])
    np.testing.assert_array_equal(oracle.scaled_costs(np.zeros(3)), [0, 0, 0])
    assert oracle.solve(np.zeros(3)).sum() == 1
    big = cp_model.CpModel()
    y = [big.new_int_var(0, 2**50, f"y{i}") for i in range(2)]
    capped = CPSATOracle(big, y)
    assert capped.resolution * capped.u_norm1 <= 2.0**60  # no int64 overflow in the objective


def test_pickle_round_trip_before_and_after_solving() -> None:
    model, x = _exactly(2, 4)
    oracle = CPSATOracle(model, x, sense="max", time_limit=5.0)
    w = np.array([0.3, -1.0, 2.0, 0.9])
    fresh = pickle.loads(pickle.dumps(oracle))
    np.testing.assert_array_equal(fresh.solve(w), [0, 0, 1, 1])
    oracle.solve(-w)
    again = pickle.loads(pickle.dumps(oracle))
    assert again._engine._base is None  # rebuilt lazily
    np.testing.assert_array_equal(again.solve(w), oracle.solve(w))
    assert again.time_limit == 5.0 and again.sense == "max"


def test_threads_share_one_oracle() -> None:
    """A thread pool solves on per-thread model copies: concurrent answers equal the serial ones."""
    from concurrent.futures import ThreadPoolExecutor

    A, b = np.ones((1, 8)), [3.0]
    oracle = ILP(8, A_eq=A, b_eq=b, sense="max", backend="cpsat")
    weights = np.random.default_rng(0).normal(size=(40, 8))
    serial = oracle.solve_batch(weights)
    with ThreadPoolExecutor(4) as pool:
        threaded = np.array(list(pool.map(oracle.solve, weights)))
    np.testing.assert_array_equal(threaded, serial)
    top3 = np.sort(np.argsort(-weights, axis=1)[:, :3], axis=1)
    np.testing.assert_array_equal(np.sort(np.nonzero(serial)[1].reshape(-1, 3), axis=1), top3)


def test_batch_errors_name_rows() -> None:
    model, x = _exactly(1, 3)
    oracle = CPSATOracle(model, x)
    w = np.zeros((4, 3))
    w[2, 1] = np.nan
    with pytest.raises(InvalidWeightsError) as info:
        oracle.solve_batch(w)
    assert info.value.rows == (2,)
    with pytest.raises(InvalidWeightsError, match="n_vars=3"):
        oracle.solve_batch(np.zeros((2, 4)))
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.zeros(2))
    infeasible, y = _exactly(4, 3)
    with pytest.raises(InfeasibleError) as err:
        CPSATOracle(infeasible, y).solve_batch(np.zeros((2, 3)))
    assert err.value.rows == (0,)


def test_bad_constructor_arguments() -> None:
    model, x = _exactly(1, 3)
    with pytest.raises(TypeError, match="not a variable"):
        CPSATOracle(model, [x[0], ~x[1]])
    with pytest.raises(ValueError, match="twice"):
        CPSATOracle(model, [x[0], x[0]])
    with pytest.raises(ValueError, match="at least one"):
        CPSATOracle(model, [])
    with pytest.raises(TypeError, match="CpModel"):
        CPSATOracle("model", x)
    with pytest.raises(ValueError, match="sense"):
        CPSATOracle(model, x, sense="maximise")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time_limit"):
        CPSATOracle(model, x, time_limit=0)
    with pytest.raises(ValueError, match="workers"):
        CPSATOracle(model, x, workers=0)


def test_time_limit_without_a_feasible_state_raises() -> None:
    A, b = market_split()
    oracle = ILP(A.shape[1], A_eq=A, b_eq=b, backend="cpsat", time_limit=0.01)
    with pytest.raises(SolverTimeoutError, match="no feasible state"):
        oracle.solve(np.ones(A.shape[1]))


def test_time_limit_with_unproven_state_warns_or_raises() -> None:
    A = independent_set()
    n = A.shape[1]
    lax = ILP(n, A_ub=A, b_ub=np.ones(len(A)), sense="max", backend="cpsat", time_limit=0.3)
    with pytest.warns(RuntimeWarning, match="not proven optimal"):
        z = lax.solve(np.ones(n))
    assert z.sum() > 0 and (A @ z <= 1).all()  # a feasible, non-trivial state came back
    strict = ILP(n, A_ub=A, b_ub=np.ones(len(A)), sense="max", backend="cpsat", time_limit=0.3, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SolverTimeoutError, match="strict"):
            strict.solve(np.ones(n))


def test_missing_extra_names_cpsat(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _exactly(1, 3)
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model", None)  # import now fails
    with pytest.raises(MissingExtraError, match=r"imle-solvers\[cpsat\]"):
        CPSATOracle(model, x)
    with pytest.raises(MissingExtraError, match=r"imle-solvers\[cpsat\]"):
        ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="cpsat")
    # the declaration's own arguments are checked first, without the solver: the error a user can fix now
    for bad, match in (({"time_limit": -1.0}, "time_limit"), ({"sense": "maximize"}, "sense")):
        with pytest.raises(ValueError, match=match):
            ILP(3, A_eq=np.ones((1, 3)), b_eq=[1], backend="cpsat", **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("sense", ["min", "max"])
def test_python_and_numpy_scaling_agree(monkeypatch: pytest.MonkeyPatch, sense: str) -> None:
    """Small models scale in plain Python, large ones with numpy: the integers must be identical."""
    import imle_solvers.adapters.ilp.cpsat as cpsat_module

    model, x = _exactly(5, 300)
    oracle = CPSATOracle(model, x, sense=sense)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for w in (rng.normal(size=300), np.round(rng.normal(size=300), 1), np.zeros(300), -np.ones(300)):
        monkeypatch.setattr(cpsat_module, "SMALL", 10**9)
        python = oracle._engine.scaled(w if sense == "min" else -w)
        monkeypatch.setattr(cpsat_module, "SMALL", 0)
        numpy_ = oracle._engine.scaled(w if sense == "min" else -w)
        assert python == numpy_
    z = oracle.solve(w := rng.normal(size=300))  # the numpy path end to end (m = 300 > SMALL)
    best = np.argsort(w)[:5] if sense == "min" else np.argsort(-w)[:5]
    assert sorted(np.flatnonzero(z).tolist()) == sorted(best.tolist())


def test_rows_are_scaled_to_coprime_integers_with_their_bounds() -> None:
    """CP-SAT sees each row divided by the gcd of its coefficients, bounds rounded inwards: the same
    integer points (2x + 4y ≤ 5 is x + 2y ≤ 2)."""
    from imle_solvers.adapters.ilp._linear import LinearForm

    form = LinearForm.from_matrices(
        3, A_ub=[[2.0, 4.0, 0.0], [0.3, 0.6, 0.9]], b_ub=[5.0, 1.0], A_eq=[[3.0, 0.0, 6.0]], b_eq=[6.0]
    )
    coefs, lbs, ubs = form.integral_rows()
    assert coefs == [[1, 2], [1, 2, 3], [1, 2]] and lbs == [None, None, 2] and ubs == [2, 3, 2]
    for sense, w, best in (
        ("max", [1.0, 0.5, 0.0], [1.0, 0.0, 0.0]),
        ("max", [0.0, 1.0, 3.0], [0.0, 0.0, 1.0]),
    ):
        ilp = ILP(3, A_ub=[[2.0, 4.0, 0.0], [0.3, 0.6, 0.9]], b_ub=[5.0, 1.0], sense=sense)  # type: ignore[arg-type]
        assert ilp.solve(np.array(w)).tolist() == best
    gcd_only = ILP(2, A_ub=[[2.0, 2.0]], b_ub=[3.0], sense="max")  # 2x + 2y ≤ 3: one of the two
    assert gcd_only.solve(np.array([1.0, 2.0])).tolist() == [0.0, 1.0]
