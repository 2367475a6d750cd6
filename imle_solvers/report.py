"""Reporting shared by the command line, benchmarks and examples: progress bars, tables, result files."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["format_table", "progress", "write_outputs"]

T = TypeVar("T")


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None, **kwargs: Any) -> Iterator[T]:
    """A tqdm progress bar on stderr (disabled when stderr is not a terminal and ``CI`` is set).

    Parameters
    ----------
    iterable
        What to iterate over.
    desc
        Label in front of the bar.
    total
        Length when ``iterable`` has no ``len``.
    **kwargs
        Passed to `tqdm.tqdm` (e.g. ``leave=False``).
    """
    import os

    from tqdm.auto import tqdm

    if os.environ.get("CI") and not sys.stderr.isatty():
        kwargs.setdefault("disable", True)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("file", sys.stderr)
    return iter(tqdm(iterable, desc=desc, total=total, **kwargs))


def _cell(value: Any, precision: int) -> str:
    if isinstance(value, float):
        return f"{value:.{precision}g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return str(value)


def format_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, precision: int = 4
) -> str:
    """Render rows of dicts as a GitHub-flavoured Markdown table (readable in a terminal too).

    Parameters
    ----------
    rows
        One dict per row; missing keys render empty.
    columns
        Column order (default: keys of the first row, then any new keys in order of appearance).
    precision
        Significant digits for floats.
    """
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    cells = [[_cell(row.get(c, ""), precision) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in cells]
    return "\n".join([line, sep, *body])


def write_outputs(
    out: Path,
    stem: str,
    save_json: Callable[[Path], object],
    markdown: str,
    command: str,
    plots: Callable[[], Sequence[Path]] | None = None,
) -> list[Path]:
    """Write an experiment's files to ``out``: ``{stem}.json``, ``{stem}.md`` and its plots.

    Parameters
    ----------
    out
        Output folder (created).
    stem
        File name without suffix.
    save_json
        Writes the JSON file to the path it is given (the result's ``save_json``).
    markdown
        The Markdown text (header and table); the command is quoted after it.
    command
        The command line that produced the result.
    plots
        Draws the figures into ``out`` and returns their paths; without matplotlib
        ([`MissingExtraError`][imle_solvers.errors.MissingExtraError]) a note goes to stderr instead.

    Returns
    -------
    list[Path]
        The paths written.
    """
    from .errors import MissingExtraError

    out.mkdir(parents=True, exist_ok=True)
    save_json(out / f"{stem}.json")
    (out / f"{stem}.md").write_text(f"{markdown}\n\nCommand: `{command.strip()}`\n")
    written = [out / f"{stem}.json", out / f"{stem}.md"]
    if plots is not None:
        try:
            written += list(plots())
        except MissingExtraError as exc:
            print(f"no plot: {exc}", file=sys.stderr)
    return written
