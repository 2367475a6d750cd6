"""CUDA checks of the device-native graph oracles (skipped without CUDA).

Self-contained (torch, numpy and pytest only), so that they also run with ``--noconftest`` on a
machine without the test extras.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts
from imle_solvers.adapters import TorchGridShortestPath, TorchKnapsack

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.cuda
@cuda
def test_cuda_states_identical_to_cpu() -> None:
    rng = np.random.default_rng(0)
    for h, w, nb in [(12, 12, 8), (12, 12, 4), (30, 30, 8), (7, 3, 8)]:
        oracle = TorchGridShortestPath(h, w, nb)
        for x in (rng.integers(0, 3, (256, h * w)), rng.random((256, h * w))):
            for dtype in (torch.float32, torch.float64):
                t = torch.from_numpy(x).to(dtype)
                cpu = oracle.solve_torch(t)
                gpu = oracle.solve_torch(t.cuda())
                assert gpu.device.type == "cuda" and gpu.dtype == dtype
                assert torch.equal(gpu.cpu(), cpu)
    neg = torch.ones(2, 9, device="cuda")
    neg[1, 3] = -1.0
    z = TorchGridShortestPath(3, 3).solve_torch(neg)
    assert torch.isnan(z[1]).all() and not torch.isnan(z[0]).any()


@pytest.mark.cuda
@cuda
def test_cuda_no_host_sync() -> None:
    oracle = TorchGridShortestPath(30, 30)
    w = torch.rand(64, 900, device="cuda")
    oracle.solve_torch(w)  # warm-up (allocator, kernels)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        z = oracle.solve_torch(w)
        z2 = ClampedCosts(oracle).solve_torch(w - 0.1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(z.cpu(), oracle.solve_torch(w.cpu()))
    assert z2.shape == z.shape


@pytest.mark.cuda
@cuda
def test_cuda_states_identical_to_cpu_and_no_sync() -> None:
    rng = np.random.default_rng(0)
    weights = rng.integers(300, 800, (32, 2))
    oracles = TorchKnapsack(weights, [2000, 2000]), TorchKnapsack(weights // 100, [20, 20], method="dp")
    for oracle in oracles:
        v = torch.from_numpy(rng.normal(size=(320, 32))).float()
        cpu = oracle.solve_torch(v)
        v_gpu = v.cuda()  # the copy to the device synchronises: outside the checked region
        oracle.solve_torch(v_gpu)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            gpu = oracle.solve_torch(v_gpu)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.equal(gpu.cpu(), cpu)
