"""What a training run reports: a [`TrainRun`][imle_solvers.training.results.TrainRun] record, the summary
over seeds, and the learning-curve plot.

The output folder of ``imle-solvers train --out DIR`` (written by
[`ResultWriter`][imle_solvers.app.results.ResultWriter]) holds ``runs/<method>-seed<seed>.json`` per run as it
finishes, ``results.json`` (the resolved configuration, ``complete``, the summary and every run),
``results.md`` and ``curves.png``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..app.results import Metric, Summary
from ..errors import require

__all__ = ["SUMMARY", "TrainRun", "plot_curves", "summarize"]


@dataclasses.dataclass(frozen=True)
class TrainRun:
    """One finished (method, seed) run of [`train_model`][imle_solvers.training.train_model].

    Attributes
    ----------
    method
        The method's name.
    seed
        Seed of the data, the initial model, the batch order and the noise.
    regret
        Normalised test regret after the last epoch.
    accuracy
        Share of test instances decided optimally after the last epoch.
    curve
        Test regret before training and after every epoch (``epochs + 1`` numbers).
    accuracy_curve
        The same for the accuracy.
    epoch_time
        Mean seconds per training epoch (evaluation excluded).
    epoch_times
        Seconds of each epoch.
    train_loss
        Mean training loss of each epoch.
    lr
        The learning rate each epoch trained with.
    settings
        The method's hyper-parameters as used (S, the noise, the target, λ...).
    eval_times
        Seconds of each evaluation of the test set (before training, then after every epoch).
    step
        How the training steps ran: ``off`` (eager), ``graph``, ``model`` or ``model+graph`` (see
        [`TrainConfig`][imle_solvers.training.TrainConfig]'s ``compile``), or why a CUDA graph fell back to
        eager steps.
    problem
        The problem trained on (filled in by [`run`][imle_solvers.training.run], as the next three).
    device
        The device it ran on.
    model
        The model's name.
    oracle
        The oracle that solved the problem.
    """

    method: str
    seed: int
    regret: float
    accuracy: float
    curve: list[float]
    accuracy_curve: list[float]
    epoch_time: float
    epoch_times: list[float]
    train_loss: list[float]
    lr: list[float]
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    eval_times: list[float] = dataclasses.field(default_factory=list)
    step: str = "off"
    problem: str = ""
    device: str = ""
    model: str = ""
    oracle: str = ""

    @property
    def key(self) -> str:
        """The file name of the run: ``<method>-seed<seed>``."""
        return f"{self.method}-seed{self.seed}"

    @property
    def untrained_regret(self) -> float:
        """Test regret of the initial model."""
        return self.curve[0]


SUMMARY = Summary(
    by=("method",),
    metrics=(
        Metric("regret", "test regret", 4),
        Metric("accuracy", "optimal decisions", 3),
        Metric("untrained_regret", "untrained regret", 4, spread=False),
        Metric("epoch_time", "s/epoch", 3, spread=False),
    ),
)
"""Per method, over seeds: test regret and accuracy (mean, std), untrained regret and s/epoch (mean)."""


def summarize(results: Sequence[TrainRun]) -> list[dict[str, Any]]:
    """One row per method: ``regret_mean``, ``regret_std``, ``accuracy_mean``... (numbers)."""
    return SUMMARY.rows(results)


def plot_curves(results: Sequence[TrainRun], path: str | os.PathLike[str], title: str = "") -> None:
    """PNG of the mean test regret after each epoch, one line per method (± std band).

    Needs matplotlib (extra ``plot``): [`MissingExtraError`][imle_solvers.errors.MissingExtraError] otherwise.
    """
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for name in dict.fromkeys(r.method for r in results):
        curves = np.array([r.curve for r in results if r.method == name])
        mean, std = curves.mean(0), curves.std(0)
        epochs = np.arange(len(mean))
        ax.plot(epochs, mean, marker="o", ms=3, label=name)
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.15)
    ax.set_xlabel("epoch")
    ax.set_ylabel("normalised test regret")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=120, format="png")
