"""The fused Triton grid kernel (``TorchGridShortestPath(backend="triton")``) against the torch code path.

The kernel's logic runs here on CPU tensors under Triton's interpreter. ``TRITON_INTERPRET=1`` must be
set before Triton is imported, so the interpreter cases (``interp``) skip in an ordinary run and
`test_interpreter_cases_in_a_subprocess` runs them in a fresh interpreter with the variable set; a run
with ``TRITON_INTERPRET=1`` in the environment runs them directly. The reference is the torch code path
(`_solve_torch_ops`, what CUDA ran before the kernel; bit-identical to the NumPy CPU path on valid rows).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from imle_solvers import IMLE, ClampedCosts
from imle_solvers.adapters import TorchGridShortestPath
from imle_solvers.adapters.graphs import torch_grid
from imle_solvers.errors import InvalidWeightsError, MissingExtraError

HAVE_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
ROOT = Path(__file__).resolve().parents[2]

needs_triton = pytest.mark.skipif(
    not HAVE_TRITON, reason="Triton is not installed (pip install 'imle-solvers[triton]')"
)
interp = pytest.mark.skipif(
    not (HAVE_TRITON and INTERPRETED),
    reason="needs Triton's interpreter (TRITON_INTERPRET=1 before import): run by "
    "test_interpreter_cases_in_a_subprocess",
)


def reference(oracle: TorchGridShortestPath, x: torch.Tensor) -> torch.Tensor:
    """The torch code path on CPU tensors, as ``solve_torch`` runs it on an accelerator (dtypes
    included): states of ``(N, H·W)`` costs, all-NaN rows for negative/NaN costs and no finite path."""
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    return oracle._solve_torch_ops(x.to(dtype)).to(x.dtype)


def kernel(h: int, w: int, nb: int = 8) -> TorchGridShortestPath:
    return TorchGridShortestPath(h, w, nb, backend="triton")  # type: ignore[arg-type]


def assert_same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal values, NaN where NaN, same dtype and shape."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


# ---- under the interpreter -------------------------------------------------------------------------


def check_against_the_torch_path(shapes: list[tuple[int, int]], rows: int, seed: int) -> None:
    """Random, tie-heavy (costs in {0, 1, 2}), all-equal and all-zero costs, float32 (and float64 for
    the random rows), both neighbourhoods: the states of the torch path and of the NumPy path."""
    rng = np.random.default_rng(seed)
    for h, w in shapes:
        for nb in (8, 4):
            oracle = kernel(h, w, nb)
            numpy_path = TorchGridShortestPath(h, w, nb, backend="torch")  # type: ignore[arg-type]
            random = rng.random((rows, h * w))
            ties = rng.integers(0, 3, (rows + 1, h * w)).astype(float)
            x = np.concatenate([random, ties, np.ones((1, h * w)), np.zeros((1, h * w))])
            for t in (torch.from_numpy(x).float(), torch.from_numpy(random)):
                z = oracle.solve_torch(t)
                assert_same(z, reference(oracle, t))
                assert_same(z, numpy_path.solve_torch(t))
                assert not torch.isnan(z).any() and (z.sum(1) >= max(h, w)).all()


@interp
@pytest.mark.timeout(60)
def test_interp_random_and_tie_heavy_grids_match_the_torch_path() -> None:
    check_against_the_torch_path([(3, 3), (4, 5), (1, 5), (5, 1)], rows=2, seed=0)


@interp
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_interp_larger_sweep() -> None:
    check_against_the_torch_path([(h, w) for h in (2, 5, 8) for w in (3, 7, 8)], rows=8, seed=1)


@interp
@pytest.mark.timeout(60)
def test_interp_ties_follow_the_documented_order() -> None:
    """Uniform costs: the fewest cells, first direction in N, S, W, E, NW, NE, SW, SE order (the
    torch path's rule), e.g. the diagonal of a 3×3 grid and the 4-neighbour staircase."""
    z = kernel(3, 3).solve_torch(torch.ones(2, 9)).reshape(2, 3, 3)
    assert z[0].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]] and torch.equal(z[0], z[1])
    z4 = kernel(3, 3, 4).solve_torch(torch.ones(1, 9))
    assert torch.equal(z4, reference(kernel(3, 3, 4), torch.ones(1, 9)))
    assert z4.reshape(3, 3).tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 1]]  # predecessor ties: N before W
    zeros = kernel(5, 4, 4).solve_torch(torch.zeros(3, 20))
    assert (zeros.sum(1) == 5 + 4 - 1).all()  # fewest moves among the zero-cost paths (least L)


