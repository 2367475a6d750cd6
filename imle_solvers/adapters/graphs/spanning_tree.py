"""Minimum / maximum spanning trees (forests) as MAP oracles: Kruskal's algorithm on the host, and a
batched Borůvka on the weights' device."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Any, Literal

import numpy as np
import torch

from ..._checks import one_of, positive_int
from ..._device import upload
from ...errors import InvalidWeightsError
from ...oracle import TorchOracle
from ._common import _check_graph, _GraphOracle, _networkx

__all__ = ["SpanningTree", "TorchSpanningTree"]

_CPU_BLOCK = 1 << 14
"""On the CPU the batch is solved in blocks of about this many (row, edge) entries: they stay in cache, and at
half torch's intra-op grain size (32768) every op runs inline, with no thread wake-ups."""

Node = Hashable
Edge = tuple[Any, Any]


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

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Kruskal, "On the shortest spanning subtree of a graph and the traveling salesman problem", Proceedings
      of the AMS 7(1), 1956, <https://doi.org/10.1090/S0002-9939-1956-0078686-7>.
    """

    def __init__(self, graph: Any, kind: Literal["min", "max"] = "min") -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "SpanningTree", undirected=True)
        one_of("kind", kind, ("min", "max"))
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


class TorchSpanningTree(TorchOracle):
    """Minimum (or maximum) spanning tree — a spanning forest if disconnected — of a fixed graph with
    per-instance edge weights, batched on the weights' device.

    The device-native twin of [`SpanningTree`][imle_solvers.SpanningTree]: the MAP state (paper, eq. 3)
    over the bases of the graphic matroid, the edge indicator of a spanning forest of least (``kind="min"``,
    weights are costs) or greatest (``"max"``, scores) total weight. Batched over any leading dimensions;
    states come back on the weights' device and dtype, with no host synchronisation on an accelerator.
    This is the oracle of latent spanning-tree models (Paulus et al. 2020).

    Parameters
    ----------
    n_nodes
        The nodes are ``0 … n_nodes − 1``.
    edges
        The undirected edges ``(u, v)``; their order is the order of the weights and of the state
        (`edges`). Self-loops are allowed in the order but never chosen; parallel edges are allowed (at
        most one of them is chosen).
    kind
        ``"min"`` (weights are costs, ``sense="min"``) or ``"max"`` (scores, ``sense="max"``).

    Notes
    -----
    *Algorithm.* Borůvka's, on the whole batch at once: in every round each component picks its best
    outgoing edge (a scatter-minimum over both ends of every edge), the picked edges join the forest, and
    the components merge by pointer jumping. ``⌈log₂ n_nodes⌉`` rounds always suffice (every round at
    least halves the components that still have an outgoing edge), so the schedule is fixed: no
    data-dependent loop, no host synchronisation. On the CPU the rounds stop early once no component
    has an outgoing edge. Only comparisons are made, so any real weights work, ``±inf`` included, and
    integer weights are compared as integers (int64), exactly over their whole range (beyond ``2^53``,
    where float64 would round them).

    *Ties* go to the edge that comes first in `edges`: edges are compared by ``(weight, position)``
    (by ``(−weight, position)`` for ``"max"``), a strict order under which the optimal forest is unique;
    it is the forest of Kruskal's algorithm with a stable sort, so the states are those of
    [`SpanningTree`][imle_solvers.SpanningTree] on a graph listing the same edges in the same order,
    ties included, and the same on every device. ``0.0`` and ``−0.0`` are equal weights.

    *NaN weights* are refused: on the CPU
    [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] names the rows before anything is
    solved; on an accelerator that check would need a host synchronisation, so such rows come back as
    all-NaN states instead.

    ``expected_nonzeros`` is the number of edges of every spanning forest, ``n_nodes − #components``.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Borůvka, "O jistém problému minimálním", Práce Moravské přírodovědecké společnosti 3, 1926
      (the algorithm); Nešetřil, Milková & Nešetřilová, "Otakar Borůvka on minimum spanning tree problem",
      Discrete Mathematics 233, 2001, <https://doi.org/10.1016/S0012-365X(00)00224-7> (a translation).
    * Paulus, Choi, Tarlow, Krause & Maddison, "Gradient Estimation with Stochastic Softmax Tricks",
      NeurIPS 2020, <https://arxiv.org/abs/2006.08063> (spanning trees as latent structures).

    Examples
    --------
    >>> import torch
    >>> tree = TorchSpanningTree(4, [(0, 1), (1, 2), (2, 3), (3, 0)])   # a 4-cycle
    >>> tree.solve_torch(torch.tensor([[1.0, 5.0, 2.0, 3.0],
    ...                                [1.0, 1.0, 1.0, 1.0]])).int().tolist()
    [[1, 0, 1, 1], [1, 1, 1, 0]]
    """

    in_process_safe = True

    def __init__(
        self, n_nodes: int, edges: Iterable[tuple[int, int]], kind: Literal["min", "max"] = "min"
    ) -> None:
        self.n_nodes = positive_int("n_nodes", int(n_nodes) if isinstance(n_nodes, np.integer) else n_nodes)
        self.edges: list[tuple[int, int]] = []
        for edge in edges:
            pair = tuple(edge) if isinstance(edge, Iterable) else ()
            if len(pair) != 2 or not all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < self.n_nodes
                for x in pair
            ):
                raise ValueError(
                    f"edges must be pairs (u, v) of nodes in 0 … {self.n_nodes - 1}, got {edge!r}"
                )
            self.edges.append((int(pair[0]), int(pair[1])))
        if not self.edges:
            raise ValueError("edges must hold at least one edge (a weight vector of length ≥ 1)")
        one_of("kind", kind, ("min", "max"))
        self.kind: Literal["min", "max"] = kind
        self.sense = kind
        self.n_vars = len(self.edges)
        self._u = torch.tensor([u for u, _ in self.edges], dtype=torch.int64)  # [E]
        self._v = torch.tensor([v for _, v in self.edges], dtype=torch.int64)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        parent = list(range(self.n_nodes))  # the forest size: union-find over the fixed graph

        def root(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        size = 0
        for u, v in self.edges:
            a, b = root(u), root(v)
            if a != b:
                parent[a] = b
                size += 1
        self._size = size
        self.expected_nonzeros = float(size) if size > 0 else None
        self._rounds = max(1, math.ceil(math.log2(self.n_nodes))) if self.n_nodes > 1 else 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_on_device"] = {}  # device tensors are not pickled
        return state

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Forest masks for ``(..., E)`` edge weights (in `sense`); same shape, device and dtype."""
        if weights.shape[-1:] != (self.n_vars,):
            raise InvalidWeightsError(
                f"{self!r} expects weights of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        lead = weights.shape[:-1]
        floating = weights.is_floating_point()
        dtype = weights.dtype if floating else torch.int64  # integers are compared exactly, as int64
        w = weights.detach().reshape(-1, self.n_vars).to(dtype)  # [N, E]
        if w.device.type == "cpu":  # blocks of rows under torch's grain size: no intra-op threads
            if floating:
                nan = np.isnan(w.numpy()).any(axis=1) if dtype != torch.bfloat16 else w.isnan().any(1).numpy()
                if nan.any():
                    raise InvalidWeightsError("weights contain NaN", rows=np.flatnonzero(nan).tolist())
            states = torch.empty(w.shape, dtype=weights.dtype)
            rows = max(1, _CPU_BLOCK // self.n_vars)
            for i in range(0, w.shape[0], rows):
                states[i : i + rows] = self._boruvka(self._key(w[i : i + rows]), early_stop=True)
            return states.reshape(*lead, self.n_vars)
        if not floating:  # no NaN in an integer dtype
            return self._boruvka(self._key(w), early_stop=False).to(weights.dtype).reshape(*lead, self.n_vars)
        nan_rows = torch.isnan(w).any(dim=1)  # [N]
        key = self._key(w).masked_fill(nan_rows[:, None], 0.0)  # minimised   [N, E]
        states_d = (
            self._boruvka(key, early_stop=False).to(dtype).masked_fill_(nan_rows[:, None], float("nan"))
        )
        return states_d.to(weights.dtype).reshape(*lead, self.n_vars)

    def _key(self, w: torch.Tensor) -> torch.Tensor:
        """What Borůvka minimises: the weights for ``"min"``, reversed for ``"max"`` (``−w``; for
        integers ``~w = −w − 1``, which reverses the order with no overflow, ``−2^63`` included)."""
        if self.kind == "min":
            return w
        return -w if w.is_floating_point() else torch.bitwise_not(w)

    def _ends(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        ends = self._on_device.get(device)
        if ends is None:  # one host → device copy per device, on the first call (no sync)
            ends = (upload(self._u, device), upload(self._v, device))
            self._on_device[device] = ends
        return ends

    def _codes(self, key: torch.Tensor) -> torch.Tensor:
        """One int64 per edge that orders the edges by ``(key, index)`` and holds the index in its low
        32 bits.  ``[N, E]`` → ``[N, E]``

        Keys of at most 32 bits are turned into order-preserving integers (their float32 bit patterns,
        negative ones reflected; ``−0.0`` first made ``+0.0``); float64 and int64 keys are ranked by a
        stable sort (int64 ones as integers: exact beyond 2^53).
        """
        n, e_count = key.shape
        index = torch.arange(e_count, device=key.device)
        if key.dtype in (torch.float64, torch.int64):
            order = torch.argsort(key, dim=1, stable=True)  # edges by (key, index)   [N, E]
            high = torch.empty_like(order).scatter_(1, order, index.expand(n, -1))  # rank of each edge
        else:
            bits = (key.to(torch.float32) + 0.0).view(torch.int32)  # + 0.0: −0.0 → +0.0
            high = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)  # monotone in the key
        return (high << 32) | index

    def _boruvka(self, key: torch.Tensor, *, early_stop: bool) -> torch.Tensor:
        """Borůvka rounds on ``[N, E]`` keys (minimised; ties to the lower edge index).  → ``[N, E]`` bool

        Components are named by flat slots ``b·V + node``; each round takes one scatter-minimum of the
        edge codes (`_codes`) over each end of every edge.
        """
        n, e_count, v_count = key.shape[0], self.n_vars, self.n_nodes
        device = key.device
        u, v = self._ends(device)
        codes = self._codes(key)  # [N, E]
        none = torch.iinfo(torch.int64).max  # "no outgoing edge"
        slots = torch.arange(n * v_count, device=device)  # component names   [N·V]
        comp = slots.reshape(n, v_count)  # the component of every node, as a flat slot   [N, V]
        u_n, v_n = u.expand(n, -1), v.expand(n, -1)
        chosen = torch.zeros((n, e_count + 1), dtype=torch.bool, device=device)  # + a dummy edge E
        for _ in range(self._rounds):
            cu, cv = comp.gather(1, u_n), comp.gather(1, v_n)  # components of the two ends   [N, E]
            leaving = torch.where(cu != cv, codes, none)  # edges leaving their component (never a loop)
            least = torch.full((n * v_count,), none, dtype=torch.int64, device=device)
            least.scatter_reduce_(0, cu.reshape(-1), leaving.reshape(-1), "amin")
            least.scatter_reduce_(0, cv.reshape(-1), leaving.reshape(-1), "amin")  # best edge out   [N·V]
            picks = least != none
            if early_stop and not bool(picks.any()):
                break
            edge = torch.where(picks, least & 0xFFFFFFFF, e_count).reshape(n, v_count)  # E: none
            chosen.scatter_(1, edge, True)  # (the dummy column E collects the components without)
            first = edge.clamp_max(e_count - 1)
            a, b = cu.gather(1, first).reshape(-1), cv.gather(1, first).reshape(-1)  # its ends' components
            parent = torch.where(picks, torch.where(a == slots, b, a), slots)  # [N·V]
            # two components picking each other (the same edge): the smaller name becomes the root
            grand = parent.index_select(0, parent)
            parent = torch.where((grand == slots) & (slots < parent), slots, parent)
            for _ in range(self._rounds):  # pointer jumping: every name reaches its root
                grand = parent.index_select(0, parent)
                if early_stop and torch.equal(grand, parent):
                    break
                parent = grand
            comp = parent.index_select(0, comp.reshape(-1)).reshape(n, v_count)
        return chosen[:, :e_count]

    def __repr__(self) -> str:
        return f"TorchSpanningTree(n_nodes={self.n_nodes}, n_vars={self.n_vars}, kind={self.kind!r})"
