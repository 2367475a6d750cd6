"""``train --problem tsp``: PyEPO's TSP data, the problem factory (pool, solution cache), a short CLI run."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from imle_solvers import SolutionCache, TravellingSalesperson
from imle_solvers.adapters.graphs.tsp import tsp_edges
from imle_solvers.data import tsp
from imle_solvers.data.tsp import tsp_costs
from imle_solvers.errors import ConfigError
from imle_solvers.training import TrainConfig, main, make_problem, run
from tests.support.training import plan_of, problem_of

pytestmark = pytest.mark.timeout(50)  # CP-SAT solves in this process


def shortest_tour_cost(c: np.ndarray, n: int) -> float:
    index = {e: k for k, e in enumerate(tsp_edges(n))}
    return min(
        sum(float(c[index[min(a, b), max(a, b)]]) for a, b in itertools.pairwise((0, *rest, 0)))
        for rest in itertools.permutations(range(1, n))
    )


@pytest.mark.parametrize(
    ("n", "p", "nodes", "deg", "noise", "seed"), [(6, 5, 20, 1, 0.0, 135), (5, 3, 7, 4, 0.5, 2)]
)
def test_costs_are_pyepos(n: int, p: int, nodes: int, deg: int, noise: float, seed: int) -> None:
    gen = pytest.importorskip("pyepo.data.tsp")
    x, c = gen.genData(n, p, nodes, deg=deg, noise_width=noise, seed=seed)
    ours, costs, coords = tsp_costs(n, p, nodes, deg, noise, seed)
    assert np.array_equal(ours, x) and np.array_equal(costs, c) and costs.dtype == np.float32
    assert coords.shape == (nodes, 2)


def test_data_set_holds_optimal_tours() -> None:
    data = tsp(6, num_features=3, num_nodes=6, deg=2, noise_width=0.5, seed=4)
    assert data.costs.shape == (6, 15) and data.features.shape == (6, 3)
    assert (data.solutions.sum(1) == 6).all() and data.oracle.sense == "min"
    for c, f in zip(data.costs.numpy(), data.objectives.numpy()):
        assert f == pytest.approx(shortest_tour_cost(c, 6), rel=1e-5)
    assert data.info["num_nodes"] == 6 and len(data.info["coordinates"]) == 6
    with pytest.raises(ValueError, match="num_nodes"):
        tsp(2, num_nodes=2)
    with pytest.raises(ValueError, match="variables"):
        tsp(2, num_nodes=5, oracle=TravellingSalesperson(4))


class CountingPool:
    def __init__(self) -> None:
        self.rows: list[int] = []

    def solve_batch(self, oracle: TravellingSalesperson, weights: np.ndarray) -> np.ndarray:
        self.rows.append(len(weights))
        return oracle.solve_batch(weights)

    def close(self) -> None:
        self.rows.append(-1)


def test_problem_solves_its_tours_on_the_pool_and_caches_when_asked() -> None:
    pool = CountingPool()
    plan = plan_of(problem="tsp", n_train=6, n_test=4, nodes=5, batch_size=4)
    assert plan.data.nodes == 5 and plan.data.solve_ratio == 1.0 and plan.oracle == "host"
    assert plan.title == "TSP 5 nodes, deg 1"
    prob = make_problem(plan, 0, pool=pool)
    assert pool.rows == [10]  # the optimal tours of train and test, in one batch on the pool
    assert isinstance(prob.train_oracle, TravellingSalesperson) and prob.eval_oracle is prob.train_oracle
    assert prob.train_oracle.n_vars == 10 and prob.train.costs.shape == (6, 10)
    assert prob.test.costs.shape == (4, 10) and prob.model()(torch.zeros(1, 5)).shape == (1, 10)
    assert np.array_equal(prob.train.costs, make_problem(plan, 0).train.costs)  # the pool solves, no more
    cached = problem_of("tsp", 6, 4, nodes=5, solve_ratio=0.25, batch_size=4)
    assert isinstance(cached.train_oracle, SolutionCache) and cached.train_oracle.p == 0.75
    assert isinstance(cached.eval_oracle, TravellingSalesperson)  # evaluation solves exactly
    with pytest.raises(ValueError, match="no device-native oracle"):
        problem_of("tsp", 2, 2, nodes=4, oracle="device", batch_size=2)
    linear_only = dataclasses.replace(plan, model="terrain-cnn")  # TrainConfig refuses it earlier
    with pytest.raises(ValueError, match="linear model"):
        make_problem(linear_only, 0)


def test_a_run_solves_the_data_sets_tours_on_its_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.training.runner as runner

    pool = CountingPool()
    monkeypatch.setattr(runner, "_pool", lambda plan: pool)  # what --workers N starts
    config = TrainConfig(problem="tsp", nodes=5, n_train=4, n_test=4, batch_size=4, epochs=1)
    run(config.replace(methods=("two-stage",), seeds=(0, 1), show_progress=False))
    assert pool.rows[0] == 8 and pool.rows.count(8) == 2  # each seed's optimal tours, in one batch
    assert pool.rows[-1] == -1  # closed after the last run


def test_tsp_options_need_the_tsp_problem() -> None:
    with pytest.raises(ConfigError, match="needs --problem tsp"):
        TrainConfig(problem="knapsack", nodes=8)
    with pytest.raises(ConfigError, match="needs --problem tsp"):
        TrainConfig(solve_ratio=0.5)
    with pytest.raises(ConfigError):
        TrainConfig(problem="tsp", nodes=2)
    with pytest.raises(ConfigError):
        TrainConfig(problem="tsp", solve_ratio=0.0)


def test_short_cli_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tsp"
    argv = ["train", "--problem", "tsp", "--nodes", "6", "--n-train", "16", "--n-test", "8", "--epochs", "1"]
    argv += ["--batch-size", "8", "--samples", "2", "--methods", "imle-mumu", "spo+", "two-stage"]
    argv += ["--solve-ratio", "0.5", "--quiet", "--out", str(out)]
    from imle_solvers import cli

    assert cli.main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["problem"] == "tsp" and result["config"]["nodes"] == 6
    assert result["config"]["solve_ratio"] == 0.5
    runs = result["runs"]
    assert [r["method"] for r in runs] == ["imle-mumu", "spo+", "two-stage"]
    assert all(np.isfinite(r["regret"]) and r["regret"] >= 0 and len(r["curve"]) == 2 for r in runs)
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "TSP 6 nodes" in (out / "results.md").read_text()


def test_help_lists_the_problem(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "tsp" in text and "--nodes" in text and "--solve-ratio" in text


def test_every_method_of_train_runs_on_tsp(tmp_path: Path) -> None:
    from imle_solvers.training import METHODS

    argv = ["--problem", "tsp", "--nodes", "5", "--n-train", "8", "--n-test", "4", "--epochs", "1"]
    argv += ["--batch-size", "4", "--samples", "2", "--methods", "all", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [r["method"] for r in runs] == list(METHODS)
    assert all(np.isfinite(r["regret"]) for r in runs)


def test_the_number_of_nodes_has_a_documented_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from imle_solvers.adapters.graphs.tsp import NODES_MAX

    assert TrainConfig(problem="tsp", nodes=NODES_MAX).nodes == NODES_MAX
    with pytest.raises(ConfigError, match=f"at most {NODES_MAX}"):
        TrainConfig(problem="tsp", nodes=NODES_MAX + 1)
    from imle_solvers import cli

    out = tmp_path / "big"
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--problem", "tsp", "--nodes", "100000", "--out", str(out)])
    assert exited.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[0].endswith(
        "argument --nodes: must be at most 1000 (the largest tour an oracle builds), got 100000"
    )
    assert not out.exists()  # refused before any work
