"""``imle-solvers bench warcraft``: the paper's Warcraft protocol, timed epoch by epoch, and its projection.

The protocol of the I-MLE paper's Warcraft experiment (sec. 6 and its appendix, after Vlastelica et al.):
30 × 30 maps, 10,000 training and 1,000 test maps, the first block of a ResNet18 (``resnet-stem``),
I-MLE μ-μ (``imle-mumu``: SumOfGamma noise with κ the mean path length, one sample), Adam, batch 70,
learning rate 5·10⁻⁴ divided by 10 after epochs 30 and 40, 50 epochs. The maps are generated terrain maps
unless ``data`` names the published files. The run is
[`train_model`][imle_solvers.training.train_model] with the settings that ``imle-solvers train --problem
warcraft`` resolves (on CUDA by default: the step recorded as one CUDA graph, bfloat16 autocast,
channels-last, the maps made and the grid paths solved on the GPU).

Two tables: one row per epoch (training seconds, maps per second, evaluation seconds, the training loss,
the test accuracy and regret), and a summary: the machine and settings, the first epoch (which pays for
the warm-up, the recording and cuDNN's algorithm search), the steady seconds per epoch (the median of the
later epochs) and per 1,000 maps, and the projected time of the 50 epochs with their evaluations. Where
fewer maps than 10,000 were trained on (the CPU's default: 5 batches), the epoch is projected from the
seconds per map. ``full`` runs all 50 epochs on the 10,000 maps and reports the accuracy (the paper's
measure: the predicted path costs as much as the optimal one) beside the paper's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from typing import Any

import torch

from ..app.machine import resolve_device
from ..training.config import TrainConfig
from ..training.plan import TrainPlan
from ..training.problems import Problem

__all__ = [
    "PAPER_ACCURACY",
    "PROTOCOL_EPOCHS",
    "PROTOCOL_MAPS",
    "PROTOCOL_TEST_MAPS",
    "load_problem",
    "protocol_config",
    "protocol_rows",
    "run",
]

PROTOCOL_EPOCHS = 50
"""Epochs of the protocol."""

PROTOCOL_MAPS = 10_000
"""Training maps per epoch of the protocol."""

PROTOCOL_TEST_MAPS = 1000
"""Test maps evaluated after every epoch."""

PAPER_ACCURACY = {12: (97.2, 0.5), 18: (95.8, 0.7), 24: (94.3, 1.0), 30: (93.6, 0.4)}
"""Grid size → the I-MLE paper's test accuracy of I-MLE μ-μ in %, (mean, std over 5 runs) (Table 3)."""


def _defaults(quick: bool, full: bool, cpu: bool) -> tuple[int, int, int]:
    """(training maps, test maps, epochs) when not given: the protocol on a GPU or with ``full``; on the
    CPU 5 batches (350 maps) and 140 test maps; ``quick`` one batch of 70 and 70 test maps, one epoch."""
    if full:
        return PROTOCOL_MAPS, PROTOCOL_TEST_MAPS, PROTOCOL_EPOCHS
    if quick:
        return 70 if cpu else 700, 70 if cpu else 250, 1
    return (350, 140, 2) if cpu else (PROTOCOL_MAPS, PROTOCOL_TEST_MAPS, 2)


