"""Typed results: a record per run, a summary of numbers, and one writer of JSON, Markdown and plots.

Every command reports one record per finished run (a dataclass: ``TrainRun``, ``VAERun``, ``L2XRun``,
``ToyRow``), whose ``key`` names its file. A [`Summary`][imle_solvers.app.results.Summary] groups the
records (by method, say) and gives each metric as two numbers, ``{metric}_mean`` and ``{metric}_std``
(the sample standard deviation over the group, 0 for one run); the Markdown table shows them as
``mean ± std``, and the mean alone for a group of one run.
[`ResultWriter`][imle_solvers.app.results.ResultWriter] writes an output folder:

```text
runs/<key>.json   one finished run each, written as soon as it finishes
results.json      the command, the resolved configuration, "complete" (false when interrupted),
                  the summary, every run, the names of the figures (and what else the command keeps)
results.md        the summary table and the command that reproduces it
*.png             the command's figures (when matplotlib is installed)
```

A folder describes one run. When a run writes its first file into a folder that holds the results of an
earlier run, the earlier run's files are removed first: ``results.json``, ``results.md``, every
``runs/*.json`` written by a command (a JSON file with the command line and the run) and the figures
its ``results.json`` names; any other file is kept. A run interrupted before its first result leaves
the folder as it was.

Every file is written to a uniquely named temporary file in the same folder and renamed into place
(``os.replace``), so an interruption leaves the previous file or the new one, never a truncated one, and
two runs finishing into one folder at once cannot mix their files. The file gets the permissions a plain
``open(path, "w")`` would give it: those of the file it replaces, else ``0o666`` less the umask
(``-rw-r--r--`` under the usual umask 022).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from .report import format_table

__all__ = [
    "Metric",
    "Record",
    "ResultWriter",
    "Summary",
    "atomic_path",
    "atomic_write_json",
    "atomic_write_text",
    "earlier_results",
    "to_json",
]


class Record(Protocol):
    """A finished run: a dataclass whose ``key`` names its file (``runs/<key>.json``)."""

    @property
    def key(self) -> str: ...


def to_json(value: Any) -> Any:
    """A record, a configuration or a value as plain JSON data (dataclasses as dicts, tuples as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (math.inf if value > 0 else -math.inf)
    return value


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """A unique temporary path beside ``path`` to write to; renamed over ``path`` when the block ends.

    The temporary file exists (empty) when the block starts, with the permissions that
    ``open(path, "w")`` would leave ``path`` with (see the module's docstring). On any exception
    (``KeyboardInterrupt`` included) the temporary file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    tmp = _create_beside(target, suffix)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _create_beside(target: Path, suffix: str) -> Path:
    """A new empty file beside ``target`` with the permissions ``open(target, "w")`` would leave it.

    Those of ``target`` where it exists, else ``0o666`` less the umask: the kernel applies the umask to
    the mode given to ``os.open`` (``tempfile.mkstemp`` would create it ``0o600`` whatever the umask).
    The name is random, and ``O_EXCL`` makes sure that no other writer holds it.
    """
    try:
        kept: int | None = stat.S_IMODE(os.stat(target).st_mode)  # open() keeps an existing file's mode
    except OSError:
        kept = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}{suffix}")
        try:
            fd = os.open(tmp, flags, 0o666)  # mode 0o666 & ~umask, as open() creates files
        except FileExistsError:
            continue
        os.close(fd)
        if kept is not None:
            try:
                os.chmod(tmp, kept)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        return tmp
    raise FileExistsError(f"no free temporary name beside {str(target)!r}")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (see `atomic_path`), flushed to the disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (see `atomic_path`)."""
    atomic_write_text(path, json.dumps(to_json(payload), indent=1) + "\n")


@dataclasses.dataclass(frozen=True)
class Metric:
    """A number of a record that a summary reports.

    Attributes
    ----------
    key
        The record's attribute (or property).
    label
        The column of the Markdown table.
    digits
        Digits after the decimal point in the table.
    spread
        Report the standard deviation over the group too (``mean ± std``); else only the mean.
    """

    key: str
    label: str
    digits: int = 4
    spread: bool = True


@dataclasses.dataclass(frozen=True)
class Summary:
    """One row per group of records (e.g. per method), each metric as its mean and standard deviation.

    Attributes
    ----------
    by
        The record attributes that define a group; groups keep the order of their first record.
    metrics
        What is reported per group.
    count
        Name of the column that counts the records of a group.
    """

    by: tuple[str, ...]
    metrics: tuple[Metric, ...]
    count: str = "seeds"

    def rows(self, records: Sequence[Any]) -> list[dict[str, Any]]:
        """``{by..., count, metric_mean, metric_std...}`` per group: numbers, not text."""
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for record in records:
            groups.setdefault(tuple(getattr(record, k) for k in self.by), []).append(record)
        rows = []
        for key, members in groups.items():
            row: dict[str, Any] = dict(zip(self.by, key))
            row[self.count] = len(members)
            for metric in self.metrics:
                mean, std = mean_std([float(getattr(r, metric.key)) for r in members])
                row[f"{metric.key}_mean"] = mean
                if metric.spread:
                    row[f"{metric.key}_std"] = std
            rows.append(row)
        return rows

    def table(self, records: Sequence[Any]) -> str:
        """The rows as a Markdown table, ``mean ± std`` per metric (the mean alone for a group of one
        record, whose spread is unknown, not 0)."""
        cells = []
        for row in self.rows(records):
            cell: dict[str, Any] = {k: row[k] for k in (*self.by, self.count)}
            several = row[self.count] > 1
            for m in self.metrics:
                mean = f"{row[f'{m.key}_mean']:.{m.digits}f}"
                spread = m.spread and several
                cell[m.label] = f"{mean} ± {row[f'{m.key}_std']:.{m.digits}f}" if spread else mean
            cells.append(cell)
        return format_table(cells)


def _ours(path: Path) -> dict[str, Any] | None:
    """The content of a JSON file a command wrote (an object with its ``command`` line), else ``None``."""
    try:
        with open(path, encoding="utf-8") as fh:
            content = json.load(fh)
    except (OSError, ValueError):
        return None
    if isinstance(content, dict) and str(content.get("command", "")).startswith("imle-solvers "):
        return content
    return None


def earlier_results(folder: str | os.PathLike[str]) -> list[Path]:
    """The files of an earlier command run in ``folder`` (see the module docstring): its
    ``results.json`` and ``results.md``, the ``runs/*.json`` a command wrote, and the figures its
    ``results.json`` names. Files it cannot read as a command's are not among them."""
    folder = Path(folder)
    found: list[Path] = []
    summary = _ours(folder / "results.json")
    if summary is not None:
        found.append(folder / "results.json")
        names = summary.get("figures", [])
        for name in names if isinstance(names, list) else []:
            figure = folder / str(name)
            if figure.parent == folder and figure.is_file():  # a plain name in the folder, nothing else
                found.append(figure)
    markdown = folder / "results.md"
    try:
        lines = markdown.read_text(encoding="utf-8").strip().splitlines()
    except (OSError, ValueError):
        lines = []
    if lines and lines[-1].startswith("Command: `imle-solvers "):
        found.append(markdown)
    runs = folder / "runs"
    if runs.is_dir():
        for path in sorted(runs.glob("*.json")):
            content = _ours(path)
            if content is not None and "run" in content:
                found.append(path)
    return found


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value; ``inf`` mean if any value is not finite)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in values):
        return math.inf, 0.0
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


