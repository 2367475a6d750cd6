"""CUDA checks of the device-native graph oracles (skipped without CUDA).

Self-contained (torch, numpy and pytest only), so that they also run with ``--noconftest`` on a
machine without the test extras.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts
from imle_solvers.adapters import TorchGridShortestPath, TorchKnapsack, TorchMatching, TorchSpanningTree

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_cuda_states_identical_to_cpu(backend: str) -> None:
    rng = np.random.default_rng(0)
    for h, w, nb in [(12, 12, 8), (12, 12, 4), (30, 30, 8), (7, 3, 8)]:
        oracle = TorchGridShortestPath(h, w, nb, backend=backend)  # type: ignore[arg-type]
        for x in (rng.integers(0, 3, (256, h * w)), rng.random((256, h * w))):
            for dtype in (torch.float32, torch.float64):
                t = torch.from_numpy(x).to(dtype)
                cpu = oracle.solve_torch(t)
                gpu = oracle.solve_torch(t.cuda())
                assert gpu.device.type == "cuda" and gpu.dtype == dtype
                assert torch.equal(gpu.cpu(), cpu)
    neg = torch.ones(2, 9, device="cuda")
    neg[1, 3] = -1.0
    z = TorchGridShortestPath(3, 3, backend=backend).solve_torch(neg)  # type: ignore[arg-type]
    assert torch.isnan(z[1]).all() and not torch.isnan(z[0]).any()


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_cuda_no_host_sync(backend: str) -> None:
    oracle = TorchGridShortestPath(30, 30, backend=backend)  # type: ignore[arg-type]
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
        graphs = TorchGridShortestPath(h, w, nb, backend="torch")
        launches = TorchGridShortestPath(h, w, nb, cuda_graphs=False, backend="torch")
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
    oracle = TorchGridShortestPath(30, 30, backend="torch")
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
    for backend in ("torch", "torch", "torch", "auto"):  # fresh oracles: one thread records, others wait
        oracle = TorchGridShortestPath(20, 20, backend=backend)  # type: ignore[arg-type]
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
            ClampedCosts(TorchGridShortestPath(12, 12, cuda_graphs=graphs, backend="torch")),
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


# ---- the fused Triton kernel (TorchGridShortestPath on CUDA by default) -------------------------------


def _grid_costs(kind: str, n: int, cells: int, rng: np.random.Generator) -> torch.Tensor:
    """Uniform random costs, tie-heavy integers in {0, 1, 2}, or Warcraft-like costs (a few terrain
    values, many ties); float64 on the CPU."""
    if kind == "random":
        return torch.from_numpy(rng.random((n, cells)))
    if kind == "ties":
        return torch.from_numpy(rng.integers(0, 3, (n, cells)).astype(np.float64))
    return torch.from_numpy(rng.choice([0.8, 1.2, 5.3, 7.7], (n, cells)))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and values, NaN where NaN."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


@pytest.mark.cuda
@cuda
@triton
@pytest.mark.timeout(300)
def test_cuda_kernel_identical_to_torch_path_and_cpu() -> None:
    """The kernel's states equal the torch path's on CUDA and the CPU's, bit for bit: 12-30 cells a
    side, 1 to 4,096 maps, random, tie-heavy and terrain-like costs, float32 and float64."""
    rng = np.random.default_rng(0)
    for size in (12, 18, 24, 30):
        for nb in (8, 4) if size in (12, 30) else (8,):
            kernel = TorchGridShortestPath(size, size, nb, backend="triton")  # type: ignore[arg-type]
            torch_path = TorchGridShortestPath(size, size, nb, backend="torch")  # type: ignore[arg-type]
            for n in (1, 70, 700, 4096):
                for kind in ("random", "ties", "terrain"):
                    x = _grid_costs(kind, n, size * size, rng)
                    for dtype in (torch.float32, torch.float64):
                        t = x.to(dtype)
                        z = kernel.solve_torch(t.cuda())
                        assert z.device.type == "cuda" and z.dtype == dtype
                        assert _same(z, torch_path.solve_torch(t.cuda())), (size, nb, n, kind, dtype)
                        if n <= 700 and (dtype == torch.float32 or n == 70):
                            assert _same(z.cpu(), torch_path.solve_torch(t)), (size, nb, n, kind, dtype)


@pytest.mark.cuda
@cuda
@triton
def test_cuda_kernel_dtypes_and_special_rows() -> None:
    """Half, bfloat16 and integer costs (solved in float32), leading dimensions; negative, NaN, +inf,
    overflowing and zero-cost rows: the states of the torch path on CUDA."""
    rng = np.random.default_rng(1)
    auto, torch_path = TorchGridShortestPath(12, 12), TorchGridShortestPath(12, 12, backend="torch")
    assert auto._kernel(torch.device("cuda")) is not None
    x = _grid_costs("terrain", 2 * 3 * 50, 144, rng).reshape(2, 3, 50, 144).cuda()
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int64):
        t = (x * 3).to(dtype)
        assert _same(auto.solve_torch(t), torch_path.solve_torch(t)), dtype
    for dtype, huge in ((torch.float32, 3e38), (torch.float64, 1e308)):
        w = _grid_costs("random", 9, 144, rng).to(dtype)
        w[1] = huge  # overflow: NaN
        w[2] *= 1e-40 if dtype == torch.float32 else 1e-310  # subnormal costs
        w[3, 40] = float("inf")  # avoided
        w[4, [1, 12, 13]] = float("inf")  # the source walled in: NaN
        w[5, 0] = -0.5  # negative: NaN
        w[6, 70] = float("nan")  # NaN
        w[7] = 0.0
        w[8] = huge / 1e3
        z = auto.solve_torch(w.cuda())
        assert _same(z, torch_path.solve_torch(w.cuda()))
        assert torch.isnan(z[[1, 4, 5, 6]]).all() and not torch.isnan(z[[0, 2, 3, 7, 8]]).any()
        assert _same(z[[0, 2, 3, 7, 8]].cpu(), torch_path.solve_torch(w[[0, 2, 3, 7, 8]]))
    for h, w_ in ((64, 64), (40, 50), (1, 30), (33, 2)):  # the largest the kernel takes, odd shapes
        for nb in (8, 4):
            kernel = TorchGridShortestPath(h, w_, nb, backend="triton")  # type: ignore[arg-type]
            x = _grid_costs("terrain", 64, h * w_, rng).float().cuda()
            ref = TorchGridShortestPath(h, w_, nb, backend="torch").solve_torch(x)  # type: ignore[arg-type]
            assert _same(kernel.solve_torch(x), ref), (h, w_, nb)
    big = TorchGridShortestPath(70, 70)  # 4,900 cells: the torch path
    assert big._kernel(torch.device("cuda")) is None
    w = _grid_costs("random", 8, 4900, rng).float()
    assert _same(big.solve_torch(w.cuda()).cpu(), big.solve_torch(w))


@pytest.mark.cuda
@cuda
@triton
def test_cuda_kernel_no_host_sync_and_graph_capture() -> None:
    """No host synchronisation (after the first launch compiled the kernel), and the launch can be
    captured in a CUDA graph: replays on new costs give the eager states."""
    oracle = TorchGridShortestPath(30, 30, backend="triton")
    w = torch.rand(700, 900, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    oracle.solve_torch(w)
    ClampedCosts(oracle).solve_torch(w - 0.1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        z = oracle.solve_torch(w)
        z2 = ClampedCosts(oracle).solve_torch(w - 0.1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert _same(z.cpu(), TorchGridShortestPath(30, 30).solve_torch(w.cpu())) and z2.shape == z.shape

    static = w.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        oracle.solve_torch(static)  # warm-up on a side stream, as torch.cuda.graph wants
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = oracle.solve_torch(static)
    for seed in (1, 2):
        static.copy_(torch.rand(700, 900, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))
        graph.replay()
        assert _same(out, TorchGridShortestPath(30, 30, backend="torch").solve_torch(static))


@pytest.mark.cuda
@cuda
@triton
def test_cuda_kernel_in_a_training_step() -> None:
    """An I-MLE step through the kernel gives the states and the gradient of the torch path (same
    noise), at 12×12 and 30×30 with several samples."""
    from imle_solvers import IMLE

    for size, n in ((12, 70), (30, 16)):
        results = []
        for backend in ("triton", "torch"):
            layer = IMLE(
                ClampedCosts(TorchGridShortestPath(size, size, backend=backend)),  # type: ignore[arg-type]
                samples=3,
                generator=torch.Generator("cuda").manual_seed(0),
            )
            theta = torch.rand(
                n, size * size, device="cuda", generator=torch.Generator("cuda").manual_seed(1)
            )
            theta.requires_grad_(True)
            z = layer(theta)
            ((z - 0.5) ** 2 * torch.arange(size * size, device="cuda")).mean().backward()
            assert theta.grad is not None
            results.append((z, theta.grad))
        assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
        assert results[0][1].abs().sum() > 0


# --------------------------------------------------------------------------------------------------
# TorchMatching and TorchSpanningTree
# --------------------------------------------------------------------------------------------------


def _matching_weights(rng: np.random.Generator, n: int, m: int) -> list[torch.Tensor]:
    """Floats (float32 and float64), integer ties, constant rows, and forbidden (−inf) pairs."""
    forbidden = rng.integers(0, 3, (n, m)).astype(np.float64)
    forbidden[rng.random((n, m)) < 0.2] = -np.inf
    return [
        torch.from_numpy(rng.normal(size=(n, m))).float(),
        torch.from_numpy(rng.normal(size=(n, m))),
        torch.from_numpy(rng.integers(-2, 3, (n, m)).astype(np.float64)),
        torch.zeros(n, m),
        torch.from_numpy(forbidden),
    ]


@pytest.mark.cuda
@cuda
def test_matching_cuda_states_identical_to_cpu() -> None:
    """The Triton kernel gives SciPy's states (the CPU path), ties included; bad rows come back NaN."""
    rng = np.random.default_rng(0)
    shapes = [
        (1, 1),
        (1, 7),
        (7, 1),
        (8, 8),
        (5, 9),
        (9, 5),
        (32, 32),
        (64, 48),
        (48, 64),
        (128, 128),
        (256, 256),
    ]
    for r, c in shapes:
        oracle = TorchMatching(r, c)
        for w in _matching_weights(rng, 64 if r * c <= 4096 else 8, r * c):
            cpu = torch.from_numpy(oracle._solve_host(w.double().numpy(), nan_rows=True)).to(w.dtype)
            gpu = oracle.solve_torch(w.cuda())
            assert gpu.device.type == "cuda" and gpu.dtype == w.dtype
            assert torch.equal(gpu.isnan().cpu(), cpu.isnan()), (r, c)
            assert torch.equal(gpu.nan_to_num().cpu(), cpu.nan_to_num()), (r, c)
    w = torch.zeros(4, 9, device="cuda")
    w[1, 3], w[2, 0], w[3, :3] = float("nan"), float("inf"), -float("inf")  # NaN, +inf, infeasible
    z = TorchMatching(3, 3).solve_torch(w)
    assert z[1:].isnan().all() and torch.equal(z[0].cpu(), torch.eye(3).flatten())


