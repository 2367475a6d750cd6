"""``imle-solvers bench targets``: the I-MLE targets trained on every task the library ships.

Every candidate target trains every task on the same seeds (paired: a seed fixes the data, the initial
model and the noise stream of every candidate alike), and the table gives each task's main metric per
candidate, its mean over the seeds and its ratio to the best candidate of the task. The loops are the
ones a user writes: the loss reduced with ``.mean()`` over the batch, the layer built as
``IMLE(oracle, noise, target, ...)``.

Candidates (`CANDIDATES`): the library's default (``IMLE(oracle)`` with no ``target``, whatever it is
when the suite runs), the other regimes of [`RelativeTarget`][imle_solvers.RelativeTarget],
[`AdaptiveTarget`][imle_solvers.AdaptiveTarget], and the paper's fixed-λ
[`PerturbedTarget`][imle_solvers.PerturbedTarget] *tuned*: its loss is scaled per instance (the layer
sees the gradient of the loss summed over the batch, as torch-imle users write it; the parameters' gradient
keeps the mean's scale) and the best λ of `PID_GRID` on each task is reported, with the λ it took.

Tasks (`TASKS`), each with the metric it is judged by:

* ``shortest-path``, ``knapsack``: PyEPO's protocol at polynomial degree 6 (1,000 training and 1,000 test
  instances, linear model, Adam 10⁻², batch 32, 10 epochs, S = 10 samples, the regret ``⟨c, z⟩``
  averaged over the batch and the samples): normalised test regret.
* ``terrain``: 12 × 12 terrain maps (1,000 training, 200 test maps, the terrain CNN, Adam 5·10⁻⁴, batch
  35, 10 epochs, S = 1, regret averaged over the batch): % of test maps decided optimally.
* ``toy``: the paper's top-k toy (10 items, k = 5, the exact expected loss ``E‖z − b‖²`` after 50
  steps of SGD with momentum, 100 runs per setting, the best of the toy experiment's 6 step sizes
  (0.01 to 3) re-run with fresh noise), Sum-of-Gamma and Gumbel noise averaged: final expected loss.
* ``vae-sog``, ``vae-gumbel``: the discrete 10-subset VAE on scikit-learn's digits (30 epochs, the
  paper's SoG at τ = 10, or Gumbel(0, 1)): test loss.
* ``l2x``: learning to explain on the planted corpus (k = 10, 8 epochs, SoG at τ = k): % subset
  precision of the explanations.
* ``sort``: sorting 5 two-digit handwritten numbers (1,500 Adam steps, SoG at τ = 1, the squared error
  to the permutation averaged over the batch): % of test sequences sorted exactly.

``quick`` shortens every task to a smoke run (one epoch or a few steps, small data): it exercises the
code and prints the table, but its numbers rank nothing.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ..adaptive import AdaptiveTarget
from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..oracle import MapOracle, sense_sign
from ..target import PerturbedTarget, RelativeTarget, TargetDistribution, default_target

__all__ = ["CANDIDATES", "PID_GRID", "TASKS", "Candidate", "Task", "run"]

PID_GRID: tuple[float, ...] = (1.0, 10.0, 100.0)
"""The λ grid over which the fixed-λ `PerturbedTarget` is tuned on each task."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A target to compare: ``make(λ)`` builds a fresh one per layer (``None``: the layer's default).

    ``grid`` lists the λ values a tuned candidate tries (the best one is reported); ``()`` for a
    candidate that takes none (``make(None)``). ``per_instance`` scales the loss per instance: the
    layer's upstream gradient is multiplied by the batch size and the parameters' gradient divided by it.
    """

    label: str
    make: Callable[[float | None], TargetDistribution | None]
    grid: tuple[float, ...] = ()
    per_instance: bool = False

    def settings(self) -> list[float | None]:
        """The λ values to train with: the grid, or ``[None]``."""
        return list(self.grid) if self.grid else [None]


CANDIDATES: dict[str, Candidate] = {
    "default": Candidate("IMLE default (AutoTarget())", lambda _: None),
    "relative-0.1": Candidate(
        "RelativeTarget(0.1), two-sided", lambda _: RelativeTarget(0.1, two_sided=True)
    ),
    "relative-1": Candidate("RelativeTarget(1), two-sided", lambda _: RelativeTarget(1.0, two_sided=True)),
    "large-step": Candidate("RelativeTarget.large_step()", lambda _: RelativeTarget.large_step()),
    "aimle": Candidate("AdaptiveTarget()", lambda _: AdaptiveTarget()),
    "pid": Candidate(
        "PerturbedTarget(λ) tuned, per instance",
        lambda lam: PerturbedTarget(float(lam if lam is not None else 1.0)),
        grid=PID_GRID,
        per_instance=True,
    ),
}
"""Candidate key → `Candidate`, in table order."""


class _PerInstance(nn.Module):
    """``layer`` with its upstream gradient scaled by the batch size B (and θ's gradient by 1/B).

    A loss averaged over a batch hands every row ``∇z L / B``; the paper's fixed-λ target needs the
    per-instance ``∇z L``. The forward pass is the layer's; the parameters' gradient keeps the scale of
    the averaged loss.
    """

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    @property
    def generator(self) -> torch.Generator | None:
        return getattr(self.layer, "generator", None)

    @generator.setter
    def generator(self, value: torch.Generator | None) -> None:
        setattr(self.layer, "generator", value)  # noqa: B010 - the layer's own setter checks it

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        from ..training.methods import scale_grad

        batch = float(weights.shape[0])
        return scale_grad(self.layer(scale_grad(weights, 1.0 / batch)), batch)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One candidate at one λ: what a task builds its layers with."""

    candidate: Candidate
    lam: float | None

    def layer(
        self,
        oracle: MapOracle,
        noise: NoiseDistribution | None = None,
        *,
        samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> nn.Module:
        """``IMLE(oracle, noise, target, samples=..., generator=...)``, scaled per instance if asked."""
        layer = IMLE(oracle, noise, self.candidate.make(self.lam), samples=samples, generator=generator)
        return _PerInstance(layer) if self.candidate.per_instance else layer

    def target(self) -> TargetDistribution:
        """A fresh target (the layers' default for the ``default`` candidate)."""
        made = self.candidate.make(self.lam)
        return default_target() if made is None else made


@dataclasses.dataclass(frozen=True)
class Task:
    """A training task: ``train(setting, seed, quick) -> metric`` and how the metric is read."""

    metric: str
    higher_is_better: bool
    train: Callable[[Setting, int, bool], float]


# ---------------------------------------------------------------------------------------------------
# predict-then-optimize


def _pto(problem: str) -> Callable[[Setting, int, bool], float]:
    def train(setting: Setting, seed: int, quick: bool) -> float:
        from ..losses import regret
        from ..training import TrainConfig, make_problem

        n = 100 if quick else 1000
        plan = TrainConfig(problem=problem, n_train=n, n_test=n, deg=6, show_progress=False).plan()
        prob = make_problem(plan, seed)
        torch.manual_seed(seed)
        model = prob.model()
        samples = 2 if quick else 10
        gen = torch.Generator().manual_seed(seed)
        layer = setting.layer(prob.train_oracle, samples=samples, generator=gen)
        sign = sense_sign(prob.train_oracle)  # ⟨c, z⟩ for min, −⟨v, z⟩ for max
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
        order = torch.Generator().manual_seed(seed)
        data = prob.train
        for _ in range(1 if quick else 10):
            for idx in torch.randperm(len(data), generator=order).split(32):
                z = layer(model(data.features[idx]))  # z = MAP(θ + ε)   [B, S, m]
                loss = -sign * (data.costs[idx].unsqueeze(1) * z).sum(-1).mean()  # regret, .mean()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
        model.eval()
        with torch.no_grad():
            test = prob.test
            predicted = model(test.features)
            return float(regret(prob.eval_oracle, predicted, test.costs, optimal=test.solutions))

    return train


def _terrain(setting: Setting, seed: int, quick: bool) -> float:
    from ..training import TrainConfig, make_problem
    from ..training.loop import evaluate

    n_train, n_test = (70, 35) if quick else (1000, 200)
    plan = TrainConfig(
        problem="terrain", n_train=n_train, n_test=n_test, size=12, oracle="device", show_progress=False
    ).plan()
    prob = make_problem(plan, seed)
    torch.manual_seed(seed)
    model = prob.model()
    gen = torch.Generator().manual_seed(seed)
    layer = setting.layer(prob.train_oracle, generator=gen)
    optimiser = torch.optim.Adam(model.parameters(), lr=5e-4)
    order = torch.Generator().manual_seed(seed)
    data = prob.train
    for _ in range(1 if quick else 10):
        model.train()
        for idx in torch.randperm(len(data), generator=order).split(35):
            z = layer(model(data.features[idx]))  # a path, argmin ⟨ĉ + ε, z⟩   [B, K·K]
            loss = (data.costs[idx] * z).sum(-1).mean()  # ⟨c, z⟩, .mean()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
    return 100.0 * evaluate(model, prob.test, prob.eval_oracle, batch=100)["accuracy"]


# ---------------------------------------------------------------------------------------------------
# the paper's experiments


def _toy(setting: Setting, seed: int, quick: bool) -> float:
    from ..experiments.topk_toy.methods import METHODS as TOY_METHODS
    from ..experiments.topk_toy.problem import ToyProblem
    from ..experiments.topk_toy.run import DEFAULT_LRS, _optimise, _sgd_lr

    problem = ToyProblem.create(seed)
    runs, steps = (10, 5) if quick else (100, 50)
    lrs = list(DEFAULT_LRS[:2] if quick else DEFAULT_LRS)
    finals = []
    for key in ("imle-sog", "imle-gumbel"):
        method = TOY_METHODS[key]()
        lam = setting.lam
        sgd = [_sgd_lr(eta, lam) for eta in lrs]  # the PID target divides by λ: step with η λ

        def curves(
            rates: list[float], tag: int, method: Any = method, lam: float | None = lam
        ) -> torch.Tensor:
            gen = torch.Generator().manual_seed(1000 * seed + tag)
            return _optimise(problem, method, lam, rates, runs, steps, gen, setting.target())

        # one layer per learning rate, as one model trains with one rate (a target whose step is sized
        # over the batch sees runs of one rate only)
        grid = torch.stack([curves([rate], i)[0, :, -1].mean() for i, rate in enumerate(sgd)])  # [n_lr]
        best = sgd[int(torch.nan_to_num(grid, nan=math.inf).argmin())]
        finals.append(float(curves([best], len(sgd))[0, :, -1].mean()))  # fresh noise at the best rate
    return statistics.mean(finals)


def _vae(noise: str) -> Callable[[Setting, int, bool], float]:
    def train(setting: Setting, seed: int, quick: bool) -> float:
        from ..experiments.vae.images import load_images
        from ..experiments.vae.methods import VAEMethod
        from ..experiments.vae.model import N_VARS
        from ..experiments.vae.run import VAEConfig, _train_one
        from ..topk import TopK

        def make(k: int, generator: torch.Generator | None) -> nn.Module:
            perturbation = SumOfGamma(k=k, tau=10.0, s=10) if noise == "sog" else Gumbel(1.0)
            return setting.layer(TopK(k, N_VARS), perturbation, generator=generator)

        data = load_images(None)
        if quick:
            data = dataclasses.replace(data, train=data.train[:200], test=data.test[:100])
        config = VAEConfig(epochs=1 if quick else 30, show_progress=False)
        test_curve, *_ = _train_one(VAEMethod("candidate", 10, make), data, config, seed)
        return test_curve[-1]

    return train


def _l2x(setting: Setting, seed: int, quick: bool) -> float:
    from ..experiments.l2x.methods import L2XMethod
    from ..experiments.l2x.planted import make_corpus
    from ..experiments.l2x.run import L2XConfig, _train_one
    from ..topk import TopK

    config = L2XConfig(epochs=1, n_train=80, n_val=40, n_test=40) if quick else L2XConfig()

    def make(k: int, n: int, cfg: L2XConfig, generator: torch.Generator | None) -> nn.Module:
        return setting.layer(TopK(k, n), SumOfGamma(k=k, tau=cfg.tau_factor * k, s=10), generator=generator)

    full = make_corpus(config.n_train + config.n_val + config.n_test, config.corpus, seed=seed)
    a, b = config.n_train, config.n_train + config.n_val
    splits = (full.subset(slice(0, a)), full.subset(slice(a, b)), full.subset(slice(b, None)))
    run = _train_one("candidate", 10, seed, splits, config, L2XMethod("candidate", make))
    return run.precision


def _sort(setting: Setting, seed: int, quick: bool) -> float:
    from ..adapters.graphs.matching import TorchMatching
    from ..experiments.sort.data import load_digit_pools
    from ..experiments.sort.methods import SortMethod
    from ..experiments.sort.run import SortConfig, _train_one

    config = SortConfig(quick=True) if quick else SortConfig()
    config = config.resolved()

    def make(n: int, cfg: SortConfig, generator: torch.Generator | None) -> nn.Module:
        return setting.layer(TorchMatching(n, n), SumOfGamma(tau=cfg.noise_tau), generator=generator)

    run = _train_one("candidate", 5, seed, load_digit_pools(seed), config, SortMethod("candidate", make))
    return 100.0 * run.exact


TASKS: dict[str, Task] = {
    "shortest-path": Task("test regret", False, _pto("shortest-path")),
    "knapsack": Task("test regret", False, _pto("knapsack")),
    "terrain": Task("% optimal", True, _terrain),
    "toy": Task("expected loss", False, _toy),
    "vae-sog": Task("test loss", False, _vae("sog")),
    "vae-gumbel": Task("test loss", False, _vae("gumbel")),
    "l2x": Task("% precision", True, _l2x),
    "sort": Task("% exact", True, _sort),
}
"""Task key → `Task`, in table order."""


def _score(values: Sequence[float], higher_is_better: bool) -> float:
    """Mean over the seeds, as the table ranks it (non-finite runs rank last)."""
    mean = statistics.mean(values)
    if math.isfinite(mean):
        return mean
    return -math.inf if higher_is_better else math.inf


def run(
    quick: bool = False,
    *,
    tasks: Sequence[str] | None = None,
    candidates: Sequence[str] | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Train every candidate on every task and seed; one row per (task, candidate).

    Each row gives the metric's mean and standard deviation over the seeds, the per-seed values, the
    λ a tuned candidate took (chosen by its mean over the seeds), and ``vs_best``: the ratio of the
    candidate's mean to the best candidate's on that task, oriented so that 1.00 is the best and 1.05 is
    5 % worse (``mean / best`` for a metric to minimise, ``best / mean`` for one to maximise).

    Parameters
    ----------
    quick
        Smoke settings (seconds per task; one seed unless ``seeds`` is given).
    tasks
        Keys of `TASKS` (default: all).
    candidates
        Keys of `CANDIDATES` (default: all).
    seeds
        The paired seeds.
    on_row
        Called with each task's rows as soon as the task is finished.
    """
    task_keys = list(tasks or TASKS)
    cand_keys = list(candidates or CANDIDATES)
    for key in task_keys:
        if key not in TASKS:
            raise ValueError(f"unknown task {key!r}; choose from {', '.join(TASKS)}")
    for key in cand_keys:
        if key not in CANDIDATES:
            raise ValueError(f"unknown candidate {key!r}; choose from {', '.join(CANDIDATES)}")
    seeds = list(seeds[:1] if quick and tuple(seeds) == (0, 1, 2) else seeds)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: threads only add synchronisation
    rows: list[dict[str, Any]] = []
    try:
        for task_key in task_keys:
            task = TASKS[task_key]
            task_rows = [_candidate_row(task_key, task, CANDIDATES[c], c, seeds, quick) for c in cand_keys]
            scores = [_score(r["values"], task.higher_is_better) for r in task_rows]
            best = max(scores) if task.higher_is_better else min(scores)
            for row, score in zip(task_rows, scores):
                row["vs_best"] = _ratio(score, best, task.higher_is_better)
            rows += task_rows
            if on_row is not None:
                for row in task_rows:
                    on_row(row)
    finally:
        torch.set_num_threads(threads)
    return rows


def _std(values: Sequence[float]) -> float:
    """Standard deviation over the seeds: 0 for one seed, NaN where a run diverged (not finite)."""
    if len(values) < 2:
        return 0.0
    if not all(math.isfinite(v) for v in values):
        return math.nan  # statistics.stdev raises on inf and NaN
    return statistics.stdev(values)


def _ratio(score: float, best: float, higher_is_better: bool) -> float:
    """How far ``score`` is from ``best``: 1.0 at the best, > 1 worse."""
    if score == best:
        return 1.0
    num, den = (best, score) if higher_is_better else (score, best)
    return num / den if den > 0 and math.isfinite(num) else math.inf


def _candidate_row(
    task_key: str, task: Task, candidate: Candidate, key: str, seeds: list[int], quick: bool
) -> dict[str, Any]:
    """The candidate's runs on the task (every λ of a tuned candidate), its best λ's row."""
    results: dict[float | None, list[float]] = {}
    with warnings.catch_warnings():
        # a fixed λ losing rows to the loss scale is part of what the table measures
        warnings.filterwarnings("ignore", message=r"PerturbedTarget\(lam=", category=RuntimeWarning)
        for lam in candidate.settings():
            setting = Setting(candidate, lam)
            results[lam] = [float(task.train(setting, seed, quick)) for seed in seeds]
    pick = max if task.higher_is_better else min
    lam = pick(results, key=lambda v: _score(results[v], task.higher_is_better))
    values = results[lam]
    return {
        "suite": "targets",
        "task": task_key,
        "metric": task.metric,
        "candidate": key,
        "target": candidate.label,
        "lam": lam,
        "mean": statistics.mean(values),
        "std": _std(values),
        "values": values,
        "seeds": list(seeds),
    }
