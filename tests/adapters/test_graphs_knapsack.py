"""TorchKnapsack: against brute force and CP-SAT, both methods, ties, errors; data.knapsack uses it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import TorchOracle
from imle_solvers.adapters import TorchKnapsack
from imle_solvers.errors import InvalidWeightsError


def brute_force(weights: np.ndarray, caps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The feasible set of greatest value (summed in item order) with the smallest Σ z_i 2^i."""
    n = values.shape[0]
    best, best_z = -np.inf, None
    for code in range(2**n):
        z = np.array([(code >> i) & 1 for i in range(n)])
        if (weights.T @ z <= caps).all():
            total = values.dtype.type(0)
            for i in np.flatnonzero(z):
                total = total + values[i]
            if total > best:
                best, best_z = total, z
    assert best_z is not None
    return best_z.astype(float)


@given(n=st.integers(1, 10), dims=st.integers(1, 2), seed=st.integers(0, 2**31 - 1), integer=st.booleans())
def test_both_methods_match_brute_force(n: int, dims: int, seed: int, integer: bool) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.integers(0, 7, (n, dims))
    caps = rng.integers(0, 16, dims)
    values = rng.integers(-3, 6, (6, n)).astype(np.float64) if integer else rng.normal(size=(6, n))
    expected = np.array([brute_force(weights, caps, v) for v in values])
    for method in ("dp", "enumerate"):
        oracle = TorchKnapsack(weights, caps, method=method)
        np.testing.assert_array_equal(oracle.solve_torch(torch.from_numpy(values)).numpy(), expected)


def test_ties_and_non_positive_values_are_never_taken() -> None:
    for method in ("dp", "enumerate"):
        oracle = TorchKnapsack([[1], [1], [1]], 2, method=method)
        assert oracle.solve_torch(torch.tensor([1.0, 1.0, 1.0])).tolist() == [1.0, 1.0, 0.0]
        assert oracle.solve_torch(torch.tensor([0.0, -1.0, 2.0])).tolist() == [0.0, 0.0, 1.0]
        assert oracle.solve_torch(torch.tensor([-1.0, -1.0, -2.0])).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.timeout(30)  # CP-SAT solves
def test_matches_cpsat_on_32_items(dims: int) -> None:
    pytest.importorskip("ortools")
    from imle_solvers import ILP

    rng = np.random.default_rng(dims)
    weights = rng.integers(3, 8, (32, dims))
    caps = np.full(dims, 20)
    values = rng.integers(1, 20, (6, 32)).astype(float) + rng.random((6, 32)) * 1e-3  # unique optima
    ilp = ILP(32, A_ub=weights.T.astype(float), b_ub=caps.astype(float), sense="max", backend="cpsat")
    expected = ilp.solve_batch(values)
    for method in ("dp", "enumerate"):
        got = TorchKnapsack(weights, caps, method=method).solve_torch(torch.from_numpy(values)).numpy()
        np.testing.assert_allclose((got * values).sum(1), (expected * values).sum(1), rtol=1e-12)
        np.testing.assert_array_equal(got, expected)


def test_torch_kernels_match_numpy_kernels() -> None:
    """The accelerator code paths, run on the CPU, give the NumPy paths' states: CUDA runs the same."""
    rng = np.random.default_rng(7)
    weights = rng.integers(1, 6, (14, 2))
    values = torch.from_numpy(rng.normal(size=(50, 14))).float()
    dp = TorchKnapsack(weights, [9, 12], method="dp")
    enum = TorchKnapsack(weights, [9, 12], method="enumerate")
    np_dp, np_enum = dp.solve_torch(values), enum.solve_torch(values)
    assert torch.equal(dp._solve_dp_torch(values), np_dp)
    assert torch.equal(enum._solve_enumerate_torch(values), np_enum)
    assert torch.equal(np_dp, np_enum)


