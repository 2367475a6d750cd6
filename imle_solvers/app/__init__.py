"""The application layer shared by the ``imle-solvers`` commands (the core never imports it).

* ``config.py``   — [`CommandConfig`][imle_solvers.app.config.CommandConfig] and
  [`option`][imle_solvers.app.config.option]: a command's settings declared once, its parser generated;
* ``registry.py`` — [`Registry`][imle_solvers.app.registry.Registry]: name → documented factory;
* ``results.py``  — typed result records, [`Summary`][imle_solvers.app.results.Summary] and
  [`ResultWriter`][imle_solvers.app.results.ResultWriter] (JSON, Markdown, plots, atomically);
* ``machine.py``  — what a command checks on this machine before any work (its device, its output
  folder);
* ``session.py``  — [`Session`][imle_solvers.app.session.Session]: checks before work, threads, the output
  folder, Ctrl-C;
* ``command.py``  — [`Command`][imle_solvers.app.command.Command]: parse, run, print, exit status;
* ``report.py``   — progress bars and Markdown tables.

A new command is a configuration type, a ``run(config, on_result=None)`` that works inside a `Session`,
a registry of its methods where it has some, and one line in ``imle_solvers/cli.py``.
"""

from __future__ import annotations

from .command import Command
from .config import CommandConfig, Option, option
from .registry import Registry
from .results import Metric, ResultWriter, Summary
from .session import Session

__all__ = [
    "Command",
    "CommandConfig",
    "Metric",
    "Option",
    "Registry",
    "ResultWriter",
    "Session",
    "Summary",
    "option",
]
