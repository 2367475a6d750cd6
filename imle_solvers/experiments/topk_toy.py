"""The paper's synthetic top-k experiment (sec. 6 and appendix, "Synthetic Experiments").

A 5-subset distribution over ``m = 10`` items, ``p(z; θ) ∝ exp(⟨z, θ⟩)`` on the ``C(10, 5) = 252``
states, and the loss ``L(θ) = E_{z ~ p(z; θ)} ‖z − b‖²`` with ``b ~ N(0, I)`` drawn once. Everything
(``L``, the marginals ``μ(θ)``, exact samples) is computed *exactly* by enumerating the 252 states,
so that estimators can be compared on the true objective:

* I-MLE (PID target, eq. 8) with Sum-of-Gamma noise (eq. 9) and with Gumbel noise,
* the straight-through estimator (STE) with Gumbel (and Sum-of-Gamma) noise,
* the score-function estimator (SFE) with exact samples and exact marginals,
  ``∇ ≈ ‖z − b‖² (z − μ(θ))``, ``z ~ p(z; θ)`` (implemented here; it is not a library estimator).

Each run is 50 steps of SGD with momentum 0.9 from the same ``θ₀``; the runs differ only in the
estimators' randomness. All runs *and* all learning rates of a grid point go through the layer as
one batch (rows = learning rates × runs), one layer call per step, so the whole grid takes seconds.

Public entry points: [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] →
[`ToyResult`][imle_solvers.experiments.topk_toy.ToyResult], `plot`, and `main` (the
``imle-solvers toy`` command).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from ..errors import MissingExtraError, require
from ..estimators import STE
from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..report import format_table, progress
from ..target import PerturbedTarget
from ..topk import TopK

__all__ = [
    "DEFAULT_LAMBDAS",
    "DEFAULT_LRS",
    "DEFAULT_SFE_LRS",
    "METHODS",
    "ToyMethod",
    "ToyProblem",
    "ToyResult",
    "compare_grid",
    "main",
    "plot",
    "result_table",
    "run_toy",
    "sgd_momentum_step",
    "summarize_instances",
]

#: Perturbation intensities λ of the PID target (eq. 8) tried for I-MLE.
DEFAULT_LAMBDAS: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0)
#: Step sizes η tried for I-MLE and STE (for I-MLE the SGD learning rate is η λ, see ``_sgd_lr``).
DEFAULT_LRS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
#: Learning rates tried for the score-function estimator (whose gradients are ~‖z − b‖² larger).
DEFAULT_SFE_LRS: tuple[float, ...] = (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1)

MOMENTUM = 0.9


# --------------------------------------------------------------------------------------------------
# The exactly solvable problem
# --------------------------------------------------------------------------------------------------


def enumerate_states(m: int, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """All ``C(m, k)`` k-subset indicator vectors, lexicographic order, shape ``[C(m, k), m]``."""
    combos = torch.tensor(list(itertools.combinations(range(m), k)), dtype=torch.long)  # [S, k]
    states = torch.zeros(combos.shape[0], m, dtype=dtype)
    return states.scatter_(1, combos, 1.0)  # z_s = 1[i ∈ subset s]   [S, m]


@dataclasses.dataclass(frozen=True)
class ToyProblem:
    """The k-subset toy of the paper's sec. 6: exact ``L(θ)``, marginals and samples by enumeration.

    Parameters
    ----------
    b
        ``[m]`` the fixed target vector.
    theta0
        ``[m]`` the initial parameters shared by every run.
    k
        Subset size.
    """

    b: torch.Tensor
    theta0: torch.Tensor
    k: int

    @classmethod
    def create(cls, seed: int = 0, m: int = 10, k: int = 5, dtype: torch.dtype = torch.float64) -> ToyProblem:
        """Draw ``b ~ N(0, I)`` and ``θ₀ ~ N(0, I)`` (in that order) from a generator seeded with ``seed``."""
        if int(m) != m or m < 1 or int(k) != k or not 1 <= k <= m:
            raise ValueError(f"need integers 1 <= k <= m, got m={m}, k={k}")
        gen = torch.Generator().manual_seed(int(seed))
        b = torch.randn(m, generator=gen, dtype=dtype)
        theta0 = torch.randn(m, generator=gen, dtype=dtype)
        return cls(b=b, theta0=theta0, k=int(k))

    @property
    def m(self) -> int:
        """Number of items."""
        return int(self.b.shape[0])

    @property
    def states(self) -> torch.Tensor:
        """``[S, m]`` every state of the k-subset distribution."""
        return _states_cached(self.m, self.k, self.b.dtype)

    @property
    def costs(self) -> torch.Tensor:
        """``[S]`` the point-wise loss ``ℓ(z_s) = ‖z_s − b‖²`` of every state."""
        return ((self.states - self.b) ** 2).sum(dim=-1)

    @property
    def loss_star(self) -> float:
        """``inf_θ L(θ) = min_s ‖z_s − b‖²`` (approached as θ → ∞ along the best state)."""
        return float(self.costs.min())

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """``[..., S]`` exact ``log p(z_s; θ) = ⟨z_s, θ⟩ − log Z(θ)`` for ``[..., m]`` θ."""
        scores = theta @ self.states.T  # ⟨z_s, θ⟩   [..., S]
        return torch.log_softmax(scores, dim=-1)

    def expected_loss(self, theta: torch.Tensor) -> torch.Tensor:
        """``[...]`` exact ``L(θ) = Σ_s p(z_s; θ) ‖z_s − b‖²`` (differentiable)."""
        return self.log_probs(theta).exp() @ self.costs

    def marginals(self, theta: torch.Tensor) -> torch.Tensor:
        """``[..., m]`` exact ``μ(θ) = E_{p(z; θ)}[z]``."""
        return self.log_probs(theta).exp() @ self.states

    def sample(self, theta: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[N, m]`` exact ("faithful") samples ``z ~ p(z; θ)`` for ``[N, m]`` θ, one per row."""
        cdf = self.log_probs(theta).exp().cumsum(dim=-1)  # F(s) = Σ_{s' <= s} p(z_s'; θ)   [N, S]
        u = torch.rand((*cdf.shape[:-1], 1), generator=generator, dtype=cdf.dtype) * cdf[..., -1:]
        idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # inverse CDF: s ~ p   [N]
        return self.states[idx.clamp_max(cdf.shape[-1] - 1)]  # [N, m]

    def sfe_gradient(self, theta: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Score-function estimate ``‖z − b‖² ∇θ log p(z; θ) = ‖z − b‖² (z − μ(θ))``, shape ``[N, m]``."""
        cost = ((z - self.b) ** 2).sum(dim=-1, keepdim=True)  # ℓ(z)   [N, 1]
        return cost * (z - self.marginals(theta))  # ℓ(z) (z − μ(θ))     [N, m]


_STATES: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}


def _states_cached(m: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    key = (m, k, dtype)
    if key not in _STATES:
        _STATES[key] = enumerate_states(m, k, dtype)
    return _STATES[key]


# --------------------------------------------------------------------------------------------------
# Estimators compared
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ToyMethod:
    """One gradient estimator of the comparison.

    Parameters
    ----------
    name
        Label in tables and plots.
    kind
        ``"imle"`` ([`IMLE`][imle_solvers.IMLE] with [`PerturbedTarget`][imle_solvers.PerturbedTarget]),
        ``"ste"`` ([`STE`][imle_solvers.STE]) or ``"sfe"`` (exact score-function estimator).
    noise
        Perturbation of the perturb-and-MAP methods (``None`` for SFE).
    """

    name: str
    kind: Literal["imle", "ste", "sfe"]
    noise: NoiseDistribution | None = None

    @property
    def uses_lambda(self) -> bool:
        """Only I-MLE has a perturbation intensity λ."""
        return self.kind == "imle"


#: The paper's SoG(κ=5, τ=1, s=10): Theorem 1 with κ = k (see docs/experiments.md for the mapping).
SOG = SumOfGamma(k=5, tau=1.0, s=10)
#: The literal reading of the appendix's "SoG(1, 5, 10)": κ = 1, τ = 5, s = 10.
SOG_LITERAL = SumOfGamma(k=1, tau=5.0, s=10)

METHODS: dict[str, ToyMethod] = {
    "imle-sog": ToyMethod("I-MLE SoG(5,1,10)", "imle", SOG),
    "imle-gumbel": ToyMethod("I-MLE Gumbel(0,1)", "imle", Gumbel(1.0)),
    "imle-sog-literal": ToyMethod("I-MLE SoG(1,5,10) literal", "imle", SOG_LITERAL),
    # temperature controls (docs/experiments.md, "Why SoG < Gumbel does not reproduce")
    "imle-gumbel-5": ToyMethod("I-MLE Gumbel(0,5)", "imle", Gumbel(5.0)),
    "imle-sog-5": ToyMethod("I-MLE SoG(5,5,10)", "imle", SumOfGamma(k=5, tau=5.0, s=10)),
    "ste-gumbel": ToyMethod("STE Gumbel(0,1)", "ste", Gumbel(1.0)),
    "ste-sog": ToyMethod("STE SoG(5,1,10)", "ste", SOG),
    "sfe": ToyMethod("SFE exact", "sfe", None),
}


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


def _gradient_fn(
    problem: ToyProblem, method: ToyMethod, lam: float | None, generator: torch.Generator
) -> Callable[[torch.Tensor], torch.Tensor]:
    """θ ``[N, m]`` → one-sample gradient estimate ``[N, m]`` of ``L`` for every row."""
    if method.kind == "sfe":
        return lambda theta: problem.sfe_gradient(theta, problem.sample(theta, generator))
    oracle = TopK(problem.k, problem.m)
    assert method.noise is not None
    layer: torch.nn.Module
    if method.kind == "imle":
        assert lam is not None
        layer = IMLE(oracle, noise=method.noise, target=PerturbedTarget(lam), generator=generator)
    else:
        layer = STE(oracle, noise=method.noise, generator=generator)

    def grad(theta: torch.Tensor) -> torch.Tensor:
        leaf = theta.detach().requires_grad_(True)
        z = layer(leaf)  # z = MAP(θ + ε)              [N, m]
        loss = ((z - problem.b) ** 2).sum()  # Σ_rows ℓ(z) = ‖z − b‖²; ∇zℓ = 2(z − b)
        (g,) = torch.autograd.grad(loss, leaf)
        return g

    return grad


def _optimise(
    problem: ToyProblem,
    method: ToyMethod,
    lam: float | None,
    lrs: Sequence[float],
    runs: int,
    steps: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """``runs`` optimisations per learning rate in one batch; exact ``L`` curves ``[n_lr, runs, steps+1]``."""
    n_lr, m = len(lrs), problem.m
    theta = problem.theta0.expand(n_lr * runs, m).clone()  # θ₀ for every (lr, run)   [N, m]
    lr = torch.tensor(lrs, dtype=theta.dtype).repeat_interleave(runs).unsqueeze(-1)  # [N, 1]
    grad_fn = _gradient_fn(problem, method, lam, generator)
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


# --------------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ToyResult:
    """Outcome of [`run_toy`][imle_solvers.experiments.topk_toy.run_toy].

    Attributes
    ----------
    config
        The setup: runs, steps, seed, grids, the instance (``b``, ``θ₀``), ``L(θ₀)`` and ``L*``.
    rows
        One dict per method at its best setting, re-run with fresh randomness: ``method``, ``key``,
        ``lam`` (``None`` for STE/SFE), ``eta`` (step size), ``lr`` (the SGD learning rate), ``steps``,
        ``mean``/``std``/``min``/``max`` of the final ``L`` over the runs, ``gap`` (mean ``L − L*``) and
        ``edge`` (``"λ"``, ``"η"``, ``"λ, η"`` when the best value lies on the edge of its grid, else ``""``).
    curves
        ``key → {"mean": [...], "std": [...]}`` of the exact ``L`` at every step (``steps + 1`` points,
        step 0 = ``L(θ₀)``) for every row.
    grid
        Every grid point: ``key``, ``lam``, ``eta``, ``lr``, ``steps``, ``mean``, ``std`` of the final ``L``.
    seconds
        Wall-clock time of the whole experiment.
    """

    config: dict[str, Any]
    rows: list[dict[str, Any]]
    curves: dict[str, dict[str, list[float]]]
    grid: list[dict[str, Any]]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)

    def save_json(self, path: str | Path) -> Path:
        """Write [`to_dict`][imle_solvers.experiments.topk_toy.ToyResult.to_dict] as JSON to ``path``;
        returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=True))
        return path


