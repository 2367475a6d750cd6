"""`run`: every (method, seed) run of a `TrainConfig`, reported and written one by one as they finish."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..app.session import Session
from ..errors import ConfigError, WorkerCrashedError
from .config import TrainConfig
from .distributed import DistributedContext, planned_world_size, process_failures, process_group
from .loop import train_model
from .plan import TrainPlan, steps_text
from .problems import make_problem
from .results import SUMMARY, TrainRun, plot_curves

if TYPE_CHECKING:
    from ..pool import SolverPool

__all__ = ["run", "title"]


def title(plan: TrainPlan) -> str:
    """One line naming the problem of a plan (tables and plots): ``plan.title``."""
    return plan.title


def run(config: TrainConfig, on_result: Callable[[TrainRun], None] | None = None) -> list[TrainRun]:
    """Train every method on every seed; one [`TrainRun`][imle_solvers.training.TrainRun] per
    (method, seed), in that order.

    Does what ``imle-solvers train`` does: the settings are resolved once
    ([`TrainConfig.plan`][imle_solvers.training.TrainConfig.plan]) and the machine is checked first
    (``device``, ``out``, ``data``, the step: [`ConfigError`][imle_solvers.errors.ConfigError] before any
    work), torch uses ``config.threads`` threads (the previous setting is restored afterwards), and with
    ``config.out`` every run is written as it finishes, then ``results.json``, ``results.md`` and
    ``curves.png``. Each seed generates its own data (data seed = ``seed``, on the training device) and
    model initialisation (``torch.manual_seed(seed)``); all methods of a seed start from the same
    initial model. The data move to the device once per seed. Where ``--compile auto`` could not record
    the step on a CUDA device, one line on stderr says why.

    Under ``torchrun`` (``WORLD_SIZE`` > 1), or in a process group the caller initialised, the processes
    train one model data-parallel (see [`distributed`][imle_solvers.training.distributed]): each on its
    share of every batch of ``batch_size``, with the result of one process; only rank 0 prints and writes
    ``out``, and every process returns the runs. The processes first compare their settings
    ([`TrainPlan.job_settings`][imle_solvers.training.plan.TrainPlan.job_settings]): processes started
    with different ones are refused on each, before any work. After that, a failure of the process group
    (a process that died, stopped answering, never arrived, or was stopped by torchrun's ``SIGTERM``)
    ends every process that is left with a
    [`DistributedError`][imle_solvers.errors.DistributedError] (one line each from the command).

    Parameters
    ----------
    config
        The settings.
    on_result
        Called with each run as soon as it finishes, before it is written: an interruption (Ctrl-C, a
        full disk) loses at most the run in progress.

    Raises
    ------
    KeyboardInterrupt
        After writing what had finished (``results.json`` with ``"complete": false``).
    OutputError
        When a result cannot be written; the finished runs were handed to ``on_result``.
    ConfigError
        A setting that cannot work here, or, under torchrun, processes started with different settings.
    DistributedError
        Under torchrun: the processes could not go on together.
    """
    plan = config.plan()
    if planned_world_size() == 1:
        return _run(config, plan, None, on_result)
    with process_failures(plan.dist_timeout, starting=True):  # a process missing: one line, not a hang
        group = process_group(plan.device, plan.dist_timeout)
        if group is not None:
            group.agree(plan.job_settings)  # processes started with other settings: refused on each
    with process_failures(plan.dist_timeout):  # a process that dies or stops answering: one line each
        return _run(config, plan, group, on_result)


def _run(
    config: TrainConfig,
    plan: TrainPlan,
    group: DistributedContext | None,
    on_result: Callable[[TrainRun], None] | None,
) -> list[TrainRun]:
    main = group is None or group.is_main
    if not main:  # rank 0 alone prints and writes
        plan = dataclasses.replace(plan, out=None, show_progress=False)
    with Session(config, SUMMARY, resolved=dict(plan.record), on_result=on_result, writes=main) as session:
        if main and plan.device.type == "cuda" and not plan.step.compile.records:
            step = plan.step  # the reason of auto names the steps already
            said = step.reason if step.reason.startswith("auto") else f"{step.compile.words} ({step.reason})"
            print(f"steps: {said}", file=sys.stderr, flush=True)
        _train_all(plan, session, group)
        session.finish(
            markdown=f"{plan.title}, {len(plan.seeds)} seed(s)",
            extra=None if group is None else {"distributed": group.describe()},
            plots=[("curves.png", lambda path: plot_curves(session.records, path, title=plan.title))],
        )
    return list(session.records)


def _train_all(plan: TrainPlan, session: Session, group: DistributedContext | None) -> None:
    pool = _pool(plan)
    try:
        for seed in plan.seeds:
            # the data are made on (or moved to) the device once; the pool solves what they need solved
            problem = make_problem(plan, seed, pool=pool)
            for name in plan.methods:
                result = train_model(plan, problem, name, seed, pool=pool, distributed=group)
                session.add(result)
                if plan.show_progress:
                    _report(result)
    finally:
        if pool is not None:
            pool.close()


def _pool(plan: TrainPlan) -> SolverPool | None:
    """The solver pool of ``--workers`` or ``--dask-address`` (``None``: solve in this process); a Dask
    scheduler is reached before any training starts."""
    if plan.workers == 0 and plan.dask_address is None:
        return None
    from ..pool import SolverPool  # imported when needed

    if plan.dask_address is None:
        return SolverPool(plan.workers)
    pool = SolverPool(backend="dask", dask_address=plan.dask_address)
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
        f"accuracy {result.accuracy:.3f}, {result.epoch_time:.3f} s/epoch, {steps_text(result.step)}",
        flush=True,
    )
