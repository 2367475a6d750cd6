"""``imle-solvers bench pto --problem tsp``: PyEPO's travelling salesperson, this library against PyEPO.

One run, one process, one torch thread, the same data for every method: PyEPO's TSP data
([`data.tsp`][imle_solvers.data.tsp.tsp], deg 4, noise half-width 0.5, p = 5) as ``imle-solvers train
--problem tsp`` makes it ([`make_problem`][imle_solvers.training.make_problem] of the protocol's
[`TrainPlan`][imle_solvers.training.plan.TrainPlan]), ``nn.Linear(5, m)``, Adam lr 0.01, for every seed of
the protocol (`FULL`: 8 nodes, 64 training and 48 test instances, batch 8, 8 epochs, seeds 0, 1, 2;
`QUICK`: 6 nodes, 16 and 16, batch 8, 1 epoch, seed 0):

* this library's I-MLE (``imle``, S = 1 and S = 10), SPO+ and two-stage, trained with
  [`train_model`][imle_solvers.training.train_model] on
  [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (CP-SAT, one worker);
* PyEPO's ``implicitMLE`` (S = 1 and 10, λ = 10, σ = 1, ``sumGammaDistribution(κ = N)``, L1 loss to the
  optimal tour), ``SPOPlus`` and two-stage (MSE) on PyEPO's ``tspGGModel`` of its Pyomo back end with
  HiGHS (``solver="appsi_highs"``: the TSP model PyEPO can run without Gurobi or COPT), ``processes=1``.
  PyEPO's SPO+ and two-stage train as long as ours; PyEPO's I-MLE costs 2·S solves of about 0.2 s per
  instance, so its epoch is timed on its first instances and projected to the whole epoch (its regret is
  not measured). Every trained model is evaluated by the same exact oracle (CP-SAT), so the regrets
  compare predictions, not solvers;
* our I-MLE (S = 10) epoch again, at PyEPO's batch size 32 (320 solves per call of the layer), serial, with
  a process pool of 1 and 2 workers and on a local Dask cluster of 2 worker processes
  (``dask.distributed.LocalCluster``).

Rows: seconds per epoch (the median over seeds), the speed-up over PyEPO's I-MLE at equal S (median, and the
lowest and highest over seeds), the test regret after the last epoch (mean and standard deviation over
seeds); the pool table gives each pool's speed-up over the serial epoch measured in the same run.
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
    from ..training.plan import TrainPlan
    from ..training.problems import Problem

__all__ = ["FULL", "PYEPO_MODEL", "QUICK", "Protocol", "run"]

PYEPO_MODEL = "tspGGModel, Pyomo + HiGHS (appsi_highs)"
"""PyEPO's TSP model in this benchmark."""


@dataclasses.dataclass(frozen=True)
class Protocol:
    """The sizes of one benchmark run."""

    nodes: int
    n_train: int
    n_test: int
    epochs: int
    seeds: tuple[int, ...]
    pyepo_instances: int
    """PyEPO's I-MLE epoch is timed on this many instances and projected to ``n_train``."""
    batch_size: int = 32
    deg: int = 4
    noise_width: float = 0.5


FULL = Protocol(nodes=8, n_train=64, n_test=48, epochs=8, seeds=(0, 1, 2), pyepo_instances=4, batch_size=8)
"""The documented run (its rows are in the docs)."""
QUICK = Protocol(nodes=6, n_train=16, n_test=16, epochs=1, seeds=(0,), pyepo_instances=4, batch_size=8)
"""A smoke run of the same code in about a minute."""

_OURS: list[tuple[str, str, int]] = [
    ("I-MLE, S=1", "imle", 1),
    ("I-MLE, S=10", "imle", 10),
    ("SPO+", "spo+", 1),
    ("two-stage", "two-stage", 1),
]


def _pyepo() -> Any:
    """PyEPO's modules, or ``None`` where PyEPO or Pyomo is not installed."""
    try:
        import pyepo
        import pyomo.environ  # noqa: F401 - PyEPO's Pyomo models need it
        from pyepo.func.utils import sumGammaDistribution
        from pyepo.model.omo import tspGGModel
    except ImportError:
        return None
    return pyepo, tspGGModel, sumGammaDistribution


