"""``imle-solvers bench coupling``: the figures' arithmetic, and what they show for the default."""

from __future__ import annotations

import math

import pytest
import torch

from imle_solvers import AutoTarget, PerturbedTarget
from imle_solvers.benchmarks import SUITES
from imle_solvers.benchmarks import coupling as bench


def test_response_reads_zero_share_norm_and_cosine_against_alpha_one() -> None:
    reference = torch.tensor([[1.0, 0.0], [3.0, 0.0]])  # mean (2, 0)
    half = torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 2.0], [2.0, 2.0]])  # half zero, mean (1, 1)
    got = {r.alpha: r for r in bench.response({1.0: reference, 10.0: half})}
    assert (got[1.0].zero, got[1.0].norm, got[1.0].cosine) == (0.0, 1.0, 1.0)
    assert got[10.0].zero == 0.5
    assert got[10.0].norm == pytest.approx(math.sqrt(2) / 2)
    assert got[10.0].cosine == pytest.approx(1 / math.sqrt(2))
    flat = bench.response({1.0: reference, 0.1: torch.zeros(3, 2)})[1]
    assert (flat.zero, flat.norm, flat.cosine) == (1.0, 0.0, 0.0)  # all-zero mean: cosine 0


def test_the_other_rows_losses_are_scaled_and_row_0_s_is_not() -> None:
    # the fixed λ treats every row alone: row 0's draws are the same whatever its neighbours' scale
    for loss in ("linear", "quadratic"):
        a = bench.row_draws(PerturbedTarget(10.0), 1.0, loss=loss, samples=2, draws=5)
        b = bench.row_draws(PerturbedTarget(10.0), 100.0, loss=loss, samples=2, draws=5)
        assert a.shape == (5, 20) and torch.equal(a, b) and bool(a.ne(0).any())
    # the default's unit is the batch's: the neighbours' scale reaches row 0
    assert not torch.equal(bench.row_draws(None, 1.0, draws=5), bench.row_draws(None, 100.0, draws=5))


def test_run_gives_a_row_per_target_loss_samples_and_alpha() -> None:
    rows = bench.run(
        quick=True, targets=["IMLE default"], losses=["linear"], samples=[1], alphas=(1.0, 100.0)
    )
    assert [(r["target"], r["loss"], r["samples"], r["alpha"]) for r in rows] == [
        ("IMLE default", "linear", 1, 1.0),
        ("IMLE default", "linear", 1, 100.0),
    ]
    assert rows[0]["norm"] == 1.0 and rows[0]["cosine"] == pytest.approx(1.0) and rows[1]["zero"] <= 0.2
    with pytest.raises(ValueError, match=r"must include 1\.0"):
        bench.run(quick=True, alphas=(0.1, 10.0))
    assert SUITES["coupling"][0] == "imle_solvers.benchmarks.coupling"
    assert set(bench.TARGETS) >= {"IMLE default", "AutoTarget(floor=0)"}
    assert bench.TARGETS["AutoTarget(floor=0)"]() == AutoTarget(floor=0.0)
