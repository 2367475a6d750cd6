"""``imle-solvers bench scaling``: more training processes, or more solver workers.

Two parts, each timed with repeats on this machine (medians and the spread over repeats):

* ``training`` — the knapsack protocol (``imle-solvers train --problem knapsack --methods imle-mumu``:
  1000 instances, batches of 32, S = 10) with its default oracle on the CPU (TorchKnapsack, a few
  milliseconds per step), and solver-bound with ``--oracle host`` (CP-SAT, one solve per row: ~0.5 s per
  step; 128 instances), each in one process, then in two under ``torchrun`` (``gloo``), launches
  alternating; seconds per epoch from each run's ``results.json`` (the first epoch of a launch, which
  warms up, left out);
* ``solver`` — one I-MLE training step (forward and backward: two solves of ``B·S = 64·4`` rows) of a
  solver-bound layer (a two-constraint knapsack ILP on CP-SAT, ~1 ms per solve) solved serially, by a
  process pool of 2 workers, and by a Dask cluster of a ``dask scheduler`` and two ``dask worker``
  programs on 127.0.0.1; round-robin, one step of each per round in a shuffled order.

Needs ``torchrun`` (torch), the ``dask`` extra for the Dask row and ``ortools`` for CP-SAT.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["dask_programs", "run"]


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}"


def _env() -> dict[str, str]:
    """The environment of the programs started here: one thread each, this package importable."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


PROTOCOLS: dict[str, tuple[str, ...]] = {
    "knapsack, TorchKnapsack": (),
    "knapsack, CP-SAT (--oracle host)": ("--oracle", "host", "--n-train", "128", "--n-test", "64"),
}
"""Training variants: name → options added to ``train --problem knapsack --methods imle-mumu``."""


def _train_once(processes: int, options: tuple[str, ...], epochs: int, folder: Path) -> list[float]:
    """Seconds of each epoch but the first, of one launch of the knapsack protocol."""
    args = ["-m", "imle_solvers", "train", "--problem", "knapsack", "--methods", "imle-mumu", *options]
    args += ["--epochs", str(epochs), "--quiet", "--out", str(folder)]
    launcher = [sys.executable] if processes == 1 else [sys.executable, "-m", "torch.distributed.run"]
    if processes > 1:
        launcher += ["--standalone", f"--nproc-per-node={processes}"]
    subprocess.run([*launcher, *args], check=True, env=_env(), capture_output=True, timeout=900)
    run = json.loads((folder / "results.json").read_text())["runs"][0]
    return [float(t) for t in run["epoch_times"][1:]]


def _training_rows(repeats: int, epochs: int) -> list[dict[str, Any]]:
    rows = []
    for name, options in PROTOCOLS.items():
        times: dict[int, list[float]] = {1: [], 2: []}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(repeats):
                for processes in (1, 2) if r % 2 == 0 else (2, 1):  # alternate: a load change hits both
                    folder = Path(tmp) / f"{processes}-{r}"
                    times[processes] += _train_once(processes, options, epochs, folder)
        one = statistics.median(times[1])
        for processes, values in times.items():
            median = statistics.median(values)
            rows.append(
                {
                    "suite": "training",
                    "protocol": name,
                    "processes": processes,
                    "s_per_epoch": median,
                    "spread": _spread(values),
                    "epochs": len(values),
                    "speed_up": one / median,
                }
            )
    return rows


@contextlib.contextmanager
def dask_programs(workers: int = 2, folder: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """A Dask cluster of separate programs on 127.0.0.1: ``dask scheduler`` and ``workers`` ``dask worker``
    programs (one thread each), each in its own process group; yields the scheduler's address and kills
    every program's group at the end."""
    dask = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    programs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        where = (
            Path(folder) if folder is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        info = where / "scheduler.json"

        def start(*args: str) -> None:
            programs.append(
                subprocess.Popen(
                    [dask, *args],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=_env(),
                    start_new_session=True,
                )
            )

        try:
            start(
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(info),
            )
            deadline = time.monotonic() + 60
            while not info.exists() or not info.read_text().strip():
                if programs[0].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("dask scheduler did not start")
                time.sleep(0.1)
            address = str(json.loads(info.read_text())["address"])
            for i in range(workers):
                start(
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--memory-limit",
                    "0",
                    "--name",
                    f"w{i}",
                )
            import distributed

            with distributed.Client(address, timeout=60) as client:
                client.wait_for_workers(workers, timeout=60)
            yield address
        finally:
            for program in reversed(programs):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(program.pid, signal.SIGKILL)
                program.wait(timeout=30)


def _round_robin(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each call, one call of each function per round in a shuffled order (one warm-up)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for name in order.permutation(list(fns)):
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def _solver_rows(rounds: int) -> list[dict[str, Any]]:
    from ..imle import IMLE
    from ..noise import Gumbel
    from ..pool import SolverPool
    from .pool import BATCH, SAMPLES, ilp_instance

    oracle = ilp_instance()
    weights = torch.from_numpy(np.random.default_rng(7).uniform(0, 10, size=(BATCH, oracle.n_vars)))
    upstream = 0.05 * torch.randn(BATCH, SAMPLES, oracle.n_vars, dtype=torch.float64)

    def step(pool: SolverPool | None) -> Callable[[], None]:
        gen = torch.Generator()
        layer = IMLE(oracle, Gumbel(), samples=SAMPLES, pool=pool, generator=gen)

        def once() -> None:
            gen.manual_seed(0)
            w = weights.clone().requires_grad_(True)
            (layer(w) * upstream).sum().backward()  # two solves of B·S rows

        return once

    labels = {
        "serial": "serial (in the training process)",
        "process": "2 local worker processes",
        "dask": "Dask: scheduler + 2 worker programs",
    }
    with (
        dask_programs(2) as address,
        SolverPool(2, "process", fallback=False) as local,
        SolverPool(backend="dask", dask_address=address, fallback=False) as cluster,
    ):
        times = _round_robin({"serial": step(None), "process": step(local), "dask": step(cluster)}, rounds)
    serial = statistics.median(times["serial"])
    return [
        {
            "suite": "solver",
            "variant": labels[name],
            "rows": 2 * BATCH * SAMPLES,
            "s_per_step": statistics.median(values),
            "spread": _spread(values),
            "rounds": len(values),
            "speed_up": serial / statistics.median(values),
        }
        for name, values in times.items()
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Both parts; ``quick``: 1 launch of 2 epochs per training variant and 2 solver rounds."""
    repeats, epochs, rounds = (1, 2, 2) if quick else (5, 4, 11)
    return [*_training_rows(repeats, epochs), *_solver_rows(rounds)]
