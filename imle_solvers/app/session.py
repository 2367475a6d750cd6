"""What every command's ``run(config)`` shares: checks before work, threads, the output folder, Ctrl-C.

A [`Session`][imle_solvers.app.session.Session] is entered at the start of a command's ``run`` (from the
command line and from Python alike): it checks the machine (`CommandConfig.preflight`: the device, the
output folder), applies ``config.threads`` and restores the previous setting at the end, hands every
finished run to ``on_result`` and writes it at once, and on Ctrl-C writes what finished
(``"complete": false``) before the interruption goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from ..errors import OutputError
from .config import CommandConfig, render
from .config import fields as option_fields
from .machine import check_output_dir
from .results import Plot, Record, ResultWriter

__all__ = ["Session", "command_line"]


class SummaryLike(Protocol):
    """What a session needs to summarise finished runs (a [`Summary`][imle_solvers.app.results.Summary])."""

    def rows(self, records: Sequence[Any]) -> list[dict[str, Any]]: ...

    def table(self, records: Sequence[Any]) -> str: ...


def command_line(config: CommandConfig) -> str:
    """The ``imle-solvers`` command line that gives ``config``: the options that differ from the defaults."""
    words = ["imle-solvers", type(config).command]
    for spec in option_fields(type(config)):
        value = getattr(config, spec.name)
        if spec.option.positional:
            words.append(render(value))
        elif value != spec.default:
            flag = spec.flags[0]
            if spec.base is bool:
                words.append(flag)
            elif value is not None:
                words += [flag, render(value)]
    return " ".join(words)


class Session:
    """The frame of one command run (see the module docstring); a context manager.

    Parameters
    ----------
    config
        The command's configuration.
    summary
        How finished runs are summarised (``results.json``'s ``summary``, ``results.md``).
    resolved
        The configuration as used (no ``None``: every default resolved), recorded in every file;
        default ``config.as_dict()``.
    on_result
        Called with each finished run, before it is written.
    writes
        Write ``out`` (``False``: a process that computes without writing, e.g. one of several training
        processes but the first).
    """

    def __init__(
        self,
        config: CommandConfig,
        summary: SummaryLike,
        *,
        resolved: dict[str, Any] | None = None,
        on_result: Callable[[Any], None] | None = None,
        writes: bool = True,
    ) -> None:
        self.config, self.summary, self.on_result, self.writes = config, summary, on_result, writes
        self.resolved = config.as_dict() if resolved is None else resolved
        self.records: list[Any] = []
        self.writer: ResultWriter | None = None
        self.written: list[Path] = []
        self._threads: int | None = None

    def __enter__(self) -> Session:
        self.config.preflight()
        out = getattr(self.config, "out", None)
        if out is not None and self.writes:
            self.writer = ResultWriter(check_output_dir(out), command_line(self.config), self.resolved)
        threads = getattr(self.config, "threads", None)
        if threads is not None:
            import torch

            self._threads = torch.get_num_threads()
            torch.set_num_threads(threads)
        return self

    def add(self, record: Record) -> None:
        """A run finished: hand it to ``on_result``, then write it (an ``OSError`` → `OutputError`)."""
        self.records.append(record)
        if self.on_result is not None:
            self.on_result(record)
        if self.writer is not None:
            try:
                self.writer.add(record)
            except OSError as exc:
                raise _output_error(exc, self.writer.folder) from exc

    def finish(
        self, *, markdown: str = "", extra: dict[str, Any] | None = None, plots: Sequence[Plot] = ()
    ) -> list[Path]:
        """Write ``results.json``, ``results.md`` (``markdown``, then the summary table) and the plots."""
        if self.writer is None:
            return []
        try:
            self.written = self._finish(True, markdown, extra, plots)
        except OSError as exc:
            raise _output_error(exc, self.writer.folder) from exc
        return self.written

    def _finish(
        self, complete: bool, markdown: str, extra: dict[str, Any] | None, plots: Sequence[Plot]
    ) -> list[Path]:
        assert self.writer is not None
        table = self.summary.table(self.records)
        return self.writer.finish(
            complete=complete,
            runs=self.records,
            summary=self.summary.rows(self.records),
            markdown=f"{markdown}\n\n{table}" if markdown else table,
            extra=extra,
            plots=plots,
        )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._threads is not None:
            import torch

            torch.set_num_threads(self._threads)
        if kind is not None and issubclass(kind, KeyboardInterrupt) and self.writer and self.records:
            try:
                self.written = self._finish(False, "", None, ())
            except OSError:  # the interruption goes on; the runs written so far stay
                pass


def _output_error(exc: OSError, folder: Path) -> OutputError:
    return OutputError(f"cannot write the results to {str(folder)!r}: {exc.strerror or exc}")
