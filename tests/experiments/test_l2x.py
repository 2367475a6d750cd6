"""Learning to explain: the planted corpus, the relaxed baselines, and a seed-fixed smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imle_solvers import TopK, cli
from imle_solvers.errors import ConfigError
from imle_solvers.experiments import l2x
from imle_solvers.experiments.l2x.planted import CorpusSpec, make_corpus, subset_precision
from imle_solvers.experiments.l2x.relaxed_subsets import L2XRelaxedTopK, SoftSub


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
    dominant = torch.zeros(8, 30)
    dominant[:, 0] = 20.0  # item 0 wins the first round outright; α₀ + log(1 − a₀) takes it out of the rest
    torch.testing.assert_close(SoftSub(5, 0.5)(dominant)[:, 0], torch.ones(8))
    with pytest.raises(ValueError, match="temperature"):
        SoftSub(3, 0.0)


# the paper's fixed λ = 10⁴ leaves more rows at a zero gradient as the explainer trains: the layer warns,
# once (that warning is tested with the targets)
@pytest.mark.filterwarnings(r"ignore:PerturbedTarget\(lam=:RuntimeWarning")
def test_l2x_smoke_loss_goes_down(tmp_path: Path) -> None:
    config = l2x.L2XConfig(
        methods=("imle-sog", "softsub"),
        ks=(5,),
        seeds=(0,),
        n_train=160,
        n_val=40,
        n_test=40,
        epochs=10,  # 4 epochs moved the training loss by less than its epoch-to-epoch noise on some seeds
        out=str(tmp_path / "api"),
        show_progress=False,
    )
    seen: list[l2x.L2XRun] = []
    result = l2x.run_l2x(config, on_result=seen.append)
    assert seen == result.runs and [r.key for r in seen] == ["imle-sog-k5-seed0", "softsub-k5-seed0"]
    for run in result.runs:
        assert run.train_loss[-1] < run.train_loss[0], run  # on every seed tried (10), by 1 % or more
        assert 0.0 <= run.precision <= 100.0 and 0.0 < run.ceiling <= 100.0
    assert "planted ceiling" in l2x.result_table(result)
    saved = json.loads((tmp_path / "api" / "results.json").read_text())
    assert saved["complete"] is True and saved["config"]["lam"] == 10000.0
    assert [r["method"] for r in saved["runs"]] == ["imle-sog", "softsub"]
    row = saved["summary"][0]
    assert isinstance(row["mse_mean"], float) and isinstance(row["mse_std"], float)  # numbers, not text
    args = [
        "l2x",
        "--methods",
        "ste",
        "--ks",
        "3",
        "--seeds",
        "0",
        "--train",
        "40",
        "--val",
        "20",
        "--test",
        "20",
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "cli"),
        "--no-progress",
    ]
    assert cli.main(args) == 0 and "STE SoG" in (tmp_path / "cli" / "results.md").read_text()


def test_l2x_config_errors() -> None:
    with pytest.raises(ConfigError, match="methods must be one of"):
        l2x.L2XConfig(methods=("nope",))
    with pytest.raises(ConfigError, match=r"ks must be in \[1, 50\)"):
        l2x.L2XConfig(ks=(50,))
    with pytest.raises(ConfigError, match="ks must be a positive integer"):
        l2x.L2XConfig(ks=(0,))
    with pytest.raises(ConfigError, match="corpus must be a CorpusSpec"):
        l2x.L2XConfig(corpus="long")  # type: ignore[arg-type]
    assert l2x.L2XConfig(ks=(20,), corpus=CorpusSpec(length=60)).ks == (20,)


def test_registry_labels_and_help() -> None:
    assert list(l2x.METHODS) == ["imle-sog", "imle-gumbel", "ste", "l2x", "softsub"]
    config = l2x.L2XConfig(lam=7.0, tau_factor=2.0)
    sampler = l2x.METHODS["imle-sog"]().make(5, 50, config, None)
    assert sampler.target.lam == 7.0 and sampler.noise.tau == 10.0  # λ and τ = factor · k from the config
    gumbel = l2x.METHODS["imle-gumbel"]().make(5, 50, config, None)
    assert gumbel.target.lam == 7.0 and gumbel.noise.tau == 1.0  # λ from the config, Gumbel(0, 1)
    assert isinstance(l2x.METHODS["softsub"]().make(5, 50, config, None), SoftSub)
    assert l2x.METHODS.help("ste").startswith("Straight-through estimator")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_l2x_runs_on_cuda(tmp_path: Path) -> None:
    config = l2x.L2XConfig(
        ks=(5,), seeds=(0,), n_train=160, n_val=40, n_test=40, epochs=2, device="cuda", out=str(tmp_path)
    )
    result = l2x.run_l2x(config)
    assert {run.method for run in result.runs} == set(l2x.METHODS)
    assert all(0.0 <= run.precision <= 100.0 for run in result.runs)
