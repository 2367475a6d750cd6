"""Command configurations: one frozen, keyword-only dataclass per command, and its parser generated from it.

A field declares everything about a setting once, with [`option`][imle_solvers.app.config.option]: its type
(the annotation), default, choices, constraint and help. From these the command's `argparse` parser is
built ([`CommandConfig.parser`][imle_solvers.app.config.CommandConfig.parser]), whose help shows every
default, and the same declarations check the configuration built from Python
(``TrainConfig(epochs=0)`` raises [`ConfigError`][imle_solvers.errors.ConfigError]), as
``torch.distributions`` checks its ``arg_constraints``. A constraint is a function of one value that returns
it (converted) or raises ``ValueError("must be …, got …")``; a parser reports it as
``argument --epochs: must be …`` with exit status 2, the Python API as ``epochs must be …``.

Annotations understood: ``int``, ``float``, ``str``, ``bool``, ``tuple[X, ...]`` of those (``nargs="+"``;
without repeats, and non-empty unless the field may be ``None``, where ``()`` says "none" explicitly) and
``X | None``. A ``bool`` field is a flag: ``--name`` when its default is ``False``, or the ``flags`` given
(``--quiet``, ``--no-cache``) that turn it off when its default is ``True``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, NoReturn, TypeVar

from .._checks import integer_at_least, non_negative_int, positive, positive_int
from ..errors import ConfigError
from .machine import check_device, check_output_dir, device_name

__all__ = [
    "COUNT_MAX",
    "THREADS_MAX",
    "CommandConfig",
    "OnDevice",
    "Option",
    "Parser",
    "Progress",
    "RunSettings",
    "Seeded",
    "Threaded",
    "Written",
    "choose",
    "count",
    "count_at_least",
    "inherit",
    "non_negative_count",
    "option",
    "path_text",
    "positive_number",
    "seed_value",
    "shown",
    "thread_count",
    "usage_error",
]

Check = Callable[[Any], Any]
Text = str | Callable[[], str]
C = TypeVar("C", bound="CommandConfig")


@dataclasses.dataclass(frozen=True)
class Option:
    """How one configuration field appears on the command line (see `option`)."""

    help: Text
    flags: tuple[str, ...] = ()
    check: Check | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    metavar: str | None = None
    positional: bool = False
    default_text: Text | None = None
    shared: bool = False
    """A run setting every command declares alike (see `RunSettings`): listed after the command's own."""


def option(
    default: Any,
    help: Text,
    *,
    flags: Sequence[str] = (),
    check: Check | None = None,
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
    metavar: str | None = None,
    positional: bool = False,
    default_text: Text | None = None,
) -> Any:
    """A configuration field that is also a command-line option.

    Parameters
    ----------
    default
        The default value (a tuple for sequences); ``dataclasses.MISSING`` for a required setting.
    help
        One line for ``--help`` (or a function that builds it, e.g. from a registry); the default is
        appended to it.
    flags
        The option strings, first the canonical one; default ``--field-name``. Further strings are
        aliases (old spellings keep working).
    check
        Constraint of one value (of each value of a sequence).
    choices
        Allowed values (or a function giving them, read when the parser is built).
    metavar
        Name of the value in the usage line.
    positional
        A positional argument instead of an option.
    default_text
        How the help states a default that is not a plain value (``None`` meaning "the problem's").
    """
    spec = Option(help, tuple(flags), check, choices, metavar, positional, default_text)
    if default is dataclasses.MISSING:  # a required setting (a positional argument)
        return dataclasses.field(metadata={"option": spec})
    return dataclasses.field(default=default, metadata={"option": spec})


