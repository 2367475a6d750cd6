"""``imle-solvers sort``: the command; its parser is generated from `SortConfig`, its work is `run_sort`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ...app.command import Command
from .results import SUMMARY, SortResult
from .run import SortConfig, header, run_sort

__all__ = ["COMMAND", "build_parser", "main", "result_table"]


def result_table(result: SortResult) -> str:
    """Markdown table: exact and per-position test accuracy (mean ± std over seeds) per n and method."""
    return SUMMARY.table(result.runs)


def _show(config: SortConfig, result: SortResult) -> None:
    seconds = sum(run.seconds for run in result.runs)
    print(f"{header(result)}; {seconds:.0f} s of training in all")
    print(result_table(result))
    print(config.written("results.json and results.md"))


COMMAND: Command[SortConfig, SortResult] = Command(SortConfig, run_sort, _show, SUMMARY)
"""``imle-solvers sort``."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers sort``, generated from
    [`SortConfig`][imle_solvers.experiments.sort.SortConfig]."""
    return SortConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers sort``: train, print the table, write the results; returns the exit status."""
    return COMMAND.main(argv)
