"""Declare a knapsack with ``ILP``, wrap it in ``IMLE`` and learn item values from features, end to end.

The set-up (predict-then-optimise, paper sec. 5): every instance has ``n`` items with features ``x_i``;
their true values ``v_i = g(x_i)`` are unknown. Item weights and the capacity are fixed. A linear model
predicts values ``v̂ = f(x)``; the knapsack layer picks ``z = MAP(v̂ + ε)``; the loss is the Hamming
distance between ``z`` and the optimal selection for the true values. I-MLE (Algorithm 1) supplies the
gradient through the solver. Progress is the normalised regret on held-out instances:
``(⟨v, z*⟩ − ⟨v, ẑ⟩) / ⟨v, z*⟩`` with ``ẑ`` the noise-free selection for the predicted values.

Run:

    python examples/declare_ilp.py                      # CP-SAT, about 20 s on 2 cores
    python examples/declare_ilp.py --backend highs
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from imle_solvers import ILP, IMLE, PerturbedTarget, SumOfGamma, hamming_loss


def make_data(
    n_instances: int, n_items: int, w_true: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(N, n, p)`` and true values ``(N, n)``: linear in the features plus noise, positive."""
    x = rng.normal(size=(n_instances, n_items, w_true.size))
    values = np.clip(x @ w_true + 3.0 + 0.3 * rng.normal(size=(n_instances, n_items)), 0.1, None)  # v = g(x)
    return x.astype(np.float32), values


def regret(knapsack: ILP, values: np.ndarray, pred: np.ndarray, opt: np.ndarray) -> float:
    """Mean normalised regret of the selections for ``pred``, measured with the true ``values``."""
    chosen = knapsack.solve_batch(pred.astype(np.float64))  # ẑ = MAP(v̂)   [N, n]
    best = (values * opt).sum(axis=1)
    return float(np.mean((best - (values * chosen).sum(axis=1)) / best))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="cpsat", choices=["cpsat", "cbc", "highs"])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--items", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    n, p = args.items, 5

    # --- the combinatorial layer: a 0/1 knapsack declared as an ILP (weights ≤ capacity, maximise value)
    item_weights = rng.integers(1, 10, size=n)
    capacity = int(item_weights.sum() // 3)
    knapsack = ILP(n, A_ub=item_weights[None], b_ub=[capacity], sense="max", backend=args.backend)
    print(
        f"knapsack: {n} items, weights {item_weights.tolist()}, capacity {capacity}, backend {args.backend}"
    )

    # --- data: features, true values, optimal selections (solved once with the same oracle)
    w_true = rng.normal(size=p)
    x_train, v_train = make_data(256, n, w_true, rng)
    x_test, v_test = make_data(128, n, w_true, rng)
    y_train = knapsack.solve_batch(v_train)  # z* for the true values   [N, n]
    y_test = knapsack.solve_batch(v_test)
    k = float(y_train.sum(axis=1).mean())  # ⟨z, 1⟩ of a typical optimal selection
    print(f"optimal selections hold {k:.1f} items on average")

    # --- model and layer: SumOfGamma noise with that k (Theorem 1), PID target with λ = 10 (eq. 8)
    model = nn.Linear(p, 1)  # v̂_i = f(x_i), shared over items
    layer = IMLE(knapsack, noise=SumOfGamma(k=k), target=PerturbedTarget(lam=10.0), samples=1)
    optim = torch.optim.Adam(model.parameters(), lr=0.05)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train).float()

    def test_regret() -> float:
        with torch.no_grad():
            pred = model(torch.from_numpy(x_test)).squeeze(-1).numpy()
        return regret(knapsack, v_test, pred, y_test)

    print(f"epoch  0  test regret {test_regret():.3f}  (untrained model)")
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(xt))
        losses = []
        for batch in order.split(32):
            pred = model(xt[batch]).squeeze(-1)  # v̂   [B, n]
            z = layer(pred)  # z = MAP(v̂ + ε)   [B, n]
            loss = hamming_loss(z, yt[batch])  # ℓ_H(z, z*)
            optim.zero_grad()
            loss.backward()  # ∇v̂ ≈ (z − MAP(v̂' + ε)) / λ   (I-MLE)
            optim.step()
            losses.append(float(loss.detach()))
        print(
            f"epoch {epoch:2d}  train Hamming {np.mean(losses):.3f}  test regret {test_regret():.3f}  "
            f"({time.perf_counter() - start:.1f} s)"
        )

    final = test_regret()
    random_pred = regret(knapsack, v_test, rng.normal(size=v_test.shape), y_test)
    noiseless = regret(knapsack, v_test, x_test.astype(np.float64) @ w_true + 3.0, y_test)
    print(
        f"\nfinal test regret {final:.3f}   (random values: {random_pred:.3f}; the true linear map, "
        f"which cannot see the value noise: {noiseless:.3f})"
    )


if __name__ == "__main__":
    main()
