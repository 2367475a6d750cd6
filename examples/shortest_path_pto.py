"""Predict-then-optimize with I-MLE on the SPO shortest-path benchmark, written out by hand.

A linear model predicts the 40 arc costs of a 5 × 5 grid from 5 features; the decision is the
cheapest south-west → north-east path under the predicted costs. Training signal:

* I-MLE μ-μ (paper, eq. 10 + Fact 2): the loss is the cost of the sampled path under the TRUE costs,
  ``ℓ_R = ⟨c, z⟩``; with the optimal target its gradient is ``MAP(θ + ε) − MAP(−c + ε)``;
* SPO+ (Elmachtoub & Grigas), for comparison.

Run:  python examples/shortest_path_pto.py [--deg 4] [--epochs 10]
The same comparison with every method, several seeds and plots: ``imle-solvers train --help``.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from imle_solvers import IMLE, OptimalTarget, SumOfGamma
from imle_solvers.data import shortest_path
from imle_solvers.losses import SPOPlusLoss, regret


def train(method: str, deg: int, epochs: int, seed: int = 0) -> float:
    data = shortest_path(2000, num_features=5, grid=(5, 5), deg=deg, noise_width=0.5, seed=seed)
    train_set, test_set = data.split(1000)
    oracle = data.oracle  # DAGShortestPath.grid(5, 5): batched, in torch, sense "min" (costs)
    torch.manual_seed(seed)
    model = nn.Linear(5, oracle.n_vars)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    # I-MLE with the eq. 10 target; SumOfGamma's k defaults to the path length (8 arcs), Theorem 1
    layer = IMLE(oracle, noise=SumOfGamma(), target=OptimalTarget(), samples=10)
    spo = SPOPlusLoss(oracle)
    for _ in range(epochs):
        for idx in torch.randperm(len(train_set)).split(32):
            x, c, z_star = train_set.features[idx], train_set.costs[idx], train_set.solutions[idx]
            c_hat = model(x)  # predicted costs   [B, 40]
            if method == "imle-mumu":
                z = layer(c_hat)  # sampled paths z = MAP(θ + ε), θ = −ĉ   [B, 10, 40]
                # ℓ_R summed (not averaged) so that ∇z ℓ = c exactly: eq. 10 then sets θ' = −c
                loss = (c.unsqueeze(1) * z).sum()
            else:
                loss = spo(c_hat, c, optimal=z_star)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return regret(oracle, model(test_set.features), test_set.costs, optimal=test_set.solutions).item()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deg", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for method in ("imle-mumu", "spo+"):
        print(f"{method:>10}: normalised test regret {train(method, args.deg, args.epochs):.4f}", flush=True)


if __name__ == "__main__":
    main()
