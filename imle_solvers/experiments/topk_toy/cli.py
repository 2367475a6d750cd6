"""``imle-solvers toy``: `ToyConfig` (its parser is generated from it), `run` and `main`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ...app.command import Command
from ...app.config import (
    Progress,
    Written,
    count,
    non_negative_count,
    option,
    positive_number,
    render,
    seed_value,
)
from ...app.session import Session
from .methods import DEFAULT_METHODS, METHODS
from .report import ROWS, plot, result_table
from .results import ToyResult, ToyRow
from .run import DEFAULT_LAMBDAS, DEFAULT_LRS, DEFAULT_SFE_LRS, LONG_STEPS, RUNS, run_toy

__all__ = ["COMMAND", "QUICK", "ToyConfig", "build_parser", "main", "run"]

QUICK: dict[str, Any] = {
    "runs": 10,
    "lambdas": (1.0, 3.0),
    "lrs": (0.3, 1.0),
    "sfe_lrs": (0.003, 0.01),
    "long_steps": 100,
}
"""What ``--quick`` changes: 10 runs, a 2 × 2 grid, the extra SFE run over 100 steps (seconds)."""

_FULL: dict[str, Any] = {
    "runs": RUNS,
    "lambdas": DEFAULT_LAMBDAS,
    "lrs": DEFAULT_LRS,
    "sfe_lrs": DEFAULT_SFE_LRS,
    "long_steps": LONG_STEPS,
}


def _default(name: str) -> str:
    return f"{render(_FULL[name])}; --quick: {render(QUICK[name])}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(Progress, Written):
    """Settings of ``imle-solvers toy`` (`run` takes it); ``None`` takes the full experiment's value, or
    the quick one with ``quick``. The toy runs on one torch thread (its tensors are tiny: threads only
    add synchronisation), so it has no ``threads`` setting.

    Attributes
    ----------
    runs
        Runs per grid point.
    steps
        SGD steps of a run.
    long_steps
        Steps of the extra SFE run (0: none).
    seed
        Seed of the instance (``b``, ``θ₀``) and of the estimators' randomness.
    methods
        Keys of [`METHODS`][imle_solvers.experiments.topk_toy.METHODS].
    lambdas
        λ grid of the I-MLE methods.
    lrs
        Step-size grid of I-MLE and STE.
    sfe_lrs
        Learning-rate grid of the SFE.
    quick
        A small grid and few runs (seconds).
    out
        Folder for ``results.json``, ``results.md`` and ``topk_toy.png``.
    show_progress
        A progress bar.
    """

    command: ClassVar[str] = "toy"
    description: ClassVar[str] = (
        "The I-MLE paper's synthetic top-k experiment (m=10, k=5, exact L by enumeration): a (λ, η) grid "
        "per method,\nthen each method's best setting run again with fresh randomness."
    )

    runs: int | None = option(None, "runs per grid point", check=count, default_text=lambda: _default("runs"))
    steps: int = option(50, "SGD steps", check=count)
    long_steps: int | None = option(
        None,
        "steps of the extra SFE run (0: none)",
        check=non_negative_count,
        default_text=lambda: _default("long_steps"),
    )
    seed: int = option(0, "seed of the instance and of the noise", check=seed_value)
    methods: tuple[str, ...] = option(
        DEFAULT_METHODS,
        "methods to compare (listed below)",
        flags=("--methods", "--method"),
        choices=lambda: tuple(METHODS),
        metavar="NAME",
    )
    lambdas: tuple[float, ...] | None = option(
        None, "λ grid of I-MLE", check=positive_number, metavar="λ", default_text=lambda: _default("lambdas")
    )
    lrs: tuple[float, ...] | None = option(
        None,
        "step-size grid η of I-MLE and STE",
        check=positive_number,
        metavar="η",
        default_text=lambda: _default("lrs"),
    )
    sfe_lrs: tuple[float, ...] | None = option(
        None,
        "learning-rate grid of the SFE",
        check=positive_number,
        metavar="LR",
        default_text=lambda: _default("sfe_lrs"),
    )
    quick: bool = option(False, "a small grid and few runs (seconds)")

    @classmethod
    def help_epilog(cls) -> str:
        return "methods:\n" + METHODS.listing()

    def resolved(self) -> ToyConfig:
        """The settings a run uses: every ``None`` filled from the full or the quick experiment."""
        values = QUICK if self.quick else _FULL
        return dataclasses.replace(
            self, **{name: values[name] for name in _FULL if getattr(self, name) is None}
        )


def run(config: ToyConfig, on_result: Callable[[ToyRow], None] | None = None) -> ToyResult:
    """Run the experiment of ``config`` as ``imle-solvers toy`` does: each method's row is written to
    ``out`` as it finishes, then ``results.json`` (with the curves and the grid), ``results.md`` and
    ``topk_toy.png``; ``threads`` is applied and restored."""
    used = config.resolved()
    with Session(config, ROWS, resolved=used.as_dict(), on_result=on_result) as session:
        assert used.runs is not None and used.long_steps is not None
        assert used.lambdas is not None and used.lrs is not None and used.sfe_lrs is not None
        result = run_toy(
            runs=used.runs,
            steps=used.steps,
            seed=used.seed,
            lambdas=used.lambdas,
            lrs=used.lrs,
            sfe_lrs=used.sfe_lrs,
            long_steps=used.long_steps,
            methods=used.methods,
            progress=used.show_progress,
            on_row=session.add,
        )
        session.finish(
            markdown=_header(result),
            extra={"instance": result.config, "curves": result.curves, "grid": result.grid},
            plots=[("topk_toy.png", lambda path: plot(result, path))],
        )
    return result


def _header(result: ToyResult) -> str:
    cfg = result.config
    return (
        f"Synthetic top-k (m={cfg['m']}, k={cfg['k']}, {cfg['n_states']} states), {cfg['runs']} runs, "
        f"SGD momentum {cfg['momentum']}, seed {cfg['seed']}: L(θ₀) = {cfg['loss_init']:.3f}, "
        f"L* = {cfg['loss_star']:.3f}"
    )


def _show(config: ToyConfig, result: ToyResult) -> None:
    print(_header(result))
    print(result_table(result))
    print(f"({result.seconds:.1f} s)")
    print(config.written("results.json, results.md and topk_toy.png"))


COMMAND: Command[ToyConfig, ToyResult] = Command(ToyConfig, run, _show, ROWS)
"""``imle-solvers toy``."""


def build_parser() -> Any:
    """The parser of ``imle-solvers toy``, generated from
    [`ToyConfig`][imle_solvers.experiments.topk_toy.ToyConfig]."""
    return ToyConfig.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers toy [options]``: run, print the table, write the results; returns the exit status."""
    return COMMAND.main(argv)
