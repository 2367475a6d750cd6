"""One training run: a model, a method, Adam, per-epoch test regret and timings.

Inside an epoch nothing is read back from the device: each step (see ``step.py``) queues its work, the
training loss accumulates on the device, and the progress bar shows a copy of it fetched without
waiting once every `LOSS_EVERY` steps. The data sets move to the device once; batches are gathered there
by index.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .._device import upload
from ..data.dataset import PTODataset
from ..errors import ImleSolversError
from ..oracle import BatchSolver, MapOracle, map_solve, sense_sign
from .distributed import DistributedContext, Shard, shard_noise
from .methods import METHODS
from .plan import TrainPlan, recording_blocker, require_recordable
from .results import TrainRun
from .step import TrainStep, make_step

if TYPE_CHECKING:
    from .problems import Problem

__all__ = ["LOSS_EVERY", "evaluate", "train_model"]

LOSS_EVERY = 10
"""Steps between two updates of the progress bar's running loss."""

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
    *,
    amp: bool = False,
    distributed: DistributedContext | None = None,
) -> dict[str, float]:
    """Normalised regret and accuracy (share of instances whose decision has the optimal objective).

    The accuracy is the Warcraft papers' measure: a decision counts as optimal when its objective under
    the true weights equals the optimal one, ``|⟨c, ẑ⟩ − f*| ≤ 10⁻⁵·|f*| + 10⁻⁶`` (another optimal path
    than the label's counts).

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
    amp
        Run the model under bfloat16 autocast (the predicted weights are solved in float64).
    distributed
        With several training processes: each evaluates its contiguous share of ``data`` and the sums
        are added over the processes (one all-reduce), so that every process returns the same numbers.
    """
    oracle = data.oracle if oracle is None else oracle
    was_training = model.training
    model.eval()
    sign = sense_sign(oracle)
    device = data.costs.device
    total = torch.zeros((), dtype=torch.float64, device=device)
    norm = torch.zeros((), dtype=torch.float64, device=device)
    hits = torch.zeros((), dtype=torch.int64, device=device)
    start, stop = (0, len(data)) if distributed is None else distributed.share(len(data))
    for i in range(start, stop, batch):
        j = min(i + batch, stop)
        x, c, f_star = (t[i:j] for t in (data.features, data.costs, data.objectives))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            c_hat = model(x)
        c_hat = c_hat.to(torch.float64)
        z_hat = map_solve(oracle, sign * c_hat, pool)  # decisions ẑ = MAP(θ̂)   [n, m]
        obj = (c.to(torch.float64) * z_hat).sum(-1)  # ⟨c, ẑ⟩   [n]
        f64 = f_star.to(torch.float64)
        total += (-sign * (obj - f64)).sum()  # Σ regret (as losses.regret, one solve only)
        norm += f64.abs().sum()
        hits += torch.isclose(obj, f64, rtol=1e-5, atol=1e-6).sum()
    model.train(was_training)
    if distributed is not None:  # Σ over the processes' shares: one all-reduce
        sums = distributed.all_reduce(torch.stack([total, norm, hits.to(torch.float64)]))
        total, norm, hits = sums[0], sums[1], sums[2].round().to(torch.int64)
    # one device → host transfer for the whole evaluation
    return {"regret": float(total) / max(float(norm), 1e-12), "accuracy": int(hits) / max(len(data), 1)}


