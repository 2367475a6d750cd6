"""PyEPO interoperability: any PyEPO `optModel` as a MAP oracle, any `optDataset` as a `PTODataset`.

PyEPO (Tang & Khalil, "PyEPO: a PyTorch-based end-to-end predict-then-optimize library") describes an
optimisation problem by an `optModel` (`setObj(c)`, then `solve() -> (solution, objective)`,
`num_cost` coefficients, `modelSense`) and a training set by an `optDataset` (`feats`, `costs`, `sols`,
`objs`). With the two functions below a PyEPO model and its data train any layer or loss of this
library; the solver calls are PyEPO's own. Needs the extra `pyepo` (`pip install 'imle-solvers[pyepo]'`);
PyEPO is imported only to read its sense constants and to recognise its problem classes.

`equivalent_oracle` swaps PyEPO's solver for this library's own where the problem is one it knows, with the
same variable order and sense, for every back end PyEPO has: its grid shortest path becomes
[`DAGShortestPath`][imle_solvers.DAGShortestPath], its knapsack
[`TorchKnapsack`][imle_solvers.TorchKnapsack] (or an `ILP`), its travelling-salesperson models
[`TravellingSalesperson`][imle_solvers.TravellingSalesperson].
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from ..data.dataset import PTODataset
from ..errors import DataError, InvalidWeightsError, require
from ..oracle import MapOracle, Sense

__all__ = ["PyEPOOracle", "equivalent_oracle", "from_pyepo"]


def _pyepo_sense(optmodel: Any) -> Sense:
    epo: Any = require("pyepo", "pyepo")
    sense = getattr(optmodel, "modelSense", epo.EPO.MINIMIZE)
    if sense == epo.EPO.MINIMIZE:
        return "min"
    if sense == epo.EPO.MAXIMIZE:
        return "max"
    raise ValueError(f"optmodel.modelSense must be EPO.MINIMIZE or EPO.MAXIMIZE, got {sense!r}")


def _base(optmodel: Any, name: str) -> bool:
    """Whether ``optmodel`` is an instance of PyEPO's ``pyepo.model.bases.<name>`` (any back end)."""
    try:
        import pyepo.model.bases as bases
    except ImportError:  # another PyEPO layout: no class to recognise
        return False
    base = getattr(bases, name, None)
    return base is not None and isinstance(optmodel, base)


def _tsp_nodes(optmodel: Any) -> int | None:
    """``num_nodes`` of a PyEPO travelling-salesperson model (any formulation and back end), else ``None``."""
    return int(optmodel.num_nodes) if _base(optmodel, "tspABBase") else None


def equivalent_oracle(optmodel: Any, **options: Any) -> MapOracle:
    """This library's oracle for the problem of a PyEPO model, in the model's variable order and sense.

    Recognised (PyEPO's predefined models, of any back end: OR-Tools, Gurobi, Pyomo, COPT, MPAX):

    * shortest path on a grid (``shortestPathModel(grid=(h, w))``) →
      [`DAGShortestPath.grid`][imle_solvers.DAGShortestPath.grid]``(h, w)``: the same arcs in PyEPO's
      order ``optmodel.arcs``, minimised, on torch (no solver);
    * knapsack (``knapsackModel(weights, capacity)``, weights ``(dims, items)``) →
      [`TorchKnapsack.from_decimal`][imle_solvers.TorchKnapsack.from_decimal]``(weights.T, capacity)``
      (PyEPO's weights have two decimals), maximised; weights with more places, or ``backend=`` among the
      options, give an [`ILP`][imle_solvers.ILP] of the same rows on that back end (CP-SAT by default);
    * travelling salesperson (``tspGGModel``, ``tspDFJModel``, ``tspMTZModel``,
      ``pyepo.model.tspModel(...)``) → ``TravellingSalesperson(optmodel.num_nodes, **options)``
      ([`TravellingSalesperson`][imle_solvers.TravellingSalesperson]: CP-SAT's circuit constraint, one
      cost per undirected edge ``(i, j)``, ``i < j``, in PyEPO's order ``optmodel.edges``).

    Unlike a Pyomo or Gurobi model, each pickles, so a [`SolverPool`][imle_solvers.SolverPool] or a Dask
    cluster can solve its batches. PyEPO's portfolio model is a continuous quadratic programme, not a
    combinatorial one: it is refused with what to use instead.

    Parameters
    ----------
    optmodel
        A PyEPO ``optModel``.
    **options
        Passed to the oracle (e.g. ``time_limit=``, ``backend="highs"`` for a TSP; ``backend=`` for a
        knapsack). The shortest path takes none.

    Raises
    ------
    ValueError
        For a model of another problem, PyEPO's LP relaxation of a model (``optmodel.relax()``: fractional
        solutions), a model with constraints added by ``addConstr`` (the equivalent oracle would not know
        them), a variable order that differs from PyEPO's, or options the oracle does not take.
    """
    name = type(optmodel).__name__
    if name.endswith("Rel"):  # PyEPO's LP relaxations: tspGGModelRel, knapsackModelRel…
        raise ValueError(
            f"{name} is PyEPO's LP relaxation (optmodel.relax()): its solutions are "
            "fractional, and this library's oracles solve the integer problem; use PyEPOOracle(optmodel) to "
            "solve the relaxation with PyEPO's solver"
        )
    if _base(optmodel, "portfolioBase") or "portfolio" in name.lower():
        raise ValueError(
            f"{name} is PyEPO's portfolio model, a continuous quadratic programme (no discrete states for "
            "a MAP oracle): train it with PyEPOOracle(optmodel) and a method for continuous decisions "
            "(spo+, dbb, pfyl), or declare a discrete version as an ILP"
        )
    if getattr(optmodel, "_extra_constrs", None):
        raise ValueError(f"{name} has constraints added by addConstr: use PyEPOOracle(optmodel)")
    if _base(optmodel, "shortestPathBase"):
        return _shortest_path(optmodel, options)
    if _base(optmodel, "knapsackBase"):
        return _knapsack(optmodel, options)
    nodes = _tsp_nodes(optmodel)
    if nodes is None:
        raise ValueError(f"no equivalent oracle for {name}: use PyEPOOracle(optmodel) (PyEPO's solver)")
    from ..adapters.graphs.tsp import TravellingSalesperson, tsp_edges

    if [tuple(e) for e in optmodel.edges] != tsp_edges(nodes):
        raise ValueError(f"{name}.edges is not in the order (i, j), i < j, lexicographic")
    return TravellingSalesperson(nodes, **options)


