"""The engine interface of the ILP family: every outcome becomes a checked state or its typed error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from imle_solvers import ILP
from imle_solvers.adapters.ilp._check import FeasibilityCheck
from imle_solvers.adapters.ilp._engine import Engine, EngineOracle, Outcome, check_single
from imle_solvers.adapters.ilp._linear import LinearForm
from imle_solvers.errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidSolutionError,
    InvalidWeightsError,
    SolverTimeoutError,
    UnboundedError,
    UnprovenSolutionWarning,
)

pytestmark = pytest.mark.timeout(30)  # the back-end tests solve with CP-SAT, CBC and HiGHS


class _Scripted:
    """An engine that returns a fixed outcome and records the costs it was handed."""

    def __init__(self, outcome: Outcome, integral: bool = False) -> None:
        self.outcome, self.integral = outcome, integral
        self.costs: list[list[float]] = []

    def solve(self, costs: np.ndarray) -> Outcome:
        self.costs.append(costs.tolist())
        return self.outcome


class _Oracle(EngineOracle):
    def __init__(self, engine: Engine, sense: str = "min", check: bool = True, strict: bool = False) -> None:
        self.sense = sense  # type: ignore[assignment]
        self.n_vars = 2
        self.label = "Scripted(x)"
        self.time_limit = 1.5
        self.strict = strict
        self._engine = engine
        form = LinearForm.from_matrices(2, A_ub=[[1.0, 1.0]], b_ub=[1.0])  # z0 + z1 ≤ 1, 0/1
        self._check = FeasibilityCheck(form) if check else None


@pytest.mark.parametrize("sense", ["min", "max"])
def test_weights_become_costs_to_minimise(sense: str) -> None:
    engine = _Scripted(Outcome("optimal", [1.0, 0.0]))
    assert _Oracle(engine, sense).solve(np.array([2.0, -3.0])).tolist() == [1.0, 0.0]
    # minimised, scaled by a power of two (2^-2) to max|c| in [1/2, 1): the same optimum, exactly
    assert engine.costs == [[0.5, -0.75] if sense == "min" else [-0.5, 0.75]]


def test_states_are_checked_snapped_or_taken_as_they_are() -> None:
    assert _Oracle(_Scripted(Outcome("optimal", [1.0 - 1e-9, 0.0]))).solve(np.zeros(2)).tolist() == [1.0, 0.0]
    with pytest.raises(InvalidSolutionError, match=r"Scripted\(x\).*constraint row 0"):
        _Oracle(_Scripted(Outcome("optimal", [1.0, 1.0]))).solve(np.zeros(2))
    with pytest.raises(InvalidSolutionError, match="fractional"):
        _Oracle(_Scripted(Outcome("optimal", [0.5, 0.0]))).solve(np.zeros(2))
    integral = _Scripted(Outcome("optimal", [0.0, 1.0, 7.0]), integral=True)  # an auxiliary column
    unchecked = _Oracle(integral, check=False)
    assert unchecked.solve(np.zeros(2)).tolist() == [0.0, 1.0]  # the engine's values are the state


def test_the_general_check_snaps_and_catches_what_the_small_one_does() -> None:
    # a mixed model takes the general path (the small one is for all-integer models)
    form = LinearForm.from_matrices(
        3, A_ub=[[1, 1, 1]], b_ub=[2.5], bounds=(0, 2), integer=[True, True, False]
    )
    check = FeasibilityCheck(form)
    z = check([1 - 1e-9, -1e-12, 0.5], "t")
    assert z.tolist() == [1.0, 0.0, 0.5] and not np.signbit(z).any()  # snapped, and no −0.0
    with pytest.raises(InvalidSolutionError, match=r"integer variable 0 .*fractional value 0\.99"):
        check(np.array([0.99, 0.0, 0.0]), "t")  # 0.01 from an integer: far beyond int_tol = 1e-6
    with pytest.raises(InvalidSolutionError, match=r"row 0 is violated: A x = 4\.0 outside \[-inf, 2\.5\]"):
        check(np.array([2.0, 2.0, 0.0]), "t")  # messages print numbers, not np.float64(...)
    with pytest.raises(InvalidSolutionError, match=r"variable 2 \('x2'\) = nan"):
        check([0.0, 0.0, np.nan], "t")  # a continuous column: no integrality test to catch the NaN
    with pytest.raises(InvalidSolutionError, match=r"variable 2 \('x2'\) = 2\.25 is outside its bounds"):
        check([0.0, 0.0, 2.25], "t")  # the row holds (2.25 ≤ 2.5), the upper bound 2 does not


def test_the_check_holds_rows_to_a_relative_tolerance_of_1e_9_by_default() -> None:
    form = LinearForm.from_matrices(2, A_ub=[[0.3, 0.3]], b_ub=[0.6 * (1 - 1e-7)])  # 1e-7 below 0.3 + 0.3
    with pytest.raises(InvalidSolutionError, match="constraint row 0 is violated"):
        FeasibilityCheck(form)([1.0, 1.0], "t")
    assert FeasibilityCheck(form, rtol=1e-6)([1.0, 1.0], "t").tolist() == [1.0, 1.0]


def test_unproven_states_warn_or_raise_when_strict() -> None:
    engine = _Scripted(Outcome("feasible", [0.0, 1.0]))
    with pytest.warns(UnprovenSolutionWarning, match=r"Scripted\(x\): time limit of 1.5 s"):
        assert _Oracle(engine).solve(np.zeros(2)).tolist() == [0.0, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SolverTimeoutError, match="strict=True"):
            _Oracle(engine, strict=True).solve(np.zeros(2))


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        ("infeasible", InfeasibleError, r"Scripted\(x\): the model is infeasible \(said\)"),
        ("unbounded", UnboundedError, r"unbounded for these weights \(said\)"),
        ("timeout", SolverTimeoutError, "no feasible state found within the time limit of 1.5 s"),
        ("error", ImleSolversError, r"solver failed \(said\)"),
    ],
)
def test_every_failure_is_its_typed_error_naming_the_row(status: str, error: type, words: str) -> None:
    oracle = _Oracle(_Scripted(Outcome(status, None, "said")))  # type: ignore[arg-type]
    with pytest.raises(error, match=words) as info:
        oracle.solve_batch(np.zeros((3, 2)))
    assert info.type is error and info.value.rows == (0,)


def test_weights_are_checked_before_the_engine_runs() -> None:
    engine = _Scripted(Outcome("optimal", [0.0, 0.0]))
    for bad in (np.zeros(3), np.array([np.nan, 0.0]), np.array([np.inf, -np.inf]), np.zeros((1, 2))):
        with pytest.raises(InvalidWeightsError):
            _Oracle(engine).solve(bad)
    assert engine.costs == []
    big = np.zeros(300)
    big[7] = np.nan
    with pytest.raises(InvalidWeightsError, match="NaN or inf"):
        check_single(big, 300, "t")  # the NumPy reduction of large models
    assert check_single([1, 2], 2, "t").dtype == np.float64


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["cpsat", "cbc", "highs"])
def test_every_back_end_is_an_engine_behind_the_same_oracle(backend: str) -> None:
    ilp = ILP(3, A_eq=[[1, 1, 1]], b_eq=[1], sense="max", backend=backend)  # type: ignore[arg-type]
    assert isinstance(ilp.oracle, EngineOracle)
    engine = ilp.oracle._engine
    assert engine.integral is (backend == "cpsat")
    outcome = engine.solve(np.array([0.0, -2.0, 1.0]))  # costs: minimise
    assert isinstance(outcome, Outcome) and outcome.status == "optimal"
    assert [round(v) for v in outcome.values or []][:3] == [0, 1, 0]
    assert ilp.solve(np.array([0.0, 2.0, -1.0])).tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("costs", "scaled"),
    [
        ([-12.0, 1.0], [-0.75, 0.0625]),  # the largest magnitude sets the power (here a negative cost)
        ([1.0], [0.5]),  # 1 = 0.5 · 2¹: scaled too
        ([0.75, -0.5], [0.75, -0.5]),  # already in [1/2, 1)
        ([3e300, -1e-300], [3e300 * 2.0**-999, 0.0]),  # 2^-999: the tiny cost becomes 0
        ([0.0, 0.0], [0.0, 0.0]),  # nothing to scale, no 0/0
    ],
)
def test_costs_are_scaled_by_the_power_of_two_of_their_largest_magnitude(
    costs: list[float], scaled: list[float]
) -> None:
    from imle_solvers.adapters.ilp._engine import scaled_costs

    out = scaled_costs(np.array(costs))
    assert out.tolist() == scaled  # exact: a power of two moves exponents only
    top = np.abs(out).max()
    assert top == 0.0 or 0.5 <= top < 1.0
