"""``imle-solvers bench targets``: the I-MLE targets trained on every task the library ships.

Every candidate target trains every task on the same seeds (paired: a seed fixes the data, the initial
model and the noise stream of every candidate alike), and the table gives each task's main metric per
candidate, its mean over the seeds and its ratio to the best candidate of the task. The loops are the
ones a user writes: the loss reduced with ``.mean()`` over the batch, the layer built as
``IMLE(oracle, noise, target, ...)``.

Candidates (`CANDIDATES`): the library's default (``IMLE(oracle)`` with no ``target``, whatever it is
when the suite runs), [`AutoTarget`][imle_solvers.AutoTarget] told that the loss is linear and without
its prior and floor, the other regimes of [`RelativeTarget`][imle_solvers.RelativeTarget],
[`AdaptiveTarget`][imle_solvers.AdaptiveTarget], and the paper's fixed-λ
[`PerturbedTarget`][imle_solvers.PerturbedTarget] *tuned*: its loss is scaled per instance (the layer
sees the gradient of the loss summed over the batch, as torch-imle users write it; the parameters' gradient
keeps the mean's scale) and the best λ of `PID_GRID` on each task is reported, with the λ it took.

Tasks (`TASKS`, seeds `SELECTION_SEEDS`: the part of the table that chooses the default), each with the
metric it is judged by:

* ``shortest-path``, ``knapsack``: PyEPO's protocol at polynomial degree 6 (1,000 training and 1,000 test
  instances, linear model, Adam 10⁻², batch 32, 10 epochs, S = 10 samples, the regret ``⟨c, z⟩``
  averaged over the batch and the samples): normalised test regret. ``-s1``: the same with S = 1 (the
  layer's default); ``-squared``: trained on the curved ``‖z − z*‖²`` to the optimal state instead of
  the regret (judged by the same test regret).
* ``terrain``: 12 × 12 terrain maps (1,000 training, 200 test maps, the terrain CNN, Adam 5·10⁻⁴, batch
  35, 10 epochs, S = 1, regret averaged over the batch): % of test maps decided optimally.
* ``toy``, ``toy-s10``: the paper's top-k toy (10 items, k = 5, the exact expected loss ``E‖z − b‖²``
  after 50 steps of SGD with momentum, 100 runs per setting, the best of the toy experiment's 6 step
  sizes (0.01 to 3) re-run with fresh noise), Sum-of-Gamma and Gumbel noise averaged, with S = 1 or
  10: final expected loss.
* ``vae-sog``, ``vae-gumbel``: the discrete 10-subset VAE on scikit-learn's digits (30 epochs, the
  paper's SoG at τ = 10, or Gumbel(0, 1)): test loss.
* ``l2x``: learning to explain on the planted corpus (k = 10, 8 epochs, SoG at τ = k): % subset
  precision of the explanations.
* ``sort``: sorting 5 two-digit handwritten numbers (1,500 Adam steps, SoG at τ = 1, the squared error
  to the permutation averaged over the batch): % of test sequences sorted exactly.

Held-out tasks (`HELD_OUT`, seeds `HELD_OUT_SEEDS`): problem families, degrees and seeds that took no
part in the choice, reported apart (``--part held-out``).

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
from ..target import AutoTarget, PerturbedTarget, RelativeTarget, TargetDistribution, default_target

__all__ = [
    "CANDIDATES",
    "HELD_OUT",
    "HELD_OUT_SEEDS",
    "PID_GRID",
    "PTO_LOSSES",
    "SELECTION_SEEDS",
    "TASKS",
    "Candidate",
    "Task",
    "run",
]

PID_GRID: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1000.0)
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
    "declared-linear": Candidate("AutoTarget(linear=True)", lambda _: AutoTarget(linear=True)),
    "unweighted": Candidate("AutoTarget(prior=0, floor=0)", lambda _: AutoTarget(prior=0.0, floor=0.0)),
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

PTO_LOSSES = ("regret", "squared")
"""The losses of the predict-then-optimize tasks: the regret ``⟨c, z⟩`` (linear in z) and the squared
distance ``‖z − z*‖²`` to the optimal solution (curved in z)."""


def _generated(family: str, n: int, deg: int, seed: int) -> tuple[Any, Any, MapOracle]:
    """A predict-then-optimize data set of a family the command does not train: PyEPO's cost model
    (`spo_costs`, p = 5 features, noise half-width 0.5) on a 6 × 6 assignment (values to maximise), the
    spanning trees of the complete graph on 7 nodes (costs) or the 8-subsets of 30 items (values)."""
    import numpy as np

    from ..adapters.graphs.matching import TorchMatching
    from ..adapters.graphs.spanning_tree import TorchSpanningTree
    from ..data.dataset import PTODataset, spo_costs
    from ..topk import TopK

    oracle: MapOracle
    if family == "assignment":
        oracle = TorchMatching(6, 6)
    elif family == "spanning-tree":
        oracle = TorchSpanningTree(7, [(u, v) for u in range(7) for v in range(u + 1, 7)], kind="min")
    else:
        oracle = TopK(8, 30)
    rnd = np.random.RandomState(seed)
    basis = rnd.binomial(1, 0.5, (oracle.n_vars, 5))  # B   [m, p]
    x = rnd.normal(0.0, 1.0, (2 * n, 5))  # features   [2n, p]
    noise = rnd.uniform(0.5, 1.5, (2 * n, oracle.n_vars))  # ε   [2n, m]
    costs = spo_costs(x, basis, deg, noise)  # [2n, m]
    data = PTODataset(torch.from_numpy(x).float(), torch.from_numpy(costs).float(), oracle)
    train, test = data.split(n)
    return train, test, oracle


def _pto(
    problem: str, *, samples: int = 10, loss: str = "regret", deg: int = 6
) -> Callable[[Setting, int, bool], float]:
    """PyEPO's protocol on ``problem`` with ``samples`` samples and the ``loss`` of `PTO_LOSSES`."""

    def train(setting: Setting, seed: int, quick: bool) -> float:
        from ..losses import regret
        from ..training import TrainConfig, make_problem
        from ..training.models import linear_model

        n = 100 if quick else 1000
        if problem in ("shortest-path", "knapsack"):
            plan = TrainConfig(problem=problem, n_train=n, n_test=n, deg=deg, show_progress=False).plan()
            prob = make_problem(plan, seed)
            data, test, oracle, judge = prob.train, prob.test, prob.train_oracle, prob.eval_oracle
            make_model = prob.model
        else:
            data, test, oracle = _generated(problem, n, deg, seed)
            judge = oracle
            make_model = lambda: linear_model(5, oracle.n_vars)  # noqa: E731 - one line, one use
        torch.manual_seed(seed)
        model = make_model()
        s = min(samples, 2) if quick else samples
        gen = torch.Generator().manual_seed(seed)
        layer = setting.layer(oracle, samples=s, generator=gen)
        sign = sense_sign(oracle)  # ⟨c, z⟩ for min, −⟨v, z⟩ for max
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
        order = torch.Generator().manual_seed(seed)
        for _ in range(1 if quick else 10):
            for idx in torch.randperm(len(data), generator=order).split(32):
                z = layer(model(data.features[idx]))  # z = MAP(θ + ε)   [B, S, m] or [B, m]
                if s > 1:
                    costs, best = data.costs[idx].unsqueeze(1), data.solutions[idx].unsqueeze(1)  # [B, 1, m]
                else:
                    costs, best = data.costs[idx], data.solutions[idx]  # [B, m]
                if loss == "regret":
                    value = -sign * (costs * z).sum(-1).mean()  # ⟨c, z⟩, .mean()
                else:
                    value = (z - best).square().sum(-1).mean()  # ‖z − z*‖², .mean()
                optimiser.zero_grad(set_to_none=True)
                value.backward()
                optimiser.step()
        model.eval()
        with torch.no_grad():
            predicted = model(test.features)
            return float(regret(judge, predicted, test.costs, optimal=test.solutions))

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