def _shortest_path(optmodel: Any, options: dict[str, Any]) -> MapOracle:
    """`DAGShortestPath.grid` of a PyEPO grid shortest-path model, checked arc by arc."""
    from ..adapters.graphs.dag import DAGShortestPath

    name = type(optmodel).__name__
    if options:
        raise ValueError(f"the shortest path of {name} takes no options, got {', '.join(options)}")
    rows, cols = (int(v) for v in optmodel.grid)
    oracle = DAGShortestPath.grid(rows, cols)
    if [tuple(int(v) for v in a) for a in optmodel.arcs] != list(oracle.edges):
        raise ValueError(f"{name}.arcs is not the order of DAGShortestPath.grid({rows}, {cols})")
    return oracle


def _knapsack(optmodel: Any, options: dict[str, Any]) -> MapOracle:
    """The knapsack of a PyEPO model: `TorchKnapsack` on its two-decimal weights, else an `ILP`."""
    from ..adapters.ilp import ILP
    from ..adapters.knapsack import TorchKnapsack

    weights = np.asarray(optmodel.weights, dtype=np.float64).reshape(-1, int(optmodel.num_cost))  # [d, n]
    capacity = np.asarray(optmodel.capacity, dtype=np.float64).reshape(-1)  # [d]
    extra = {k: v for k, v in options.items() if k != "backend"}
    if "backend" not in options and not extra:
        try:
            return TorchKnapsack.from_decimal(weights.T, capacity, decimals=2)
        except ValueError:  # weights with more places: the ILP takes them as they are
            pass
    backend = options.get("backend", "cpsat")
    return ILP(weights.shape[1], A_ub=weights, b_ub=capacity, sense="max", backend=backend, **extra)


