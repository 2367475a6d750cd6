"""Gradients through the graph adapters: IMLE and Blackbox run forward/backward and learn a target."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from imle_solvers import (
    IMLE,
    Blackbox,
    ClampedCosts,
    MapOracle,
    NegativeCycleError,
    PerturbedTarget,
    RelativeTarget,
    hamming_loss,
)
from imle_solvers.adapters.graphs import GridShortestPath, Matching, ShortestPath, SpanningTree


def grid_dag(n: int) -> nx.DiGraph:
    """n × n grid with east and north arcs (a DAG), the classic predict-then-optimize graph."""
    graph = nx.DiGraph()
    for r in range(n):
        for c in range(n):
            if c + 1 < n:
                graph.add_edge((r, c), (r, c + 1))
            if r + 1 < n:
                graph.add_edge((r, c), (r + 1, c))
    return graph


CASES = {
    "shortest_path_dag": lambda: ShortestPath(grid_dag(3), (0, 0), (2, 2)),
    "shortest_path_nodes": lambda: ShortestPath(nx.grid_2d_graph(3, 3), (0, 0), (2, 2), weights_on="nodes"),
    "grid": lambda: GridShortestPath(4, 4),
    "matching": lambda: Matching(nx.complete_graph(5)),
    "spanning_tree": lambda: SpanningTree(nx.complete_graph(4), kind="min"),
}


def problem(oracle: MapOracle) -> tuple[torch.Tensor, torch.Tensor]:
    """Target state from hidden weights in [5, 10], and a start whose MAP differs, in oracle sense.

    The target must be within reach of the first step: moving every weight of the start by 2 towards
    the target state (the blackbox step λ·|∇zL|, see `train`) gives the target's MAP. Without noise a
    start whose gaps all exceed that step gets a zero gradient for ever, whatever the estimator is worth;
    on the 4×4 grid only one random start in twenty has another path than the target at all.
    """
    toward = 1.0 if oracle.sense == "min" else -1.0  # costs of the target's items go down, scores up
    for seed in range(5000):
        gen = np.random.default_rng(seed)
        hidden, start = 5 + 5 * gen.random(oracle.n_vars), 5 + 5 * gen.random(oracle.n_vars)
        target = oracle.solve(hidden)
        stepped = oracle.solve(start + toward * 2.0 * (1 - 2 * target))
        if not np.array_equal(oracle.solve(start), target) and np.array_equal(stepped, target):
            return torch.tensor(start, requires_grad=True), torch.from_numpy(target)
    raise AssertionError("no instance whose target is one step from its start")


def train(layer: torch.nn.Module, weights: torch.Tensor, target: torch.Tensor, steps: int) -> list[float]:
    """SGD on the Hamming loss ⟨z, 1 − 2y⟩ (+ const) of a batch of 4 copies; eval-mode losses."""
    losses = []
    for _ in range(steps):
        weights.grad = None
        z = layer(weights.unsqueeze(0).expand(4, -1))  # a batch of 4 copies   [4, m]
        loss = (z * (1 - 2 * target)).sum(-1).mean()  # = m · hamming_loss − ⟨y, 1⟩
        loss.backward()
        with torch.no_grad():
            weights -= 1.0 * weights.grad  # plain SGD step, lr = 1
            # Costs stay ≥ 5: target shifts (λ·|∇z L| = 2) and noise never make a negative cycle.
            weights.clamp_(min=5.0)
            losses.append(float(hamming_loss(layer.eval()(weights), target)))
        layer.train()
    return losses


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("estimator", ["imle", "blackbox"])
def test_sgd_reduces_hamming_loss_to_target(name: str, estimator: str) -> None:
    oracle = CASES[name]()
    weights, target = problem(oracle)
    before = float(hamming_loss(torch.from_numpy(oracle.solve(weights.detach().numpy())), target))
    if estimator == "imle":
        layer: torch.nn.Module = IMLE(
            oracle, target=PerturbedTarget(lam=8.0), generator=torch.Generator().manual_seed(0)
        )
    else:
        layer = Blackbox(oracle, lam=8.0)
    losses = train(layer, weights, target, steps=30)
    assert before > 0
    assert min(losses) < before
    assert losses[-1] == 0.0  # the noise-free MAP reproduces the target structure


def test_forward_backward_shapes_and_gradient_signs() -> None:
    oracle = GridShortestPath(3, 3)
    costs = torch.tensor([[5.0, 5, 5, 5, 12, 5, 5, 5, 5]] * 2, requires_grad=True)  # centre avoided
    # the large step moves the centre's cost by 10·std(θ + ε): below 0 without the clamp
    with pytest.raises(NegativeCycleError, match=r"backward pass.*ClampedCosts"):
        z = IMLE(
            oracle, samples=3, target=RelativeTarget.large_step(), generator=torch.Generator().manual_seed(0)
        )(costs)
        (-z[..., 4]).sum().backward()
    costs.grad = None
    z = IMLE(
        ClampedCosts(oracle, 0.0),
        samples=3,
        target=RelativeTarget.large_step(),  # a step large enough to route through the centre
        generator=torch.Generator().manual_seed(0),
    )(costs)
    assert z.shape == (2, 3, 9) and set(z.unique().tolist()) <= {0.0, 1.0}
    assert (z[..., 0] == 1).all() and (z[..., 8] == 1).all()  # both corners on every path
    # L = −z_4: descending the cost gradient must make the centre cheaper, so ∂L/∂c_4 > 0
    (-z[..., 4]).sum().backward()
    assert costs.grad is not None and (costs.grad[:, 4] > 0).all()
