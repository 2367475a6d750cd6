"""``imle-solvers bench exact``: every estimator's expected gradient against the exact gradient.

On problems small enough to enumerate, the exponential family ``p(z; θ) ∝ exp(⟨z, θ⟩/τ)`` over the
states ``C`` has the exact gradient of its expected loss

    ∇θ E_p[L(z)] = Cov_p(z, L(z)) / τ = Σ_z p(z) (L(z) − E_p[L]) z / τ.

Each estimator's *expected* estimate is measured as the mean of its one-sample estimates over many
rows that share θ (fixed seeds); the table reports the cosine of that mean to the exact gradient and
its relative bias ``‖mean − exact‖ / ‖exact‖``, with the Monte-Carlo noise of the mean on the same
scale, per estimator, problem, loss, loss scale α, offset ``θ + c·1`` and noise temperature τ. Beside
the mean, what training sees: the share of single draws whose estimate is exactly zero, and the cosine
and relative MSE ``‖ḡ_n − ∇‖² / ‖∇‖²`` of the average ``ḡ_n`` of n = 1, 8, 32 draws (`DRAWS`). The
perturbation is the library's default noise at temperature τ (Sum-of-Gamma with κ the mean state
size, Theorem 1), which makes perturb-and-MAP approximate ``p`` at that temperature.

Problems (`PROBLEMS`): the 3-subsets of 8 items (every state has 3 items: an offset of θ does not
change ``p``), the node-weighted monotone paths of a 3 × 4 grid (4 to 6 cells), and the feasible
subsets of an 8-item knapsack (0 to 4 items). Losses (`LOSSES`): ``α‖z − b‖²`` and ``α⟨g, z⟩``.

References
----------
Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 7-11,
<https://arxiv.org/abs/2106.01798>.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ..adaptive import AdaptiveTarget
from ..estimators import STE, Blackbox, PerturbedOptimizer
from ..imle import IMLE
from ..noise import NoiseDistribution, SumOfGamma
from ..oracle import MapOracle, TorchOracle
from ..target import OptimalTarget, PerturbedTarget, RelativeTarget
from ..topk import TopK

__all__ = [
    "DRAWS",
    "ESTIMATORS",
    "FIXED_SAMPLES",
    "LOSSES",
    "PROBLEMS",
    "EnumeratedProblem",
    "EnumerationOracle",
    "Loss",
    "Measurement",
    "cosine_and_bias",
    "exact_gradient",
    "grid_paths",
    "k_subsets",
    "knapsack_subsets",
    "mean_estimate",
    "measure",
    "per_draw",
    "row_estimates",
    "run",
]


class EnumerationOracle(TorchOracle):
    """``MAP(θ) = argmax_{z ∈ C} ⟨z, θ⟩`` by enumeration: one matrix product over the listed states.

    Parameters
    ----------
    states
        ``[n, m]`` the states of ``C``, 0/1 (ties go to the first listed state).
    """

    sense = "max"

    def __init__(self, states: torch.Tensor) -> None:
        self.states = states.to(torch.float64)
        self.n_vars = int(states.shape[1])
        self.expected_nonzeros = float(self.states.sum(1).mean())

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        states = self.states.to(device=weights.device, dtype=weights.dtype)  # C   [n, m]
        best = (weights @ states.T).argmax(dim=-1)  # argmax_z ⟨z, θ⟩   [...]
        return states[best]  # [..., m]

    def __repr__(self) -> str:
        return f"EnumerationOracle({self.states.shape[0]} states, n_vars={self.n_vars})"


@dataclasses.dataclass(frozen=True)
class EnumeratedProblem:
    """A problem whose states can be listed: ``states`` ``[n, m]`` and the oracle the layers use.

    ``constant_size`` says whether every state has the same number of nonzeros (then ``θ + c·1``
    defines the same distribution as θ).
    """

    name: str
    states: torch.Tensor
    oracle: TorchOracle

    @property
    def n_vars(self) -> int:
        return int(self.states.shape[1])

    @property
    def constant_size(self) -> bool:
        sizes = self.states.sum(1)
        return bool((sizes == sizes[0]).all())

    def noise(self, tau: float) -> SumOfGamma:
        """The layers' default noise at temperature τ: SoG with κ = the mean state size (Theorem 1)."""
        return SumOfGamma(k=float(self.states.sum(1).mean()), tau=tau)