def train_model(
    plan: TrainPlan,
    problem: Problem,
    method_name: str,
    seed: int,
    *,
    model: nn.Module | None = None,
    pool: BatchSolver | None = None,
    time_limit: float | None = None,
    distributed: DistributedContext | None = None,
) -> TrainRun:
    """Train a model of ``problem`` with one method as ``plan`` says; test regret before training and
    after every epoch.

    Everything the run needs comes from the plan: the schedule (epochs, batch size, Adam's learning
    rate and its drops), the device (the model, the data and the method's layers move there, the noise
    is drawn there, a [`TorchOracle`][imle_solvers.TorchOracle] solves there and any other oracle gets
    one host copy of each batch), how each step runs (``plan.step``: eager, recorded as a CUDA graph,
    compiled; bfloat16 autocast and channels-last in training and evaluation), the method's options and
    the evaluation's batch. ``problem`` gives the data, the model factory and the oracles of training
    and evaluation.

    Parameters
    ----------
    plan
        The resolved settings ([`TrainConfig.plan`][imle_solvers.training.TrainConfig.plan]).
    problem
        Train and test data, the model factory and the oracles
        ([`make_problem`][imle_solvers.training.make_problem], or a
        [`Problem`][imle_solvers.training.problems.Problem] of one's own).
    method_name
        A key of [`METHODS`][imle_solvers.training.METHODS].
    seed
        Seeds the model's initialisation (``torch.manual_seed(seed)`` before ``problem.model()``), the
        batch order and the method's noise.
    model
        Train this model instead (its parameters are trained in place; its initialisation is the
        caller's).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles (added to the
        method's options).
    time_limit
        Stop after the epoch during which the training time (evaluations excluded) passed this many
        seconds; the run then has fewer epochs than the schedule's (``None``: no limit).
    distributed
        Train data-parallel with this process group (see
        [`distributed`][imle_solvers.training.distributed]): this process trains on its share of every
        batch, the model in `DistributedDataParallel`, and every process returns the result one process
        would with the same seed and batch size (up to the order of floating-point sums). Only rank 0
        shows progress; an epoch's time is the slowest process's. The step must not be recorded as a
        CUDA graph (see [`recording_blocker`][imle_solvers.training.plan.recording_blocker]).

    Returns
    -------
    TrainRun
        ``method``, ``seed``, ``regret`` and ``accuracy`` (final), ``curve`` (regret after 0..epochs
        epochs), ``accuracy_curve``, ``epoch_time`` (seconds per training epoch, evaluation excluded),
        ``epoch_times``, ``eval_times``, ``train_loss`` (mean per epoch), ``lr`` (learning rate of each
        epoch), ``settings`` (the method's hyper-parameters as used), ``step`` (how the steps ran) and
        ``problem``, ``device``, ``model``, ``oracle``.
    """
    if method_name not in METHODS:
        raise ValueError(f"unknown method {method_name!r}; choose from {', '.join(METHODS)}")
    if distributed is not None:  # the rule of the plan, for a process group the plan did not know of
        blocker = recording_blocker(
            plan.device, plan.oracle, plan.workers, plan.dask_address, distributed.world_size
        )
        require_recordable(plan.step.compile, blocker)
    dev = plan.device
    if model is None:
        torch.manual_seed(seed)  # all methods of a seed start from the same initial model
        model = problem.model()
    model.to(dev)
    train, test = problem.train.to(dev), problem.test.to(dev)
    if plan.step.channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        train, test = _channels_last(train), _channels_last(test)
    batch_size, epochs = plan.schedule.batch_size, plan.schedule.epochs
    options = plan.options if pool is None else dataclasses.replace(plan.options, pool=pool)
    torch.manual_seed(seed)  # the method's noise (on CUDA too)
    method = METHODS[method_name](problem.train_oracle, options)
    if method.prepare is not None:
        method.prepare(train)  # e.g. a solution pool seeded with the training set's optimal states
    for module in method.modules:
        module.to(dev)  # layers with state (AdaptiveTarget) keep it beside the weights
    # Adam's step count on the device for every step mode on CUDA: eager and recorded steps do the same
    # arithmetic (a recorded step needs it; an eager one loses nothing by it)
    opt = torch.optim.Adam(list(model.parameters()), lr=plan.schedule.lr, capturable=dev.type == "cuda")
    running = torch.zeros((), device=dev)  # Σ training loss of the epoch, summed on the device
    step = make_step(
        plan.step.compile, model, method, opt, train, running, batch_size=batch_size, amp=plan.step.amp
    )
    rows = Shard()  # this process's rows of the current global batch
    show_progress = plan.show_progress
    if distributed is not None:
        step.forward = distributed.wrap(step.forward, rows)  # DDP: gradients averaged over the processes
        shard_noise(method.modules, rows)  # the noise of the global batch, this process's rows of it
        show_progress = show_progress and distributed.is_main
    eval_oracle, amp = problem.eval_oracle, plan.step.amp

    def evaluation() -> dict[str, float]:
        return evaluate(model, test, eval_oracle, pool, plan.eval_batch, amp=amp, distributed=distributed)

    gen = torch.Generator().manual_seed(seed)  # batch order, the same on every device and process
    with _cudnn_benchmark(plan.step.cudnn_benchmark):
        start = time.perf_counter()
        first = evaluation()
        curve, acc_curve = [first["regret"]], [first["accuracy"]]
        eval_times = [time.perf_counter() - start]
        times: list[float] = []
        losses: list[float] = []
        lrs: list[float] = []
        n = len(train)
        for epoch in range(epochs):
            model.train()
            method.train()
            _synchronize(dev)
            start = time.perf_counter()
            bar = _progress_bar(-(-n // batch_size), f"{method_name} {epoch + 1}/{epochs}", show_progress)
            world = 1 if distributed is None else distributed.world_size
            display = _LossDisplay(bar, running, n, batch_size, share=1 / world)
            _train_epoch(step, gen, batch_size, display, rows, distributed)
            if bar is not None:
                bar.close()
            lrs.append(opt.param_groups[0]["lr"])  # the rate this epoch trained with
            if epoch + 1 in plan.schedule.lr_drops:
                for group in opt.param_groups:
                    group["lr"] *= 0.1
                step.lr_changed()
            _synchronize(dev)
            times.append(time.perf_counter() - start)
            if distributed is not None:
                times[-1] = distributed.slowest(times[-1])  # every process stops after the same epoch
                distributed.all_reduce(running)  # Σ over the processes' shares
                distributed.sync_buffers(model)  # rank 0's batch-norm statistics for the evaluation
            losses.append(float(running) / max(n, 1))  # the epoch's one read of the loss
            start = time.perf_counter()
            ev = evaluation()
            eval_times.append(time.perf_counter() - start)
            curve.append(ev["regret"])
            acc_curve.append(ev["accuracy"])
            if time_limit is not None and sum(times) >= time_limit:
                break
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
        eval_times=eval_times,
        step=step.kind,
        problem=plan.problem,
        device=str(dev),
        model=plan.model,
        oracle=repr(problem.train_oracle),
    )


@contextlib.contextmanager
def _cudnn_benchmark(enabled: bool) -> Iterator[None]:
    """``torch.backends.cudnn.benchmark = enabled`` for the block, restored afterwards."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def _train_epoch(
    step: TrainStep,
    gen: torch.Generator,
    batch_size: int,
    display: _LossDisplay,
    rows: Shard,
    distributed: DistributedContext | None = None,
) -> None:
    """One epoch: a batch order drawn from ``gen`` (on the CPU: the same on every device and process),
    then the steps, each on this process's share of its batch; no host synchronisation (the loss display
    reads a copy of the loss only when it has arrived)."""
    n = len(step.data)
    perm = upload(torch.randperm(n, generator=gen), step.device)  # one copy per epoch, without waiting
    step.running.zero_()
    for b, start in enumerate(range(0, n, batch_size)):
        indices = perm[start : start + batch_size]  # the global batch, on the device   [B]
        rows.start, rows.stop, rows.total = 0, len(indices), len(indices)
        if distributed is not None:
            rows.start, rows.stop = distributed.share(len(indices))
            indices = indices[rows.start : rows.stop]  # this process's share   [B_r]
        try:
            step(indices)
        except ImleSolversError as err:
            if distributed is not None:
                _global_rows(err, rows, distributed)
            raise
        display.update(b)


def _global_rows(err: ImleSolversError, rows: Shard, distributed: DistributedContext) -> None:
    """Renumber the rows of a typed error of this process's share in the global batch (in place)."""
    err.message = f"{err.message} (training process {distributed.rank} of {distributed.world_size})"
    err.with_rows(r + rows.start for r in err.rows)


