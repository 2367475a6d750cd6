"""The problems of ``imle-solvers train``: data, model and oracles for each ``--problem``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..adapters.clamp import ClampedCosts
from ..app.registry import Registry
from ..data.dataset import PTODataset
from ..errors import ConfigError, DataError
from ..oracle import BatchSolver, MapOracle, TorchOracle
from .models import ResNetStemCNN, TerrainCNN, linear_model

if TYPE_CHECKING:
    from .plan import TrainPlan

__all__ = [
    "DEFAULTS",
    "IMAGE_PROBLEMS",
    "MODELS",
    "PROBLEMS",
    "SCHEDULE_DEFAULTS",
    "Problem",
    "ProblemSpec",
    "make_problem",
]

MODELS = ("linear", "terrain-cnn", "resnet-stem")
"""The models: ``linear`` for the PyEPO problems, ``terrain-cnn`` and ``resnet-stem`` for the image
problems (`IMAGE_PROBLEMS`)."""

IMAGE_PROBLEMS = ("terrain", "warcraft")
"""The problems whose features are images (trained with a CNN)."""

_PYEPO = {
    "lr": 1e-2,
    "batch_size": 32,
    "epochs": 10,
    "samples": 10,
    "n_train": 1000,
    "n_test": 1000,
    "model": "linear",
    "bb_loss": "regret",
    "eval_batch": 1000,
    "dpo_samples": None,
    "native_on_cpu": True,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "shortest-path": _PYEPO | {"host_oracle": False},  # DAGShortestPath: torch on every setting
    "knapsack": dict(_PYEPO),
    "tsp": _PYEPO | {"native_on_cpu": False, "native_oracle": False},  # CP-SAT tours on every device
    "terrain": {
        "lr": 5e-4,
        "batch_size": 35,
        "epochs": 10,
        "samples": 1,
        "n_train": 10_000,
        "n_test": 1000,
        "model": "terrain-cnn",
        "eval_batch": 250,
        "bb_loss": "hamming",
        "dpo_samples": 10,
    },
    "warcraft": {
        "lr": 5e-4,
        "batch_size": 70,
        "epochs": 50,
        "samples": 1,
        "n_train": 10_000,
        "n_test": 1000,
        "model": "resnet-stem",
        "eval_batch": 250,
        "bb_loss": "hamming",
        "dpo_samples": 10,
    },
}
"""Problem → default settings: `TrainConfig` fields left ``None`` take these; ``eval_batch`` (test
instances per evaluation call), ``dpo_samples`` (S of ``dpo`` and ``pfyl`` where it differs from
``samples``), ``native_on_cpu`` (``--oracle auto`` picks the device-native oracle on the CPU too,
see [`auto_oracle`][imle_solvers.training.plan.auto_oracle]; absent: ``False``) and ``native_oracle``
(``False``: the problem has no device-native oracle, ``--oracle auto`` keeps the host one on every
device; absent: ``True``) and ``host_oracle`` (``False``: the problem has no solver-backed oracle, its
oracle is device-native whatever ``--oracle`` says, so a solver pool has nothing to solve; absent:
``True``) are not options.
``warcraft`` defaults to the paper's protocol (its ``--schedule`` is ``paper``, see
`SCHEDULE_DEFAULTS`)."""

SCHEDULE_DEFAULTS = {"warcraft": "paper"}
"""Problem → its ``--schedule`` when none is given (``constant`` for the others)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """Train / test data, a model factory and the oracles of training layers and of evaluation.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.

    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
    """

    train: PTODataset
    test: PTODataset
    model: Callable[[], nn.Module]
    train_oracle: MapOracle
    eval_oracle: MapOracle
    defaults: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProblemSpec:
    """What a problem factory is asked to build; each factory reads the fields its problem has.

    Attributes
    ----------
    n_train
        Training instances (the first ``n_train`` of one generated data set).
    n_test
        Test instances (the next ``n_test``).
    seed
        Data seed.
    deg
        Polynomial degree of the PyEPO cost model.
    noise_width
        Half-width ē of its multiplicative noise.
    num_features
        p, features of the PyEPO problems.
    grid
        Grid side of the shortest-path problem.
    size
        Terrain grid size K.
    model
        The model's name (``None``: the problem's default).
    device
        Where training runs; generated maps are made there.
    oracle
        ``"device"``, ``"host"`` or ``"auto"``.
    cache
        Keep generated data in the user cache folder.
    data
        The folder of the published Warcraft files (``warcraft``; ``None``: generated terrain maps).
    nodes
        Number of nodes of ``tsp``.
    solve_ratio
        ``tsp``: the share of training rows sent to the solver, the others answered by a solution cache.
    pool
        The run's solver pool (``None``: solve in this process), for solves while the problem is built.
    """

    n_train: int
    n_test: int
    seed: int
    deg: int = 1
    noise_width: float = 0.5
    num_features: int = 5
    grid: int = 5
    size: int = 12
    model: str | None = None
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    oracle: str = "auto"
    cache: bool = False
    data: str | None = None
    nodes: int = 20
    solve_ratio: float = 1.0
    pool: BatchSolver | None = None

    @property
    def native(self) -> bool:
        """Whether device-native oracles are asked for (``device``, or ``auto`` off the CPU)."""
        return self.oracle == "device" or (self.oracle == "auto" and self.device.type != "cpu")