def test_auto_method_shapes_dtypes_and_pickling() -> None:
    small = TorchKnapsack(np.array([[3, 4], [5, 6], [2, 2]]), [10, 10])
    assert small.method in ("dp", "enumerate")
    wide = TorchKnapsack(np.full((10, 2), 300), [2000, 2000])  # 4M-state lattice: enumeration
    assert wide.method == "enumerate"
    deep = TorchKnapsack(np.ones((40, 1), dtype=int), [20])  # C(40, ≤20) sets: the DP
    assert deep.method == "dp"
    v = torch.rand(2, 3, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    z = deep.solve_torch(v)
    assert z.shape == (2, 3, 40) and z.dtype == torch.float32 and (z.sum(-1) == 20).all()
    assert torch.equal(pickle.loads(pickle.dumps(deep)).solve_torch(v), z)
    assert isinstance(deep, TorchOracle) and deep.sense == "max" and deep.in_process_safe
    np.testing.assert_array_equal(deep.solve(v[0, 0].double().numpy()), z[0, 0].numpy())
    assert TorchKnapsack([2, 3], 4).solve_torch(torch.tensor([1.0, 2.0])).tolist() == [0.0, 1.0]


def test_invalid_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="non-negative integers"):
        TorchKnapsack([[1.5]], [3])
    with pytest.raises(ValueError, match="non-negative integers"):
        TorchKnapsack([[1]], [-1])
    with pytest.raises(ValueError, match="shape"):
        TorchKnapsack([[1, 2]], [3])
    with pytest.raises(ValueError, match="method"):
        TorchKnapsack([[1]], [3], method="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use method='enumerate'"):
        TorchKnapsack(np.full((20, 2), 300), [5000, 5000], method="dp")
    from imle_solvers.adapters import knapsack as module

    monkeypatch.setattr(module, "_MAX_SETS", 1000)
    monkeypatch.setattr(module, "_MAX_LATTICE", 500)
    with pytest.raises(ValueError, match="too large"):
        TorchKnapsack(np.ones((30, 2), dtype=int), [40, 40])
    with pytest.raises(ValueError, match="use method='dp'"):
        TorchKnapsack(np.ones((30, 1), dtype=int), [20], method="enumerate")
    with pytest.raises(InvalidWeightsError):
        TorchKnapsack([[1]], [3]).solve_torch(torch.ones(2))


def test_data_knapsack_uses_the_device_oracle_with_the_same_optima() -> None:
    from imle_solvers.data import knapsack

    data = knapsack(16, num_items=10, dim=2, seed=3)
    assert isinstance(data.oracle, TorchKnapsack)
    w = np.array(data.info["item_weights"])  # [2, 12], hundredths
    z = data.solutions.double().numpy()
    assert np.all(z @ w.T <= 20.0 + 1e-9)
    v = data.costs.double().numpy()
    expected = np.array([brute_force(np.round(100 * w.T).astype(int), np.array([2000, 2000]), r) for r in v])
    np.testing.assert_allclose((z * v).sum(1), (expected * v).sum(1))


@pytest.mark.parametrize(("dtype", "big"), [(torch.float16, 2048.0), (torch.bfloat16, 256.0)])
@pytest.mark.parametrize("method", ["dp", "enumerate"])
def test_half_precision_values_are_summed_in_float32(dtype: torch.dtype, big: float, method: str) -> None:
    """Item 0 (``big``) or items 1 and 2 (``big − 1``, 1.5): in half precision both sets score ``big``, a
    tie the set {0} would win (smallest Σ z_i 2^i); summed in float32 the better pair wins."""
    oracle = TorchKnapsack([[2], [1], [1]], [2], method=method)  # {0} or a subset of {1, 2}
    values = torch.tensor([[big, big - 1.0, 1.5]] * 4, dtype=dtype)
    assert values[0, 1] + values[0, 2] == values[0, 0]  # the tie in half precision
    z = oracle.solve_torch(values)
    assert z.dtype == dtype and z.tolist() == [[0.0, 1.0, 1.0]] * 4
    kernel = oracle._solve_dp_torch if method == "dp" else oracle._solve_enumerate_torch
    assert kernel(values.float()).tolist() == z.float().tolist()  # the accelerator kernels alike