def _finite_mean(x: torch.Tensor) -> float:
    return float(x.mean()) if bool(torch.isfinite(x).all()) else math.inf


def run_toy(
    runs: int = 100,
    steps: int = 50,
    seed: int = 0,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    lrs: Sequence[float] = DEFAULT_LRS,
    sfe_lrs: Sequence[float] = DEFAULT_SFE_LRS,
    long_steps: int = 500,
    methods: Sequence[str] = ("imle-sog", "imle-gumbel", "imle-sog-literal", "ste-gumbel", "ste-sog", "sfe"),
    progress: bool = True,
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
    ([`summarize_instances`][imle_solvers.experiments.topk_toy.summarize_instances]).

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
        Keys of `METHODS`.
    progress
        Show a progress bar on stderr.
    """
    if int(runs) != runs or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")
    if int(long_steps) != long_steps or long_steps < 0:
        raise ValueError(f"long_steps must be a non-negative integer, got {long_steps}")
    for label, grid_values in (("lambdas", lambdas), ("lrs", lrs), ("sfe_lrs", sfe_lrs)):
        if len(grid_values) == 0 or not all(v > 0 and math.isfinite(v) for v in grid_values):
            raise ValueError(f"{label} must be a non-empty sequence of positive numbers, got {grid_values}")
    unknown = [key for key in methods if key not in METHODS]
    if unknown or not methods:
        raise ValueError(f"unknown methods {unknown}; choose among {sorted(METHODS)}")

    with _single_thread():
        return _run_toy(
            int(runs), int(steps), int(seed), lambdas, lrs, sfe_lrs, int(long_steps), methods, progress
        )


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


def _run_toy(
    runs: int,
    steps: int,
    seed: int,
    lambdas: Sequence[float],
    lrs: Sequence[float],
    sfe_lrs: Sequence[float],
    long_steps: int,
    methods: Sequence[str],
    progress: bool,
) -> ToyResult:
    start = time.perf_counter()
    problem = ToyProblem.create(seed)
    lambdas, lrs, sfe_lrs = list(map(float, lambdas)), list(map(float, lrs)), list(map(float, sfe_lrs))

    # (row key, method key, λ or None, step-size grid η, steps)
    plan: list[tuple[str, str, float | None, list[float], int]] = []
    for key in methods:
        method = METHODS[key]
        if method.uses_lambda:
            plan += [(key, key, lam, lrs, steps) for lam in lambdas]
        else:
            plan.append((key, key, None, sfe_lrs if method.kind == "sfe" else lrs, steps))
    if long_steps and "sfe" in methods:
        plan.append((f"sfe@{long_steps}", "sfe", None, sfe_lrs, long_steps))

    grid: list[dict[str, Any]] = []
    bar = _progress_iter(plan, "toy grid", progress)
    for row_key, key, lam, etas, n_steps in bar:
        gen = torch.Generator().manual_seed(_seed_for(seed, "grid", row_key, lam))
        sgd_lrs = [_sgd_lr(eta, lam) for eta in etas]
        curves = _optimise(problem, METHODS[key], lam, sgd_lrs, runs, n_steps, gen)
        for i, (eta, lr) in enumerate(zip(etas, sgd_lrs)):
            final = curves[i, :, -1]
            grid.append(
                {"key": row_key, "lam": lam, "eta": eta, "lr": lr, "steps": n_steps,
                 "mean": _finite_mean(final), "std": float(final.std()) if runs > 1 else 0.0}
            )  # fmt: skip

    rows: list[dict[str, Any]] = []
    curve_out: dict[str, dict[str, list[float]]] = {}
    method_of = {row_key: key for row_key, key, *_ in plan}  # row key -> METHODS key
    for row_key in _progress_iter(list(method_of), "best settings", progress):
        points = [g for g in grid if g["key"] == row_key]
        best = min(points, key=lambda g: g["mean"])
        key = method_of[row_key]
        gen = torch.Generator().manual_seed(_seed_for(seed, "eval", row_key))
        curves = _optimise(problem, METHODS[key], best["lam"], [best["lr"]], runs, best["steps"], gen)[0]
        final = curves[:, -1]
        lam_values = sorted({g["lam"] for g in points if g["lam"] is not None})
        eta_values = sorted({g["eta"] for g in points})
        edge = [
            name
            for name, value, values in (("λ", best["lam"], lam_values), ("η", best["eta"], eta_values))
            if len(values) > 1 and value in (values[0], values[-1])
        ]
        rows.append(
            {
                "method": METHODS[key].name + (f" ({best['steps']} steps)" if row_key != key else ""),
                "key": row_key,
                "lam": best["lam"],
                "eta": best["eta"],
                "lr": best["lr"],
                "steps": best["steps"],
                "mean": _finite_mean(final),
                "std": float(final.std()) if runs > 1 else 0.0,
                "min": float(final.min()),
                "max": float(final.max()),
                "gap": _finite_mean(final) - problem.loss_star,
                "edge": ", ".join(edge),
            }
        )
        curve_out[row_key] = {
            "mean": curves.mean(dim=0).tolist(),
            "std": (curves.std(dim=0) if runs > 1 else torch.zeros(curves.shape[1])).tolist(),
        }

    config = {
        "runs": int(runs), "steps": int(steps), "long_steps": int(long_steps), "seed": int(seed),
        "m": problem.m, "k": problem.k, "n_states": int(problem.states.shape[0]), "momentum": MOMENTUM,
        "lambdas": lambdas, "lrs": lrs, "sfe_lrs": sfe_lrs, "methods": list(methods),
        "b": problem.b.tolist(), "theta0": problem.theta0.tolist(),
        "loss_init": float(problem.expected_loss(problem.theta0)), "loss_star": problem.loss_star,
    }  # fmt: skip
    return ToyResult(config, rows, curve_out, grid, seconds=time.perf_counter() - start)


def _sgd_lr(eta: float, lam: float | None) -> float:
    """SGD learning rate for step size η: ``η λ`` for I-MLE (the paper's unscaled estimator), else η.

    [`PerturbedTarget`][imle_solvers.PerturbedTarget] divides ``MAP(θ+ε) − MAP(θ'+ε)`` by λ; the appendix's
    estimator does not. Stepping with ``lr = η λ`` makes our update identical to the paper's update
    with learning rate η, and puts I-MLE and STE on the same step-size grid.
    """
    return eta * lam if lam is not None else eta


def _progress_iter(items: Sequence[Any], desc: str, enabled: bool) -> Any:
    return progress(items, desc=desc, total=len(items), leave=False) if enabled else iter(items)


def result_table(result: ToyResult) -> str:
    """The Markdown table of `ToyResult.rows`: final ``L`` mean ± std, gap to ``L*``, best λ and lr."""
    table = []
    for row in result.rows:
        table.append(
            {
                "method": row["method"],
                "λ": "—" if row["lam"] is None else f"{row['lam']:g}",
                "η": f"{row['eta']:g}",
                "SGD lr": f"{row['lr']:g}",
                "grid edge": row["edge"] or "",
                "steps": row["steps"],
                "final L (mean ± std)": f"{row['mean']:.3f} ± {row['std']:.3f}",
                "L − L*": f"{row['gap']:.3f}",
            }
        )
    return format_table(table)


def summarize_instances(results: Sequence[ToyResult], reference: str = "ste-gumbel") -> list[dict[str, Any]]:
    """Aggregate [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] results over several instances
    (seeds): how robust is the ranking?

    Per row key: the mean and median over instances of the gap ``L − L*`` (mean over runs, at the
    method's best setting on that instance), the number of instances where the method's gap is below
    ``reference``'s, and the mean rank among the 50-step methods (1 = best).

    Parameters
    ----------
    results
        One result per instance, all with the same methods.
    reference
        Row key the methods are compared with (default STE with Gumbel noise).
    """
    if not results:
        raise ValueError("summarize_instances needs at least one result")
    keys = [row["key"] for row in results[0].rows]
    gaps = torch.tensor(
        [[next(r["gap"] for r in res.rows if r["key"] == key) for key in keys] for res in results]
    )
    short = [i for i, row in enumerate(results[0].rows) if row["steps"] == results[0].config["steps"]]
    ranks = torch.zeros_like(gaps)
    ranks[:, short] = gaps[:, short].argsort(dim=1).argsort(dim=1).to(gaps.dtype) + 1  # 1 = best
    ref = keys.index(reference) if reference in keys else None
    summary = []
    for j, key in enumerate(keys):
        row: dict[str, Any] = {
            "method": results[0].rows[j]["method"],
            "key": key,
            "instances": len(results),
            "mean gap": float(gaps[:, j].mean()),
            "median gap": float(gaps[:, j].median()),
            "mean rank": float(ranks[:, j].mean()) if j in short else None,
        }
        if ref is not None:
            row[f"beats {reference}"] = int((gaps[:, j] < gaps[:, ref]).sum()) if j != ref else None
        summary.append(row)
    return summary


def compare_grid(result: ToyResult, first: str = "imle-sog", second: str = "imle-gumbel") -> dict[str, Any]:
    """Compare two λ-methods point by point over the (λ, η) grid (the paper's SoG-vs-Gumbel heat-map).

    Returns ``wins`` (grid points where ``first`` has the strictly lower mean final ``L``), ``total``,
    ``mean_diff`` (mean of ``first − second``) and ``std_wins`` (points where ``first`` has the lower
    standard deviation over the runs).
    """
    index = {(g["key"], g["lam"], g["eta"]): g for g in result.grid}
    pairs = [
        (g, index[(second, g["lam"], g["eta"])])
        for g in result.grid
        if g["key"] == first and (second, g["lam"], g["eta"]) in index
    ]
    if not pairs:
        raise ValueError(f"no common grid points of {first!r} and {second!r} in this result")
    return {
        "wins": sum(a["mean"] < b["mean"] for a, b in pairs),
        "total": len(pairs),
        "mean_diff": sum(a["mean"] - b["mean"] for a, b in pairs) / len(pairs),
        "std_wins": sum(a["std"] < b["std"] for a, b in pairs),
    }


def plot(result: ToyResult, path: str | Path) -> Path:
    """Save the figure of the experiment to ``path`` (PNG, or any format matplotlib infers).

    Panels: (a) the optimisation curves, mean ± std over the runs of ``L(θ) − L*`` at each method's
    best setting; (b) the same zoomed on the perturb-and-MAP methods; (c) SFE over ``long_steps``
    steps next to the 50-step methods; (d) the paper's heat-map: mean final ``L`` of I-MLE with
    SoG minus I-MLE with Gumbel over the (λ, η) grid. Needs matplotlib
    (``pip install 'imle-solvers[plot]'``).
    """
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    star, steps = cfg["loss_star"], cfg["steps"]
    short = [row for row in result.rows if row["steps"] == steps]
    pam = [row for row in short if METHODS.get(row["key"], METHODS["sfe"]).kind != "sfe"]
    long = [row for row in result.rows if row["steps"] != steps]
    has_heat = {"imle-sog", "imle-gumbel"} <= {row["key"] for row in result.rows}
    fig = Figure(figsize=(11.0, 8.0), layout="constrained")
    (ax_all, ax_zoom), (ax_long, ax_heat) = fig.subplots(2, 2)
    colours: dict[str, Any] = {}

    def draw(ax: Any, row: dict[str, Any]) -> None:
        mean = torch.tensor(result.curves[row["key"]]["mean"]) - star  # L − L*   [steps + 1]
        std = torch.tensor(result.curves[row["key"]]["std"])
        x = torch.arange(mean.shape[0])
        colour = colours.setdefault(row["key"], f"C{len(colours)}")
        ax.plot(x, mean, label=row["method"], color=colour)
        ax.fill_between(x, (mean - std).clamp_min(0), mean + std, alpha=0.15, color=colour)

    for row in short:
        draw(ax_all, row)
    ax_all.set(xlabel="SGD step", ylabel="L(θ) − L*   (mean ± std over runs)",
               title=f"(a) {cfg['runs']} runs from the same θ₀, best setting per method")  # fmt: skip
    ax_all.legend(fontsize=7)
    for row in pam:
        draw(ax_zoom, row)
    top = max([row["gap"] + row["std"] for row in pam], default=1.0)
    ax_zoom.set(xlabel="SGD step", ylabel="L(θ) − L*", ylim=(0.0, 2.5 * top),
                title="(b) zoom: perturb-and-MAP estimators")  # fmt: skip
    ax_zoom.legend(fontsize=7)
    for row in [r for r in short if r["key"] in ("imle-sog", "imle-gumbel", "sfe")] + long:
        draw(ax_long, row)
    ax_long.axvline(steps, color="grey", lw=0.8, ls=":")
    ax_long.set(xlabel="SGD step", ylabel="L(θ) − L*", title="(c) SFE over more steps")
    ax_long.legend(fontsize=7)
    if has_heat:
        lams, etas = cfg["lambdas"], cfg["lrs"]
        mean = {(g["key"], g["lam"], g["eta"]): g["mean"] for g in result.grid}
        diff = torch.tensor(
            [[mean[("imle-sog", lam, eta)] - mean[("imle-gumbel", lam, eta)] for eta in etas] for lam in lams]
        )  # SoG − Gumbel   [n_λ, n_η]
        finite = diff[torch.isfinite(diff)]
        bound = float(finite.abs().max()) if finite.numel() else 1.0
        image = ax_heat.imshow(diff.numpy(), cmap="coolwarm", vmin=-bound, vmax=bound, aspect="auto")
        for i in range(len(lams)):
            for j in range(len(etas)):
                ax_heat.text(j, i, f"{float(diff[i, j]):+.2f}", ha="center", va="center", fontsize=7)
        ax_heat.set_xticks(range(len(etas)), [f"{v:g}" for v in etas])
        ax_heat.set_yticks(range(len(lams)), [f"{v:g}" for v in lams])
        ax_heat.set(xlabel="step size η (I-MLE's SGD lr = η λ)", ylabel="λ",
                    title="(d) mean final L, I-MLE SoG − Gumbel (blue: SoG better)")  # fmt: skip
        fig.colorbar(image, ax=ax_heat)
    else:
        ax_heat.set_axis_off()
    fig.savefig(path, dpi=110)
    return path


# --------------------------------------------------------------------------------------------------
# Command line: `imle-solvers toy`
# --------------------------------------------------------------------------------------------------

QUICK: dict[str, Any] = {
    "runs": 10, "lambdas": (1.0, 3.0), "lrs": (0.3, 1.0), "sfe_lrs": (0.003, 0.01), "long_steps": 100,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers toy [--runs N] [--steps N] [--seed S] [--out DIR] [--quick]``.

    Runs [`run_toy`][imle_solvers.experiments.topk_toy.run_toy], prints the result table and writes
    ``topk_toy.json``, ``topk_toy.md`` and
    ``topk_toy.png`` (when matplotlib is installed) to ``--out``.
    """
    parser = argparse.ArgumentParser(
        prog="imle-solvers toy",
        description="The I-MLE paper's synthetic top-k experiment (m=10, k=5, exact L by enumeration).",
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per grid point (default 100; quick 10)")
    parser.add_argument("--steps", type=int, default=50, help="SGD steps (default 50)")
    parser.add_argument(
        "--long-steps", type=int, default=None, help="steps of the extra SFE run (default 500)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance and of the noise")
    parser.add_argument("--out", default="runs/topk_toy", help="output directory (default runs/topk_toy)")
    parser.add_argument("--quick", action="store_true", help="a small grid and few runs (seconds)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(list(argv) if argv is not None else None)

    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.runs is not None:
        options["runs"] = args.runs
    if args.long_steps is not None:
        options["long_steps"] = args.long_steps
    try:
        result = run_toy(steps=args.steps, seed=args.seed, progress=not args.no_progress, **options)
    except ValueError as exc:
        parser.error(str(exc))
    table = result_table(result)
    cfg = result.config
    header = (
        f"Synthetic top-k (m={cfg['m']}, k={cfg['k']}, {cfg['n_states']} states), {cfg['runs']} runs, "
        f"SGD momentum {cfg['momentum']}, seed {cfg['seed']}: L(θ₀) = {cfg['loss_init']:.3f}, "
        f"L* = {cfg['loss_star']:.3f}"
    )
    print(header)
    print(table)
    print(f"({result.seconds:.1f} s)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.save_json(out / "topk_toy.json")
    command = "imle-solvers toy " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    (out / "topk_toy.md").write_text(f"{header}\n\n{table}\n\nCommand: `{command.strip()}`\n")
    written = [out / "topk_toy.json", out / "topk_toy.md"]
    try:
        written.append(plot(result, out / "topk_toy.png"))
    except MissingExtraError as exc:
        print(f"no plot: {exc}", file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