@dataclasses.dataclass(frozen=True)
class _Field:
    """A field and its resolved type: ``base`` (int, float, str, bool), a sequence or not, ``None`` or not."""

    name: str
    option: Option
    base: type
    many: bool
    optional: bool
    default: Any

    @property
    def flags(self) -> tuple[str, ...]:
        return self.option.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def label(self) -> str:
        """How the command line names it: ``--epochs`` or the positional's name."""
        return self.name if self.option.positional else "/".join(self.flags)

    def choices(self) -> tuple[str, ...] | None:
        found = self.option.choices
        return None if found is None else tuple(found() if callable(found) else found)

    def describe(self) -> str:
        """The help text without the default."""
        return self.option.help() if callable(self.option.help) else self.option.help

    def default_text(self) -> str:
        """The default as the help and the documentation state it (``off`` for a flag, ``""`` if required)."""
        if self.base is bool:
            return "off"
        if self.default is dataclasses.MISSING:
            return ""
        shown = self.option.default_text
        shown = shown() if callable(shown) else shown
        return render(self.default) if shown is None else shown

    def help(self) -> str:
        text = self.describe()
        if self.base is bool or self.default is dataclasses.MISSING:
            return text  # a flag's default is its absence; a required setting has none
        return f"{text} (default: {self.default_text()})"

    def convert(self, value: Any) -> Any:
        """Check one value of the Python API (a whole sequence for ``many``); raise ``ValueError``."""
        if value is None:
            if self.optional:
                return None
            raise ValueError("must be given, got None")
        if not self.many:
            return self._one(value)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | Iterator):
            raise ValueError(f"must be a sequence of values, got {value!r}")
        values = tuple(value)
        items = tuple(self._one(v) for v in values)
        if (not items and not self.optional) or len(set(items)) != len(items):
            raise ValueError(f"must be non-empty and without repeats, got {list(values)!r}")
        return items

    def _one(self, value: Any) -> Any:
        if self.base is bool:
            if not isinstance(value, bool):
                raise ValueError(f"must be True or False, got {value!r}")
        elif self.base is int:
            value = integer(value)
        elif self.base is float:
            value = number(value)
        elif self.base is str:
            if not isinstance(value, str):
                raise ValueError(f"must be a string, got {value!r}")
        allowed = self.choices()
        if allowed is not None:
            value = choose(value, allowed)
        if self.option.check is not None:
            value = self.option.check(value)
        if self.base is int and not INT64_MIN <= value <= INT64_MAX:  # whatever the check: torch's int64
            raise ValueError(f"must fit in 64 bits, got {shown(value)}")
        return value

    def parse(self, text: str) -> Any:
        """The argparse ``type=``: one value from its text."""
        try:
            if self.base is int:
                value: Any = _number_text(text)
            elif self.base is float:
                value = float(text)
                if math.isinf(value) and text.strip().lstrip("+-").lower() not in ("inf", "infinity"):
                    cut = text if len(text) <= 40 else f"{text[:39]}…"  # 5,000 digits: say what was typed
                    raise ValueError(f"must be a finite number, got {cut}")
            else:
                value = text
            return self._one(value)
        except ValueError as exc:
            reason = str(exc)
            if reason.startswith(("could not convert", "invalid literal", "Exceeds the limit")):
                reason = f"not a number: {shown(text)}"
            raise argparse.ArgumentTypeError(reason) from None