@interp
@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's NumPy adds
def test_interp_large_tiny_infinite_negative_and_nan_costs() -> None:
    """Rows that overflow, subnormal and huge costs, +inf cells (avoided; a blocked or infinite target
    gives NaN), negative and NaN costs (NaN rows): each row as on the torch path, the others unaffected."""
    h, w = 4, 5
    rng = np.random.default_rng(7)
    for dtype, huge in ((torch.float32, 3e38), (torch.float64, 1e308)):
        x = torch.from_numpy(rng.random((10, h * w))).to(dtype)
        x[1] = huge  # the path sums overflow: NaN
        x[2] *= 1e-40 if dtype == torch.float32 else 1e-310  # subnormal costs, still a clean path
        x[3, 7] = float("inf")  # avoided
        x[4, [1, 5, 6]] = float("inf")  # the source is walled in: no finite path
        x[5, -1] = float("inf")  # the target itself
        x[6, 3] = -0.5  # negative
        x[7, 10] = float("nan")
        x[8] = huge / 64  # large, no overflow on the cheapest paths
        x[9, 0] = float("inf")  # the source itself
        z = kernel(h, w).solve_torch(x)
        assert_same(z, reference(kernel(h, w), x))
        assert torch.isnan(z[[1, 4, 5, 6, 7, 9]]).all()
        assert not torch.isnan(z[[0, 2, 3, 8]]).any() and z[3, 7] == 0


@interp
@pytest.mark.timeout(60)
def test_interp_half_bfloat16_integer_dtypes_and_shapes() -> None:
    """Half and bfloat16 costs are solved in float32 (as on the torch path) and come back in their
    dtype; integer costs too; leading dimensions, an empty batch and a single cell."""
    rng = np.random.default_rng(11)
    oracle = kernel(4, 5)
    x = torch.from_numpy(rng.integers(0, 40, (2, 2, 20)))  # int64: many ties
    for dtype in (torch.float16, torch.bfloat16, torch.int64, torch.int32):
        t = (x / 7).to(dtype) if dtype.is_floating_point else x.to(dtype)
        z = oracle.solve_torch(t)
        assert z.dtype == dtype and z.shape == (2, 2, 20)
        assert_same(z.reshape(4, 20), reference(oracle, t.reshape(4, 20)))
    assert oracle.solve_torch(torch.empty(0, 20)).shape == (0, 20)
    assert kernel(1, 1).solve_torch(torch.tensor([[-3.0]])).tolist() == [[1.0]]


@interp
@pytest.mark.timeout(60)
def test_interp_snake_needs_many_sweeps() -> None:
    """A walled maze whose only cheap path winds through every row: far more sweeps than H + W (the
    in-kernel loop runs to the fixed point, not to a fixed count)."""
    h, w = 9, 7
    cost = np.full((h, w), 1000.0)
    cost[0::2, :] = 1.0  # open rows
    for r in range(1, h, 2):  # one gap per wall, alternating sides
        cost[r, w - 1 if r % 4 == 1 else 0] = 1.0
    x = torch.from_numpy(np.stack([cost.ravel(), cost[::-1].ravel()]))
    for nb in (4, 8):
        z = kernel(h, w, nb).solve_torch(x)
        assert_same(z, reference(kernel(h, w, nb), x))
        assert (z * x).sum(1).max() < 1000 and z.sum() > 2 * (h + w)


