"""`imle-solvers bench`: performance suites that print tables of times and ratios measured in one run.

Each suite is one module exposing `run(quick: bool) -> list[dict]`, one dict per table row; every
suite times calls with [`time_per_call`][imle_solvers.benchmarks.time_per_call].
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..report import format_table

__all__ = ["SUITES", "main", "time_per_call"]

SUITES: dict[str, tuple[str, str]] = {
    "adapters": ("imle_solvers.benchmarks.adapters", "each adapter vs its bare solver call, per call"),
    "backends": ("imle_solvers.benchmarks.backends", "CP-SAT vs CBC vs HiGHS on small ILPs and an LP"),
    "pool": ("imle_solvers.benchmarks.pool", "serial vs thread vs process pools on a batch of solves"),
    "layer": ("imle_solvers.benchmarks.layer", "an I-MLE training step vs the two oracle calls it makes"),
    "pto": ("imle_solvers.benchmarks.pto", "seconds per epoch of predict-then-optimize training"),
    "graphs": (
        "imle_solvers.benchmarks.graphs_device",
        "device-native grid shortest path and knapsack vs SciPy Dijkstra and CP-SAT",
    ),
}
"""Suite name → (module with `run(quick)`, one-line summary shown by `--help`)."""


def time_per_call(
    fn: Callable[[], Any], repeat: int = 5, number: int | None = None, min_time: float = 0.2
) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls.

    ``number`` is chosen so that one round lasts about ``min_time`` seconds when not given.
    One warm-up call runs first (imports, caches, JIT).
    """
    fn()
    if number is None:
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        number = max(1, int(min_time / once))
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - start) / number)
    rounds.sort()
    return rounds[len(rounds) // 2]


def build_parser() -> argparse.ArgumentParser:
    """The parser of `imle-solvers bench`."""
    from ..cli import HelpFormatter

    listing = "\n".join(f"  {name:<9} {summary}" for name, (_, summary) in SUITES.items())
    parser = argparse.ArgumentParser(
        prog="imle-solvers bench",
        description="Time the library on this machine and print one table per suite.\n\n"
        f"suites:\n{listing}\n  all       every suite above, one after the other",
        epilog="example: imle-solvers bench backends --quick --json runs/backends.json",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "suite",
        choices=[*SUITES, "all"],
        metavar="SUITE",
        help=f"which suite to run: {', '.join(SUITES)} or all",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: a smoke run in seconds")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the rows to this JSON file")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `imle-solvers bench SUITE [--quick] [--json PATH]`; returns the exit status."""
    args = build_parser().parse_args(list(argv))
    names = list(SUITES) if args.suite == "all" else [args.suite]
    results: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        module = importlib.import_module(SUITES[name][0])
        rows = module.run(quick=args.quick)
        results[name] = rows
        print(f"\n## bench {name}\n")
        tables: dict[str, list[dict[str, Any]]] = {}
        for row in rows:  # a suite may return several tables, told apart by their "suite" key
            tables.setdefault(str(row.get("suite", "")), []).append(row)
        print("\n\n".join(format_table(t) for t in tables.values()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0
