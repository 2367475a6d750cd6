"""One training run: a model, a method, Adam, per-epoch test regret and timings."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.dataset import PTODataset
from ..oracle import BatchSolver, MapOracle, map_solve, sense_sign
from .methods import METHODS, MethodOptions
from .results import TrainRun

__all__ = ["evaluate", "train_model"]

try:  # a progress bar when tqdm is installed (a core dependency; a bare GPU image may lack it)
    from tqdm.auto import tqdm as _tqdm
except ImportError:  # pragma: no cover - exercised only where tqdm is missing
    _tqdm = None


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
    device = data.costs.device
    total = torch.zeros((), dtype=torch.float64, device=device)
    norm = torch.zeros((), dtype=torch.float64, device=device)
    hits = torch.zeros((), dtype=torch.int64, device=device)
    for i in range(0, len(data), batch):
        x, c, f_star = (t[i : i + batch] for t in (data.features, data.costs, data.objectives))
        c_hat = model(x).to(torch.float64)
        z_hat = map_solve(oracle, sign * c_hat, pool)  # decisions ẑ = MAP(θ̂)   [n, m]
        obj = (c.to(torch.float64) * z_hat).sum(-1)  # ⟨c, ẑ⟩   [n]
        f64 = f_star.to(torch.float64)
        total += (-sign * (obj - f64)).sum()  # Σ regret (as losses.regret, one solve only)
        norm += f64.abs().sum()
        hits += torch.isclose(obj, f64, rtol=1e-5, atol=1e-6).sum()
    model.train(was_training)
    # one device → host transfer for the whole evaluation
    return {"regret": float(total) / max(float(norm), 1e-12), "accuracy": int(hits) / max(len(data), 1)}


def train_model(
    model: nn.Module,
    method_name: str,
    train: PTODataset,
    test: PTODataset,
    *,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    pool: BatchSolver | None = None,
    train_oracle: MapOracle | None = None,
    eval_oracle: MapOracle | None = None,
    method_options: MethodOptions | dict[str, Any] | None = None,
    show_progress: bool = True,
    lr_milestones: tuple[int, ...] = (),
    device: str | torch.device | None = None,
    eval_batch: int = 1000,
) -> TrainRun:
    """Train ``model`` with one method; test regret before training and after every epoch.

    Parameters
    ----------
    model
        The predictor (its parameters are trained in place).
    method_name
        A key of [`METHODS`][imle_solvers.training.METHODS].
    train
        Training data.
    test
        Test data (evaluated before training and after every epoch).
    epochs
        Passes over the shuffled training set.
    batch_size
        Instances per Adam step.
    lr
        Adam's learning rate.
    seed
        Seeds the batch order and the method's noise (set the model's initialisation before).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    train_oracle
        The oracle of the layers in training (default ``train.oracle``), e.g. one that clamps costs.
    eval_oracle
        The oracle of the evaluation (default ``test.oracle``), e.g. a device-native one.
    method_options
        The method's [`MethodOptions`][imle_solvers.training.methods.MethodOptions] (or a dict of its
        fields); ``pool`` is added to them.
    show_progress
        A progress bar per epoch with the running loss (when tqdm is installed).
    lr_milestones
        Epochs after which the learning rate is divided by 10.
    device
        Where to train: the model, the data and the method's layers move there, the noise is drawn
        there, a [`TorchOracle`][imle_solvers.TorchOracle] solves there and any other oracle gets one
        host copy of each batch (default: leave everything where it is).
    eval_batch
        Test instances per model / oracle call in the evaluation.

    Returns
    -------
    TrainRun
        ``method``, ``seed``, ``regret`` and ``accuracy`` (final), ``curve`` (regret after 0..epochs
        epochs), ``accuracy_curve``, ``epoch_time`` (seconds per training epoch, evaluation excluded),
        ``epoch_times``, ``train_loss`` (mean per epoch), ``lr`` (learning rate of each epoch) and
        ``settings`` (the method's hyper-parameters as used).
    """
    if device is not None:
        dev = torch.device(device)
        model.to(dev)
        train, test = train.to(dev), test.to(dev)
    dev = train.costs.device
    oracle = train.oracle if train_oracle is None else train_oracle
    torch.manual_seed(seed)  # the method's noise (on CUDA too)
    options = (
        method_options
        if isinstance(method_options, MethodOptions)
        else MethodOptions(**(method_options or {}))
    )
    if pool is not None:
        options = dataclasses.replace(options, pool=pool)
    if method_name not in METHODS:
        raise ValueError(f"unknown method {method_name!r}; choose from {', '.join(METHODS)}")
    method = METHODS[method_name](oracle, options)
    for module in method.modules:
        module.to(dev)  # layers with state (AdaptiveTarget) keep it beside the weights
    opt = torch.optim.Adam(list(model.parameters()), lr=lr)
    gen = torch.Generator().manual_seed(seed)  # batch order, the same on every device
    first = evaluate(model, test, eval_oracle, pool=pool, batch=eval_batch)
    curve, acc_curve = [first["regret"]], [first["accuracy"]]
    times: list[float] = []
    losses: list[float] = []
    lrs: list[float] = []
    n = len(train)
    n_batches = (n + batch_size - 1) // batch_size
    for epoch in range(epochs):
        model.train()
        method.train()
        _synchronize(dev)
        start = time.perf_counter()
        perm = torch.randperm(n, generator=gen).to(dev)  # one copy per epoch
        running = torch.zeros((), device=dev)  # summed on the device: no host sync per step
        bar = _progress_bar(n_batches, f"{method_name} {epoch + 1}/{epochs}", show_progress)
        for b in range(n_batches):
            idx = perm[b * batch_size : (b + 1) * batch_size]
            batch = (train.features[idx], train.costs[idx], train.solutions[idx], train.objectives[idx])
            c_hat = model(batch[0])  # predicted weights   [B, m]
            loss, per = method.loss(c_hat, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += per.detach().sum()
            if bar is not None:
                bar.update(1)
                if b % 10 == 9 or b == n_batches - 1:  # the running loss (a host sync: not every step)
                    mean = float(running) / min(n, (b + 1) * batch_size)
                    bar.set_postfix(loss=f"{mean:.4g}", refresh=False)
        if bar is not None:
            bar.close()
        lrs.append(opt.param_groups[0]["lr"])  # the rate this epoch trained with
        if epoch + 1 in lr_milestones:
            for group in opt.param_groups:
                group["lr"] *= 0.1
        _synchronize(dev)
        times.append(time.perf_counter() - start)
        losses.append(float(running) / max(n, 1))
        ev = evaluate(model, test, eval_oracle, pool=pool, batch=eval_batch)
        curve.append(ev["regret"])
        acc_curve.append(ev["accuracy"])
    return TrainRun(
        method=method_name,
        seed=seed,
        regret=curve[-1],
        accuracy=acc_curve[-1],
        curve=curve,
        accuracy_curve=acc_curve,
        epoch_time=float(np.mean(times)) if times else 0.0,
        epoch_times=times,
        train_loss=losses,
        lr=lrs,
        settings=dict(method.settings),
    )


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously): honest epoch times."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _progress_bar(total: int, desc: str, show: bool) -> Any:
    """A tqdm bar on stderr, or ``None`` when not shown or tqdm is not installed."""
    if not show or _tqdm is None:
        return None
    return _tqdm(total=total, desc=desc, leave=False, file=sys.stderr, dynamic_ncols=True)
