"""`TrainPlan`: a training run's settings as it runs them, resolved once from a `TrainConfig`.

A [`TrainConfig`][imle_solvers.training.TrainConfig] records what was asked for, where ``None`` means "the
problem's default" and ``auto`` means "what was measured fastest here".
[`resolve`][imle_solvers.training.plan.resolve] turns it, once and before any work, into a frozen
[`TrainPlan`][imle_solvers.training.plan.TrainPlan] without either: a ``torch.device``, a
[`Compile`][imle_solvers.training.plan.Compile] mode, booleans for bfloat16 autocast and channels-last,
the data counts, the [`Schedule`][imle_solvers.training.plan.Schedule] and the methods'
[`MethodOptions`][imle_solvers.training.methods.MethodOptions]. The plan is the only way settings reach
[`make_problem`][imle_solvers.training.make_problem] and
[`train_model`][imle_solvers.training.train_model].

Each ``auto`` rule is one function here, a function of what it depends on (testable without a GPU):

| setting | function | rule |
|---|---|---|
| ``--device auto`` | ``app.machine.resolve_device`` | CUDA when available |
| ``--oracle auto`` | `auto_oracle` | device-native off the CPU (and on it where fastest); host without one |
| ``--amp auto`` | `auto_amp` | bfloat16 for the CNNs on a CUDA device with native bfloat16 |
| ``--channels-last auto`` | `auto_channels_last` | for the CNNs on CUDA |
| ``--compile auto`` | `auto_compile` | the recorded step on CUDA unless `recording_blocker` names a reason |

The recorded step's two requirements, CUDA and one training process (and everything else that rules it
out), are written once, in `recording_blocker`: ``auto`` falls back to eager steps with its reason, an
explicit ``graph`` is refused with it.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..app.machine import resolve_device
from ..errors import ConfigError, DataError
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from .distributed import check_batches, local_rank, planned_world_size
from .methods import MethodOptions
from .problems import DEFAULTS, SCHEDULE_DEFAULTS

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = [
    "PROCESS_SETTINGS",
    "SCHEDULES",
    "Compile",
    "DataPlan",
    "Schedule",
    "StepPlan",
    "TrainPlan",
    "auto_amp",
    "auto_channels_last",
    "auto_compile",
    "auto_oracle",
    "bf16_supported",
    "recording_blocker",
    "resolve",
    "steps_text",
]

SCHEDULES: dict[str, tuple[int | None, int | None, float | None, tuple[int, ...]]] = {
    "constant": (None, None, None, ()),
    "paper": (50, 70, 5e-4, (30, 40)),
}
"""``--schedule``: name → (epochs, batch size, lr, epochs after which the lr is divided by 10); ``None``
leaves the problem's default. ``paper``: the Warcraft protocol of Vlastelica et al. used by the I-MLE
paper (appendix, "Differentiating through Combinatorial Solvers")."""


PROCESS_SETTINGS = frozenset(
    {"device", "threads", "workers", "dask_address", "out", "show_progress", "cache", "data", "dist_timeout"}
)
"""The settings each process of a ``torchrun`` job may choose for itself: its CUDA device, CPU threads,
solver pool, output (rank 0 alone writes and prints), the cache and the path of the data files (another
machine may mount them elsewhere; their counts are compared), and its time-out. Every other setting
must be the same in every process."""


class Compile(str, enum.Enum):
    """How the training steps run (``--compile`` once resolved; see
    [`GraphStep`][imle_solvers.training.step.GraphStep])."""

    OFF = "off"
    """Every operation eagerly."""
    GRAPH = "graph"
    """The whole step recorded once as a CUDA graph and replayed."""
    MODEL = "model"
    """The model compiled by ``torch.compile``, the rest eagerly."""
    MODEL_GRAPH = "model+graph"
    """Both."""

    @property
    def records(self) -> bool:
        """Whether the step is recorded as a CUDA graph."""
        return self in (Compile.GRAPH, Compile.MODEL_GRAPH)

    @property
    def compiles(self) -> bool:
        """Whether the model is compiled by ``torch.compile``."""
        return self in (Compile.MODEL, Compile.MODEL_GRAPH)

    @property
    def words(self) -> str:
        """How a run's line says it: ``eager steps``, ``steps replayed from a CUDA graph``, …"""
        return {
            Compile.OFF: "eager steps",
            Compile.GRAPH: "steps replayed from a CUDA graph",
            Compile.MODEL: "eager steps, model compiled by torch.compile",
            Compile.MODEL_GRAPH: "steps replayed from a CUDA graph, model compiled by torch.compile",
        }[self]


