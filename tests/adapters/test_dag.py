"""The DAG programme (LevelPlan) against brute force on every executor, and DAGShortestPath around it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from imle_solvers import IMLE, MapOracle, TorchOracle
from imle_solvers.adapters import DAGShortestPath
from imle_solvers.adapters.graphs import _levels
from imle_solvers.adapters.graphs._levels import LevelPlan
from imle_solvers.errors import InvalidWeightsError

pytestmark = pytest.mark.timeout(30)  # graph solvers in this process: a test that loops fails, not the suite


def all_paths(edges: list[tuple[int, int]], source: int, target: int) -> np.ndarray:
    """Edge indicators of every source → target path, by depth-first enumeration."""
    out: list[np.ndarray] = []

    def walk(node: int, used: list[int]) -> None:
        if node == target:
            z = np.zeros(len(edges))
            z[used] = 1.0
            out.append(z)
            return
        for e, (u, v) in enumerate(edges):
            if u == node:
                walk(v, [*used, e])

    walk(source, [])
    return np.array(out).reshape(-1, len(edges))


def brute_force_path(edges: list[tuple[int, int]], source: int, target: int, cost: np.ndarray) -> np.ndarray:
    """The tie rule by enumeration: ``d(v)`` = the least sum (added from the source on, in ``cost``'s
    dtype) over all paths to ``v``; a node's predecessor is its least-index in-arc on some path
    ``u → v`` with ``d(u) + c = d(v)``; the state is the chain back from the target."""
    useful = {e for p in all_paths(edges, source, target) for e in np.flatnonzero(p)}
    nodes = {x for e in useful for x in edges[e]}
    dist: dict[int, np.floating] = {}
    for v in nodes:
        sums = []
        for p in all_paths(edges, source, v):
            total = cost.dtype.type(0)
            node = source
            while node != v:  # walk the path in order, adding as the programme does
                e = next(e for e in np.flatnonzero(p) if edges[e][0] == node)
                total = cost.dtype.type(total + cost[e])
                node = edges[e][1]
            sums.append(total)
        dist[v] = min(sums)
    z = np.zeros(len(edges))
    v = target
    while v != source:
        k = min(e for e in useful if edges[e][1] == v and dist[edges[e][0]] + cost[e] == dist[v])
        z[k] = 1.0
        v = edges[k][0]
    return z


@st.composite
def random_dag(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, int]:
    """A random DAG on n nodes (parallel arcs, arcs off every path and into the source allowed)."""
    n = draw(st.integers(2, 7))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=14))
    if draw(st.booleans()):
        edges.append((0, n - 1))
    # relabel nodes with a random permutation so that labels are not a topological order; the path runs
    # between the second and the last node in topological order, so node 0 may lead into the source
    perm = draw(st.permutations(list(range(n))))
    edges = [(perm[u], perm[v]) for u, v in edges]
    return edges, perm[min(1, n - 2)], perm[n - 1]


def _plan(edges: list[tuple[int, int]], source: int, target: int) -> LevelPlan:
    n = 1 + max(max(e) for e in [*edges, (source, target)])
    return LevelPlan(n, [u for u, _ in edges], [v for _, v in edges], source, target)


@given(random_dag(), st.integers(0, 2**31 - 1), st.sampled_from(["ties", "normal", "float32"]))
@example(([(1, 2), (1, 3), (2, 3)], 1, 3), 0, "normal")  # paths of 1 and 2 arcs
@example(([(0, 1), (1, 2), (2, 4), (1, 4), (0, 1), (3, 1), (2, 5)], 1, 4), 3, "ties")  # parallel, useless
@example(([(0, 1), (1, 2), (2, 3), (0, 3), (1, 3), (0, 2)], 0, 3), 7, "float32")
def test_every_executor_follows_the_tie_rule_of_brute_force(dag: tuple, seed: int, kind: str) -> None:
    """Plain Python, NumPy and torch (run on CPU tensors, as on an accelerator): the same optimal states,
    ties included, as the tie rule by enumeration; hop counts as by enumeration."""
    edges, s, t = dag
    paths = all_paths(edges, s, t)
    plan = _plan(edges, s, t)
    assert plan.feasible == bool(len(paths))
    rng = np.random.default_rng(seed)
    cost = (
        rng.integers(-2, 3, size=(6, len(edges))).astype(np.float64)  # many ties, negative costs
        if kind == "ties"
        else rng.normal(size=(6, len(edges))).astype(np.float32 if kind == "float32" else np.float64)
    )
    if not len(paths):
        assert not plan.path(cost).any() and not plan.path_torch(torch.from_numpy(cost)).any()
        return
    expected = np.array([brute_force_path(edges, s, t, row) for row in cost])
    lengths = paths.sum(1)
    assert (plan.max_hops, plan.min_hops) == (lengths.max(), lengths.min())
    optimum = (paths @ cost.T.astype(np.float64)).min(0)
    np.testing.assert_allclose((expected * cost).sum(1), optimum, rtol=1e-5, atol=1e-5)
    for threshold in (0, 10**9):  # NumPy for every batch, then plain Python for every float64 batch
        _levels._ARCS_PER_LEVEL, saved = threshold, _levels._ARCS_PER_LEVEL
        try:
            np.testing.assert_array_equal(plan.path(cost), expected)
        finally:
            _levels._ARCS_PER_LEVEL = saved
    torch_states = plan.path_torch(torch.from_numpy(cost))
    assert torch_states.dtype == torch.from_numpy(cost).dtype
    np.testing.assert_array_equal(torch_states.numpy(), expected)


def test_plan_levels_predecessors_and_unusable_arcs() -> None:
    plan = LevelPlan(5, [0, 0, 1, 3, 1], [1, 2, 2, 0, 4], 0, 2)  # (3, 0) enters the source, (1, 4) dead-ends
    assert plan.useful.tolist() == [0, 1, 2] and plan.feasible
    assert [nodes.tolist() for nodes, _ in plan.levels] == [[1], [2]]
    assert plan.predecessors(np.array([[1.0, 2.0, 1.0, -9.0, -9.0]])).tolist() == [[-1, 0, 1, -1, -1]]  # tie
    cheap_detours = np.array([[-5.0, 0.0, -5.0, -100.0, -100.0]])
    assert plan.path(cheap_detours).tolist() == [[1.0, 0.0, 1.0, 0.0, 0.0]]  # one row: plain Python
    many = np.repeat(cheap_detours, 64, axis=0)  # a batch: NumPy, the backtrack takes max_hops steps
    assert (plan.min_hops, plan.max_hops) == (1, 2)
    assert plan.path(many).tolist() == [[1.0, 0.0, 1.0, 0.0, 0.0]] * 64
    assert plan.path_torch(torch.from_numpy(many)).tolist() == [[1.0, 0.0, 1.0, 0.0, 0.0]] * 64
    with pytest.raises(ValueError, match="cycle"):
        LevelPlan(4, [0, 1, 2, 1], [1, 2, 1, 3], 0, 3)  # 1 → 2 → 1 on the way
    off_the_way = LevelPlan(4, [0, 2, 3], [1, 3, 2], 0, 1)  # a cycle no path uses: ignored
    assert off_the_way.path(np.array([[1.0, -5.0, -5.0]])).tolist() == [[1.0, 0.0, 0.0]]
    nowhere = LevelPlan(3, [0, 2], [1, 1], 0, 2)
    assert not nowhere.feasible and nowhere.path(np.ones((2, 2))).tolist() == [[0.0, 0.0]] * 2
    restored = pickle.loads(pickle.dumps(plan))
    plan.path_torch(torch.ones(1, 5))  # device tables are built on first use and not pickled
    assert pickle.loads(pickle.dumps(plan))._device == {} and restored.path(cheap_detours).tolist() == [
        [1.0, 0.0, 1.0, 0.0, 0.0]
    ]


# ---------------------------------------------------------------------------------- DAGShortestPath


def test_a_nodes_level_follows_its_deepest_predecessor_whatever_order_kahn_meets_them() -> None:
    # Kahn's algorithm finishes node 4 through its shallow in-arc (1, 4), after its deep one (3, 4): the
    # level must still be one past node 3's, or the programme relaxes node 4 before node 3 has a distance
    edges = [(0, 1), (0, 2), (2, 3), (3, 4), (1, 4)]
    plan = _plan(edges, 0, 4)
    assert [nodes.tolist() for nodes, _ in plan.levels] == [[1, 2], [3], [4]]
    cost = np.array([[5.0, 1.0, 1.0, 1.0, 5.0]] * 3)  # 0 → 2 → 3 → 4 costs 3; 0 → 1 → 4 costs 10
    for threshold in (0, 10**9):  # NumPy, then plain Python
        _levels._ARCS_PER_LEVEL, saved = threshold, _levels._ARCS_PER_LEVEL
        try:
            assert plan.path(cost).tolist() == [[0.0, 1.0, 1.0, 1.0, 0.0]] * 3
        finally:
            _levels._ARCS_PER_LEVEL = saved
    assert plan.path_torch(torch.from_numpy(cost)).tolist() == [[0.0, 1.0, 1.0, 1.0, 0.0]] * 3


@given(random_dag(), st.integers(0, 2**31 - 1))
def test_oracle_matches_brute_force_with_negative_weights(dag: tuple, seed: int) -> None:
    edges, s, t = dag
    paths = all_paths(edges, s, t)
    if len(paths) == 0:
        with pytest.raises(ValueError, match=r"no path|not an end"):
            DAGShortestPath(edges, s, t)
        return
    oracle = DAGShortestPath(edges, s, t)
    w = np.random.default_rng(seed).normal(size=(6, len(edges)))  # negative costs included
    z = oracle.solve_batch(w)
    np.testing.assert_allclose((z * w).sum(1), (paths @ w.T).min(axis=0), atol=1e-9)
    assert all(any(np.array_equal(zi, p) for p in paths) for zi in z)  # every state is a path
    lengths = paths.sum(1)
    assert oracle.expected_nonzeros == pytest.approx(0.5 * (lengths.min() + lengths.max()))


def test_grid_order_and_shapes() -> None:
    oracle = DAGShortestPath.grid(5, 5)
    assert isinstance(oracle, TorchOracle) and isinstance(oracle, MapOracle)
    assert oracle.sense == "min" and oracle.n_vars == 40 and oracle.expected_nonzeros == 8.0
    # PyEPO arc order: row 0 east arcs, then row 0 north arcs, ...
    assert oracle.edges[:5] == [(0, 1), (1, 2), (2, 3), (3, 4), (0, 5)]
    assert oracle.edges[-4:] == [(20, 21), (21, 22), (22, 23), (23, 24)]
    w = torch.rand(3, 2, 40, dtype=torch.float64)
    z = oracle.solve_torch(w)
    assert z.shape == (3, 2, 40) and z.dtype == torch.float64
    assert torch.all(z.sum(-1) == 8)


def test_grid_brute_force() -> None:
    oracle = DAGShortestPath.grid(3, 4)
    paths = all_paths(oracle.edges, 0, 11)  # type: ignore[arg-type]
    assert len(paths) == 10  # C(5, 2) monotone lattice paths
    w = np.random.default_rng(0).normal(size=(50, oracle.n_vars))
    np.testing.assert_allclose((oracle.solve_batch(w) * w).sum(1), (paths @ w.T).min(0), atol=1e-9)


def test_useless_arcs_stay_zero_and_errors() -> None:
    # arc (3, 0) enters the source, (1, 4) leads to a dead end: neither may be chosen
    oracle = DAGShortestPath([(0, 1), (1, 2), (0, 2), (3, 0), (1, 4)], 0, 2)
    z = oracle.solve_batch(np.array([[-5.0, -5.0, 0.0, -100.0, -100.0]]))
    np.testing.assert_array_equal(z, [[1, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match="cycle"):
        DAGShortestPath([(0, 1), (1, 2), (2, 1), (1, 3)], 0, 3)
    with pytest.raises(ValueError, match="no path"):
        DAGShortestPath([(0, 1), (2, 1)], 0, 2)
    with pytest.raises(ValueError, match="differ"):
        DAGShortestPath([(0, 1)], 0, 0)
    with pytest.raises(ValueError, match="not an end"):
        DAGShortestPath([(0, 1)], 0, 5)
    with pytest.raises(ValueError, match="at least one edge"):
        DAGShortestPath([], 0, 1)
    for rows, cols in ((1, 1), (0, 3)):
        with pytest.raises(ValueError, match=r"rows\*cols >= 2|rows must be a positive integer"):
            DAGShortestPath.grid(rows, cols)
    with pytest.raises(ValueError, match=r"^grid needs rows\*cols >= 2 \(a source and a target\), got 1x1$"):
        DAGShortestPath.grid(1, 1)


def test_solve_torch_checks_the_last_dimension_and_the_dtype() -> None:
    oracle = DAGShortestPath.grid(2, 3)
    for bad in (torch.ones(2, 6), torch.ones(8), torch.tensor(1.0)):
        with pytest.raises(InvalidWeightsError, match=r"\(\.\.\., 7\)"):
            oracle.solve_torch(bad)
    with pytest.raises(InvalidWeightsError, match="real"):
        oracle.solve_torch(torch.ones(7, dtype=torch.complex64))


@pytest.mark.parametrize(
    ("dtype", "big"),
    [(torch.float16, 2048.0), (torch.bfloat16, 256.0)],
)
def test_half_precision_costs_are_summed_in_float32(dtype: torch.dtype, big: float) -> None:
    """In its own precision ``big + 1`` and ``(big − 1) + 1.5`` both round to ``big``: a tie that the first
    in-arc (the worse path) would win. Summed in float32 the cheaper path wins, on both executors."""
    oracle = DAGShortestPath([("s", "a"), ("a", "t"), ("s", "b"), ("b", "t")], "s", "t")
    costs = torch.tensor([[big, 1.0, big - 1.0, 1.5]] * 3, dtype=dtype)
    assert (costs[0, 0] + costs[0, 1]) == (costs[0, 2] + costs[0, 3])  # the tie in half precision
    z = oracle.solve_torch(costs)
    assert z.dtype == dtype and z.tolist() == [[0.0, 0.0, 1.0, 1.0]] * 3
    assert oracle._plan.path_torch(costs.float()).tolist() == z.float().tolist()


def test_integer_costs() -> None:
    oracle = DAGShortestPath.grid(3, 4)
    w = torch.from_numpy(np.random.default_rng(2).integers(-5, 6, size=(4, 2, oracle.n_vars)))
    z = oracle.solve_torch(w)
    assert z.dtype == torch.int64 and z.shape == w.shape
    assert torch.equal(z, oracle.solve_torch(w.double()).long())
    assert torch.equal(oracle.solve_torch(w.int()), z.int())
    # integer costs are summed in float64: 2**24 + 1 and 2**24 are one float32 number, not one float64
    parallel = DAGShortestPath([("s", "t"), ("s", "t")], "s", "t")
    costs = torch.tensor([[2**24 + 1, 2**24], [2**24, 2**24 + 1]], dtype=torch.int64)
    assert parallel.solve_torch(costs).tolist() == [[0, 1], [1, 0]]


def test_from_networkx_and_imle_layer() -> None:
    nx = pytest.importorskip("networkx")
    g = nx.DiGraph([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    oracle = DAGShortestPath.from_networkx(g, "a", "d")
    assert oracle.edges == list(g.edges)
    costs = torch.tensor([[1.0, 1.0, 0.5, 0.4]], requires_grad=True)
    z = IMLE(oracle, samples=3)(costs)  # SumOfGamma takes k = 2 from expected_nonzeros
    assert z.shape == (1, 3, 4)
    (z * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert costs.grad is not None and costs.grad.shape == (1, 4)


def test_both_dag_oracles_run_the_same_programme() -> None:
    """ShortestPath on a DAG and DAGShortestPath with the same edge order: the same states, ties included."""
    nx = pytest.importorskip("networkx")
    from imle_solvers.adapters import ShortestPath

    graph = nx.DiGraph(DAGShortestPath.grid(6, 7).edges)
    host = ShortestPath(graph, 0, 41)
    oracle = DAGShortestPath(host.edges, 0, 41)  # the same edge order, so the same tie rule
    assert host.is_dag
    rng = np.random.default_rng(4)
    for w in (rng.integers(0, 3, (64, oracle.n_vars)).astype(float), rng.normal(size=(64, oracle.n_vars))):
        expected = oracle.solve_batch(w)
        np.testing.assert_array_equal(host.solve_batch(w), expected)
        np.testing.assert_array_equal([host.solve(row) for row in w[:5]], expected[:5])
