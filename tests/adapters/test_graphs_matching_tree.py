"""Matching and SpanningTree against brute-force enumeration of all matchings / spanning forests."""

from __future__ import annotations

import itertools
import pickle
from concurrent.futures import ThreadPoolExecutor

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers.adapters.graphs import Matching, SpanningTree
from imle_solvers.errors import InvalidWeightsError

pytestmark = pytest.mark.timeout(30)  # graph solvers in this process: a test that loops fails, not the suite


@st.composite
def undirected_graphs(draw: st.DrawFn, max_nodes: int = 6, max_edges: int = 9) -> nx.Graph:
    """A random small undirected graph (possibly disconnected, maybe a self-loop), edges shuffled."""
    n = draw(st.integers(2, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=max_edges, unique=True))
    if draw(st.booleans()):
        edges.append((0, 0))
    perm = draw(st.permutations(range(n)))
    graph = nx.Graph()
    graph.add_nodes_from(f"n{perm[i]}" for i in range(n))
    graph.add_edges_from((f"n{perm[i]}", f"n{perm[j]}") for i, j in draw(st.permutations(edges)))
    return graph


def weights(m: int) -> st.SearchStrategy[np.ndarray]:
    """Integer-valued weights with negatives and many ties, or floats."""
    ints = st.lists(st.integers(-3, 3).map(float), min_size=m, max_size=m)
    floats = st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=m, max_size=m)
    return st.one_of(ints, floats).map(lambda xs: np.array(xs, dtype=np.float64))


def all_matchings(edges: list[tuple[str, str]]) -> list[np.ndarray]:
    out = []
    for r in range(len(edges) + 1):
        for subset in itertools.combinations(range(len(edges)), r):
            ends = [x for i in subset for x in edges[i]]
            if len(ends) == len(set(ends)):  # no shared endpoint (a self-loop repeats its node)
                z = np.zeros(len(edges))
                z[list(subset)] = 1.0
                out.append(z)
    return out


def all_spanning_forests(nodes: list[str], edges: list[tuple[str, str]]) -> list[np.ndarray]:
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    size = len(nodes) - nx.number_connected_components(graph)
    out = []
    for subset in itertools.combinations(range(len(edges)), size):
        forest = nx.Graph()
        forest.add_nodes_from(nodes)
        forest.add_edges_from(edges[i] for i in subset)
        if nx.is_forest(forest) and forest.number_of_edges() == size:  # acyclic, no self-loop
            z = np.zeros(len(edges))
            z[list(subset)] = 1.0
            out.append(z)
    return out


# --------------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------------


@given(graph=undirected_graphs(), maxcard=st.booleans(), data=st.data())
def test_matching_matches_brute_force(graph, maxcard, data) -> None:
    oracle = Matching(graph, maxcardinality=maxcard)
    w = data.draw(weights(oracle.n_vars))
    states = all_matchings(oracle.edges)
    if maxcard:
        top = max(z.sum() for z in states)
        states = [z for z in states if z.sum() == top]
    best = max(float(z @ w) for z in states)
    z = oracle.solve(w)
    assert any((z == s).all() for s in states)  # a matching (of maximum cardinality if asked)
    assert z @ w == pytest.approx(best, abs=1e-6)
    np.testing.assert_array_equal(oracle.solve_batch(np.stack([w, -w, w]))[[0, 2]], [z, z])  # ties
    assert oracle.expected_nonzeros == max(s.sum() for s in all_matchings(oracle.edges))


def test_matching_negative_edges_left_out_unless_maxcardinality() -> None:
    graph = nx.path_graph(["a", "b", "c", "d"])  # edges a-b, b-c, c-d
    w = np.array([-1.0, 5.0, -1.0])
    assert Matching(graph).solve(w).tolist() == [0.0, 1.0, 0.0]
    assert Matching(graph, maxcardinality=True).solve(w).tolist() == [1.0, 0.0, 1.0]
    assert Matching(graph).sense == "max"


