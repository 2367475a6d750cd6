"""Data-parallel training: one model trained by several processes, each on its share of every batch.

``torchrun --nproc-per-node N -m imle_solvers train ...`` starts N processes; each finds the process group
in the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``)
and [`run`][imle_solvers.training.run] trains one model with them. A process group that the caller
initialised already (``torch.distributed.init_process_group``) is used as it is. What each process does:

* **The backend** is ``gloo`` on the CPU and ``nccl`` on CUDA, where process ``LOCAL_RANK`` takes
  ``cuda:LOCAL_RANK``. Every collective fails after ``dist_timeout`` seconds, so a process that stops
  answering cannot hang the others; a process that dies is noticed by the others at once.
* **Batches.** Every process draws the same batch order from the seed (as one process does). Each global
  batch of ``batch_size`` instances is cut into ``N`` contiguous shares whose sizes differ by at most one;
  process ``r`` trains on share ``r``.
* **Gradients.** The model is wrapped in `DistributedDataParallel`, which averages the gradients over the
  processes; the gradient of each share is weighted by its size first, so that the average is the mean
  over the global batch even where the shares differ in size (the last batch of an epoch). A step
  recorded as a CUDA graph cannot hold DDP's all-reduce: ``--compile`` is ``off`` or ``model``.
* **Noise.** Each process draws the perturbations of the *whole* global batch, in the same call as one
  process would, and keeps the rows of its share: process ``r`` perturbs an instance exactly as one process
  would. Drawing costs ``N`` times more than the share needs; solving, the expensive part, does not.
* **Evaluation** is sharded too: each process evaluates a contiguous share of the test set and the sums
  behind the regret and the accuracy are added over the processes, so every process holds the same curve.
* **Output.** Only rank 0 writes result files and prints progress.

The result is the same as one process training with the same seed and global batch, up to the order of
floating-point sums (checked by the test suite with two processes); layers whose state follows their
batches ([`AdaptiveTarget`][imle_solvers.AdaptiveTarget]) combine their statistics over the processes
themselves. One exception: batch normalisation on the CPU normalises each share by its own statistics
(torch's `SyncBatchNorm` runs on CUDA only; on CUDA the model's batch-norm layers are converted to it).

Why not torch's `DistributedSampler`: it deals one epoch's permutation out to the processes in turn and
pads it with repeated instances, so a process's batches are not shares of one process's batches and the
result cannot match a single process. Training loops written by hand may use it as usual (see the
"Scaling out" page of the documentation).

References
----------
PyTorch documentation, "DistributedDataParallel",
<https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html>.

PyTorch documentation, "torchrun (Elastic Launch)", <https://pytorch.org/docs/stable/elastic/run.html>.

Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020,
<https://arxiv.org/abs/2006.15704>.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from .._checks import in_range
from ..app.machine import resolve_device
from ..errors import ConfigError, DistributedError, ImleSolversError
from ..noise import NoiseDistribution
from ..perturb_and_map import PerturbAndMAPLayer
from .methods import scale_grad

__all__ = [
    "DIST_TIMEOUT_RANGE",
    "DistributedContext",
    "GlobalBatchNoise",
    "Shard",
    "check_batches",
    "is_main_process",
    "local_rank",
    "planned_world_size",
    "process_failures",
    "process_group",
    "shard_noise",
    "share",
]


DIST_TIMEOUT_RANGE = (1.0, 7 * 24 * 3600.0)
"""Seconds ``dist_timeout`` may take, from a second to a week. Below a second, the start-up rendezvous
itself fails whenever one process imports torch a little later than another (and gloo counts in whole
milliseconds: ``1e-9`` would be no wait at all); a wait of more than a week is a hang, not a wait, and
much longer ones overflow the C++ clocks of the collectives (which then time out at once)."""


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"the environment variable {name} must be an integer, got {text!r}") from None
    if value < 0:
        raise ConfigError(f"the environment variable {name} must be >= 0, got {text!r}")
    return value


def _initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def planned_world_size() -> int:
    """How many training processes will train together: the size of the process group the caller
    initialised, else ``WORLD_SIZE`` as ``torchrun`` sets it (1 when unset)."""
    if _initialized():
        import torch.distributed as dist

        return int(dist.get_world_size())
    return max(1, _env_int("WORLD_SIZE", 1))


def local_rank() -> int:
    """This process's rank on its machine: ``LOCAL_RANK`` as ``torchrun`` sets it (0 when unset)."""
    return _env_int("LOCAL_RANK", 0)


def is_main_process() -> bool:
    """Whether this process prints and writes: rank 0 of the process group (or of ``RANK`` as set by
    ``torchrun``), or the only process."""
    if _initialized():
        import torch.distributed as dist

        return int(dist.get_rank()) == 0
    return _env_int("RANK", 0) == 0


