"""The fused Triton grid kernel against the torch path of TorchGridShortestPath: identical states, then
milliseconds per batch (torch kernel launches, the torch path replayed as CUDA graphs, the Triton kernel).

    PYTHONPATH=. python scripts/gpu_grid.py                          # on a CUDA machine, < 60 s on an H100
    PYTHONPATH=. python scripts/gpu_grid.py --tune                   # also: warps per program, per size
    PYTHONPATH=. python scripts/gpu_grid.py --device cpu --quick     # CPU tensors, Triton's interpreter

Exit status 1 if any state differs. On the CPU the kernel runs in Triton's interpreter (the script sets
``TRITON_INTERPRET=1`` before Triton is imported) and the torch path is the NumPy path; the CUDA-graph
column is empty there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
parser.add_argument("--quick", action="store_true", help="small sizes and batches (for a CPU dry run)")
parser.add_argument("--tune", action="store_true", help="time the kernel at 1, 2, 4, 8 warps per program")
args = parser.parse_args()
if args.device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402

from imle_solvers.adapters import TorchGridShortestPath  # noqa: E402
from imle_solvers.adapters.graphs import _grid_triton  # noqa: E402

DEVICE = torch.device(args.device)
CUDA = DEVICE.type == "cuda"
if CUDA and not torch.cuda.is_available():
    sys.exit("no CUDA device: run with --device cpu --quick for a dry run on the CPU")
SIZES = (4,) if args.quick else (12, 30)
BATCHES = (3,) if args.quick else (70, 256, 2560, 4096)
CHECK_ROWS = 4 if args.quick else 512


def costs(kind: str, n: int, cells: int, seed: int) -> torch.Tensor:
    """Uniform random costs in [0, 1), or tie-heavy integer costs in {0, 1, 2}, float32 on DEVICE."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, cells)) if kind == "random" else rng.integers(0, 3, (n, cells)).astype(np.float64)
    return torch.from_numpy(x).float().to(DEVICE)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def ms_per_call(solve: Callable[[torch.Tensor], torch.Tensor], inputs: list[torch.Tensor]) -> float:
    """Median over 5 rounds of the mean time per call, cycling through ``inputs`` (after a warm-up)."""
    for x in inputs:
        solve(x)
    sync()
    calls = 1 if args.quick else 4 * len(inputs)
    rounds = []
    for _ in range(2 if args.quick else 5):
        t = time.perf_counter()
        for i in range(calls):
            solve(inputs[i % len(inputs)])
        sync()
        rounds.append((time.perf_counter() - t) / calls * 1e3)
    return statistics.median(rounds)


def main() -> int:
    device_name = torch.cuda.get_device_name(DEVICE) if CUDA else "CPU (Triton interpreter)"
    print(f"device: {device_name}; torch {torch.__version__}; triton {_grid_triton.triton.__version__}")
    t0 = time.perf_counter()

    # 1. identical states: kernel vs torch path on the device (vs NumPy on the CPU for float32)
    checks = mismatches = 0
    for size in SIZES:
        for nb in (8, 4):
            kernel = TorchGridShortestPath(size, size, nb, backend="triton")  # type: ignore[arg-type]
            torch_path = TorchGridShortestPath(size, size, nb, backend="torch")  # type: ignore[arg-type]
            for kind in ("random", "ties"):
                for dtype in (torch.float32, torch.float64, torch.bfloat16):
                    x = costs(kind, CHECK_ROWS, size * size, seed=size * 10 + nb).to(dtype)
                    x[0] = 0.0  # all-zero costs
                    x[1] = 1.0  # all-equal costs
                    z = kernel.solve_torch(x)
                    refs = [torch_path.solve_torch(x)]
                    if dtype == torch.float32 and CUDA:
                        refs.append(torch_path.solve_torch(x.cpu()).to(DEVICE))  # NumPy on the host
                    for ref in refs:
                        checks += 1
                        if not same(z, ref):
                            mismatches += 1
                            rows = (z.nan_to_num(-1) != ref.nan_to_num(-1)).any(1).nonzero().flatten()
                            where = f"{size}×{size} nb={nb} {kind} {dtype}"
                            print(f"MISMATCH {where}: rows {rows[:10].tolist()}")
    sync()
    verdict = "identical states" if not mismatches else f"{mismatches} MISMATCHES"
    print(f"{verdict}: {checks} comparisons ({time.perf_counter() - t0:.1f} s)")

    # 2. milliseconds per batch
    print()
    print(
        "| grid | batch | costs | torch launches ms | torch + CUDA graphs ms | Triton kernel ms | vs graphs |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in SIZES:
        launches = TorchGridShortestPath(size, size, backend="torch", cuda_graphs=False)
        graphs = TorchGridShortestPath(size, size, backend="torch", cuda_graphs=True)
        kernel = TorchGridShortestPath(size, size, backend="triton")
        for n in BATCHES:
            for kind in ("random", "ties"):
                inputs = [costs(kind, n, size * size, seed=s) for s in range(2 if args.quick else 3)]
                z = kernel.solve_torch(inputs[0])
                if not same(z, graphs.solve_torch(inputs[0])):
                    mismatches += 1
                    print(f"MISMATCH in the timing inputs, {size}×{size} B={n} {kind}")
                t_launch = ms_per_call(launches.solve_torch, inputs)
                t_graphs = ms_per_call(graphs.solve_torch, inputs) if CUDA else float("nan")
                t_kernel = ms_per_call(kernel.solve_torch, inputs)
                ratio = f"{t_graphs / t_kernel:.1f}×" if CUDA else "-"
                graphs_ms = f"{t_graphs:.3f}" if CUDA else "-"
                cells = f"{t_launch:.3f} | {graphs_ms} | {t_kernel:.3f} | {ratio}"
                print(f"| {size}×{size} | {n} | {kind} | {cells} |")

    # 3. warps per program (for `_grid_triton.default_warps`)
    if args.tune:
        print()
        print("| grid | batch | " + " | ".join(f"{w} warps ms" for w in (1, 2, 4, 8)) + " | default |")
        print("|---|---|---|---|---|---|---|")
        for size in SIZES:
            for n in sorted({BATCHES[0], BATCHES[-1]}):
                inputs = [costs("random", n, size * size, seed=s) for s in range(2 if args.quick else 3)]
                times = [
                    ms_per_call(
                        lambda x, w=w, s=size: _grid_triton.solve_grid(x, s, s, True, x.dtype, w), inputs
                    )
                    for w in (1, 2, 4, 8)
                ]
                cells = " | ".join(f"{t:.3f}" for t in times)
                print(f"| {size}×{size} | {n} | {cells} | {_grid_triton.default_warps(size, size)} |")

    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