def test_matching_bipartite_agrees_with_assignment() -> None:
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(0)
    graph = nx.complete_bipartite_graph(5, 5)
    oracle = Matching(graph, maxcardinality=True)
    w = rng.random(oracle.n_vars)
    cost = np.zeros((5, 5))
    for (u, v), x in zip(oracle.edges, w):
        cost[u, v - 5] = x
    rows, cols = linear_sum_assignment(cost, maximize=True)
    assert oracle.solve(w) @ w == pytest.approx(cost[rows, cols].sum())


# --------------------------------------------------------------------------------------------------
# SpanningTree
# --------------------------------------------------------------------------------------------------


@given(graph=undirected_graphs(), kind=st.sampled_from(["min", "max"]), data=st.data())
def test_spanning_tree_matches_brute_force(graph, kind, data) -> None:
    oracle = SpanningTree(graph, kind=kind)
    assert oracle.sense == kind
    w = data.draw(weights(oracle.n_vars))
    forests = all_spanning_forests(oracle.nodes, oracle.edges)
    values = [float(z @ w) for z in forests]
    best = min(values) if kind == "min" else max(values)
    z = oracle.solve(w)
    assert any((z == f).all() for f in forests)  # a spanning forest
    assert z @ w == pytest.approx(best, abs=1e-6)
    np.testing.assert_array_equal(oracle.solve_batch(np.stack([w, 2 * w, w]))[[0, 2]], [z, z])
    size = forests[0].sum()
    assert oracle.expected_nonzeros == (size if size > 0 else None)


def test_spanning_tree_ties_go_to_the_first_edge() -> None:
    graph = nx.cycle_graph(4)  # edges (0,1), (0,3), (1,2), (2,3)
    oracle = SpanningTree(graph)
    z = oracle.solve(np.ones(4))
    assert z.tolist() == [1.0, 1.0, 1.0, 0.0]  # the last edge in .edges closes the cycle
    assert SpanningTree(graph, kind="max").solve(np.ones(4)).tolist() == [1.0, 1.0, 1.0, 0.0]


def test_spanning_tree_agrees_with_networkx_on_a_larger_graph() -> None:
    graph = nx.gnm_random_graph(40, 150, seed=2)
    rng = np.random.default_rng(2)
    for kind in ("min", "max"):
        oracle = SpanningTree(graph, kind=kind)
        w = rng.normal(size=oracle.n_vars)
        for (u, v), x in zip(oracle.edges, w):
            graph[u][v]["weight"] = x
        tree = (nx.minimum_spanning_tree if kind == "min" else nx.maximum_spanning_tree)(graph)
        assert oracle.solve(w) @ w == pytest.approx(tree.size(weight="weight"))


# --------------------------------------------------------------------------------------------------
# Errors, pickling, threads
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Matching, SpanningTree])
def test_bad_graphs_and_weights(cls) -> None:
    with pytest.raises(ValueError, match="undirected"):
        cls(nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="multigraph"):
        cls(nx.MultiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="at least one edge"):
        cls(nx.empty_graph(3))
    with pytest.raises(TypeError):
        cls({0: [1]})
    oracle = cls(nx.path_graph(4))
    w = np.ones((3, 3))
    w[2, 1] = np.inf
    with pytest.raises(InvalidWeightsError) as info:
        oracle.solve_batch(w)
    assert info.value.rows == (2,)
    with pytest.raises(InvalidWeightsError, match="n_vars=3"):
        oracle.solve(np.ones(4))


def test_spanning_tree_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="kind"):
        SpanningTree(nx.path_graph(3), kind="minimum")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Matching(nx.petersen_graph()),
        lambda: Matching(nx.complete_bipartite_graph(3, 4), maxcardinality=True),
        lambda: SpanningTree(nx.petersen_graph(), kind="max"),
    ],
)
def test_pickle_round_trip_and_threads(make) -> None:
    oracle = make()
    w = np.random.default_rng(1).integers(-2, 3, size=(12, oracle.n_vars)).astype(np.float64)
    expected = oracle.solve_batch(w)
    clone = pickle.loads(pickle.dumps(oracle))
    np.testing.assert_array_equal(clone.solve_batch(w), expected)
    with ThreadPoolExecutor(3) as pool:
        rows = list(pool.map(clone.solve, list(w) * 2))
    np.testing.assert_array_equal(np.array(rows), np.concatenate([expected] * 2))