class PyEPOOracle(MapOracle):
    """A PyEPO `optModel` as a [`MapOracle`][imle_solvers.MapOracle] (MAP of paper, eq. 3 / Example 3).

    Weights are the model's cost coefficients, in its own sense: `sense` is `"min"` for
    `EPO.MINIMIZE` (weights are costs, θ = −c) and `"max"` for `EPO.MAXIMIZE`; `n_vars` is
    `optmodel.num_cost`. Each `solve` calls `optmodel.setObj(weights)` and `optmodel.solve()` and
    returns the solution as a float64 array. The model is stateful, so calls are serialised by a
    lock (thread pools are safe; the solves themselves run one at a time).

    Parameters
    ----------
    optmodel
        Any PyEPO `optModel`, e.g. `pyepo.model.ort.shortestPathModel(grid=(5, 5))`.
    expected_nonzeros
        `⟨z, 1⟩` of a typical solution (e.g. the path length), used by
        [`SumOfGamma`][imle_solvers.SumOfGamma] when its `k` is not given; `None` if unknown (for a TSP
        model: its number of nodes, the edges of every tour).

    Raises
    ------
    MissingExtraError
        When PyEPO is not installed.
    ValueError
        When the model's ``modelSense`` is neither ``EPO.MINIMIZE`` nor ``EPO.MAXIMIZE``.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.

    Examples
    --------
    >>> from pyepo.model.ort import shortestPathModel          # doctest: +SKIP
    >>> oracle = PyEPOOracle(shortestPathModel(grid=(5, 5)))   # doctest: +SKIP
    >>> oracle.sense, oracle.n_vars                            # doctest: +SKIP
    ('min', 40)
    """

    def __init__(self, optmodel: Any, expected_nonzeros: float | None = None) -> None:
        self.sense = _pyepo_sense(optmodel)
        self.optmodel = optmodel
        self.n_vars = int(optmodel.num_cost)
        if expected_nonzeros is None:
            nodes = _tsp_nodes(optmodel)
            expected_nonzeros = None if nodes is None else float(nodes)  # a tour has num_nodes edges
        self.expected_nonzeros = expected_nonzeros
        self._lock = threading.Lock()

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one instance with the PyEPO model; `(m,)` weights in the oracle's sense → `(m,)` state."""
        weights = self.validate(weights)
        if weights.ndim != 1:
            raise InvalidWeightsError(f"solve expects a ({self.n_vars},) array, got {weights.shape}")
        with self._lock:
            self.optmodel.setObj(weights)
            solution, _ = self.optmodel.solve()
        z = np.asarray(solution, dtype=np.float64).reshape(-1)  # z = MAP(θ)   [m]
        return z + 0.0  # no negative zeros from LP solvers

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PyEPOOracle({self.optmodel!r}, n_vars={self.n_vars}, sense={self.sense!r})"


def from_pyepo(optdataset: Any, oracle: MapOracle | None = None) -> PTODataset:
    """A PyEPO `optDataset` as a [`PTODataset`][imle_solvers.data.PTODataset], without re-solving.

    Features, costs and PyEPO's optimal solutions are copied as float32 tensors (item `i` is
    `(x_i, c_i, z*_i, f*_i)`, as PyEPO's item `(x_i, c_i, w_i, z_i)`).

    Parameters
    ----------
    optdataset
        A PyEPO `optDataset` (anything with `feats`, `costs`, `sols` and `model`).
    oracle
        The oracle a model's predictions are solved with; by default
        [`PyEPOOracle`][imle_solvers.interop.pyepo.PyEPOOracle] of the data set's model. Pass a faster
        one with the same variable order (e.g. `DAGShortestPath.grid(5, 5)` for PyEPO's 5 × 5
        shortest path, or `equivalent_oracle(optdataset.model)` for a TSP model) to keep PyEPO's data and
        change the solver.

    Raises
    ------
    DataError
        A [`DataError`][imle_solvers.errors.DataError] (a ``ValueError``) when the oracle's `n_vars`
        differs from the data set's number of costs, when features, costs and solutions do not have one
        row per instance (solutions: the costs' shape), are not numbers, or hold NaN or inf (naming the
        instances), or when the data set has no model and no ``oracle`` is given.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.
    """
    model = getattr(optdataset, "model", None)
    if oracle is None:
        if model is None:
            raise DataError("the data set has no model (optdataset.model is None): pass oracle=")
        oracle = PyEPOOracle(model)
    feats = _array("features", getattr(optdataset, "feats", None))
    costs = _array("costs", getattr(optdataset, "costs", None))
    sols = _array("solutions", getattr(optdataset, "sols", None))
    n = costs.shape[0] if costs.ndim else 0
    if costs.ndim != 2 or costs.shape[1] != oracle.n_vars:
        raise DataError(
            f"the data set has costs of shape {tuple(costs.shape)}, but the oracle has n_vars={oracle.n_vars}"
        )
    if feats.ndim != 2 or feats.shape[0] != n:
        raise DataError(f"the data set has features of shape {tuple(feats.shape)} for {n} instances")
    if sols.ndim == 0 or sols.shape[0] != n or sols.size != costs.size:
        raise DataError(
            f"the data set has solutions of shape {tuple(sols.shape)} for costs of shape {tuple(costs.shape)}"
        )
    for name, values in (("features", feats), ("costs", costs), ("solutions", sols)):
        bad = np.flatnonzero(~np.isfinite(values.reshape(n, -1)).all(axis=1))
        if bad.size:
            raise DataError(f"the data set's {name} are not finite (NaN or inf)", bad.tolist())
    info = {"source": "pyepo", "model": type(model).__name__}
    return PTODataset(
        torch.from_numpy(feats).float(),
        torch.from_numpy(costs).float(),
        oracle,
        solutions=torch.from_numpy(sols.reshape(costs.shape)).float(),
        info=info,
    )


def _array(name: str, values: Any) -> np.ndarray:
    """The data set's ``name`` as a float64 array, or a [`DataError`][imle_solvers.errors.DataError]
    naming it (missing, ragged, or not numbers)."""
    if values is None:
        raise DataError(f"the data set has no {name}")
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"the data set's {name} are not an array of numbers ({exc})") from None
    return array