def k_subsets(m: int, k: int) -> EnumeratedProblem:
    """The k-subsets of m items, solved by [`TopK`][imle_solvers.TopK]."""
    rows = []
    for chosen in itertools.combinations(range(m), k):
        z = torch.zeros(m, dtype=torch.float64)
        z[list(chosen)] = 1.0
        rows.append(z)
    return EnumeratedProblem(f"{k}-of-{m} subsets", torch.stack(rows), TopK(k, m))


def grid_paths(height: int, width: int) -> EnumeratedProblem:
    """Node-weighted monotone paths (moves east, south, south-east) from the top-left cell to the
    bottom-right one of a ``height × width`` grid: states of ``max(h, w)`` to ``h + w − 1`` cells."""
    rows = []

    def walk(r: int, c: int, cells: list[int]) -> None:
        cells = [*cells, r * width + c]
        if (r, c) == (height - 1, width - 1):
            z = torch.zeros(height * width, dtype=torch.float64)
            z[cells] = 1.0
            rows.append(z)
            return
        for dr, dc in ((0, 1), (1, 0), (1, 1)):
            if r + dr < height and c + dc < width:
                walk(r + dr, c + dc, cells)

    walk(0, 0, [])
    states = torch.stack(rows)
    return EnumeratedProblem(f"{height}x{width} grid paths", states, EnumerationOracle(states))


def knapsack_subsets(weights: Sequence[int], capacity: int) -> EnumeratedProblem:
    """Every subset of the items whose total weight is at most ``capacity`` (the empty one included)."""
    m = len(weights)
    rows = []
    for mask in range(2**m):
        chosen = [i for i in range(m) if mask >> i & 1]
        if sum(weights[i] for i in chosen) <= capacity:
            z = torch.zeros(m, dtype=torch.float64)
            z[chosen] = 1.0
            rows.append(z)
    states = torch.stack(rows)
    return EnumeratedProblem(f"{m}-item knapsack", states, EnumerationOracle(states))


PROBLEMS: dict[str, Callable[[], EnumeratedProblem]] = {
    "subsets": lambda: k_subsets(8, 3),
    "paths": lambda: grid_paths(3, 4),
    "knapsack": lambda: knapsack_subsets([3, 4, 5, 6, 7, 8, 9, 10], 20),
}
"""Problem key → builder: 56 three-subsets, 25 grid paths, the feasible subsets of a knapsack."""


@dataclasses.dataclass(frozen=True)
class Loss:
    """``L(z) = α·ℓ(z; v)`` with ``ℓ`` quadratic ``‖z − v‖²`` or linear ``⟨v, z⟩``; batched over rows."""

    kind: str
    target: torch.Tensor
    alpha: float = 1.0

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """``[..., m]`` states → ``[...]`` losses (differentiable in z)."""
        if self.kind == "quadratic":
            return self.alpha * (z - self.target).square().sum(-1)  # α‖z − b‖²
        return self.alpha * (z * self.target).sum(-1)  # α⟨g, z⟩

    def scaled(self, alpha: float) -> Loss:
        return dataclasses.replace(self, alpha=alpha)


LOSSES: dict[str, Callable[[torch.Generator, int], Loss]] = {
    "quadratic": lambda g, m: Loss("quadratic", torch.rand(m, generator=g, dtype=torch.float64)),
    "linear": lambda g, m: Loss("linear", torch.randn(m, generator=g, dtype=torch.float64)),
}
"""Loss key → ``(generator, m) -> Loss``: ``‖z − b‖²``, ``b ~ U(0, 1)^m``; ``⟨g, z⟩``, ``g ~ N(0, I)``."""