def _toy_task(samples: int) -> Callable[[Setting, int, bool], float]:
    """The paper's top-k toy with ``samples`` samples a step (the loss averaged over them)."""

    def train(setting: Setting, seed: int, quick: bool) -> float:
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
                return _optimise(problem, method, lam, rates, runs, steps, gen, setting.target(), samples)

            # one layer per learning rate, as one model trains with one rate (a target whose step is sized
            # over the batch sees runs of one rate only)
            grid = torch.stack([curves([rate], i)[0, :, -1].mean() for i, rate in enumerate(sgd)])  # [n_lr]
            best = sgd[int(torch.nan_to_num(grid, nan=math.inf).argmin())]
            finals.append(float(curves([best], len(sgd))[0, :, -1].mean()))  # fresh noise at the best rate
        return statistics.mean(finals)

    return train


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
    "shortest-path-s1": Task("test regret", False, _pto("shortest-path", samples=1)),
    "shortest-path-squared": Task("test regret", False, _pto("shortest-path", loss="squared")),
    "shortest-path-squared-s1": Task("test regret", False, _pto("shortest-path", samples=1, loss="squared")),
    "knapsack": Task("test regret", False, _pto("knapsack")),
    "knapsack-s1": Task("test regret", False, _pto("knapsack", samples=1)),
    "knapsack-squared": Task("test regret", False, _pto("knapsack", loss="squared")),
    "knapsack-squared-s1": Task("test regret", False, _pto("knapsack", samples=1, loss="squared")),
    "terrain": Task("% optimal", True, _terrain),
    "toy": Task("expected loss", False, _toy_task(1)),
    "toy-s10": Task("expected loss", False, _toy_task(10)),
    "vae-sog": Task("test loss", False, _vae("sog")),
    "vae-gumbel": Task("test loss", False, _vae("gumbel")),
    "l2x": Task("% precision", True, _l2x),
    "sort": Task("% exact", True, _sort),
}
"""Task key → `Task`, in table order: the tasks that choose the default (`SELECTION_SEEDS`)."""

