"""The ``tsp`` problem of ``imle-solvers train``: PyEPO's travelling salesperson, solved by CP-SAT tours.

Its solves are the expensive part of a step (milliseconds each, against microseconds for the other
problems), so they go where the command sends them: ``--workers N`` to a process pool, ``--dask-address``
to a Dask cluster; ``--solve-ratio R < 1`` answers a share ``1 − R`` of the training rows from a
[`SolutionCache`][imle_solvers.SolutionCache] of the tours already found (PyEPO's ``solve_ratio``).
"""

from __future__ import annotations

from typing import Any

from ..data.dataset import PTODataset
from ..oracle import MapOracle

__all__ = ["tsp_parts"]


def tsp_parts(spec: Any) -> tuple[PTODataset, PTODataset, MapOracle, MapOracle]:
    """The train and test sets, the training oracle and the evaluation oracle of ``--problem tsp``.

    ``spec`` is the problem's [`ProblemSpec`][imle_solvers.training.problems.ProblemSpec] (``nodes``,
    ``num_features``, ``deg``, ``noise_width``, ``seed``, ``n_train``, ``n_test``, ``oracle``, ``pool``,
    ``solve_ratio``). The data set's optimal tours are solved once, on ``spec.pool`` when there is one.
    Training solves the noisy and target costs with
    [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (CP-SAT's circuit constraint), wrapped in
    a [`SolutionCache`][imle_solvers.SolutionCache] when ``spec.solve_ratio < 1``; evaluation always solves
    exactly. No device-native oracle exists: ``oracle="device"`` is refused, ``"auto"`` keeps CP-SAT on
    every device.
    """
    from ..adapters.graphs.tsp import TravellingSalesperson
    from ..data.tsp import tsp

    oracle = TravellingSalesperson(spec.nodes)
    if spec.oracle == "device":
        raise ValueError(f"no device-native oracle is installed for {oracle!r} (use --oracle host or auto)")
    data = tsp(
        spec.n_train + spec.n_test,
        spec.num_features,
        spec.nodes,
        spec.deg,
        spec.noise_width,
        spec.seed,
        oracle=oracle,
        pool=spec.pool,
    )
    train, test = data.split(spec.n_train)
    train_oracle: MapOracle = oracle
    if spec.solve_ratio < 1:
        from ..pool import SolutionCache

        train_oracle = SolutionCache(oracle, p=1.0 - spec.solve_ratio, seed=spec.seed)
    return train, test, train_oracle, oracle
