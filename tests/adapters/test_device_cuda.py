"""CUDA checks of DAGShortestPath, TorchKnapsack (dtypes) and TopK (skipped without CUDA).

Self-contained (torch, numpy and pytest only), so that they also run with ``--noconftest`` on a
machine without the test extras. Their logic runs on CPU tensors in the default suite (test_dag.py,
test_graphs_knapsack.py, tests/test_topk.py); here the same code runs on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts, DAGShortestPath, TopK, TorchKnapsack

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _no_sync(fn):  # type: ignore[no-untyped-def]
    """Run ``fn`` once to warm up, then again with any host synchronisation an error."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        return fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
@cuda
def test_dag_states_identical_to_cpu_in_every_dtype_without_host_sync() -> None:
    rng = np.random.default_rng(0)
    oracle = DAGShortestPath.grid(5, 5)
    wide = DAGShortestPath([(0, 1), (1, 2), (0, 2), (3, 0), (1, 4), (2, 5), (0, 5)], 0, 5)  # unusable arcs
    for dag in (oracle, wide):
        ties = rng.integers(-2, 3, (256, dag.n_vars))
        normal = rng.normal(size=(256, dag.n_vars))
        for x in (ties, normal):
            for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64):
                if dtype == torch.int64 and x is normal:
                    continue
                t = torch.from_numpy(x).to(dtype)
                cpu = dag.solve_torch(t)
                t_gpu = t.cuda()  # the copy to the device synchronises: outside the checked region
                gpu = _no_sync(lambda t_gpu=t_gpu, dag=dag: dag.solve_torch(t_gpu))
                assert gpu.device.type == "cuda" and gpu.dtype == dtype
                assert torch.equal(gpu.cpu(), cpu), (dag, dtype)
    w = torch.rand(64, oracle.n_vars, device="cuda") - 0.2
    clamped = _no_sync(lambda: ClampedCosts(oracle).solve_torch(w))
    assert torch.equal(clamped.cpu(), oracle.solve_torch(w.cpu().clamp_min(0.0)))


@pytest.mark.cuda
@cuda
def test_dag_half_precision_sums_in_float32_on_the_device() -> None:
    oracle = DAGShortestPath([("s", "a"), ("a", "t"), ("s", "b"), ("b", "t")], "s", "t")
    for dtype, big in ((torch.float16, 2048.0), (torch.bfloat16, 256.0)):
        costs = torch.tensor([[big, 1.0, big - 1.0, 1.5]] * 3, dtype=dtype, device="cuda")
        assert oracle.solve_torch(costs).tolist() == [[0.0, 0.0, 1.0, 1.0]] * 3


@pytest.mark.cuda
@cuda
def test_knapsack_half_precision_on_the_device_matches_the_cpu() -> None:
    rng = np.random.default_rng(1)
    weights = rng.integers(1, 6, (14, 2))
    for method in ("dp", "enumerate"):
        oracle = TorchKnapsack(weights, [9, 12], method=method)
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            v = torch.from_numpy(rng.normal(size=(128, 14))).to(dtype)
            cpu = oracle.solve_torch(v)
            v_gpu = v.cuda()
            gpu = _no_sync(lambda v_gpu=v_gpu, oracle=oracle: oracle.solve_torch(v_gpu))
            assert gpu.dtype == dtype and torch.equal(gpu.cpu(), cpu), (method, dtype)
        tie = TorchKnapsack([[2], [1], [1]], [2], method=method)
        for dtype, big in ((torch.float16, 2048.0), (torch.bfloat16, 256.0)):
            values = torch.tensor([[big, big - 1.0, 1.5]] * 2, dtype=dtype, device="cuda")
            assert tie.solve_torch(values).tolist() == [[0.0, 1.0, 1.0]] * 2


@pytest.mark.cuda
@cuda
def test_topk_on_the_device() -> None:
    oracle = TopK(3, 10)
    w = torch.randn(512, 10, device="cuda")
    z = _no_sync(lambda: oracle.solve_torch(w))
    assert z.device.type == "cuda" and (z.sum(-1) == 3).all()
    assert torch.equal(z.cpu(), oracle.solve_torch(w.cpu()))  # distinct scores: the same k-subsets
