"""``imle-solvers demo``: predict-then-optimize on the shortest-path benchmark in about half a minute.

A linear model predicts the 40 arc costs of a 5 × 5 grid from 5 features (the SPO / PyEPO protocol:
1,000 training and 1,000 test instances, cost degree 4, noise half-width 0.5, Adam, batch 32) and is
trained three ways:

* **I-MLE μ-μ** — I-MLE with the optimal target of eq. 10 and the regret loss (paper, Fact 2):
  the gradient is ``MAP(θ + ε) − MAP(−c + ε)``;
* **SPO+** — the convex surrogate of Elmachtoub & Grigas;
* **two-stage** — plain least-squares regression of the costs, ignoring the optimisation.

Reported: the normalised test regret (lower is better), the share of test instances decided
optimally, and the seconds per training epoch.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from ..report import format_table

__all__ = ["main"]

METHODS = ("imle-mumu", "spo+", "two-stage")


def main(argv: Sequence[str] = ()) -> int:
    """Run the demo; ``--epochs``, ``--deg``, ``--seed``, ``--quiet``. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="imle-solvers demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--deg", type=int, default=4, help="polynomial degree of the cost model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(list(argv))
    torch.set_num_threads(1)
    from ..training import TrainConfig, run

    start = time.perf_counter()
    print(
        f"shortest path on a 5x5 grid: linear model, {args.n_train} training / 1000 test instances, "
        f"deg {args.deg}, {args.epochs} epochs\n",
        flush=True,
    )
    results = run(TrainConfig(
        problem="shortest-path", methods=METHODS, seeds=(args.seed,), epochs=args.epochs,
        n_train=args.n_train, deg=args.deg, show_progress=not args.quiet,
    ))
    rows = [
        {
            "method": r["method"],
            "test regret": round(r["regret"], 4),
            "optimal decisions": f"{100 * r['accuracy']:.1f}%",
            "untrained regret": round(r["curve"][0], 4),
            "s/epoch": round(r["epoch_time"], 3),
        }
        for r in results
    ]
    print()
    print(format_table(rows))
    best = min(results, key=lambda r: r["regret"])
    elapsed = time.perf_counter() - start
    print(f"\nbest: {best['method']} (regret {best['regret']:.4f}); {elapsed:.1f} s in all")
    print("More: imle-solvers train --help (all methods, several seeds, JSON and learning curves).")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
