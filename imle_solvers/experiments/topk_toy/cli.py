"""``imle-solvers toy``: the parser (`build_parser`), the options it gives `run_toy`, and `main`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...report import write_outputs as write_files
from .report import plot, result_table
from .results import ToyResult
from .run import run_toy

__all__ = ["QUICK", "build_parser", "main", "toy_options", "write_outputs"]

#: The ``--quick`` settings: 10 runs, a 2 × 2 grid, the extra SFE run over 100 steps.
QUICK: dict[str, Any] = {
    "runs": 10, "lambdas": (1.0, 3.0), "lrs": (0.3, 1.0), "sfe_lrs": (0.003, 0.01), "long_steps": 100,
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The options of ``imle-solvers toy``."""
    parser = argparse.ArgumentParser(
        prog="imle-solvers toy",
        description="The I-MLE paper's synthetic top-k experiment (m=10, k=5, exact L by enumeration).",
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per grid point (default 100; quick 10)")
    parser.add_argument("--steps", type=int, default=50, help="SGD steps (default 50)")
    parser.add_argument(
        "--long-steps", type=int, default=None, help="steps of the extra SFE run (default 500)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance and of the noise")
    parser.add_argument("--out", default="runs/topk_toy", help="output directory (default runs/topk_toy)")
    parser.add_argument("--quick", action="store_true", help="a small grid and few runs (seconds)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def toy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] that ``args`` set."""
    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.runs is not None:
        options["runs"] = args.runs
    if args.long_steps is not None:
        options["long_steps"] = args.long_steps
    return {**options, "steps": args.steps, "seed": args.seed, "progress": not args.no_progress}


def write_outputs(result: ToyResult, out: Path, command: str) -> list[Path]:
    """Print the table; write ``topk_toy.json``, ``topk_toy.md`` and (with matplotlib) ``topk_toy.png``.

    Returns the paths written; ``command`` is quoted at the end of the Markdown file.
    """
    table = result_table(result)
    cfg = result.config
    header = (
        f"Synthetic top-k (m={cfg['m']}, k={cfg['k']}, {cfg['n_states']} states), {cfg['runs']} runs, "
        f"SGD momentum {cfg['momentum']}, seed {cfg['seed']}: L(θ₀) = {cfg['loss_init']:.3f}, "
        f"L* = {cfg['loss_star']:.3f}"
    )
    print(header)
    print(table)
    print(f"({result.seconds:.1f} s)")
    return write_files(
        out,
        "topk_toy",
        result.save_json,
        f"{header}\n\n{table}",
        command,
        plots=lambda: [plot(result, out / "topk_toy.png")],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers toy [--runs N] [--steps N] [--seed S] [--out DIR] [--quick]``.

    Runs [`run_toy`][imle_solvers.experiments.topk_toy.run_toy], prints the result table and writes
    ``topk_toy.json``, ``topk_toy.md`` and
    ``topk_toy.png`` (when matplotlib is installed) to ``--out``.
    """
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        result = run_toy(**toy_options(args))
    except ValueError as exc:
        parser.error(str(exc))
    command = "imle-solvers toy " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    written = write_outputs(result, Path(args.out), command)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