def _linear(name: str, spec: ProblemSpec) -> None:
    model = DEFAULTS[name]["model"] if spec.model is None else spec.model
    if model != "linear":
        raise ValueError(f"problem {name!r} uses the linear model, got model {model!r}")


def shortest_path_problem(spec: ProblemSpec) -> Problem:
    """5×5 grid shortest path, linear model (PyEPO protocol); DAGShortestPath solves on every device."""
    from ..data.shortest_path import shortest_path

    _linear("shortest-path", spec)
    data = shortest_path(
        spec.n_train + spec.n_test,
        spec.num_features,
        (spec.grid, spec.grid),
        spec.deg,
        spec.noise_width,
        spec.seed,
    )
    train, test = data.split(spec.n_train)
    chosen = _choose(data.oracle, data.oracle, spec.native, spec.oracle)  # a TorchOracle already
    m, p = data.oracle.n_vars, spec.num_features
    return Problem(train, test, lambda: linear_model(p, m), chosen, chosen, DEFAULTS["shortest-path"])


def knapsack_problem(spec: ProblemSpec) -> Problem:
    """2-D knapsack with 32 items, linear model (PyEPO protocol); TorchKnapsack (CP-SAT: --oracle host)."""
    from ..data.knapsack import knapsack

    _linear("knapsack", spec)
    # TorchKnapsack (exact, fast on the CPU too) unless the host solver is asked for
    backend = "cpsat" if spec.oracle == "host" else "torch"
    data = knapsack(
        spec.n_train + spec.n_test,
        spec.num_features,
        deg=spec.deg,
        noise_width=spec.noise_width,
        seed=spec.seed,
        backend=backend,
    )
    host = data.oracle
    train, test = data.split(spec.n_train)
    chosen = _choose(host, host, spec.native, spec.oracle)  # TorchKnapsack unless the host is asked for
    m, p = data.oracle.n_vars, spec.num_features
    return Problem(train, test, lambda: linear_model(p, m), chosen, chosen, DEFAULTS["knapsack"])


def terrain_problem(spec: ProblemSpec) -> Problem:
    """K×K terrain maps (Warcraft stand-in), CNN, 8-neighbour vertex-weighted paths."""
    model = _image_model("terrain", spec)
    train, test = _generated_maps(spec)
    return _image_problem("terrain", train, test, model, spec)


def warcraft_problem(spec: ProblemSpec) -> Problem:
    """Warcraft K×K, the paper's protocol: the published maps (--data) or generated ones, ResNet18 stem.

    With ``spec.data`` the first ``n_train`` maps of the published training split and the first
    ``n_test`` of its test split ([`warcraft_maps`][imle_solvers.data.warcraft.warcraft_maps]; the seed
    then fixes the model and the noise only); without it, generated terrain maps as for ``terrain``.
    The perturbation's κ is the mean number of cells of the training paths (the paper's sec. 6:
    "the empirical mean of the path lengths"), read by ``SumOfGamma`` from the oracles'
    ``expected_nonzeros``.
    """
    model = _image_model("warcraft", spec)
    if spec.data is None:
        train, test = _generated_maps(spec)
    else:
        from ..data.warcraft import warcraft_maps

        try:
            train = warcraft_maps(spec.data, spec.size, "train", spec.n_train)
            test = warcraft_maps(spec.data, spec.size, "test", spec.n_test)
        except DataError as exc:  # the files are a setting of the command: one line, exit status 2
            raise ConfigError(str(exc), "data") from None
    kappa = float(train.solutions.sum(-1).mean()) if len(train) else None  # mean path length
    return _image_problem("warcraft", train, test, model, spec, kappa)


def _generated_maps(spec: ProblemSpec) -> tuple[PTODataset, PTODataset]:
    """The ``n_train`` training and ``n_test`` test maps of `terrain_maps` (uint8 images, on the device)."""
    from ..data.terrain import terrain_maps

    data = terrain_maps(
        spec.n_train + spec.n_test,
        size=spec.size,
        seed=spec.seed,
        image_dtype=torch.uint8,
        cache=spec.cache,
        device=spec.device,
    )
    return data.split(spec.n_train)


def _image_model(name: str, spec: ProblemSpec) -> str:
    model = DEFAULTS[name]["model"] if spec.model is None else spec.model
    if model not in ("terrain-cnn", "resnet-stem"):
        raise ValueError(f"problem {name!r} uses terrain-cnn or resnet-stem, got model {model!r}")
    return str(model)