HELD_OUT: dict[str, Task] = {
    f"{family}{loss}{s1}": Task(
        "test regret",
        False,
        _pto(family, samples=1 if s1 else 10, loss="squared" if loss else "regret", deg=4),
    )
    for family in ("assignment", "spanning-tree", "subsets")
    for loss in ("", "-squared")
    for s1 in ("", "-s1")
} | {
    "shortest-path-deg2-s1": Task("test regret", False, _pto("shortest-path", samples=1, deg=2)),
    "knapsack-deg2-s1": Task("test regret", False, _pto("knapsack", samples=1, deg=2)),
}
"""The held-out tasks, on other seeds (`HELD_OUT_SEEDS`): problem families, degrees and seeds that took no
part in choosing the default. Predict-then-optimize at deg 4 on a 6 × 6 assignment, the spanning trees of
K₇ and the 8-subsets of 30 items, each with S = 10 and S = 1 and with the regret and the squared
distance to z*; shortest path and knapsack at deg 2 with S = 1."""

SELECTION_SEEDS: tuple[int, ...] = (0, 1, 2)
"""The seeds of the tasks that choose the default."""
HELD_OUT_SEEDS: tuple[int, ...] = (3, 4, 5)
"""The seeds of the held-out tasks."""


def _score(values: Sequence[float], higher_is_better: bool) -> float:
    """Mean over the seeds, as the table ranks it (non-finite runs rank last)."""
    mean = statistics.mean(values)
    if math.isfinite(mean):
        return mean
    return -math.inf if higher_is_better else math.inf


def run(
    quick: bool = False,
    *,
    part: str = "selection",
    tasks: Sequence[str] | None = None,
    candidates: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
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
    part
        ``"selection"``: the tasks of `TASKS` on `SELECTION_SEEDS`; ``"held-out"``: those of `HELD_OUT`
        on `HELD_OUT_SEEDS`; ``"all"``: both, each on its own seeds.
    tasks
        Keys of `TASKS` or `HELD_OUT` (default: every task of the part).
    candidates
        Keys of `CANDIDATES` (default: all).
    seeds
        The paired seeds (default: each task's part's seeds).
    on_row
        Called with each task's rows as soon as the task is finished.
    """
    parts = {"selection": (TASKS, SELECTION_SEEDS), "held-out": (HELD_OUT, HELD_OUT_SEEDS)}
    if part not in (*parts, "all"):
        raise ValueError(f"unknown part {part!r}; choose from selection, held-out, all")
    chosen = list(parts.values()) if part == "all" else [parts[part]]
    every = {key: (task, task_seeds) for table, task_seeds in parts.values() for key, task in table.items()}
    default_keys = [key for table, _ in chosen for key in table]
    task_keys = list(tasks or default_keys)
    cand_keys = list(candidates or CANDIDATES)
    for key in task_keys:
        if key not in every:
            raise ValueError(f"unknown task {key!r}; choose from {', '.join(every)}")
    for key in cand_keys:
        if key not in CANDIDATES:
            raise ValueError(f"unknown candidate {key!r}; choose from {', '.join(CANDIDATES)}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: threads only add synchronisation
    rows: list[dict[str, Any]] = []
    try:
        for task_key in task_keys:
            task, task_seeds = every[task_key]
            run_seeds = list(task_seeds if seeds is None else seeds)
            run_seeds = run_seeds[:1] if quick and seeds is None else run_seeds
            task_rows = [
                _candidate_row(task_key, task, CANDIDATES[c], c, run_seeds, quick) for c in cand_keys
            ]
            scores = [_score(r["values"], task.higher_is_better) for r in task_rows]
            best = max(scores) if task.higher_is_better else min(scores)
            for row, score in zip(task_rows, scores):
                row["vs_best"] = _ratio(score, best, task.higher_is_better)
                row["held_out"] = task_key in HELD_OUT
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