MAZES = [  # cell costs: '#' 1000, '.' 1, '0' 0, '2' 2
    # cheapest paths that move up and left (cells reached from their south-east neighbour)
    [".###..#", "#.#.##.", ".###.#.", ".###.#.", "#.##.#.", "##..##."],
    [".######", ".####.#", ".###.#.", ".##.##.", "#.##.#.", "##..##."],
    # ties between predecessors: together these tell every order of the directions apart that can
    # change a path (found by search against the torch path with two directions swapped)
    [".0.#.0", "...0..", "00##.0", "#.#0#0", "..0#0.", "......"],
    ["..#.....", "#..#....", "......#.", ".##.##..", "...#..#.", ".....#..", "..##....", "...#.#.."],
    ["....#.#.", ".#..#...", "#.......", "..##....", "#.....#.", ".##.#..#", "##...###", "#......."],
]


@interp
@pytest.mark.timeout(60)
def test_interp_mazes_move_in_every_direction() -> None:
    """Mazes whose cheapest paths move up and left, and grids whose paths pass cells with tied
    predecessors: every neighbour and the full direction order N, S, W, E, NW, NE, SW, SE count."""
    cost = {"#": 1000.0, ".": 1.0, "0": 0.0, "2": 2.0}
    for nb in (8, 4):
        for rows in MAZES:
            h, w = len(rows), len(rows[0])
            x = torch.tensor([[cost[ch] for ch in "".join(rows)]])
            assert_same(kernel(h, w, nb).solve_torch(x), reference(kernel(h, w, nb), x))