def share(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)`` of share ``rank`` when ``rows`` rows are cut into ``world_size`` contiguous shares
    whose sizes differ by at most one (the first ``rows % world_size`` shares have one more)."""
    base, extra = divmod(rows, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def check_batches(n_train: int, batch_size: int, world_size: int) -> None:
    """Raise [`ConfigError`][imle_solvers.errors.ConfigError] unless every step gives every one of
    ``world_size`` processes at least one instance (before any work: a process without rows would leave
    the others waiting)."""
    if world_size <= 1:
        return
    if batch_size < world_size:
        raise ConfigError(
            f"must be at least the number of training processes ({world_size}), got {batch_size}",
            "batch_size",
        )
    last = n_train % batch_size
    if 0 < last < world_size:
        raise ConfigError(
            f"must leave a last batch of none or at least {world_size} instances (one per training "
            f"process), got {n_train} (batches of {batch_size} leave {last})",
            "n_train",
        )


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    """The process group one data-parallel training run uses (see the module docstring).

    Attributes
    ----------
    rank
        This process's rank (0 prints and writes).
    world_size
        Number of training processes.
    local_rank
        Rank on this machine (the CUDA device index where training runs on CUDA).
    backend
        ``"gloo"`` or ``"nccl"``.
    device
        Where this process trains.

    References
    ----------
    PyTorch documentation, "Distributed communication package - torch.distributed",
    <https://pytorch.org/docs/stable/distributed.html>.
    """

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that prints and writes."""
        return self.rank == 0

    def share(self, rows: int) -> tuple[int, int]:
        """``(start, stop)`` of this process's contiguous share of ``rows`` rows (see `share`)."""
        return share(rows, self.rank, self.world_size)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the processes, in place (asynchronous to the host on CUDA); returns it."""
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor

    def wrap(self, model: nn.Module, rows: Shard) -> nn.Module:
        """What a training step calls instead of ``model`` (on `device` already): ``model`` in
        `DistributedDataParallel`, the gradient of this process's share weighted by its size (``rows``,
        updated before each step) so that DDP's average is the mean over the global batch. On CUDA the
        model's batch-norm layers become `SyncBatchNorm` first (in place), so that they normalise over
        the global batch."""
        from torch.nn.parallel import DistributedDataParallel

        if self.device.type == "cuda":
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            ddp = DistributedDataParallel(model, device_ids=[self.device])
        else:
            ddp = DistributedDataParallel(model)
        return _ShareWeighted(ddp, rows, self.world_size)

    def slowest(self, seconds: float) -> float:
        """The largest of every process's ``seconds`` (one all-reduce): the same number everywhere."""
        import torch.distributed as dist

        value = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return float(value)

    def sync_buffers(self, model: nn.Module) -> None:
        """Give every process rank 0's buffers (batch-norm running statistics) before an evaluation."""
        import torch.distributed as dist

        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)

    def describe(self) -> dict[str, Any]:
        """What ``results.json`` records of the run's processes."""
        return {"world_size": self.world_size, "backend": self.backend, "device": str(self.device)}

    def agree(self, settings: Mapping[str, Any]) -> None:
        """Check that every process holds the same ``settings`` (one all-gather of each process's hash
        and settings, before any work): processes of one job started with different settings would
        train something no single run trains.

        Raises
        ------
        ConfigError
            On every process alike, naming the first setting that differs (its field) and the values of
            rank 0 and of the first process that differs.
        """
        import torch.distributed as dist

        mine = dict(settings)
        digest = hashlib.sha256(json.dumps(mine, sort_keys=True, default=str).encode()).hexdigest()
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, (digest, mine))
        first_digest, first = gathered[0]
        for rank, (other_digest, other) in enumerate(gathered):
            if other_digest == first_digest:
                continue
            missing = object()
            key = next(
                k for k in dict.fromkeys([*first, *other]) if first.get(k, missing) != other.get(k, missing)
            )
            raise ConfigError(
                f"differs between the training processes: rank 0 has {_setting(first.get(key))}, rank "
                f"{rank} has {_setting(other.get(key))} (start every process of the job with the same "
                f"settings)",
                key,
            )


