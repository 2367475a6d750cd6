"""One registry shape for the methods of every command: name → documented factory.

The methods of ``imle-solvers train``, of the top-k toy, of the VAE and of L2X are each a
[`Registry`][imle_solvers.app.registry.Registry]: an ordered, read-only mapping from a method's name to a
factory (a function) that builds it, as optax's aliases are. A method is described once, by the first line
of its factory's docstring; the help of the commands, their choices and the tests of the documentation
read it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable[..., Any])


class Registry(Mapping[str, F], Generic[F]):
    """An ordered mapping ``name → factory``; each factory documented by its docstring's first line.

    Parameters
    ----------
    kind
        What the entries are ("training method"), for error messages.
    entries
        ``(name, factory)`` pairs, in the order of tables and help.
    """

    def __init__(self, kind: str, entries: Mapping[str, F]) -> None:
        self.kind = kind
        self._entries = dict(entries)
        for name, factory in self._entries.items():
            if not (factory.__doc__ or "").strip():
                raise TypeError(f"{kind} {name!r}: its factory {factory.__name__} has no docstring")

    def __getitem__(self, name: str) -> F:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; choose from {', '.join(self)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, [{', '.join(self)}])"

    def help(self, name: str) -> str:
        """The first line of the factory's docstring, without its final period."""
        return (self[name].__doc__ or "").strip().splitlines()[0].rstrip(".")

    def listing(self, width: int | None = None) -> str:
        """One line ``  name  help`` per entry, the names padded to ``width`` (default: the longest), for a
        command's ``--help``."""
        width = max((len(name) for name in self), default=0) if width is None else width
        return "\n".join(f"  {name:<{width}}  {self.help(name)}" for name in self)
