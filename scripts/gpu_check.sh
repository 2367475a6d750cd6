#!/usr/bin/env bash
# GPU check: the CUDA-marked tests and the GPU benchmark rows, in one run (about 2 minutes on an H200).
# Run from the repository root on a machine with CUDA, PyTorch, NumPy, SciPy and pytest; OR-Tools and
# PuLP are not needed (their rows are skipped). Results go to $OUT (default /tmp/gpu-check).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
export IMLE_SOLVERS_CACHE=${IMLE_SOLVERS_CACHE:-/tmp/imle-cache}
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
step() { echo; echo "=== $* ($(date +%T))"; }

step device
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/device.txt"

step "CUDA tests"
# the pool's CUDA test module needs hypothesis; without it the conftest is skipped too
conftest="" extra="tests/pool/test_pool.py"
python3 -c "import hypothesis" 2>/dev/null || { conftest="--noconftest"; extra=""; }
timeout 240 python3 -m pytest -q -p no:cacheprovider $conftest -m cuda -o addopts="" \
    tests/adapters/test_graphs_cuda.py tests/test_estimator_semantics.py tests/test_imle.py tests/test_noise.py \
    tests/training/test_training.py tests/experiments/test_vae.py tests/experiments/test_l2x.py $extra \
    2>&1 | tee "$OUT/cuda-tests.txt"

step "noise and layer step, CPU vs CUDA"
timeout 150 python3 - <<'PY' 2>&1 | tee "$OUT/layer.txt"
import time, torch
from imle_solvers import IMLE, Gumbel, SumOfGamma, TopK
from imle_solvers.adapters import DAGShortestPath

def timed(fn, device, n=10):
    fn(); torch.cuda.synchronize() if device == "cuda" else None
    t = time.perf_counter()
    for _ in range(n):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / n

print("| device | shape | Gumbel ms | SoG table ms | SoG exact ms | SoG/Gumbel |")
for device in ("cpu", "cuda"):
    for shape in ((32, 10, 40), (256, 10, 1000)):
        g = torch.Generator(device).manual_seed(0)
        t = [timed(lambda n=n: n.sample(shape, device=device, generator=g), device)
             for n in (Gumbel(), SumOfGamma(k=5), SumOfGamma(k=5, exact=True))]
        print(f"| {device} | {shape} | {t[0]*1e3:.3f} | {t[1]*1e3:.3f} | {t[2]*1e3:.3f} | {t[1]/t[0]:.2f} |")
print()
print("| device | step (forward + backward), B = 256, S = 10 | ms |")
for device in ("cpu", "cuda"):
    for name, oracle in (("TopK(k=50, m=1000)", TopK(50, 1000)), ("DAGShortestPath.grid(30, 30)", DAGShortestPath.grid(30, 30))):
        for noise in (SumOfGamma(), Gumbel()):
            layer = IMLE(oracle, noise, samples=10, generator=torch.Generator(device).manual_seed(0))
            w = torch.rand(256, oracle.n_vars, device=device).requires_grad_(True)
            def step():
                w.grad = None
                (layer(w) ** 2).mean().backward()
            n = 3 if device == "cpu" else 20
            print(f"| {device} | {name}, {type(noise).__name__} | {timed(step, device, n)*1e3:.2f} |")
PY

step "bench graphs (device grid path and knapsack vs SciPy / CP-SAT)"
timeout 200 python3 -m imle_solvers.cli bench graphs 2>&1 | tee "$OUT/bench-graphs.txt"

step "grid oracle: recorded sweep chunks (CUDA graphs) vs one-by-one kernel launches"
timeout 120 python3 - <<'PY' 2>&1 | tee "$OUT/grid-graphs.txt"
import time, torch
from imle_solvers.adapters import TorchGridShortestPath

print("| grid | batch | launches ms | graphs ms | speed-up |")
for size, n in ((12, 256), (12, 4096), (30, 256), (30, 2560), (30, 4096)):
    w = torch.rand(n, size * size, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    times = []
    for graphs in (False, True):
        oracle = TorchGridShortestPath(size, size, cuda_graphs=graphs)
        z = oracle.solve_torch(w)  # warm-up (and recording)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            oracle.solve_torch(w)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / 20)
    print(f"| {size}×{size} | {n} | {times[0]*1e3:.2f} | {times[1]*1e3:.2f} | {times[0]/times[1]:.2f}× |")
PY

step "terrain epochs, CPU vs CUDA"
for args in "--size 12 --model terrain-cnn --n-train 700 --n-test 100" \
            "--size 30 --model resnet-stem --n-train 2000 --n-test 200"; do
    timeout 200 python3 -m imle_solvers.cli train --problem terrain $args --method imle-mumu --epochs 3 \
        --device cuda --threads 8 --quiet --out "/tmp/gpu-runs/terrain-$(echo $args | cut -d' ' -f2)" 2>&1 | tail -6
done | tee "$OUT/terrain-cuda.txt"
for args in "--size 12 --model terrain-cnn --n-train 700 --n-test 100" \
            "--size 30 --model resnet-stem --n-train 210 --n-test 70"; do
    timeout 150 python3 -m imle_solvers.cli train --problem terrain $args --method imle-mumu --epochs 1 \
        --device cpu --threads 16 --quiet 2>&1 | tail -5
done | tee "$OUT/terrain-cpu.txt"
step done
