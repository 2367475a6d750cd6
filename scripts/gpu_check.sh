#!/usr/bin/env bash
# GPU check in one run of about 3 minutes on an H100 / H200: the Warcraft protocol's timing, every
# CUDA-marked test, and the device-native assignment and spanning-tree benchmark.
# Run from the repository root on a machine with CUDA, PyTorch (with Triton), NumPy, SciPy and pytest;
# OR-Tools and PuLP are not needed. Results go to $OUT (default /tmp/gpu-check), step by step, so a run
# cut short still leaves what finished.
#
#   bash scripts/gpu_check.sh            # the short run (about 3 minutes)
#   FULL=1 bash scripts/gpu_check.sh     # the whole 50-epoch protocol and the full benchmarks (longer)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
export IMLE_SOLVERS_CACHE=${IMLE_SOLVERS_CACHE:-/tmp/imle-cache}
OUT=${OUT:-/tmp/gpu-check}
FULL=${FULL:-0}
mkdir -p "$OUT"
step() { echo; echo "=== $* ($(date +%T))"; }

step device
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" \
    | tee -a "$OUT/device.txt"

step "Warcraft 30×30 protocol: resnet-stem, I-MLE mu-mu, the recorded step (--compile graph), bf16, channels-last"
if [ "$FULL" = 1 ]; then
    timeout 900 python3 scripts/gpu_warcraft.py --budget 840 --out "$OUT" 2>&1 | tee "$OUT/warcraft.txt"
else
    # 3,500 training maps: the seconds per map give the projected 10,000-map epoch and 50-epoch total
    timeout 75 python3 scripts/gpu_warcraft.py --budget 65 --reserve 0 --maps 3500 --test-maps 350 \
        --out "$OUT" 2>&1 | tee "$OUT/warcraft.txt"
fi

step "CUDA tests"
# the modules whose CUDA paths are newest first, so that a cut-short run still covers them
timeout 80 python3 -m pytest -q -p no:cacheprovider -m cuda -o addopts="" --timeout 40 \
    tests/adapters/test_torch_matching.py tests/adapters/test_torch_spanning_tree.py \
    tests/adapters/test_device_cuda.py tests/training/test_step.py tests/test_torch_func.py tests/test_targets.py \
    tests/benchmarks/test_bench_warcraft.py tests/test_noise.py tests/adapters/test_graphs_cuda.py \
    tests/pool/test_pool.py tests/test_estimator_semantics.py tests/test_imle.py \
    tests/training/test_training.py tests/experiments/test_vae.py tests/experiments/test_l2x.py tests/experiments/test_sort.py tests/training/test_distributed.py \
    2>&1 | tee "$OUT/cuda-tests.txt"

step "assignment and spanning tree on the GPU vs SciPy / NetworkX"
if [ "$FULL" = 1 ]; then
    timeout 150 python3 scripts/gpu_graphs.py 2>&1 | tee "$OUT/graphs.txt"
    timeout 120 python3 scripts/gpu_grid.py 2>&1 | tee "$OUT/grid.txt"
else
    timeout 45 python3 scripts/gpu_graphs.py --quick --batch 4096 --sizes 8 32 64 2>&1 | tee "$OUT/graphs.txt"
fi
step done