Factory = Callable[[MapOracle, NoiseDistribution, torch.Generator], nn.Module]

ESTIMATORS: dict[str, Factory] = {
    "IMLE default": lambda o, n, g: IMLE(o, n, generator=g),
    "RelativeTarget()": lambda o, n, g: IMLE(o, n, RelativeTarget(), generator=g),
    "RelativeTarget(two_sided=False)": lambda o, n, g: IMLE(
        o, n, RelativeTarget(two_sided=False), generator=g
    ),
    "RelativeTarget.large_step()": lambda o, n, g: IMLE(o, n, RelativeTarget.large_step(), generator=g),
    "PerturbedTarget(lam=0.1)": lambda o, n, g: IMLE(o, n, PerturbedTarget(0.1), generator=g),
    "PerturbedTarget(lam=10)": lambda o, n, g: IMLE(o, n, PerturbedTarget(10.0), generator=g),
    "AdaptiveTarget()": lambda o, n, g: IMLE(o, n, AdaptiveTarget(), generator=g),
    "OptimalTarget()": lambda o, n, g: IMLE(o, n, OptimalTarget(), generator=g),
    "STE": lambda o, n, g: STE(o, n, generator=g),
    "Blackbox(lam=20)": lambda o, n, g: Blackbox(o, lam=20.0),
    "PerturbedOptimizer(gumbel)": lambda o, n, g: PerturbedOptimizer(
        o, sigma=getattr(n, "tau", 1.0), samples=1, noise="gumbel", generator=g
    ),
}
"""Estimator label → ``(oracle, noise at τ, generator) -> layer`` with one sample per row."""

FIXED_SAMPLES: frozenset[str] = frozenset({"Blackbox(lam=20)"})
"""Estimators that take no sample count (no noise): measured at S = 1 only."""


def exact_gradient(states: torch.Tensor, theta: torch.Tensor, loss: Loss, tau: float) -> torch.Tensor:
    """``∇θ E_p[L] = Cov_p(z, L(z)) / τ`` for ``p(z; θ) ∝ exp(⟨z, θ⟩/τ)`` over ``states``.  → ``[m]``"""
    states = states.to(torch.float64)
    p = torch.softmax(states @ theta.to(torch.float64) / tau, dim=0)  # p(z; θ)   [n]
    values = loss(states)  # L(z)   [n]
    centred = values - p @ values  # L(z) − E_p[L]   [n]
    return states.T @ (p * centred) / tau  # Σ_z p(z)(L(z) − E[L]) z / τ   [m]


def row_estimates(layer: nn.Module, theta: torch.Tensor, loss: Loss, rows: int) -> torch.Tensor:
    """The layer's estimates of ``rows`` copies of θ, ``[rows, m]``: one draw of its S samples each.

    The loss is summed over the rows and averaged over the S samples of a row, so each row's estimate
    sees its own unscaled ``∇z L`` (divided by S, as a loss averaged over the samples gives it).
    """
    x = theta.to(torch.float64).expand(rows, -1).clone().requires_grad_(True)
    per = loss(layer(x))  # L(z)   [rows] or [rows, S]
    (per if per.dim() == 1 else per.mean(dim=1)).sum().backward()  # Σ_rows mean_S L(z_row)
    assert x.grad is not None
    return x.grad  # one estimate per row   [rows, m]


