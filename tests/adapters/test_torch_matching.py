"""TorchMatching against SciPy's linear_sum_assignment (states, ties included), brute force and the
blossom Matching; its errors, its threads, inside an I-MLE layer, and its Triton kernel.

The kernel runs on CUDA when there is one, else on CPU tensors under Triton's interpreter.
``TRITON_INTERPRET=1`` must be set before Triton is imported, so without CUDA the kernel cases skip in
an ordinary run and `test_kernel_cases_in_a_subprocess` runs them in a fresh interpreter with the
variable set; a run with ``TRITON_INTERPRET=1`` in the environment runs them directly.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from imle_solvers import IMLE, InfeasibleError, InvalidWeightsError, SumOfGamma, TorchMatching
from imle_solvers.adapters.graphs import matching as matching_module
from imle_solvers.testing import assert_oracle_contract

HAVE_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's CPU interpreter (set before import)
ON_CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[2]

needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed")
kernel_here = pytest.mark.skipif(
    not (HAVE_TRITON and (INTERPRETED or ON_CUDA)),
    reason="needs CUDA or Triton's interpreter (TRITON_INTERPRET=1 before import): run by "
    "test_kernel_cases_in_a_subprocess",
)


def scipy_state(w: np.ndarray, r: int, c: int) -> np.ndarray:
    """The 0/1 state SciPy's linear_sum_assignment(maximize=True) gives, row-major.  (R·C,)"""
    rows, cols = linear_sum_assignment(w.reshape(r, c), maximize=True)
    z = np.zeros((r, c))
    z[rows, cols] = 1.0
    return z.ravel()


def all_assignments(r: int, c: int) -> np.ndarray:
    """Every assignment of the smaller side into the larger one, as row-major 0/1 states."""
    out = []
    if r <= c:
        for cols in itertools.permutations(range(c), r):
            z = np.zeros((r, c))
            z[np.arange(r), cols] = 1.0
            out.append(z.ravel())
    else:
        for rows in itertools.permutations(range(r), c):
            z = np.zeros((r, c))
            z[rows, np.arange(c)] = 1.0
            out.append(z.ravel())
    return np.array(out)


def weights(m: int, rows: int = 3) -> st.SearchStrategy[np.ndarray]:
    """``(rows, m)`` integer-valued weights with many ties (negatives included), or floats."""
    ints = st.lists(st.integers(-2, 2).map(float), min_size=rows * m, max_size=rows * m)
    floats = st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=rows * m, max_size=rows * m)
    return st.one_of(ints, floats).map(lambda xs: np.array(xs, dtype=np.float64).reshape(rows, m))


@given(r=st.integers(1, 5), c=st.integers(1, 5), data=st.data())
def test_states_are_scipy_states_and_optimal(r: int, c: int, data: st.DataObject) -> None:
    oracle = TorchMatching(r, c)
    w = data.draw(weights(r * c))
    z = oracle.solve_torch(torch.from_numpy(w)).numpy()
    feasible = all_assignments(r, c)
    for row, state in zip(w, z):
        np.testing.assert_array_equal(state, scipy_state(row, r, c))  # ties included
        assert (np.abs(feasible - state).max(axis=1) == 0).any()  # an assignment
        assert state @ row == pytest.approx((feasible @ row).max(), abs=1e-9)  # of greatest weight
    assert oracle.expected_nonzeros == min(r, c) and oracle.sense == "max"


def test_float32_weights_give_the_states_of_their_float64_values() -> None:
    rng = np.random.default_rng(3)
    oracle = TorchMatching(6, 4)
    w = torch.from_numpy(rng.normal(size=(50, 24))).float()
    z = oracle.solve_torch(w)
    assert z.dtype == torch.float32
    expected = [scipy_state(row, 6, 4) for row in w.double().numpy()]
    np.testing.assert_array_equal(z.numpy(), expected)


