"""`run`: every (method, seed) run of a `TrainConfig`, reported one by one as they finish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..noise import Gumbel, SumOfGamma
from .config import SCHEDULES, TrainConfig, resolve_device
from .loop import train_model
from .problems import DEFAULTS, make_problem

__all__ = ["resolved", "run"]


def resolved(config: TrainConfig) -> dict[str, Any]:
    """The settings a run uses: explicit fields, else the schedule's values, else the problem's defaults."""
    epochs, batch_size, lr, drops = SCHEDULES[config.schedule]
    settings = dict(DEFAULTS[config.problem])
    schedule = {"epochs": epochs, "batch_size": batch_size, "lr": lr}
    settings.update({k: v for k, v in schedule.items() if v is not None})
    settings["lr_drops"] = drops
    explicit = ("epochs", "batch_size", "lr", "lr_drops", "n_train", "n_test", "samples", "model", "bb_loss")
    for name in explicit:
        value = getattr(config, name)
        if value is not None:
            settings[name] = value
    settings["device"] = resolve_device(config.device)
    return settings


def run(
    config: TrainConfig, on_result: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """Train every method on every seed; one result dict per (method, seed), in that order.

    Each seed generates its own data (data seed = ``seed``) and model initialisation
    (``torch.manual_seed(seed)``); all methods of a seed start from the same initial model. The data
    move to the device once per seed. ``on_result`` is called with each run as soon as it finishes
    (the command writes it to disk there), so an interruption loses at most the run in progress.
    """
    s = resolved(config)
    device: torch.device = s["device"]
    results = []
    pool = None
    if config.workers > 0:
        from ..pool import SolverPool

        pool = SolverPool(config.workers)
    try:
        for seed in config.seeds:
            prob = make_problem(
                config.problem,
                s["n_train"],
                s["n_test"],
                seed,
                deg=config.deg,
                noise_width=config.noise_width,
                size=config.size,
                model=s["model"],
                device=device,
                oracle=config.oracle,
                cache=config.cache,
            )
            train, test = prob.train.to(device), prob.test.to(device)  # one copy per seed
            noise = SumOfGamma(tau=config.tau) if config.noise == "sog" else Gumbel(config.tau)
            options: dict[str, Any] = {"samples": s["samples"], "lam": config.lam, "noise": noise}
            options.update({k: s[k] for k in ("bb_loss", "dpo_samples") if k in s})
            for name in config.methods:
                torch.manual_seed(seed)
                out = train_model(
                    prob.model(),
                    name,
                    train,
                    test,
                    epochs=s["epochs"],
                    batch_size=s["batch_size"],
                    lr=s["lr"],
                    seed=seed,
                    pool=pool,
                    train_oracle=prob.train_oracle,
                    eval_oracle=prob.eval_oracle,
                    method_options=options,
                    show_progress=config.show_progress,
                    lr_milestones=s["lr_drops"],
                    device=device,
                    eval_batch=s["eval_batch"],
                )
                out.update(
                    problem=config.problem,
                    deg=config.deg,
                    device=str(device),
                    model=s["model"],
                    oracle=repr(prob.train_oracle),
                )
                results.append(out)
                if on_result is not None:
                    on_result(out)
                if config.show_progress:
                    print(
                        f"  {name:<10} seed {seed}: test regret {out['regret']:.4f}, "
                        f"accuracy {out['accuracy']:.3f}, {out['epoch_time']:.3f} s/epoch",
                        flush=True,
                    )
    finally:
        if pool is not None:
            pool.close()
    return results
