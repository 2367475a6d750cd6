"""``imle-solvers train``: predict-then-optimize training and head-to-head comparison of methods.

A model predicts the weights of an optimisation problem from features and is trained, by one of
the `METHODS`, on the quality of the decisions it leads to.
Reported: the normalised test regret (PyEPO's metric) after every epoch, the share of test instances
decided optimally, and the seconds per training epoch.

Example::

    imle-solvers train --problem shortest-path --method imle-mumu spo+ two-stage --deg 4 --seeds 0 1 2 \\
        --out runs/sp
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..errors import require
from ..noise import Gumbel, SumOfGamma
from ..report import format_table
from .loop import evaluate, train_model
from .methods import METHODS, build_method
from .problems import PROBLEMS, make_problem

__all__ = ["METHODS", "PROBLEMS", "build_method", "evaluate", "main", "run", "summarize", "train_model"]


def run(
    problem: str,
    methods: Sequence[str],
    seeds: Sequence[int] = (0,),
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    n_train: int = 1000,
    n_test: int = 1000,
    deg: int = 1,
    noise_width: float = 0.5,
    samples: int | None = None,
    workers: int = 0,
    show_progress: bool = True,
    size: int = 12,
    tau: float = 1.0,
    lam: float = 10.0,
    noise: str = "sog",
    bb_loss: str | None = None,
) -> list[dict[str, Any]]:
    """Train every method on every seed; one result dict per (method, seed).

    Each seed generates its own data (data seed = ``seed``) and model initialisation
    (``torch.manual_seed(seed)``); all methods of a seed start from the same initial model.
    ``noise`` (``"sog"``: SumOfGamma(κ = path length), or ``"gumbel"``) and its temperature ``tau`` are
    the I-MLE methods' perturbation, ``lam`` the PID target's λ.
    """
    results = []
    pool = None
    if workers > 0:
        from ..pool import SolverPool

        pool = SolverPool(workers)
    try:
        for seed in seeds:
            prob = make_problem(problem, n_train, n_test, seed, deg=deg, noise_width=noise_width, size=size)
            d = prob.defaults
            options: dict[str, Any] = {"samples": samples or d["samples"], "lam": lam,
                                       "noise": SumOfGamma(tau=tau) if noise == "sog" else Gumbel(tau)}
            options.update({k: d[k] for k in ("bb_loss", "dpo_samples") if k in d})
            if bb_loss is not None:
                options["bb_loss"] = bb_loss
            for name in methods:
                torch.manual_seed(seed)
                model = prob.model()
                out = train_model(
                    model, name, prob.train, prob.test,
                    epochs=epochs or d["epochs"], batch_size=batch_size or d["batch_size"],
                    lr=lr or d["lr"], seed=seed, pool=pool, train_oracle=prob.train_oracle,
                    method_options=options, show_progress=show_progress,
                )
                out.update(problem=problem, deg=deg)
                results.append(out)
                if show_progress:
                    print(f"  {name:<10} seed {seed}: test regret {out['regret']:.4f}, "
                          f"accuracy {out['accuracy']:.3f}, {out['epoch_time']:.3f} s/epoch", flush=True)
    finally:
        if pool is not None:
            pool.close()
    return results


def summarize(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per method: mean ± std over seeds of regret, accuracy, s/epoch."""
    rows = []
    for name in dict.fromkeys(r["method"] for r in results):
        rs = [r for r in results if r["method"] == name]
        reg = np.array([r["regret"] for r in rs])
        acc = np.array([r["accuracy"] for r in rs])
        t = np.array([r["epoch_time"] for r in rs])
        rows.append({
            "method": name,
            "seeds": len(rs),
            "test regret": f"{reg.mean():.4f} ± {reg.std():.4f}",
            "accuracy": f"{acc.mean():.3f} ± {acc.std():.3f}",
            "untrained regret": f"{np.mean([r['curve'][0] for r in rs]):.4f}",
            "s/epoch": f"{t.mean():.3f}",
        })
    return rows


def plot_curves(results: Sequence[dict[str, Any]], path: str, title: str = "") -> None:
    """PNG of the mean test regret after each epoch, one line per method (± std band).

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
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str]) -> int:
    """``imle-solvers train --problem ... --method ... [options]``; returns the exit status."""
    methods_help = "; ".join(f"{k}: {v}" for k, v in METHODS.items())
    parser = argparse.ArgumentParser(
        prog="imle-solvers train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problem", choices=list(PROBLEMS), default="shortest-path")
    parser.add_argument("--method", nargs="+", default=["imle-mumu", "spo+", "two-stage"],
                        metavar="NAME", help=f"one or more of: {methods_help}; or 'all'")
    parser.add_argument("--epochs", type=int, default=None, help="default: 10")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 32 (35 for terrain)")
    parser.add_argument("--lr", type=float, default=None, help="Adam learning rate (1e-2; 5e-4 terrain)")
    parser.add_argument("--seed", "--seeds", dest="seeds", type=int, nargs="+", default=[0],
                        help="one or more seeds (data and initialisation)")
    parser.add_argument("--deg", type=int, default=1, help="polynomial degree of the cost model")
    parser.add_argument("--noise-width", type=float, default=0.5, help="ē, multiplicative noise half-width")
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=None, help="S of perturbation methods (10; 1 terrain)")
    parser.add_argument("--size", type=int, default=12, help="terrain grid size K")
    parser.add_argument("--noise", choices=["sog", "gumbel"], default="sog",
                        help="I-MLE perturbation: SumOfGamma (κ from the oracle) or Gumbel")
    parser.add_argument("--tau", type=float, default=1.0, help="temperature τ of the I-MLE noise")
    parser.add_argument("--lam", type=float, default=10.0, help="λ of the PID target (method imle)")
    parser.add_argument("--bb-loss", choices=["regret", "hamming"], default=None,
                        help="loss behind the dbb layer (default: regret; hamming on terrain)")
    parser.add_argument("--workers", type=int, default=0, help="solver pool processes (0: solve inline)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default=None, metavar="DIR", help="write results.json and curves.png here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(list(argv))
    methods = list(METHODS) if args.method == ["all"] else args.method
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)} or 'all'")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    results = run(
        args.problem, methods, args.seeds, args.epochs, args.batch_size, args.lr, args.n_train, args.n_test,
        args.deg, args.noise_width, args.samples, args.workers, not args.quiet, args.size, args.tau, args.lam,
        args.noise, args.bb_loss,
    )
    rows = summarize(results)
    print(f"\n{args.problem}, deg {args.deg}, {len(args.seeds)} seed(s), "
          f"{time.perf_counter() - start:.1f} s in all\n")
    print(format_table(rows))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as fh:
            json.dump({"args": vars(args), "summary": rows, "runs": results}, fh, indent=2)
        plot_curves(results, os.path.join(args.out, "curves.png"),
                    title=f"{args.problem}, deg {args.deg}")
        print(f"\nwrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'curves.png')}")
    return 0