def test_agrees_with_the_blossom_matching_on_complete_bipartite_graphs() -> None:
    import networkx as nx

    from imle_solvers import Matching

    rng = np.random.default_rng(0)
    for r, c in [(4, 4), (3, 5), (5, 2)]:
        graph = nx.complete_bipartite_graph(r, c)  # nodes 0…r−1, then r…r+c−1
        blossom, oracle = Matching(graph, maxcardinality=True), TorchMatching(r, c)
        position = {(u, v - r): k for k, (u, v) in enumerate(blossom.edges)}
        for _ in range(5):
            w = rng.random(r * c)  # distinct floats: one optimum
            w_graph = np.array([w[i * c + j] for i, j in sorted(position, key=position.get)])
            z_graph = blossom.solve(w_graph)
            z = oracle.solve_torch(torch.from_numpy(w)).numpy()
            np.testing.assert_array_equal(z, [z_graph[position[p]] for p in oracle.edges])


def test_ties_follow_scipy_constant_matrices_give_the_identity() -> None:
    for r, c in [(4, 4), (3, 5), (5, 3)]:
        z = TorchMatching(r, c).solve_torch(torch.zeros(r * c)).reshape(r, c)
        k = min(r, c)
        assert torch.equal(z[:k, :k], torch.eye(k)) and z.sum() == k
    w = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # two optima
    z = TorchMatching(3, 3).solve_torch(w.flatten())
    np.testing.assert_array_equal(z.numpy(), scipy_state(w.flatten().numpy(), 3, 3))
    assert torch.equal(z, TorchMatching(3, 3).solve_torch(w.flatten()))  # deterministic


def test_square_ties_are_scipys_choice_not_its_transpose() -> None:
    """Square matrices are solved as given (rows augmented in order), never transposed: among ties
    SciPy's assignment of ``w`` and the transpose of its assignment of ``wᵀ`` differ (the 2×2 below:
    the identity against the anti-diagonal), and the CPU path must give the former."""
    z = TorchMatching(2, 2).solve_torch(torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert z.tolist() == [1.0, 0.0, 0.0, 1.0]
    rng = np.random.default_rng(8)
    differs = 0
    for n in (2, 3, 4, 5):
        w = rng.integers(0, 2, (60, n * n)).astype(np.float64)  # 0/1: many optima
        z = TorchMatching(n, n).solve_torch(torch.from_numpy(w)).numpy()
        for row, state in zip(w, z):
            expected = scipy_state(row, n, n)
            np.testing.assert_array_equal(state, expected)
            transposed = scipy_state(row.reshape(n, n).T.ravel(), n, n).reshape(n, n).T.ravel()
            differs += not np.array_equal(transposed, expected)
    assert differs > 20  # the cases tell the two rules apart


def test_edges_order_and_leading_dimensions() -> None:
    oracle = TorchMatching(2, 3)
    assert oracle.edges == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    w = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(0))
    z = oracle.solve_torch(w)
    assert z.shape == w.shape and z.dtype == w.dtype
    assert torch.equal(z.reshape(-1, 6), oracle.solve_torch(w.reshape(-1, 6)))
    assert oracle.solve_torch(torch.zeros(0, 6)).shape == (0, 6)
    for dtype in (torch.bfloat16, torch.int64):  # no NumPy twin / not floating: converted by torch
        z_other = oracle.solve_torch(w[0, 0].round().to(dtype))
        assert z_other.dtype == dtype
        assert torch.equal(z_other.double(), oracle.solve_torch(w[0, 0].round().to(dtype).double()))
    assert torch.equal(
        oracle.solve_torch(torch.tensor([1.0, 0, 0, 0, 0, 1], dtype=torch.float16)),
        torch.tensor([1.0, 0, 0, 0, 0, 1], dtype=torch.float16),
    )


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1)])
def test_degenerate_sizes(shape: tuple[int, int]) -> None:
    r, c = shape
    oracle = TorchMatching(r, c)
    w = torch.tensor([[3.0, -1.0, 7.0, 7.0, 0.0][: r * c], [-5.0, -2.0, -9.0, -2.0, -3.0][: r * c]])
    z = oracle.solve_torch(w)
    np.testing.assert_array_equal(z.numpy(), [scipy_state(row, r, c) for row in w.numpy()])
    assert (z.sum(dim=1) == 1).all()  # one pair: the best one (ties to the first)
    if r * c == 5:
        assert z[0].argmax() == 2 and z[1].argmax() == 1


