"""``imle-solvers demo``: a few-second version of the paper's synthetic top-k experiment (sec. 6).

I-MLE (Sum-of-Gamma and Gumbel noise), the straight-through estimator and the exact score-function
estimator each optimise ``L(θ) = E_{p(z; θ)} ‖z − b‖²`` over the 252 states of a 5-subset of 10 items
on a small (λ, η) grid; the best setting of each is shown with a progress bar and a result table.
The full experiment is ``imle-solvers toy`` (see :mod:`imle_solvers.experiments.topk_toy`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .topk_toy import result_table, run_toy

__all__ = ["DEMO", "TINY", "main"]

#: Options of :func:`~imle_solvers.experiments.topk_toy.run_toy` for the demo (a few seconds).
DEMO: dict[str, Any] = {
    "runs": 30,
    "steps": 50,
    "lambdas": (1.0, 3.0),
    "lrs": (0.3, 1.0),
    "sfe_lrs": (0.003, 0.01),
    "long_steps": 0,
    "methods": ("imle-sog", "imle-gumbel", "ste-gumbel", "sfe"),
}
#: A smoke-test sized demo (hidden ``--tiny`` flag, used by the tests).
TINY: dict[str, Any] = {**DEMO, "runs": 3, "steps": 5, "lambdas": (1.0,), "lrs": (1.0,), "sfe_lrs": (0.01,)}


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers demo [--seed S]``: run the short toy experiment and print its table."""
    parser = argparse.ArgumentParser(
        prog="imle-solvers demo",
        description="A short run of the I-MLE paper's synthetic top-k experiment (I-MLE vs STE vs SFE).",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance and of the noise")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv) if argv is not None else None)

    options = TINY if args.tiny else DEMO
    print(
        "I-MLE demo: optimise L(θ) = E_{z~p(z;θ)} ‖z − b‖² over the 252 states of a 5-subset of 10 items\n"
        f"({options['runs']} runs x {options['steps']} SGD steps per setting; best setting of each method)"
    )
    result = run_toy(seed=args.seed, progress=True, **options)
    cfg = result.config
    print(f"L(θ₀) = {cfg['loss_init']:.3f}, L* = min_z ‖z − b‖² = {cfg['loss_star']:.3f}")
    print(result_table(result))
    print(f"({result.seconds:.1f} s) The paper's full experiment (100 runs, larger grid): imle-solvers toy")
    return 0