Plot = tuple[str, Callable[[Path], object]]
"""A figure: its file name and a function drawing it into the path it is given."""


class ResultWriter:
    """Writes one command's output folder (layout: this module's docstring), run by run.

    Parameters
    ----------
    folder
        The output folder, checked (and created) before any work (`check_output_dir`).
    command
        The command line that reproduces the results (quoted in ``results.md``).
    config
        The resolved configuration, recorded in every file.
    """

    def __init__(self, folder: Path, command: str, config: dict[str, Any]) -> None:
        self.folder, self.command, self.config = Path(folder), command, to_json(config)
        self.replaced: list[Path] | None = None
        """The files of an earlier run removed before this run's first write (``None`` until then)."""

    def replace_earlier(self) -> list[Path]:
        """Remove the files of an earlier run (see the module docstring), once, before this run's first
        write; returns them. Called by `add` and `finish`."""
        if self.replaced is not None:
            return self.replaced
        found = earlier_results(self.folder)
        for path in found:
            path.unlink(missing_ok=True)
        if found:
            print(
                f"{self.folder}: replacing the results of an earlier run ({len(found)} file(s))",
                file=sys.stderr,
                flush=True,
            )
        self.replaced = found
        return found

    def add(self, record: Record) -> Path:
        """Write ``runs/<key>.json`` of a finished run; returns its path."""
        self.replace_earlier()
        path = self.folder / "runs" / f"{record.key}.json"
        path.parent.mkdir(exist_ok=True)
        atomic_write_json(path, {"command": self.command, "config": self.config, "run": record})
        return path

    def finish(
        self,
        *,
        complete: bool,
        runs: Sequence[Any],
        summary: list[dict[str, Any]],
        markdown: str,
        extra: dict[str, Any] | None = None,
        plots: Sequence[Plot] = (),
    ) -> list[Path]:
        """Write ``results.json``, ``results.md`` and the plots; returns the paths written.

        A plot that needs matplotlib where it is not installed is left out with a note on stderr.
        """
        from ..errors import MissingExtraError

        self.replace_earlier()
        payload = {"command": self.command, "config": self.config, "complete": complete}
        payload.update(summary=summary, runs=list(runs), figures=[name for name, _ in plots], **(extra or {}))
        written = [self.folder / "results.json", self.folder / "results.md"]
        atomic_write_json(written[0], payload)
        note = "" if complete else "\n\nInterrupted: only the runs above had finished."
        atomic_write_text(written[1], f"{markdown}{note}\n\nCommand: `{self.command}`\n")
        for name, draw in plots:
            target = self.folder / name
            try:
                with atomic_path(target, suffix=target.suffix) as tmp:
                    draw(tmp)
            except MissingExtraError as exc:
                print(f"no plot: {exc}", file=sys.stderr)
                continue
            written.append(target)
        return written
