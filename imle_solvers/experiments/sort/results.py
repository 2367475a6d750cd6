"""The sorting task's records: `SortRun` per (method, n, seed), `SortResult`, the accuracies and `SUMMARY`."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...app.results import Metric, Summary

__all__ = ["SUMMARY", "SortResult", "SortRun", "permutation_accuracy"]


def permutation_accuracy(predicted: torch.Tensor, true: torch.Tensor, n: int) -> tuple[float, float]:
    """``(exact, per_position)`` of permutation matrices ``[B, n · n]`` (rows: ranks, columns: items).

    *Exact*: the share of sequences whose whole permutation is right; *per position*: the share of
    ranks ``r`` (over all sequences) that hold the right item (Grover et al. 2019, sec. 6.1).
    """
    if predicted.shape != true.shape or predicted.shape[-1:] != (n * n,):
        raise ValueError(
            f"need two [B, {n * n}] permutation matrices, "
            f"got {tuple(predicted.shape)} and {tuple(true.shape)}"
        )
    right = (predicted.unflatten(-1, (n, n)) == true.unflatten(-1, (n, n))).all(
        dim=-1
    )  # rank r right   [B, n]
    return float(right.all(dim=-1).double().mean()), float(right.double().mean())


@dataclasses.dataclass(frozen=True)
class SortRun:
    """One finished (method, n, seed) run.

    Attributes
    ----------
    method
        The method's key.
    label
        Its label in tables.
    n
        Numbers per sequence.
    seed
        Seed of the split, the data, the initialisation and the noise.
    exact
        Share of test sequences sorted exactly (all ``n`` positions right), in [0, 1].
    per_position
        Share of test positions holding the right number, in [0, 1].
    train_loss
        Mean training loss over each tenth of the steps.
    seconds
        Training wall time.
    """

    method: str
    label: str
    n: int
    seed: int
    exact: float
    per_position: float
    train_loss: list[float]
    seconds: float

    @property
    def key(self) -> str:
        """The file name of the run: ``<method>-n<n>-seed<seed>``."""
        return f"{self.method}-n{self.n}-seed{self.seed}"

    @property
    def chance(self) -> float:
        """Per-position accuracy of a random permutation: ``1 / n`` (its exact accuracy is ``1 / n!``)."""
        return 1.0 / self.n


SUMMARY = Summary(
    by=("n", "method", "label"),
    metrics=(
        Metric("exact", "exact", 3),
        Metric("per_position", "per position", 3),
        Metric("chance", "chance per position", 3, spread=False),
        Metric("seconds", "s / run", 1, spread=False),
    ),
)
"""Per (n, method), over seeds: exact and per-position accuracy (mean ± std), their chance level ``1/n``,
seconds per run."""


@dataclasses.dataclass
class SortResult:
    """Outcome of [`run_sort`][imle_solvers.experiments.sort.run_sort].

    Attributes
    ----------
    config
        The settings as used (``--quick`` resolved).
    runs
        One [`SortRun`][imle_solvers.experiments.sort.SortRun] per (seed, n, method).
    """

    config: dict[str, Any]
    runs: list[SortRun]

    def summary(self) -> list[dict[str, Any]]:
        """``SUMMARY``'s rows: per (n, method), ``exact_mean``, ``exact_std``, ``per_position_mean`` …"""
        return SUMMARY.rows(self.runs)
