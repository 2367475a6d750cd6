"""A command: its configuration type, its ``run``, and how its outcome is printed.

[`Command.main`][imle_solvers.app.command.Command.main] is the same for every ``imle-solvers`` command:
parse and check the options (any error: one line saying what is wrong and a pointer to ``--help``,
exit status 2, before any work), run, print. What goes wrong after that is one line too, never a
traceback: a setting found wanting while running is a usage error as above (exit status 2), Ctrl-C
prints the finished runs and where they are kept (`CommandConfig.interrupted`, exit status 130), a
failed write of the results prints the finished runs and the reason (exit status 1), and any other typed
error of the library ([`ImleSolversError`][imle_solvers.errors.ImleSolversError], e.g. a missing extra,
a training process of a torchrun job that died) its message (exit status 1).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..errors import ConfigError, ImleSolversError, OutputError
from .config import CommandConfig, usage_error
from .session import SummaryLike

__all__ = ["Command"]

C = TypeVar("C", bound=CommandConfig)
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class Command(Generic[C, R]):
    """One ``imle-solvers`` command.

    Attributes
    ----------
    config
        Its configuration type (a [`CommandConfig`][imle_solvers.app.config.CommandConfig]).
    run
        ``run(config, on_result=callback) -> result``: the work, as the Python API does it.
    show
        Prints the outcome of a finished run.
    summary
        Summarises the finished runs of an interrupted or failed run (``None``: nothing to show).
    """

    config: type[C]
    run: Callable[..., R]
    show: Callable[[C, R], None]
    summary: SummaryLike | None = None

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv``, run, print; returns the exit status (see the module docstring)."""
        config = self.config.from_argv(list(sys.argv[1:] if argv is None else argv))
        finished: list[Any] = []
        prog = f"imle-solvers {self.config.command}"
        try:
            result = self.run(config, on_result=finished.append)
        except KeyboardInterrupt:
            self._show_finished(finished)
            print(config.interrupted(len(finished)), file=sys.stderr)
            return 130
        except OutputError as exc:
            self._show_finished(finished)
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 1
        except ConfigError as exc:
            print(usage_error(prog, self.config.explain(exc)), file=sys.stderr, end="")
            return 2
        except ImleSolversError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 1
        self.show(config, result)
        return 0

    def _show_finished(self, finished: list[Any]) -> None:
        if finished and self.summary is not None:
            print(self.summary.table(finished))