def test_minus_inf_forbids_a_pair_and_infeasible_rows_are_named() -> None:
    oracle = TorchMatching(3, 3)
    w = torch.zeros(4, 9)
    w[1, 0] = w[1, 4] = w[1, 8] = -float("inf")  # the diagonal is forbidden
    z = oracle.solve_torch(w)
    assert z[1].reshape(3, 3).diagonal().sum() == 0 and z[1].sum() == 3
    w[2, :3] = -float("inf")  # row 0 of instance 2 has no allowed column
    w[3, [0, 3, 6]] = -float("inf")  # column 0 of instance 3 has no allowed row
    with pytest.raises(InfeasibleError) as info:
        oracle.solve_torch(w)
    assert info.value.rows == (2, 3)


def test_nan_and_plus_inf_rows_are_named_before_any_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = TorchMatching(2, 2)
    solved: list[int] = []
    real = matching_module._assign
    monkeypatch.setattr(
        matching_module, "_assign", lambda wide, rows, *rest: (solved.extend(rows), real(wide, rows, *rest))
    )
    w = torch.zeros(5, 4)
    w[1, 2] = float("nan")
    w[3, 0] = float("inf")
    w[4, :2] = -float("inf")  # infeasible, but the invalid rows are reported first
    with pytest.raises(InvalidWeightsError, match="NaN or \\+inf") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (1, 3) and solved == []
    with pytest.raises(InvalidWeightsError, match="shape"):
        oracle.solve_torch(torch.zeros(3, 5))


def test_plus_inf_beside_small_weights_is_refused_and_huge_negative_rows_are_scaled() -> None:
    oracle = TorchMatching(3, 3)
    w = torch.zeros(3, 9, dtype=torch.float64)
    w[1, 4] = float("inf")  # every other entry of the batch is 0
    with pytest.raises(InvalidWeightsError, match="NaN or \\+inf") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (1,)
    wide = TorchMatching(6, 7)
    small = -0.99 * torch.rand(40, 42, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) - 1.0
    huge = small * 2.0**1023  # all negative, finite, up to −1.99·2^1023: sums overflow unless scaled
    assert torch.isfinite(huge).all()
    z = wide.solve_torch(huge)
    assert torch.equal(z, wide.solve_torch(small)) and not z.isnan().any()


