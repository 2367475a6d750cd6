"""`TrainConfig`: every setting of ``imle-solvers train`` in one frozen, keyword-only record.

Each field declares its type, default, choices, constraint and help once; the command's parser is
generated from them (see [`CommandConfig`][imle_solvers.app.config.CommandConfig]) and the same
declarations check a configuration built in Python ([`ConfigError`][imle_solvers.errors.ConfigError]).
``None`` means "the problem's default" (or the schedule's) and ``auto`` "what was measured fastest
here"; [`TrainConfig.plan`][imle_solvers.training.TrainConfig.plan] resolves both once, into the
[`TrainPlan`][imle_solvers.training.plan.TrainPlan] a run uses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from .._checks import in_range
from ..app.config import (
    RunSettings,
    count,
    count_at_least,
    non_negative_count,
    option,
    path_text,
    positive_number,
    shown,
)
from ..data.dataset import DEG_MAX
from ..errors import ConfigError
from ..pool._address import scheduler_address
from .distributed import DIST_TIMEOUT_RANGE
from .methods import METHODS
from .plan import SCHEDULES, TrainPlan, resolve
from .problems import DEFAULTS, IMAGE_PROBLEMS, MODELS, PROBLEMS, SCHEDULE_DEFAULTS

__all__ = [
    "AMP",
    "CHANNELS_LAST",
    "COMPILE",
    "ORACLES",
    "SCHEDULES",
    "TrainConfig",
]

ORACLES = ("auto", "host", "device")

APPLIES_TO: dict[str, tuple[str, ...]] = {
    "nodes": ("tsp",),
    "solve_ratio": ("tsp",),
    "data": ("warcraft",),
    "size": IMAGE_PROBLEMS,
    "deg": ("shortest-path", "knapsack", "tsp"),
    "noise_width": ("shortest-path", "knapsack", "tsp"),
}
"""Setting → the problems that use it: given (other than its default) for another problem, it is refused
with a usage error naming it (a new problem or setting is an entry here)."""
NOISES = ("sog", "gumbel")
BB_LOSSES = ("regret", "hamming")

COMPILE = ("auto", "off", "graph", "model", "model+graph")
"""``--compile``: ``graph`` records the whole training step (batch gather, model, noise, the layer's
forward and backward solves, Adam) once as a CUDA graph and replays it; ``model`` compiles the model with
``torch.compile`` (Inductor); ``model+graph`` both; ``off`` runs every operation eagerly. ``auto``: ``graph``
on CUDA, eager steps where recording is ruled out (see
[`auto_compile`][imle_solvers.training.plan.auto_compile])."""

AMP = ("auto", "bf16", "off")
"""``--amp``: ``bf16`` runs the model under bfloat16 autocast (the costs it predicts, the layers and the
solvers stay float32); ``auto``: ``bf16`` for the CNNs on a CUDA device that supports it, ``off``
otherwise."""

CHANNELS_LAST = ("auto", "on", "off")
"""``--channels-last``: the CNN's weights and the images in channels-last memory format; ``auto``: ``on``
for the CNNs on CUDA, ``off`` otherwise."""


def cost_degree(value: int) -> int:
    """The constraint of ``deg``: a count of at most [`DEG_MAX`][imle_solvers.data.dataset.DEG_MAX]
    (the costs of the PyEPO cost model must fit the float32 data)."""
    deg = count(value)
    if deg > DEG_MAX:
        raise ValueError(f"must be at most {DEG_MAX} (the cost model's costs must fit float32), got {deg}")
    return deg


def tour_nodes(value: int) -> int:
    """The constraint of ``nodes``: an integer in ``[3, NODES_MAX]`` (see
    [`NODES_MAX`][imle_solvers.adapters.graphs.tsp.NODES_MAX]: the largest tour the oracles build)."""
    from ..adapters.graphs.tsp import NODES_MAX

    nodes = count_at_least(3)(value)
    if nodes > NODES_MAX:
        raise ValueError(f"must be at most {NODES_MAX} (the largest tour an oracle builds), got {nodes}")
    return nodes


def _dist_timeout(value: float) -> float:
    """The constraint of ``dist_timeout``: seconds in `DIST_TIMEOUT_RANGE`."""
    low, high = DIST_TIMEOUT_RANGE
    if not low <= value <= high:  # nan too
        raise ValueError(f"must be in [{low:g}, {high:g}] seconds (a second to a week), got {shown(value)}")
    return float(value)


def _per_problem(field: str, schedule_index: int | None = None) -> str:
    """The help's statement of a default that depends on the problem (and on the schedule)."""
    groups: dict[str, list[str]] = {}
    for problem, defaults in DEFAULTS.items():
        groups.setdefault(_text(defaults[field]), []).append(problem)
    text = "; ".join(value if len(groups) == 1 else f"{'/'.join(p)} {value}" for value, p in groups.items())
    if schedule_index is not None:
        text += f"; {_text(SCHEDULES['paper'][schedule_index])} with --schedule paper"
    return f"the problem's: {text}"


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(RunSettings):
    """Settings of one ``imle-solvers train`` invocation; `run` takes it.

    Fields left ``None`` take the problem's default (`DEFAULTS` of ``problems.py``); a schedule's values
    override those defaults, explicit fields override both; ``auto`` settings take what was measured
    fastest on the device. [`plan`][imle_solvers.training.TrainConfig.plan] resolves them once into the
    [`TrainPlan`][imle_solvers.training.plan.TrainPlan] a run uses. Every field is honoured by
    [`run`][imle_solvers.training.run] from Python as by the command: ``out`` is written, ``threads`` is
    applied (and restored afterwards).

    Attributes
    ----------
    problem
        ``shortest-path``, ``knapsack``, ``tsp``, ``terrain`` or ``warcraft``.
    methods
        Method names (keys of [`METHODS`][imle_solvers.training.METHODS]); ``("all",)`` for every method.
    seeds
        One run per (method, seed); a seed fixes the data and the initial model.
    epochs
        Passes over the training set.
    batch_size
        Instances per step.
    lr
        Adam's learning rate.
    schedule
        ``constant`` or ``paper`` (50 epochs, batch 70, lr 5e-4, lr ÷ 10 after epochs 30 and 40);
        ``None``: the problem's (``paper`` for ``warcraft``, ``constant`` otherwise).
    lr_drops
        Epochs after which the learning rate is divided by 10 (default: the schedule's).
    n_train
        Training instances (with ``data``: default all the maps of the training files).
    n_test
        Test instances (with ``data``: default all the maps of the test files).
    deg
        Polynomial degree of the cost model of the PyEPO problems, at most
        [`DEG_MAX`][imle_solvers.data.dataset.DEG_MAX] (the costs must fit float32).
    noise_width
        Half-width ē of their multiplicative noise.
    samples
        S of the perturbation methods.
    size
        Grid size K of ``terrain`` and ``warcraft``.
    nodes
        Number of nodes of ``tsp`` (PyEPO's default 20).
    solve_ratio
        ``tsp``: the share of training rows solved by the solver; the others are answered from a
        [`SolutionCache`][imle_solvers.SolutionCache] of the tours found so far (PyEPO's ``solve_ratio``).
    data
        ``warcraft``: the folder of the published files, ``DIR`` or ``DIR/KxK`` (see
        [`warcraft_maps`][imle_solvers.data.warcraft.warcraft_maps]); ``None``: generated terrain maps.
        The training and test splits are read; the validation split is not used (the protocol trains a
        fixed number of epochs and reports the last one, as the paper does: nothing is selected on it).
    model
        ``linear`` (shortest path, knapsack), ``terrain-cnn`` or ``resnet-stem`` (terrain, warcraft).
    noise
        I-MLE perturbation: ``sog`` (SumOfGamma, κ from the oracle) or ``gumbel``.
    tau
        Temperature τ of that noise.
    lam
        λ of the PID target of ``imle-pid`` (eq. 8).
    bb_loss
        The loss behind ``dbb``: ``regret`` or ``hamming``.
    workers
        Solver pool processes for host oracles (0: solve in the training process); under ``torchrun``,
        per training process.
    dask_address
        Scheduler address of a Dask cluster (``tcp://host:8786``) whose workers solve the host oracles'
        batches instead (every training process sends its batches there); TLS and other security
        settings come from Dask's configuration.
    threads
        torch CPU threads during the run (the previous setting is restored afterwards).
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available).
    oracle
        ``device`` (device-native oracles), ``host`` (the solver-backed ones) or ``auto`` (device-native
        on a GPU, host on the CPU).
    compile
        How the training step runs (`COMPILE`): ``off``, ``graph`` (one CUDA graph per step), ``model``
        (``torch.compile``), ``model+graph`` or ``auto`` (``graph`` on CUDA unless the step cannot be
        recorded: host oracles, a solver pool or Dask cluster, several training processes; then ``off``,
        and the run says why).
    amp
        ``bf16`` autocast of the model, ``off`` or ``auto`` (`AMP`).
    channels_last
        Channels-last memory format of the CNN and the images: ``on``, ``off`` or ``auto``
        (`CHANNELS_LAST`).
    cache
        Keep generated terrain maps in the user cache folder (see `cache_dir`).
    out
        Folder for ``results.json``, ``results.md``, ``curves.png`` and one ``runs/<method>-seed<seed>.json``
        per run, each written as it finishes (``None``: nothing is written).
    show_progress
        Progress bars and a line per finished run.
    dist_timeout
        Under ``torchrun``: seconds a training process waits for the others in one collective before it
        fails (a process that stops answering cannot hang the others), in
        [`DIST_TIMEOUT_RANGE`][imle_solvers.training.distributed.DIST_TIMEOUT_RANGE]: a second to a week.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.

    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.

    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, sec. 6 and appendix,
    <https://arxiv.org/abs/2106.01798>.
    """

    command: ClassVar[str] = "train"
    description: ClassVar[str] = """\
Predict-then-optimize training and a head-to-head comparison of methods.

A model predicts the weights of an optimisation problem from features and is trained, by one of
the methods, on the quality of the decisions it leads to. Reported: the normalised test regret
(PyEPO's metric) after every epoch, the share of test instances decided optimally, and the seconds
per training epoch."""
    epilog: ClassVar[str] = """\
examples:
  imle-solvers train --problem shortest-path --methods imle-mumu spo+ two-stage --deg 4 \\
      --seeds 0 1 2 --out runs/sp
  imle-solvers train --problem warcraft --size 30 --methods imle-mumu --device cuda \\
      --out runs/warcraft30                   # the paper's protocol, generated maps
  imle-solvers train --problem warcraft --data DIR --size 30 --methods imle-mumu dbb \\
      --device cuda --out runs/warcraft30     # the published maps, in DIR or DIR/30x30"""

    problem: str = option(
        "shortest-path", "the optimisation problem (listed below)", choices=lambda: tuple(PROBLEMS)
    )
    methods: tuple[str, ...] = option(
        ("imle-mumu", "spo+", "two-stage"),
        "one or more method names (listed below), or all",
        flags=("--methods", "--method"),
        choices=lambda: (*METHODS, "all"),
        metavar="NAME",
    )
    epochs: int | None = option(
        None, "passes over the training set", check=count, default_text=lambda: _per_problem("epochs", 0)
    )
    batch_size: int | None = option(
        None, "instances per step", check=count, default_text=lambda: _per_problem("batch_size", 1)
    )
    lr: float | None = option(
        None,
        "Adam learning rate",
        check=positive_number,
        default_text=lambda: _per_problem("lr", 2),
    )
    schedule: str | None = option(
        None,
        "paper: the Warcraft protocol, 50 epochs, batch 70, lr 5e-4 divided by 10 after epochs 30 and 40 "
        "(explicit options override it)",
        choices=tuple(SCHEDULES),
        default_text=lambda: (
            "the problem's: "
            + "; ".join(f"{p} {s}" for p, s in SCHEDULE_DEFAULTS.items())
            + "; constant otherwise"
        ),
    )
    lr_drops: tuple[int, ...] | None = option(
        None,
        "epochs after which the learning rate is divided by 10",
        check=count,
        metavar="EPOCH",
        default_text=lambda: f"the schedule's: none; {_text(SCHEDULES['paper'][3])} with --schedule paper",
    )
    n_train: int | None = option(
        None,
        "training instances",
        check=count,
        default_text=lambda: _per_problem("n_train") + "; with --data all the training maps",
    )
    n_test: int | None = option(
        None,
        "test instances",
        check=count,
        default_text=lambda: _per_problem("n_test") + "; with --data all the test maps",
    )
    deg: int = option(1, f"polynomial degree of the cost model (at most {DEG_MAX})", check=cost_degree)
    noise_width: float = option(
        0.5, "ē, the half-width of the multiplicative noise", check=lambda v: in_range("", v, 0, 1)
    )
    samples: int | None = option(
        None, "S of the perturbation methods", check=count, default_text=lambda: _per_problem("samples")
    )
    size: int = option(
        12,
        "grid size K of terrain and warcraft (the paper: 12, 18, 24, 30)",
        check=count_at_least(2),
    )
    nodes: int = option(20, "number of nodes of tsp (PyEPO's default; 3 to 1000)", check=tour_nodes)
    solve_ratio: float = option(
        1.0,
        "tsp: share of the training rows solved; the others are answered from a solution cache of the tours "
        "found so far (PyEPO's solve_ratio)",
        check=lambda v: in_range("", v, 0, 1, closed="(]"),
    )
    data: str | None = option(
        None,
        "warcraft: the folder of the published files {train,test}_{maps,shortest_paths,vertex_weights}.npy, "
        "DIR or DIR/KxK (the val files are not used)",
        metavar="DIR",
        check=path_text,
        default_text="none: generated terrain maps",
    )
    model: str | None = option(
        None,
        "linear (shortest-path, knapsack, tsp); terrain-cnn or resnet-stem (terrain, warcraft; resnet-stem "
        "is the paper's ResNet18 first block)",
        choices=MODELS,
        default_text=lambda: _per_problem("model"),
    )
    noise: str = option("sog", "I-MLE perturbation: SumOfGamma (κ from the oracle) or Gumbel", choices=NOISES)
    tau: float = option(1.0, "temperature τ of the I-MLE noise", check=positive_number)
    lam: float = option(10.0, "λ of the PID target of imle-pid (eq. 8)", check=positive_number)
    bb_loss: str | None = option(
        None, "loss behind the dbb layer", choices=BB_LOSSES, default_text=lambda: _per_problem("bb_loss")
    )
    workers: int = option(
        0, "solver pool processes (0: solve in the training process)", check=non_negative_count
    )
    dask_address: str | None = option(
        None,
        "solve on the workers of this Dask cluster instead (its scheduler address, e.g. tcp://host:8786)",
        check=scheduler_address,
        metavar="ADDRESS",
        default_text="none",
    )
    oracle: str = option(
        "auto",
        "device: device-native oracles; host: solver-backed ones; auto: device-native on a GPU",
        choices=ORACLES,
    )
    compile: str = option(
        "auto",
        "graph: the whole training step recorded once as a CUDA graph and replayed; model: torch.compile "
        "of the model; model+graph; off; auto: graph on CUDA where it can be recorded, else off",
        choices=COMPILE,
    )
    amp: str = option(
        "auto", "bf16: bfloat16 autocast of the model; auto: bf16 for the CNNs on CUDA, else off", choices=AMP
    )
    channels_last: str = option(
        "auto",
        "channels-last memory format of the CNN and the images; auto: on for the CNNs on CUDA",
        choices=CHANNELS_LAST,
    )
    cache: bool = option(
        True,
        "generate terrain maps afresh instead of keeping them in the user cache folder",
        flags=("--no-cache",),
    )
    dist_timeout: float = option(
        300.0,
        "under torchrun: seconds a training process waits for the others before it fails (1 to 604800: "
        "a second to a week)",
        check=_dist_timeout,
        metavar="SECONDS",
    )

    @classmethod
    def help_epilog(cls) -> str:
        width = max(len(name) for name in (*METHODS, *PROBLEMS))
        problems = "\n".join(f"  {name:<{width}}  {PROBLEMS.help(name)}" for name in PROBLEMS)
        methods = "\n".join(f"  {name:<{width}}  {METHODS.help(name)}" for name in METHODS)
        return f"problems:\n{problems}\n\nmethods:\n{methods}\n\n{cls.epilog}"

    def validate(self) -> None:
        if "all" in self.methods:
            if len(self.methods) > 1:
                raise ConfigError(
                    "must be 'all' alone or method names, got " + repr(list(self.methods)), "methods"
                )
            object.__setattr__(self, "methods", tuple(METHODS))
        if self.dask_address is not None and self.workers > 0:
            raise ConfigError("--workers and --dask-address exclude each other: choose one solver pool")
        image = self.problem in IMAGE_PROBLEMS
        if self.model is not None and (self.model == "linear") == image:
            fits = "terrain-cnn or resnet-stem" if image else "linear"
            raise ConfigError(f"model {self.model!r} does not fit problem {self.problem!r} (use {fits})")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, problems in APPLIES_TO.items():  # a setting given for a problem that has no use for it
            if getattr(self, name) != defaults[name] and self.problem not in problems:
                wanted = " or ".join(f"--problem {p}" for p in problems)
                raise ConfigError(f"needs {wanted}, got problem {self.problem!r}", name)
        if self.oracle == "device" and not DEFAULTS[self.problem].get("native_oracle", True):
            raise ConfigError(
                f"problem {self.problem!r} has no device-native oracle: use --oracle host or auto", "oracle"
            )
        pool = "workers" if self.workers > 0 else "dask_address" if self.dask_address is not None else None
        if pool is not None and not DEFAULTS[self.problem].get("host_oracle", True):
            raise ConfigError(
                f"problem {self.problem!r} solves on torch (no solver-backed oracle): a solver pool has "
                "nothing to solve",
                pool,
            )
        if pool is not None and self.oracle == "device":
            raise ConfigError(
                "a solver pool solves the host oracles, and --oracle device solves on the device: drop it "
                "or use --oracle host",
                pool,
            )
        if self.channels_last == "on" and not image and self.model in (None, "linear"):
            raise ConfigError(
                f"applies to the CNN models (terrain, warcraft), got problem {self.problem!r} (linear model)",
                "channels_last",
            )

    def preflight(self) -> None:
        """The device and the output folder (as every command), then the plan: the ``--data`` files
        (headers only), the counts, and whether the step can run as asked (see `plan`)."""
        super().preflight()
        self.plan()

    def plan(self) -> TrainPlan:
        """The run's settings as it runs them, resolved once (later calls return the same plan):
        [`resolve`][imle_solvers.training.plan.resolve].

        Raises [`ConfigError`][imle_solvers.errors.ConfigError] for a setting that cannot work on this
        machine or with these files (before any work).
        """
        cached: TrainPlan | None = self.__dict__.get("_plan")
        if cached is None:
            cached = resolve(self)
            object.__setattr__(self, "_plan", cached)
        return cached