def _pyepo_train(
    kind: str, epo: Any, proto: Protocol, train: Any, seed: int, samples: int = 10, limit: int | None = None
) -> tuple[torch.nn.Module, list[float]]:
    """Train PyEPO's ``kind`` (``imle``, ``spo+``, ``two-stage``) as in its examples → (model, s/epoch)."""
    pyepo, tsp_model, sum_gamma = epo
    from torch.utils.data import DataLoader, TensorDataset

    from ..training.models import linear_model

    optmodel = tsp_model(proto.nodes, solver="appsi_highs")
    features = train.features.shape[1]
    optmodel.setObj(train.costs[0].numpy())
    optmodel.solve()  # warm-up, not timed: Pyomo's first solve pays for its solver interface
    n = len(train) if limit is None else limit
    # PyEPO's optDataset holds (x, c, w*, z*): ours are the same optimal tours (both solvers are exact)
    data = TensorDataset(train.features[:n], train.costs[:n], train.solutions[:n], train.objectives[:n, None])
    torch.manual_seed(seed)
    model = linear_model(features, optmodel.num_cost)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if kind == "imle":
        layer = pyepo.func.implicitMLE(
            optmodel, n_samples=samples, sigma=1.0, lambd=10, distribution=sum_gamma(proto.nodes), processes=1
        )
        l1 = torch.nn.L1Loss()

        def loss_of(x: torch.Tensor, c: torch.Tensor, w: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return l1(layer(model(x)), w)

    elif kind == "spo+":
        spo = pyepo.func.SPOPlus(optmodel, processes=1)

        def loss_of(x: torch.Tensor, c: torch.Tensor, w: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return spo(model(x), c, w, z)

    else:
        mse = torch.nn.MSELoss()

        def loss_of(x: torch.Tensor, c: torch.Tensor, w: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return mse(model(x), c)

    generator = torch.Generator().manual_seed(seed)
    times = []
    for _ in range(1 if limit is not None else proto.epochs):
        start = time.perf_counter()
        for x, c, w, z in DataLoader(data, batch_size=proto.batch_size, shuffle=True, generator=generator):
            loss = loss_of(x, c, w, z)
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - start)
    return model, times


def _summary(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _plan(proto: Protocol) -> TrainPlan:
    """The settings of our runs: ``imle-solvers train --problem tsp`` with the protocol's sizes."""
    from ..training import TrainConfig

    config = TrainConfig(
        problem="tsp",
        nodes=proto.nodes,
        n_train=proto.n_train,
        n_test=proto.n_test,
        epochs=proto.epochs,
        batch_size=proto.batch_size,
        deg=proto.deg,
        noise_width=proto.noise_width,
        show_progress=False,
    )
    return config.plan()


def _variant(
    plan: TrainPlan, samples: int, epochs: int | None = None, batch_size: int | None = None
) -> TrainPlan:
    """``plan`` with S = ``samples`` and, where given, ``epochs`` and ``batch_size``."""
    schedule = plan.schedule
    return dataclasses.replace(
        plan,
        options=dataclasses.replace(plan.options, samples=samples),
        schedule=dataclasses.replace(
            schedule,
            epochs=schedule.epochs if epochs is None else epochs,
            batch_size=schedule.batch_size if batch_size is None else batch_size,
        ),
    )


def run(quick: bool = False, protocol: Protocol | None = None) -> list[dict[str, Any]]:
    """Both tables' rows (told apart by their ``"suite"`` key): the side-by-side comparison and the pools."""
    from ..training import evaluate, make_problem, train_model

    proto = protocol or (QUICK if quick else FULL)
    torch.set_num_threads(1)
    epo = _pyepo()
    plan = _plan(proto)
    seconds: dict[str, list[float]] = {}
    regrets: dict[str, list[float]] = {}
    speedups: dict[int, list[float]] = {1: [], 10: []}
    first: Problem | None = None

    def note(label: str, per_epoch: float, regret: float | None) -> None:
        seconds.setdefault(label, []).append(per_epoch)
        if regret is not None:
            regrets.setdefault(label, []).append(regret)

    warm_data = dataclasses.replace(plan.data, n_train=8, n_test=8)
    warm = make_problem(dataclasses.replace(plan, data=warm_data), 1234)
    for _, method, samples in _OURS:  # warm-up, not timed: first calls pay for imports and model builds
        train_model(_variant(plan, samples, epochs=1, batch_size=4), warm, method, 0)
    for seed in proto.seeds:
        problem = make_problem(plan, seed)  # the train and test sets of one generated data set, solved
        train, test, oracle = problem.train, problem.test, problem.eval_oracle
        if first is None:
            first = problem
        ours: dict[int, float] = {}
        for label, method, samples in _OURS:
            out = train_model(_variant(plan, samples), problem, method, seed)  # torch.manual_seed(seed)
            note(f"ours: {label}", out.epoch_time, out.regret)
            if method == "imle":
                ours[samples] = out.epoch_time
        if epo is None:
            continue
        for label, kind in (("SPO+", "spo+"), ("two-stage", "two-stage")):
            model, times = _pyepo_train(kind, epo, proto, train, seed)
            note(f"PyEPO: {label}", float(np.mean(times)), evaluate(model, test, oracle)["regret"])
        for samples in (1, 10):
            k = proto.pyepo_instances
            _, (part,) = _pyepo_train("imle", epo, proto, train, seed, samples=samples, limit=k)
            projected = part * proto.n_train / k  # s per epoch, from the first k instances
            note(f"PyEPO: I-MLE, S={samples} (projected)", projected, None)
            speedups[samples].append(projected / ours[samples])
    rows: list[dict[str, Any]] = []
    for label in seconds:
        row: dict[str, Any] = {
            "suite": "side by side",
            "configuration": label,
            "s_per_epoch": statistics.median(seconds[label]),
        }
        equal_s = 10 if label.endswith("S=10") else 1 if label.endswith("S=1") else None
        if equal_s is not None and speedups[equal_s]:  # our I-MLE rows: PyEPO's I-MLE at the same S
            row["speed-up vs PyEPO I-MLE"] = statistics.median(speedups[equal_s])
            row["speed-up min"] = min(speedups[equal_s])
            row["speed-up max"] = max(speedups[equal_s])
        if label in regrets:
            row["regret_mean"], row["regret_std"] = _summary(regrets[label])
        rows.append(row)
    assert first is not None  # the protocol has a seed
    rows.extend(_pool_rows(plan, first))
    return rows


POOL_BATCH = 32
"""Batch size of the pool table's epochs (PyEPO's default): 320 solves per call of the layer."""


def _pool_rows(plan: TrainPlan, problem: Problem) -> list[dict[str, Any]]:
    """Our I-MLE S=10 epoch (first seed's data, batch `POOL_BATCH`), serial, on process pools of 1 and 2
    workers, on Dask."""
    from ..pool import SolverPool
    from ..training import train_model

    epoch_plan = _variant(plan, 10, epochs=1, batch_size=POOL_BATCH)
    oracle, train = problem.train_oracle, problem.train

    def epoch(pool: Any) -> float:
        return train_model(epoch_plan, problem, "imle", 0, pool=pool).epoch_time  # torch.manual_seed(0)

    pools: list[tuple[str, Callable[[], Any]]] = [
        ("serial (no pool)", lambda: None),
        ("process pool, 1 worker", lambda: SolverPool(1, backend="process")),
        ("process pool, 2 workers", lambda: SolverPool(2, backend="process")),
        ("Dask LocalCluster, 2 worker processes", lambda: SolverPool(2, backend="dask")),
    ]
    rows: list[dict[str, Any]] = []
    serial = None
    for label, make in pools:
        pool = make()
        try:
            if pool is not None:
                pool.start()  # workers up and the oracle on them before the clock starts
                pool.solve_batch(oracle, train.costs[:8].double().numpy())
            seconds = epoch(pool)
        finally:
            if pool is not None:
                pool.close()
        serial = seconds if serial is None else serial
        rows.append(
            {
                "suite": "pools",
                "configuration": f"ours: I-MLE, S=10, {label}",
                "s_per_epoch": seconds,
                "speed-up vs serial": serial / seconds,
            }
        )
    return rows
