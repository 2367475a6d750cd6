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


@pytest.mark.cuda
@cuda
def test_cuda_graph_replays_match_kernel_launches_and_cpu() -> None:
    """Recorded sweep chunks give the states of one-by-one launches and of the CPU, on reused buffers:
    a result stays valid after later solves of the same and of other batch shapes."""
    rng = np.random.default_rng(1)
    for h, w, nb in [(12, 12, 8), (30, 30, 8), (7, 3, 4), (9, 9, 8)]:
        graphs, launches = TorchGridShortestPath(h, w, nb), TorchGridShortestPath(h, w, nb, cuda_graphs=False)
        kept = []
        for n in (256, 64, 256, 5):
            for dtype in (torch.float32, torch.float64):
                x = torch.from_numpy(rng.random((n, h * w))).to(dtype)
                z = graphs.solve_torch(x.cuda())
                assert torch.equal(z, launches.solve_torch(x.cuda()))
                kept.append((z, graphs.solve_torch(x)))  # (device result, CPU states)
        for z, cpu in kept:  # none was overwritten by the solves that followed it
            assert torch.equal(z.cpu(), cpu)
        assert 1 <= len(graphs._graphs) <= 4 and len(launches._graphs) == 0


@pytest.mark.cuda
@cuda
def test_cuda_graph_recording_never_syncs_and_streams_keep_their_own() -> None:
    oracle = TorchGridShortestPath(30, 30)
    w = torch.rand(48, 900, device="cuda")
    expected = oracle.solve_torch(w.cpu())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        first = oracle.solve_torch(w)  # records the graph for this shape
        again = oracle.solve_torch(w)  # replays it
    finally:
        torch.cuda.set_sync_debug_mode("default")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = oracle.solve_torch(w)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(first.cpu(), expected) and torch.equal(again.cpu(), expected)
    assert torch.equal(on_side.cpu(), expected) and len(oracle._graphs) == 2


@pytest.mark.cuda
@cuda
def test_cuda_graph_buffers_shared_by_threads() -> None:
    """Two threads solving on one oracle take turns on the recorded buffers: no mixed-up results."""
    import threading

    xs = [torch.rand(128, 400, dtype=torch.float64) for _ in range(6)]
    expected = [TorchGridShortestPath(20, 20).solve_torch(x) for x in xs]
    for _ in range(4):  # a fresh oracle: one thread records while the others copy and wait
        oracle = TorchGridShortestPath(20, 20)
        results: dict[int, torch.Tensor] = {}
        errors: list[BaseException] = []

        def solve(i: int) -> None:
            try:
                for _ in range(5):
                    results[i] = oracle.solve_torch(xs[i].cuda()).cpu()  # noqa: B023
            except BaseException as exc:  # reported below, with the thread's error
                errors.append(exc)  # noqa: B023

        threads = [threading.Thread(target=solve, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all(torch.equal(results[i], expected[i]) for i in range(len(xs)))


@pytest.mark.cuda
@cuda
def test_cuda_graph_oracle_in_a_training_step() -> None:
    """An I-MLE step through the recorded sweeps gives the gradient of the kernel-launch path."""
    from imle_solvers import IMLE

    grads = []
    for graphs in (True, False):
        layer = IMLE(
            ClampedCosts(TorchGridShortestPath(12, 12, cuda_graphs=graphs)),
            samples=3,
            generator=torch.Generator("cuda").manual_seed(0),
        )
        theta = torch.rand(8, 144, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        theta.requires_grad_(True)
        z = layer(theta)
        ((z - 0.5) ** 2).mean().backward()
        assert theta.grad is not None
        grads.append(theta.grad)
    assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0
