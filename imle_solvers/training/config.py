"""`TrainConfig`: every option of ``imle-solvers train`` in one frozen, keyword-only record.

Constraints are declared once (`CONSTRAINTS`, as ``torch.distributions`` declares ``arg_constraints``)
and checked twice from that one table: by the command-line parser, per option at parse time (an
argparse error, exit status 2), and by `TrainConfig` itself for callers of the Python API (a
``ValueError`` naming the field). ``None`` means "the problem's default" and is never produced by a
zero or a negative number.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._checks import distinct, in_range, integer_at_least, non_negative_int, one_of, positive, positive_int

__all__ = [
    "CONSTRAINTS",
    "DEVICES",
    "MODELS",
    "ORACLES",
    "SCHEDULES",
    "TrainConfig",
    "option_type",
    "resolve_device",
]

#: ``--schedule``: name → (epochs, batch size, lr, epochs after which the lr is divided by 10); ``None``
#: leaves the problem's default. ``paper``: the Warcraft protocol of Vlastelica et al. used by the I-MLE
#: paper (appendix, "Differentiating through Combinatorial Solvers").
SCHEDULES: dict[str, tuple[int | None, int | None, float | None, tuple[int, ...]]] = {
    "constant": (None, None, None, ()),
    "paper": (50, 70, 5e-4, (30, 40)),
}
MODELS = ("linear", "terrain-cnn", "resnet-stem")
ORACLES = ("auto", "host", "device")
DEVICES = ("cpu", "cuda", "auto")


# Each check takes one value and raises "must be …, got …" without a name (the `_checks` helpers with
# name ""): the parser prefixes the option ("argument --epochs: …"), `TrainConfig` the field.


def _integer(value: Any) -> int:
    try:
        exact = not isinstance(value, bool) and int(value) == value
    except (TypeError, ValueError, OverflowError):  # nan, inf, text
        exact = False
    if not exact:
        raise ValueError(f"must be an integer, got {value!r}")
    return int(value)


def _positive_int(value: Any) -> int:
    return positive_int("", _integer(value))


def _non_negative_int(value: Any) -> int:
    return non_negative_int("", _integer(value))


def _positive_float(value: Any) -> float:
    return positive("", float(value))


def _unit_interval(value: Any) -> float:
    return in_range("", float(value), 0, 1)


def _seed(value: Any) -> int:
    v = _integer(value)
    if not 0 <= v < 2**32:  # not in_range: its message would print 2**32 as 4.29497e+09
        raise ValueError(f"must be an integer in [0, 2**32), got {value!r}")
    return v


def _grid_size(value: Any) -> int:
    return integer_at_least("", _integer(value), 2)


def _device(value: Any) -> str:
    text = str(value)
    kind, _, index = text.partition(":")
    if kind not in DEVICES or (index and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"must be cpu, cuda, cuda:N or auto, got {value!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{text}: CUDA is not available on this machine (use --device cpu or auto)")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


#: field → check of one value (returns the value, converted; raises ``ValueError`` with the reason)
CONSTRAINTS: dict[str, Callable[[Any], Any]] = {
    "epochs": _positive_int,
    "batch_size": _positive_int,
    "lr": _positive_float,
    "n_train": _positive_int,
    "n_test": _positive_int,
    "deg": _positive_int,
    "noise_width": _unit_interval,
    "samples": _positive_int,
    "size": _grid_size,
    "tau": _positive_float,
    "lam": _positive_float,
    "workers": _non_negative_int,
    "threads": _positive_int,
    "device": _device,
}
_SEQUENCES: dict[str, Callable[[Any], Any]] = {"seeds": _seed, "lr_drops": _positive_int}


def option_type(field: str) -> Callable[[str], Any]:
    """The argparse ``type=`` of a field: parses the text and applies its constraint."""
    check = CONSTRAINTS.get(field) or _SEQUENCES[field]

    def parse(text: str) -> Any:
        try:
            if field == "device":
                return check(text)
            try:
                number: Any = int(text)
            except ValueError:
                number = float(text)
            return check(number)
        except ValueError as exc:
            reason = str(exc)
            if reason.startswith(("could not convert", "invalid literal")):
                reason = f"not a number: {text!r}"
            raise argparse.ArgumentTypeError(reason) from None

    parse.__name__ = field  # argparse names the type in "invalid <name> value" messages
    return parse


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Options of one ``imle-solvers train`` invocation (`run` takes it; ``main`` builds it).

    Fields left ``None`` take the problem's default (see ``defaults`` of
    `make_problem`); a schedule's values override those defaults, explicit fields override both.

    Attributes
    ----------
    problem
        ``shortest-path``, ``knapsack`` or ``terrain``.
    methods
        Method names (keys of `METHODS`).
    seeds
        One run per (method, seed); a seed fixes the data and the initial model.
    epochs, batch_size, lr
        Adam's schedule.
    schedule
        ``constant`` or ``paper`` (50 epochs, batch 70, lr 5e-4, lr ÷ 10 after epochs 30 and 40).
    lr_drops
        Epochs after which the learning rate is divided by 10 (default: the schedule's).
    n_train, n_test
        Data set sizes.
    deg, noise_width
        Cost model of the PyEPO problems.
    samples
        S of the perturbation methods.
    size
        Terrain grid size K.
    model
        ``linear`` (shortest path, knapsack), ``terrain-cnn`` or ``resnet-stem`` (terrain).
    noise, tau, lam, bb_loss
        I-MLE perturbation (``sog`` or ``gumbel``) and temperature, λ of the PID target, the loss behind
        ``dbb`` (``regret`` or ``hamming``).
    workers
        Solver pool processes for host oracles (0: solve in the training process).
    threads
        torch CPU threads (set by the command; `run` leaves the process's setting alone).
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available).
    oracle
        ``device`` (device-native oracles), ``host`` (the solver-backed ones) or ``auto`` (device-native
        on a GPU, host on the CPU).
    cache
        Keep generated terrain maps in the user cache folder (see `cache_dir`).
    out
        Folder for ``results.json``, ``curves.png`` and one ``runs/<method>-seed<seed>.json`` per run.
    show_progress
        Progress bars and a line per finished run.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.

    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.

    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, sec. 6 and appendix,
    <https://arxiv.org/abs/2106.01798>.
    """

    problem: str = "shortest-path"
    methods: tuple[str, ...] = ("imle-mumu", "spo+", "two-stage")
    seeds: tuple[int, ...] = (0,)
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    schedule: str = "constant"
    lr_drops: tuple[int, ...] | None = None
    n_train: int | None = None
    n_test: int | None = None
    deg: int = 1
    noise_width: float = 0.5
    samples: int | None = None
    size: int = 12
    model: str | None = None
    noise: str = "sog"
    tau: float = 1.0
    lam: float = 10.0
    bb_loss: str | None = None
    workers: int = 0
    threads: int = 1
    device: str = "cpu"
    oracle: str = "auto"
    cache: bool = True
    out: str | None = None
    show_progress: bool = True

    def __post_init__(self) -> None:
        from .methods import METHODS
        from .problems import PROBLEMS

        for name, check in CONSTRAINTS.items():
            value = getattr(self, name)
            if value is not None:
                try:
                    object.__setattr__(self, name, check(value))
                except ValueError as exc:
                    raise ValueError(f"{name} {exc}") from None
        for name, check in _SEQUENCES.items():
            values = getattr(self, name)
            if values is not None:
                try:
                    object.__setattr__(self, name, tuple(check(v) for v in values))
                except ValueError as exc:
                    raise ValueError(f"{name}: every value {exc}") from None
        object.__setattr__(self, "methods", tuple(self.methods))
        choices: dict[str, Sequence[Any]] = {
            "problem": tuple(PROBLEMS),
            "schedule": tuple(SCHEDULES),
            "noise": ("sog", "gumbel"),
            "oracle": ORACLES,
            "bb_loss": ("regret", "hamming", None),
            "model": (*MODELS, None),
        }
        for name, allowed in choices.items():
            one_of(name, getattr(self, name), allowed)
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)} or 'all'")
        for name in ("methods", "seeds"):
            distinct(name, getattr(self, name))
        if self.model is not None and (self.model == "linear") != (self.problem != "terrain"):
            fits = "terrain-cnn or resnet-stem" if self.problem == "terrain" else "linear"
            raise ValueError(f"model {self.model!r} does not fit problem {self.problem!r} (use {fits})")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TrainConfig:
        """The configuration of parsed ``imle-solvers train`` arguments (same names, by keyword)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in vars(args).items() if k in names}
        for name in ("methods", "seeds", "lr_drops"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (recorded in every result file)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def resolve_device(device: str) -> torch.device:
    """``auto`` → ``cuda`` when available, else ``cpu``; anything else as given."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
