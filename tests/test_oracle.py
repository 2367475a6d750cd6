"""The oracle contract: validation shared by every oracle, row-tagged errors, TopK against brute force."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from imle_solvers import InfeasibleError, InvalidWeightsError, MapOracle, TopK, TorchOracle
from imle_solvers.oracle import check_oracle, check_samples, check_weights, map_solve, sense_sign
from tests.support.oracles import EnumOracle, k_subsets


class FailsOnNegativeFirst(MapOracle):
    n_vars = 3

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] < 0:
            raise InfeasibleError("first weight negative")
        return np.ones(3)


@given(
    st.integers(1, 7).flatmap(
        lambda m: st.tuples(
            st.integers(1, m),
            arrays(np.float64, (3, m), elements=st.floats(-5, 5).map(lambda x: round(x, 1))),
        )
    )
)
def test_topk_matches_brute_force(case: tuple[int, np.ndarray]) -> None:
    k, weights = case
    m = weights.shape[1]
    oracle = TopK(k, m)
    z = oracle.solve_batch(weights)
    states = k_subsets(m, k)
    best = (weights @ states.T).max(axis=1)
    assert np.all(z.sum(1) == k) and set(np.unique(z)) <= {0.0, 1.0}
    np.testing.assert_allclose((z * weights).sum(1), best)  # optimal, ties included
    np.testing.assert_array_equal(z, oracle.solve_batch(weights))  # deterministic


def test_topk_torch_batched_leading_dims_and_numpy_path() -> None:
    oracle = TopK(2, 5)
    w = torch.randn(2, 3, 5, dtype=torch.float64)
    z = oracle.solve_torch(w)
    assert z.shape == w.shape and z.dtype == w.dtype and torch.all(z.sum(-1) == 2)
    np.testing.assert_array_equal(oracle.solve(w[0, 0].numpy()), z[0, 0].numpy())
    assert oracle.expected_nonzeros == 2.0
    with pytest.raises(ValueError):
        TopK(0, 5)
    with pytest.raises(ValueError):
        TopK(6, 5)
    with pytest.raises(ValueError):
        TopK(1, 0)


def test_validate_rejects_bad_batches_with_rows() -> None:
    oracle = EnumOracle(k_subsets(4, 1))
    w = np.zeros((4, 4))
    w[2, 1] = np.nan
    with pytest.raises(InvalidWeightsError) as info:
        oracle.solve_batch(w)
    assert info.value.rows == (2,)
    with pytest.raises(InvalidWeightsError, match="n_vars=4"):
        oracle.solve_batch(np.zeros((2, 5)))
    with pytest.raises(InvalidWeightsError, match="floating"):
        oracle.solve_batch(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(InvalidWeightsError):
        oracle.solve_batch(np.float64(1.0))  # type: ignore[arg-type]
    assert oracle.solve_calls == 0
    out = oracle.validate(np.zeros((2, 4), dtype=np.float32))
    assert out.dtype == np.float64 and out.flags.c_contiguous


def test_solver_errors_carry_the_batch_row() -> None:
    w = np.ones((5, 3))
    w[3, 0] = -1.0
    with pytest.raises(InfeasibleError, match="batch row 3") as info:
        FailsOnNegativeFirst().solve_batch(w)
    assert info.value.rows == (3,)


def test_map_solve_converts_sense_and_keeps_dtype() -> None:
    states = k_subsets(4, 2)
    theta = torch.tensor([[1.0, -2.0, 3.0, 0.5]], dtype=torch.float64)
    z_max = map_solve(EnumOracle(states, "max"), theta)
    z_min = map_solve(EnumOracle(states, "min"), theta)  # minimising −θ = maximising θ
    assert torch.equal(z_max, z_min) and z_max.dtype == torch.float64
    assert torch.equal(z_max, torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=torch.float64))
    assert sense_sign(EnumOracle(states, "min")) == -1.0
    with pytest.raises(ValueError):
        sense_sign(EnumOracle(states, "sideways"))


def test_map_solve_uses_pool() -> None:
    class RecordingPool:
        def __init__(self) -> None:
            self.shapes: list[tuple[int, ...]] = []

        def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
            self.shapes.append(weights.shape)
            return oracle.solve_batch(weights)

    pool = RecordingPool()
    oracle = EnumOracle(k_subsets(4, 2))
    z = map_solve(oracle, torch.randn(6, 4), pool)
    assert pool.shapes == [(6, 4)] and z.shape == (6, 4) and z.dtype == torch.float32
    map_solve(TopK(2, 4), torch.randn(6, 4), pool)  # device-native oracles never reach the pool
    assert pool.shapes == [(6, 4)]


def test_map_solve_of_an_empty_batch_calls_no_oracle_or_pool() -> None:
    class FailingPool:
        def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
            raise AssertionError("the pool was called")

    oracle = EnumOracle(k_subsets(4, 2), "min")
    z = map_solve(oracle, torch.zeros(0, 4, dtype=torch.float64), FailingPool())
    assert z.shape == (0, 4) and z.dtype == torch.float64 and oracle.batch_calls == []


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: check_oracle(TopK),
            TypeError,
            r"^oracle must be a MapOracle instance, got the class TopK; pass",
        ),
        (
            lambda: check_oracle(None),
            TypeError,
            r"^oracle must be a MapOracle instance, got None \(NoneType\)$",
        ),
        (lambda: check_samples(0), ValueError, r"^samples must be a positive integer, got 0$"),
        (lambda: check_samples(1.5), ValueError, r"^samples must be a positive integer, got 1\.5$"),
        (
            lambda: sense_sign(EnumOracle(k_subsets(3, 1), "up")),
            ValueError,
            r"^oracle\.sense must be one of 'max', 'min', got 'up'$",
        ),
        (
            lambda: check_weights(np.zeros((2, 4)), TopK(1, 4)),  # type: ignore[arg-type]
            InvalidWeightsError,
            r"^weights must be a torch\.Tensor, got ndarray$",
        ),
        (
            lambda: check_weights(torch.zeros(2, 4, dtype=torch.long), TopK(1, 4)),
            InvalidWeightsError,
            r"^weights must have a floating dtype, got torch\.int64; use weights\.float\(\)$",
        ),
        (
            lambda: check_weights(torch.zeros(2, 3), TopK(1, 4)),
            InvalidWeightsError,
            r"^TopK expects weights of shape \(\.\.\., 4\), got \(2, 3\)$",
        ),
        (
            lambda: check_weights(torch.tensor(1.0), TopK(1, 4)),
            InvalidWeightsError,
            r"^TopK expects weights of shape \(\.\.\., 4\), got \(\)$",
        ),
        (
            lambda: check_weights(torch.tensor([[0.0, 1, 2, 3], [float("inf"), 0, 0, 0]]), TopK(1, 4)),
            InvalidWeightsError,
            r"^batch row 1: weights contain NaN or inf$",
        ),
        (
            lambda: TorchOracle.from_function(TopK(1, 3).solve_torch, n_vars=3, sense="up"),  # type: ignore[arg-type]
            ValueError,
            r"^sense must be one of 'max', 'min', got 'up'$",
        ),
        (
            lambda: TorchOracle.from_function(TopK(1, 3).solve_torch, n_vars=0),
            ValueError,
            r"^n_vars must be a positive integer, got 0$",
        ),
        (
            lambda: TorchOracle.from_function("argmax", n_vars=3),  # type: ignore[arg-type]
            TypeError,
            r"^fn must be callable, got str$",
        ),
    ],
)
def test_argument_checks_fail_with_their_exact_message(
    call: Callable[[], object], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        call()


def test_check_weights_can_skip_the_finiteness_check() -> None:
    check_weights(torch.tensor([[float("nan"), 0.0, 0.0, 0.0]]), TopK(1, 4), check_finite=False)
