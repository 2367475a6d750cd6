"""`imle_solvers.testing.assert_oracle_contract` and `TorchOracle.from_function`: passes good oracles,
names the broken promise of bad ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imle_solvers import IMLE, MapOracle, TopK, TorchOracle
from imle_solvers.errors import InvalidWeightsError
from imle_solvers.testing import assert_oracle_contract
from tests.support.oracles import EnumOracle, k_subsets


def test_good_oracles_pass() -> None:
    assert_oracle_contract(EnumOracle(k_subsets(6, 2)), states=k_subsets(6, 2))
    assert_oracle_contract(EnumOracle(k_subsets(5, 3), sense="min"), states=k_subsets(5, 3))
    assert_oracle_contract(TopK(3, 7), states=k_subsets(7, 3))
    assert_oracle_contract(TopK(2, 5), brute_force=lambda w: float(np.sort(w)[-2:].sum()))


class _Mutating(EnumOracle):
    def solve(self, weights: np.ndarray) -> np.ndarray:
        z = super().solve(weights)
        weights -= 1.0  # modifies the caller's array
        return z


class _WrongSense(EnumOracle):
    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.states[int(np.argmin(self.states @ weights))].copy()  # minimises, claims "max"


class _Random(EnumOracle):
    rng = np.random.default_rng(0)

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.states[self.rng.integers(len(self.states))].copy()


class _NoValidation(MapOracle):
    n_vars = 4

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return (weights == weights.max()).astype(float)

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:  # skips validate()
        return np.stack([self.solve(w) for w in np.asarray(weights)])


@pytest.mark.parametrize(
    ("oracle", "message"),
    [
        (_Mutating(k_subsets(5, 2)), "modified its input"),
        (_WrongSense(k_subsets(5, 2)), "objective"),
        (_Random(k_subsets(5, 2)), "deterministic|objective|differs"),
        (_NoValidation(), "NaN"),
    ],
)
def test_broken_oracles_are_named(oracle: MapOracle, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_oracle_contract(
            oracle, states=k_subsets(oracle.n_vars, 2) if oracle.n_vars == 5 else None, picklable=False
        )


def test_unpicklable_oracle_is_reported() -> None:
    oracle = TorchOracle.from_function(lambda w: TopK(1, 3).solve_torch(w), n_vars=3)
    with pytest.raises(AssertionError, match="does not pickle"):
        assert_oracle_contract(oracle, states=np.eye(3))
    assert_oracle_contract(oracle, states=np.eye(3), picklable=False)


def _argmax(w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(w.argmax(-1), w.shape[-1]).to(w.dtype)


def test_from_function_is_a_working_torch_oracle() -> None:
    oracle = TorchOracle.from_function(_argmax, n_vars=4, expected_nonzeros=1)
    assert isinstance(oracle, TorchOracle) and oracle.sense == "max" and oracle.in_process_safe
    assert "from_function(_argmax" in repr(oracle)
    assert_oracle_contract(oracle, states=np.eye(4))
    w = torch.randn(3, 2, 4, requires_grad=True)
    z = IMLE(oracle, samples=2)(w)  # SumOfGamma(k=None) takes expected_nonzeros
    assert z.shape == (3, 2, 2, 4) and torch.all(z.sum(-1) == 1)
    z.sum().backward()
    assert w.grad is not None
    low = TorchOracle.from_function(lambda c: _argmax(-c), n_vars=4, sense="min", name="argmin")
    assert_oracle_contract(low, states=np.eye(4), picklable=False)


def test_from_function_argument_and_shape_errors() -> None:
    with pytest.raises(ValueError):
        TorchOracle.from_function(_argmax, n_vars=0)
    with pytest.raises(ValueError):
        TorchOracle.from_function(_argmax, n_vars=3, sense="up")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TorchOracle.from_function("not callable", n_vars=3)  # type: ignore[arg-type]
    bad = TorchOracle.from_function(lambda w: w[..., :2], n_vars=4, name="truncating")
    with pytest.raises(InvalidWeightsError, match="truncating must return"):
        bad.solve_torch(torch.zeros(2, 4))