def process_group(device: str | torch.device, timeout: float) -> DistributedContext | None:
    """The [`DistributedContext`][imle_solvers.training.distributed.DistributedContext] of this process,
    or ``None`` when it trains alone.

    Uses the process group that is initialised already (by the caller, or by an earlier call), else
    initialises the default group from the environment ``torchrun`` sets when ``WORLD_SIZE`` > 1
    (``gloo`` on the CPU, ``nccl`` on CUDA; every collective fails after ``timeout`` seconds). A group
    initialised here lives until the process exits (it is destroyed then): a second run in the same
    processes uses it again, as initialising a group twice on torchrun's store is not reliable.

    Raises
    ------
    ConfigError
        ``device`` is ``cuda:N`` (each process takes ``cuda:LOCAL_RANK``), this process has no GPU of its
        own, or an ``nccl`` group is asked to train on the CPU.
    """
    import torch.distributed as dist

    in_range("timeout", timeout, *DIST_TIMEOUT_RANGE, closed="[]")
    rank_here = local_rank()
    if not _initialized():
        world = planned_world_size()
        if world <= 1:
            return None
        if not dist.is_available():  # pragma: no cover - torch builds without distributed support
            raise ConfigError(f"WORLD_SIZE={world} but this torch has no torch.distributed")
        dev = resolve_device(device, rank_here)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        backend = "nccl" if dev.type == "cuda" else "gloo"
        with _c10d_log_kept_on_failure():
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))  # env://
        atexit.register(_destroy)
    world = int(dist.get_world_size())
    if world <= 1:
        return None
    backend = str(dist.get_backend())
    dev = resolve_device(device, rank_here)
    if backend == "nccl" and dev.type != "cuda":
        raise ConfigError("cannot train on the CPU with an nccl process group", "device")
    return DistributedContext(int(dist.get_rank()), world, rank_here, backend, dev)


def _setting(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) or "none"
    return "none" if value is None else str(value)


_TIMED_OUT = re.compile(r"timed out|timeout", re.I)
_PEER_GONE = re.compile(
    r"connection (reset|closed|refused)|broken pipe|end of file|\beof\b|socket closed|peer", re.I
)


