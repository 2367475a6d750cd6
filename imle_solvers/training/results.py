"""Where ``imle-solvers train`` keeps its results: checked before training, written run by run, atomically.

Layout of the output folder::

    runs/<method>-seed<seed>.json   one finished run each, written as soon as it finishes
    results.json                    configuration, summary table and every run (``"complete": false``
                                    when the command was interrupted)
    curves.png                      mean test regret per epoch, one line per method

Every file is written to a temporary file in the same folder and renamed into place (``os.replace``),
so an interruption leaves either the previous file or the new one, never a truncated one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import require

__all__ = ["ResultWriter", "atomic_write_json", "check_output_dir", "plot_curves", "summarize"]


def check_output_dir(path: str | os.PathLike[str]) -> Path:
    """Make sure results can be written to the folder ``path``: create it and write a probe file.

    Raises ``ValueError`` with the reason when ``path`` is a file, lies below a file, or cannot be
    created or written to. Called before any training, so that no result is computed to be lost.
    """
    folder = Path(path)
    for parent in (folder, *folder.parents):
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == folder else f"lies below the file {str(parent)!r}"
            raise ValueError(f"{str(folder)!r} {where}: --out must name a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"cannot write to {str(folder)!r}: {exc.strerror or exc}") from None
    return folder


def atomic_write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """Write ``payload`` as JSON to a temporary file beside ``path``, then rename it over ``path``."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt included: no temporary file is left behind
        Path(tmp).unlink(missing_ok=True)
        raise


class ResultWriter:
    """Collects the finished runs of one command; with a folder, writes each as it finishes.

    Parameters
    ----------
    folder
        The output folder, already checked by `check_output_dir`; ``None`` keeps results in memory only.
    config
        JSON-ready configuration recorded in every file.
    """

    def __init__(self, folder: Path | None, config: dict[str, Any]) -> None:
        self.folder, self.config = folder, config
        self.runs: list[dict[str, Any]] = []

    def add(self, run: dict[str, Any]) -> None:
        """Record a finished (method, seed) run; write ``runs/<method>-seed<seed>.json`` at once."""
        self.runs.append(run)
        if self.folder is not None:
            (self.folder / "runs").mkdir(exist_ok=True)
            atomic_write_json(self.run_path(run), {"config": self.config, "run": run})

    def run_path(self, run: dict[str, Any]) -> Path:
        """The file of one run."""
        assert self.folder is not None
        return self.folder / "runs" / f"{run['method']}-seed{run['seed']}.json"

    def finish(self, complete: bool, plot_title: str = "") -> list[Path]:
        """Write ``results.json`` (and, when ``complete``, ``curves.png``); returns the files written."""
        if self.folder is None:
            return []
        results = self.folder / "results.json"
        atomic_write_json(
            results,
            {"config": self.config, "complete": complete, "summary": summarize(self.runs), "runs": self.runs},
        )
        written = [results]
        if complete and self.runs:
            png = self.folder / "curves.png"
            plot_curves(self.runs, png, title=plot_title)
            written.append(png)
        return written


def summarize(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per method: mean ± std over seeds of regret, accuracy, s/epoch."""
    rows = []
    for name in dict.fromkeys(r["method"] for r in results):
        rs = [r for r in results if r["method"] == name]
        reg = np.array([r["regret"] for r in rs])
        acc = np.array([r["accuracy"] for r in rs])
        t = np.array([r["epoch_time"] for r in rs])
        rows.append(
            {
                "method": name,
                "seeds": len(rs),
                "test regret": f"{reg.mean():.4f} ± {reg.std():.4f}",
                "accuracy": f"{acc.mean():.3f} ± {acc.std():.3f}",
                "untrained regret": f"{np.mean([r['curve'][0] for r in rs]):.4f}",
                "s/epoch": f"{t.mean():.3f}",
            }
        )
    return rows


def plot_curves(results: Sequence[dict[str, Any]], path: str | os.PathLike[str], title: str = "") -> None:
    """PNG of the mean test regret after each epoch, one line per method (± std band), written atomically.

    Needs matplotlib (extra ``plot``): [`MissingExtraError`][imle_solvers.errors.MissingExtraError] otherwise.
    """
    matplotlib: Any = require("matplotlib", "plot")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(r["method"] for r in results):
        curves = np.array([r["curve"] for r in results if r["method"] == name])
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
    fig.tight_layout()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        fig.savefig(tmp, dpi=120, format="png")
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
