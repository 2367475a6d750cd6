"""Learning to sort handwritten numbers: the data, the weights, Sinkhorn, the methods, and the command."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
import torch

from imle_solvers import IMLE, STE, Gumbel, PerturbedTarget, SumOfGamma, TorchMatching, cli
from imle_solvers.errors import ConfigError
from imle_solvers.experiments import sort
from imle_solvers.experiments.sort import data as sort_data
from imle_solvers.experiments.sort import run as sort_run
from imle_solvers.experiments.sort.data import (
    DigitPool,
    load_digit_pools,
    make_sequences,
    sorting_permutation,
)
from imle_solvers.experiments.sort.model import NumberScorer, assignment_weights, rank_weights
from imle_solvers.experiments.sort.results import permutation_accuracy
from imle_solvers.experiments.sort.sinkhorn import GumbelSinkhorn, log_sinkhorn

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def pools() -> tuple[DigitPool, DigitPool]:
    return load_digit_pools(seed=0)


# --- data -----------------------------------------------------------------------------------------


def test_pools_split_the_digits_and_group_them_by_label(pools: tuple[DigitPool, DigitPool]) -> None:
    train, test = pools
    assert (len(train), len(test)) == (1438, 359)  # 80 % / 20 % of the 1,797 images
    for pool in pools:
        assert pool.images.shape[1:] == (8, 8) and pool.images.dtype == torch.float32
        assert float(pool.images.min()) == 0.0 and float(pool.images.max()) == 1.0
        assert bool((pool.labels[1:] >= pool.labels[:-1]).all())  # sorted: starts/counts index them
        assert int(pool.counts.sum()) == len(pool) and pool.starts[0] == 0
        for d in range(10):
            assert bool((pool.labels[pool.starts[d] : pool.starts[d] + pool.counts[d]] == d).all())
    # disjoint: no test image appears among the training images
    flat_train = {tuple(row) for row in train.images.flatten(1).tolist()}
    shared = sum(tuple(row) in flat_train for row in test.images.flatten(1).tolist())
    assert shared <= 5  # a handful of scikit-learn's digits are pixel-for-pixel duplicates
    other = load_digit_pools(seed=1)[1]
    assert not torch.equal(other.images, test.images)  # the seed draws the split
    with pytest.raises(ValueError, match="test_fraction must be"):
        load_digit_pools(test_fraction=1.0)


def test_pool_checks() -> None:
    images, labels = np.zeros((10, 8, 8)), np.arange(10)[::-1].copy()
    pool = DigitPool.from_arrays(images, labels)  # any order: sorted by label
    assert pool.labels.tolist() == list(range(10))
    with pytest.raises(ValueError, match="every digit 0-9 needs at least one image"):
        DigitPool.from_arrays(images[:9], labels[:9])
    with pytest.raises(ValueError, match=r"need images \[N, 8, 8\] and labels \[N\]"):
        DigitPool.from_arrays(np.zeros((10, 8, 7)), labels)
    with pytest.raises(ValueError, match="labels must be sorted ascending"):
        DigitPool(torch.zeros(10, 8, 8), torch.arange(10).flip(0))


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_numbers_are_their_digit_images_side_by_side(pools: tuple[DigitPool, DigitPool], digits: int) -> None:
    _, pool = pools
    n = min(5, 10**digits)
    data = make_sequences(pool, 40, n, digits, torch.Generator().manual_seed(digits))
    assert data.images.shape == (40, n, 8, 8 * digits) and data.values.shape == (40, n)
    assert int(data.values.min()) >= 0 and int(data.values.max()) < 10**digits
    ordered = data.values.sort(dim=-1).values
    assert bool((ordered[:, 1:] > ordered[:, :-1]).all())  # distinct within a sequence
    for b, i in itertools.product(range(40), range(n)):
        value = int(data.values[b, i])
        for j in range(digits):  # digit j from the left is the (digits − 1 − j)-th power of ten
            glyph = data.images[b, i, :, 8 * j : 8 * (j + 1)]
            digit = value // 10 ** (digits - 1 - j) % 10
            same = (pool.images == glyph).flatten(1).all(dim=-1)  # which pool images it is   [N]
            assert bool(same.any()) and bool((pool.labels[same] == digit).all()), (b, i, j)
    again = make_sequences(pool, 40, n, digits, torch.Generator().manual_seed(digits))
    assert torch.equal(again.images, data.images) and torch.equal(again.values, data.values)


def test_every_image_of_a_digit_is_used(pools: tuple[DigitPool, DigitPool]) -> None:
    _, pool = pools
    data = make_sequences(pool, 400, 10, 1, torch.Generator().manual_seed(0))
    used = {tuple(row) for row in data.images.flatten(2).flatten(0, 1).tolist()}
    assert len(used) >= len({tuple(row) for row in pool.images.flatten(1).tolist()}) - 2


def test_sorting_permutation_sorts(pools: tuple[DigitPool, DigitPool]) -> None:
    data = make_sequences(pools[0], 64, 7, 2, torch.Generator().manual_seed(3))
    perm = data.permutation.unflatten(-1, (7, 7))  # P[r, i]   [B, n, n]
    assert bool((perm.sum(-1) == 1).all()) and bool((perm.sum(-2) == 1).all())  # a permutation matrix
    assert torch.equal(perm @ data.values[..., None].float(), data.values.sort(-1).values[..., None].float())
    assert torch.equal(data.permutation, sorting_permutation(data.values))
    ties = sorting_permutation(torch.tensor([5.0, 1.0, 5.0]))
    assert ties.reshape(3, 3).tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]  # equal values keep their order


def test_distinct_values_by_rejection_and_by_keys(
    pools: tuple[DigitPool, DigitPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n, digits in ((10, 1), (9, 4), (12, 5)):  # all ten digits; rejection over 10⁴ and 10⁵ values
        values = make_sequences(pools[1], 300, n, digits, torch.Generator().manual_seed(n)).values
        ordered = values.sort(-1).values
        assert bool((ordered[:, 1:] > ordered[:, :-1]).all()) and int(values.max()) < 10**digits
    monkeypatch.setattr(sort_data, "_KEY_BUDGET", 30_000)  # keys for 3 rows at a time
    long = make_sequences(pools[1], 8, 120, 4, torch.Generator().manual_seed(1)).values  # n² > 10⁴: keys
    assert long.shape == (8, 120) and bool((long.sort(-1).values.diff(dim=-1) > 0).all())
    keys = torch.Generator().manual_seed(1)
    chunks = [torch.rand(rows, 10**4, generator=keys).argsort(-1)[:, :120] for rows in (3, 3, 2)]
    assert torch.equal(long, torch.cat(chunks))  # the first 120 of a random order, 3 rows at a time
    full = make_sequences(pools[1], 50, 10, 1, torch.Generator().manual_seed(0)).values
    assert bool((full.sort(-1).values == torch.arange(10)).all())
    assert len({tuple(row) for row in full.tolist()}) > 40  # in random order
    with pytest.raises(ValueError, match=r"n must be in \[2, 10\]"):
        make_sequences(pools[1], 2, 11, 1, torch.Generator())
    with pytest.raises(ValueError, match=r"n must be in \[2, 100\]"):
        make_sequences(pools[1], 2, 1, 2, torch.Generator())
    with pytest.raises(ValueError, match="digits must be a positive integer"):
        make_sequences(pools[1], 2, 3, 0, torch.Generator())


# --- the network and the assignment weights --------------------------------------------------------


def test_map_of_the_assignment_weights_sorts_the_scores() -> None:
    assert rank_weights(4).tolist() == [-3, -1, 1, 3] and rank_weights(3).tolist() == [-2, 0, 2]
    gen = torch.Generator().manual_seed(0)
    for n in (2, 3, 5, 9):
        scores = torch.randn(50, n, generator=gen, dtype=torch.float64)
        theta = assignment_weights(scores)  # [50, n·n]
        assert theta.shape == (50, n * n) and theta.dtype == torch.float64
        assert torch.allclose(
            theta.reshape(50, n, n)[:, 2 % n, 1], rank_weights(n)[2 % n] * scores[:, 1].double()
        )
        assert torch.equal(TorchMatching(n, n).solve_torch(theta), sorting_permutation(scores).double())
        # the column term of NeuralSort's logits changes no assignment
        offset = (scores[..., :, None] - scores[..., None, :]).abs().sum(-1)  # Σ_k |s_i − s_k|   [50, n]
        shifted = (theta.reshape(50, n, n) - offset[:, None, :]).flatten(1)
        assert torch.equal(TorchMatching(n, n).solve_torch(shifted), TorchMatching(n, n).solve_torch(theta))


def test_number_scorer_shapes_and_checks() -> None:
    torch.manual_seed(0)
    for digits in (1, 2, 4):
        net = NumberScorer(digits, channels=4, hidden=8)
        assert net(torch.rand(3, 5, 8, 8 * digits)).shape == (3, 5)
        assert net(torch.rand(7, 8, 8 * digits)).shape == (7,)
    net.eval()
    single = torch.rand(6, 8, 32)
    assert torch.allclose(net(single)[2:3], net(single[2:3]))  # numbers are scored independently in eval
    with pytest.raises(ValueError, match="dropout must be in"):
        NumberScorer(2, dropout=1.0)
    with pytest.raises(ValueError, match="channels must be a positive integer"):
        NumberScorer(2, channels=0)


# --- Sinkhorn -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 7])
def test_log_sinkhorn_is_doubly_stochastic(n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(4, 6, n, n, generator=gen, dtype=torch.float64)
    p = log_sinkhorn(x, 100).exp()
    ones = torch.ones(4, 6, n, dtype=torch.float64)
    assert p.shape == x.shape and bool((p > 0).all())
    assert torch.allclose(p.sum(-2), ones, atol=1e-12) and torch.allclose(p.sum(-1), ones, atol=1e-12)
    once = log_sinkhorn(x, 1).exp()
    assert torch.allclose(once.sum(-2), ones, atol=1e-12)  # columns: exact after every round
    assert not torch.allclose(once.sum(-1), ones, atol=1e-3)  # rows: only in the limit
    # the limit ignores row and column offsets (Sinkhorn's D1 exp(X) D2 is unique)
    moved = x + torch.randn(4, 6, n, 1, generator=gen) + torch.randn(4, 6, 1, n, generator=gen)
    assert torch.allclose(log_sinkhorn(moved, 100).exp(), p, atol=1e-10)
    # at a small temperature it is the MAP permutation (Mena et al., Theorem 1)
    cold = log_sinkhorn(x[:1] / 1e-3, 5000).exp().flatten(-2)
    assert torch.allclose(cold, TorchMatching(n, n).solve_torch(x[:1].flatten(-2)), atol=1e-2)


def test_log_sinkhorn_checks() -> None:
    with pytest.raises(ValueError, match="iterations must be a positive integer"):
        log_sinkhorn(torch.zeros(3, 3), 0)
    with pytest.raises(ValueError, match=r"log_alpha must be \[\.\.\., n, n\]"):
        log_sinkhorn(torch.zeros(3, 4), 5)
    assert bool(torch.isfinite(log_sinkhorn(torch.tensor([[1e4, 0.0], [0.0, 1e4]]), 20)).all())  # no overflow


def test_gumbel_sinkhorn_trains_relaxed_and_evaluates_hard() -> None:
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(8, 16, generator=gen, requires_grad=True)
    layer = GumbelSinkhorn(4, temperature=0.5, iterations=100, generator=torch.Generator().manual_seed(1))
    soft = layer(theta).reshape(8, 4, 4)
    assert torch.allclose(soft.sum(-2), torch.ones(8, 4), atol=1e-5)  # columns: exact
    assert torch.allclose(soft.sum(-1), torch.ones(8, 4), atol=1e-2)  # rows: nearly, after 100 rounds
    assert not torch.allclose(soft, layer(theta).reshape(8, 4, 4))  # fresh noise every call
    (soft * torch.randn(8, 4, 4, generator=gen)).sum().backward()
    assert theta.grad is not None and bool(theta.grad.abs().sum() > 0)
    same = GumbelSinkhorn(4, 0.5, 100, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(same(theta).reshape(8, 4, 4), soft)  # the generator fixes the noise
    g = Gumbel(1.0).sample(theta.shape, theta.device, theta.dtype, torch.Generator().manual_seed(1))
    expected = log_sinkhorn(((theta + g) / 0.5).reshape(8, 4, 4), 100).exp()  # S((θ + g)/τ)
    assert torch.allclose(soft, expected, atol=1e-6)
    quiet = GumbelSinkhorn(4, 0.5, 100, noise_scale=0.0)
    assert torch.allclose(quiet(theta), log_sinkhorn(theta.reshape(8, 4, 4) / 0.5, 100).exp().flatten(1))
    layer.eval()
    assert torch.equal(layer(theta), TorchMatching(4, 4).solve_torch(theta))
    with pytest.raises(ValueError, match=r"theta must be \[\.\.\., 16\]"):
        layer(torch.zeros(2, 9))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"temperature": 0.0}, "temperature must be"),
        ({"iterations": 0}, "iterations must be"),
        ({"noise_scale": -1.0}, "noise_scale must be"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            GumbelSinkhorn(3, **bad)


# --- the methods ----------------------------------------------------------------------------------


def test_registry_order_help_and_settings() -> None:
    assert list(sort.METHODS) == ["imle", "gumbel-sinkhorn", "ste"]
    assert sort.METHODS.help("imle").startswith("I-MLE through TorchMatching(n, n)")
    assert sort.METHODS.help("gumbel-sinkhorn").startswith("Gumbel-Sinkhorn (Mena et al. 2018)")
    assert sort.METHODS.help("ste").startswith("Straight-through estimator")
    config = sort.SortConfig(noise_tau=2.0, lam=7.0, sinkhorn_tau=0.3, sinkhorn_iters=9)
    imle = sort.METHODS["imle"]().make(5, config, None)
    assert isinstance(imle, IMLE) and isinstance(imle.oracle, TorchMatching) and imle.oracle.n_rows == 5
    assert isinstance(imle.target, PerturbedTarget) and imle.target.lam == 7.0
    assert isinstance(imle.noise, SumOfGamma) and (imle.noise.k, imle.noise.tau) == (5.0, 2.0)  # k = n
    ste = sort.METHODS["ste"]().make(5, config, None)
    assert isinstance(ste, STE) and isinstance(ste.noise, SumOfGamma) and ste.noise.tau == 2.0
    gs = sort.METHODS["gumbel-sinkhorn"]().make(5, config, None)
    assert isinstance(gs, GumbelSinkhorn) and (gs.n, gs.temperature, gs.iterations) == (5, 0.3, 9)
    with pytest.raises(KeyError, match="unknown sorting method 'nope'"):
        sort.METHODS["nope"]


@pytest.mark.parametrize("key", list(sort.METHODS))
def test_each_method_forward_and_backward_on_a_tiny_batch(
    key: str, pools: tuple[DigitPool, DigitPool]
) -> None:
    n = 4
    batch = make_sequences(pools[0], 3, n, 2, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    net = NumberScorer(2, channels=4, hidden=8)
    layer = sort.METHODS[key]().make(n, sort.SortConfig(), torch.Generator().manual_seed(1))
    theta = assignment_weights(net(batch.images))  # [3, n·n]
    z = layer(theta).reshape(3, n, n)
    assert torch.allclose(z.sum(-2), torch.ones(3, n), atol=1e-5)  # columns: one rank per item
    assert torch.allclose(z.sum(-1), torch.ones(3, n), atol=1e-2)
    if key != "gumbel-sinkhorn":
        assert bool(((z == 0) | (z == 1)).all())  # a permutation matrix
    loss = (z.flatten(1) - batch.permutation).square().sum(-1).mean()
    loss.backward()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0
    layer.eval()
    assert torch.equal(layer(theta.detach()), TorchMatching(n, n).solve_torch(theta.detach()))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key", list(sort.METHODS))
def test_each_method_learns_to_sort_scores_directly(key: str) -> None:
    """Descent on free scores through each layer sorts the sequences: the gradient has the right sign.

    Through the matching every sequence ends sorted; the relaxation saturates on a few swapped pairs
    (checked over seeds 0-5: at least 56 % exact, 80 % per position)."""
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(16, 5, generator=gen)
    target = sorting_permutation(values)
    scores = torch.randn(16, 5, generator=gen).requires_grad_()
    layer = sort.METHODS[key]().make(5, sort.SortConfig(), torch.Generator().manual_seed(1))
    optimiser = torch.optim.Adam([scores], lr=0.05)
    start = TorchMatching(5, 5).solve_torch(assignment_weights(scores.detach()))
    losses = []
    for _ in range(300):
        loss = (layer(assignment_weights(scores)) - target).square().sum(-1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    final = TorchMatching(5, 5).solve_torch(assignment_weights(scores.detach()))
    assert permutation_accuracy(start, target, 5)[1] < 0.3
    assert sum(losses[-20:]) < 0.5 * sum(losses[:20])
    exact, per_position = permutation_accuracy(final, target, 5)
    if key == "gumbel-sinkhorn":
        assert exact >= 0.5 and per_position >= 0.75
    else:
        assert (exact, per_position) == (1.0, 1.0)


def test_permutation_accuracy() -> None:
    true = sorting_permutation(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]))
    wrong = sorting_permutation(torch.tensor([[2.0, 1.0, 3.0], [3.0, 2.0, 1.0]]))  # row 0: 2 of 3 ranks wrong
    assert permutation_accuracy(true, true, 3) == (1.0, 1.0)
    assert permutation_accuracy(wrong, true, 3) == (0.5, pytest.approx(4 / 6))
    with pytest.raises(ValueError, match=r"need two \[B, 9\] permutation matrices"):
        permutation_accuracy(true[:, :4], true[:, :4], 3)


@pytest.mark.timeout(60)
def test_the_recorded_training_loss_is_the_batch_mean_of_each_tenth_of_the_steps(
    pools: tuple[DigitPool, DigitPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # train_loss: the mean, over each tenth of the steps, of ‖z − P‖² averaged over the batch's sequences
    n, targets, outputs = 3, [], []
    made = sort_run.make_sequences

    def recorded_sequences(pool: DigitPool, *args: Any) -> sort_data.Sequences:
        sequences = made(pool, *args)
        if pool is pools[0]:  # a training batch
            targets.append(sequences.permutation)
        return sequences

    class Recorded(torch.nn.Module):
        def __init__(self, layer: torch.nn.Module) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, theta: torch.Tensor) -> torch.Tensor:
            z = self.layer(theta)
            if self.training:
                outputs.append(z.detach())
            return z

    monkeypatch.setattr(sort_run, "make_sequences", recorded_sequences)
    imle = sort.METHODS["imle"]()
    method = sort.SortMethod("recorded", lambda *args: Recorded(imle.make(*args)))
    cfg = sort.SortConfig(ns=(n,), seeds=(0,), steps=23, n_test=10, show_progress=False).resolved()
    run = sort_run._train_one("imle", n, 0, pools, cfg, method)
    assert len(targets) == len(outputs) == 23
    per_step = [float((z - p).square().sum(-1).mean()) for z, p in zip(outputs, targets)]
    for loss in per_step:  # twice the misplaced numbers of a sequence, averaged over the batch of 20
        assert 0 <= loss <= 2 * n and loss * cfg.batch_size / 2 == pytest.approx(
            round(loss * cfg.batch_size / 2)
        )
    chunks = np.array_split(np.array(per_step), 10)  # 23 steps: three tenths of 3 steps, seven of 2
    assert run.train_loss == pytest.approx([float(c.mean()) for c in chunks], rel=1e-6)
    assert len(set(per_step)) > 2  # the losses differ step by step


# --- the command ----------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_quick_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sort"
    assert cli.main(["sort", "--quick", "--ns", "3", "4", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| 3 | imle            | I-MLE SoG" in printed
    assert f"wrote results.json and results.md to {out}" in printed
    saved = json.loads((out / "results.json").read_text())
    assert (
        saved["complete"] is True
        and saved["command"] == "imle-solvers sort --ns 3 4 --quick --out " + str(out) + " --quiet"
    )
    config = saved["config"]
    assert (config["seeds"], config["steps"], config["n_test"]) == ([0], 40, 100)  # --quick resolved
    assert (config["digits"], config["lam"], config["batch_size"]) == (2, 100.0, 20)
    runs = saved["runs"]
    assert [(r["method"], r["n"], r["seed"]) for r in runs] == [
        (m, n, 0) for n in (3, 4) for m in ("imle", "gumbel-sinkhorn", "ste")
    ]
    for run in runs:
        assert 0.0 <= run["exact"] <= run["per_position"] <= 1.0  # exact implies every position right
        assert len(run["train_loss"]) == 10 and run["train_loss"][-1] < run["train_loss"][0]
        assert run["per_position"] > 1.5 / run["n"]  # learnt: above chance after 40 steps (seed-fixed)
    summary = saved["summary"]
    assert [(row["n"], row["method"]) for row in summary] == [(r["n"], r["method"]) for r in runs]
    for row, run in zip(summary, runs):
        assert row["exact_mean"] == run["exact"] and row["exact_std"] == 0.0  # numbers, std its own field
        assert row["per_position_mean"] == run["per_position"] and row["chance_mean"] == 1 / run["n"]
        assert row["seeds"] == 1
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        f"{m}-n{n}-seed0.json" for n in (3, 4) for m in sort.METHODS
    )
    assert "Command: `imle-solvers sort --ns 3 4 --quick" in (out / "results.md").read_text()


@pytest.mark.timeout(60)
def test_run_sort_is_reproducible_and_pairs_the_methods(tmp_path: Path) -> None:
    config = sort.SortConfig(
        methods=("ste", "imle"),
        ns=(3,),
        seeds=(0, 1),
        steps=6,
        n_test=20,
        out=str(tmp_path),
        show_progress=False,
    )
    seen: list[sort.SortRun] = []
    first = sort.run_sort(config, on_result=seen.append)
    assert seen == first.runs and [r.key for r in seen] == [
        "ste-n3-seed0",
        "imle-n3-seed0",
        "ste-n3-seed1",
        "imle-n3-seed1",
    ]
    second = sort.run_sort(config.replace(out=str(tmp_path / "again")))
    for a, b in zip(first.runs, second.runs):
        assert (a.exact, a.per_position, a.train_loss) == (b.exact, b.per_position, b.train_loss)
    # paired: the same network, first batch and SoG noise for STE and I-MLE, so the same first loss
    assert first.runs[0].train_loss[0] == first.runs[1].train_loss[0]
    assert first.runs[0].train_loss != first.runs[2].train_loss  # another seed, other data
    assert first.summary() == sort.SUMMARY.rows(first.runs)


def test_every_method_of_a_seed_is_tested_on_the_same_sequences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, torch.Tensor]] = []

    def recording(net: NumberScorer, test: Any, n: int, batch: int = 500) -> tuple[float, float]:
        seen.append((n, test.values.clone()))
        return 0.5, 0.75

    monkeypatch.setattr(sort_run, "_evaluate", recording)
    config = sort.SortConfig(
        ns=(3,), seeds=(0, 1), steps=1, n_test=30, out=str(tmp_path), show_progress=False
    )
    result = sort.run_sort(config)
    assert [(r.exact, r.per_position) for r in result.runs] == [(0.5, 0.75)] * 6
    values = [v for _, v in seen]
    assert all(torch.equal(values[0], v) for v in values[1:3])  # seed 0: one test set for all methods
    assert all(torch.equal(values[3], v) for v in values[4:6]) and not torch.equal(values[0], values[3])


def test_evaluation_sorts_by_the_scores_in_eval_mode(pools: tuple[DigitPool, DigitPool]) -> None:
    test = make_sequences(pools[1], 30, 4, 2, torch.Generator().manual_seed(0))

    class Oracle(NumberScorer):
        """Scores that are the numbers themselves (read off a lookup), times ``sign``."""

        def __init__(self, sign: float) -> None:
            super().__init__(2)
            self.sign = sign

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            flat = images.reshape(-1, 1, 8 * 16)  # [N, 1, 128]
            match = (flat == test.images.reshape(1, -1, 8 * 16)).all(-1)  # which test number   [N, 120]
            scores = test.values.flatten().float()[match.float().argmax(-1)]  # its value   [N]
            return self.sign * scores.reshape(images.shape[:-2])

    assert sort_run._evaluate(Oracle(1.0), test, 4, batch=7) == (1.0, 1.0)
    assert sort_run._evaluate(Oracle(-1.0), test, 4) == (0.0, 0.0)  # reversed: no rank right for n = 4
    torch.manual_seed(0)
    net = NumberScorer(2, channels=4, hidden=8)  # dropout and batch norm: only eval() is deterministic
    first = sort_run._evaluate(net, test, 4)
    assert not net.training and sort_run._evaluate(net, test, 4) == first


def test_the_quick_settings_only_fill_what_is_not_given() -> None:
    quick = sort.SortConfig(quick=True, steps=7).resolved()
    assert (quick.seeds, quick.steps, quick.n_test) == ((0,), 7, 100)
    full = sort.SortConfig().resolved()
    assert (full.seeds, full.steps, full.n_test) == ((0, 1, 2), 1500, 1000)
    assert sort.SortConfig().seeds is None  # unresolved until a run


def test_config_errors() -> None:
    with pytest.raises(
        ConfigError, match=r"ns must be in \[2, 100\] \(distinct 2-digit numbers\), got \[1\]"
    ):
        sort.SortConfig(ns=(3, 1))
    with pytest.raises(ConfigError, match=r"ns must be in \[2, 10\]"):
        sort.SortConfig(ns=(11,), digits=1)
    assert sort.SortConfig(ns=(11,), digits=2).ns == (11,)
    with pytest.raises(ConfigError, match="methods must be one of 'imle', 'gumbel-sinkhorn', 'ste'"):
        sort.SortConfig(methods=("sinkhorn",))
    with pytest.raises(ConfigError, match="sinkhorn_iters must be a positive integer, got 0"):
        sort.SortConfig(sinkhorn_iters=0)


# (argv, message): each is an error before any work, one line, exit status 2
BAD = [
    (["--ns", "1"], "argument --ns: must be in [2, 100] (distinct 2-digit numbers), got [1]"),
    (["--ns", "3", "3"], "argument --ns: must be non-empty and without repeats"),
    (
        ["--digits", "1", "--ns", "12"],
        "argument --ns: must be in [2, 10] (distinct 1-digit numbers), got [12]",
    ),
    (["--digits", "0"], "argument --digits: must be a positive integer, got 0"),
    (["--steps", "1.5"], "argument --steps: must be an integer, got 1.5"),
    (["--test", "0"], "argument --n-test/--test: must be a positive integer, got 0"),
    (["--lr", "nan"], "argument --lr: must be a finite number > 0, got nan"),
    (["--lam", "-1"], "argument --lam: must be a finite number > 0, got -1"),
    (["--sinkhorn-tau", "0"], "argument --sinkhorn-tau: must be a finite number > 0, got 0"),
    (["--seeds", "-1"], "argument --seeds/--seed: must be an integer in [0, 2**32), got -1"),
    (["--methods", "x"], "argument --methods/--method: must be one of 'imle', 'gumbel-sinkhorn', 'ste'"),
    (["--device", "tpu"], "argument --device: must be cpu, cuda, cuda:N or auto, got 'tpu'"),
    (["--out", "{file}"], "argument --out: '{file}' is a file: it must name a folder"),
]
if not torch.cuda.is_available():
    BAD.append((["--device", "cuda"], "argument --device: cuda: CUDA is not available on this machine"))


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_options_stop_before_any_work(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from imle_solvers.experiments.sort import cli as sort_cli

    def boom(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the command started working before its options were checked")

    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setattr(sort_cli, "COMMAND", dataclasses.replace(sort_cli.COMMAND, run=boom))
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    argv = [a.format(file=a_file) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exc:
        cli.main(["sort", *argv])
    assert exc.value.code == 2
    first, hint = capsys.readouterr().err.splitlines()  # one line and a pointer to --help
    assert first.startswith("imle-solvers sort: error: ") and message.format(file=a_file) in first
    assert hint == "Try 'imle-solvers sort --help' for more information."


def test_help_lists_the_methods(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit) as exc:
        cli.main(["sort", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: imle-solvers sort")
    assert "methods:\n  imle             I-MLE through TorchMatching(n, n)" in out
    assert "--steps STEPS         Adam steps (default: 1500; --quick: 40)" in out
    assert "(default: 0 1 2; --quick: 0)" in out


@pytest.mark.timeout(60)
def test_ctrl_c_keeps_the_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real, calls = sort_run._train_one, []

    def interrupted_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sort_run, "_train_one", interrupted_second)
    out = tmp_path / "out"
    argv = ["sort", "--methods", "ste", "--ns", "3", "--seeds", "0", "1", "--steps", "3", "--test", "10"]
    assert cli.main([*argv, "--out", str(out), "--no-progress"]) == 130
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False and [r["seed"] for r in saved["runs"]] == [0]
    assert [p.name for p in (out / "runs").iterdir()] == ["ste-n3-seed0.json"]
    captured = capsys.readouterr()
    assert "| 3 | ste" in captured.out  # the finished run is printed
    assert f"1 finished run(s) kept in {out / 'runs'}" in captured.err and "Traceback" not in captured.err


def test_chance_levels() -> None:
    run = sort.SortRun("ste", "STE SoG", 5, 0, 0.5, 0.7, [1.0], 1.0)
    assert run.chance == 0.2 and run.key == "ste-n5-seed0"
    assert math.isclose(sort.SUMMARY.rows([run])[0]["chance_mean"], 0.2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(120)
def test_sort_runs_on_cuda(tmp_path: Path) -> None:
    config = sort.SortConfig(quick=True, ns=(3, 5), device="cuda", out=str(tmp_path), show_progress=False)
    result = sort.run_sort(config)
    assert {run.method for run in result.runs} == set(sort.METHODS)
    assert all(run.per_position > 1.5 / run.n for run in result.runs)
