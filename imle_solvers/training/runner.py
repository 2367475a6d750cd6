"""`run`: every (method, seed) run of a `TrainConfig`, reported and written one by one as they finish."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..app.machine import resolve_device
from ..app.session import Session
from ..errors import ConfigError, WorkerCrashedError
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from .config import TrainConfig
from .distributed import DistributedContext, check_batches, planned_world_size, process_group
from .loop import train_model
from .methods import MethodOptions
from .problems import DEFAULTS, make_problem
from .results import SUMMARY, TrainRun, plot_curves

if TYPE_CHECKING:
    from ..pool import SolverPool

__all__ = ["run", "title"]


def title(config: TrainConfig) -> str:
    """One line naming the problem of a resolved configuration (tables and plots)."""
    if config.problem == "terrain":
        return f"terrain {config.size}×{config.size}, {config.model}"
    if config.problem == "warcraft":
        source = "generated maps" if config.data is None else config.data
        return f"Warcraft {config.size}×{config.size} ({source}), {config.model}"
    if config.problem == "tsp":
        return f"TSP {config.nodes} nodes, deg {config.deg}"
    return f"{config.problem}, deg {config.deg}"


def run(config: TrainConfig, on_result: Callable[[TrainRun], None] | None = None) -> list[TrainRun]:
    """Train every method on every seed; one [`TrainRun`][imle_solvers.training.TrainRun] per
    (method, seed), in that order.

    Does what ``imle-solvers train`` does: the machine is checked first (``device``, ``out``:
    [`ConfigError`][imle_solvers.errors.ConfigError] before any work), torch uses ``config.threads``
    threads (the previous setting is restored afterwards), and with ``config.out`` every run is written
    as it finishes, then ``results.json``, ``results.md`` and ``curves.png``. Each seed generates its own
    data (data seed = ``seed``) and model initialisation (``torch.manual_seed(seed)``); all methods of a
    seed start from the same initial model. The data move to the device once per seed.

    Under ``torchrun`` (``WORLD_SIZE`` > 1), or in a process group the caller initialised, the processes
    train one model data-parallel (see [`distributed`][imle_solvers.training.distributed]): each on its
    share of every batch of ``batch_size``, with the result of one process; only rank 0 prints and writes
    ``out``, and every process returns the runs.

    Parameters
    ----------
    config
        The settings (defaults are resolved by
        [`TrainConfig.resolved`][imle_solvers.training.TrainConfig.resolved]).
    on_result
        Called with each run as soon as it finishes, before it is written: an interruption (Ctrl-C, a
        full disk) loses at most the run in progress.

    Raises
    ------
    KeyboardInterrupt
        After writing what had finished (``results.json`` with ``"complete": false``).
    OutputError
        When a result cannot be written; the finished runs were handed to ``on_result``.
    """
    used = config.resolved()
    assert used.n_train is not None and used.batch_size is not None
    world = planned_world_size()
    check_batches(used.n_train, used.batch_size, world)  # before any process waits
    if world > 1 and "graph" in used.compile:
        raise ConfigError(
            "cannot record the step as a CUDA graph with several training processes (DDP's all-reduce "
            f"is not recorded): use off or model, got {used.compile!r}",
            "compile",
        )
    group = process_group(used.device, used.dist_timeout)
    if group is not None and not group.is_main:  # rank 0 alone prints and writes
        config, used = config.replace(out=None), used.replace(out=None, show_progress=False)
    with Session(config, SUMMARY, resolved=used.as_dict(), on_result=on_result) as session:
        if used.device != "cpu":
            torch.backends.cudnn.benchmark = (
                True  # fixed image sizes: let cuDNN pick the fastest convolutions
            )
        _train_all(used, session, group)
        name = title(used)
        session.finish(
            markdown=f"{name}, {len(used.seeds)} seed(s)",
            extra=None if group is None else {"distributed": group.describe()},
            plots=[("curves.png", lambda path: plot_curves(session.records, path, title=name))],
        )
    return list(session.records)


def _train_all(config: TrainConfig, session: Session, group: DistributedContext | None) -> None:
    device = resolve_device(config.device) if group is None else group.device
    assert config.samples is not None and config.epochs is not None and config.batch_size is not None
    assert config.lr is not None and config.bb_loss is not None and config.n_train and config.n_test
    extra = DEFAULTS[config.problem]
    pool = _pool(config)
    try:
        for seed in config.seeds:
            prob = make_problem(
                config.problem,
                config.n_train,
                config.n_test,
                seed,
                deg=config.deg,
                noise_width=config.noise_width,
                size=config.size,
                model=config.model,
                device=device,
                oracle=config.oracle,
                cache=config.cache,
                data=config.data,
                nodes=config.nodes,
                solve_ratio=config.solve_ratio,
                pool=pool,
            )
            train, test = prob.train.to(device), prob.test.to(device)  # one copy per seed
            noise: NoiseDistribution = (
                SumOfGamma(tau=config.tau) if config.noise == "sog" else Gumbel(config.tau)
            )
            options = MethodOptions(
                samples=config.samples,
                noise=noise,
                lam=config.lam,
                bb_loss=config.bb_loss,
                dpo_samples=extra["dpo_samples"],
            )
            for name in config.methods:
                torch.manual_seed(seed)
                result = train_model(
                    prob.model(),
                    name,
                    train,
                    test,
                    epochs=config.epochs,
                    batch_size=config.batch_size,
                    lr=config.lr,
                    seed=seed,
                    pool=pool,
                    train_oracle=prob.train_oracle,
                    eval_oracle=prob.eval_oracle,
                    method_options=options,
                    show_progress=config.show_progress,
                    lr_milestones=config.lr_drops or (),
                    device=device,
                    eval_batch=extra["eval_batch"],
                    compile=config.compile,
                    amp=config.amp == "bf16",
                    channels_last=config.channels_last == "on",
                    distributed=group,
                )
                result = dataclasses.replace(
                    result,
                    problem=config.problem,
                    device=str(device),
                    model=str(config.model),
                    oracle=repr(prob.train_oracle),
                )
                session.add(result)
                if config.show_progress:
                    _report(result)
    finally:
        if pool is not None:
            pool.close()


def _pool(config: TrainConfig) -> SolverPool | None:
    """The solver pool of ``--workers`` or ``--dask-address`` (``None``: solve in this process); a Dask
    scheduler is reached before any training starts."""
    if config.workers == 0 and config.dask_address is None:
        return None
    from ..pool import SolverPool  # imported when needed

    if config.dask_address is None:
        return SolverPool(config.workers)
    pool = SolverPool(backend="dask", dask_address=config.dask_address)
    try:
        pool.start()  # connect now: an unreachable scheduler is a setting that cannot work
    except WorkerCrashedError as exc:  # the pool's "cannot connect": before any work, a bad setting
        pool.close()
        why = exc.__cause__ if exc.__cause__ is not None else exc
        reason = f"cannot reach the Dask scheduler ({why}); is it running (`dask scheduler`)?"
        raise ConfigError(reason, "dask_address") from None
    except BaseException:
        pool.close()
        raise
    return pool


def _report(result: TrainRun) -> None:
    print(
        f"  {result.method:<10} seed {result.seed}: test regret {result.regret:.4f}, "
        f"accuracy {result.accuracy:.3f}, {result.epoch_time:.3f} s/epoch, steps: {result.step}",
        flush=True,
    )
