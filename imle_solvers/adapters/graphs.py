"""Graph MAP oracles: shortest paths, grid paths, matchings and spanning trees (NetworkX / SciPy).

Each oracle turns a weight vector, ordered by a documented edge (or node) order, into the 0/1
indicator of an optimal structure — the MAP state ``argmax_{z ∈ C} ⟨z, θ⟩`` of the paper (eq. 2-3)
for the polytope ``C`` of paths, matchings or spanning trees (Example 3: a shortest path is the
MAP state of the *costs*, ``θ = −c``).

* [`ShortestPath`][imle_solvers.ShortestPath] — source → target path in any NetworkX graph, edge or node
weights
  (``sense="min"``), correct for negative weights (topological DP on DAGs, Bellman-Ford otherwise);
* [`GridShortestPath`][imle_solvers.GridShortestPath] — top-left → bottom-right path on a vertex-weighted
grid, the setting of
  the Warcraft experiment (Vlastelica et al., ICLR 2020; paper sec. 5), batched through SciPy;
* [`Matching`][imle_solvers.Matching] — maximum-weight matching (``sense="max"``);
* [`SpanningTree`][imle_solvers.SpanningTree] — minimum / maximum spanning tree or forest.

Every oracle is picklable (a process pool ships it to its workers); per-thread scratch objects
(SciPy matrices, NetworkX graphs) are rebuilt on first use in each thread and never pickled.
NetworkX is imported lazily through [`imle_solvers.errors.require`][imle_solvers.errors.require] (extra
``graphs``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidWeightsError,
    NegativeCycleError,
    require,
)
from ..oracle import MapOracle

__all__ = ["GridShortestPath", "Matching", "ShortestPath", "SpanningTree"]

Node = Hashable
Edge = tuple[Any, Any]

#: batch rows solved by one SciPy Dijkstra call (`_block_dijkstra`; one heap per row).
_GRID_CHUNK = 16
#: a DAG whose relevant part has at least this many arcs per topological level uses the
#: level-vectorised numpy DP; smaller or deeper DAGs use the plain Python DP (less call overhead).
_DAG_ARCS_PER_LEVEL = 80


def _networkx() -> Any:
    return require("networkx", "graphs")


def _check_graph(graph: Any, who: str, *, undirected: bool = False) -> None:
    """Reject what an adapter cannot take, before anything is built."""
    nx = _networkx()
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"{who} expects a networkx graph, got {type(graph).__name__}")
    if graph.is_multigraph():
        raise ValueError(f"{who} does not take multigraphs: keep one edge per node pair (nx.Graph(G))")
    if undirected and graph.is_directed():
        raise ValueError(f"{who} needs an undirected graph; convert with G.to_undirected()")
    if graph.number_of_edges() == 0:
        raise ValueError(f"{who} needs a graph with at least one edge (a weight vector of length ≥ 1)")


class _GraphOracle(MapOracle):
    """Shared plumbing: validate each batch once, solve rows via `_solve`, pickle without scratch."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _solve(self, w: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` instance (weights in `sense`); returns the ``(m,)`` 0/1 state."""
        w = weights
        fast = type(w) is np.ndarray and w.dtype == np.float64 and w.shape == (self.n_vars,)
        if not (fast and math.isfinite(w.dot(w))):  # finite ⟨w, w⟩ ⇒ no NaN/inf: skip the full check
            w = self.validate(weights)
            if w.ndim != 1:
                raise InvalidWeightsError(f"solve takes one (m,) weight vector, got shape {w.shape}")
        return self._solve(w)

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        """Solve ``(B, m)`` weights; every row is validated before the first solve."""
        w = self.validate(weights)
        if w.ndim != 2:
            raise InvalidWeightsError(f"solve_batch takes (B, m) weights, got shape {w.shape}")
        return self._solve_many(w)

    def _solve_many(self, w: np.ndarray) -> np.ndarray:
        return self._solve_rows(w, range(w.shape[0]), self._solve)  # row-tagged errors

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_local", None)  # per-thread scratch: rebuilt on first use after unpickling
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()


