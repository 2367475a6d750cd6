"""`imle-solvers bench`: performance suites that print tables of times and ratios measured in one run.

Each suite is one module exposing `run(quick: bool) -> list[dict]`, one dict per table row; the suites
that time calls do so with [`time_per_call`][imle_solvers.benchmarks.time_per_call]. The ``warcraft``
suite also takes the options of its protocol (`WARCRAFT_OPTIONS`), as keyword arguments of its ``run``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..app.command import Command
from ..app.config import OnDevice, count, count_at_least, inherit, option, path_text, positive_number
from ..app.report import format_table
from ..app.results import atomic_write_json
from ..errors import ConfigError, OutputError
from ..training.config import AMP, COMPILE
from ._timing import time_per_call

__all__ = [
    "COMMAND",
    "SUITES",
    "WARCRAFT_OPTIONS",
    "BenchConfig",
    "build_parser",
    "main",
    "run",
    "time_per_call",
]

SUITES: dict[str, tuple[str, str]] = {
    "adapters": ("imle_solvers.benchmarks.adapters", "each adapter vs its bare solver call, per call"),
    "backends": ("imle_solvers.benchmarks.backends", "CP-SAT vs CBC vs HiGHS on small ILPs and an LP"),
    "pool": ("imle_solvers.benchmarks.pool", "serial vs thread vs process pools on a batch of solves"),
    "layer": ("imle_solvers.benchmarks.layer", "an I-MLE training step vs the two oracle calls it makes"),
    "pto": ("imle_solvers.benchmarks.pto", "seconds per epoch of predict-then-optimize training"),
    "pto-methods": (
        "imle_solvers.benchmarks.pto_methods",
        "every PyEPO 2.2.7 training method against ours: regret and s/epoch on shortest path, knapsack, TSP",
    ),
    "scaling": (
        "imle_solvers.benchmarks.scaling",
        "1 vs 2 training processes (torchrun), serial vs 2 workers vs a 2-worker Dask cluster",
    ),
    "graphs": (
        "imle_solvers.benchmarks.graphs_device",
        "device-native grid path, knapsack, assignment, spanning tree vs SciPy, CP-SAT, NetworkX",
    ),
    "warcraft": (
        "imle_solvers.benchmarks.warcraft",
        "the paper's Warcraft 30×30 protocol: s per epoch, projected 50-epoch total (--full: accuracy)",
    ),
    "exact": ("imle_solvers.benchmarks.exact", "each estimator's mean gradient vs the exact one, enumerated"),
    "targets": (
        "imle_solvers.benchmarks.targets",
        "the I-MLE targets trained on every task we ship, paired seeds (an hour; --quick: seconds)",
    ),
    "coupling": (
        "imle_solvers.benchmarks.coupling",
        "one row's gradient as the other rows' losses are scaled by 0.01 to 100, per target",
    ),
}
"""Suite name → (module with `run(quick)`, one-line summary shown by `--help`)."""


def _suite_listing() -> str:
    width = max(len(name) for name in SUITES)
    listing = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in SUITES.items())
    return f"suites:\n{listing}\n  {'all':<{width}}  every suite above, one after the other"


WARCRAFT_OPTIONS = ("full", "epochs", "maps", "data", "size", "device", "compile", "amp", "time_limit")
"""The fields of `BenchConfig` that only the ``warcraft`` suite reads (the keyword arguments of its
``run``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig(OnDevice):
    """Settings of ``imle-solvers bench`` (`run` takes it).

    The fields from `full` on (`WARCRAFT_OPTIONS`) belong to the ``warcraft`` suite's protocol (see
    [`benchmarks.warcraft.run`][imle_solvers.benchmarks.warcraft.run]); setting one with another suite
    is an error.

    Attributes
    ----------
    suite
        A key of `SUITES`, or ``all``.
    quick
        Fewer repetitions: a smoke run in seconds.
    json
        Also write the rows to this JSON file (rewritten after every suite, atomically).
    full
        All 50 epochs on 10,000 maps, then the test accuracy.
    epochs
        Epochs to run (``None``: 2; 1 with `quick`; 50 with `full`).
    maps
        Training maps per epoch (``None``: 10,000 on a GPU, 350 on the CPU; fewer than 10,000 are
        projected to a full epoch).
    data
        The folder of the published Warcraft files (``None``: generated maps).
    size
        Grid size K.
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
    compile
        As ``imle-solvers train --compile``.
    amp
        As ``imle-solvers train --amp``.
    time_limit
        Stop after the epoch that passes this many seconds of training and project the rest.
    part
        The ``targets`` suite's tasks: ``selection`` (default), ``held-out`` or ``all``.
    problem
        The ``pto`` suite's problem: ``shortest-path`` (default) or ``tsp`` (PyEPO's travelling salesperson,
        side by side with PyEPO's methods, and on process pools and a Dask cluster).
    """

    command: ClassVar[str] = "bench"
    description: ClassVar[str] = "Time the library on this machine and print one table per suite."
    epilog: ClassVar[str] = """\
examples:
  imle-solvers bench backends --quick --json runs/backends.json
  imle-solvers bench pto --problem tsp                 # our TSP training vs PyEPO's, pools, Dask
  imle-solvers bench warcraft --device cuda            # 2 epochs of the 30×30 protocol, projected to 50
  imle-solvers bench warcraft --full --data DIR        # all 50 epochs on the published maps, accuracy"""

    suite: str = option(
        dataclasses.MISSING,
        "which suite to run (listed below)",
        choices=lambda: (*SUITES, "all"),
        positional=True,
        metavar="SUITE",
    )
    quick: bool = option(False, "fewer repetitions: a smoke run in seconds")
    json: str | None = option(
        None, "also write the rows to this JSON file", metavar="PATH", check=path_text, default_text="none"
    )
    full: bool = option(False, "warcraft: all 50 epochs on 10,000 maps, then the test accuracy")
    epochs: int | None = option(
        None,
        "warcraft: epochs to run",
        check=count,
        default_text="2; 1 with --quick; 50 with --full",
    )
    maps: int | None = option(
        None,
        "warcraft: training maps per epoch (fewer than 10,000: the epoch is projected)",
        check=count,
        default_text="10000 on a GPU, 350 on the CPU",
    )
    data: str | None = option(
        None,
        "warcraft: the folder of the published files (DIR or DIR/KxK)",
        metavar="DIR",
        check=path_text,
        default_text="none: generated maps",
    )
    size: int = option(30, "warcraft: grid size K", check=count_at_least(2))
    device: str = inherit("device", "auto")
    compile: str = option("auto", "warcraft: as train --compile", choices=COMPILE)
    amp: str = option("auto", "warcraft: as train --amp", choices=AMP)
    time_limit: float | None = option(
        None,
        "warcraft: stop after the epoch that passes this many seconds of training; project the rest",
        check=positive_number,
        metavar="SECONDS",
        default_text="none",
    )

    problem: str = option(
        "shortest-path",
        "pto: the problem, shortest-path or tsp (side by side with PyEPO's TSP methods, pools, Dask)",
        choices=("shortest-path", "tsp"),
    )
    part: str = option(
        "selection",
        "targets: the tasks that chose the default, the held-out ones (on other seeds), or all",
        choices=("selection", "held-out", "all"),
    )

    @classmethod
    def help_epilog(cls) -> str:
        return f"{_suite_listing()}\n\n{cls.epilog}"

    def validate(self) -> None:
        if self.suite not in ("warcraft", "all"):
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name in WARCRAFT_OPTIONS:
                if getattr(self, name) != defaults[name]:
                    raise ConfigError(f"applies to the warcraft suite only, got suite {self.suite!r}", name)
        if self.problem != "shortest-path" and self.suite not in ("pto", "all"):
            raise ConfigError(f"applies to the pto suite only, got suite {self.suite!r}", "problem")
        if self.part != "selection" and self.suite not in ("targets", "all"):
            raise ConfigError(f"applies to the targets suite only, got suite {self.suite!r}", "part")

    def interrupted(self, done: int) -> str:
        """What Ctrl-C leaves: the finished suites' tables (printed), and their rows in ``--json``."""
        if self.json is None:
            if not done:
                return "interrupted: no suite had finished"
            return (
                f"interrupted: {done} finished suite(s), printed above (add --json PATH to keep their rows)"
            )
        if not done:
            return f"interrupted: no suite had finished; {self.json} left as it was"
        return f"interrupted: {done} finished suite(s), printed above; their rows are in {self.json}"

    def suite_options(self, suite: str) -> dict[str, Any]:
        """The keyword arguments of ``suite``'s ``run`` besides ``quick`` (the warcraft options)."""
        if suite == "pto" and self.problem != "shortest-path":
            return {"problem": self.problem}
        if suite == "targets" and self.part != "selection":
            return {"part": self.part}
        return {name: getattr(self, name) for name in WARCRAFT_OPTIONS} if suite == "warcraft" else {}

    def preflight(self) -> None:
        """The machine and the data of the warcraft suite (as ``imle-solvers train`` checks them), and the
        JSON file can be written: its folder exists and is writable, and it is not a folder."""
        if self.suite in ("warcraft", "all"):
            from .warcraft import protocol_config

            options = self.suite_options("warcraft")
            del options["time_limit"]
            protocol_config(self.quick, **options).preflight()
        if self.json is None:
            return
        target = os.path.abspath(self.json)
        folder = os.path.dirname(target)
        if os.path.isdir(target):
            raise ConfigError(f"{self.json!r} is a folder: it must name a file", "json")
        if not os.path.isdir(folder):
            raise ConfigError(f"{self.json!r}: the folder {folder!r} does not exist", "json")
        if not os.access(folder, os.W_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
            raise ConfigError(f"cannot write to {self.json!r}: permission denied", "json")


def run(
    config: BenchConfig, on_result: Callable[[Any], None] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run the suites of ``config`` and print their tables; returns ``suite → rows``.

    The JSON file (when asked for) is checked before any suite runs and rewritten after each suite, so an
    interruption keeps the suites that finished.
    """
    config.preflight()
    names = list(SUITES) if config.suite == "all" else [config.suite]
    results: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        module = importlib.import_module(SUITES[name][0])
        rows = module.run(quick=config.quick, **config.suite_options(name))
        results[name] = rows
        print(f"\n## bench {name}\n")
        tables: dict[str, list[dict[str, Any]]] = {}
        for row in rows:  # a suite may return several tables, told apart by their "suite" key
            tables.setdefault(str(row.get("suite", "")), []).append(row)
        print("\n\n".join(format_table(t) for t in tables.values()), flush=True)
        if config.json:
            try:
                atomic_write_json(config.json, results)
            except OSError as exc:
                raise OutputError(f"cannot write {config.json!r}: {exc.strerror or exc}") from exc
        if on_result is not None:
            on_result(name)
    return results


def _show(config: BenchConfig, results: dict[str, list[dict[str, Any]]]) -> None:
    if config.json:
        print(f"\nwrote {config.json}")


COMMAND: Command[BenchConfig, dict[str, list[dict[str, Any]]]] = Command(BenchConfig, run, _show)
"""``imle-solvers bench``."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers bench`` (generated from `BenchConfig`)."""
    return BenchConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``imle-solvers bench SUITE [--quick] [--json PATH]``; returns the exit status."""
    return COMMAND.main(argv)
