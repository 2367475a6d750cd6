"""``imle-solvers bench pto-methods``: every training method of PyEPO 2.2.7 against ours, side by side.

One process, one torch thread, the same generated data for both libraries on each problem (shortest path
5 × 5, knapsack of PyEPO's data, TSP), the same ``nn.Linear`` model from the same seed, Adam lr 0.01,
batch 32 (8 on TSP), the same epochs and seeds; every trained model is evaluated by the same exact oracle.
PyEPO's methods run through ``pyepo.func`` with the options of `PAIRS` (its defaults, except λ = 20 for DBB as
``imle-solvers train`` uses and a Frank-Wolfe cap of `FW_MAX_ITER` steps for both libraries). On shortest
path PyEPO trains on its own OR-Tools model. On knapsack and TSP PyEPO trains on an ``optModel`` that calls
our oracle (``TorchKnapsack``, CP-SAT's ``TravellingSalesperson``), so both learn with the same exact solver
and the regrets compare methods; its epoch is also timed on its own free model (OR-Tools ``knapsackModel``;
``tspGGModel`` on Pyomo + HiGHS) over the first instances and projected to a whole epoch: the speed a
PyEPO user without Gurobi gets, and the time our speed-up is measured against there.

PyEPO's layers (DBB, NID, I-MLE, AI-MLE) are trained on the summed true cost of their decisions, as ours
are; DPO, DPOMul and RFWO on the squared distance to the optimal state; the losses on their own terms.

Rows: problem, method, test regret mean ± std over seeds for each library, whether the two means lie
within one seed-spread (the larger std), seconds per epoch (median over seeds) and our time over PyEPO's.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from ..oracle import MapOracle
    from ..training.plan import TrainPlan
    from ..training.problems import Problem

__all__ = ["FULL", "FW_MAX_ITER", "PAIRS", "QUICK", "Protocol", "run", "summarize"]

FW_MAX_ITER = 20
"""Frank-Wolfe steps per call of RFWO and RFY, in both libraries (PyEPO's default of 10,000 runs each call
to a gap of 1e-6: minutes per epoch)."""

PAIRS: list[tuple[str, str]] = [
    ("spo+", "SPOPlus"),
    ("pg", "PG"),
    ("dbb", "DBB"),
    ("nid", "NID"),
    ("dpo", "DPO"),
    ("dpo-mul", "DPOMul"),
    ("pfyl", "PFY"),
    ("pfyl-mul", "PFYMul"),
    ("imle-pid", "IMLE"),
    ("aimle", "AIMLE"),
    ("rfwo", "RFWO"),
    ("rfy", "RFY"),
    ("nce", "NCE"),
    ("cmap", "CMAP"),
    ("cave", "CaVE"),
    ("ltr-point", "ptLTR"),
    ("ltr-pair", "prLTR"),
    ("ltr-list", "lsLTR"),
    ("two-stage", "two-stage"),
]
"""Our method name → PyEPO's ``pyepo.func`` name, in table order."""


@dataclasses.dataclass(frozen=True)
class Protocol:
    """The sizes of one run, per problem."""

    problems: tuple[tuple[str, int, int, int, int], ...]
    """``(problem, n_train, n_test, epochs, batch_size)``."""
    seeds: tuple[int, ...]
    nodes: int = 6
    deg: int = 4
    noise_width: float = 0.5
    own_model_instances: int = 2
    """Where PyEPO trains on our oracle (knapsack, TSP), its epoch on its own model is timed on this many
    instances and projected to a whole epoch."""


FULL = Protocol(
    problems=(
        ("shortest-path", 200, 200, 2, 32),
        ("knapsack", 100, 100, 2, 32),
        ("tsp", 24, 40, 2, 8),
    ),
    seeds=(0, 1, 2),
)
"""The documented run."""
QUICK = Protocol(
    problems=(("shortest-path", 32, 16, 1, 32), ("knapsack", 32, 16, 1, 32), ("tsp", 8, 8, 1, 8)), seeds=(0,)
)
"""A smoke run of the same code."""


def _pyepo() -> Any:
    try:
        import pyepo
        import pyepo.func
    except ImportError:
        return None
    return pyepo


def _oracle_model(pyepo: Any, oracle: MapOracle) -> Any:
    """A PyEPO ``optModel`` whose solves are ``oracle``'s (PyEPO's methods on our solver)."""
    from pyepo import EPO
    from pyepo.model.opt import optModel

    class OracleModel(optModel):
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.modelSense = EPO.MINIMIZE if inner.sense == "min" else EPO.MAXIMIZE
            super().__init__()

        def _getModel(self) -> tuple[Any, list[int]]:
            return None, list(range(self.inner.n_vars))

        def setObj(self, c: Any) -> None:
            self.c = np.asarray(c, dtype=np.float64)

        def solve(self) -> tuple[np.ndarray, float]:
            z = self.inner.solve(self.c)
            return z, float(self.c @ z)

    return OracleModel(oracle)


