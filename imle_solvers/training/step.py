"""The optimisation step of [`train_model`][imle_solvers.training.train_model]: eager, with the model
compiled, or recorded once as a CUDA graph and replayed.

A step takes the indices of one batch into the training set (a tensor on the training device) and does
the rest on the device: it gathers the batch, runs the model (under bfloat16 autocast with ``amp``; the
costs it predicts are cast back to float32 for the layers and solvers), the method's loss (for I-MLE:
the noise, the forward solve and, in the backward pass, the target's solve), the backward pass and
Adam's update, and adds the batch's summed loss to a counter on the device. Nothing is read back to the
host, so consecutive steps queue up on the device without waiting for each other.

[`GraphStep`][imle_solvers.training.step.GraphStep] (CUDA) records the whole step as one CUDA graph:
after two eager warm-up steps on a side stream (cuDNN's algorithm search, the lazy state of Adam and of
the layers), the third full batch is recorded with a static index buffer and every later full batch is
one copy of its indices and one graph replay, a single launch instead of hundreds. A smaller last batch
runs eagerly; a change of the learning rate records the graph again. Where recording fails (an
operation of the step that needs the host, such as a solver-backed oracle), the step warns once and
runs eagerly from then on.

References
----------
PyTorch documentation, "CUDA Graphs" (whole-network capture),
<https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from ..data.dataset import PTODataset
from .methods import Batch, Method
from .plan import Compile

__all__ = ["WARMUP_STEPS", "CudaGraphRecorder", "GraphStep", "Recorder", "TrainStep", "make_step"]

WARMUP_STEPS = 2
"""Eager steps on a side stream before a [`GraphStep`][imle_solvers.training.step.GraphStep] records."""


class TrainStep:
    """One eager optimisation step per call: ``step(indices)`` (see the module docstring).

    Parameters
    ----------
    model
        The predictor; ``forward`` (default ``model``) is what the step calls, e.g. its compiled twin.
    method
        The training [`Method`][imle_solvers.training.methods.Method].
    optimizer
        Updates the model's parameters.
    data
        The training set, on the training device.
    running
        A 0-dim float tensor on the device; the step adds the batch's summed per-instance loss to it.
    amp
        Run ``forward`` under bfloat16 autocast.
    forward
        The module the step calls on the images (default ``model``).
    mode
        The name of the mode that built it (`make_step`), reported by `kind`.
    """

    def __init__(
        self,
        model: nn.Module,
        method: Method,
        optimizer: torch.optim.Optimizer,
        data: PTODataset,
        running: torch.Tensor,
        *,
        amp: bool = False,
        forward: nn.Module | None = None,
        mode: str = "off",
    ) -> None:
        self.model, self.method, self.optimizer, self.data = model, method, optimizer, data
        self.mode = mode
        self.running = running
        self.amp = bool(amp)
        self.forward = model if forward is None else forward
        self.device = data.costs.device
        self._autocast_cache = True

    @property
    def kind(self) -> str:
        """How the steps ran: the mode (``off``: eager), or why a graph fell back to eager steps."""
        return self.mode

    def __call__(self, indices: torch.Tensor) -> None:
        """One step on the batch ``indices`` (a 1-D integer tensor on the training device)."""
        self._eager(indices)

    def lr_changed(self) -> None:
        """The learning rate was changed (eager steps read it anew; nothing to do)."""

    def _eager(self, indices: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._body(indices)

    def _body(self, indices: torch.Tensor) -> None:
        """Gather, forward, loss, backward, update, accumulate: all on the device."""
        d = self.data
        x = d.features[indices]  # images keep their memory format   [B, ...]
        batch = Batch(x, d.costs[indices], d.solutions[indices], d.objectives[indices])
        with torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.amp, cache_enabled=self._autocast_cache
        ):
            c_hat = self.forward(x)  # predicted weights   [B, m]
        if self.amp:
            c_hat = c_hat.float()  # layers and solvers take float32 weights
        loss, per = self.method.loss(c_hat, batch)
        loss.backward()
        self.optimizer.step()
        self.running.add_(per.detach().sum())  # Σ loss, on the device: no host synchronisation


class Recorder(Protocol):
    """How a [`GraphStep`][imle_solvers.training.step.GraphStep] warms up and records (the CUDA graph
    machinery, kept apart so that the step's logic can be run and tested without CUDA)."""

    def warm_up(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once, eagerly, where lazy initialisations do not disturb a later recording."""

    def record(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Record ``fn`` without running it; → a function that replays it."""


class CudaGraphRecorder:
    """The [`Recorder`][imle_solvers.training.step.Recorder] of CUDA: warm-up steps on a side stream,
    the recording a ``torch.cuda.CUDAGraph`` (replayed by ``graph.replay``); neither waits for the
    device."""

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs record work on a CUDA device, got {device}")
        self.device = device

    def warm_up(self, fn: Callable[[], None]) -> None:
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)  # the side stream sees the data the current one has queued
        with torch.cuda.stream(side):
            fn()
        current.wait_stream(side)

    def record(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Record on a side stream that waits for the current one (an event, not a host synchronisation:
        unlike ``torch.cuda.graph``, which synchronises the device first)."""
        graph = torch.cuda.CUDAGraph()  # its own private memory pool; nothing runs while recording
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        try:
            with torch.cuda.stream(side):
                graph.capture_begin()
                try:
                    fn()
                except BaseException:
                    with contextlib.suppress(Exception):  # the recording is void: keep fn's error
                        graph.capture_end()
                    raise
                graph.capture_end()
        finally:
            current.wait_stream(side)
        return graph.replay


class GraphStep(TrainStep):
    """The training step recorded once as one CUDA graph and replayed: ``imle-solvers train --compile graph``.

    A step is the batch gather, the model (bfloat16 autocast with ``amp``), the method's loss (for I-MLE:
    the noise, the perturb-and-MAP solve and, in the backward pass, the target's solve, Algorithm 1 of
    the I-MLE paper), the backward pass, Adam's update and the sum of the loss on the device. The first
    two full batches run eagerly on a side stream (cuDNN's algorithm search and the lazy state of Adam
    and of the layers happen there), the third is recorded with a static index buffer, and every later
    full batch is one copy of its indices and one replay: a single launch where the eager step launches
    hundreds of kernels. Recording waits for the device through events, never through the host. A
    smaller last batch of an epoch runs eagerly; a change of the learning rate (a constant of the
    recording) records again. Where recording fails (an operation that needs the host, such as a
    solver-backed oracle), the step warns once and runs eagerly from then on; `kind` says how the steps
    ran. The optimizer must be built with ``capturable=True`` (Adam's step count on the device).

    Parameters
    ----------
    batch_size
        The size of the full batches (the one shape recorded).
    recorder
        How to warm up and record (default: CUDA graphs on the data's device, `CudaGraphRecorder`).
    **kwargs
        As `TrainStep`: ``model``, ``method``, ``optimizer``, ``data``, ``running``, ``amp``, ``forward``,
        ``mode``.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, Algorithm 1, <https://arxiv.org/abs/2106.01798>.

    PyTorch documentation, "CUDA Graphs" (whole-network capture),
    <https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>.
    """

    def __init__(self, *args: Any, batch_size: int, recorder: Recorder | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = CudaGraphRecorder(self.device) if recorder is None else recorder
        self.batch_size = int(batch_size)
        self._autocast_cache = False  # autocast's weight cache cannot live across graph replays
        self.indices = torch.zeros(self.batch_size, dtype=torch.long, device=self.device)  # static input
        self.replay: Callable[[], None] | None = None
        self.warm = 0
        """Warm-up steps taken (`WARMUP_STEPS` before the first recording)."""
        self.failure: str | None = None
        """Why recording failed (the steps then run eagerly), or ``None``."""
        self.recordings = 0
        """How many times the step was recorded (once, plus once per change of the learning rate)."""

    @property
    def kind(self) -> str:
        if self.failure is None:
            return self.mode
        return f"off (recording the CUDA graph failed: {self.failure})"

    def __call__(self, indices: torch.Tensor) -> None:
        if self.failure is not None or indices.numel() != self.batch_size:
            self._eager(indices)  # the last, smaller batch of an epoch (or no graph)
        elif self.warm < WARMUP_STEPS:
            self.recorder.warm_up(lambda: self._eager(indices))
            self.warm += 1
        elif self.replay is None and not self._record(indices):
            self._eager(indices)
        else:
            assert self.replay is not None
            self.indices.copy_(indices)  # the batch's indices into the static buffer (on the device)
            self.replay()

    def lr_changed(self) -> None:
        """Record the step again on the next full batch (the learning rate is a constant of the graph)."""
        self.replay = None

    def _record(self, indices: torch.Tensor) -> bool:
        """Record the step on the static buffers (recording runs nothing: the caller replays it)."""
        self.replay = None  # the previous graph's memory is released before the new one is recorded
        try:
            # gradients set to None while recording: the graph's backward allocates (and then overwrites)
            # its own, so that a replay gives this step's gradients, as an eager step does
            self.replay = self.recorder.record(lambda: self._eager(self.indices))
        except Exception as exc:  # an operation that cannot be recorded (it needs the host)
            text = str(exc).strip().splitlines()
            self.failure = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
            self.optimizer.zero_grad(set_to_none=True)
            warnings.warn(
                f"the training step could not be recorded as a CUDA graph ({self.failure}); "
                "it runs eagerly (--compile off skips the attempt)",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        self.recordings += 1
        return True


def make_step(
    mode: Compile | str,
    model: nn.Module,
    method: Method,
    optimizer: torch.optim.Optimizer,
    data: PTODataset,
    running: torch.Tensor,
    *,
    batch_size: int,
    amp: bool = False,
) -> TrainStep:
    """The step of ``mode`` (a [`Compile`][imle_solvers.training.plan.Compile] or its value: ``off``,
    ``graph``, ``model`` or ``model+graph``)."""
    try:
        kind = Compile(mode)
    except ValueError:
        raise ValueError(
            f"compile must be one of 'off', 'graph', 'model', 'model+graph', got {mode!r}"
        ) from None
    forward = compile_model(model) if kind.compiles else None
    if kind.records:
        return GraphStep(
            model,
            method,
            optimizer,
            data,
            running,
            amp=amp,
            forward=forward,
            mode=kind.value,
            batch_size=batch_size,
        )
    return TrainStep(model, method, optimizer, data, running, amp=amp, forward=forward, mode=kind.value)


COMPILE_BACKEND = "inductor"
"""The ``torch.compile`` back end of ``--compile model`` (tests use ``"aot_eager"``: no code generation)."""


def compile_model(model: nn.Module) -> nn.Module:
    """``torch.compile(model)`` with `COMPILE_BACKEND`: the compiled twin shares the model's parameters."""
    return torch.compile(model, backend=COMPILE_BACKEND)  # type: ignore[return-value]