class _LossDisplay:
    """The running loss on the progress bar, refreshed every `LOSS_EVERY` steps without a host
    synchronisation: on CUDA the loss is copied into pinned memory without blocking and shown once the
    copy has arrived (a CUDA event says so), on the CPU it is read directly."""

    def __init__(self, bar: Any, running: torch.Tensor, n: int, batch_size: int, share: float = 1.0) -> None:
        self.bar, self.running, self.n, self.batch_size = bar, running, n, batch_size
        self.share = share  # this process's share of each batch (the running loss sums only its rows)
        self.cuda = running.device.type == "cuda"
        self.last = -(-n // batch_size) - 1
        self.pending: tuple[Any, torch.Tensor, int] | None = None  # (event, pinned copy, instances)

    def update(self, b: int) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        if (b + 1) % LOSS_EVERY and b != self.last:
            return
        seen = round(min(self.n, (b + 1) * self.batch_size) * self.share)
        if not self.cuda:
            self._show(float(self.running), seen)
            return
        if self.pending is not None:
            event, copy_, count = self.pending
            if not event.query():  # not arrived yet: show it next time
                return
            self._show(float(copy_), count)  # pinned host memory, already written: no synchronisation
        copy_ = torch.empty((), dtype=self.running.dtype, pin_memory=True)
        copy_.copy_(self.running, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.pending = (event, copy_, seen)

    def _show(self, total: float, count: int) -> None:
        self.bar.set_postfix(loss=f"{total / max(count, 1):.4g}", refresh=False)


def _channels_last(data: PTODataset) -> PTODataset:
    """``data`` with 4-D features (images) in channels-last memory format (a copy only where needed)."""
    if data.features.dim() != 4 or data.features.is_contiguous(memory_format=torch.channels_last):
        return data
    converted = copy.copy(data)
    converted.features = data.features.contiguous(memory_format=torch.channels_last)
    return converted


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously): honest epoch times."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _progress_bar(total: int, desc: str, show: bool) -> Any:
    """A tqdm bar on stderr, or ``None`` when not shown or tqdm is not installed."""
    if not show or _tqdm is None:
        return None
    return _tqdm(total=total, desc=desc, leave=False, file=sys.stderr, dynamic_ncols=True)