def _pyepo_model(pyepo: Any, problem: str, data: Any, nodes: int) -> Any:
    """PyEPO's own model of ``problem`` (OR-Tools; Pyomo + HiGHS for TSP)."""
    if problem == "shortest-path":
        from pyepo.model.ort import shortestPathModel

        return shortestPathModel(grid=(5, 5))
    if problem == "knapsack":
        from pyepo.model.ort import knapsackModel

        info = data.info
        return knapsackModel(np.asarray(info["item_weights"]), np.asarray(info["capacity"]))
    from pyepo.model.omo import tspGGModel

    return tspGGModel(nodes, solver="appsi_highs")


def _pyepo_loss(
    pyepo: Any, name: str, optmodel: Any, oracle: MapOracle, train: Any, kappa: float
) -> Callable[..., torch.Tensor]:
    """``loss(x̂ = model(x), x, c, w, z, normals)`` of PyEPO's method ``name``."""
    func = pyepo.func
    sign = 1.0 if oracle.sense == "min" else -1.0

    def decision(sol: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return sign * (sol * c).sum()  # summed true cost of the decisions (as our layer methods)

    def squared(sol: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return ((sol - w) ** 2).sum(-1).mean()

    if name in ("NCE", "CMAP", "ptLTR", "prLTR", "lsLTR"):
        from pyepo.data.dataset import optDataset

        seeds = optDataset.__new__(optDataset)  # the training set's optimal states (not solved again)
        seeds.sols = train.solutions.clone()
        module = getattr(func, name)(optmodel, dataset=seeds)
        against = 2 if name in ("NCE", "CMAP") else 1
        return lambda cp, c, w, z, a: module(cp, (c, w)[against - 1])
    if name == "SPOPlus":
        spo = func.SPOPlus(optmodel)
        return lambda cp, c, w, z, a: spo(cp, c, w, z)
    if name == "PG":
        pg = func.PG(optmodel)
        return lambda cp, c, w, z, a: pg(cp, c)
    if name == "CaVE":
        cave = func.CaVE(optmodel)
        return lambda cp, c, w, z, a: cave(cp, a)
    if name in ("PFY", "PFYMul", "RFY"):
        kwargs = {"max_iter": FW_MAX_ITER} if name == "RFY" else {}
        fy = getattr(func, name)(optmodel, **kwargs)
        return lambda cp, c, w, z, a: fy(cp, w)
    if name == "two-stage":
        mse = torch.nn.MSELoss()
        return lambda cp, c, w, z, a: mse(cp, c)
    if name in ("DPO", "DPOMul", "RFWO"):
        layer = getattr(func, name)(optmodel, **({"max_iter": FW_MAX_ITER} if name == "RFWO" else {}))
        return lambda cp, c, w, z, a: squared(layer(cp), w)
    from pyepo.func.utils import sumGammaDistribution

    layers = {
        "DBB": lambda: func.DBB(optmodel, lambd=20),
        "NID": lambda: func.NID(optmodel),
        "IMLE": lambda: func.IMLE(optmodel, distribution=sumGammaDistribution(kappa)),
        "AIMLE": lambda: func.AIMLE(optmodel, distribution=sumGammaDistribution(kappa)),
    }
    layer = layers[name]()
    return lambda cp, c, w, z, a: decision(layer(cp), c)


def _pyepo_train(
    pyepo: Any,
    name: str,
    optmodel: Any,
    problem: Problem,
    seed: int,
    batch_size: int,
    epochs: int,
    limit: int | None = None,
) -> tuple[torch.nn.Module, float]:
    """Train PyEPO's ``name`` → (model, median s per epoch); ``limit``: one step on that many instances."""
    from torch.utils.data import DataLoader, TensorDataset

    from ..adapters.binding import binding_constraints_batch

    train, oracle = problem.train, problem.eval_oracle
    n = len(train) if limit is None else limit
    normals = (
        binding_constraints_batch(oracle, train.solutions[:n]) if name == "CaVE" else torch.zeros(n, 1, 1)
    )  # PyEPO's tight_ctrs, zero-padded as its collate does
    kappa = float(oracle.expected_nonzeros or 1.0)
    loss_of = _pyepo_loss(pyepo, name, optmodel, oracle, train, kappa)
    data = TensorDataset(
        train.features[:n], train.costs[:n], train.solutions[:n], train.objectives[:n, None], normals
    )
    torch.manual_seed(seed)
    model = problem.model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed)
    times = []
    for _ in range(1 if limit is not None else epochs):
        start = time.perf_counter()
        for x, c, w, z, a in DataLoader(data, batch_size=batch_size, shuffle=True, generator=generator):
            loss = loss_of(model(x), c, w, z, a)
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - start)
    return model, statistics.median(times)


