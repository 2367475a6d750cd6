"""``imle-solvers l2x``: the command; its parser is generated from `L2XConfig`, its work is `run_l2x`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from ...app.command import Command
from .run import SUMMARY, L2XConfig, L2XResult, L2XRun, header, run_l2x

__all__ = ["COMMAND", "build_parser", "main", "result_table"]


def result_table(result: L2XResult) -> str:
    """Markdown table: test MSE and subset precision (× 100, mean ± std over seeds) per k and method."""
    return SUMMARY.table(result.runs)


def _run(config: L2XConfig, on_result: Callable[[L2XRun], None] | None = None) -> tuple[L2XResult, float]:
    start = time.perf_counter()
    result = run_l2x(config, on_result=on_result)
    return result, time.perf_counter() - start


def _show(config: L2XConfig, outcome: tuple[L2XResult, float]) -> None:
    result, seconds = outcome
    print(f"{header(result)}; {seconds:.0f} s in all")
    print(result_table(result))
    print(config.written("results.json and results.md"))


COMMAND: Command[L2XConfig, tuple[L2XResult, float]] = Command(L2XConfig, _run, _show, SUMMARY)
"""``imle-solvers l2x``."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers l2x``, generated from
    [`L2XConfig`][imle_solvers.experiments.l2x.L2XConfig]."""
    return L2XConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers l2x``: train, print the table, write the results; returns the exit status."""
    return COMMAND.main(argv)