@pytest.mark.cuda
@cuda
def test_spanning_tree_cuda_states_identical_to_cpu() -> None:
    rng = np.random.default_rng(1)
    for n, m in [(1, 1), (2, 1), (8, 20), (30, 120), (64, 300), (256, 1024)]:
        edges = [(int(a), int(b)) for a, b in rng.integers(0, n, (m, 2))]  # loops, parallel edges, forests
        for kind in ("min", "max"):
            oracle = TorchSpanningTree(n, edges, kind=kind)
            for w in (
                torch.from_numpy(rng.normal(size=(128, m))).float(),
                torch.from_numpy(rng.normal(size=(128, m))),
                torch.from_numpy(rng.integers(-1, 2, (128, m)).astype(np.float64)),
                torch.full((128, m), float("inf")),
            ):
                cpu = oracle.solve_torch(w)
                gpu = oracle.solve_torch(w.cuda())
                assert gpu.device.type == "cuda" and gpu.dtype == w.dtype
                assert torch.equal(gpu.cpu(), cpu), (n, m, kind)
    nan = torch.zeros(3, 3, device="cuda")
    nan[1, 2] = float("nan")
    z = TorchSpanningTree(3, [(0, 1), (1, 2), (0, 2)]).solve_torch(nan)
    assert z[1].isnan().all() and z[0].tolist() == [1.0, 1.0, 0.0] and z[2].tolist() == [1.0, 1.0, 0.0]