@interp
@pytest.mark.timeout(60)
def test_interp_in_an_imle_training_step() -> None:
    """An I-MLE step (several samples, perturbed costs clamped on the device) gives the states and the
    gradient of the torch path."""
    results = []
    for backend in ("triton", "torch"):
        layer = IMLE(
            ClampedCosts(TorchGridShortestPath(4, 4, backend=backend)),  # type: ignore[arg-type]
            samples=2,
            generator=torch.Generator().manual_seed(0),
        )
        theta = torch.rand(3, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
        z = layer(theta)
        ((z - 0.5) ** 2 * torch.arange(16.0)).mean().backward()
        assert theta.grad is not None
        results.append((z, theta.grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert results[0][1].abs().sum() > 0


@interp
@pytest.mark.timeout(60)
def test_interp_kernel_is_what_runs() -> None:
    """``backend="triton"`` on CPU tensors really launches the kernel under the interpreter; ``auto``
    on CPU tensors does not."""
    from imle_solvers.adapters.graphs import _grid_triton

    assert _grid_triton.interpreted()
    calls = []
    solve = _grid_triton.solve_grid

    def spy(*args: object, **kw: object) -> torch.Tensor:
        calls.append(args[1:4])
        return solve(*args, **kw)  # type: ignore[arg-type]

    _grid_triton.solve_grid = spy  # type: ignore[assignment]
    try:
        kernel(3, 4, 4).solve_torch(torch.rand(2, 12))
        TorchGridShortestPath(3, 4).solve_torch(torch.rand(2, 12))  # auto on the CPU: NumPy
    finally:
        _grid_triton.solve_grid = solve
    assert calls == [(3, 4, False)]


# ---- the runner and the choice of code path (ordinary runs) ----------------------------------------


@needs_triton
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gpu_script_quick_mode_on_the_cpu() -> None:
    """``scripts/gpu_grid.py --device cpu --quick --tune`` (it sets ``TRITON_INTERPRET=1`` itself): its
    checks pass and it prints its tables."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_grid.py"), "--device", "cpu", "--quick", "--tune"],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "identical states: 12 comparisons" in run.stdout, run.stdout
    assert run.stdout.count("| 4×4 | 3 |") == 3 and "MISMATCH" not in run.stdout


SLOW_INTERP = {"test_interp_larger_sweep"}


def run_interpreter_cases(marks: str, expected: int, timeout: float) -> None:
    """The ``interp`` cases of this module selected by ``marks``, in a fresh interpreter with
    ``TRITON_INTERPRET=1``: ``expected`` of them run (none skipped) and pass."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    run = subprocess.run(
        [*command, "-m", marks, "-k", "interp_", str(Path(__file__).resolve())],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed is not None and int(passed.group(1)) == expected, run.stdout[-2000:]
    assert "skipped" not in run.stdout


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="the interpreter cases run in this process")
@pytest.mark.timeout(240)
def test_interpreter_cases_in_a_subprocess() -> None:
    fast = [name for name in globals() if name.startswith("test_interp_") and name not in SLOW_INTERP]
    run_interpreter_cases("not slow and not cuda", len(fast), timeout=230)


@needs_triton
@pytest.mark.slow
@pytest.mark.skipif(INTERPRETED, reason="the interpreter cases run in this process")
@pytest.mark.timeout(600)
def test_slow_interpreter_cases_in_a_subprocess() -> None:
    run_interpreter_cases("slow and not cuda", len(SLOW_INTERP), timeout=590)


def test_backend_option_is_checked() -> None:
    with pytest.raises(ValueError, match=r"backend must be one of .*got 'cuda'"):
        TorchGridShortestPath(3, 3, backend="cuda")  # type: ignore[arg-type]
    assert TorchGridShortestPath(3, 3).backend == "auto"
    big = TorchGridShortestPath(65, 64, backend="auto")
    assert big.backend == "auto" and big._kernel(torch.device("cuda")) is None  # the torch path
    if HAVE_TRITON:
        with pytest.raises(ValueError, match=r"at most 4096 cells, got 65×64"):
            TorchGridShortestPath(65, 64, backend="triton")
        assert TorchGridShortestPath(64, 64, backend="triton").n_vars == 4096


def test_triton_backend_without_triton_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_grid, "_kernel_module", lambda: None)
    with pytest.raises(MissingExtraError, match=r"imle-solvers\[triton\]"):
        TorchGridShortestPath(3, 3, backend="triton")
    oracle = TorchGridShortestPath(3, 3)  # auto: the torch path wherever Triton is missing
    assert oracle._kernel(torch.device("cuda")) is None
    assert torch.equal(oracle.solve_torch(torch.ones(1, 9)).reshape(3, 3), torch.eye(3))


@needs_triton
def test_auto_picks_the_kernel_on_cuda_only() -> None:
    """``auto``: the kernel for CUDA weights, NumPy on the CPU, the torch path on other devices and
    for ``backend="torch"`` (decided from the device alone: no CUDA needed here)."""
    module = torch_grid._kernel_module()
    assert module is not None
    auto, torch_path = TorchGridShortestPath(30, 30), TorchGridShortestPath(30, 30, backend="torch")
    assert auto._kernel(torch.device("cuda", 0)) is module
    assert TorchGridShortestPath(64, 64)._kernel(torch.device("cuda")) is module  # 4,096 cells
    assert TorchGridShortestPath(1, 4097)._kernel(torch.device("cuda")) is None
    for device in ("cpu", "meta", "mps"):
        assert auto._kernel(torch.device(device)) is None
    assert torch_path._kernel(torch.device("cuda")) is None
    triton = TorchGridShortestPath(30, 30, backend="triton")
    assert triton._kernel(torch.device("cuda")) is module
    assert "backend='triton'" in repr(triton) and "backend" not in repr(auto)
    import pickle

    assert pickle.loads(pickle.dumps(triton)).backend == "triton"


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="under the interpreter the kernel takes CPU tensors")
def test_triton_backend_on_cpu_tensors_needs_the_interpreter() -> None:
    oracle = TorchGridShortestPath(3, 3, backend="triton")
    with pytest.raises(InvalidWeightsError, match=r"TRITON_INTERPRET=1.*got weights on cpu"):
        oracle.solve_torch(torch.ones(2, 9))
    with pytest.raises(InvalidWeightsError, match="got weights on meta"):
        oracle.solve_torch(torch.ones(2, 9, device="meta"))
