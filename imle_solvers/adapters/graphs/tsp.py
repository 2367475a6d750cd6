"""The travelling salesperson as a MAP oracle: a shortest tour through every node of a complete graph.

A state is the 0/1 indicator of the tour's undirected edges, one per node pair ``(i, j)``, ``i < j``, in
the order of ``itertools.combinations(range(n), 2)`` — PyEPO's order (``tspModel.edges``), which is also
SciPy's condensed distance order (``scipy.spatial.distance.pdist``). Every tour has ``n`` edges.

Two back ends solve the same problem: OR-Tools CP-SAT on its circuit constraint (the default, exact; one
model per thread, built once, each call rewrites the objective), and the problem declared as an
[`ILP`][imle_solvers.ILP] with a subtour-free formulation (single-commodity flow or Miller-Tucker-Zemlin)
on HiGHS or CBC through PuLP — the cross-check, and the model a PyEPO user knows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from ..._checks import integer_at_least, one_of, positive, positive_int
from ...errors import InvalidSolutionError, require
from ...oracle import MapOracle
from ..ilp._engine import EngineOracle, Outcome, check_single
from ..ilp.cpsat import _MAX_OBJECTIVE, CpsatEngine, CPSATOracle

__all__ = ["NODES_MAX", "TravellingSalesperson", "tsp_edges", "tsp_ilp"]

NODES_MAX = 1000
"""The most nodes a tour oracle takes: 499,500 edge weights and a model of 999,000 arcs. Exact solvers
need minutes or more for one tour long before this size; the bound refuses a size that could not even be
built (10⁶ nodes would hold 5·10¹¹ weights)."""

Backend = Literal["cpsat", "highs", "cbc", "gurobi", "scip"]
ILP_BACKENDS: tuple[str, ...] = ("highs", "cbc", "gurobi", "scip")
"""The back ends that solve the TSP as an [`ILP`][imle_solvers.ILP] (`tsp_ilp`)."""
Formulation = Literal["flow", "mtz"]

_CIRCUIT_PARAMETERS: dict[str, Any] = {**CPSATOracle.DEFAULT_PARAMETERS, "linearization_level": 2}
"""CP-SAT settings of the circuit model: the LP relaxation of the circuit constraint (``linearization_level
2``) proves optimality about three times sooner on 20-node tours than CP-SAT's default level."""


def tsp_edges(n_nodes: int) -> list[tuple[int, int]]:
    """The undirected edges ``(i, j)``, ``i < j``, of the complete graph on ``n_nodes`` nodes, in weight order
    (``itertools.combinations(range(n_nodes), 2)``: ``(0, 1), (0, 2), …, (0, n−1), (1, 2), …``)."""
    return list(itertools.combinations(range(n_nodes), 2))


def _nodes(n_nodes: Any) -> int:
    n = integer_at_least("n_nodes", int(n_nodes) if isinstance(n_nodes, np.integer) else n_nodes, 3)
    if n > NODES_MAX:
        raise ValueError(f"n_nodes must be at most {NODES_MAX} (NODES_MAX), got {n}")
    return n


class _CircuitOracle(EngineOracle):
    """CP-SAT's circuit constraint over both arcs of every edge; an edge's cost goes on both of its arcs, and
    the state folds the arcs back onto the edges (``z_e = a_ij + a_ji``)."""

    sense = "min"

    def __init__(
        self,
        n_nodes: int,
        *,
        time_limit: float | None,
        strict: bool,
        workers: int,
        resolution: float,
        parameters: dict[str, Any],
    ) -> None:
        cp_model: Any = require("ortools.sat.python.cp_model", "cpsat")
        edges = tsp_edges(n_nodes)
        model = cp_model.CpModel()
        forward = [model.new_bool_var(f"a{i}_{j}") for i, j in edges]  # arc i → j, model indices 0 … E−1
        backward = [model.new_bool_var(f"a{j}_{i}") for i, j in edges]  # arc j → i, indices E … 2E−1
        arcs = [(i, j, a) for (i, j), a in zip(edges, forward)]
        arcs += [(j, i, b) for (i, j), b in zip(edges, backward)]
        model.add_circuit(arcs)  # one Hamiltonian circuit (no node may be skipped: no self-loops)
        n_arcs = 2 * len(edges)
        self.n_vars = len(edges)
        self.expected_nonzeros = float(n_nodes)
        self.label = f"TravellingSalesperson(cpsat, {n_nodes} nodes)"
        self.time_limit = time_limit
        self.strict = strict
        self.resolution = float(min(resolution, _MAX_OBJECTIVE / n_arcs))
        self._check = None  # CP-SAT's exact integer arithmetic; the fold is checked in `solve`
        self._engine = CpsatEngine(
            model,
            list(range(n_arcs)),
            resolution=self.resolution,
            time_limit=time_limit,
            workers=workers,
            hint=False,
            parameters={**_CIRCUIT_PARAMETERS, **parameters},
        )
        self._n_nodes = n_nodes

    def solve(self, weights: np.ndarray) -> np.ndarray:
        w = check_single(weights, self.n_vars, self.label)  # edge costs   [E]
        status, values, detail = self._engine.solve(np.concatenate([w, w]))  # arc costs   [2E]
        if values is not None:
            m = self.n_vars
            values = [values[k] + values[k + m] for k in range(m)]  # z_e = a_ij + a_ji   [E]
            if sum(values) != self._n_nodes or max(values) > 1:
                raise InvalidSolutionError(f"{self.label}: CP-SAT returned arcs that are not one tour")
        return self._state(Outcome(status, values, detail))


