"""Argument checks with one message format: ``"{name} must be {requirement}, got {value!r}"``.

Declared once, as `torch.distributions` declares its constraints, so that every hyper-parameter of the
library fails the same way (a ``ValueError`` naming the argument, what it must be, and what it was).
Numbers are Python or NumPy scalars (``numbers.Real``, booleans excluded). An empty ``name`` leaves the
naming to the caller: ``"must be …, got …"`` (a command-line parser prefixes the option). A value of the
wrong type for an object-valued argument (a noise, a target, an oracle) is a ``TypeError`` in the same
format, with advice when a class was passed where an instance belongs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

__all__ = [
    "distinct",
    "in_range",
    "instance_of",
    "integer_at_least",
    "non_negative",
    "non_negative_int",
    "one_of",
    "positive",
    "positive_int",
]


def _fail(name: str, requirement: str, value: Any) -> ValueError:
    subject = f"{name} must be" if name else "must be"
    return ValueError(f"{subject} {requirement}, got {value!r}")


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _integral(value: Any) -> bool:
    return _real(value) and int(value) == value


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
    if not (_integral(value) and value >= 1):
        raise _fail(name, "a positive integer", value)
    return int(value)


def non_negative_int(name: str, value: Any) -> int:
    """``value`` as an int if it is an integer >= 0 (``0.0`` is accepted, ``-1`` and ``False`` are not)."""
    if not (_integral(value) and value >= 0):
        raise _fail(name, "a non-negative integer", value)
    return int(value)


def integer_at_least(name: str, value: Any, low: int) -> int:
    """``value`` as an int if it is an integer >= ``low``."""
    if not (_integral(value) and value >= low):
        raise _fail(name, f"an integer >= {low}", value)
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


def distinct(name: str, values: Iterable[Any]) -> tuple[Any, ...]:
    """``values`` as a tuple if it is non-empty and without repeats."""
    items = tuple(values)
    if not items or len(set(items)) != len(items):
        raise _fail(name, "non-empty and without repeats", list(items))
    return items


def instance_of(name: str, value: Any, kind: type, *, optional: bool = False) -> Any:
    """``value`` if it is an instance of ``kind`` (or ``None`` when ``optional``), else a ``TypeError``.

    A subclass of ``kind`` passed as a class (``IMLE(oracle, Gumbel)``) gets the advice to instantiate it.
    """
    if isinstance(value, kind) or (optional and value is None):
        return value
    requirement = f"a {kind.__name__} instance" + (" or None" if optional else "")
    if isinstance(value, type) and issubclass(value, kind):
        got = f"the class {value.__name__}; pass an instance, e.g. {value.__name__}(...)"
    elif isinstance(value, type):
        got = f"the class {value.__name__}"
    else:
        got = f"{_short_repr(value)} ({type(value).__name__})"
    raise TypeError(f"{name} must be {requirement}, got {got}")


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
