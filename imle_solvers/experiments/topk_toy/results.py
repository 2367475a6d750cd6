"""What [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] returns: a `ToyResult` of `ToyRow`s."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ToyResult", "ToyRow"]


@dataclasses.dataclass(frozen=True)
class ToyRow:
    """One method at its best setting, re-run with fresh randomness (a row of the result table).

    ``row.gap`` and ``row["gap"]`` both read a field (the mapping-style access of the rows' earlier
    ``dict`` form is kept); [`to_dict`][imle_solvers.experiments.topk_toy.ToyRow.to_dict] gives the
    row as it is written to JSON.

    Attributes
    ----------
    method
        Label of the method (with the number of steps for the extra SFE run).
    key
        Row key: a key of `METHODS`, or ``"sfe@N"`` for the SFE run over ``N`` steps.
    lam
        Best λ (``None`` for STE and SFE).
    eta
        Best step size η.
    lr
        The SGD learning rate of that step size (``η λ`` for I-MLE, else η).
    steps
        SGD steps of the run.
    mean
        Mean of the final exact ``L`` over the runs (``inf`` when a run diverged).
    std
        Standard deviation of the final exact ``L`` over the runs.
    min
        Smallest final exact ``L`` of a run.
    max
        Largest final exact ``L`` of a run.
    gap
        ``mean − L*``.
    edge
        ``"λ"``, ``"η"`` or ``"λ, η"`` when the best value lies on the edge of its grid, else ``""``.
    """

    method: str
    key: str
    lam: float | None
    eta: float
    lr: float
    steps: int
    mean: float
    std: float
    min: float
    max: float
    gap: float
    edge: str

    def __getitem__(self, name: str) -> Any:
        """The field ``name`` (``row["gap"]`` is ``row.gap``); ``KeyError`` for any other name."""
        if name not in _ROW_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        """The row as a JSON-serialisable dict, fields in declaration order."""
        return dataclasses.asdict(self)


_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(ToyRow))


@dataclasses.dataclass
class ToyResult:
    """Outcome of [`run_toy`][imle_solvers.experiments.topk_toy.run_toy].

    Attributes
    ----------
    config
        The setup: runs, steps, seed, grids, the instance (``b``, ``θ₀``), ``L(θ₀)`` and ``L*``.
    rows
        One [`ToyRow`][imle_solvers.experiments.topk_toy.ToyRow] per method at its best setting,
        re-run with fresh randomness: ``method``, ``key``, ``lam`` (``None`` for STE/SFE), ``eta``
        (step size), ``lr`` (the SGD learning rate), ``steps``, ``mean``/``std``/``min``/``max`` of the
        final ``L`` over the runs, ``gap`` (mean ``L − L*``) and ``edge`` (``"λ"``, ``"η"``, ``"λ, η"``
        when the best value lies on the edge of its grid, else ``""``).
    curves
        ``key → {"mean": [...], "std": [...]}`` of the exact ``L`` at every step (``steps + 1`` points,
        step 0 = ``L(θ₀)``) for every row.
    grid
        Every grid point: ``key``, ``lam``, ``eta``, ``lr``, ``steps``, ``mean``, ``std`` of the final ``L``.
    seconds
        Wall-clock time of the whole experiment.
    """

    config: dict[str, Any]
    rows: list[ToyRow]
    curves: dict[str, dict[str, list[float]]]
    grid: list[dict[str, Any]]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (each row as its
        [`to_dict`][imle_solvers.experiments.topk_toy.ToyRow.to_dict])."""
        return dataclasses.asdict(self)
