"""DAGShortestPath against brute-force enumeration of all source → target paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import IMLE, MapOracle, TorchOracle
from imle_solvers.adapters.dag import DAGShortestPath


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
    return np.array(out)


@st.composite
def random_dag(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, int]:
    """A random DAG on n nodes (arcs only go from lower to higher index, parallel arcs allowed)."""
    n = draw(st.integers(2, 7))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=14))
    if draw(st.booleans()):
        edges.append((0, n - 1))
    # relabel nodes with a random permutation so that labels are not a topological order
    perm = draw(st.permutations(list(range(n))))
    edges = [(perm[u], perm[v]) for u, v in edges]
    return edges, perm[0], perm[n - 1]


@given(random_dag(), st.integers(0, 2**31 - 1))
def test_matches_brute_force_with_negative_weights(dag: tuple, seed: int) -> None:
    edges, s, t = dag
    paths = all_paths(edges, s, t)
    if len(paths) == 0:
        with pytest.raises(ValueError, match=r"no path|not an end"):
            DAGShortestPath(edges, s, t)
        return
    oracle = DAGShortestPath(edges, s, t)
    w = np.random.default_rng(seed).normal(size=(6, len(edges)))  # negative costs included
    z = oracle.solve_batch(w)
    best = (paths @ w.T).min(axis=0)  # brute-force optimum per row
    np.testing.assert_allclose((z * w).sum(1), best, atol=1e-9)
    # every returned state is a valid path
    assert all(any(np.array_equal(zi, p) for p in paths) for zi in z)
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


@given(st.integers(2, 5), st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_agrees_with_graphs_shortest_path(rows: int, cols: int, seed: int) -> None:
    """Same optimal cost as the NetworkX-backed ``ShortestPath`` on the same DiGraph (negative costs too)."""
    nx = pytest.importorskip("networkx")
    from imle_solvers.adapters.graphs import ShortestPath

    dag = DAGShortestPath.grid(rows, cols)
    graph = nx.DiGraph(dag.edges)
    reference = ShortestPath(graph, dag.source, dag.target)
    order = [reference.edges.index(e) for e in dag.edges]  # our arc j is reference arc order[j]
    w = np.random.default_rng(seed).normal(size=(5, dag.n_vars))
    w_ref = np.empty_like(w)
    w_ref[:, order] = w
    ours = (dag.solve_batch(w) * w).sum(1)
    theirs = (reference.solve_batch(w_ref) * w_ref).sum(1)
    np.testing.assert_allclose(ours, theirs, atol=1e-9)


@given(random_dag(), st.integers(0, 2**31 - 1))
def test_numpy_and_torch_programmes_agree_ties_included(dag: tuple, seed: int) -> None:
    """The CPU (NumPy) path and the device (torch ops) path return identical states, ties included."""
    edges, s, t = dag
    if len(all_paths(edges, s, t)) == 0:
        return
    oracle = DAGShortestPath(edges, s, t)
    w = torch.from_numpy(np.random.default_rng(seed).integers(-2, 3, size=(8, len(edges))).astype(np.float64))
    np.testing.assert_array_equal(oracle.solve_torch(w).numpy(), oracle._solve_torch_ops(w).numpy())
    half = oracle.solve_torch(w.to(torch.bfloat16))  # not a NumPy dtype: the torch path
    assert half.dtype == torch.bfloat16
    np.testing.assert_array_equal(half.double().numpy(), oracle._solve_torch_ops(w).numpy())


def test_shared_level_plan_gives_both_dag_oracles_the_same_states() -> None:
    """ShortestPath (on a DAG) and DAGShortestPath run the same LevelPlan: same states, ties included."""
    import networkx as nx

    from imle_solvers.adapters._levels import LevelPlan
    from imle_solvers.adapters.graphs import ShortestPath

    graph = nx.DiGraph(DAGShortestPath.grid(6, 7).edges)
    host = ShortestPath(graph, 0, 41)
    oracle = DAGShortestPath(host.edges, 0, 41)  # the same edge order, so the same tie rule
    assert host.is_dag
    rng = np.random.default_rng(4)
    for w in (rng.integers(0, 3, (64, oracle.n_vars)).astype(float), rng.normal(size=(64, oracle.n_vars))):
        expected = oracle._solve_torch_ops(torch.from_numpy(w)).numpy()
        np.testing.assert_array_equal(oracle._solve_numpy(w), expected)
        host._dag_vectorised = True
        np.testing.assert_array_equal(host.solve_batch(w), expected)
    plan = LevelPlan(3, np.array([0, 0, 1]), np.array([1, 2, 2]), 0)
    assert [nodes.tolist() for nodes, _ in plan.levels] == [[1], [2]]
    assert plan.predecessors(np.array([[1.0, 2.0, 1.0]])).tolist() == [[-1, 0, 1]]  # tie: least arc id