def test_huge_weights_are_scaled_exactly() -> None:
    oracle = TorchMatching(3, 4)
    w = torch.randn(20, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w[5, 3] = -float("inf")
    big = w * 2.0**900  # sums of these overflow float64
    z = oracle.solve_torch(big)
    assert torch.equal(z, oracle.solve_torch(w)) and not z.isnan().any()


def exact_best(w: list[int], r: int, c: int) -> int:
    """The greatest total weight of an assignment, in exact integer arithmetic (brute force)."""
    if r <= c:
        return max(
            sum(w[i * c + j] for i, j in enumerate(cols)) for cols in itertools.permutations(range(c), r)
        )
    return max(sum(w[i * c + j] for j, i in enumerate(rows)) for rows in itertools.permutations(range(r), c))


def test_integer_weights_up_to_2_to_50_are_assigned_exactly() -> None:
    """At the bound the float64 arithmetic is exact: the states are optimal in integers (brute force)
    and SciPy's. Near-ties at ±2^50, where a sum rounded to float64 would pick a wrong assignment."""
    rng = np.random.default_rng(5)
    top = 2**50
    for trial in range(300):
        r, c = (int(x) for x in rng.integers(1, 5, 2))
        if trial % 2:
            w = rng.choice([-top, top, 0], (3, r * c)) - np.sign(
                rng.choice([-1, 1], (3, r * c))
            ) * rng.integers(0, 4, (3, r * c))
            w = np.clip(w, -top, top)
        else:
            w = rng.integers(-top, top, (3, r * c), endpoint=True)
        z = TorchMatching(r, c).solve_torch(torch.from_numpy(w))
        assert z.dtype == torch.int64
        for row, state in zip(w.tolist(), z.tolist()):
            assert sum(x * s for x, s in zip(row, state)) == exact_best(row, r, c), (r, c, row)
            np.testing.assert_array_equal(state, scipy_state(np.array(row, dtype=np.float64), r, c))


def test_integer_weights_beyond_2_to_50_are_refused_naming_the_rows() -> None:
    """2^62 and 2^62 + 1 are one float64: such rows are refused, not assigned by a rounded sum."""
    oracle = TorchMatching(2, 2)
    w = torch.zeros(5, 4, dtype=torch.int64)
    w[1] = torch.tensor([2**62, 2**62 + 1, 2**62 + 1, 2**62])  # the exact optimum is the anti-diagonal
    w[2, 3] = 2**50 + 1
    w[3, 0] = -(2**63)  # (|−2^63| does not exist in int64)
    w[4] = torch.tensor([2**50, -(2**50), -(2**50), 2**50])  # at the bound: accepted
    with pytest.raises(InvalidWeightsError, match="2\\^50") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (1, 2, 3)
    assert oracle.solve_torch(w[[0, 4]]).tolist() == [[1, 0, 0, 1], [1, 0, 0, 1]]
    for dtype in (torch.int32, torch.int16, torch.uint8, torch.bool):  # never beyond the bound
        assert oracle.solve_torch(torch.tensor([0, 1, 1, 0]).to(dtype)).tolist() == [0, 1, 1, 0]
    assert oracle.solve_torch(torch.tensor([0, 2**31 - 1, 2**31 - 1, 0], dtype=torch.int32)).tolist() == [
        0,
        1,
        1,
        0,
    ]


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3"])
def test_sizes_are_checked(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="n_rows"):
        TorchMatching(bad, 3)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError), match="n_cols"):
        TorchMatching(3, bad)  # type: ignore[arg-type]
    assert TorchMatching(np.int64(2), 3.0).n_vars == 6  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(3, 3), (2, 4), (4, 2), (1, 3)])
def test_oracle_contract(shape: tuple[int, int]) -> None:
    assert_oracle_contract(TorchMatching(*shape), states=all_assignments(*shape))


