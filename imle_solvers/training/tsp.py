"""The ``tsp`` problem of ``imle-solvers train``: PyEPO's travelling salesperson, solved by CP-SAT tours.

Its solves are the expensive part of a step (milliseconds each, against microseconds for the other
problems), so they go where the command sends them: ``--workers N`` to a process pool, ``--dask-address``
to a Dask cluster; ``--solve-ratio R < 1`` answers a share ``1 − R`` of the training rows from a
[`SolutionCache`][imle_solvers.SolutionCache] of the tours already found (PyEPO's ``solve_ratio``).
"""

from __future__ import annotations

from ..oracle import MapOracle
from .models import linear_model
from .problems import DEFAULTS, Problem, ProblemSpec, _choose, _linear

__all__ = ["tsp_problem"]


def tsp_problem(spec: ProblemSpec) -> Problem:
    """Travelling salesperson on --nodes nodes (PyEPO's TSP data), linear model, CP-SAT tours.

    The training data's optimal tours are solved once, on ``spec.pool`` when there is one. Training solves
    the noisy and target costs with [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (CP-SAT's
    circuit constraint), wrapped in a [`SolutionCache`][imle_solvers.SolutionCache] when
    ``spec.solve_ratio < 1``; evaluation always solves exactly. No device-native oracle exists:
    ``oracle="device"`` is refused, ``"auto"`` keeps CP-SAT on every device.
    """
    from ..adapters.graphs.tsp import TravellingSalesperson
    from ..data.tsp import tsp

    _linear("tsp", spec)
    oracle = TravellingSalesperson(spec.nodes)
    exact = _choose(oracle, None, spec.native, spec.oracle)  # raises for --oracle device
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
    train_oracle: MapOracle = exact
    if spec.solve_ratio < 1:
        from ..pool import SolutionCache

        train_oracle = SolutionCache(exact, p=1.0 - spec.solve_ratio, seed=spec.seed)
    m, p = oracle.n_vars, spec.num_features
    return Problem(train, test, lambda: linear_model(p, m), train_oracle, exact, DEFAULTS["tsp"])
