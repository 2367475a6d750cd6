"""``imle-solvers vae``: the command; its parser is generated from `VAEConfig`, its work is `run_vae`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from ...app.command import Command
from .report import SUMMARY, result_table
from .run import VAEConfig, VAEResult, VAERun, header, run_vae

__all__ = ["COMMAND", "build_parser", "main"]


def _run(config: VAEConfig, on_result: Callable[[VAERun], None] | None = None) -> tuple[VAEResult, float]:
    start = time.perf_counter()
    result = run_vae(config, on_result=on_result)
    return result, time.perf_counter() - start


def _show(config: VAEConfig, outcome: tuple[VAEResult, float]) -> None:
    result, seconds = outcome
    print(f"{header(result)}; {seconds:.0f} s in all")
    print(result_table(result))
    print(config.written("results.json, results.md, vae_curves.png and vae_recon.png"))


COMMAND: Command[VAEConfig, tuple[VAEResult, float]] = Command(VAEConfig, _run, _show, SUMMARY)
"""``imle-solvers vae``."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers vae``, generated from
    [`VAEConfig`][imle_solvers.experiments.vae.VAEConfig]."""
    return VAEConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers vae``: train, print the table, write the results; returns the exit status."""
    return COMMAND.main(argv)
