"""``imle-solvers train``: methods, a short training run, the CLI's JSON and PNG, the demo."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from imle_solvers import ClampedCosts
from imle_solvers.data import shortest_path
from imle_solvers.training import METHODS, build_method, evaluate, main, train_model
from imle_solvers.training.methods import scale_grad
from imle_solvers.training.models import TerrainCNN, linear_model
from tests.helpers import EnumOracle


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``np.testing.assert_allclose`` for tensors (``torch.testing`` costs seconds to import)."""
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1.3e-6, atol=1e-5)


@pytest.fixture(scope="module")
def data() -> tuple:
    return shortest_path(160, deg=2, noise_width=0.5, seed=4).split(96)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_gives_a_finite_gradient(name: str, data: tuple) -> None:
    train, _ = data
    torch.manual_seed(0)
    model = linear_model(5, 40)
    method = build_method(name, train.oracle, samples=3)
    batch = (train.features[:8], train.costs[:8], train.solutions[:8], train.objectives[:8])
    loss, per = method.loss(model(batch[0]), batch)
    loss.backward()
    assert per.shape == (8,) and torch.isfinite(loss)
    grad = model.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_short_training_run_reduces_regret(data: tuple) -> None:
    train, test = data
    torch.manual_seed(1)
    model = linear_model(5, 40)
    before = evaluate(model, test)["regret"]
    out = train_model(model, "imle-mumu", train, test, epochs=4, batch_size=16, lr=0.05, seed=1,
                      method_options={"samples": 5}, show_progress=False)
    assert out["curve"][0] == pytest.approx(before)
    assert len(out["curve"]) == 5 and len(out["epoch_times"]) == 4
    assert out["regret"] < 0.6 * before  # seed-fixed: ~0.55 → ~0.2


def test_evaluate_matches_losses_regret(data: tuple) -> None:
    from imle_solvers.losses import regret

    _, test = data
    torch.manual_seed(3)
    model = linear_model(5, 40)
    with torch.no_grad():
        expected = regret(test.oracle, model(test.features), test.costs).item()
    assert evaluate(model, test, batch=25)["regret"] == pytest.approx(expected, rel=1e-5)


def test_evaluate_is_zero_for_the_true_costs(data: tuple) -> None:
    _, test = data

    class Oracle(torch.nn.Module):  # "predicts" the true costs of each test instance
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            index = (test.features.unsqueeze(0) == x.unsqueeze(1)).all(-1).float().argmax(1)
            return test.costs[index]

    ev = evaluate(Oracle(), test)
    assert ev["accuracy"] == 1.0 and abs(ev["regret"]) < 1e-6  # float32 objectives: rounding only


def test_scale_grad_and_unknown_method() -> None:
    x = torch.ones(3, requires_grad=True)
    (scale_grad(x, 0.25) * 2).sum().backward()
    close(x.grad, torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="unknown method"):
        build_method("nope", shortest_path(2).oracle)


def test_cli_writes_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["--problem", "shortest-path", "--method", "spo+", "two-stage", "--epochs", "2",
                 "--n-train", "64", "--n-test", "64", "--seeds", "0", "1", "--out", str(out), "--quiet"])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in result["summary"]] == ["spo+", "two-stage"]
    assert len(result["runs"]) == 4 and len(result["runs"][0]["curve"]) == 3
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    printed = capsys.readouterr().out
    assert "| method" in printed and "spo+" in printed


def test_cli_rejects_unknown_method() -> None:
    with pytest.raises(SystemExit):
        main(["--method", "magic"])


def test_clamped_costs_and_terrain_model() -> None:
    from imle_solvers import GridShortestPath, NegativeCycleError

    grid = GridShortestPath(3, 3)
    w = np.full((1, 9), -1.0)
    with pytest.raises(NegativeCycleError):
        grid.solve_batch(w)
    z = ClampedCosts(grid).solve_batch(w)  # clamped to 0: a valid path
    assert z[0, 0] == 1 and z[0, 8] == 1
    with pytest.raises(ValueError, match="min"):
        ClampedCosts(EnumOracle(np.eye(3), "max"))
    net = TerrainCNN(size=4, pixels=4)
    costs = net(torch.rand(2, 3, 16, 16))
    assert costs.shape == (2, 16) and torch.all(costs > 0)


def test_demo_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    from imle_solvers import cli

    assert cli.main(["demo", "--epochs", "1", "--n-train", "200", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| method" in out and "test regret" in out
    for name in ("imle-mumu", "spo+", "two-stage"):
        assert name in out
