"""One training run: a model, a method, Adam, per-epoch test regret and timings."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..data.dataset import PTODataset
from ..oracle import BatchSolver, MapOracle, map_solve, sense_sign
from .methods import build_method

__all__ = ["evaluate", "train_model"]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: PTODataset,
    oracle: MapOracle | None = None,
    pool: BatchSolver | None = None,
    batch: int = 1000,
) -> dict[str, float]:
    """Normalised regret and accuracy (share of instances whose decision has the optimal objective).

    Parameters
    ----------
    model
        Maps features to weights in the oracle's sense.
    data
        Test data.
    oracle
        The oracle to decide with (default ``data.oracle``).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    batch
        Instances per model / oracle call.
    """
    oracle = data.oracle if oracle is None else oracle
    was_training = model.training
    model.eval()
    sign = sense_sign(oracle)
    total, norm, hits = 0.0, 0.0, 0
    for i in range(0, len(data), batch):
        x, c, f_star = (t[i : i + batch] for t in (data.features, data.costs, data.objectives))
        c_hat = model(x).to(torch.float64)
        z_hat = map_solve(oracle, sign * c_hat, pool)  # decisions ẑ = MAP(θ̂)   [n, m]
        obj = (c.to(torch.float64) * z_hat).sum(-1)  # ⟨c, ẑ⟩   [n]
        f64 = f_star.to(torch.float64)
        total += float((-sign * (obj - f64)).sum())  # Σ regret (as losses.regret, one solve only)
        norm += float(f64.abs().sum())
        hits += int(torch.isclose(obj, f64, rtol=1e-5, atol=1e-6).sum())
    model.train(was_training)
    return {"regret": total / max(norm, 1e-12), "accuracy": hits / max(len(data), 1)}


def train_model(
    model: nn.Module,
    method_name: str,
    train: PTODataset,
    test: PTODataset,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    pool: BatchSolver | None = None,
    train_oracle: MapOracle | None = None,
    method_options: dict[str, Any] | None = None,
    show_progress: bool = True,
    lr_milestones: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Train ``model`` with one method; test regret before training and after every epoch.

    Parameters
    ----------
    model
        The predictor (its parameters are trained in place).
    method_name
        A key of `METHODS`.
    train, test
        Data sets.
    epochs, batch_size, lr
        Adam for ``epochs`` passes over shuffled mini-batches.
    seed
        Seeds the batch order and the method's noise (set the model's initialisation before).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    train_oracle
        The oracle of the layers in training (default ``train.oracle``), e.g. one that clamps costs.
    method_options
        Passed to `build_method`.
    show_progress
        A progress bar per epoch with the running loss.
    lr_milestones
        Epochs after which the learning rate is divided by 10.

    Returns
    -------
    dict
        ``method``, ``regret`` and ``accuracy`` (final), ``curve`` (regret after 0..epochs epochs),
        ``accuracy_curve``, ``epoch_time`` (seconds per training epoch, evaluation excluded),
        ``train_loss`` (mean per epoch).
    """
    oracle = train.oracle if train_oracle is None else train_oracle
    torch.manual_seed(seed)
    method = build_method(method_name, oracle, pool=pool, **(method_options or {}))
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    first = evaluate(model, test, pool=pool)
    curve, acc_curve = [first["regret"]], [first["accuracy"]]
    times: list[float] = []
    losses: list[float] = []
    n = len(train)
    n_batches = (n + batch_size - 1) // batch_size
    for epoch in range(epochs):
        model.train()
        method.train()
        start = time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        running, seen = 0.0, 0
        bar = tqdm(range(n_batches), desc=f"{method_name} {epoch + 1}/{epochs}", leave=False,
                   disable=not show_progress, file=sys.stderr, dynamic_ncols=True)
        for b in bar:
            idx = perm[b * batch_size : (b + 1) * batch_size]
            batch = (train.features[idx], train.costs[idx], train.solutions[idx], train.objectives[idx])
            c_hat = model(batch[0])  # predicted weights   [B, m]
            loss, per = method.loss(c_hat, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += float(per.sum())
            seen += len(idx)
            if show_progress:
                bar.set_postfix(loss=f"{running / seen:.4g}", refresh=False)  # the running loss
        if epoch + 1 in lr_milestones:
            for group in opt.param_groups:
                group["lr"] *= 0.1
        times.append(time.perf_counter() - start)
        losses.append(running / max(seen, 1))
        ev = evaluate(model, test, pool=pool)
        curve.append(ev["regret"])
        acc_curve.append(ev["accuracy"])
    return {
        "method": method_name,
        "seed": seed,
        "regret": curve[-1],
        "accuracy": acc_curve[-1],
        "curve": curve,
        "accuracy_curve": acc_curve,
        "epoch_time": float(np.mean(times)) if times else 0.0,
        "epoch_times": times,
        "train_loss": losses,
    }
