"""Learning to explain: the planted corpus, the relaxed baselines, and a seed-fixed smoke run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imle_solvers import TopK, cli
from imle_solvers.experiments import l2x
from imle_solvers.experiments.planted import CorpusSpec, make_corpus, subset_precision
from imle_solvers.experiments.relaxed_subsets import L2XRelaxedTopK, SoftSub


@pytest.mark.parametrize("k", [5, 10, 15])
def test_oracle_selector_gets_exactly_the_planted_precision(k: int) -> None:
    corpus = make_corpus(300, seed=1)
    # an oracle explainer: planted positions first, ties among the rest broken at random
    scores = corpus.planted.float() + 0.5 * torch.rand(
        corpus.planted.shape, generator=torch.Generator().manual_seed(0)
    )
    mask = TopK(k, corpus.spec.length).solve_torch(scores)
    expected = float((corpus.planted.sum(-1).clamp_max(k).double() / k).mean())
    assert subset_precision(mask, corpus.planted) == pytest.approx(expected, abs=1e-12)
    assert corpus.oracle_precision(k) == pytest.approx(expected, abs=1e-12)
    assert subset_precision(1 - corpus.planted.float(), corpus.planted) == 0.0  # nothing planted selected


def test_corpus_ratings_are_determined_by_the_planted_tokens() -> None:
    spec = CorpusSpec()
    corpus = make_corpus(200, spec, seed=3)
    assert corpus.tokens.shape == (200, spec.length) and int(corpus.tokens.max()) < spec.vocab_size
    counts = corpus.planted.sum(-1)
    assert int(counts.min()) >= spec.planted[0] and int(counts.max()) <= spec.planted[1]
    aspect = corpus.tokens - spec.n_neutral  # aspect ids: n_neutral + level · synonyms + word
    assert bool(((aspect >= 0) & (aspect < spec.n_levels * spec.synonyms))[corpus.planted].all())
    values = (aspect // spec.synonyms).clamp(0, spec.n_levels - 1).float() / (spec.n_levels - 1)
    recomputed = (values * corpus.planted).sum(-1) / counts
    assert torch.allclose(recomputed, corpus.ratings)
    assert torch.equal(make_corpus(200, spec, seed=3).tokens, corpus.tokens)  # deterministic
    with pytest.raises(ValueError, match="cannot hold"):
        CorpusSpec(length=10)
    with pytest.raises(ValueError, match="confound"):
        CorpusSpec(confound=1.5)


def test_relaxed_samplers() -> None:
    theta = torch.randn(4, 30)
    for sampler in (L2XRelaxedTopK(5, 0.1), SoftSub(5, 0.5)):
        mask = sampler(theta)  # training: relaxed
        assert mask.shape == theta.shape and float(mask.min()) >= 0.0
        sampler.eval()
        hard = sampler(theta)
        assert torch.equal(hard, TopK(5, 30).solve_torch(theta))
    assert float(L2XRelaxedTopK(5, 0.1)(theta).max()) <= 1.0  # a max of softmaxes
    soft = SoftSub(5, 0.5)(theta)
    assert torch.allclose(soft.sum(-1), torch.full((4,), 5.0), atol=1e-3)  # k rounds of a softmax
    with pytest.raises(ValueError, match="temperature"):
        SoftSub(3, 0.0)


def test_l2x_smoke_loss_goes_down(tmp_path: Path) -> None:
    config = l2x.L2XConfig(methods=("imle-sog", "softsub"), ks=(5,), seeds=(0,), n_train=160, n_val=40,
                           n_test=40, epochs=4)  # fmt: skip
    result = l2x.run_l2x(config)
    for run in result.runs:
        assert run["train_loss"][-1] < run["train_loss"][0], run  # seed-fixed
        assert 0.0 <= run["precision"] <= 100.0
    assert "planted ceiling" in l2x.result_table(result)
    args = ["l2x", "--methods", "ste", "--ks", "3", "--seeds", "0", "--train", "40", "--val", "20",
            "--test", "20", "--epochs", "1", "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert cli.main(args) == 0 and "STE SoG" in (tmp_path / "l2x.md").read_text()


def test_l2x_config_errors() -> None:
    with pytest.raises(ValueError, match="unknown methods"):
        l2x.L2XConfig(methods=("nope",))
    with pytest.raises(ValueError, match="k must be"):
        l2x.L2XConfig(ks=(50,))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_l2x_runs_on_cuda() -> None:
    config = l2x.L2XConfig(ks=(5,), seeds=(0,), n_train=160, n_val=40, n_test=40, epochs=2, device="cuda")
    result = l2x.run_l2x(config)
    assert {run["method"] for run in result.runs} == set(l2x.METHODS)
    assert all(0.0 <= run["precision"] <= 100.0 for run in result.runs)
