"""``imle-solvers bench targets``: the candidates, the per-instance wrapper, the table's arithmetic, and
each task's documented protocol (checked by spying on the training loop, not by running it in full)."""

from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch

import imle_solvers.benchmarks.targets as bench
from imle_solvers import (
    IMLE,
    AdaptiveTarget,
    AutoTarget,
    Gumbel,
    PerturbedTarget,
    RelativeTarget,
    SumOfGamma,
    TopK,
    TorchMatching,
)
from imle_solvers.benchmarks.targets import CANDIDATES, PID_GRID, TASKS, Candidate, Setting, Task
from imle_solvers.oracle import sense_sign
from imle_solvers.target import Solve, TargetDistribution

# --- the candidates and their layers --------------------------------------------------------------------


def test_each_candidate_builds_the_target_it_names() -> None:
    assert list(CANDIDATES) == [
        "default",
        "declared-linear",
        "unweighted",
        "relative-1",
        "large-step",
        "aimle",
        "pid",
    ]
    assert CANDIDATES["default"].make(None) is None  # the layer's own default
    assert isinstance(Setting(CANDIDATES["default"], None).target(), AutoTarget)
    assert CANDIDATES["declared-linear"].make(None) == AutoTarget(linear=True)
    assert CANDIDATES["unweighted"].make(None) == AutoTarget(prior=0.0, floor=0.0)
    assert CANDIDATES["relative-1"].make(None) == RelativeTarget(1.0, two_sided=True)
    assert CANDIDATES["large-step"].make(None) == RelativeTarget(10.0, two_sided=False)
    assert isinstance(CANDIDATES["aimle"].make(None), AdaptiveTarget)
    pid = CANDIDATES["pid"]
    assert pid.grid == PID_GRID == (0.1, 1.0, 10.0, 100.0, 1000.0) and pid.per_instance
    assert [pid.make(lam) for lam in pid.settings()] == [PerturbedTarget(lam) for lam in PID_GRID]
    assert isinstance(pid.make(None), PerturbedTarget)  # every candidate builds something from None
    for key, candidate in CANDIDATES.items():
        assert candidate.per_instance == (key == "pid")
        assert candidate.settings() == (list(PID_GRID) if key == "pid" else [None])
        made = Setting(candidate, candidate.settings()[0]).target()
        assert isinstance(made, TargetDistribution)
        assert made is not Setting(candidate, candidate.settings()[0]).target()  # a fresh one per layer


def test_setting_builds_the_imle_layer_of_its_candidate() -> None:
    oracle, gen = TopK(2, 6), torch.Generator().manual_seed(0)
    layer = Setting(CANDIDATES["relative-1"], None).layer(oracle, Gumbel(), samples=3, generator=gen)
    assert isinstance(layer, IMLE) and layer.target == RelativeTarget(1.0, two_sided=True)
    assert layer.samples == 3 and layer.generator is gen and isinstance(layer.noise, Gumbel)
    default = Setting(CANDIDATES["default"], None).layer(oracle)
    assert isinstance(default, IMLE) and isinstance(default.target, AutoTarget)
    tuned = Setting(CANDIDATES["pid"], 100.0).layer(oracle, samples=2, generator=gen)
    assert not isinstance(tuned, IMLE) and isinstance(tuned.layer, IMLE)  # scaled per instance
    assert tuned.layer.target == PerturbedTarget(100.0) and tuned.layer.samples == 2
    assert tuned.generator is gen  # the wrapper shows the layer's generator...
    other = torch.Generator().manual_seed(1)
    cast(Any, tuned).generator = other  # ...and sets it, as the experiments do to reseed their layers
    assert tuned.layer.generator is other