def _plan(
    proto: Protocol, problem: str, n_train: int, n_test: int, epochs: int, batch_size: int
) -> TrainPlan:
    from ..training import TrainConfig

    extra: dict[str, Any] = {"nodes": proto.nodes} if problem == "tsp" else {}
    config = TrainConfig(
        problem=problem,
        n_train=n_train,
        n_test=n_test,
        epochs=epochs,
        batch_size=batch_size,
        deg=proto.deg,
        noise_width=proto.noise_width,
        show_progress=False,
        bb_loss="regret",
        **extra,
    )
    plan = config.plan()
    return dataclasses.replace(plan, options=dataclasses.replace(plan.options, fw_max_iter=FW_MAX_ITER))


def summarize(
    regrets: dict[str, list[float]], seconds: dict[str, list[float]], ours: str, theirs: str
) -> dict[str, Any]:
    """One row's numbers from the per-seed regrets and epoch times of ``ours`` and ``theirs``.

    ``within_spread``: the two mean regrets differ by at most the larger of the two standard deviations
    (over seeds, ``ddof=1``; 0 with one seed). ``time_ratio``: our median epoch time over PyEPO's.
    """
    row: dict[str, Any] = {}
    means = {}
    spread = 0.0
    for label, key in (("ours", ours), ("pyepo", theirs)):
        values = regrets.get(key, [])
        if values:
            means[label] = float(np.mean(values))
            std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
            spread = max(spread, std)
            row[f"regret_{label}"] = means[label]
            row[f"regret_{label}_std"] = std
    if len(means) == 2:
        row["within_spread"] = abs(means["ours"] - means["pyepo"]) <= spread
    if seconds.get(ours) and seconds.get(theirs):
        row["s_per_epoch_ours"] = statistics.median(seconds[ours])
        row["s_per_epoch_pyepo"] = statistics.median(seconds[theirs])
        row["time_ratio"] = row["s_per_epoch_ours"] / row["s_per_epoch_pyepo"]
    return row


def run(quick: bool = False, protocol: Protocol | None = None) -> list[dict[str, Any]]:
    """The side-by-side rows: one per problem and method (see the module)."""
    from ..training import evaluate, make_problem, train_model

    proto = protocol or (QUICK if quick else FULL)
    torch.set_num_threads(1)
    pyepo = _pyepo()
    rows: list[dict[str, Any]] = []
    for problem_name, n_train, n_test, epochs, batch_size in proto.problems:
        plan = _plan(proto, problem_name, n_train, n_test, epochs, batch_size)
        regrets: dict[str, list[float]] = {}
        seconds: dict[str, list[float]] = {}
        projected: dict[str, float] = {}
        own = problem_name == "shortest-path"  # PyEPO trains on its own model (fast enough to train on)
        for seed in proto.seeds:
            problem = make_problem(plan, seed)
            optmodel = None
            if pyepo is not None:
                optmodel = (
                    _pyepo_model(pyepo, problem_name, problem.train, proto.nodes)
                    if own
                    else _oracle_model(pyepo, problem.eval_oracle)
                )
            if seed == proto.seeds[0]:  # warm-up, not timed: first calls pay for imports and caches
                small = dataclasses.replace(problem, train=problem.train.split(4)[0])
                for ours, theirs in PAIRS:
                    train_model(
                        dataclasses.replace(plan, schedule=dataclasses.replace(plan.schedule, epochs=1)),
                        small,
                        ours,
                        seed,
                    )
                    if optmodel is not None:
                        _pyepo_train(pyepo, theirs, optmodel, problem, seed, batch_size, 1, limit=4)
            for ours, theirs in PAIRS:
                out = train_model(plan, problem, ours, seed)  # torch.manual_seed(seed), then the model
                regrets.setdefault(ours, []).append(out.regret)
                seconds.setdefault(ours, []).append(out.epoch_time)
                if optmodel is None:
                    continue
                model, per_epoch = _pyepo_train(pyepo, theirs, optmodel, problem, seed, batch_size, epochs)
                key = f"pyepo:{theirs}"
                regret = evaluate(model, problem.test, problem.eval_oracle)["regret"]
                regrets.setdefault(key, []).append(regret)
                seconds.setdefault(key, []).append(per_epoch)
                if not own and seed == proto.seeds[0]:  # PyEPO's own model, projected to an epoch
                    theirs_model = _pyepo_model(pyepo, problem_name, problem.train, proto.nodes)
                    theirs_model.setObj(problem.train.costs[0].numpy())
                    theirs_model.solve()  # not timed: a new model's first solve builds its solver interface
                    k = min(proto.own_model_instances, n_train)
                    _, part = _pyepo_train(pyepo, theirs, theirs_model, problem, seed, batch_size, 1, limit=k)
                    projected[theirs] = part * n_train / k
        for ours, theirs in PAIRS:
            row: dict[str, Any] = {"problem": problem_name, "method": ours, "pyepo": theirs}
            row.update(summarize(regrets, seconds, ours, f"pyepo:{theirs}"))
            if theirs in projected:
                row["s_per_epoch_pyepo_own_model"] = projected[theirs]
                row["speed-up vs PyEPO's own model"] = projected[theirs] / statistics.median(seconds[ours])
            rows.append(row)
    return rows
