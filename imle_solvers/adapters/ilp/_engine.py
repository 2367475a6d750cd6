"""The one interface every ILP back end implements, and the oracle that turns its outcome into a state.

An *engine* holds a solver's model of a fixed constraint set and solves it for one cost vector at a
time: ``engine.solve(costs) -> Outcome``, always minimising ``⟨c, x⟩``. The CBC, HiGHS, CP-SAT and
PuLP-object engines implement it (``_cbc.py``, ``_highs.py``, ``cpsat.py``, ``pulp.py``);
`EngineOracle` is the shared front: it validates the weights, turns them into costs, and maps an
`Outcome` to a checked state or to one of the typed errors of [`imle_solvers.errors`][imle_solvers.errors].
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from ...errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidWeightsError,
    SolverTimeoutError,
    UnboundedError,
    UnprovenSolutionWarning,
)
from ...oracle import MapOracle
from ._check import FeasibilityCheck
from ._linear import SMALL

__all__ = ["Engine", "EngineOracle", "Outcome", "PerThreadModel", "Status", "check_single", "scaled_costs"]

Status = Literal["optimal", "feasible", "infeasible", "unbounded", "timeout", "error"]
"""How a solve ended: ``"feasible"`` is a state found at the time limit, not proven optimal;
``"timeout"`` is the time limit without any state; ``"error"`` any other failure."""


class Outcome(NamedTuple):
    """What an engine returns for one solve."""

    status: Status
    """How the solve ended."""
    values: Sequence[float] | None = None
    """Column values for ``"optimal"`` and ``"feasible"`` (every column of the engine's model, in its
    order), else ``None``."""
    detail: str = ""
    """The solver's own words, quoted in error messages."""


class Engine(Protocol):
    """A solver's model of fixed constraints; each `solve` minimises ``⟨costs, x⟩`` over it.

    An engine raises ``KeyboardInterrupt`` when Ctrl-C stops a solve on the main thread and
    [`ImleSolversError`][imle_solvers.errors.ImleSolversError] when `stop_solves` stops one on another
    thread; every other ending is an `Outcome`.
    """

    integral: bool
    """``True`` when the engine computes in exact integers (its values need no integrality snapping)."""

    def solve(self, costs: np.ndarray) -> Outcome:
        """Minimise ``⟨costs, x⟩`` (``costs``: ``(m,)`` float64, the weighted columns) over the model."""
        ...


class PerThreadModel:
    """Base of the engines that keep one solver model per thread in ``self._local`` (a
    ``threading.local``): the model is left out when the engine is pickled (to a pool's workers) and
    built again on first use where it lands."""

    _local: threading.local

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()


def check_single(weights: Any, n_vars: int, owner: str) -> np.ndarray:
    """``(m,)`` float64 weights, or [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] for a
    wrong shape or NaN/inf entries.

    A finite sum proves every entry finite (NaN and ±inf propagate), so the element-wise test only runs
    when the sum is not finite: one cheap reduction on the hot path of every solve.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_vars,):
        raise InvalidWeightsError(f"{owner} expects weights of shape ({n_vars},), got {w.shape}")
    total = sum(w.tolist()) if n_vars <= SMALL else w.sum()  # small: no ufunc dispatch per solve
    if not math.isfinite(total):
        with np.errstate(over="ignore"):
            if not np.isfinite(w).all():
                raise InvalidWeightsError("weights contain NaN or inf")
    return w


def scaled_costs(costs: np.ndarray) -> np.ndarray:
    """``costs · 2^-e`` with ``e`` the binary exponent of ``max|c|``, so that the largest cost lies in
    ``[1/2, 1)``: exact (a power of two only moves the exponents) and the same optimum, while a MIP solver
    sees costs of the size its tolerances are made for. HiGHS takes costs from 10²⁰ as infinite and CBC
    reports numerical trouble or unboundedness from about 10¹⁵; a solver's absolute optimality gap of
    ``δ`` on the scaled objective is a gap of at most ``2δ·max|c|`` on the given one.  ``(m,)``"""
    top = float(np.max(np.abs(costs))) if costs.size else 0.0
    if top == 0.0:
        return costs
    _, exponent = math.frexp(top)  # top = f · 2^exponent, f ∈ [1/2, 1)
    return np.ldexp(costs, -exponent)


class EngineOracle(MapOracle):
    """A [`MapOracle`][imle_solvers.MapOracle] over an `Engine`: weights → costs → `Outcome` → state.

    Subclasses set `_engine`, `_check`, `label`, `time_limit` and `strict` (and the `MapOracle`
    attributes) in their constructors.
    """

    _engine: Engine
    _check: FeasibilityCheck | None
    """The declared model's solution check (oracles built from a `LinearForm`), or ``None``: the engine's
    values are then the state itself."""
    label: str
    """How messages name the oracle, e.g. ``"PulpOracle(cbc)"``."""
    time_limit: float | None
    strict: bool

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` instance (weights in `sense`, negative ones included)."""
        w = check_single(weights, self.n_vars, self.label)
        costs = w if self.sense == "min" else -w  # always minimise c   [m]
        return self._state(self._engine.solve(scaled_costs(costs)))

    def _state(self, outcome: Outcome) -> np.ndarray:
        """The checked state of a solved outcome, or the typed error of any other."""
        status, values, detail = outcome
        name = self.label
        if status == "optimal" or status == "feasible":
            assert values is not None
            if self._check is not None:  # integer columns snapped, rows and bounds checked
                z = self._check(values, name, integral=self._engine.integral)[: self.n_vars]
            else:
                z = np.array(values[: self.n_vars], dtype=np.float64)  # state   [m]
            if status == "feasible":
                self._unproven()
            return z
        said = f" ({detail})" if detail else ""
        if status == "infeasible":
            raise InfeasibleError(f"{name}: the model is infeasible{said}")
        if status == "unbounded":
            raise UnboundedError(f"{name}: the objective is unbounded for these weights{said}")
        if status == "timeout":
            raise SolverTimeoutError(
                f"{name}: no feasible state found within the time limit of {self.time_limit} s"
            )
        raise ImleSolversError(f"{name}: solver failed{said}")

    def _unproven(self) -> None:
        """A feasible state that the time limit left unproven: warn, or raise
        [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] when `strict`."""
        message = (
            f"{self.label}: time limit of {self.time_limit} s reached with a feasible state that is not "
            "proven optimal"
        )
        if self.strict:
            raise SolverTimeoutError(message + " (strict=True)")
        warnings.warn(
            message + "; returning it (pass strict=True to raise instead)",
            UnprovenSolutionWarning,
            stacklevel=4,
        )
