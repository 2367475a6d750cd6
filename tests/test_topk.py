"""TopK on CPU tensors (the code path of every device) against brute force, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import InvalidWeightsError, TopK, TorchOracle


@given(
    m=st.integers(1, 9),
    data=st.data(),
    seed=st.integers(0, 2**31 - 1),
    ties=st.booleans(),
)
def test_k_largest_scores_against_brute_force(m: int, data: st.DataObject, seed: int, ties: bool) -> None:
    k = data.draw(st.integers(1, m))
    oracle = TopK(k, m)
    rng = np.random.default_rng(seed)
    w = rng.integers(-2, 3, size=(7, m)).astype(np.float64) if ties else rng.normal(size=(7, m))
    z = oracle.solve_torch(torch.from_numpy(w)).numpy()
    assert z.dtype == np.float64 and set(np.unique(z)) <= {0.0, 1.0} and (z.sum(1) == k).all()
    best = -np.sort(-w, axis=1)[:, :k].sum(1)  # the k largest scores, by sorting
    np.testing.assert_allclose((z * w).sum(1), best, rtol=1e-12, atol=1e-12)  # an optimal k-subset
    if not ties:  # distinct scores: exactly the k largest
        expected = np.zeros_like(w)
        np.put_along_axis(expected, np.argsort(-w, axis=1)[:, :k], 1.0, axis=1)
        np.testing.assert_array_equal(z, expected)
    again = oracle.solve_torch(torch.from_numpy(w)).numpy()
    np.testing.assert_array_equal(again, z)  # ties are broken the same way for the same weights
    alone = np.array([oracle.solve_torch(torch.from_numpy(row)).numpy() for row in w])
    np.testing.assert_array_equal(alone, z)  # and whatever else is in the batch
    np.testing.assert_array_equal(oracle.solve_batch(w), z)  # the NumPy entry point runs the same code


def test_shapes_dtypes_and_defaults() -> None:
    oracle = TopK(2, 5)
    assert isinstance(oracle, TorchOracle)
    assert oracle.sense == "max" and oracle.expected_nonzeros == 2.0 and oracle.in_process_safe
    w = torch.randn(3, 4, 5)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        z = oracle.solve_torch(w.to(dtype))
        assert z.shape == (3, 4, 5) and z.dtype == dtype and (z.sum(-1) == 2).all()
    assert oracle.solve(np.array([0.1, 5.0, -1.0, 4.0, 0.0])).tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert repr(oracle) == "TopK(k=2, n_vars=5)"


def test_the_last_dimension_is_checked() -> None:
    """A wrong last dimension used to give states of the wrong length (or an error from torch.topk)."""
    oracle = TopK(2, 5)
    for bad in (torch.randn(3, 6), torch.randn(5, 4), torch.randn(2), torch.tensor(1.0)):
        with pytest.raises(InvalidWeightsError, match=r"\(\.\.\., 5\)"):
            oracle.solve_torch(bad)
