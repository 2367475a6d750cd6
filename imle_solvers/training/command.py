"""``imle-solvers train``: the command (`main`); its parser comes from `TrainConfig`, its work is `run`.

Every option is checked before any work (one line, exit status 2); finished runs are written as they
finish, Ctrl-C keeps them (exit status 130), and a failed write prints the finished runs and the reason
(exit status 1).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from ..app.command import Command
from .config import TrainConfig
from .distributed import is_main_process
from .results import SUMMARY, TrainRun
from .runner import run

__all__ = ["COMMAND", "build_parser", "main"]


def _run(config: TrainConfig, on_result: object = None) -> tuple[list[TrainRun], float]:
    start = time.perf_counter()
    results = run(config, on_result=on_result)  # type: ignore[arg-type]
    return results, time.perf_counter() - start


def _show(config: TrainConfig, outcome: tuple[list[TrainRun], float]) -> None:
    if not is_main_process():  # under torchrun, rank 0 prints
        return
    results, seconds = outcome
    plan = config.plan()  # resolved by the run already
    print(f"\n{plan.title}, {len(plan.seeds)} seed(s), {seconds:.1f} s in all\n")
    print(SUMMARY.table(results))
    print("\n" + config.written("results.json, results.md, curves.png and runs/"))


COMMAND = Command(TrainConfig, _run, _show, SUMMARY)
"""``imle-solvers train``."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers train``, generated from
    [`TrainConfig`][imle_solvers.training.TrainConfig]."""
    return TrainConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers train --problem ... --methods ... [options]``; returns the exit status."""
    return COMMAND.main(argv)
