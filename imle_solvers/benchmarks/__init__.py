"""``imle-solvers bench``: performance suites that print ratios measured in one run.

Suites (one module each, exposing ``run(quick: bool) -> list[dict]`` rows):

* ``adapters`` — per-call time of each adapter vs its bare solver call (``adapters.py``);
* ``pool`` — serial vs thread vs process pools, and the layer step vs the bare solves (``pool.py``);
* ``layer`` — the I-MLE step vs the two raw oracle calls it makes (``layer.py``);
* ``pto`` — seconds per training epoch vs PyEPO's I-MLE on its shortest-path protocol (``pto.py``).

Timing helpers live here so that every suite measures the same way.
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

SUITES: dict[str, str] = {
    "adapters": "imle_solvers.benchmarks.adapters",
    "pool": "imle_solvers.benchmarks.pool",
    "layer": "imle_solvers.benchmarks.layer",
    "pto": "imle_solvers.benchmarks.pto",
    "graphs": "imle_solvers.benchmarks.graphs_device",
}


def time_per_call(fn: Callable[[], Any], repeat: int = 5, number: int | None = None,
                  min_time: float = 0.2) -> float:
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


def main(argv: Sequence[str]) -> int:
    """``imle-solvers bench {adapters,pool,all} [--quick] [--json PATH]``."""
    parser = argparse.ArgumentParser(prog="imle-solvers bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=[*SUITES, "all"], help="which suite to run")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(list(argv))
    names = list(SUITES) if args.suite == "all" else [args.suite]
    results: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        module = importlib.import_module(SUITES[name])
        rows = module.run(quick=args.quick)
        results[name] = rows
        print(f"\n## bench {name}\n")
        print(format_table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0