def test_per_instance_layer_sees_the_loss_of_each_instance_and_keeps_the_mean_s_scale() -> None:
    # a loss averaged over B rows hands each row ∇zL / B; the fixed-λ target is to see ∇zL itself, and
    # the weights' gradient keeps the mean's scale: (1/B) · layer's gradient for the upstream B · ∇zL
    batch = 4
    theta = torch.randn(batch, 6, generator=torch.Generator().manual_seed(2))
    upstream = 0.3 * torch.randn(batch, 2, 6, generator=torch.Generator().manual_seed(3))

    def layer() -> IMLE:
        return IMLE(
            TopK(2, 6), Gumbel(), PerturbedTarget(1.0), samples=2, generator=torch.Generator().manual_seed(4)
        )

    wrapped = Setting(CANDIDATES["pid"], 1.0).layer(TopK(2, 6), Gumbel(), samples=2)
    cast(Any, wrapped).generator = torch.Generator().manual_seed(4)
    mine = theta.clone().requires_grad_()
    z = wrapped(mine)
    (z * upstream).sum().backward()
    plain = theta.clone().requires_grad_()
    z_plain = layer()(plain)
    (z_plain * (batch * upstream)).sum().backward()
    assert torch.equal(z, z_plain)  # the forward pass is the layer's
    assert mine.grad is not None and plain.grad is not None and bool(mine.grad.any())
    torch.testing.assert_close(mine.grad, plain.grad / batch)


# --- the table: rows, the best λ, the ratios -------------------------------------------------------------