def test_threads_give_the_single_thread_states(monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = TorchMatching(16, 20)
    w = torch.randn(300, 320, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    w[17, :20] = -float("inf")  # an infeasible row, found by a worker thread
    w[17] = 0.0
    single = oracle.solve_torch(w)
    monkeypatch.setattr(matching_module, "_THREAD_ROWS", 8)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert torch.equal(oracle.solve_torch(w), single)
        pool = oracle._pool
        assert pool is not None and pool[1] == 3
        assert torch.equal(pickle.loads(pickle.dumps(oracle)).solve_torch(w), single)
        monkeypatch.setattr(matching_module.os, "getpid", lambda: -1)  # as in a forked child
        assert torch.equal(oracle.solve_torch(w), single) and oracle._pool[0] == -1  # a new pool
        first = oracle._executor(3)
        assert oracle._executor(3) is first  # one pool per process and thread count
        other = oracle._executor(2)
        assert other is not first and oracle._executor(2) is other
        with pytest.raises(RuntimeError, match="shutdown"):  # the replaced pool was shut down
            first.submit(int)
        bad = w.clone()
        bad[[40, 250], :20] = -float("inf")
        with pytest.raises(InfeasibleError) as info:
            oracle.solve_torch(bad)
        assert info.value.rows == (40, 250)
    finally:
        torch.set_num_threads(threads)


def test_in_an_imle_layer_with_the_default_noise() -> None:
    oracle = TorchMatching(4, 4)
    layer = IMLE(oracle, samples=3, generator=torch.Generator().manual_seed(0))
    assert isinstance(layer.noise, SumOfGamma) and layer.noise.k == 4  # from expected_nonzeros
    theta = torch.randn(5, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    z = layer(theta)  # [5, 3, 16]
    assert z.shape == (5, 3, 16)
    assert (z.reshape(5, 3, 4, 4).sum(-1) == 1).all() and (z.reshape(5, 3, 4, 4).sum(-2) == 1).all()
    target = torch.eye(4).flatten()
    loss = ((z - target) ** 2).sum()
    loss.backward()
    assert theta.grad is not None and torch.isfinite(theta.grad).all() and theta.grad.abs().sum() > 0
    z_map = oracle.solve_torch(theta.detach())  # eval(): the noise-free MAP in every sample
    assert torch.equal(layer.eval()(theta.detach()), z_map[:, None].expand(5, 3, 16))


def test_the_kernel_path_falls_back_to_scipy_without_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = TorchMatching(3, 3)
    assert not oracle._kernel_available(torch.device("cpu"))
    assert not TorchMatching(3, 2000)._kernel_available(torch.device("cuda"))
    monkeypatch.setattr(matching_module.importlib.util, "find_spec", lambda name: None)
    assert not oracle._kernel_available(torch.device("cuda"))
    w = torch.zeros(3, 9)
    w[1, 4] = float("nan")
    w[2, :3] = -float("inf")
    z = torch.from_numpy(oracle._solve_host(w.double().numpy(), nan_rows=True))  # the fallback's rows
    assert torch.equal(z[0], torch.eye(3).flatten().double()) and z[1:].isnan().all()


# --------------------------------------------------------------------------------------------------
# The Triton kernel: the CUDA path's logic, on CPU tensors through Triton's interpreter
# --------------------------------------------------------------------------------------------------


def _device() -> torch.device:
    """Where the kernel runs: CUDA, else the CPU through Triton's interpreter."""
    return torch.device("cuda" if ON_CUDA else "cpu")


def _kernel_cases(seed: int, count: int, max_n: int, rows: int = 2) -> list[tuple[int, int, torch.Tensor]]:
    """``count`` instances of ``rows`` rows, sides 2 … ``max_n``: integer ties, floats, 0/1 matrices
    (many equal distances: the tie rule), and 0/1 with forbidden pairs (some rows infeasible)."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(count):
        r, c = (int(x) for x in rng.integers(2, max_n + 1, 2))
        kind = k % 4
        if kind == 0:
            w = rng.integers(-2, 3, (rows, r * c)).astype(np.float64)
        elif kind == 1:
            w = rng.normal(size=(rows, r * c))
        else:
            w = rng.integers(0, 2, (rows, r * c)).astype(np.float64)
            if kind == 3:
                w[rng.random((rows, r * c)) < 0.25] = -np.inf
        cases.append((r, c, torch.from_numpy(w)))
    return cases


def _check_kernel(cases: list[tuple[int, int, torch.Tensor]], device: torch.device) -> None:
    for r, c, w in cases:
        oracle = TorchMatching(r, c)
        expected = torch.from_numpy(oracle._solve_host(w.numpy(), nan_rows=True))  # SciPy, NaN: infeasible
        got = oracle._solve_device(w.to(device)).cpu()
        assert torch.equal(got.isnan(), expected.isnan()), (r, c, w)
        assert torch.equal(got.nan_to_num(), expected.nan_to_num()), (r, c, w)


#: small matrices whose SciPy state depends on the order in which a search removes columns from its
#: scan list (a kernel that ignores it gets them wrong)
SCAN_ORDER_TIES = [
    (2, 4, [1, 1, 2, 0, 1, 0, 2, 1]),
    (3, 4, [0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0]),
    (4, 3, [1, 1, 1, 1, 1, 0, 2, 2, 1, 1, 0, 1]),
    (4, 4, [0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1]),
]
#: small matrices whose searches revisit rows, so that a wrong row or column dual changes the state
DUAL_UPDATES = [
    (3, 3, [-8, -4, -2, 0, -4, 7, 1, 9, 8]),
    (3, 3, [2, 5, -3, 6, 9, -8, 1, -2, -9]),
    (3, 3, [6, 7, 3, -9, 3, -5, 6, 8, -1]),
    (3, 4, [-4, 0, 6, 1, -1, -3, 6, 2, -1, 3, 9, 6]),
]


@kernel_here
@pytest.mark.timeout(120)
def test_kernel_gives_scipy_states() -> None:
    device = _device()
    fixed = [(r, c, torch.tensor([w], dtype=torch.float64)) for r, c, w in SCAN_ORDER_TIES + DUAL_UPDATES]
    _check_kernel(fixed + _kernel_cases(11, 4, 5), device)
    oracle = TorchMatching(2, 3)
    w = torch.zeros(4, 6, dtype=torch.float64)
    w[0, 1] = float("nan")  # bad rows come back NaN, the others are solved
    w[1, 2] = float("inf")
    w[2, :] = torch.arange(6.0, dtype=torch.float64) * 2.0**1021  # sums overflow unless scaled first
    z = oracle._solve_device(w.to(device)).cpu()
    assert z[:2].isnan().all() and not z[2:].isnan().any()
    assert torch.equal(z[2:], torch.from_numpy(oracle._solve_host(w[2:].numpy())))
    assert oracle._solve_device(torch.zeros(0, 6, device=device)).shape == (0, 6)
    # instances with no assignment avoiding the -inf pairs come back NaN, whether the first search
    # finds it or a later one; the feasible instances beside them are solved
    for r, c in [(3, 3), (2, 4), (4, 2)]:
        shaped = TorchMatching(r, c)
        w = torch.arange(5 * r * c, dtype=torch.float64).reshape(5, r, c) % 3
        small = w if r <= c else w.transpose(1, 2)  # a view: the smaller side's nodes first
        small[0, 0, :] = -float("inf")  # its node 0 can go nowhere
        small[2, :2, 1:] = -float("inf")  # its nodes 0 and 1 both only to partner 0 (Hall)
        w[3, 0, 0] = -float("inf")  # one forbidden pair: feasible
        flat = w.reshape(5, r * c)
        expected = torch.from_numpy(shaped._solve_host(flat.numpy(), nan_rows=True))
        assert expected[[0, 2]].isnan().all() and not expected[[1, 3, 4]].isnan().any()
        got = shaped._solve_device(flat.to(device)).cpu()
        assert got[[0, 2]].isnan().all(), (r, c, got)
        assert torch.equal(got[[1, 3, 4]], expected[[1, 3, 4]])


@kernel_here
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kernel_gives_scipy_states_many() -> None:
    device = _device()
    _check_kernel(_kernel_cases(1, 150, 10, rows=3), device)


def run_kernel_cases(marks: str, timeout: float) -> None:
    """This module's kernel cases selected by ``marks``, in a fresh interpreter with
    ``TRITON_INTERPRET=1`` (it must be set before Triton is imported): one runs, none skipped, it passes."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    run = subprocess.run(
        [*command, "-m", marks, "-k", "kernel_gives_scipy_states", str(Path(__file__).resolve())],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed is not None and int(passed.group(1)) == 1, run.stdout[-2000:]
    assert "skipped" not in run.stdout


@needs_triton
@pytest.mark.skipif(INTERPRETED or ON_CUDA, reason="the kernel cases run in this process")
@pytest.mark.timeout(180)
def test_kernel_cases_in_a_subprocess() -> None:
    run_kernel_cases("not slow and not cuda", timeout=170)


@needs_triton
@pytest.mark.slow
@pytest.mark.skipif(INTERPRETED or ON_CUDA, reason="the kernel cases run in this process")
@pytest.mark.timeout(900)
def test_slow_kernel_cases_in_a_subprocess() -> None:
    run_kernel_cases("slow and not cuda", timeout=890)
