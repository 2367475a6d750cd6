"""Reading a VAE result: its summary over seeds (`SUMMARY`, `result_table`), the figures of the test loss
per epoch and of the reconstructions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...app.results import Metric, Summary
from ...errors import require

if TYPE_CHECKING:
    from .run import VAEResult

__all__ = ["SUMMARY", "plot_curves", "plot_reconstructions", "result_table"]

SUMMARY = Summary(
    by=("method", "label"),
    metrics=(
        Metric("final_test_loss", "final test loss", 2),
        Metric("best_test_loss", "best test loss", 2),
        Metric("final_train_loss", "final train loss", 2),
        Metric("seconds", "s / run", 1, spread=False),
    ),
)
"""Per method, over seeds: final and best test loss, final training loss (mean ± std), seconds per run."""


def result_table(result: VAEResult) -> str:
    """Markdown table: final and best test loss, final train loss (mean ± std over seeds), seconds per run."""
    return SUMMARY.table(result.runs)


def _best_imle(result: VAEResult) -> list[str]:
    curves = result.curves()
    final = {k: sum(c[-1] for c in v) / len(v) for k, v in curves.items() if k.startswith("imle")}
    return [min(final, key=final.__getitem__)] if final else []


def plot_curves(result: VAEResult, path: str | Path) -> Path:
    """Test loss per epoch (mean ± std over seeds) of every method, in three panels as the paper's
    figure: I-MLE, STE, and the categorical Gumbel-softmax VAE next to the best I-MLE. Needs matplotlib."""
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    curves, labels = result.curves(), result.labels()
    panels = [
        ("(a) 10-subset VAE, I-MLE", [k for k in curves if k.startswith("imle")]),
        ("(b) 10-subset VAE, STE", [k for k in curves if k.startswith("ste")]),
        ("(c) best I-MLE vs 1-subset Gumbel-softmax", [*_best_imle(result), "gsm-categorical"]),
    ]
    fig = Figure(figsize=(13.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    colours: dict[str, str] = {}
    for ax, (title, keys) in zip(axes, panels):
        for key in [k for k in keys if k in curves]:
            t = torch.tensor(curves[key])[:, 1:]  # skip the untrained point   [seeds, epochs]
            mean, std = t.mean(dim=0), (t.std(dim=0) if t.shape[0] > 1 else torch.zeros(t.shape[1]))
            x = torch.arange(1, t.shape[1] + 1)
            colour = colours.setdefault(key, f"C{len(colours)}")
            ax.plot(x, mean, label=labels[key], color=colour)
            ax.fill_between(x, mean - std, mean + std, alpha=0.2, color=colour)
        ax.set(title=title, xlabel="epoch")
        if keys:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("test loss (BCE + KL) per image")
    all_final = [min(c[-1] for c in seeds) for seeds in curves.values()]
    axes[0].set_ylim(min(all_final) - 2.0, max(all_final) + 15.0)
    fig.savefig(path, dpi=90, format="png")
    return path


def plot_reconstructions(result: VAEResult, path: str | Path) -> Path:
    """The first test images (top row) and their noise-free reconstructions by each method."""
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    labels = result.labels()
    keys = ["original", *[k for k in result.reconstructions if k != "original"]]
    n = len(result.reconstructions["original"])
    fig = Figure(figsize=(1.0 * n + 1.8, 0.95 * len(keys)), layout="constrained")
    axes = fig.subplots(len(keys), n, squeeze=False)
    for i, key in enumerate(keys):
        for j in range(n):
            image = torch.tensor(result.reconstructions[key][j]).view(*result.shape)
            axes[i][j].imshow(image.numpy(), cmap="gray", vmin=0.0, vmax=1.0)
            axes[i][j].set_axis_off()
        label = "test image" if key == "original" else labels[key]
        axes[i][0].text(-0.5, 0.5, label, transform=axes[i][0].transAxes, ha="right", va="center", fontsize=7)
    fig.savefig(path, dpi=80, format="png")
    return path