@pytest.mark.cuda
@cuda
def test_matching_and_spanning_tree_cuda_no_host_sync() -> None:
    matching = [TorchMatching(16, 16), TorchMatching(40, 24)]
    tree = TorchSpanningTree(50, [(i, (i * 7 + 3) % 50) for i in range(50)] + [(i, i + 1) for i in range(49)])
    w_match = [torch.rand(64, o.n_vars, device="cuda") for o in matching]
    w_tree = [
        torch.rand(64, tree.n_vars, device="cuda", dtype=dtype) for dtype in (torch.float32, torch.float64)
    ]
    for oracle, w in zip(matching, w_match):  # warm-up: kernel compilation, index uploads
        oracle.solve_torch(w)
    for w in w_tree:
        tree.solve_torch(w)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        z_match = [oracle.solve_torch(w) for oracle, w in zip(matching, w_match)]
        z_tree = [tree.solve_torch(w) for w in w_tree]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for oracle, w, z in zip(matching, w_match, z_match):
        assert torch.equal(z.cpu(), oracle.solve_torch(w.cpu()))
    for w, z in zip(w_tree, z_tree):
        assert torch.equal(z.cpu(), tree.solve_torch(w.cpu()))


@pytest.mark.cuda
@cuda
def test_matching_and_spanning_tree_cuda_in_a_training_step() -> None:
    from imle_solvers import IMLE

    for oracle in (
        TorchMatching(6, 6),
        TorchSpanningTree(6, [(i, j) for i in range(6) for j in range(i + 1, 6)]),
    ):
        layer = IMLE(oracle, samples=4, generator=torch.Generator("cuda").manual_seed(0))
        theta = torch.randn(8, oracle.n_vars, device="cuda", requires_grad=True)
        z = layer(theta)
        assert z.shape == (8, 4, oracle.n_vars) and (z.sum(-1) == oracle.expected_nonzeros).all()
        ((z - 0.5) ** 2).mean().backward()
        assert theta.grad is not None and torch.isfinite(theta.grad).all() and theta.grad.abs().sum() > 0
