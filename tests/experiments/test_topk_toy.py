"""The synthetic top-k experiment (paper sec. 6): exact quantities, the SFE, the runner and its commands."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from scipy import stats

from imle_solvers import Gumbel, SumOfGamma, cli
from imle_solvers.errors import MissingExtraError
from imle_solvers.experiments import topk_toy
from imle_solvers.experiments.topk_toy import (
    METHODS,
    ToyProblem,
    enumerate_states,
    result_table,
    run_toy,
    sgd_momentum_step,
    summarize_instances,
)

TINY = {
    "runs": 4,
    "steps": 3,
    "lambdas": (1.0, 3.0),
    "lrs": (0.1, 1.0),
    "sfe_lrs": (0.01,),
    "long_steps": 6,
    "progress": False,
}


def brute_force(problem: ToyProblem, theta: list[float]) -> tuple[float, list[float]]:
    """L(θ) and μ(θ) by a plain Python loop over the k-subsets (no torch)."""
    m, k, b = problem.m, problem.k, problem.b.tolist()
    total, loss, marg = 0.0, 0.0, [0.0] * m
    for subset in itertools.combinations(range(m), k):
        z = [1.0 if i in subset else 0.0 for i in range(m)]
        weight = math.exp(sum(zi * ti for zi, ti in zip(z, theta)))  # exp⟨z, θ⟩
        total += weight
        loss += weight * sum((zi - bi) ** 2 for zi, bi in zip(z, b))
        marg = [mi + weight * zi for mi, zi in zip(marg, z)]
    return loss / total, [mi / total for mi in marg]


def state_index(problem: ToyProblem, z: torch.Tensor) -> torch.Tensor:
    """Index of each row of z among problem.states (via the subset's bit mask)."""
    bits = 2 ** torch.arange(problem.m, dtype=torch.int64)
    lookup = torch.full((2**problem.m,), -1, dtype=torch.int64)
    lookup[problem.states.to(torch.int64) @ bits] = torch.arange(problem.states.shape[0])
    index = lookup[z.to(torch.int64) @ bits]
    assert bool((index >= 0).all())
    return index


@pytest.fixture(scope="module")
def problem() -> ToyProblem:
    return ToyProblem.create(seed=3)


def test_states_are_all_k_subsets() -> None:
    states = enumerate_states(10, 5)
    assert states.shape == (252, 10)
    assert bool((states.sum(dim=1) == 5).all())
    assert len({tuple(row.tolist()) for row in states}) == 252


@pytest.mark.parametrize("scale", [0.0, 0.5, 2.0, 40.0])
def test_exact_loss_and_marginals_match_brute_force(problem: ToyProblem, scale: float) -> None:
    gen = torch.Generator().manual_seed(1)
    thetas = scale * torch.randn(3, problem.m, generator=gen, dtype=torch.float64)
    loss, marg = problem.expected_loss(thetas), problem.marginals(thetas)
    for i, theta in enumerate(thetas):
        shifted = (theta - theta.max()).tolist()  # exp is shift-invariant; avoids overflow at scale 40
        ref_loss, ref_marg = brute_force(problem, shifted)
        assert float(loss[i]) == pytest.approx(ref_loss, rel=1e-10, abs=1e-10)
        assert marg[i].tolist() == pytest.approx(ref_marg, rel=1e-9, abs=1e-12)
    assert problem.loss_star == pytest.approx(min(problem.costs.tolist()))
    assert float(problem.expected_loss(problem.theta0)) >= problem.loss_star


def test_exact_sampler_frequencies_match_p(problem: ToyProblem) -> None:
    theta = 0.7 * torch.randn(problem.m, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    n = 40_000
    z = problem.sample(theta.expand(n, -1), torch.Generator().manual_seed(5))
    assert bool((z.sum(dim=1) == problem.k).all())
    counts = torch.bincount(state_index(problem, z), minlength=252).to(torch.float64)
    expected = n * problem.log_probs(theta).exp()
    result = stats.chisquare(counts.numpy(), expected.numpy())
    assert result.pvalue > 1e-3
    # Monte Carlo check of the exact L and μ from the same samples
    costs = ((z - problem.b) ** 2).sum(dim=1)
    assert float(costs.mean()) == pytest.approx(
        float(problem.expected_loss(theta)), abs=4 * float(costs.std()) / n**0.5
    )
    se = z.std(dim=0) / n**0.5
    assert bool(((z.mean(dim=0) - problem.marginals(theta)).abs() < 4 * se + 1e-12).all())


def test_sampler_is_not_uniform(problem: ToyProblem) -> None:
    """Guard that the chi-square test above can fail: a peaked θ must give peaked samples."""
    theta = torch.zeros(problem.m, dtype=torch.float64)
    theta[:5] = 5.0
    z = problem.sample(theta.expand(5000, -1), torch.Generator().manual_seed(0))
    p_top = float(problem.log_probs(theta).exp().max())
    assert float((z[:, :5].sum(dim=1) == 5).to(torch.float64).mean()) == pytest.approx(p_top, abs=0.03)


def exact_gradient(problem: ToyProblem, theta: torch.Tensor) -> torch.Tensor:
    leaf = theta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(problem.expected_loss(leaf).sum(), leaf)
    return grad


def test_sfe_expectation_over_all_states_is_the_exact_gradient(problem: ToyProblem) -> None:
    gen = torch.Generator().manual_seed(4)
    for theta in torch.randn(4, problem.m, generator=gen, dtype=torch.float64):
        probs = problem.log_probs(theta).exp()  # [S]
        per_state = problem.sfe_gradient(theta.expand(252, -1), problem.states)  # [S, m]
        expectation = (probs[:, None] * per_state).sum(dim=0)  # E_p[ℓ(z)(z − μ)]
        torch.testing.assert_close(expectation, exact_gradient(problem, theta), rtol=1e-9, atol=1e-10)


def test_sfe_monte_carlo_mean_approaches_exact_gradient(problem: ToyProblem) -> None:
    theta = 0.5 * torch.randn(problem.m, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    n = 30_000
    thetas = theta.expand(n, -1)
    grads = problem.sfe_gradient(thetas, problem.sample(thetas, torch.Generator().manual_seed(7)))
    exact = exact_gradient(problem, theta)
    se = grads.std(dim=0) / n**0.5
    assert bool(((grads.mean(dim=0) - exact).abs() < 5 * se).all())
    assert float(exact.abs().max()) > 6 * float(se.max())  # the check has power: a zero mean would fail it


def test_sgd_momentum_step_matches_torch_optim() -> None:
    gen = torch.Generator().manual_seed(0)
    lrs = torch.tensor([[0.1], [0.5]], dtype=torch.float64)
    theta = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    grads = [torch.randn(2, 3, generator=gen, dtype=torch.float64) for _ in range(4)]
    params = [torch.nn.Parameter(theta[i].clone()) for i in range(2)]
    optims = [torch.optim.SGD([p], lr=float(lrs[i]), momentum=0.9) for i, p in enumerate(params)]
    ours, buf = theta.clone(), None
    for g in grads:
        ours, buf = sgd_momentum_step(ours, g, buf, lrs, 0.9)
        for i, (p, opt) in enumerate(zip(params, optims)):
            p.grad = g[i].clone()
            opt.step()
    torch.testing.assert_close(ours, torch.stack([p.detach() for p in params]))


def test_paper_noise_mapping() -> None:
    assert METHODS["imle-sog"]().noise == SumOfGamma(k=5, tau=1.0, s=10)  # SoG(κ=k=5, τ=1, s=10)
    assert METHODS["imle-sog-literal"]().noise == SumOfGamma(k=1, tau=5.0, s=10)
    assert METHODS["sfe"]().noise is None and not METHODS["ste-gumbel"]().uses_lambda
    assert METHODS["imle-gumbel-5"]().noise == Gumbel(5.0)  # temperature controls of the noise study
    assert METHODS["imle-sog-5"]().noise == SumOfGamma(k=5, tau=5.0, s=10)
    assert [METHODS[k]().kind for k in ("imle-gumbel", "ste-sog", "sfe")] == ["imle", "ste", "sfe"]
    assert METHODS.help("sfe").startswith("Score-function estimator")


def test_literal_sog_is_a_temperature_five_gumbel() -> None:
    """SoG(κ=1, τ=5, s=10) = 5 (max of 10 Exp(1) − log 10): Gumbel(0, 5) truncated at s = 10 terms."""
    gen = torch.Generator().manual_seed(0)
    literal = METHODS["imle-sog-literal"]().noise
    assert literal is not None
    x = literal.sample((200_000,), dtype=torch.float64, generator=gen)
    # Gumbel(0, 5): std 5π/√6 ≈ 6.41; the 10-term truncation shifts the mean by ~τ/(2s) above 5γ
    assert float(x.std()) == pytest.approx(5 * math.pi / math.sqrt(6), rel=0.06)
    assert float(x.mean()) == pytest.approx(5 * 0.5772156649, abs=0.35)
    ks = stats.kstest(x.numpy(), stats.gumbel_r(loc=0.0, scale=5.0).cdf).statistic
    assert ks < 0.03
    # while SoG(5, 1, 10), the κ = k reading, has per-item std ≈ π/√(6·5): a 5-subset's total is Gumbel(0, 1)
    sog = METHODS["imle-sog"]().noise
    assert sog is not None
    assert float(sog.sample((200_000,), dtype=torch.float64, generator=gen).std()) < 0.7


def test_run_toy_tiny_has_the_right_structure() -> None:
    threads = torch.get_num_threads()
    result = run_toy(**TINY)  # type: ignore[arg-type]
    assert torch.get_num_threads() == threads  # the single-thread context is undone
    keys = ["imle-sog", "imle-gumbel", "imle-sog-literal", "ste-gumbel", "ste-sog", "sfe", "sfe@6"]
    assert [row["key"] for row in result.rows] == keys
    assert len(result.grid) == 3 * 2 * 2 + 2 * 2 + 1 + 1
    cfg = result.config
    assert cfg["n_states"] == 252 and cfg["runs"] == 4
    for row in result.rows:
        curve = result.curves[row["key"]]
        assert len(curve["mean"]) == len(curve["std"]) == row["steps"] + 1
        assert curve["mean"][0] == pytest.approx(cfg["loss_init"])
        assert all(math.isfinite(v) for v in curve["mean"] + curve["std"])
        assert math.isfinite(row["mean"]) and row["std"] >= 0
        assert row["min"] <= row["mean"] <= row["max"]
        assert row["gap"] == pytest.approx(row["mean"] - cfg["loss_star"])
        assert row["mean"] >= cfg["loss_star"] - 1e-9
        points = [g for g in result.grid if g["key"] == row["key"]]
        best = min(points, key=lambda g: g["mean"])
        assert (row["lam"], row["eta"]) == (best["lam"], best["eta"])
        assert row["mean"] != best["mean"]  # the best setting re-run with fresh randomness, not the grid's
        if METHODS[row["key"].split("@")[0]]().uses_lambda:
            assert row["lr"] == pytest.approx(row["lam"] * row["eta"])  # the paper's unscaled step
        else:
            assert row["lam"] is None and row["lr"] == row["eta"]
    for point in result.grid:  # every grid point, λ = 3 included: the SGD rate is η λ for I-MLE
        if point["lam"] is not None:
            assert point["lr"] == pytest.approx(point["lam"] * point["eta"])
    assert any(point["lam"] == 3.0 for point in result.grid)
    json.dumps(result.to_dict())  # serialisable
    row = result.rows[0]
    assert isinstance(row, topk_toy.ToyRow) and row["gap"] == row.gap  # mapping-style access kept
    assert result.to_dict()["rows"][0] == row.to_dict() and list(row.to_dict())[:2] == ["method", "key"]
    assert "final L (mean ± std)" in result_table(result)


def test_run_toy_is_reproducible() -> None:
    a = run_toy(**TINY)  # type: ignore[arg-type]
    b = run_toy(**TINY)  # type: ignore[arg-type]
    c = run_toy(**{**TINY, "seed": 1})  # type: ignore[arg-type]
    assert a.rows == b.rows and a.grid == b.grid
    assert a.config["b"] != c.config["b"] and a.rows != c.rows


def test_imle_optimises_the_exact_loss_and_sfe_is_slower() -> None:
    result = run_toy(
        runs=20,
        steps=30,
        lambdas=(3.0,),
        lrs=(1.0,),
        sfe_lrs=(0.003,),
        long_steps=0,
        methods=("imle-sog", "imle-gumbel", "ste-gumbel", "sfe"),
        progress=False,
    )
    gap0 = result.config["loss_init"] - result.config["loss_star"]
    gaps = {row["key"]: row["gap"] for row in result.rows}
    assert gaps["imle-sog"] < 0.2 * gap0 and gaps["imle-gumbel"] < 0.2 * gap0
    assert gaps["sfe"] > 0.5 * gap0 > gaps["ste-gumbel"]


@pytest.mark.parametrize(
    "bad",
    [
        {"runs": 0},
        {"steps": 0},
        {"long_steps": -1},
        {"lambdas": ()},
        {"lrs": (0.1, -1.0)},
        {"sfe_lrs": (math.inf,)},
        {"methods": ("imle-sog", "nope")},
        {"methods": ()},
    ],
)
def test_run_toy_rejects_bad_arguments(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        run_toy(**{**TINY, **bad})  # type: ignore[arg-type]


def test_summarize_instances() -> None:
    results = [run_toy(**{**TINY, "seed": s}) for s in (0, 1)]  # type: ignore[arg-type]
    summary = summarize_instances(results)
    assert [row["key"] for row in summary] == [row["key"] for row in results[0].rows]
    for row in summary:
        assert row["instances"] == 2
        gaps = [next(r["gap"] for r in res.rows if r["key"] == row["key"]) for res in results]
        assert row["mean gap"] == pytest.approx(sum(gaps) / 2)
        if row["key"] == "ste-gumbel":
            assert row["beats ste-gumbel"] is None
        else:
            assert 0 <= row["beats ste-gumbel"] <= 2
        if row["key"] == "sfe@6":
            assert row["mean rank"] is None
        else:
            assert 1 <= row["mean rank"] <= 6
    assert sorted(r["mean rank"] for r in summary if r["mean rank"] is not None) != []
    with pytest.raises(ValueError):
        summarize_instances([])


def test_toy_command_writes_json_png_and_table(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "toy"
    assert cli.main(["toy", "--quick", "--steps", "8", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "final L (mean ± std)" in printed and "I-MLE SoG(5,1,10)" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["runs"] == 10 and data["config"]["steps"] == 8  # --quick, resolved: no nulls
    assert data["config"]["lambdas"] == [1.0, 3.0] and data["config"]["long_steps"] == 100
    assert data["complete"] is True and data["instance"]["n_states"] == 252
    assert {row["key"] for row in data["runs"]} >= {"imle-sog", "ste-gumbel", "sfe", "sfe@100"}
    assert sorted(p.name for p in (out / "runs").iterdir())[:2] == [
        "imle-gumbel.json",
        "imle-sog-literal.json",
    ]
    assert (out / "topk_toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "imle-solvers toy --steps 8 --quick" in (out / "results.md").read_text()


def test_rows_are_reported_as_each_method_finishes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from imle_solvers.experiments.topk_toy.cli import run

    seen: list[str] = []
    config = topk_toy.ToyConfig(
        runs=2,
        steps=2,
        long_steps=0,
        lambdas=(1.0,),
        lrs=(0.1,),
        sfe_lrs=(0.01,),
        methods=("imle-gumbel", "sfe"),
        out=str(tmp_path),
        show_progress=False,
    )

    def finished(row: topk_toy.ToyRow) -> None:
        seen.append(row.key)
        assert torch.get_num_threads() == 1  # the toy runs single-threaded
        if len(seen) == 2:  # handed over before it is written; the previous row is on disk by now
            assert (tmp_path / "runs" / "imle-gumbel.json").exists()

    torch.set_num_threads(2)
    result = run(config, on_result=finished)
    assert seen == ["imle-gumbel", "sfe"] == [row.key for row in result.rows]
    assert torch.get_num_threads() == 2  # restored
    torch.set_num_threads(1)
    alone = run_toy(
        runs=2,
        steps=2,
        long_steps=0,
        lambdas=(1.0,),
        lrs=(0.1,),
        sfe_lrs=(0.01,),
        methods=("sfe",),
        progress=False,
    )
    assert alone.rows[0] == result.rows[1]  # a row does not depend on which other methods ran


def test_toy_command_without_matplotlib_still_writes_json(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def missing(module: str, extra: str) -> object:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'imle-solvers[{extra}]'"
        )

    monkeypatch.setattr(topk_toy.report, "require", missing)  # plot() lives in topk_toy.report
    args = [
        "--quick",
        "--runs",
        "2",
        "--steps",
        "2",
        "--long-steps",
        "0",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert topk_toy.main(args) == 0
    assert "imle-solvers[plot]" in capsys.readouterr().err
    assert (tmp_path / "results.json").exists() and not (tmp_path / "topk_toy.png").exists()
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_toy_command_rejects_bad_options(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    for argv, message in (
        (["--runs", "0"], "argument --runs: must be a positive integer, got 0"),
        (["--lambdas", "1", "-2"], "argument --lambdas: must be a finite number > 0, got -2.0"),
        (["--methods", "nope"], "argument --methods/--method: must be one of 'imle-sog', "),
    ):
        with pytest.raises(SystemExit) as err:
            cli.main(["toy", *argv, "--out", str(tmp_path)])
        assert err.value.code == 2
        assert message in capsys.readouterr().err


def test_compare_grid_counts_pointwise_wins() -> None:
    result = run_toy(**TINY)  # type: ignore[arg-type]
    cmp = topk_toy.compare_grid(result)
    sog = {(g["lam"], g["eta"]): g for g in result.grid if g["key"] == "imle-sog"}
    gum = {(g["lam"], g["eta"]): g for g in result.grid if g["key"] == "imle-gumbel"}
    assert cmp["total"] == 4
    assert cmp["wins"] == sum(sog[p]["mean"] < gum[p]["mean"] for p in sog)
    assert cmp["std_wins"] == sum(sog[p]["std"] < gum[p]["std"] for p in sog)
    assert cmp["mean_diff"] == pytest.approx(sum(sog[p]["mean"] - gum[p]["mean"] for p in sog) / 4)
    assert topk_toy.compare_grid(result, "imle-gumbel", "imle-sog")["wins"] == 4 - cmp["wins"] - sum(
        sog[p]["mean"] == gum[p]["mean"] for p in sog
    )
    with pytest.raises(ValueError):
        topk_toy.compare_grid(result, "imle-sog", "ste-gumbel")