def _csr_order(tail: np.ndarray, head: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arcs sorted by (tail, head): returns ``perm`` (arc ids in CSR order), ``indices`` and ``indptr``."""
    perm = np.lexsort((head, tail))
    indptr = np.searchsorted(tail[perm], np.arange(n + 1)).astype(np.int32)
    return perm, head[perm].astype(np.int32), indptr


def _block_dijkstra(indices: np.ndarray, indptr: np.ndarray, n: int, cost: np.ndarray, source: int
                    ) -> np.ndarray:
    """Dijkstra for ``K`` cost rows of one CSR structure in a single SciPy call.  → ``[K, n]`` predecessors

    The rows become the diagonal blocks of a ``K·n``-node graph and SciPy runs one search (with its own
    heap) per block source, so every row gets exactly what a one-row call gives it, ties included.
    Predecessors are local node ids, ``< 0`` for none.
    """
    k, a = cost.shape
    offset = np.arange(k)[:, None]
    block_indices = (indices[None, :] + n * offset).ravel()  # block b's nodes are b·n + j      [K·a]
    block_indptr = np.concatenate([[0], (indptr[None, 1:] + a * offset).ravel()])  # [K·n + 1]
    mat = sp.csr_matrix((cost.ravel(), block_indices, block_indptr), shape=(k * n, k * n))
    _, pred = csgraph.dijkstra(mat, directed=True, indices=source + n * np.arange(k),
                               return_predecessors=True)  # [K, K·n]
    own = pred.reshape(k, k, n)[np.arange(k), np.arange(k)]  # each search's own block   [K, n]
    return np.where(own >= 0, own - n * offset, -1)


# --------------------------------------------------------------------------------------------------
# Shortest path in a general graph
# --------------------------------------------------------------------------------------------------


class ShortestPath(_GraphOracle):
    """Shortest ``source → target`` path in a NetworkX graph as a MAP oracle (paper, Example 3).

    ``MAP(θ)`` with ``θ = −c`` is the indicator of a path minimising the total cost ``⟨z, c⟩``, so the
    layer takes **costs** (``sense="min"``).

    Parameters
    ----------
    graph
        A ``networkx.Graph`` or ``networkx.DiGraph`` (not a multigraph). Only its structure is used;
        weights come with each call.
    source, target
        Nodes of ``graph``. ``source == target`` gives the empty path (the one-node path for node
        weights).
    weights_on
        ``"edges"``: one cost per edge, ordered as `edges` (``list(graph.edges)``); the state
        is the edge indicator of the path. ``"nodes"``: one cost per node, ordered as `nodes`
        (``list(graph.nodes)``); a path costs the sum of the weights of all its nodes, ``source`` and
        ``target`` included, and the state is its node indicator.

    Notes
    -----
    Only the part of the graph that lies on some ``source → target`` walk matters (nodes reachable
    from ``source`` that reach ``target``); it is found once, here. Per call:

    * **DAG** (that part acyclic): topological dynamic programme, exact for any weights, ``O(V + E)``;
    * **directed, all arc costs ≥ 0**: Dijkstra (``scipy.sparse.csgraph``), ``O(E log V)``;
    * **directed, some cost < 0**: Bellman-Ford (``scipy.sparse.csgraph``), ``O(V E)``;
    * **undirected**: each edge is two opposite arcs, so an edge of negative cost is a negative
      2-cycle (walk it back and forth) and raises
      [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. With node weights the
      cycle ``u → v → u`` costs ``w_u + w_v``; when no adjacent pair sums below 0 the potential
      ``h = w / 2`` (Johnson reweighting) makes every arc cost ``(w_u + w_v) / 2 ≥ 0`` and Dijkstra is
      exact, negative node weights included.

    A negative cycle on the way (reachable from ``source`` and reaching ``target``) makes the shortest
    walk unbounded: [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. Otherwise the returned
    path is simple and optimal
    (within floating-point rounding; cycles of total cost zero that rounding makes slightly negative
    are reported as negative). No path at all: [`InfeasibleError`][imle_solvers.errors.InfeasibleError].

    ``solve_batch`` gives every row the state ``solve`` gives it, faster: a DAG batch runs the DP on
    all rows at once; otherwise rows with non-negative arc costs go 16 at a time through one SciPy
    Dijkstra call.

    Ties are handled deterministically: the same weights always give the same state. On a DAG the
    predecessor of each node is the optimal in-arc that comes first in `edges`; otherwise it is
    SciPy's (deterministic) choice.

    ``expected_nonzeros`` is the number of edges (nodes, with node weights) of a shortest path under
    unit weights, i.e. the hop distance (+ 1 for nodes); ``None`` when that is 0 or no path exists.

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
        if weights_on not in ("edges", "nodes"):
            raise ValueError(f"weights_on must be 'edges' or 'nodes', got {weights_on!r}")
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
        bwd[csgraph.breadth_first_order(structure.T.tocsr(), t, directed=True,
                                        return_predecessors=False)] = True
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

        self.is_dag = False
        if self.directed and self._feasible:
            sub = nx.DiGraph()
            sub.add_nodes_from(range(self._n))
            sub.add_edges_from(zip(self._tail.tolist(), self._head.tolist()))
            self.is_dag = bool(nx.is_directed_acyclic_graph(sub))
            if self.is_dag:
                self._build_dag(list(nx.topological_sort(sub)))

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
        levels = len(getattr(self, "_dag_levels", ())) or 1
        vectorised_dag = self.is_dag and w.shape[0] * len(self._tail) >= _DAG_ARCS_PER_LEVEL * levels
        if not (vectorised_dag or (self._feasible and not self.is_dag and len(self._tail))):
            return super()._solve_many(w)
        if self._loop_w.size:
            bad = np.flatnonzero(w[:, self._loop_w].min(axis=1) < 0)
            if bad.size:
                raise NegativeCycleError("a self-loop of negative cost lies on a source → target walk",
                                         rows=bad.tolist())
        cost = self._arc_costs(w)  # [B, a]
        if vectorised_dag:
            return self._dag_states_numpy(cost)
        negative = cost.min(axis=1) < 0  # [B]
        if not self.directed and negative.any():
            raise NegativeCycleError(self._two_cycle_message(), rows=np.flatnonzero(negative).tolist())
        out = np.empty(w.shape, dtype=np.float64)
        easy = np.flatnonzero(~negative)
        csr_cost = cost[easy][:, self._perm]  # CSR order   [B', a]
        for start in range(0, len(easy), _GRID_CHUNK):
            chunk = easy[start:start + _GRID_CHUNK]
            pred = _block_dijkstra(self._indices, self._indptr, self._n,
                                   csr_cost[start:start + _GRID_CHUNK], self._s)
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
        what = "an edge of negative cost" if self.weights_on == "edges" else (
            "two adjacent nodes whose weights sum below 0")
        return f"undirected graph with {what} on a source → target walk: a negative 2-cycle"

    def _solve(self, w: np.ndarray) -> np.ndarray:
        if not self._feasible:
            raise InfeasibleError(f"no path from {self.source!r} to {self.target!r}")
        if self._loop_w.size and float(w[self._loop_w].min()) < 0:
            raise NegativeCycleError("a self-loop of negative cost lies on a source → target walk")
        cost = self._arc_costs(w)  # [a]
        if self.is_dag:
            arcs = self._dag_path(cost)
        else:
            if not self.directed and cost.size and float(cost.min()) < 0:
                raise NegativeCycleError(self._two_cycle_message())
            arcs = self._scipy_path(cost)
        return self._state(arcs)

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
            _, pred, _ = csgraph.dijkstra(mat, directed=True, indices=self._s,
                                          return_predecessors=True, min_only=True)
        else:
            try:
                _, pred = csgraph.bellman_ford(mat, directed=True, indices=self._s,
                                               return_predecessors=True)
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

    # ---- DAGs: topological dynamic programme -------------------------------------------------

    def _build_dag(self, order: list[int]) -> None:
        """Precompute, in topological order, each node's in-arcs (first in `edges` first)."""
        by_head: list[list[int]] = [[] for _ in range(self._n)]
        for k in np.lexsort((self._arc_edge, self._head)).tolist():
            by_head[int(self._head[k])].append(k)
        tail = self._tail.tolist()
        self._dag_in = [(v, [(k, tail[k]) for k in by_head[v]]) for v in order if v != self._s]
        # level = longest hop distance from s; a level's in-arcs all come from lower levels
        level = np.zeros(self._n, dtype=np.int64)
        for v in order:
            for k in by_head[v]:
                level[v] = max(level[v], level[tail[k]] + 1)
        sentinel_arc = len(self._tail)  # padding arc: from a node at +inf, cost 0
        self._dag_levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for lev in range(1, int(level.max(initial=0)) + 1):
            nodes = np.flatnonzero(level == lev)
            width = max(len(by_head[v]) for v in nodes)
            pad = np.full((len(nodes), width), sentinel_arc, dtype=np.int64)
            for r, v in enumerate(nodes.tolist()):
                pad[r, : len(by_head[v])] = by_head[v]
            self._dag_levels.append((nodes, pad, np.arange(len(nodes))))
        self._dag_tail_ext = np.append(self._tail, self._n)  # sentinel tail: node n (dist +inf)
        self._dag_vectorised = len(self._tail) >= _DAG_ARCS_PER_LEVEL * max(len(self._dag_levels), 1)

    def _dag_path(self, cost: np.ndarray) -> list[int]:
        pred = self._dag_pred_numpy(cost) if self._dag_vectorised else self._dag_pred_python(cost)
        arcs: list[int] = []
        v = self._t
        while v != self._s:
            k = pred[v]
            arcs.append(k)
            v = int(self._tail[k])
        return arcs

    def _dag_pred_python(self, cost: np.ndarray) -> list[int]:
        """dist_v = min_{(u,v)} dist_u + c_uv in topological order; first minimal in-arc wins."""
        c = cost.tolist()
        dist = [0.0] * self._n
        pred = [-1] * self._n
        for v, ins in self._dag_in:
            best, arc = float("inf"), -1
            for k, u in ins:
                d = dist[u] + c[k]
                if d < best:
                    best, arc = d, k
            dist[v], pred[v] = best, arc
        return pred

    def _dag_pred_numpy(self, cost: np.ndarray) -> list[int]:
        """The same DP, one topological level at a time (all nodes of a level in one numpy step)."""
        dist = np.zeros(self._n + 1)
        dist[self._n] = np.inf  # sentinel node behind the padding arcs
        cost_ext = np.append(cost, 0.0)  # [a + 1]
        pred = np.full(self._n, -1, dtype=np.int64)
        for nodes, pad, rows in self._dag_levels:
            cand = dist[self._dag_tail_ext[pad]] + cost_ext[pad]  # dist_u + c_uv   [n_L, deg]
            j = cand.argmin(axis=1)  # first minimum = first in-arc in edge order     [n_L]
            dist[nodes] = cand[rows, j]
            pred[nodes] = pad[rows, j]
        return pred.tolist()

    def _dag_states_numpy(self, cost: np.ndarray) -> np.ndarray:
        """The level DP for ``B`` rows at once, then all ``B`` paths traced back together.  [B, m]"""
        b, n = cost.shape[0], self._n
        dist = np.zeros((b, n + 1))
        dist[:, n] = np.inf  # sentinel node behind the padding arcs
        cost_ext = np.concatenate([cost, np.zeros((b, 1))], axis=1)  # [B, a + 1]
        pred = np.full((b, n), -1, dtype=np.int64)
        for nodes, pad, rows in self._dag_levels:
            cand = dist[:, self._dag_tail_ext[pad]] + cost_ext[:, pad]  # dist_u + c_uv   [B, n_L, deg]
            j = cand.argmin(axis=2)  # first minimum = first in-arc in edge order          [B, n_L]
            dist[:, nodes] = np.take_along_axis(cand, j[..., None], axis=2)[..., 0]
            pred[:, nodes] = pad[rows[None, :], j]
        out_index = self._arc_edge if self.weights_on == "edges" else self._head_g
        state = np.zeros((b, self.n_vars), dtype=np.float64)
        if self.weights_on == "nodes":
            state[:, self._nodes_g[self._s]] = 1.0
        every = np.arange(b)
        cur = np.full(b, self._t, dtype=np.int64)  # walk all B predecessor chains back at once
        while (active := every[cur != self._s]).size:
            k = pred[active, cur[active]]  # arc into the current node                     [B']
            state[active, out_index[k]] = 1.0
            cur[active] = self._tail[k]
        return state

    def __repr__(self) -> str:
        return (f"ShortestPath({self.source!r} → {self.target!r}, weights_on={self.weights_on!r}, "
                f"n_vars={self.n_vars}, dag={self.is_dag})")


# --------------------------------------------------------------------------------------------------
# Vertex-weighted grid (Warcraft)
# --------------------------------------------------------------------------------------------------


class GridShortestPath(_GraphOracle):
    """Shortest top-left → bottom-right path on a vertex-weighted grid (Warcraft, Vlastelica et al. 2020).

    The setting of the paper's Warcraft experiment (sec. 5): weights and states are the ``H·W`` cells
    in row-major order (cell ``(r, c)`` is entry ``r·W + c``); a path moves between 8- (or 4-)
    neighbouring cells and costs the sum of the weights of the cells it visits, both corners
    included. The layer takes **costs** (``sense="min"``); the state is the 0/1 mask of the path cells.

    Parameters
    ----------
    height, width
        Grid size ``H × W`` (``≥ 1``).
    neighbourhood
        ``8`` (king moves, as in Warcraft) or ``4`` (rook moves).

    Notes
    -----
    *Negative weights.* Any cycle's cost is half the sum of its consecutive pair sums
    ``w_u + w_v``, so the grid has a negative cycle iff two adjacent cells sum below 0: then
    [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. Otherwise the potential ``h = w / 2``
    (Johnson reweighting) turns the
    problem into an undirected graph with edge costs ``(w_u + w_v) / 2 ≥ 0`` whose paths cost
    ``path cost − (w_s + w_t) / 2``: Dijkstra on it (with the costs doubled, ``w_u + w_v``) is exact,
    negative cell weights included. (Rows without a negative cell take the cheaper direct form: arc
    ``u → v`` costs ``w_v``.)

    *Speed.* The arc structure is built once; a call only fills the arc costs of a per-thread SciPy
    matrix and runs ``scipy.sparse.csgraph.dijkstra``. `solve_batch` stacks up to 16 rows into
    one block-diagonal graph and solves them in one SciPy call (each row keeps its own heap, so rows
    are solved exactly as by `solve`, ties included).

    Ties are broken deterministically by SciPy's Dijkstra; ``solve`` and every row of ``solve_batch``
    agree. ``expected_nonzeros`` is the number of cells of a shortest path under unit weights:
    ``max(H, W)`` for 8 neighbours, ``H + W − 1`` for 4.

    Examples
    --------
    >>> import numpy as np
    >>> grid = GridShortestPath(3, 3)
    >>> w = np.array([1, 9, 9,
    ...               1, 9, 9,
    ...               9, 1, 1.0])
    >>> grid.solve(w).reshape(3, 3).astype(int).tolist()
    [[1, 0, 0], [1, 0, 0], [0, 1, 1]]
    """

    sense = "min"

    def __init__(self, height: int, width: int, neighbourhood: Literal[4, 8] = 8) -> None:
        super().__init__()
        for name, val in (("height", height), ("width", width)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {val!r}")
        if neighbourhood not in (4, 8):
            raise ValueError(f"neighbourhood must be 4 or 8, got {neighbourhood!r}")
        self.height, self.width, self.neighbourhood = int(height), int(width), int(neighbourhood)
        h, w = self.height, self.width
        self.n_vars = h * w
        self.expected_nonzeros = float(max(h, w) if neighbourhood == 8 else h + w - 1)
        steps = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if neighbourhood == 8 else [])
        r, c = np.divmod(np.arange(h * w), w)
        eu_list, ev_list = [], []
        for dr, dc in steps:  # undirected edges u < v                                   [e]
            ok = (r + dr < h) & (c + dc >= 0) & (c + dc < w)
            eu_list.append(np.flatnonzero(ok))
            ev_list.append((r[ok] + dr) * w + c[ok] + dc)
        eu, ev = np.concatenate(eu_list), np.concatenate(ev_list)
        tail, head = np.concatenate([eu, ev]), np.concatenate([ev, eu])  # both directions  [a]
        perm, self._indices, self._indptr = _csr_order(tail, head, h * w)
        self._tail, self._head = tail[perm], head[perm]  # arcs in CSR order           [a]

    @property
    def nodes(self) -> list[tuple[int, int]]:
        """The cells ``(row, col)`` in row-major order: the order of weights and states."""
        return [(i // self.width, i % self.width) for i in range(self.n_vars)]

    @property
    def edges(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Adjacent cell pairs (each once, CSR order); weights live on the cells, not here."""
        nodes = self.nodes
        return [(nodes[a], nodes[b]) for a, b in zip(self._tail.tolist(), self._head.tolist()) if a < b]

    def _costs(self, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Arc costs in CSR order, per row; raises
        [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError] naming the bad rows.  [..., a]

        A row with no negative cell uses ``c(u → v) = w_v`` (entering a cell costs its weight; the
        source's weight is a constant). A row with a negative cell uses the reweighted ``w_u + w_v``
        (twice ``(w_u + w_v)/2``: scaling every arc by 2 changes no shortest path), and has a negative
        cycle iff one of these is below 0. The choice depends on the row's weights only, so ``solve``
        and every ``solve_batch`` row agree.
        """
        nonneg = w.min(axis=-1) >= 0  # [...]
        if w.ndim == 1 and nonneg:
            return np.take(w, self._head, out=out, mode="clip")  # c(u → v) = w_v   [a]
        cost = np.take(w, self._tail, axis=-1, out=out, mode="clip")  # clip: unbuffered
        cost += np.take(w, self._head, axis=-1)  # c(u → v) = w_u + w_v   [..., a]
        negative = (cost.min(axis=-1) < 0) & ~nonneg
        if negative.any():
            raise NegativeCycleError(
                "two adjacent cells have weights summing below 0: a negative cycle (u → v → u)",
                rows=np.flatnonzero(negative).tolist() if cost.ndim == 2 else None,
            )
        if w.ndim == 2 and nonneg.any():
            cost[nonneg] = w[nonneg][:, self._head]
        return cost

    def _solve(self, w: np.ndarray) -> np.ndarray:
        state = np.zeros(self.n_vars, dtype=np.float64)
        if self.n_vars == 1:
            state[0] = 1.0
            return state
        mat = getattr(self._local, "matrix", None)
        if mat is None:  # this thread's matrix: structure fixed, data refilled per call
            mat = sp.csr_matrix((np.zeros(len(self._indices)), self._indices.copy(), self._indptr.copy()),
                                shape=(self.n_vars, self.n_vars))
            self._local.matrix = mat
        if w.min() >= 0:  # the common case, inlined: c(u → v) = w_v, written in place   [a]
            np.take(w, self._head, out=mat.data, mode="clip")
        else:
            self._costs(w, out=mat.data)
        _, pred_arr, _ = csgraph.dijkstra(mat, directed=True, indices=0, return_predecessors=True,
                                          min_only=True)  # min_only: the cheaper 1-D code path
        v = self.n_vars - 1
        path = [v]
        while v != 0:
            v = pred_arr.item(v)
            path.append(v)
        state[path] = 1.0
        return state

    def _solve_many(self, w: np.ndarray) -> np.ndarray:
        out = np.zeros(w.shape, dtype=np.float64)
        if self.n_vars == 1:  # the single cell is the path, whatever its weight
            out[:, 0] = 1.0
            return out
        cost = self._costs(w)  # checks every row before any solve                 [B, a]
        for start in range(0, w.shape[0], _GRID_CHUNK):
            stop = min(start + _GRID_CHUNK, w.shape[0])
            out[start:stop] = self._solve_block(cost[start:stop])
        return out

    def _solve_block(self, cost: np.ndarray) -> np.ndarray:
        """``K`` rows in one SciPy call (`_block_dijkstra`), paths read off all at once.  [K, V]"""
        pred = _block_dijkstra(self._indices, self._indptr, self.n_vars, cost, 0)  # [K, V]
        k = cost.shape[0]
        rows = np.arange(k)
        cur = np.full(k, self.n_vars - 1)  # every row's bottom-right cell                  [K]
        state = np.zeros((k, self.n_vars), dtype=np.float64)
        state[rows, cur] = 1.0
        while (active := rows[cur != 0]).size:  # walk the K predecessor chains back together
            cur[active] = pred[active, cur[active]]
            state[active, cur[active]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"GridShortestPath({self.height}×{self.width}, neighbourhood={self.neighbourhood})"


# --------------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------------


class Matching(_GraphOracle):
    """Maximum-weight matching of an undirected graph (bipartite or general) as a MAP oracle.

    ``MAP(θ) = argmax_z ⟨z, θ⟩`` over edge indicators of matchings (paper, eq. 3), solved exactly by
    NetworkX's blossom algorithm (Edmonds; Galil 1986), ``O(V³)``. The layer takes **scores**
    (``sense="max"``).

    Parameters
    ----------
    graph
        An undirected ``networkx.Graph``; weights are ordered as `edges` (``list(graph.edges)``).
        Self-loops are allowed in the order but never matched.
    maxcardinality
        ``True``: the best among the matchings of maximum cardinality (edges of negative score are
        then taken when they enlarge the matching). ``False``: edges of negative score are never
        worth taking, and zero-score edges may or may not be.

    Notes
    -----
    Ties are deterministic (the same weights give the same state: every thread solves on an
    identically built graph). ``expected_nonzeros`` is the size of a maximum-cardinality matching.
    Exact for integer-valued weights; with general floats NetworkX's blossom algorithm is exact up
    to rounding.
    """

    sense = "max"

    def __init__(self, graph: Any, maxcardinality: bool = False) -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "Matching", undirected=True)
        self.maxcardinality = bool(maxcardinality)
        self.nodes: list[Node] = list(graph.nodes)
        self.edges: list[Edge] = list(graph.edges)
        self.n_vars = len(self.edges)
        self._proper = [i for i, (u, v) in enumerate(self.edges) if u != v]  # non-loop edges
        self._edge_of: dict[tuple[Any, Any], int] = {}
        for i in self._proper:
            u, v = self.edges[i]
            self._edge_of[(u, v)] = self._edge_of[(v, u)] = i
        size = len(nx.max_weight_matching(self._build_graph(), maxcardinality=True))
        self.expected_nonzeros = float(size) if size > 0 else None

    def _build_graph(self) -> Any:
        nx = _networkx()
        graph = nx.Graph()
        graph.add_nodes_from(self.nodes)
        graph.add_edges_from(self.edges[i] for i in self._proper)
        return graph

    def _weighted(self) -> tuple[Any, list[dict[str, float]]]:
        """This thread's graph and its edge attribute dicts, in `edges` order (non-loops)."""
        cached = getattr(self._local, "graph", None)
        if cached is None:
            graph = self._build_graph()
            cached = (graph, [graph.edges[self.edges[i]] for i in self._proper])
            self._local.graph = cached
        return cached  # type: ignore[no-any-return]

    def _solve(self, w: np.ndarray) -> np.ndarray:
        nx = _networkx()
        graph, attrs = self._weighted()
        for attr, x in zip(attrs, w[self._proper].tolist()):
            attr["weight"] = x
        mate = nx.max_weight_matching(graph, maxcardinality=self.maxcardinality, weight="weight")
        state = np.zeros(self.n_vars, dtype=np.float64)
        state[[self._edge_of[(u, v)] for u, v in mate]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"Matching(n_vars={self.n_vars}, maxcardinality={self.maxcardinality})"


# --------------------------------------------------------------------------------------------------
# Spanning tree
# --------------------------------------------------------------------------------------------------


class SpanningTree(_GraphOracle):
    """Minimum (or maximum) spanning tree — a spanning forest if disconnected — as a MAP oracle.

    The edge indicators of spanning forests are the bases of the graphic matroid, so Kruskal's greedy
    algorithm is an exact MAP oracle (paper, eq. 3) for any real weights, negative ones included.

    Parameters
    ----------
    graph
        An undirected ``networkx.Graph``; weights are ordered as `edges` (``list(graph.edges)``).
        Self-loops are allowed in the order but never chosen.
    kind
        ``"min"`` (weights are costs, ``sense="min"``) or ``"max"`` (scores, ``sense="max"``).

    Notes
    -----
    Per call: a stable sort of the weights plus a union-find pass, ``O(E log E)``. Ties go to the edge
    that comes first in `edges` (stable sort), so the same weights always give the same tree.
    ``expected_nonzeros`` is the number of edges of every spanning forest: ``V − #components``.
    """

    def __init__(self, graph: Any, kind: Literal["min", "max"] = "min") -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "SpanningTree", undirected=True)
        if kind not in ("min", "max"):
            raise ValueError(f"kind must be 'min' or 'max', got {kind!r}")
        self.kind = kind
        self.sense = kind
        self.nodes: list[Node] = list(graph.nodes)
        self.edges: list[Edge] = list(graph.edges)
        self.n_vars = len(self.edges)
        index = {node: i for i, node in enumerate(self.nodes)}
        proper = [i for i, (u, v) in enumerate(self.edges) if u != v]
        self._proper = np.array(proper, dtype=np.int64)
        self._u = [index[self.edges[i][0]] for i in proper]
        self._v = [index[self.edges[i][1]] for i in proper]
        self._size = len(self.nodes) - nx.number_connected_components(graph)
        self.expected_nonzeros = float(self._size) if self._size > 0 else None

    def _solve(self, w: np.ndarray) -> np.ndarray:
        state = np.zeros(self.n_vars, dtype=np.float64)
        key = w[self._proper] if self.kind == "min" else -w[self._proper]
        parent = list(range(len(self.nodes)))
        chosen: list[int] = []
        for j in np.argsort(key, kind="stable").tolist():  # Kruskal; ties: first in .edges
            a, b = self._u[j], self._v[j]
            while parent[a] != a:
                parent[a] = parent[parent[a]]  # path halving
                a = parent[a]
            while parent[b] != b:
                parent[b] = parent[parent[b]]
                b = parent[b]
            if a != b:
                parent[a] = b
                chosen.append(j)
                if len(chosen) == self._size:
                    break
        state[self._proper[chosen]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"SpanningTree(n_vars={self.n_vars}, kind={self.kind!r})"