def mean_estimate(
    layer: nn.Module, theta: torch.Tensor, loss: Loss, rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard error of the layer's one-sample estimates over ``rows`` copies of θ.

    Returns ``(mean, stderr)``, both ``[m]``.
    """
    per_row = row_estimates(layer, theta, loss, rows)  # [rows, m]
    return per_row.mean(0), per_row.std(0) / math.sqrt(rows)


DRAWS: tuple[int, ...] = (1, 8, 32)
"""How many one-sample estimates the per-draw figures average: what training sees with S samples."""


def per_draw(per_row: torch.Tensor, exact: torch.Tensor, draws: int) -> tuple[float, float]:
    """``(cosine, relative MSE)`` of the average of ``draws`` one-sample estimates to the exact gradient.

    The rows are cut into groups of ``draws``; each group's average is compared with ``exact``: the
    mean cosine over the groups (an all-zero average has cosine 0) and the mean of
    ``‖average − exact‖² / ‖exact‖²``.
    """
    groups = per_row.shape[0] // draws
    averages = per_row[: groups * draws].reshape(groups, draws, -1).mean(dim=1)  # [G, m]
    norm_x = exact.norm()
    norms = averages.norm(dim=-1)  # [G]
    cosines = torch.where(norms > 0, averages @ exact / (norms * norm_x).clamp_min(1e-300), 0.0)
    rel_mse = (averages - exact).square().sum(dim=-1) / norm_x.square()
    return float(cosines.mean()), float(rel_mse.mean())


def cosine_and_bias(estimate: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """``(cos(estimate, exact), ‖estimate − exact‖ / ‖exact‖)``; a zero estimate has cosine 0."""
    norm_e, norm_x = float(estimate.norm()), float(exact.norm())
    cosine = float(estimate @ exact) / (norm_e * norm_x) if norm_e > 0 and norm_x > 0 else 0.0
    return cosine, float((estimate - exact).norm()) / norm_x


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One estimator on one (problem, θ, loss, τ).

    ``cosine``, ``bias`` and ``noise`` concern the mean of the one-sample estimates (the estimator's
    expectation); ``zero`` is the share of single draws whose estimate is exactly zero, and
    ``draw_cosine[n]`` / ``draw_mse[n]`` the cosine and relative MSE of the average of ``n`` draws
    (`DRAWS`), as a step of training with S = n samples sees it.
    """

    cosine: float
    bias: float
    noise: float
    zero: float = 0.0
    draw_cosine: dict[int, float] = dataclasses.field(default_factory=dict)
    draw_mse: dict[int, float] = dataclasses.field(default_factory=dict)


def measure(
    factory: Factory,
    problem: EnumeratedProblem,
    theta: torch.Tensor,
    loss: Loss,
    tau: float,
    *,
    rows: int,
    seed: int,
    samples: int = 1,
) -> Measurement:
    """The estimator's estimates over ``rows`` rows of ``samples`` samples each (noise seeded by ``seed``)
    against the exact gradient: the mean's cosine, bias and noise, and the per-draw figures."""
    exact = exact_gradient(problem.states, theta, loss, tau)
    layer = factory(problem.oracle, problem.noise(tau), torch.Generator().manual_seed(seed))
    if samples != 1:
        setattr(layer, "samples", samples)  # noqa: B010 - one draw = one call with S samples (checked there)
    with warnings.catch_warnings():  # a fixed λ losing rows to the loss scale is what the table shows
        warnings.filterwarnings("ignore", message=r"PerturbedTarget\(lam=", category=RuntimeWarning)
        per_row = row_estimates(layer, theta, loss, rows)  # [rows, m]
    mean, stderr = per_row.mean(0), per_row.std(0) / math.sqrt(rows)
    cosine, bias = cosine_and_bias(mean, exact)
    draws = {n: per_draw(per_row, exact, n) for n in DRAWS if n <= rows}
    return Measurement(
        cosine,
        bias,
        float(stderr.norm()) / float(exact.norm()),
        zero=float(per_row.eq(0).all(dim=-1).double().mean()),
        draw_cosine={n: c for n, (c, _) in draws.items()},
        draw_mse={n: e for n, (_, e) in draws.items()},
    )


def run(
    quick: bool = False,
    *,
    estimators: Sequence[str] | None = None,
    problems: Sequence[str] | None = None,
    rows: int | None = None,
    instances: int | None = None,
    taus: Sequence[float] | None = None,
    alphas: Sequence[float] = (1e-3, 1.0, 1e3),
    offsets: Sequence[float] = (0.0, 10.0),
    samples: Sequence[int] = (1,),
) -> list[dict[str, Any]]:
    """The harness: a summary table, then one row per estimator, problem, loss, α, offset c and τ.

    The summary (``suite="summary"``) gives, per estimator and (α, c), the cosine averaged over the
    problems, losses, temperatures and instances, its minimum, and the mean relative bias; the
    detailed rows (``suite="exact"``) average over the instances only.

    Parameters
    ----------
    quick
        2,000 rows, one instance, τ = 1 (seconds); otherwise 20,000 rows, 4 instances, τ ∈ {0.5, 1, 2}.
    estimators
        Keys of `ESTIMATORS` (default: all).
    problems
        Keys of `PROBLEMS` (default: all).
    rows
        Rows sharing θ per mean estimate.
    instances
        Random (θ, loss) pairs per cell.
    taus
        Noise temperatures τ (of the noise and of ``p``).
    alphas
        Loss scales α.
    offsets
        Offsets c of θ + c·1.
    samples
        The sample counts S of the layers: each draw is one call with S samples and the loss averaged
        over them (estimators whose sample count is fixed, the blackbox, are measured at S = 1 only).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: threads only add synchronisation
    try:
        return _run(
            list(estimators or ESTIMATORS),
            list(problems or PROBLEMS),
            rows or (2_000 if quick else 20_000),
            instances or (1 if quick else 4),
            tuple(taus or ((1.0,) if quick else (0.5, 1.0, 2.0))),
            tuple(alphas),
            tuple(offsets),
            tuple(samples),
        )
    finally:
        torch.set_num_threads(threads)


def _run(
    names: list[str],
    problems: list[str],
    rows: int,
    instances: int,
    taus: tuple[float, ...],
    alphas: tuple[float, ...],
    offsets: tuple[float, ...],
    counts: tuple[int, ...],
) -> list[dict[str, Any]]:
    detail: list[dict[str, Any]] = []
    pooled: dict[tuple[str, int, float, float], list[Measurement]] = {}
    for problem_key in problems:
        problem = PROBLEMS[problem_key]()
        for loss_key, tau, alpha, offset, s in itertools.product(LOSSES, taus, alphas, offsets, counts):
            took = [name for name in names if s == 1 or name not in FIXED_SAMPLES]
            per: dict[str, list[Measurement]] = {name: [] for name in took}
            for instance in range(instances):
                g = torch.Generator().manual_seed(1000 * instance + 17)
                theta = torch.randn(problem.n_vars, generator=g, dtype=torch.float64) + offset  # θ + c·1
                loss = LOSSES[loss_key](g, problem.n_vars).scaled(alpha)
                for name in took:
                    got = measure(
                        ESTIMATORS[name], problem, theta, loss, tau, rows=rows, seed=instance, samples=s
                    )
                    per[name].append(got)
            for name in took:
                pooled.setdefault((name, s, alpha, offset), []).extend(per[name])
                detail.append(
                    {
                        "suite": "exact",
                        "estimator": name,
                        "samples": s,
                        "problem": problem.name,
                        "loss": loss_key,
                        "alpha": alpha,
                        "offset": offset,
                        "tau": tau,
                        **_means(per[name]),
                    }
                )
    summary = [
        {"suite": "summary", "estimator": name, "samples": s, "alpha": alpha, "offset": offset, **_means(got)}
        for (name, s, alpha, offset), got in pooled.items()
    ]
    return summary + detail


def _means(got: Sequence[Measurement]) -> dict[str, float]:
    """Mean and minimum cosine, mean relative bias and noise, and the mean per-draw figures of a group."""
    n = len(got)
    out = {
        "cosine": sum(m.cosine for m in got) / n,
        "min_cosine": min(m.cosine for m in got),
        "rel_bias": sum(m.bias for m in got) / n,
        "mc_noise": sum(m.noise for m in got) / n,
        "zero_share": sum(m.zero for m in got) / n,
    }
    for draws in DRAWS:
        if all(draws in m.draw_cosine for m in got):
            out[f"cos_{draws}"] = sum(m.draw_cosine[draws] for m in got) / n
            out[f"rel_mse_{draws}"] = sum(m.draw_mse[draws] for m in got) / n
    return out
