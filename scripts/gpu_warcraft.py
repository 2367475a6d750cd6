"""The Warcraft protocol on one GPU in one run of about 150 s: the 30 × 30 protocol (10,000 maps,
resnet-stem, I-MLE μ-μ, 50 epochs), the CUDA tests of the training step, 12 × 12 CPU vs GPU per 1,000
maps, and the 30 × 30 step with and without each acceleration.

    PYTHONPATH=. python scripts/gpu_warcraft.py                     # on an H100 / H200 (--budget 150)
    PYTHONPATH=. python scripts/gpu_warcraft.py --device cpu --tiny # a dry run of every step on the CPU

Steps, each printed as Markdown tables (all rows also to OUT/gpu_warcraft.json):

1. 30 × 30 data: 10,000 + 1,000 generated terrain maps, moved to the GPU once (timed apart).
2. The protocol with the fastest settings (on CUDA: the step recorded as one CUDA graph, bfloat16,
   channels-last, the grid paths on the GPU): 50 epochs of 10,000 maps, the test accuracy after each.
   It stops after the epoch that passes its share of the budget (all but ``--reserve`` seconds for the
   steps below); then the output says how many epochs ran and gives the projected 50-epoch total.
3. CUDA tests: ``pytest -m cuda tests/training/test_step.py tests/benchmarks/test_bench_warcraft.py``.
4. 12 × 12, ``terrain-cnn``, 1,000 training maps: seconds per epoch and per 1,000 maps on the CPU (all
   cores, eager float32) and on the GPU (eager float32, and the recorded step with the ``auto`` settings).
5. 30 × 30 settings on 2,100 maps (30 steps an epoch, 2 epochs): eager float32 (``--compile off --amp
   off --channels-last off``), eager bfloat16 + channels-last, and the recorded step (``--compile graph``):
   the rows that decide the ``auto`` defaults.

Steps 3-5 run while the budget lasts (each is skipped, and says so, when too little is left). Exit status
1 if the CUDA tests fail or a step raises (the later steps still run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
parser.add_argument("--tiny", action="store_true", help="tiny sizes (for a CPU dry run)")
parser.add_argument("--budget", type=float, default=150.0, help="seconds for the whole script (default 150)")
parser.add_argument(
    "--reserve", type=float, default=55.0, help="seconds kept from the protocol for steps 3-5 (default 55)"
)
parser.add_argument(
    "--out", default=os.environ.get("OUT", "/tmp/gpu-warcraft"), help="folder for the JSON rows"
)
parser.add_argument(
    "--maps",
    type=int,
    default=None,
    help="30 × 30 training maps (default: the protocol's 10,000; fewer are projected)",
)
parser.add_argument(
    "--test-maps", type=int, default=None, help="30 × 30 test maps (default: the protocol's 1,000)"
)
args = parser.parse_args()

START = time.perf_counter()
os.environ.setdefault("IMLE_SOLVERS_CACHE", tempfile.mkdtemp(prefix="imle-cache-"))  # fresh: nothing reused

import torch  # noqa: E402

from imle_solvers.app.report import format_table  # noqa: E402
from imle_solvers.benchmarks import warcraft as bench  # noqa: E402

CUDA = args.device == "cuda"
if CUDA and not torch.cuda.is_available():
    sys.exit("no CUDA device: run with --device cpu --tiny for a dry run on the CPU")
TINY = args.tiny
SMALL = {"size": 6 if TINY else 12, "maps": 70 if TINY else 1000, "test": 35 if TINY else 250, "epochs": 3}
BIG = {"size": 8 if TINY else 30, "maps": args.maps or (140 if TINY else bench.PROTOCOL_MAPS)}
BIG["test"] = args.test_maps or (35 if TINY else bench.PROTOCOL_TEST_MAPS)
TRIAL_MAPS, TRIAL_TEST = (70, 35) if TINY else (2100, 250)
ROWS: dict[str, list[dict[str, Any]]] = {}
FAILED: list[str] = []


def elapsed() -> float:
    return time.perf_counter() - START


def left() -> float:
    """Seconds left of the budget."""
    return args.budget - elapsed()


def if_time(name: str, needed: float, fn: Callable[[], None]) -> None:
    """Run a step if ``needed`` seconds are left, else say that it was skipped."""
    if left() < needed:
        print(f"skipped: {left():.0f} s left of the budget, {needed:.0f} s needed")
        ROWS.setdefault("skipped", []).append({"step": name, "seconds left": left()})
        return
    guarded(name, fn)


def step(title: str) -> None:
    print(f"\n=== {title} (at {elapsed():.1f} s of {args.budget:.0f} s)", flush=True)


def guarded(name: str, fn: Callable[[], None]) -> None:
    """Run one step; a failure is printed and recorded, and the script goes on."""
    try:
        fn()
    except Exception:  # a failed step must not cost the steps after it
        FAILED.append(name)
        traceback.print_exc()


def show(name: str, rows: list[dict[str, Any]]) -> None:
    ROWS[name] = rows
    tables: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        tables.setdefault(str(row.get("suite", "")), []).append(row)
    print("\n\n".join(format_table(t) for t in tables.values()), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "gpu_warcraft.json").write_text(json.dumps(ROWS, indent=1, default=str) + "\n")


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["quantity"]: r["value"] for r in rows if r.get("suite") == "warcraft"}


def steady_s(rows: list[dict[str, Any]]) -> float:
    """Median training seconds of the epochs after the first."""
    times = [r["train_s"] for r in rows if r.get("suite") == "epochs"]
    return statistics.median(times[1:]) if len(times) > 1 else times[0]


# --- 1. the CUDA tests --------------------------------------------------------------------------------


def cuda_tests() -> None:
    if not CUDA:
        print("skipped on the CPU")
        return
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-o", "addopts="]
    try:
        import hypothesis  # noqa: F401  (tests/conftest.py needs it)
    except ImportError:
        command.append("--noconftest")
    command += [
        "tests/training/test_step.py",
        "tests/benchmarks/test_bench_warcraft.py",
        "tests/training/test_data.py",
    ]
    done = subprocess.run(command, timeout=max(20.0, min(60.0, left() - 25.0)), check=False)
    if done.returncode != 0:
        FAILED.append("CUDA tests")


# --- 2. 12 × 12 with the small CNN, CPU vs GPU ------------------------------------------------------------


def small_grid() -> None:
    table = []
    runs = [("cpu", "off", "off", "off")]
    if CUDA:
        runs += [("cuda", "off", "off", "off"), ("cuda", "graph", "auto", "auto")]
    for device, compile, amp, channels_last in runs:
        config = bench.protocol_config(
            size=SMALL["size"],
            maps=SMALL["maps"],
            test_maps=SMALL["test"],
            epochs=SMALL["epochs"],
            device=device,
            compile=compile,
            amp=amp,
            channels_last=channels_last,
            model="terrain-cnn",
            cache=False,
        ).plan()
        threads = torch.get_num_threads()
        if device == "cpu":
            torch.set_num_threads(os.cpu_count() or 1)  # the whole host against the GPU
        try:
            problem, data_s = bench.load_problem(config)
            rows = bench.protocol_rows(config, problem, data_s=data_s)
        finally:
            torch.set_num_threads(threads)
        info = summary(rows)
        steady = steady_s(rows)
        table.append(
            {
                "suite": "12x12",
                "grid": f"{SMALL['size']}×{SMALL['size']}",
                "device": info["device"],
                "settings": info["settings"],
                "steps ran": info["the steps ran"],
                "first epoch s": info["first epoch (s)"],
                "s per epoch": steady,
                "s per 1,000 maps": 1000 * steady / SMALL["maps"],
            }
        )
    base = table[0]["s per 1,000 maps"]
    for row in table:
        row["vs CPU"] = base / row["s per 1,000 maps"]
    show("12x12", table)


# --- 3-5. the 30 × 30 protocol ------------------------------------------------------------------------------

PROTOCOL: dict[str, Any] = {}


def big_data() -> None:
    device = "cuda" if CUDA else "cpu"
    config = bench.protocol_config(
        size=BIG["size"], maps=BIG["maps"], test_maps=BIG["test"], device=device, cache=False
    ).plan()
    problem, data_s = bench.load_problem(config)
    PROTOCOL["problem"] = problem
    grid = f"{BIG['size']}×{BIG['size']}"
    print(f"{len(problem.train):,} + {len(problem.test):,} maps of {grid} on {device}: {data_s:.1f} s")
    ROWS["data"] = [{"suite": "data", "maps": len(problem.train) + len(problem.test), "seconds": data_s}]


def settings_trial() -> None:
    device = "cuda" if CUDA else "cpu"
    candidates = [("off", "off", "off"), ("off", "bf16", "on")]
    if CUDA:
        candidates.append(("graph", "auto", "auto"))
    table = []
    for compile, amp, channels_last in candidates:
        config = bench.protocol_config(
            size=BIG["size"],
            maps=TRIAL_MAPS,
            test_maps=TRIAL_TEST,
            epochs=2,
            device=device,
            compile=compile,
            amp=amp,
            channels_last=channels_last,
        ).plan()
        rows = bench.protocol_rows(config, PROTOCOL["problem"])
        info = summary(rows)
        evals = [r["eval_s"] for r in rows if r.get("suite") == "epochs"]
        table.append(
            {
                "suite": "settings",
                "settings": info["settings"],
                "steps ran": info["the steps ran"],
                "first epoch s": info["first epoch (s)"],
                "steady epoch s": steady_s(rows),
                "ms per step": 1000 * steady_s(rows) / -(-TRIAL_MAPS // 70),
                "s per epoch of 10,000 maps": steady_s(rows) * bench.PROTOCOL_MAPS / TRIAL_MAPS,
                "eval s per 1,000 test maps": min(evals) * bench.PROTOCOL_TEST_MAPS / TRIAL_TEST,
                "_ok": not info["the steps ran"].startswith("off (recording"),
            }
        )
    best = min((r for r in table if r["_ok"]), key=lambda r: r["steady epoch s"])
    show("settings", [{k: v for k, v in r.items() if not k.startswith("_")} for r in table])
    print(f"fastest steady epoch: {best['settings']}")


def protocol() -> None:
    device = "cuda" if CUDA else "cpu"
    config = bench.protocol_config(
        size=BIG["size"],
        maps=BIG["maps"],
        test_maps=BIG["test"],
        epochs=bench.PROTOCOL_EPOCHS,
        device=device,
        compile="graph" if CUDA else "auto",
    ).plan()
    limit = left() - args.reserve - 10.0  # 10 s: the evaluations and the last epoch's overshoot
    print(f"time limit for training: {limit:.1f} s ({args.reserve:.0f} s kept for steps 3-5)", flush=True)
    start = time.perf_counter()
    rows = bench.protocol_rows(config, PROTOCOL["problem"], time_limit=max(limit, 1e-3), full=not TINY)
    wall = time.perf_counter() - start
    show("protocol", rows)
    info = summary(rows)
    epochs = [r for r in rows if r.get("suite") == "epochs"]
    ran = len(epochs)
    train_s = sum(r["train_s"] for r in epochs)
    line = (
        f"RESULT {BIG['size']}×{BIG['size']} protocol on {info['device']} ({info['settings']}, steps: "
        f"{info['the steps ran']}): {ran} of {bench.PROTOCOL_EPOCHS} epochs, {train_s:.1f} s training, "
        f"{wall:.1f} s with the evaluations; test accuracy {100 * epochs[-1]['test_accuracy']:.1f} % "
        f"after epoch {ran}"
    )
    if ran < bench.PROTOCOL_EPOCHS:
        projected = info["projected 50 epochs with their evaluations (s)"]
        line += f"; STOPPED by the time budget: projected 50-epoch total {projected:.1f} s"
    else:
        line += f" (the paper: {bench.PAPER_ACCURACY.get(BIG['size'], ('?', '?'))[0]} %)"
    print("\n" + line, flush=True)


step("device")
print(torch.__version__, torch.cuda.get_device_name(0) if CUDA else f"cpu, {os.cpu_count()} cores")
if CUDA:
    from imle_solvers.adapters.graphs import torch_grid

    fused = torch_grid._kernel_module() is not None
    print(
        "grid paths on the GPU:",
        "the fused Triton kernel" if fused else "torch sweeps (Triton not installed)",
    )
step("1. 30 × 30 data")
guarded("data", big_data)
if "problem" in PROTOCOL:
    step("2. the 30 × 30 protocol, 50 epochs, the recorded step on CUDA")
    guarded("protocol", protocol)
step("3. CUDA tests of the training step and the benchmark")
if_time("CUDA tests", 30.0, cuda_tests)
step("4. 12 × 12, terrain-cnn: CPU vs GPU per 1,000 maps")
if_time("12x12", 12.0, small_grid)
if "problem" in PROTOCOL:
    step("5. 30 × 30 settings on 2,100 maps")
    if_time("settings", 10.0, settings_trial)
step(f"done; failed: {', '.join(FAILED) or 'nothing'}")
sys.exit(1 if FAILED else 0)