def run(
    quick: bool = False,
    *,
    full: bool = False,
    epochs: int | None = None,
    maps: int | None = None,
    data: str | None = None,
    size: int = 30,
    device: str = "auto",
    compile: str = "auto",
    amp: str = "auto",
    time_limit: float | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Train the protocol and return the rows of its two tables (``suite`` ``epochs`` and ``warcraft``).

    Parameters
    ----------
    quick
        One epoch on one batch (70 maps on the CPU, 700 on a GPU): a smoke run.
    full
        All 50 epochs on 10,000 maps (and 1,000 test maps), with the final accuracy.
    epochs
        Epochs to run (default 2, 1 with ``quick``, 50 with ``full``).
    maps
        Training maps per epoch (default: 10,000 on a GPU, 350 on the CPU; the epoch is projected to
        10,000).
    data
        The folder of the published Warcraft files (``None``: generated maps, kept in the user cache).
    size
        K, the grid size.
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
    compile
        As ``imle-solvers train --compile`` (``auto``: its rule).
    amp
        As ``imle-solvers train --amp`` (``auto``: its rule).
    time_limit
        Stop after the epoch during which the training time passed this many seconds; the rest is
        projected.
    seed
        Seed of the model, the batch order and the noise (and of generated maps).
    """
    config = protocol_config(
        quick,
        full=full,
        epochs=epochs,
        maps=maps,
        data=data,
        size=size,
        device=device,
        compile=compile,
        amp=amp,
        seed=seed,
    )
    config.preflight()
    plan = config.plan()
    problem, data_s = load_problem(plan)
    return protocol_rows(plan, problem, data_s=data_s, time_limit=time_limit, full=full)


def load_problem(plan: TrainPlan) -> tuple[Problem, float]:
    """The data, model and oracles of ``plan`` (a `protocol_config`'s), the data made on (or moved to)
    its device; → ``(problem, seconds it took)``. Generated maps are kept in the user cache when
    ``plan.data.cache``."""
    from ..training import make_problem

    start = time.perf_counter()
    problem = make_problem(plan, plan.seeds[0])
    problem = dataclasses.replace(
        problem, train=problem.train.to(plan.device), test=problem.test.to(plan.device)
    )
    _synchronize(plan.device)
    return problem, time.perf_counter() - start


def protocol_rows(
    plan: TrainPlan,
    problem: Problem,
    *,
    data_s: float = float("nan"),
    time_limit: float | None = None,
    full: bool = False,
) -> list[dict[str, Any]]:
    """Train ``problem`` with ``plan`` (I-MLE μ-μ; the plan's first seed) and return the rows of the two
    tables; ``problem`` may hold more maps than ``plan`` trains on (the first are used)."""
    from ..training import train_model

    n_train, n_test, seed = plan.data.n_train, plan.data.n_test, plan.seeds[0]
    train = problem.train if len(problem.train) == n_train else problem.train.split(n_train)[0]
    test = problem.test if len(problem.test) == n_test else problem.test.split(n_test)[0]
    start = time.perf_counter()
    result = train_model(
        plan, dataclasses.replace(problem, train=train, test=test), "imle-mumu", seed, time_limit=time_limit
    )
    wall_s = time.perf_counter() - start
    rows: list[dict[str, Any]] = []
    for i, (train_s, loss) in enumerate(zip(result.epoch_times, result.train_loss)):
        rows.append(
            {
                "suite": "epochs",
                "epoch": i + 1,
                "train_s": train_s,
                "maps_per_s": n_train / train_s,
                "eval_s": result.eval_times[i + 1],
                "train_loss": loss,
                "test_accuracy": result.accuracy_curve[i + 1],
                "test_regret": result.curve[i + 1],
            }
        )
    return rows + _summary(plan, result, data_s, wall_s, full)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def protocol_config(
    quick: bool = False,
    *,
    full: bool = False,
    epochs: int | None = None,
    maps: int | None = None,
    data: str | None = None,
    size: int = 30,
    device: str = "auto",
    compile: str = "auto",
    amp: str = "auto",
    seed: int = 0,
    model: str | None = None,
    channels_last: str = "auto",
    test_maps: int | None = None,
    cache: bool = True,
) -> TrainConfig:
    """The [`TrainConfig`][imle_solvers.training.TrainConfig] that `run` trains with the same arguments;
    its ``preflight`` checks the machine and the data. Short runs on the published files evaluate on at
    most the test maps the files hold. ``model``, ``channels_last``, ``test_maps`` and ``cache`` (not
    options of the command) default to the protocol's (generated maps kept in the user cache)."""
    from ..data.warcraft import inspect_warcraft
    from ..errors import DataError

    default_maps, default_test, default_epochs = _defaults(quick, full, resolve_device(device).type == "cpu")
    test_maps = default_test if test_maps is None else test_maps
    if data is not None and not full:  # a short run evaluates on the test maps there are
        with contextlib.suppress(DataError):  # the configuration's preflight reports it
            test_maps = min(test_maps, inspect_warcraft(data, size, "test").count)
    return TrainConfig(
        problem="warcraft",
        methods=("imle-mumu",),
        size=size,
        data=data,
        n_train=maps if maps is not None else default_maps,
        n_test=test_maps,
        epochs=epochs if epochs is not None else default_epochs,
        device=device,
        compile=compile,
        amp=amp,
        seeds=(seed,),
        model=model,
        channels_last=channels_last,
        cache=cache,
        show_progress=False,
    )


def _summary(plan: TrainPlan, result: Any, data_s: float, wall_s: float, full: bool) -> list[dict[str, Any]]:
    """The summary rows: machine, settings, measured and projected times, accuracy."""
    times, evals = result.epoch_times, result.eval_times[1:]
    n_train, ran, dev = plan.data.n_train, len(times), plan.device
    steady = statistics.median(times[1:]) if ran > 1 else times[0]  # s per epoch of n_train maps
    per_map = steady / n_train
    epoch_s = per_map * PROTOCOL_MAPS  # one epoch of the protocol
    eval_s = statistics.median(evals) * PROTOCOL_TEST_MAPS / plan.data.n_test
    overhead = max(0.0, times[0] - steady) if ran > 1 else 0.0  # warm-up, recording, cuDNN search
    projected = overhead + PROTOCOL_EPOCHS * epoch_s + (PROTOCOL_EPOCHS + 1) * eval_s
    if dev.type == "cuda":
        machine = f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}"
    else:
        machine = f"cpu, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    drops = " and ".join(str(e) for e in plan.schedule.lr_drops)
    schedule = f"lr {plan.schedule.lr:g}" + (f" ÷ 10 after epochs {drops}" if drops else " constant")
    measured = n_train == PROTOCOL_MAPS
    quantities: list[tuple[str, Any]] = [
        ("device", machine),
        ("protocol", f"{plan.title}, imle-mumu, batch {plan.schedule.batch_size}, " + schedule),
        ("settings", plan.settings_text),
        ("the steps ran", result.step),
        ("training oracle", result.oracle),
        ("data (s)", data_s),
        ("epochs run", f"{ran} of {PROTOCOL_EPOCHS}, {n_train:,} training maps each"),
        ("first epoch (s)", times[0]),
        ("s per epoch (median of the later epochs)" if ran > 1 else "s per epoch", steady),
        ("s per 1,000 maps", 1000 * per_map),
        ("s per epoch of 10,000 maps" + ("" if measured else " (projected from the s per map)"), epoch_s),
        ("evaluation of 1,000 test maps (s)", eval_s),
        (f"projected {PROTOCOL_EPOCHS} epochs with their evaluations (s)", projected),
        ("measured: training and evaluations of this run (s)", wall_s),
    ]
    if full and ran == PROTOCOL_EPOCHS and measured:
        paper = PAPER_ACCURACY.get(plan.data.size)
        quantities += [
            (f"test accuracy after {ran} epochs (%)", 100 * result.accuracy),
            ("test regret", result.regret),
        ]
        if paper is not None:
            quantities.append(("paper's accuracy, I-MLE μ-μ (%)", f"{paper[0]} ± {paper[1]}"))
    elif full:
        quantities.append(("test accuracy", f"not reported: {ran} of {PROTOCOL_EPOCHS} epochs ran"))
    return [{"suite": "warcraft", "quantity": name, "value": value} for name, value in quantities]
