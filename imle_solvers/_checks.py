"""Argument checks with one message format: ``"{name} must be {requirement}, got {value!r}"``.

Declared once, as `torch.distributions` declares its constraints, so that every hyper-parameter of the
library fails the same way (a ``ValueError`` naming the argument, what it must be, and what it was).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["in_range", "non_negative", "one_of", "positive", "positive_int"]


def _fail(name: str, requirement: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {requirement}, got {value!r}")


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number > 0."""
    if not (_real(value) and value > 0):
        raise _fail(name, "a finite number > 0", value)
    return float(value)


def non_negative(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number >= 0."""
    if not (_real(value) and value >= 0):
        raise _fail(name, "a finite number >= 0", value)
    return float(value)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int if it is an integer >= 1 (``3.0`` is accepted, ``2.5`` and ``True`` are not)."""
    if not (_real(value) and int(value) == value and value >= 1):
        raise _fail(name, "a positive integer", value)
    return int(value)


def in_range(name: str, value: Any, low: float, high: float, *, closed: str = "[)") -> float:
    """``value`` as a float if it lies in the interval ``low … high`` (``closed``: ``"[)"``, ``"(]"``…)."""
    ok = (
        _real(value)
        and (value >= low if closed[0] == "[" else value > low)
        and (value <= high if closed[1] == "]" else value < high)
    )
    if not ok:
        raise _fail(name, f"in {closed[0]}{low:g}, {high:g}{closed[1]}", value)
    return float(value)


def one_of(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    options = list(choices)
    if value not in options:
        raise _fail(name, "one of " + ", ".join(repr(c) for c in options), value)
    return value