def _image_problem(
    name: str, train: PTODataset, test: PTODataset, model: str, spec: ProblemSpec, kappa: float | None = None
) -> Problem:
    """The grid-path oracles (8 neighbours; costs clamped at 0 in training) and the CNN of a problem."""
    size = spec.size
    host = train.oracle
    grid_native = _torch_grid(size) if spec.native else None
    if kappa is not None:  # SumOfGamma's κ, as every oracle reports it
        for oracle in (host, grid_native):
            if oracle is not None:
                oracle.expected_nonzeros = kappa
    clamped_native = ClampedCosts(grid_native, 0.0) if grid_native is not None else None
    train_oracle = _choose(ClampedCosts(host, 0.0), clamped_native, spec.native, spec.oracle)
    eval_oracle = _choose(host, grid_native, spec.native, spec.oracle)
    factory: Callable[[], nn.Module] = (
        (lambda: TerrainCNN(size)) if model == "terrain-cnn" else (lambda: ResNetStemCNN(size))
    )
    return Problem(train, test, factory, train_oracle, eval_oracle, DEFAULTS[name])


def tsp_problem(spec: ProblemSpec) -> Problem:
    """Travelling salesperson on --nodes nodes (PyEPO's TSP data), linear model, CP-SAT tours."""
    from .tsp import tsp_parts  # data and oracles in their own module

    _linear("tsp", spec)
    train, test, train_oracle, eval_oracle = tsp_parts(spec)
    m, p = eval_oracle.n_vars, spec.num_features
    return Problem(train, test, lambda: linear_model(p, m), train_oracle, eval_oracle, DEFAULTS["tsp"])


PROBLEMS: Registry[Callable[[ProblemSpec], Problem]] = Registry(
    "problem",
    {
        "shortest-path": shortest_path_problem,
        "knapsack": knapsack_problem,
        "terrain": terrain_problem,
        "warcraft": warcraft_problem,
        "tsp": tsp_problem,
    },
)
"""Problem name → factory ``(ProblemSpec) -> Problem``; a new problem is a factory, an entry here and its
`DEFAULTS`."""


def make_problem(plan: TrainPlan, seed: int, *, pool: BatchSolver | None = None) -> Problem:
    """The problem of ``plan`` with data seed ``seed``: ``PROBLEMS[plan.problem](ProblemSpec(...))``.

    The train and test sets are the first ``plan.data.n_train`` and the next ``plan.data.n_test``
    instances of one generated data set (same hidden ``B`` / same terrain costs), or the published
    Warcraft files' (``plan.data.folder``). ``plan.oracle`` picks the oracles of training and
    evaluation: ``"device"`` the device-native ones (terrain: ``adapters.TorchGridShortestPath``;
    knapsack: ``adapters.TorchKnapsack``; ``ValueError`` where none is installed), ``"host"`` the
    solver-backed ones (SciPy Dijkstra, CP-SAT). Generated terrain maps are made on ``plan.device``,
    stored as ``uint8`` images and kept in the user cache with ``plan.data.cache``. ``plan.data.nodes``
    and ``plan.data.solve_ratio`` set the ``tsp`` problem; ``pool`` (the run's
    [`SolverPool`][imle_solvers.pool.SolverPool], as [`train_model`][imle_solvers.training.train_model]
    takes it) solves what building the problem needs solved (``tsp``'s optimal tours).
    """
    if plan.problem not in PROBLEMS:
        raise ValueError(f"unknown problem {plan.problem!r}; choose from {', '.join(PROBLEMS)}")
    spec = ProblemSpec(
        n_train=plan.data.n_train,
        n_test=plan.data.n_test,
        seed=seed,
        deg=plan.data.deg,
        noise_width=plan.data.noise_width,
        size=plan.data.size,
        model=plan.model,
        device=plan.device,
        oracle=plan.oracle,
        cache=plan.data.cache,
        data=plan.data.folder,
        nodes=plan.data.nodes,
        solve_ratio=plan.data.solve_ratio,
        pool=pool,
    )
    return PROBLEMS[plan.problem](spec)


def _choose(host: MapOracle, native: MapOracle | None, want_native: bool, choice: str) -> MapOracle:
    if not want_native:
        return host
    if native is None or not isinstance(native, TorchOracle):
        if choice == "device":
            raise ValueError(f"no device-native oracle is installed for {host!r} (use --oracle host or auto)")
        return host
    return native


def _torch_grid(size: int) -> TorchOracle | None:
    """``adapters.TorchGridShortestPath(K, K, neighbourhood=8)``, or ``None`` where it is not installed."""
    try:
        from ..adapters import TorchGridShortestPath
    except (ImportError, AttributeError):
        return None
    return TorchGridShortestPath(size, size, neighbourhood=8)
