"""The toy's runner: batched SGD with momentum on the exact ``L``, over a (λ, η) grid per method.

Each run is 50 steps of SGD with momentum 0.9 from the same ``θ₀``; the runs differ only in the
estimators' randomness. All runs *and* all learning rates of a grid point go through the layer as
one batch (rows = learning rates × runs), one layer call per step, so the whole grid takes seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ..._checks import positive, positive_int
from ...app.report import progress_bar
from ...target import TargetDistribution
from .methods import DEFAULT_METHODS, METHODS, ToyMethod, gradient_estimate
from .problem import ToyProblem
from .results import ToyResult, ToyRow

__all__ = [
    "DEFAULT_LAMBDAS",
    "DEFAULT_LRS",
    "DEFAULT_SFE_LRS",
    "LONG_STEPS",
    "MOMENTUM",
    "RUNS",
    "run_toy",
    "sgd_momentum_step",
]

DEFAULT_LAMBDAS: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0)
"""Perturbation intensities λ of the PID target (eq. 8) tried for I-MLE."""
DEFAULT_LRS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
"""Step sizes η tried for I-MLE and STE (for I-MLE the SGD learning rate is η λ, see ``_sgd_lr``)."""
DEFAULT_SFE_LRS: tuple[float, ...] = (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1)
"""Learning rates tried for the score-function estimator (whose gradients are ~‖z − b‖² larger)."""

MOMENTUM = 0.9
"""Momentum of the SGD (the paper's appendix)."""
RUNS = 100
"""Runs per grid point (the paper: 100)."""
LONG_STEPS = 500
"""Steps of the extra SFE run (the paper's appendix ran SFE for 500 steps)."""


def sgd_momentum_step(
    theta: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None, lr: torch.Tensor, momentum: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of `torch.optim.SGD` (``dampening=0``, no Nesterov) with a per-row learning rate.

    ``v ← g`` on the first step, ``v ← μ v + g`` afterwards; ``θ ← θ − lr · v``. ``lr`` broadcasts
    against θ (``[N, 1]`` gives every row its own rate). Returns ``(θ, v)``.
    """
    buf = grad.clone() if buf is None else momentum * buf + grad  # v   [N, m]
    return theta - lr * buf, buf


def _seed_for(seed: int, *tags: object) -> int:
    """A stable seed for one grid point, independent of which other grid points run."""
    text = "|".join([str(int(seed)), *map(str, tags)])
    return zlib.crc32(text.encode()) + (int(seed) << 32)


def _optimise(
    problem: ToyProblem,
    method: ToyMethod,
    lam: float | None,
    lrs: Sequence[float],
    runs: int,
    steps: int,
    generator: torch.Generator,
    target: TargetDistribution | None = None,
    samples: int = 1,
) -> torch.Tensor:
    """``runs`` optimisations per learning rate in one batch; exact ``L`` curves ``[n_lr, runs, steps+1]``
    (``target``: the I-MLE target instead of ``PerturbedTarget(lam)``; ``samples`` per step)."""
    n_lr, m = len(lrs), problem.m
    theta = problem.theta0.expand(n_lr * runs, m).clone()  # θ₀ for every (lr, run)   [N, m]
    lr = torch.tensor(lrs, dtype=theta.dtype).repeat_interleave(runs).unsqueeze(-1)  # [N, 1]
    grad_fn = gradient_estimate(problem, method, lam, generator, target, samples)
    curves = theta.new_empty(steps + 1, n_lr * runs)
    curves[0] = problem.expected_loss(theta)
    buf: torch.Tensor | None = None
    # the grid includes λ small enough to lose rows (the experiment measures that): no warning per layer
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"PerturbedTarget\(lam=", category=RuntimeWarning)
        for t in range(steps):
            with torch.enable_grad():
                g = grad_fn(theta)  # one layer call for all rows
            theta, buf = sgd_momentum_step(theta, g, buf, lr, MOMENTUM)
            # a diverged row cannot recover: freeze it at +inf (never the best setting)
            curves[t + 1] = torch.nan_to_num(problem.expected_loss(theta), nan=math.inf)
    return curves.T.reshape(n_lr, runs, steps + 1)


def _finite_mean(x: torch.Tensor) -> float:
    return float(x.mean()) if bool(torch.isfinite(x).all()) else math.inf


def run_toy(
    runs: int = RUNS,
    steps: int = 50,
    seed: int = 0,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    lrs: Sequence[float] = DEFAULT_LRS,
    sfe_lrs: Sequence[float] = DEFAULT_SFE_LRS,
    long_steps: int = LONG_STEPS,
    methods: Sequence[str] = DEFAULT_METHODS,
    progress: bool = True,
    on_row: Callable[[ToyRow], None] | None = None,
) -> ToyResult:
    """Run the synthetic top-k experiment: a (λ, η) grid per method, then the best setting afresh.

    For every method and grid point, ``runs`` optimisations of ``steps`` SGD-with-momentum (0.9)
    steps start from the same ``θ₀``; the final exact ``L`` is averaged over the runs. The grid point
    with the lowest mean is the method's best setting; it is then run again with *independent*
    randomness (so the reported numbers are not the selected maximum of noisy estimates) and that
    run gives the table row and the optimisation curve. With ``long_steps > 0`` and ``"sfe"`` among
    the methods, the score-function estimator gets its own lr grid over ``long_steps`` steps too
    (the paper's appendix ran SFE for 500 steps).

    The instance is fixed by ``seed``: ``b ~ N(0, I)`` and ``θ₀ ~ N(0, I)`` are drawn once and shared
    by all runs (as in the paper, where ``b`` is sampled only once), so the spread over runs is the
    estimators' own randomness. Use several seeds to see how results vary across instances
    ([`summarize_instances`][imle_solvers.experiments.topk_toy.summarize_instances]). Every grid point
    draws from its own generator, derived from (seed, method, λ): a row does not depend on which other
    methods run, nor on their order.

    Parameters
    ----------
    runs
        Independent runs per grid point (the paper: 100).
    steps
        Optimisation steps (the paper: 50).
    seed
        Seeds the instance (``b``, ``θ₀``) and, per grid point, the estimators' generator.
    lambdas
        λ values of the PID target for the I-MLE methods.
    lrs
        Step sizes η for I-MLE and STE. STE steps with SGD learning rate η; I-MLE with ``η λ``, which
        is the paper's (unscaled) estimator with learning rate η, since
        [`PerturbedTarget`][imle_solvers.PerturbedTarget] divides by λ.
    sfe_lrs
        Learning rates for SFE.
    long_steps
        Steps of the extra SFE run (0 disables it).
    methods
        Keys of [`METHODS`][imle_solvers.experiments.topk_toy.METHODS].
    progress
        Show a progress bar on stderr.
    on_row
        Called with each method's row as soon as it is finished (methods run one after the other).
    """
    runs, steps = positive_int("runs", runs), positive_int("steps", steps)
    if int(long_steps) != long_steps or long_steps < 0:
        raise ValueError(f"long_steps must be a non-negative integer, got {long_steps!r}")
    grids: dict[str, list[float]] = {}
    for label, values in (("lambdas", lambdas), ("lrs", lrs), ("sfe_lrs", sfe_lrs)):
        if len(values) == 0:
            raise ValueError(f"{label} must be a non-empty sequence of positive numbers, got {values!r}")
        grids[label] = [positive(f"{label}[{i}]", float(v)) for i, v in enumerate(values)]
    unknown = [key for key in methods if key not in METHODS]
    if unknown or not methods:
        raise ValueError(f"unknown methods {unknown}; choose among {sorted(METHODS)}")
    setup = _Setup(runs, steps, int(seed), grids["lambdas"], grids["lrs"], grids["sfe_lrs"], int(long_steps))
    with _single_thread():
        return _run_toy(setup, tuple(methods), show_progress=progress, on_row=on_row)


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread (restored afterwards).

    The tensors here are tiny (hundreds of rows × 10 or 252 columns): threads only add
    synchronisation, which on a busy machine made the grid ~20× slower than on one thread.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclasses.dataclass(frozen=True)
class _Setup:
    runs: int
    steps: int
    seed: int
    lambdas: list[float]
    lrs: list[float]
    sfe_lrs: list[float]
    long_steps: int


def _run_toy(
    setup: _Setup,
    methods: tuple[str, ...],
    *,
    show_progress: bool,
    on_row: Callable[[ToyRow], None] | None,
) -> ToyResult:
    start = time.perf_counter()
    problem = ToyProblem.create(setup.seed)
    built = {key: METHODS[key]() for key in methods}

    # (row key, method key, λ or None, step-size grid η, steps)
    plan: list[tuple[str, str, float | None, list[float], int]] = []
    for key, method in built.items():
        if method.uses_lambda:
            plan += [(key, key, lam, setup.lrs, setup.steps) for lam in setup.lambdas]
        else:
            plan.append((key, key, None, setup.sfe_lrs if method.kind == "sfe" else setup.lrs, setup.steps))
    if setup.long_steps and "sfe" in methods:
        plan.append((f"sfe@{setup.long_steps}", "sfe", None, setup.sfe_lrs, setup.long_steps))

    grid: list[dict[str, Any]] = []
    rows: list[ToyRow] = []
    curve_out: dict[str, dict[str, list[float]]] = {}
    bar = _progress_bar(len(plan) + len({p[0] for p in plan}), show_progress)
    for row_key in dict.fromkeys(p[0] for p in plan):  # one method (row) after the other
        points: list[dict[str, Any]] = []
        for _, key, lam, etas, n_steps in [p for p in plan if p[0] == row_key]:
            gen = torch.Generator().manual_seed(_seed_for(setup.seed, "grid", row_key, lam))
            sgd_lrs = [_sgd_lr(eta, lam) for eta in etas]
            curves = _optimise(problem, built[key], lam, sgd_lrs, setup.runs, n_steps, gen)
            for i, (eta, lr) in enumerate(zip(etas, sgd_lrs)):
                final = curves[i, :, -1]
                std = float(final.std()) if setup.runs > 1 else 0.0
                points.append(
                    {
                        "key": row_key,
                        "lam": lam,
                        "eta": eta,
                        "lr": lr,
                        "steps": n_steps,
                        "mean": _finite_mean(final),
                        "std": std,
                    }
                )
            _advance(bar)
        grid += points
        key = next(p[1] for p in plan if p[0] == row_key)
        row, curve = _best_row(problem, built[key], row_key, key, points, setup)
        rows.append(row)
        curve_out[row_key] = curve
        _advance(bar)
        if on_row is not None:
            on_row(row)
    if bar is not None:
        bar.close()

    config = {
        "runs": setup.runs,
        "steps": setup.steps,
        "long_steps": setup.long_steps,
        "seed": setup.seed,
        "m": problem.m,
        "k": problem.k,
        "n_states": int(problem.states.shape[0]),
        "momentum": MOMENTUM,
        "lambdas": setup.lambdas,
        "lrs": setup.lrs,
        "sfe_lrs": setup.sfe_lrs,
        "methods": list(methods),
        "b": problem.b.tolist(),
        "theta0": problem.theta0.tolist(),
        "loss_init": float(problem.expected_loss(problem.theta0)),
        "loss_star": problem.loss_star,
    }
    return ToyResult(config, rows, curve_out, grid, seconds=time.perf_counter() - start)


def _best_row(
    problem: ToyProblem,
    method: ToyMethod,
    row_key: str,
    key: str,
    points: list[dict[str, Any]],
    setup: _Setup,
) -> tuple[ToyRow, dict[str, list[float]]]:
    """The method's best grid point, re-run with fresh randomness: its row and its mean ± std curve."""
    best = min(points, key=lambda g: g["mean"])
    gen = torch.Generator().manual_seed(_seed_for(setup.seed, "eval", row_key))
    curves = _optimise(problem, method, best["lam"], [best["lr"]], setup.runs, best["steps"], gen)[0]
    final = curves[:, -1]
    lam_values = sorted({g["lam"] for g in points if g["lam"] is not None})
    eta_values = sorted({g["eta"] for g in points})
    edge = [
        name
        for name, value, values in (("λ", best["lam"], lam_values), ("η", best["eta"], eta_values))
        if len(values) > 1 and value in (values[0], values[-1])
    ]
    row = ToyRow(
        method=method.name + (f" ({best['steps']} steps)" if row_key != key else ""),
        key=row_key,
        lam=best["lam"],
        eta=best["eta"],
        lr=best["lr"],
        steps=best["steps"],
        mean=_finite_mean(final),
        std=float(final.std()) if setup.runs > 1 else 0.0,
        min=float(final.min()),
        max=float(final.max()),
        gap=_finite_mean(final) - problem.loss_star,
        edge=", ".join(edge),
    )
    curve = {
        "mean": curves.mean(dim=0).tolist(),
        "std": (curves.std(dim=0) if setup.runs > 1 else torch.zeros(curves.shape[1])).tolist(),
    }
    return row, curve


def _sgd_lr(eta: float, lam: float | None) -> float:
    """SGD learning rate for step size η: ``η λ`` for I-MLE (the paper's unscaled estimator), else η.

    [`PerturbedTarget`][imle_solvers.PerturbedTarget] divides ``MAP(θ+ε) − MAP(θ'+ε)`` by λ; the appendix's
    estimator does not. Stepping with ``lr = η λ`` makes our update identical to the paper's update
    with learning rate η, and puts I-MLE and STE on the same step-size grid.
    """
    return eta * lam if lam is not None else eta


def _progress_bar(total: int, enabled: bool) -> Any:
    return progress_bar(total, "toy", leave=False) if enabled else None


def _advance(bar: Any) -> None:
    if bar is not None:
        bar.update(1)