class TravellingSalesperson(MapOracle):
    """The symmetric travelling salesperson problem as a MAP oracle (paper, eq. 3 and Example 3).

    ``MAP(−c) = argmin_{z ∈ C} ⟨c, z⟩`` over the tours ``C`` of the complete graph on ``n_nodes`` nodes: the
    weights are edge **costs** (``sense="min"``), one per undirected edge ``(i, j)``, ``i < j``, in the order
    of `edges` (``itertools.combinations(range(n_nodes), 2)``, PyEPO's ``tspModel.edges``); the state is the
    0/1 indicator of the edges of a shortest tour, so ``⟨z, 1⟩ = n_nodes`` (``expected_nonzeros``).

    Parameters
    ----------
    n_nodes
        ``3 ≤ n ≤`` `NODES_MAX`, the number of nodes (``m = n (n − 1) / 2`` weights).
    backend
        ``"cpsat"`` (default): OR-Tools CP-SAT on its circuit constraint, each edge's cost on both of its
        arcs; one model per thread, built once, each call rewrites the objective coefficients. ``"highs"``,
        ``"cbc"``, ``"gurobi"`` or ``"scip"``: the same problem declared as an [`ILP`][imle_solvers.ILP]
        (see `tsp_ilp`) on that back end (extra ``pulp``, and ``gurobi`` or ``scip``).
    formulation
        Subtour elimination of the ILP back ends: ``"flow"`` (single-commodity flow, Gavish-Graves on
        undirected edges, the default) or ``"mtz"`` (Miller-Tucker-Zemlin on directed arcs). Ignored by
        ``"cpsat"``.
    time_limit
        Seconds per solve (default 60; ``None``: no limit). A solve that reaches it with a tour returns the
        tour with an [`UnprovenSolutionWarning`][imle_solvers.errors.UnprovenSolutionWarning] (or raises,
        with ``strict``); without a tour it raises
        [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError].
    strict
        Raise [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] instead of returning an unproven
        tour.
    workers
        CP-SAT search workers per solve (default 1: a [`SolverPool`][imle_solvers.SolverPool] parallelises
        across instances instead). ``"cpsat"`` only.
    resolution
        CP-SAT's integer scaling ``R`` of the costs (default ``2**20``; see
        [`CPSATOracle`][imle_solvers.CPSATOracle]): each arc's cost is rounded to a multiple of
        ``max|c| / R``, so the tour's cost is within ``n · max|c| / R`` of the optimum (each of the ``n``
        arcs of the returned tour and of an optimal one is off by at most half a step). ``"cpsat"`` only.
    parameters
        CP-SAT ``SatParameters`` fields over this oracle's defaults (those of
        [`CPSATOracle`][imle_solvers.CPSATOracle] and ``linearization_level=2``), checked when the oracle
        is made. ``"cpsat"`` only: the ILP back ends refuse ``workers``, ``resolution`` and ``parameters``.

    Attributes
    ----------
    edges
        ``[(i, j), …]``, the order of weights and states.
    oracle
        The back end's oracle (a CP-SAT engine oracle, or the [`ILP`][imle_solvers.ILP] of `tsp_ilp`).

    Notes
    -----
    Any finite costs are fine, negative ones included: every tour has ``n`` edges, so a constant added to
    every cost changes no decision. Ties are broken deterministically (one CP-SAT worker, no hint). The
    oracle pickles (CP-SAT's model travels as text and is rebuilt once per worker), so a process pool or a
    Dask cluster solves batches of tours in parallel; Ctrl-C stops a solve at once.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and
      Integer Programming", 2022, <https://arxiv.org/abs/2206.14234> (the TSP benchmark and its edge order).
    * Google OR-Tools, "CP-SAT Solver" (``AddCircuit``), <https://developers.google.com/optimization/cp/cp_solver>.
    * Gavish & Graves, "The travelling salesman problem and related problems", MIT Operations Research
      Center, working paper OR 078-78, 1978 (the single-commodity flow formulation).
    * Miller, Tucker & Zemlin, "Integer programming formulation of traveling salesman problems", Journal of
      the ACM 7(4), 1960, <https://doi.org/10.1145/321043.321046>.

    Examples
    --------
    >>> import numpy as np
    >>> tsp = TravellingSalesperson(4)
    >>> tsp.edges
    [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    >>> z = tsp.solve(np.array([1.0, 5.0, 1.0, 1.0, 5.0, 1.0]))   # the square 0-1-2-3-0
    >>> z.tolist(), tsp.tour(z)
    ([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [0, 1, 2, 3])
    """

    sense = "min"

    def __init__(
        self,
        n_nodes: int,
        backend: Backend = "cpsat",
        *,
        formulation: Formulation = "flow",
        time_limit: float | None = 60.0,
        strict: bool = False,
        workers: int | None = None,
        resolution: float | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        n = _nodes(n_nodes)
        one_of("backend", backend, ("cpsat", *ILP_BACKENDS))
        one_of("formulation", formulation, ("flow", "mtz"))
        if time_limit is not None:
            positive("time_limit", time_limit)  # seconds
        if backend != "cpsat":
            given = {"workers": workers, "resolution": resolution, "parameters": parameters}
            taken = [name for name, value in given.items() if value is not None]
            if taken:
                raise ValueError(f"{', '.join(taken)} apply to backend='cpsat' only, got backend={backend!r}")
        workers = positive_int("workers", 1 if workers is None else workers)
        resolution = positive("resolution", 2**20 if resolution is None else resolution)
        if parameters is not None and not isinstance(parameters, dict):
            raise TypeError(f"parameters must be a dict of CP-SAT fields, got {type(parameters).__name__}")
        self.n_nodes = n
        self.backend = backend
        self.formulation = formulation
        self.edges = tsp_edges(n)
        self.n_vars = len(self.edges)
        self.expected_nonzeros = float(n)
        self.time_limit = time_limit
        self.oracle: MapOracle
        if backend == "cpsat":
            self.oracle = _CircuitOracle(
                n,
                time_limit=time_limit,
                strict=bool(strict),
                workers=int(workers),
                resolution=float(resolution),
                parameters=dict(parameters or {}),
            )
        else:
            self.oracle = tsp_ilp(n, formulation, backend=backend, time_limit=time_limit, strict=strict)

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """The 0/1 edge indicator ``(m,)`` of a shortest tour for edge costs ``weights`` ``(m,)``."""
        return self.oracle.solve(weights)

    def tour(self, state: Sequence[float] | np.ndarray | torch.Tensor) -> list[int]:
        """The nodes of a tour state (``(m,)``, NumPy or torch) in visiting order, from node 0 towards its
        smaller neighbour.

        Raises ``ValueError`` when ``state`` is not one tour through every node.
        """
        if isinstance(state, torch.Tensor):
            state = state.detach().cpu().numpy()
        z = np.asarray(state, dtype=np.float64).reshape(-1)
        if z.shape != (self.n_vars,):
            raise ValueError(f"a state has {self.n_vars} entries, got shape {z.shape}")
        neighbours: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for (i, j), on in zip(self.edges, z.tolist()):
            if on > 0.5:
                neighbours[i].append(j)
                neighbours[j].append(i)
        if any(len(ns) != 2 for ns in neighbours):
            raise ValueError("the state is not a tour: some node does not have exactly two edges")
        order, prev, node = [0], 0, min(neighbours[0])
        while node != 0:
            order.append(node)
            prev, node = node, next(v for v in neighbours[node] if v != prev)
        if len(order) != self.n_nodes:
            raise ValueError(f"the state is not one tour: its cycle through node 0 has {len(order)} nodes")
        return order

    def objective_tolerance(self, weights: np.ndarray) -> float:
        """How far from the optimum a returned tour may be (weights' units): ``n · max|c| / R`` on CP-SAT
        (each arc's cost is rounded by at most half of ``max|c| / R``, on the ``n`` arcs of the returned tour
        and of an optimal one); ``2·10⁻⁶ · max|c|`` for the ILP back ends (the MIP solvers' absolute gap of
        10⁻⁶ on the objective scaled to ``max|c| ∈ [1/2, 1)``, see
        [`ILP`][imle_solvers.ILP])."""
        top = float(np.max(np.abs(weights)))
        if isinstance(self.oracle, _CircuitOracle):
            return self.n_nodes * top / self.oracle.resolution
        return 2e-6 * top

    def __repr__(self) -> str:
        extra = "" if self.backend == "cpsat" else f", formulation={self.formulation!r}"
        return (
            f"TravellingSalesperson(n_nodes={self.n_nodes}, backend={self.backend!r}{extra}, "
            f"time_limit={self.time_limit})"
        )


def tsp_ilp(
    n_nodes: int,
    formulation: Formulation = "flow",
    *,
    backend: Literal["highs", "cbc", "gurobi", "scip"] = "highs",
    time_limit: float | None = 60.0,
    strict: bool = False,
) -> Any:
    """The travelling salesperson declared as an [`ILP`][imle_solvers.ILP] on PuLP's model of it.

    The state columns are the undirected edge indicators ``x_e`` in the order of `tsp_edges`; every node has
    degree 2 (``Σ_{e ∋ v} x_e = 2``), and subtours are cut by auxiliary columns (objective 0, not returned):

    * ``"flow"`` — single-commodity flow (Gavish & Graves, on undirected edges): node 0 sends ``n − 1`` units,
      every other node keeps one, and the flow ``f_ij ≥ 0`` of an arc may only use a chosen edge,
      ``f_ij ≤ (n − 1) x_e``. A cycle missing node 0 receives nothing, so the feasible edge sets are the
      tours;
    * ``"mtz"`` — Miller-Tucker-Zemlin: binary arcs ``y_ij`` with ``x_e = y_ij + y_ji``, one arc into and one
      out of every node, and positions ``1 ≤ u_i ≤ n − 1`` with ``u_i − u_j + (n − 1) y_ij ≤ n − 2`` for arcs
      between nodes other than 0.

    Parameters
    ----------
    n_nodes
        ``n ≥ 3``.
    formulation
        ``"flow"`` (default) or ``"mtz"``.
    backend
        ``"highs"`` (default), ``"cbc"``, ``"gurobi"`` or ``"scip"``: the auxiliary columns are continuous,
        which CP-SAT does not take (use [`TravellingSalesperson`][imle_solvers.TravellingSalesperson]'s
        ``"cpsat"`` instead).
    time_limit
        Seconds per solve, or ``None``.
    strict
        Raise where a time limit leaves an unproven tour, as for [`ILP`][imle_solvers.ILP].

    Returns
    -------
    ILP
        A ``"min"`` oracle of ``m = n (n − 1) / 2`` edge costs, ``expected_nonzeros = n``.
    """
    pulp: Any = require("pulp", "pulp")
    from ..ilp import ILP

    n = _nodes(n_nodes)
    one_of("formulation", formulation, ("flow", "mtz"))
    one_of("backend", backend, ILP_BACKENDS)
    edges = tsp_edges(n)
    prob = pulp.LpProblem("tsp", pulp.LpMinimize)
    x = [prob.add_variable(f"x_{i}_{j}", cat="Binary") for i, j in edges]
    incident: list[list[Any]] = [[] for _ in range(n)]
    for (i, j), var in zip(edges, x):
        incident[i].append(var)
        incident[j].append(var)
    for v in range(n):
        prob += pulp.lpSum(incident[v]) == 2, f"degree_{v}"
    if formulation == "flow":
        flow = {}
        for (i, j), var in zip(edges, x):
            for a, b in ((i, j), (j, i)):
                flow[a, b] = prob.add_variable(f"f_{a}_{b}", lowBound=0)
                prob += flow[a, b] <= (n - 1) * var, f"capacity_{a}_{b}"
        for v in range(n):
            out = pulp.lpSum(flow[v, u] for u in range(n) if u != v)
            into = pulp.lpSum(flow[u, v] for u in range(n) if u != v)
            prob += (out - into == (n - 1)) if v == 0 else (into - out == 1), f"balance_{v}"
    else:
        arc = {}
        for (i, j), var in zip(edges, x):
            arc[i, j] = prob.add_variable(f"y_{i}_{j}", cat="Binary")
            arc[j, i] = prob.add_variable(f"y_{j}_{i}", cat="Binary")
            prob += var == arc[i, j] + arc[j, i], f"edge_{i}_{j}"
        for v in range(n):
            prob += pulp.lpSum(arc[v, u] for u in range(n) if u != v) == 1, f"out_{v}"
            prob += pulp.lpSum(arc[u, v] for u in range(n) if u != v) == 1, f"in_{v}"
        u = {v: prob.add_variable(f"u_{v}", lowBound=1, upBound=n - 1) for v in range(1, n)}
        for a in range(1, n):
            for b in range(1, n):
                if a != b:
                    prob += u[a] - u[b] + (n - 1) * arc[a, b] <= n - 2, f"order_{a}_{b}"
    prob += pulp.lpSum(0 * var for var in x)  # the objective is replaced on every call
    options: dict[str, Any] = {"time_limit": time_limit, "strict": strict, "expected_nonzeros": float(n)}
    return ILP.from_pulp(prob, x, sense="min", backend=backend, **options)