def _fake_tasks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Two tasks (one to minimise, one to maximise) whose value is a table of λ, plus the seed; two
    candidates (one untuned, one tuned over three λ). Returns the calls."""
    calls: list[tuple[Any, ...]] = []

    def train(setting: Setting, seed: int, quick: bool) -> float:
        calls.append((setting.candidate.label, setting.lam, seed, quick, torch.get_num_threads()))
        return {None: 5.0, 1.0: 4.0, 10.0: 2.0, 100.0: 3.0}[setting.lam] + seed

    monkeypatch.setattr(
        bench, "TASKS", {"low": Task("loss", False, train), "high": Task("score", True, train)}
    )
    monkeypatch.setattr(bench, "HELD_OUT", {"other": Task("loss", False, train)})
    monkeypatch.setattr(
        bench,
        "CANDIDATES",
        {
            "plain": Candidate("Plain()", lambda _: None),
            "tuned": Candidate(
                "Tuned(λ)", lambda lam: PerturbedTarget(float(lam or 1.0)), grid=(1.0, 10.0, 100.0)
            ),
        },
    )
    return calls


def test_rows_give_each_candidate_its_best_lambda_and_its_ratio_to_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_tasks(monkeypatch)
    seen: list[tuple[str, str, int]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        rows = bench.run(
            seeds=(0, 2), on_row=lambda row: seen.append((row["task"], row["candidate"], len(calls)))
        )
        assert torch.get_num_threads() == 3  # restored
    finally:
        torch.set_num_threads(threads)
    assert {c[4] for c in calls} == {1}  # one thread while the tasks train
    assert [(r["task"], r["candidate"]) for r in rows] == [
        ("low", "plain"),
        ("low", "tuned"),
        ("high", "plain"),
        ("high", "tuned"),
    ]
    # each task's rows are handed over once the task is done (8 runs a task: 1 + 3 settings × 2 seeds)
    assert seen == [("low", "plain", 8), ("low", "tuned", 8), ("high", "plain", 16), ("high", "tuned", 16)]
    low_plain, low_tuned, high_plain, high_tuned = rows
    assert low_plain == {
        "suite": "targets",
        "task": "low",
        "metric": "loss",
        "candidate": "plain",
        "target": "Plain()",
        "lam": None,
        "mean": 6.0,
        "std": statistics.stdev([5.0, 7.0]),
        "values": [5.0, 7.0],
        "seeds": [0, 2],
        "vs_best": 2.0,  # 6 / 3: twice the best loss
        "held_out": False,
    }
    # a loss is minimised: λ = 10 (values 2, 4); a score is maximised: λ = 1 (values 4, 6)
    assert (low_tuned["lam"], low_tuned["values"], low_tuned["vs_best"]) == (10.0, [2.0, 4.0], 1.0)
    assert (high_tuned["lam"], high_tuned["values"], high_tuned["mean"]) == (1.0, [4.0, 6.0], 5.0)
    assert high_plain["vs_best"] == 1.0 and high_tuned["vs_best"] == pytest.approx(6.0 / 5.0)


def test_quick_takes_one_seed_unless_seeds_are_given_and_names_are_checked_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_tasks(monkeypatch)
    rows = bench.run(quick=True, tasks=["low"], candidates=["plain"])
    assert rows[0]["seeds"] == [0] and rows[0]["std"] == 0.0 and {c[3] for c in calls} == {True}
    assert bench.run(quick=True, tasks=["low"], candidates=["plain"], seeds=(1, 2))[0]["seeds"] == [1, 2]
    assert bench.run(tasks=["low"], candidates=["plain"])[0]["seeds"] == [0, 1, 2]  # the full run: three
    assert [r["candidate"] for r in bench.run(quick=True, tasks=["high"])] == ["plain", "tuned"]  # all
    calls.clear()
    with pytest.raises(ValueError, match="unknown task 'nope'; choose from low, high, other"):
        bench.run(tasks=["low", "nope"])
    with pytest.raises(ValueError, match="unknown part 'some'; choose from selection, held-out, all"):
        bench.run(part="some")
    with pytest.raises(ValueError, match="unknown candidate 'nope'; choose from plain, tuned"):
        bench.run(candidates=["plain", "nope"])
    assert calls == []  # nothing trained


def test_the_held_out_tasks_run_on_their_own_seeds_and_are_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_tasks(monkeypatch)
    rows = bench.run(part="held-out", candidates=["plain"])
    assert [(r["task"], r["seeds"], r["held_out"]) for r in rows] == [("other", [3, 4, 5], True)]
    assert bench.SELECTION_SEEDS == (0, 1, 2) and bench.HELD_OUT_SEEDS == (3, 4, 5)
    calls.clear()
    rows = bench.run(part="all", candidates=["plain"])
    assert [(r["task"], r["seeds"], r["held_out"]) for r in rows] == [
        ("low", [0, 1, 2], False),
        ("high", [0, 1, 2], False),
        ("other", [3, 4, 5], True),
    ]
    assert sorted({c[2] for c in calls}) == [0, 1, 2, 3, 4, 5]
    assert bench.run(part="all", quick=True, candidates=["plain"])[2]["seeds"] == [3]  # quick: the first
    assert bench.run(part="held-out", candidates=["plain"], seeds=(7,))[0]["seeds"] == [7]


def test_the_table_covers_one_and_ten_samples_and_both_losses_on_every_pto_family() -> None:
    selection = {k for k in TASKS if k.startswith(("shortest-path", "knapsack"))}
    assert selection == {
        f"{p}{loss}{s1}"
        for p in ("shortest-path", "knapsack")
        for loss in ("", "-squared")
        for s1 in ("", "-s1")
    }
    assert {"toy", "toy-s10", "terrain", "vae-sog", "vae-gumbel", "l2x", "sort"} <= set(TASKS)
    assert set(bench.HELD_OUT) == {
        f"{family}{loss}{s1}"
        for family in ("assignment", "spanning-tree", "subsets")
        for loss in ("", "-squared")
        for s1 in ("", "-s1")
    } | {"shortest-path-deg2-s1", "knapsack-deg2-s1"}
    assert not set(TASKS) & set(bench.HELD_OUT)


def test_threads_are_restored_when_a_task_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(setting: Setting, seed: int, quick: bool) -> float:
        raise RuntimeError("boom")

    monkeypatch.setattr(bench, "TASKS", {"bad": Task("x", False, fails)})
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            bench.run(candidates=["default"])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_a_run_that_diverged_ranks_last(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"a": [1.0, math.nan], "b": [4.0, 4.0]}

    def train(setting: Setting, seed: int, quick: bool) -> float:
        return values[setting.candidate.label][seed]

    monkeypatch.setattr(bench, "CANDIDATES", {k: Candidate(k, lambda _: None) for k in values})
    for higher in (False, True):
        monkeypatch.setattr(bench, "TASKS", {"t": Task("m", higher, train)})
        a, b = bench.run(seeds=(0, 1))  # the table is still made
        assert math.isnan(a["mean"]) and math.isnan(a["std"]) and a["vs_best"] == math.inf
        assert (b["mean"], b["std"], b["vs_best"]) == (4.0, 0.0, 1.0)


@pytest.mark.parametrize(
    ("score", "best", "higher", "ratio"),
    [
        (3.0, 3.0, False, 1.0),
        (6.0, 3.0, False, 2.0),  # a loss twice the best
        (0.0, 0.0, True, 1.0),
        (2.0, 8.0, True, 4.0),  # a quarter of the best score
        (0.5, 0.0, False, math.inf),  # nothing is a ratio of a zero loss
        (0.0, 0.5, True, math.inf),
        (-math.inf, 2.0, True, math.inf),
        (math.inf, 2.0, False, math.inf),
    ],
)
def test_the_ratio_to_the_best_is_1_at_the_best_and_grows_worse(
    score: float, best: float, higher: bool, ratio: float
) -> None:
    assert bench._ratio(score, best, higher) == ratio


def test_a_fixed_lambda_losing_rows_is_measured_quietly_but_other_warnings_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def train(setting: Setting, seed: int, quick: bool) -> float:
        warnings.warn("PerturbedTarget(lam=1.0) returned an all-zero gradient", RuntimeWarning, stacklevel=1)
        if setting.lam == 100.0:
            warnings.warn("something else", RuntimeWarning, stacklevel=1)
        return 1.0

    monkeypatch.setattr(bench, "TASKS", {"t": Task("m", False, train)})
    bench.run(candidates=["default"], seeds=(0,))  # the suite's RuntimeWarnings are errors
    with pytest.warns(RuntimeWarning, match="something else"):
        bench.run(candidates=["pid"], seeds=(0,))


# --- each task's protocol -------------------------------------------------------------------------------


class SpyTarget(TargetDistribution):
    """The default target, recording what every backward pass hands it."""

    def __init__(self) -> None:
        self.inner = AutoTarget()
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []  # (z, ∇zL)   [B, S, m] each

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return self.inner.params(theta, grad_z)

    def estimate(
        self, theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor, solve: Solve
    ) -> torch.Tensor:
        self.seen.append((z.detach().clone(), grad_z.detach().clone()))
        return self.inner.estimate(theta, eps, z, grad_z, solve)


@dataclasses.dataclass
class Spied:
    """What a task's training loop was given: the plan, the problem, the models, Adam's rates."""

    plans: list[Any] = dataclasses.field(default_factory=list)
    problems: list[Any] = dataclasses.field(default_factory=list)
    models: list[torch.nn.Module] = dataclasses.field(default_factory=list)
    rates: list[float] = dataclasses.field(default_factory=list)


def _spy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shrink: tuple[int, int] | None = None) -> Spied:
    """Record the plan, problem, model and learning rate of a task; ``shrink`` builds the problem with
    that many training and test instances instead (the full protocol, on small data)."""
    import imle_solvers.training as training

    spied = Spied()
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "cache"))
    real = training.make_problem

    def make_problem(plan: Any, seed: int, **kwargs: Any) -> Any:
        spied.plans.append(plan)
        if shrink is not None:
            plan = dataclasses.replace(
                plan, data=dataclasses.replace(plan.data, n_train=shrink[0], n_test=shrink[1])
            )
        problem = real(plan, seed, **kwargs)
        factory = problem.model

        def model() -> torch.nn.Module:
            made = factory()
            spied.models.append(made)
            return made

        problem = dataclasses.replace(problem, model=model)
        spied.problems.append(problem)
        return problem

    class Adam(torch.optim.Adam):
        def __init__(self, params: Any, lr: float = 1e-3, **kwargs: Any) -> None:
            spied.rates.append(lr)
            super().__init__(params, lr=lr, **kwargs)

    monkeypatch.setattr(training, "make_problem", make_problem)
    monkeypatch.setattr(torch.optim, "Adam", Adam)
    return spied


def _spy_setting() -> tuple[Setting, SpyTarget]:
    target = SpyTarget()
    return Setting(Candidate("spy", lambda _: target), None), target


def _rows_of(rows: torch.Tensor, table: torch.Tensor) -> bool:
    """Whether every row of ``rows`` is (to float32 rounding) a row of ``table``."""
    close = torch.isclose(rows[:, None, :].double(), table[None, :, :].double(), rtol=1e-5, atol=1e-6)
    return bool(close.all(dim=-1).any(dim=1).all())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("key", "samples", "loss"),
    [
        ("shortest-path", 10, "regret"),
        ("knapsack", 10, "regret"),
        ("knapsack-s1", 1, "regret"),
        ("shortest-path-squared", 10, "squared"),
        ("shortest-path-squared-s1", 1, "squared"),
    ],
)
def test_pto_tasks_follow_pyepo_s_protocol(
    key: str, samples: int, loss: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from imle_solvers.losses import regret

    problem = "knapsack" if key.startswith("knapsack") else "shortest-path"
    spied = _spy(monkeypatch, tmp_path, shrink=(40, 20))  # 40 instances: batches of 32 and 8
    setting, spy = _spy_setting()
    value = TASKS[key].train(setting, 3, False)
    (plan,), (prob,), (model,) = spied.plans, spied.problems, spied.models
    assert (plan.problem, plan.data.n_train, plan.data.n_test, plan.data.deg) == (problem, 1000, 1000, 6)
    assert isinstance(model, torch.nn.Linear) and spied.rates == [1e-2]  # linear model, Adam 10⁻²
    assert len(spy.seen) == 10 * 2  # 10 epochs of 2 batches
    sign = sense_sign(prob.train_oracle)
    for z, grad in spy.seen:
        batch, s = grad.shape[:2]
        assert batch in (32, 8) and s == samples
        if loss == "regret":
            assert torch.equal(grad, grad[:, :1].expand_as(grad))  # ⟨c, z⟩ is linear: every sample alike
            # the regret ⟨c, z⟩ averaged over the batch and the samples: ∇zL = ∓c / (B·S), c a training row
            assert _rows_of(-sign * grad[:, 0] * batch * s, prob.train.costs)
        else:  # ‖z − z*‖² averaged over the batch and the samples: ∇zL = 2(z − z*) / (B·S)
            best = z - grad * batch * s / 2  # z*   [B, S, m]
            assert _rows_of(best.reshape(-1, best.shape[-1]), prob.train.solutions)
            assert torch.equal(best, best[:, :1].expand_as(best))
    test = prob.test
    with torch.no_grad():
        want = regret(prob.eval_oracle, model(test.features), test.costs, optimal=test.solutions)
    assert value == float(want)  # normalised test regret of the trained model


@pytest.mark.timeout(60)
@pytest.mark.parametrize("family", ["assignment", "spanning-tree", "subsets"])
def test_held_out_families_generate_pyepo_style_data_on_their_own_oracle(family: str) -> None:
    from imle_solvers import TopK, TorchSpanningTree

    train, test, oracle = bench._generated(family, 30, 4, seed=3)
    kind = {"assignment": TorchMatching, "spanning-tree": TorchSpanningTree, "subsets": TopK}[family]
    assert (
        isinstance(oracle, kind)
        and oracle.n_vars == {"assignment": 36, "spanning-tree": 21, "subsets": 30}[family]
    )
    assert train.features.shape == (30, 5) == test.features.shape and train.costs.shape == (30, oracle.n_vars)
    assert bool((train.costs > 0).all())  # the SPO cost model: positive
    torch.testing.assert_close(train.solutions, oracle.solve_torch(train.costs.double()).float())  # optimal
    again, _, _ = bench._generated(family, 30, 4, seed=3)
    other, _, _ = bench._generated(family, 30, 4, seed=4)
    assert torch.equal(again.costs, train.costs) and not torch.equal(other.costs, train.costs)
    setting, spy = _spy_setting()
    value = bench.HELD_OUT[f"{family}-squared-s1"].train(setting, 3, True)
    assert 0.0 <= value and value == bench.HELD_OUT[f"{family}-squared-s1"].train(setting, 3, True)
    assert {tuple(g.shape[1:]) for _, g in spy.seen} == {(1, oracle.n_vars)}  # one sample, that oracle


@pytest.mark.timeout(60)
@pytest.mark.parametrize("problem", ["shortest-path", "knapsack"])
def test_quick_pto_tasks_are_one_epoch_on_small_data(
    problem: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spied = _spy(monkeypatch, tmp_path)
    setting, spy = _spy_setting()
    first = TASKS[problem].train(setting, 0, True)
    (plan,) = spied.plans
    assert plan.data.n_train == plan.data.n_test < 1000 and len(spy.seen) == -(-plan.data.n_train // 32)
    assert {g.shape[1] for _, g in spy.seen} == {2}  # quick: two samples
    assert TASKS[problem].train(setting, 0, True) == first  # paired: the seed fixes everything
    assert TASKS[problem].train(setting, 1, True) != first


@pytest.mark.timeout(60)
def test_terrain_task_follows_its_protocol(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from imle_solvers.training.loop import evaluate

    spied = _spy(monkeypatch, tmp_path, shrink=(40, 20))  # batches of 35 and 5
    setting, spy = _spy_setting()
    value = TASKS["terrain"].train(setting, 2, False)
    (plan,), (prob,), (model,) = spied.plans, spied.problems, spied.models
    assert (plan.problem, plan.data.n_train, plan.data.n_test, plan.data.size) == ("terrain", 1000, 200, 12)
    assert plan.oracle == "device" and spied.rates == [5e-4]
    assert len(spy.seen) == 10 * 2
    for _, grad in spy.seen:
        batch, samples = grad.shape[:2]
        assert batch in (35, 5) and samples == 1
        assert _rows_of(grad[:, 0] * batch, prob.train.costs)  # ⟨c, z⟩ averaged over the batch
    assert value == 100.0 * evaluate(model, prob.test, prob.eval_oracle)["accuracy"]  # % optimal
    assert 0.0 <= value <= 100.0


@pytest.mark.timeout(60)
def test_quick_terrain_is_paired_by_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spied = _spy(monkeypatch, tmp_path)
    setting, spy = _spy_setting()
    first = TASKS["terrain"].train(setting, 0, True)
    assert first * spied.plans[0].data.n_test / 100 == pytest.approx(
        round(first * spied.plans[0].data.n_test / 100)
    )
    again = TASKS["terrain"].train(setting, 0, True)
    assert again == first and len(spied.models) == 2
    for a, b in zip(spied.models[0].parameters(), spied.models[1].parameters()):
        assert torch.equal(a, b)  # the same initial model, the same noise: the same trained model
    grads = [g for _, g in spy.seen]
    assert all(torch.equal(a, b) for a, b in zip(grads[: len(grads) // 2], grads[len(grads) // 2 :]))


def test_toy_takes_the_best_finite_learning_rate_and_reruns_it_with_fresh_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imle_solvers.experiments.topk_toy import run as toy_run

    calls: list[tuple[Any, ...]] = []
    best_rate = toy_run.DEFAULT_LRS[3]

    def optimise(
        problem: Any,
        method: Any,
        lam: Any,
        rates: list[float],
        runs: int,
        steps: int,
        gen: Any,
        target: Any,
        samples: int,
    ) -> torch.Tensor:
        calls.append((method.name, lam, list(rates), runs, steps, gen.initial_seed(), target, samples))
        (rate,) = rates
        tag = gen.initial_seed() % 1000
        if tag == len(toy_run.DEFAULT_LRS):  # the re-run of the best rate
            final = 0.5 if "SoG" in method.name else 1.5
        else:  # the first rate diverges; the others are worse the further from the best
            final = math.nan if rate == toy_run.DEFAULT_LRS[0] else 1.0 + abs(math.log(rate / best_rate))
        curve = torch.full((1, runs, steps + 1), 9.0)
        curve[0, :, -1] = final
        return curve

    monkeypatch.setattr(toy_run, "_optimise", optimise)
    value = TASKS["toy"].train(Setting(CANDIDATES["default"], None), 4, False)
    assert value == 1.0  # the mean of the two noises' re-runs
    n = len(toy_run.DEFAULT_LRS)
    assert len(calls) == 2 * (n + 1) and {c[7] for c in calls} == {1}
    calls.clear()
    assert TASKS["toy-s10"].train(Setting(CANDIDATES["default"], None), 4, False) == 1.0
    assert len(calls) == 2 * (n + 1) and {c[7] for c in calls} == {10}  # ten samples a step
    for half in (calls[: n + 1], calls[n + 1 :]):
        assert [c[2] for c in half] == [[r] for r in toy_run.DEFAULT_LRS] + [[best_rate]]  # one layer a rate
        assert {(c[3], c[4]) for c in half} == {(100, 50)}  # 100 runs, 50 steps
        assert [c[5] for c in half] == [4000 + tag for tag in range(n + 1)]  # fresh noise for the re-run
        assert all(isinstance(c[6], AutoTarget) for c in half)
    assert {c[0] for c in calls[: n + 1]} != {c[0] for c in calls[n + 1 :]}  # SoG, then Gumbel


def test_toy_steps_a_tuned_lambda_with_eta_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.experiments.topk_toy import run as toy_run

    rates: list[float] = []

    def optimise(
        problem: Any,
        method: Any,
        lam: Any,
        lrs: list[float],
        runs: int,
        steps: int,
        gen: Any,
        target: Any,
        samples: int,
    ) -> torch.Tensor:
        rates.extend(lrs)
        assert lam == 10.0 and target == PerturbedTarget(10.0)
        return torch.ones(1, runs, steps + 1)

    monkeypatch.setattr(toy_run, "_optimise", optimise)
    TASKS["toy"].train(Setting(CANDIDATES["pid"], 10.0), 0, True)
    quick = toy_run.DEFAULT_LRS[:2]
    assert rates[:2] == [toy_run._sgd_lr(eta, 10.0) for eta in quick] == [10.0 * eta for eta in quick]


@pytest.mark.parametrize("noise", ["sog", "gumbel"])
def test_vae_tasks_train_the_paper_s_vae_for_30_epochs(noise: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.experiments.vae import run as vae_run
    from imle_solvers.experiments.vae.images import load_images
    from imle_solvers.experiments.vae.model import N_VARS

    seen: list[tuple[Any, ...]] = []

    def train_one(method: Any, data: Any, config: Any, seed: int) -> tuple[Any, ...]:
        seen.append((method, data, config, seed))
        return [9.0, 3.5], [], 0.0, None

    monkeypatch.setattr(vae_run, "_train_one", train_one)
    setting = Setting(CANDIDATES["relative-1"], None)
    for quick in (False, True):
        assert TASKS[f"vae-{noise}"].train(setting, 7, quick) == 3.5  # the final test loss
    (method, full, config, seed), (_, small, quick_config, _) = seen
    assert seed == 7 and config.epochs == 30 and quick_config.epochs == 1 and method.k == 10
    images = load_images(None)
    assert len(full.train) == len(images.train) and len(full.test) == len(images.test)
    assert len(small.train) < len(full.train) and len(small.test) < len(full.test)
    layer = method.make(10, None)
    assert isinstance(layer, IMLE) and layer.oracle.n_vars == N_VARS and layer.target == RelativeTarget(1.0)
    if noise == "sog":
        assert layer.noise == SumOfGamma(k=10, tau=10.0, s=10)
    else:
        assert layer.noise == Gumbel(1.0)


def test_l2x_task_explains_with_10_subsets_at_tau_k(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.experiments.l2x import planted
    from imle_solvers.experiments.l2x import run as l2x_run

    seen: list[tuple[Any, ...]] = []

    def train_one(key: str, k: int, seed: int, splits: Any, config: Any, method: Any) -> Any:
        seen.append((k, seed, splits, config, method))
        return type("Run", (), {"precision": 62.5})()

    corpora: list[Any] = []
    real = planted.make_corpus

    def make_corpus(n: int, spec: Any, seed: int) -> Any:
        corpus = real(min(n, 300), spec, seed=seed)  # the full protocol's splits, on a smaller corpus
        corpora.append((n, seed, corpus))
        return corpus

    monkeypatch.setattr(l2x_run, "_train_one", train_one)
    monkeypatch.setattr(planted, "make_corpus", make_corpus)
    setting = Setting(CANDIDATES["default"], None)
    assert TASKS["l2x"].train(setting, 5, True) == 62.5
    k, seed, splits, config, method = seen[0]
    assert (k, seed, config.epochs) == (10, 5, 1)
    sizes = [len(part) for part in splits]
    assert sizes == [config.n_train, config.n_val, config.n_test]
    n, corpus_seed, corpus = corpora[0]
    assert (n, corpus_seed) == (sum(sizes), 5)  # one corpus, cut in three consecutive parts
    assert torch.equal(torch.cat([part.tokens for part in splits]), corpus.tokens)
    layer = method.make(10, 40, config, None)
    assert isinstance(layer, IMLE) and layer.noise == SumOfGamma(k=10, tau=10.0 * config.tau_factor, s=10)
    TASKS["l2x"].train(setting, 5, False)
    full = seen[1][3]
    assert full == l2x_run.L2XConfig() and corpora[1][0] == full.n_train + full.n_val + full.n_test


def test_sort_task_sorts_5_numbers_with_the_experiment_s_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.experiments.sort import data as sort_data
    from imle_solvers.experiments.sort import run as sort_run

    seen: list[tuple[Any, ...]] = []

    def train_one(key: str, n: int, seed: int, pools: Any, config: Any, method: Any) -> Any:
        seen.append((n, seed, pools, config, method))
        return type("Run", (), {"exact": 0.375})()

    monkeypatch.setattr(sort_run, "_train_one", train_one)
    monkeypatch.setattr(sort_data, "load_digit_pools", lambda seed: ("pools", seed))
    setting = Setting(CANDIDATES["large-step"], None)
    assert TASKS["sort"].train(setting, 6, False) == 37.5  # % of test sequences sorted exactly
    assert TASKS["sort"].train(setting, 6, True) == 37.5
    (n, seed, pools, config, method), quick = seen[0], seen[1]
    assert (n, seed, pools) == (5, 6, ("pools", 6)) and quick[0] == 5
    assert config == sort_run.SortConfig().resolved() and config.steps == 1500 and config.digits == 2
    assert quick[3] == sort_run.SortConfig(quick=True).resolved()
    layer = method.make(5, config, None)
    assert isinstance(layer, IMLE) and isinstance(layer.oracle, TorchMatching)
    assert isinstance(layer.noise, SumOfGamma) and layer.noise.tau == config.noise_tau
    assert layer.target == RelativeTarget.large_step()


def test_every_task_has_its_metric_and_direction() -> None:
    want = {
        **{k: ("test regret", False) for k in TASKS if k.startswith(("shortest-path", "knapsack"))},
        "terrain": ("% optimal", True),
        "toy": ("expected loss", False),
        "toy-s10": ("expected loss", False),
        "vae-sog": ("test loss", False),
        "vae-gumbel": ("test loss", False),
        "l2x": ("% precision", True),
        "sort": ("% exact", True),
    }
    assert {k: (t.metric, t.higher_is_better) for k, t in TASKS.items()} == want
    assert {(t.metric, t.higher_is_better) for t in bench.HELD_OUT.values()} == {("test regret", False)}
    assert np.isfinite(list(PID_GRID)).all()


def test_the_bench_command_passes_the_part_to_the_targets_suite_only() -> None:
    from imle_solvers.benchmarks import BenchConfig
    from imle_solvers.errors import ConfigError

    assert BenchConfig(suite="targets").suite_options("targets") == {}
    assert BenchConfig(suite="targets", part="held-out").suite_options("targets") == {"part": "held-out"}
    assert BenchConfig(suite="all", part="all").suite_options("pto") == {}
    with pytest.raises(ConfigError, match="targets suite only"):
        BenchConfig(suite="pto", part="held-out")