def _detail(error: BaseException) -> str:
    """The first line of torch's message without its source location (``[.../pair.cc:537] ``)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0].strip())
    text = text.split(". This is typically caused")[0]  # gloo's advice to read the other logs
    return text if len(text) <= 160 else text[:159] + "…"


def peer_failure(error: BaseException, timeout: float, *, starting: bool = False) -> DistributedError | None:
    """The [`DistributedError`][imle_solvers.errors.DistributedError] that ``error`` means, or ``None``
    when it is not a failure of the process group.

    ``starting``: raised while the processes meet (the rendezvous and the settings check), where a
    time-out means a process never arrived. Failures are told apart by torch's error type
    (``torch.distributed.DistError``) or, for errors gloo raises through autograd as plain
    ``RuntimeError``, by gloo's or NCCL's message.
    """
    import torch.distributed as dist

    text = str(error)
    ours = isinstance(error, getattr(dist, "DistError", ())) or (
        isinstance(error, RuntimeError) and re.search(r"gloo|nccl|c10d|ProcessGroup", text, re.I) is not None
    )
    if not ours:
        return None
    world = planned_world_size()
    who = f"training process {_env_int('RANK', 0)} of {world}"
    detail = _detail(error)
    if starting and (isinstance(error, getattr(dist, "DistStoreError", ())) or _TIMED_OUT.search(text)):
        return DistributedError(
            f"{who}: the other training processes did not all arrive within --dist-timeout {timeout:g} s; "
            f"were all {world} started, with the same MASTER_ADDR and MASTER_PORT? ({detail})",
            "missing",
        )
    if starting and isinstance(error, getattr(dist, "DistNetworkError", ())):
        return DistributedError(
            f"{who}: cannot reach the rendezvous of the training processes; were all {world} started, "
            f"with the same MASTER_ADDR and MASTER_PORT? ({detail})",
            "missing",
        )
    if _TIMED_OUT.search(text):
        return DistributedError(
            f"{who}: another training process did not answer within --dist-timeout {timeout:g} s, so "
            f"this one stops too ({detail})",
            "timed out",
        )
    if _PEER_GONE.search(text):
        return DistributedError(
            f"{who}: another training process stopped (it died or was killed), so this one stops too "
            f"({detail})",
            "died",
        )
    return DistributedError(f"{who}: the process group failed ({detail})", "failed")


@contextlib.contextmanager
def process_failures(timeout: float, *, starting: bool = False) -> Iterator[None]:
    """Turn what ends a process of a data-parallel run into one
    [`DistributedError`][imle_solvers.errors.DistributedError] (see `peer_failure`): a failed collective,
    and ``SIGTERM`` (``torchrun`` stops every process when one fails), which would otherwise end the
    process silently or with a traceback of gloo. Where the process has its own ``SIGTERM`` handler it
    is left alone. Once a failure leaves the block, ``SIGTERM`` stays ignored: the process is ending,
    and torchrun's signal must not cut its line short (torchrun's ``SIGKILL`` still ends it)."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        yield
    except Exception as exc:
        typed = isinstance(exc, ImleSolversError)  # a refused setting, a solver's error: one line too
        failure = exc if typed else peer_failure(exc, timeout, starting=starting)
        if failure is None:
            raise
        if previous is not None:  # the process is ending with its one line: torchrun's SIGTERM must
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # not cut it short (its SIGKILL still would)
            previous = None
        if failure is exc:
            raise
        raise failure from exc
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stopped(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    world = planned_world_size()
    raise DistributedError(
        f"training process {_env_int('RANK', 0)} of {world}: stopped by SIGTERM (torchrun stops every "
        f"training process when one of them fails: that one's error says why)",
        "stopped",
    )


@contextlib.contextmanager
def _c10d_log_kept_on_failure() -> Iterator[None]:
    """Hold back what C++ writes to the standard error while the processes meet: c10d logs every failed
    try to reach the rendezvous with a C++ stack, which a failure here replaces by its one line
    (`peer_failure`). On success what was written is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no standard error to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                text = held.read()
                if text:
                    sys.stderr.write(text.decode(errors="replace"))
                    sys.stderr.flush()


def _destroy() -> None:
    """At exit: destroy the process group `process_group` initialised (if still there)."""
    if _initialized():
        import torch.distributed as dist

        dist.destroy_process_group()


class _ShareWeighted(nn.Module):
    """A DistributedDataParallel module whose output passes the gradient of this process's share back
    multiplied by ``b_r·N/B`` (rows ``b_r`` of a global batch of ``B``, ``N`` processes): DDP averages
    the processes' mean gradients, and weighted so they average to the mean over the global batch."""

    def __init__(self, ddp: nn.Module, rows: Shard, world_size: int) -> None:
        super().__init__()
        self.ddp, self.rows, self.world_size = ddp, rows, world_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.ddp(x)  # predicted weights of this process's share   [b_r, m]
        factor = len(x) * self.world_size / self.rows.total
        return out if factor == 1 else scale_grad(out, factor)


@dataclasses.dataclass
class Shard:
    """Which rows of the current global batch this process holds: ``[start, stop)`` of ``total``.

    Set by the training loop before each step; read by
    [`GlobalBatchNoise`][imle_solvers.training.distributed.GlobalBatchNoise].
    """

    start: int = 0
    stop: int = 0
    total: int = 0


class GlobalBatchNoise(NoiseDistribution):
    """A noise distribution that draws the noise of the whole global batch and returns this process's rows.

    Every process draws the same numbers (the same seed, the same calls), so an instance gets the
    perturbation one process training on the whole batch would give it.

    Parameters
    ----------
    base
        The distribution drawn from.
    rows
        This process's rows of the current global batch (updated by the training loop).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 7 and Algorithm 1,
    <https://arxiv.org/abs/2106.01798>.
    """

    def __init__(self, base: NoiseDistribution, rows: Shard) -> None:
        self.base, self.rows = base, rows

    def sample(
        self,
        shape: tuple[int, ...],
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        rows = self.rows
        if not shape or shape[0] != rows.stop - rows.start:
            raise ValueError(
                f"noise for {shape[0] if shape else 0} rows asked of a process holding rows "
                f"{rows.start}:{rows.stop} of a global batch of {rows.total}"
            )
        full = self.base.sample((rows.total, *shape[1:]), device, dtype, generator)  # ε, global   [B, ...]
        return full[rows.start : rows.stop].clone()  # this process's rows   [B_r, ...]

    def resolve(self, oracle: Any) -> NoiseDistribution:
        return GlobalBatchNoise(self.base.resolve(oracle), self.rows)

    @property
    def is_zero(self) -> bool:
        return self.base.is_zero

    def __repr__(self) -> str:
        return f"GlobalBatchNoise({self.base!r})"


def shard_noise(modules: Iterable[nn.Module], rows: Shard) -> int:
    """Make every perturbation layer among ``modules`` (and their submodules) draw its noise through
    [`GlobalBatchNoise`][imle_solvers.training.distributed.GlobalBatchNoise]; returns how many layers."""
    count = 0
    for module in modules:
        for sub in module.modules():
            noise = getattr(sub, "noise", None)
            if not isinstance(noise, NoiseDistribution) or isinstance(noise, GlobalBatchNoise):
                continue
            if noise.is_zero:
                continue
            if isinstance(sub, PerturbAndMAPLayer):  # the base class's setter: a PerturbedOptimizer keeps
                # its score rule (its own setter takes only Normal and Gumbel), whose ε these are
                PerturbAndMAPLayer.noise.fset(sub, GlobalBatchNoise(noise, rows))  # type: ignore[attr-defined]
            else:
                setattr(sub, "noise", GlobalBatchNoise(noise, rows))  # noqa: B010 - FenchelYoungLoss and others
            count += 1
    return count