def test_the_layer_runs_under_cpu_autocast() -> None:
    """Under CPU autocast a linear layer hands bfloat16 values to the oracle (TorchKnapsack used to
    reject them, ending the training step)."""
    from imle_solvers import IMLE

    torch.manual_seed(0)
    model = torch.nn.Linear(5, 6)
    oracle = TorchKnapsack(np.random.default_rng(0).integers(1, 5, (6, 2)), [6, 6], expected_nonzeros=2.0)
    layer = IMLE(oracle, samples=3)
    x = torch.randn(8, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theta = model(x)
        z = layer(theta)
    assert theta.dtype == torch.bfloat16 and z.dtype == torch.bfloat16 and z.shape == (8, 3, 6)
    feasible = z.float() @ torch.from_numpy(oracle.weights).float() <= torch.tensor([6.0, 6.0])
    assert feasible.all()
    (z.float() * torch.randn(6)).sum().backward()
    assert model.weight.grad is not None and torch.isfinite(model.weight.grad).all()


def test_integer_and_complex_values() -> None:
    oracle = TorchKnapsack([[2], [3], [4]], [5])
    v = torch.tensor([[3, 4, 5], [5, 1, 1], [-1, 0, 9]])
    z = oracle.solve_torch(v)
    assert z.dtype == torch.int64 and z.tolist() == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    with pytest.raises(InvalidWeightsError, match="real"):
        oracle.solve_torch(v.to(torch.complex64))
    # integer values are summed in float64: 2**24 and 2**24 + 1 are one float32 number
    for method in ("dp", "enumerate"):
        one = TorchKnapsack([[1], [1]], [1], method=method)
        big = torch.tensor([[2**24, 2**24 + 1], [2**24 + 1, 2**24]], dtype=torch.int64)
        assert one.solve_torch(big).tolist() == [[0, 1], [1, 0]], method


@pytest.mark.parametrize("huge", [2**63, 2**64 + 1, np.uint64(2**63), 1e30])
def test_items_heavier_than_any_capacity_never_fit(huge: object) -> None:
    """An item weight of 2⁶³ or more used to wrap negative in int64 and count as fitting."""
    for method in ("dp", "enumerate"):
        oracle = TorchKnapsack([[huge], [1], [2]], [3], method=method)  # type: ignore[list-item]
        assert oracle.weights[:, 0].tolist() == [4, 1, 2]  # never fits: capacity + 1
        assert oracle.solve_torch(torch.tensor([100.0, 1.0, 1.0])).tolist() == [0.0, 1.0, 1.0]
    many = TorchKnapsack([[huge, 1], [1, 1]], [10, 2**70])  # type: ignore[list-item]
    assert many.capacities.tolist() == [10, 2]  # a capacity above the total weight never binds
    assert many.solve_torch(torch.tensor([5.0, 1.0])).tolist() == [0.0, 1.0]


def test_exact_integer_reading_of_weights_and_capacities() -> None:
    assert TorchKnapsack([[3.0], [2]], 4.0).weights[:, 0].tolist() == [3, 2]  # integral floats
    with pytest.raises(ValueError, match="2\\*\\*61"):
        TorchKnapsack([[2**62], [2**62]], [2**63])  # no reduction brings these below 2**61
    for top in (2**61, 2**61 + 1):  # "2**61 or more", as documented: the boundary itself too
        with pytest.raises(ValueError, match="must stay below 2\\*\\*61 once reduced"):
            TorchKnapsack([[top]], [top])
    assert TorchKnapsack([[2**61 - 1]], [2**61 - 1]).capacities.tolist() == [2**61 - 1]
    for bad in ([[np.nan]], [[np.inf]], [[True]], [["3"]], [[-(2**70)]]):
        with pytest.raises(ValueError, match="non-negative integers"):
            TorchKnapsack(bad, [3])
    with pytest.raises(ValueError, match="non-negative integers"):
        TorchKnapsack([[1]], [2.5])


@given(
    n=st.integers(1, 9),
    dims=st.integers(1, 2),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_accelerator_kernels_on_cpu_tensors_follow_brute_force_ties_included(
    n: int, dims: int, seed: int, dtype: torch.dtype
) -> None:
    """The torch kernels that run on accelerators, run here on CPU tensors: the same states as the NumPy
    kernels of the CPU path and as the tie rule by enumeration, with many ties (integer values)."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(0, 5, (n, dims))
    caps = rng.integers(0, 10, dims)
    values = torch.from_numpy(rng.integers(-2, 4, (8, n)).astype(np.float64)).to(dtype)
    expected = np.array([brute_force(weights, caps, v) for v in values.double().numpy()])
    dp = TorchKnapsack(weights, caps, method="dp")
    enum = TorchKnapsack(weights, caps, method="enumerate")
    for got in (
        dp._solve_dp_torch(values),
        enum._solve_enumerate_torch(values),
        dp.solve_torch(values),  # the NumPy kernels
        enum.solve_torch(values),
    ):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.double().numpy(), expected)


def test_from_decimal_scales_to_the_same_feasible_sets() -> None:
    rng = np.random.default_rng(5)
    weights = rng.choice(range(300, 800), size=(9, 2)) / 100  # PyEPO: 3.00 … 7.99
    oracle = TorchKnapsack.from_decimal(weights, [20.0, 12.345])
    np.testing.assert_array_equal(oracle.weights, np.rint(weights * 100))
    assert oracle.capacities.tolist() == [2000, 1234]  # ⌊100 C⌋; 20.00 is not 1999.99…
    values = rng.normal(size=(16, 9))
    states = np.array([[(code >> i) & 1 for i in range(9)] for code in range(2**9)], dtype=float)
    feasible = states[(states @ weights <= np.array([20.0, 12.345])).all(1)]  # the decimal model
    best = (feasible @ values.T).max(0)
    z = oracle.solve_torch(torch.from_numpy(values)).numpy()
    np.testing.assert_allclose((z * values).sum(1), best, rtol=1e-12)
    assert TorchKnapsack.from_decimal([[3], [4]], [5], decimals=0, method="dp").method == "dp"
    tight = TorchKnapsack.from_decimal([[0.29], [0.1]], [0.29])  # 0.29 × 100 = 28.999999999999996
    assert tight.capacities.tolist() == [29] and tight.solve_torch(torch.tensor([2.0, 1.0])).tolist() == [
        1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="multiples of 10\\*\\*-2"):
        TorchKnapsack.from_decimal([[3.001], [4.0]], [5.0])
    with pytest.raises(ValueError, match="decimals"):
        TorchKnapsack.from_decimal([[3.0]], [5.0], decimals=-1)
    with pytest.raises(ValueError, match="non-negative integers"):
        TorchKnapsack.from_decimal([[3.0]], [np.nan])
