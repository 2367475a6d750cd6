"""ClampedCosts: one implementation around host and device oracles; its floor is checked up front."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts, MapOracle, TorchOracle
from imle_solvers.adapters import DAGShortestPath


class _Cheapest(MapOracle):
    """Host oracle: the one-hot of the cheapest entry (records what it was handed)."""

    sense = "min"
    n_vars = 3
    expected_nonzeros = 1.0

    def __init__(self) -> None:
        self.seen: list[list[float]] = []

    def solve(self, weights: np.ndarray) -> np.ndarray:
        self.seen.append(np.asarray(weights).tolist())
        return np.eye(3)[int(np.argmin(weights))]


class _Max(_Cheapest):
    sense = "max"  # type: ignore[assignment]


@pytest.mark.parametrize("floor", [math.nan, math.inf, -math.inf, "0", None, True])
def test_a_floor_that_is_not_a_finite_number_is_refused_up_front(floor: object) -> None:
    """A NaN floor made every clamped cost NaN (all-NaN states, silently); ±inf floors likewise."""
    for oracle in (_Cheapest(), DAGShortestPath.grid(2, 2)):
        with pytest.raises(ValueError, match=r"ClampedCosts floor must be in \(-inf, inf\)"):
            ClampedCosts(oracle, floor)  # type: ignore[arg-type]


def test_host_oracle_gets_clamped_costs_and_stays_a_host_oracle() -> None:
    inner = _Cheapest()
    clamped = ClampedCosts(inner, floor=0.5)
    assert type(clamped) is ClampedCosts and not isinstance(clamped, TorchOracle)
    assert clamped.floor == 0.5 and clamped.n_vars == 3 and clamped.expected_nonzeros == 1.0
    assert clamped.solve(np.array([-3.0, 0.2, 2.0])).tolist() == [1.0, 0.0, 0.0]  # ties at the floor
    assert clamped.solve_batch(np.array([[3.0, 1.0, 2.0], [0.7, -1.0, 0.6]])).tolist() == [
        [0.0, 1.0, 0.0],
        [0.0, 1.0, 0.0],
    ]
    assert inner.seen == [[0.5, 0.5, 2.0], [3.0, 1.0, 2.0], [0.7, 0.5, 0.6]]
    assert not clamped.in_process_safe  # as the wrapped oracle
    copy = pickle.loads(pickle.dumps(clamped))
    assert type(copy) is ClampedCosts and copy.floor == 0.5
    with pytest.raises(ValueError, match="'min'"):
        ClampedCosts(_Max())


def test_the_default_floor_is_zero_on_both_kinds_of_oracle() -> None:
    inner = _Cheapest()
    host = ClampedCosts(inner)
    assert host.floor == 0.0
    assert host.solve_batch(np.array([[-2.0, -1.0, 0.5]])).tolist() == [[1.0, 0.0, 0.0]]  # tie at 0: first
    assert inner.seen == [[0.0, 0.0, 0.5]]  # negative costs raised to 0, the rest untouched
    device = ClampedCosts(DAGShortestPath.grid(2, 2))
    assert device.floor == 0.0
    w = torch.tensor([[-5.0, 0.25, -3.0, 0.5]], dtype=torch.float64)
    assert torch.equal(device.solve_torch(w), DAGShortestPath.grid(2, 2).solve_torch(w.clamp_min(0.0)))


def test_device_oracle_is_clamped_on_the_device() -> None:
    oracle = DAGShortestPath.grid(3, 3)
    clamped = ClampedCosts(oracle, floor=0.0)
    assert isinstance(clamped, ClampedCosts) and isinstance(clamped, TorchOracle) and clamped.in_process_safe
    w = torch.from_numpy(np.random.default_rng(0).normal(size=(4, 2, oracle.n_vars)))
    expected = oracle.solve_torch(w.clamp_min(0.0))
    assert torch.equal(clamped.solve_torch(w), expected)
    np.testing.assert_array_equal(clamped.solve_batch(w[:, 0].numpy()), expected[:, 0].numpy())
    np.testing.assert_array_equal(clamped.solve(w[0, 0].numpy()), expected[0, 0].numpy())
    copy = pickle.loads(pickle.dumps(clamped))
    assert type(copy) is type(clamped) and torch.equal(copy.solve_torch(w), expected)
    assert repr(clamped) == f"ClampedCosts({oracle!r}, floor=0.0)"


def test_terrain_training_clamps_the_device_oracle_with_the_same_class() -> None:
    """The training problem used its own copy of this wrapper for the device-native grid path."""
    from tests.support.training import problem_of

    prob = problem_of("terrain", 4, 2, 0, size=3, oracle="device", batch_size=2)
    assert isinstance(prob.train_oracle, ClampedCosts) and isinstance(prob.train_oracle, TorchOracle)
    assert prob.train_oracle.floor == 0.0 and prob.train_oracle.oracle is not None