def _number_text(text: str) -> int | float:
    try:
        return int(text)
    except ValueError as exc:
        if str(exc).startswith("Exceeds the limit"):  # more than 4300 digits
            raise
        return float(text)  # "2.0" is the integer 2; "1.5" and "inf" fail the integer check


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (a value typed by a user may be huge)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def choose(value: Any, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``; one of them if it differs only in case; else a
    ``ValueError`` listing them, with the closest as a suggestion (``did you mean 'imle-mumu'?``)."""
    if value in allowed:
        return str(value)
    text = str(value)
    same = [c for c in allowed if c.casefold() == text.casefold()]
    if len(same) == 1:  # IMLE-MUMU is imle-mumu
        return same[0]
    listing = ", ".join(repr(c) for c in allowed)
    close = difflib.get_close_matches(text.casefold(), [c.casefold() for c in allowed], n=1, cutoff=0.6)
    hint = ""
    if close:
        hint = f" (did you mean {next(c for c in allowed if c.casefold() == close[0])!r}?)"
    raise ValueError(f"must be one of {listing}, got {shown(value)}{hint}")


def integer(value: Any) -> int:
    """``value`` as an int if it is an integer (``3.0`` is; ``2.5``, ``inf``, ``True``, ``"3"`` are not)."""
    try:
        exact = not isinstance(value, (bool, str)) and int(value) == value
    except (TypeError, ValueError, OverflowError):  # nan, inf, objects
        exact = False
    if not exact:
        raise ValueError(f"must be an integer, got {value!r}")
    return int(value)


def number(value: Any) -> float:
    """``value`` as a float if it is a real number (``nan`` and ``inf`` pass: constraints judge them)."""
    if isinstance(value, (bool, str)):
        raise ValueError(f"must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, got {value!r}") from None


# --- the kinds of option: one constraint each, given as ``check=`` ---------------------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""What every integer option must fit, whatever its kind: torch's and NumPy's 64-bit integers."""

COUNT_MAX = 2**31 - 1
"""The largest count an option takes (epochs, steps, instances, samples, widths, workers…): torch's
32-bit C ``int`` arguments, far beyond any count a run can use; larger values are refused before any
work instead of overflowing inside torch after it started."""

THREADS_MAX = 1024
"""The most torch CPU threads ``--threads`` takes: beyond a machine's cores more threads only slow a run
down, and from some ten thousand torch's thread pool crashes the process."""


def count(value: Any) -> int:
    """The constraint of a count setting (epochs, samples, a width, …): an integer in
    ``[1, COUNT_MAX]``.

    Given as ``check=count`` to [`option`][imle_solvers.app.config.option]; a value below 1, above
    `COUNT_MAX`, a fraction or a bool is refused with a
    [`ConfigError`][imle_solvers.errors.ConfigError] naming the field.
    """
    return _at_most(positive_int("", value), COUNT_MAX)


def non_negative_count(value: Any) -> int:
    """The constraint of a count that may be 0 (solver pool processes, extra steps): an integer in
    ``[0, COUNT_MAX]``."""
    return _at_most(non_negative_int("", value), COUNT_MAX)


def count_at_least(low: int) -> Check:
    """The constraint of a count with a floor (a grid size ≥ 2): an integer in ``[low, COUNT_MAX]``."""

    def check(value: Any) -> int:
        return _at_most(integer_at_least("", value, low), COUNT_MAX)

    return check


def thread_count(value: Any) -> int:
    """The constraint of ``--threads``: an integer in ``[1, THREADS_MAX]``."""
    return _at_most(positive_int("", value), THREADS_MAX)


def _at_most(value: int, high: int) -> int:
    if value > high:
        raise ValueError(f"must be at most {high}, got {shown(value)}")
    return value


def seed_value(value: Any) -> int:
    """The constraint of a seed: an integer in ``[0, 2**32)`` (what ``torch.manual_seed`` and NumPy take)."""
    if not 0 <= value < 2**32:  # not in_range: its message would print 2**32 as 4.29497e+09
        raise ValueError(f"must be an integer in [0, 2**32), got {shown(value)}")
    return int(value)


def positive_number(value: Any) -> float:
    """The constraint of a rate, scale or temperature setting: a finite number above 0.

    Given as ``check=positive_number`` to [`option`][imle_solvers.app.config.option].
    """
    return positive("", value)


def path_text(value: str) -> str:
    """The constraint of a file or folder setting: a non-empty name (``""`` would be the current
    folder), without surrounding spaces (a quoting slip)."""
    if not value or value != value.strip():
        raise ValueError(f"must be a file or folder name, got {shown(value)}")
    return value


def render(value: Any) -> str:
    """A default as the command line spells it: ``0 1 2`` for a tuple, ``none`` for ``None``."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return " ".join(render(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else str(value)
    return str(value)


def _resolve(cls: type, hint: Any) -> tuple[type, bool, bool]:
    """``(base, many, optional)`` of an annotation."""
    optional = False
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        optional = len(rest) < len(args)
        if len(rest) != 1:
            raise TypeError(f"{cls.__name__}: unsupported option type {hint!r}")
        hint = rest[0]
        args = typing.get_args(hint)
    many = typing.get_origin(hint) is tuple
    if many:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{cls.__name__}: sequences must be tuple[X, ...], got {hint!r}")
        hint = args[0]
    if hint not in (int, float, str, bool):
        raise TypeError(f"{cls.__name__}: unsupported option type {hint!r}")
    return hint, many, optional


_FIELDS: dict[type, tuple[_Field, ...]] = {}


def fields(cls: type) -> tuple[_Field, ...]:
    """The option fields of a configuration class, in declaration order (computed once per class)."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            spec = f.metadata.get("option")
            if spec is None:
                continue
            base, many, optional = _resolve(cls, hints[f.name])
            if base is bool and f.default is True and not spec.flags:
                raise TypeError(f"{cls.__name__}.{f.name}: a flag that defaults to True needs flags=")
            found.append(_Field(f.name, spec, base, many, optional, f.default))
        found.sort(key=lambda field: field.option.shared)  # the command's own options first
        _FIELDS[cls] = tuple(found)
    return _FIELDS[cls]


def usage_error(prog: str, reason: str) -> str:
    """What a command prints for a usage error: one line saying what is wrong, one line pointing to
    ``--help`` (the usage block would bury the reason)."""
    return f"{prog}: error: {' '.join(reason.split())}\nTry '{prog} --help' for more information.\n"


class Parser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors are `usage_error`'s two lines (exit status 2), and which
    suggests the closest option for a misspelt one."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            message += self._suggestion(message.removeprefix("unrecognized arguments: ").split())
        self.exit(2, usage_error(self.prog, message))

    def _suggestion(self, words: list[str]) -> str:
        known = [flag for action in self._actions for flag in action.option_strings]
        for word in words:
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommandConfig:
    """Base of the configuration of every ``imle-solvers`` command.

    Subclasses are ``@dataclasses.dataclass(frozen=True, kw_only=True)`` and declare their fields with
    [`option`][imle_solvers.app.config.option]; they may override `validate` (checks that combine fields,
    and normalisation) and `preflight` (checks of the machine: a device, a path). Fields without
    `option` are settings of the Python API only.
    """

    command: ClassVar[str] = ""
    """The command's name (``imle-solvers {command}``)."""
    description: ClassVar[str] = ""
    """The text of ``--help`` above the options."""
    epilog: ClassVar[str] = ""
    """The text of ``--help`` below the options (examples)."""

    def __post_init__(self) -> None:
        for spec in fields(type(self)):
            try:
                value = spec.convert(getattr(self, spec.name))
            except ValueError as exc:
                raise ConfigError(str(exc), spec.name) from None
            object.__setattr__(self, spec.name, value)
        self.validate()

    def validate(self) -> None:
        """Check what combines fields; raise [`ConfigError`][imle_solvers.errors.ConfigError]."""

    def preflight(self) -> None:
        """Check what depends on this machine (a device, a folder), before any work starts.

        The base checks ``device`` and ``out`` where the configuration has them; raises
        [`ConfigError`][imle_solvers.errors.ConfigError].
        """
        device = getattr(self, "device", None)
        if isinstance(device, str):
            check_device(device)
        out = getattr(self, "out", None)
        if out is not None:
            check_output_dir(out)

    @classmethod
    def help_epilog(cls) -> str:
        """The text of ``--help`` below the options: `epilog` (a subclass may add what it generates)."""
        return cls.epilog

    def interrupted(self, done: int) -> str:
        """The line a command ends with on Ctrl-C, when ``done`` runs had finished (and were printed)."""
        return (
            f"interrupted: {done} finished run(s), printed above"
            if done
            else "interrupted: no run had finished"
        )

    def replace(self: C, **changes: Any) -> C:
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready value (tuples as lists)."""
        return {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """The command's parser, generated from the fields."""
        parser = Parser(
            prog=f"imle-solvers {cls.command}",
            description=cls.description,
            epilog=cls.help_epilog() or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for spec in fields(cls):
            kwargs: dict[str, Any] = {"help": spec.help()}
            if spec.default is not dataclasses.MISSING:
                kwargs["default"] = spec.default
            elif not spec.option.positional:
                kwargs["required"] = True
            if spec.base is bool:
                action = "store_false" if spec.default else "store_true"
                parser.add_argument(*spec.flags, dest=spec.name, action=action, help=kwargs["help"])
                continue
            kwargs["type"] = spec.parse
            choices = spec.choices()
            if choices is not None:
                kwargs["choices"] = list(choices)
                kwargs["metavar"] = spec.option.metavar or (
                    spec.name.upper() if spec.option.positional else None
                )
            elif spec.option.metavar:
                kwargs["metavar"] = spec.option.metavar
            if spec.many:
                kwargs["nargs"] = "+"
            if spec.option.positional:
                parser.add_argument(spec.name, **kwargs)
            else:
                parser.add_argument(*spec.flags, dest=spec.name, **kwargs)
        return parser

    @classmethod
    def from_argv(cls: type[C], argv: Sequence[str]) -> C:
        """Parse and check ``argv``: the configuration, with the machine checked too (`preflight`).

        Any error prints one line and a pointer to ``--help`` (`usage_error`) and exits with status 2
        (``SystemExit``), before any work.
        """
        parser = cls.parser()
        args = vars(parser.parse_args(list(argv)))
        try:
            config = cls(**{spec.name: args[spec.name] for spec in fields(cls)})
            config.preflight()
        except ConfigError as exc:
            parser.error(cls.explain(exc))
        return config

    @classmethod
    def explain(cls, error: ConfigError) -> str:
        """A [`ConfigError`][imle_solvers.errors.ConfigError] as the command line says it
        (``argument --epochs: must be …``)."""
        spec = next((s for s in fields(cls) if s.name == error.field), None)
        return str(error) if spec is None else f"argument {spec.label}: {error.reason}"


# --- the run settings every command shares ---------------------------------------------------------------


def _shared(default: Any, help: Text, **kwargs: Any) -> Any:
    """A run setting declared once for every command that inherits it (listed after the command's own)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, shared=True, **kwargs)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Seeded(CommandConfig):
    """A command that runs once per seed: ``--seeds`` (alias ``--seed``)."""

    seeds: tuple[int, ...] = _shared(
        (0,),
        "one run per seed: its data, initialisation and noise",
        flags=("--seeds", "--seed"),
        check=seed_value,
        metavar="SEED",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnDevice(CommandConfig):
    """A command that computes on a torch device: ``--device``."""

    device: str = _shared(
        "cpu",
        "cpu, cuda, cuda:N or auto (cuda when available): model, data and noise live there",
        check=device_name,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Threaded(CommandConfig):
    """A command that sets torch's CPU threads for its run (restored afterwards): ``--threads``."""

    threads: int = _shared(1, f"torch CPU threads during the run (at most {THREADS_MAX})", check=thread_count)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Written(CommandConfig):
    """A command that writes its results to a folder: ``--out``."""

    out: str | None = _shared(
        None,
        "write the results to this folder (results.json, results.md, the figures, and runs/<run>.json as "
        "each run finishes; an earlier run's results there are replaced)",
        metavar="DIR",
        check=path_text,
        default_text="none: nothing is written",
    )

    def written(self, files: str) -> str:
        """The line a finished command ends with: where ``files`` (``"results.json and results.md"``)
        were written, or how to keep them."""
        if self.out is None:
            return f"nothing written (add --out DIR to keep {files})"
        return f"wrote {files} to {self.out}"

    def interrupted(self, done: int) -> str:
        """Where the finished runs are kept (or how to keep them next time)."""
        if self.out is None:
            kept = " (add --out DIR to keep them)" if done else ""
            return super().interrupted(done) + kept
        if not done:
            return f"interrupted: no run had finished; {self.out} left as it was"
        runs, results = os.path.join(self.out, "runs"), os.path.join(self.out, "results.json")
        return f"interrupted: {done} finished run(s) kept in {runs} (summary in {results})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress(CommandConfig):
    """A command with progress bars: ``--quiet`` (alias ``--no-progress``) turns them off."""

    show_progress: bool = _shared(True, "no progress bars", flags=("--quiet", "--no-progress"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings(Progress, Written, Threaded, OnDevice, Seeded):  # fields: seeds ... show_progress
    """The run settings of a command that trains: seeds, device, threads, output folder, progress.

    Declared once here (flags, constraint, help); a command inherits them and may change a default
    with [`inherit`][imle_solvers.app.config.inherit], nothing else. They are listed after the
    command's own options.
    """


_SHARED_CLASSES = (Seeded, OnDevice, Threaded, Written, Progress)


def inherit(name: str, default: Any, *, default_text: Text | None = None) -> Any:
    """A shared run setting (a field of `RunSettings`) with the command's own default; its flags,
    constraint and help stay as declared once. ``default_text`` states a default that is not a plain
    value (``None`` meaning "the quick or full experiment's")."""
    for cls in _SHARED_CLASSES:
        for f in dataclasses.fields(cls):
            if f.name == name:
                declared: Option = f.metadata["option"]
                return dataclasses.field(
                    default=default,
                    metadata={"option": dataclasses.replace(declared, default_text=default_text)},
                )
    raise ValueError(f"{name!r} is not a shared run setting")


def _json(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value