def steps_text(step: str) -> str:
    """A run's ``step`` (``off``, ``graph``, …, or ``off (why the graph fell back)``) in words:
    `Compile.words`, then the reason where there is one."""
    mode, _, why = step.partition(" ")
    try:
        words = Compile(mode).words
    except ValueError:
        return step
    return f"{words} {why}" if why else words


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """The optimisation schedule: ``epochs`` of Adam steps on batches of ``batch_size``, learning rate
    ``lr`` divided by 10 after each epoch of ``lr_drops``; ``name`` is the ``--schedule`` it came from."""

    name: str
    epochs: int
    batch_size: int
    lr: float
    lr_drops: tuple[int, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepPlan:
    """How each training step runs.

    Attributes
    ----------
    compile
        Eager, recorded as a CUDA graph, with the model compiled, or both.
    amp
        Run the model under bfloat16 autocast (in training and evaluation).
    channels_last
        The model's weights and the images in channels-last memory format.
    cudnn_benchmark
        Let cuDNN time its convolution algorithms and keep the fastest (fixed image sizes); applied for
        the run and restored afterwards.
    reason
        One line: why ``compile`` is what it is (``"asked for"``, the recorded step's conditions, or what
        rules it out).
    """

    compile: Compile
    amp: bool
    channels_last: bool
    cudnn_benchmark: bool
    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataPlan:
    """What the problem's data are made of.

    Attributes
    ----------
    n_train
        Training instances.
    n_test
        Test instances.
    deg
        Polynomial degree of the PyEPO cost model.
    noise_width
        Half-width ē of its multiplicative noise.
    size
        Grid size K of the image problems.
    folder
        The folder of the published Warcraft files; ``None``: generated data.
    cache
        Keep generated maps in the user cache folder.
    nodes
        Number of nodes of ``tsp``.
    solve_ratio
        ``tsp``: the share of training rows sent to the solver, the others answered by a solution cache.
    """

    n_train: int
    n_test: int
    deg: int
    noise_width: float
    size: int
    folder: str | None
    cache: bool
    nodes: int
    solve_ratio: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """A training run's settings as it runs them: every default filled in, every ``auto`` decided.

    Built by [`resolve`][imle_solvers.training.plan.resolve] (or
    [`TrainConfig.plan`][imle_solvers.training.TrainConfig.plan]); nothing in it means "decide later".
    Three fields may be ``None``, each meaning "none": ``out`` (nothing is written),
    ``data.folder`` (generated data) and ``dask_address`` (no Dask cluster). A variant for an experiment
    of one's own is ``dataclasses.replace(plan, ...)``.

    Attributes
    ----------
    problem
        A key of [`PROBLEMS`][imle_solvers.training.PROBLEMS].
    methods
        Keys of [`METHODS`][imle_solvers.training.METHODS].
    seeds
        One run per (method, seed).
    model
        ``linear``, ``terrain-cnn`` or ``resnet-stem``.
    data
        The data's counts and source.
    schedule
        Epochs, batch size, learning rate and its drops.
    options
        What the method factories read (``pool`` is added per run).
    eval_batch
        Test instances per model / oracle call in the evaluation.
    device
        Where the model, the data and the noise live (under ``torchrun``: this process's device).
    oracle
        ``"device"`` (device-native oracles) or ``"host"`` (solver-backed ones).
    step
        How each step runs.
    workers
        Solver pool processes (0: none).
    dask_address
        The Dask scheduler that solves the host oracles' batches, or ``None``.
    world_size
        Training processes (``torchrun``).
    threads
        torch CPU threads during the run.
    out
        The output folder, or ``None``.
    show_progress
        Progress bars and a line per finished run.
    dist_timeout
        Seconds a training process waits for the others in one collective.
    record
        The settings as ``results.json`` records them: the field names of
        [`TrainConfig`][imle_solvers.training.TrainConfig] with their resolved values, and
        ``compile_reason``.
    """

    problem: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    model: str
    data: DataPlan
    schedule: Schedule
    options: MethodOptions
    eval_batch: int
    device: torch.device
    oracle: str
    step: StepPlan
    workers: int
    dask_address: str | None
    world_size: int
    threads: int
    out: str | None
    show_progress: bool
    dist_timeout: float
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def title(self) -> str:
        """One line naming the problem (tables and plots)."""
        size = self.data.size
        if self.problem == "terrain":
            return f"terrain {size}×{size}, {self.model}"
        if self.problem == "warcraft":
            source = "generated maps" if self.data.folder is None else self.data.folder
            return f"Warcraft {size}×{size} ({source}), {self.model}"
        if self.problem == "tsp":
            return f"TSP {self.data.nodes} nodes, deg {self.data.deg}"
        return f"{self.problem}, deg {self.data.deg}"

    @property
    def job_settings(self) -> dict[str, Any]:
        """The settings every process of one ``torchrun`` job must share (compared at start-up by
        [`DistributedContext.agree`][imle_solvers.training.distributed.DistributedContext.agree]):
        `record` less `PROCESS_SETTINGS`, with the device's type (each process has its own GPU)."""
        shared = {k: v for k, v in self.record.items() if k not in PROCESS_SETTINGS}
        shared["device"] = self.device.type
        return shared

    @property
    def settings_text(self) -> str:
        """The step's settings as the command line spells them: ``--compile graph --amp bf16 ...``."""
        amp = "bf16" if self.step.amp else "off"
        last = "on" if self.step.channels_last else "off"
        return f"--compile {self.step.compile.value} --amp {amp} --channels-last {last}"


# --- the rules ---------------------------------------------------------------------------------------


def auto_oracle(problem: str, device: torch.device, pool: bool = False) -> str:
    """``--oracle auto``: ``"device"`` (device-native oracles) off the CPU, and on the CPU for the problems
    whose device-native oracle is also their fastest CPU oracle (``native_on_cpu`` in the problem's
    ``DEFAULTS``: the knapsack's ``TorchKnapsack``); ``"host"`` otherwise, on every device for the
    problems that have no device-native oracle (``native_oracle`` ``False`` in their ``DEFAULTS``:
    ``tsp``), and wherever a solver pool is asked for (``pool``: ``--workers`` or ``--dask-address``,
    which solve host oracles)."""
    defaults = DEFAULTS.get(problem, {})
    if pool or not defaults.get("native_oracle", True):
        return "host"
    if device.type != "cpu" or defaults.get("native_on_cpu", False):
        return "device"
    return "host"


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` runs bfloat16 natively (a CUDA device of the Ampere generation or later)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def auto_amp(device: torch.device, model: str, bf16: bool) -> bool:
    """``--amp auto``: bfloat16 autocast for the CNNs on a CUDA device that runs bfloat16 natively
    (``bf16``); measured on an H200 at 30 × 30: 1.48 → 0.73 s per epoch of 10,000 maps, with
    channels-last."""
    return device.type == "cuda" and model != "linear" and bf16


def auto_channels_last(device: torch.device, model: str) -> bool:
    """``--channels-last auto``: channels-last memory format for the CNNs on CUDA (the format of cuDNN's
    fastest bfloat16 convolutions)."""
    return device.type == "cuda" and model != "linear"


def recording_blocker(
    device: torch.device, oracle: str, workers: int, dask_address: str | None, world_size: int
) -> str | None:
    """Why the training step cannot be recorded as a CUDA graph, or ``None`` when it can.

    A recording holds device work only: it needs a CUDA device, device-native oracles solving in this
    process (no solver pool, no Dask cluster: they need the host), and one training process (the
    gradient all-reduce of ``DistributedDataParallel`` cannot be recorded).
    """
    if device.type != "cuda":
        return f"it needs a CUDA device, got {device}"
    if workers > 0:
        return f"a solver pool solves on the host (--workers {workers})"
    if dask_address is not None:
        return "a Dask cluster solves on the host (--dask-address)"
    if oracle != "device":
        return "the oracles solve on the host (--oracle host)"
    if world_size > 1:
        return f"{world_size} training processes: DistributedDataParallel's all-reduce cannot be recorded"
    return None


def auto_compile(blocker: str | None) -> tuple[Compile, str]:
    """``--compile auto``: the recorded step (``graph``) where nothing rules it out (see
    `recording_blocker`), else eager steps; with the one-line reason. The recorded step was measured
    fastest on CUDA (H200, 30 × 30: 0.71 s per epoch of 10,000 maps against 0.73 eager with bfloat16 and
    channels-last, 1.48 eager in float32; 12 × 12: 6.7× the eager GPU step)."""
    if blocker is None:
        return Compile.GRAPH, "auto: the recorded step (CUDA, device-native oracles, one process)"
    return Compile.OFF, f"auto: eager steps, the recorded step is ruled out: {blocker}"


def require_recordable(mode: Compile, blocker: str | None) -> None:
    """Raise [`ConfigError`][imle_solvers.errors.ConfigError] (field ``compile``) when ``mode`` records
    the step and `recording_blocker` named a reason."""
    if mode.records and blocker is not None:
        raise ConfigError(f"{mode.value} records the training step as a CUDA graph, but {blocker}", "compile")


def _counts(config: TrainConfig, defaults: Mapping[str, Any]) -> tuple[int, int]:
    """``(n_train, n_test)``: as given, else the published files' counts (``--data``), else the
    problem's defaults; more than the files hold is refused."""
    if config.data is None:
        n_train = config.n_train if config.n_train is not None else defaults["n_train"]
        n_test = config.n_test if config.n_test is not None else defaults["n_test"]
        return int(n_train), int(n_test)
    from ..data.warcraft import inspect_warcraft

    counts = []
    try:
        for split, asked in (("train", config.n_train), ("test", config.n_test)):
            found = inspect_warcraft(config.data, config.size, split)  # headers only
            if asked is not None and found.count < asked:
                raise DataError(f"{found.path('maps')} holds {found.count} maps, {asked} are asked for")
            counts.append(found.count if asked is None else asked)
    except DataError as exc:  # the files are a setting of the command: one line, exit status 2
        raise ConfigError(str(exc), "data") from None
    return counts[0], counts[1]


def _schedule(config: TrainConfig, defaults: Mapping[str, Any]) -> Schedule:
    """Explicit fields, else the schedule's values, else the problem's defaults."""
    name = config.schedule or SCHEDULE_DEFAULTS.get(config.problem, "constant")
    epochs, batch_size, lr, drops = SCHEDULES[name]
    given = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "lr_drops": drops}

    def pick(field: str) -> Any:
        value = getattr(config, field)
        if value is None:
            value = given[field]
        return defaults[field] if value is None else value

    return Schedule(
        name=name,
        epochs=int(pick("epochs")),
        batch_size=int(pick("batch_size")),
        lr=float(pick("lr")),
        lr_drops=tuple(pick("lr_drops")),
    )


def resolve(config: TrainConfig) -> TrainPlan:
    """The [`TrainPlan`][imle_solvers.training.plan.TrainPlan] of ``config`` on this machine.

    Explicit settings win, then the schedule's, then the problem's defaults; ``auto`` settings follow
    the rules of this module. Checks what only the machine or the files can tell, before any work:
    ``--data`` files and their counts, a recorded step that cannot be recorded, several training
    processes without a row each. Warns ([`RuntimeWarning`]) when a batch is larger than the training
    set (each epoch is then one step).

    Raises
    ------
    ConfigError
        A setting that cannot work here (field named).
    """
    defaults = DEFAULTS[config.problem]
    world = planned_world_size()
    device = resolve_device(config.device, local_rank() if world > 1 else None)
    n_train, n_test = _counts(config, defaults)
    schedule = _schedule(config, defaults)
    check_batches(n_train, schedule.batch_size, world)  # before any process waits for another
    if schedule.batch_size > n_train:
        warnings.warn(
            f"the batch size {schedule.batch_size} is larger than the {n_train} training instances: "
            f"every epoch is one step on all of them",
            RuntimeWarning,
            stacklevel=3,
        )
    model = str(config.model if config.model is not None else defaults["model"])
    pool = config.workers > 0 or config.dask_address is not None
    oracle = config.oracle if config.oracle != "auto" else auto_oracle(config.problem, device, pool)
    blocker = recording_blocker(device, oracle, config.workers, config.dask_address, world)
    if config.compile == "auto":
        mode, reason = auto_compile(blocker)
    else:
        mode, reason = Compile(config.compile), "asked for"
        require_recordable(mode, blocker)
    amp = config.amp == "bf16" or (config.amp == "auto" and auto_amp(device, model, bf16_supported(device)))
    channels_last = config.channels_last == "on" or (
        config.channels_last == "auto" and auto_channels_last(device, model)
    )
    samples = int(config.samples if config.samples is not None else defaults["samples"])
    bb_loss = str(config.bb_loss if config.bb_loss is not None else defaults["bb_loss"])
    noise: NoiseDistribution = SumOfGamma(tau=config.tau) if config.noise == "sog" else Gumbel(config.tau)
    options = MethodOptions(
        samples=samples, noise=noise, lam=config.lam, bb_loss=bb_loss, dpo_samples=defaults["dpo_samples"]
    )
    record = {
        **config.as_dict(),
        "epochs": schedule.epochs,
        "batch_size": schedule.batch_size,
        "lr": schedule.lr,
        "schedule": schedule.name,
        "lr_drops": list(schedule.lr_drops),
        "n_train": n_train,
        "n_test": n_test,
        "samples": samples,
        "model": model,
        "bb_loss": bb_loss,
        "device": str(device),
        "oracle": oracle,
        "compile": mode.value,
        "amp": "bf16" if amp else "off",
        "channels_last": "on" if channels_last else "off",
        "compile_reason": reason,
    }
    return TrainPlan(
        problem=config.problem,
        methods=tuple(config.methods),
        seeds=tuple(config.seeds),
        model=model,
        data=DataPlan(
            n_train=n_train,
            n_test=n_test,
            deg=config.deg,
            noise_width=config.noise_width,
            size=config.size,
            folder=config.data,
            cache=config.cache,
            nodes=config.nodes,
            solve_ratio=config.solve_ratio,
        ),
        schedule=schedule,
        options=options,
        eval_batch=int(defaults["eval_batch"]),
        device=device,
        oracle=oracle,
        step=StepPlan(
            compile=mode,
            amp=amp,
            channels_last=channels_last,
            cudnn_benchmark=device.type == "cuda",
            reason=reason,
        ),
        workers=config.workers,
        dask_address=config.dask_address,
        world_size=world,
        threads=config.threads,
        out=config.out,
        show_progress=config.show_progress,
        dist_timeout=config.dist_timeout,
        record=record,
    )
