"""Shortest ``source → target`` path in any NetworkX graph (edge or node weights, negative ones included)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..._checks import one_of
from ...errors import ImleSolversError, InfeasibleError, NegativeCycleError
from ._common import _GRID_CHUNK, _block_dijkstra, _check_graph, _csr_order, _GraphOracle, _networkx
from ._levels import LevelPlan

__all__ = ["ShortestPath"]

Node = Hashable
Edge = tuple[Any, Any]


class ShortestPath(_GraphOracle):
    """Shortest ``source → target`` path in a NetworkX graph as a MAP oracle (paper, Example 3).

    ``MAP(θ)`` with ``θ = −c`` is the indicator of a path minimising the total cost ``⟨z, c⟩``, so the
    layer takes **costs** (``sense="min"``).

    Parameters
    ----------
    graph
        A ``networkx.Graph`` or ``networkx.DiGraph`` (not a multigraph). Only its structure is used;
        weights come with each call.
    source
        The node where every path starts.
    target
        The node where every path ends; ``source == target`` gives the empty path (the one-node path
        for node weights).
    weights_on
        ``"edges"``: one cost per edge, ordered as `edges` (``list(graph.edges)``); the state
        is the edge indicator of the path. ``"nodes"``: one cost per node, ordered as `nodes`
        (``list(graph.nodes)``); a path costs the sum of the weights of all its nodes, ``source`` and
        ``target`` included, and the state is its node indicator.

    Notes
    -----
    Only the part of the graph that lies on some ``source → target`` walk matters (nodes reachable
    from ``source`` that reach ``target``); it is found once, here. Per call:

    * **DAG** (that part acyclic): the level-synchronous dynamic programme of
      [`DAGShortestPath`][imle_solvers.DAGShortestPath], exact for any weights, ``O(V + E)``;
    * **directed, all arc costs ≥ 0**: Dijkstra (``scipy.sparse.csgraph``), ``O(E log V)``;
    * **directed, some cost < 0**: Bellman-Ford (``scipy.sparse.csgraph``), ``O(V E)``;
    * **undirected**: each edge is two opposite arcs, so an edge of negative cost is a negative
      2-cycle (walk it back and forth) and raises
      [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. With node weights the cycle
      ``u → v → u`` costs ``w_u + w_v``; when no adjacent pair sums below 0 the potential ``h = w / 2``
      (Johnson reweighting) makes every arc cost ``(w_u + w_v) / 2 ≥ 0`` and Dijkstra is exact,
      negative node weights included.

    A negative cycle on the way (reachable from ``source`` and reaching ``target``) makes the shortest
    walk unbounded: [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. Otherwise the
    returned path is simple and optimal (within floating-point rounding; cycles of total cost zero that
    rounding makes slightly negative are reported as negative). No path at all:
    [`InfeasibleError`][imle_solvers.errors.InfeasibleError].

    ``solve_batch`` gives every row the state ``solve`` gives it, faster: a DAG batch runs the DP on
    all rows at once; otherwise rows with non-negative arc costs go 16 at a time through one SciPy
    Dijkstra call.

    Ties are handled deterministically: the same weights always give the same state. On a DAG the
    predecessor of each node is the optimal in-arc that comes first in `edges`; otherwise it is
    SciPy's (deterministic) choice.

    ``expected_nonzeros`` is the number of edges (nodes, with node weights) of a shortest path under
    unit weights, i.e. the hop distance (+ 1 for nodes); ``None`` when that is 0 or no path exists.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, Example 3 (a shortest path as a MAP state),
      <https://arxiv.org/abs/2106.01798>.
    * Dijkstra, "A note on two problems in connexion with graphs", Numerische Mathematik 1, 1959,
      <https://doi.org/10.1007/BF01386390>.
    * SciPy, ``scipy.sparse.csgraph.dijkstra``,
      <https://docs.scipy.org/doc/scipy/reference/generated/scipy.sparse.csgraph.dijkstra.html>.
    * SciPy, ``scipy.sparse.csgraph.bellman_ford``,
      <https://docs.scipy.org/doc/scipy/reference/generated/scipy.sparse.csgraph.bellman_ford.html>.

    Examples
    --------
    >>> import networkx as nx, numpy as np
    >>> G = nx.DiGraph([("s", "a"), ("a", "t"), ("s", "t")])
    >>> sp_ = ShortestPath(G, "s", "t")
    >>> sp_.edges
    [('s', 'a'), ('s', 't'), ('a', 't')]
    >>> sp_.solve(np.array([1.0, 5.0, -2.0])).tolist()
    [1.0, 0.0, 1.0]
    """

    sense = "min"

    def __init__(
        self,
        graph: Any,
        source: Node,
        target: Node,
        weights_on: Literal["edges", "nodes"] = "edges",
    ) -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "ShortestPath")
        one_of("weights_on", weights_on, ("edges", "nodes"))
        for name, node in (("source", source), ("target", target)):
            if node not in graph:
                raise ValueError(f"{name} {node!r} is not a node of the graph")
        self.source, self.target, self.weights_on = source, target, weights_on
        self.directed: bool = graph.is_directed()
        self.nodes: list[Node] = list(graph.nodes)
        self.edges: list[Edge] = list(graph.edges)
        self.n_vars = len(self.edges) if weights_on == "edges" else len(self.nodes)
        index = {node: i for i, node in enumerate(self.nodes)}
        n = len(self.nodes)
        eu = np.array([index[u] for u, _ in self.edges], dtype=np.int64)
        ev = np.array([index[v] for _, v in self.edges], dtype=np.int64)
        eid = np.arange(len(self.edges), dtype=np.int64)
        if self.directed:
            tail, head, arc_edge = eu, ev, eid
        else:  # two opposite arcs per edge (one for a self-loop)
            two = eu != ev
            tail = np.concatenate([eu, ev[two]])
            head = np.concatenate([ev, eu[two]])
            arc_edge = np.concatenate([eid, eid[two]])

        # Nodes on some source → target walk: reachable from s and reaching t (weight-independent).
        s, t = index[source], index[target]
        structure = sp.csr_matrix((np.ones(len(tail)), (tail, head)), shape=(n, n))
        fwd = np.zeros(n, dtype=bool)
        fwd[csgraph.breadth_first_order(structure, s, directed=True, return_predecessors=False)] = True
        bwd = np.zeros(n, dtype=bool)
        bwd[csgraph.breadth_first_order(structure.T.tocsr(), t, directed=True, return_predecessors=False)] = (
            True
        )
        relevant = fwd & bwd
        self._feasible = bool(relevant[t])
        keep = relevant[tail] & relevant[head]
        loop = keep & (tail == head)
        arcs = keep & (tail != head)

        self._nodes_g = np.flatnonzero(relevant)  # local node → global node       [n_r]
        local = np.full(n, -1, dtype=np.int64)
        local[self._nodes_g] = np.arange(len(self._nodes_g))
        self._s, self._t = int(local[s]), int(local[t])
        self._n = len(self._nodes_g)
        tail_g, head_g = tail[arcs], head[arcs]  # kept arcs, global node ids        [a]
        self._tail_g, self._head_g, self._arc_edge = tail_g, head_g, arc_edge[arcs]
        self._tail, self._head = local[tail_g], local[head_g]  # local node ids     [a]
        self._loop_w = arc_edge[loop] if weights_on == "edges" else tail[loop]  # self-loop costs
        self._perm, self._indices, self._indptr = _csr_order(self._tail, self._head, self._n)
        # arc (local tail, local head) → kept-arc id, to read paths off SciPy's predecessors
        self._arc_of: dict[tuple[int, int], int] = {
            (int(a), int(b)): k for k, (a, b) in enumerate(zip(self._tail, self._head))
        }

        self._plan: LevelPlan | None = None  # the DAG programme, when the relevant part is acyclic
        if self.directed and self._feasible:
            try:
                self._plan = LevelPlan(self._n, self._tail, self._head, self._s, self._t)
            except ValueError:  # a cycle: Dijkstra or Bellman-Ford
                pass
        self.is_dag = self._plan is not None
        """Whether the part of the graph on ``source → target`` walks is acyclic (the DAG programme)."""

        self.expected_nonzeros: float | None = None
        if self._feasible:
            hops = int(nx.shortest_path_length(graph, source, target))
            k = hops if weights_on == "edges" else hops + 1
            self.expected_nonzeros = float(k) if k > 0 else None

    # ---- per-call arc costs -------------------------------------------------------------------

    def _arc_costs(self, w: np.ndarray) -> np.ndarray:
        """Cost of each kept arc  [..., a]  (node weights: the head's weight; reweighted if undirected)."""
        if self.weights_on == "edges":
            return w[..., self._arc_edge]
        if self.directed:
            return w[..., self._head_g]  # entering v costs w_v; the source's weight is a constant
        return (w[..., self._tail_g] + w[..., self._head_g]) * 0.5  # Johnson potential h = w/2   [..., a]

    def _solve_many(self, w: np.ndarray) -> np.ndarray:
        """Batches, same states as ``solve`` row by row (ties included).

        A DAG runs the level DP on all rows at once. Otherwise rows whose arc costs are all ≥ 0 go
        16 at a time through one SciPy Dijkstra call (`_block_dijkstra`); the others are
        solved one by one (Bellman-Ford).
        """
        if not (self._feasible and len(self._tail)):
            return super()._solve_many(w)  # no path (row-tagged errors), or an empty one
        if self._loop_w.size:
            bad = np.flatnonzero(w[:, self._loop_w].min(axis=1) < 0)
            if bad.size:
                raise NegativeCycleError(
                    "a self-loop of negative cost lies on a source → target walk", rows=bad.tolist()
                )
        cost = self._arc_costs(w)  # [B, a]
        if self._plan is not None:
            return self._states(self._plan.path(cost))
        negative = cost.min(axis=1) < 0  # [B]
        if not self.directed and negative.any():
            raise NegativeCycleError(self._two_cycle_message(), rows=np.flatnonzero(negative).tolist())
        out = np.empty(w.shape, dtype=np.float64)
        easy = np.flatnonzero(~negative)
        csr_cost = cost[easy][:, self._perm]  # CSR order   [B', a]
        for start in range(0, len(easy), _GRID_CHUNK):
            chunk = easy[start : start + _GRID_CHUNK]
            pred = _block_dijkstra(
                self._indices, self._indptr, self._n, csr_cost[start : start + _GRID_CHUNK], self._s
            )
            for row, row_pred in zip(chunk.tolist(), pred.tolist()):
                try:
                    out[row] = self._state(self._trace(row_pred))
                except ImleSolversError as err:
                    raise err.with_rows([row]) from None
        for row in np.flatnonzero(negative).tolist():  # Bellman-Ford, one row at a time
            try:
                out[row] = self._solve(w[row])
            except ImleSolversError as err:
                raise err.with_rows([row]) from None
        return out

    def _two_cycle_message(self) -> str:
        what = (
            "an edge of negative cost"
            if self.weights_on == "edges"
            else ("two adjacent nodes whose weights sum below 0")
        )
        return f"undirected graph with {what} on a source → target walk: a negative 2-cycle"

    def _solve(self, w: np.ndarray) -> np.ndarray:
        if not self._feasible:
            raise InfeasibleError(f"no path from {self.source!r} to {self.target!r}")
        if self._loop_w.size and float(w[self._loop_w].min()) < 0:
            raise NegativeCycleError("a self-loop of negative cost lies on a source → target walk")
        cost = self._arc_costs(w)  # [a]
        if self._plan is not None:
            return self._states(self._plan.path(cost[None]))[0]  # the DAG programme   [m]
        if not self.directed and cost.size and float(cost.min()) < 0:
            raise NegativeCycleError(self._two_cycle_message())
        return self._state(self._scipy_path(cost))

    def _state(self, arcs: list[int]) -> np.ndarray:
        state = np.zeros(self.n_vars, dtype=np.float64)
        if self.weights_on == "edges":
            state[self._arc_edge[arcs]] = 1.0
        else:
            state[self._head_g[arcs]] = 1.0
            state[self._nodes_g[self._s]] = 1.0
        return state

    # ---- general graphs: SciPy Dijkstra / Bellman-Ford ------------------------------------------

    def _matrix(self, cost: np.ndarray) -> sp.csr_matrix:
        """This thread's CSR matrix of the kept arcs, its data overwritten with ``cost``."""
        mat = getattr(self._local, "matrix", None)
        if mat is None:
            mat = sp.csr_matrix(
                (np.zeros(len(self._perm)), self._indices.copy(), self._indptr.copy()),
                shape=(self._n, self._n),
            )
            self._local.matrix = mat
        np.take(cost, self._perm, out=mat.data, mode="clip")  # CSR order (clip: unbuffered; ids valid)
        return mat

    def _scipy_path(self, cost: np.ndarray) -> list[int]:
        if not cost.size:  # source == target, alone on the way
            return []
        mat = self._matrix(cost)
        if float(cost.min()) >= 0:
            _, pred, _ = csgraph.dijkstra(
                mat, directed=True, indices=self._s, return_predecessors=True, min_only=True
            )
        else:
            try:
                _, pred = csgraph.bellman_ford(mat, directed=True, indices=self._s, return_predecessors=True)
            except csgraph.NegativeCycleError:
                raise NegativeCycleError(
                    f"a negative cycle lies on a walk from {self.source!r} to {self.target!r}"
                ) from None
        return self._trace(pred.tolist())

    def _trace(self, pred: Sequence[int]) -> list[int]:
        arcs: list[int] = []
        v = self._t
        while v != self._s:
            u = pred[v]
            if u < 0 or len(arcs) > self._n:  # cannot happen without a (rounding) negative cycle
                raise NegativeCycleError("predecessor cycle: a zero-cost cycle made negative by rounding")
            arcs.append(self._arc_of[(u, v)])
            v = u
        return arcs

    # ---- DAGs: the level programme ---------------------------------------------------------------

    def _states(self, arcs: np.ndarray) -> np.ndarray:
        """States of ``[B, a]`` kept-arc indicators: the edges of each path, or its nodes.  [B, m]"""
        if self.weights_on == "edges":
            state = np.zeros((arcs.shape[0], self.n_vars), dtype=np.float64)
            state[:, self._arc_edge] = arcs  # each kept arc is one edge
            return state
        state = np.zeros((arcs.shape[0], self.n_vars), dtype=np.float64)
        rows, ks = np.nonzero(arcs)
        state[rows, self._head_g[ks]] = 1.0  # the path's nodes: the heads of its arcs, and the source
        state[:, self._nodes_g[self._s]] = 1.0
        return state

    def __repr__(self) -> str:
        return (
            f"ShortestPath({self.source!r} → {self.target!r}, weights_on={self.weights_on!r}, "
            f"n_vars={self.n_vars}, dag={self.is_dag})"
        )
