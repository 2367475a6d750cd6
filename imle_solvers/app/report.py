"""What the commands print: progress bars on stderr and Markdown tables (readable in a terminal too)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["format_table", "progress", "progress_bar"]

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
    return iter(_tqdm(iterable, desc=desc, total=total, **kwargs))


def progress_bar(total: int, desc: str = "", **kwargs: Any) -> Any:
    """A tqdm bar to advance by hand (``bar.update(1)``, ``bar.close()``), as `progress` shows it."""
    return _tqdm(None, desc=desc, total=total, **kwargs)


def _tqdm(iterable: Any, **kwargs: Any) -> Any:
    import os

    from tqdm.auto import tqdm

    if os.environ.get("CI") and not sys.stderr.isatty():
        kwargs.setdefault("disable", True)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("file", sys.stderr)
    return tqdm(iterable, **kwargs)


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
