"""ShortestPath and GridShortestPath against brute-force enumeration of simple paths and cycles."""

from __future__ import annotations

import functools
import itertools
import pickle
from concurrent.futures import ThreadPoolExecutor

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers.adapters.graphs import GridShortestPath, ShortestPath
from imle_solvers.errors import InfeasibleError, InvalidWeightsError, NegativeCycleError

pytestmark = pytest.mark.timeout(30)  # graph solvers in this process: a test that loops fails, not the suite

# --------------------------------------------------------------------------------------------------
# brute force
# --------------------------------------------------------------------------------------------------


def brute_shortest_path(
    graph: nx.Graph, s: object, t: object, weights_on: str, w: np.ndarray
) -> tuple[str, float, set[tuple[float, ...]]]:
    """("infeasible" | "negcycle" | "ok", optimal cost, set of optimal states) by enumeration.

    The shortest *walk* is unbounded iff a negative cycle lies among the nodes that are reachable from
    ``s`` and reach ``t``; cycles are enumerated on the directed version (an undirected edge = 2 arcs).
    """
    edges, nodes = list(graph.edges), list(graph.nodes)
    e_idx = {e: i for i, e in enumerate(edges)}
    if not graph.is_directed():
        e_idx.update({(v, u): i for (u, v), i in list(e_idx.items())})
    n_idx = {v: i for i, v in enumerate(nodes)}
    digraph = graph if graph.is_directed() else graph.to_directed()
    if t != s and t not in nx.descendants(digraph, s):
        return "infeasible", np.inf, set()
    relevant = (nx.descendants(digraph, s) | {s}) & (nx.ancestors(digraph, t) | {t})
    sub = digraph.subgraph(relevant)
    for cycle in nx.simple_cycles(sub):
        if weights_on == "edges":
            cost = sum(w[e_idx[(cycle[i], cycle[(i + 1) % len(cycle)])]] for i in range(len(cycle)))
        else:
            cost = sum(w[n_idx[v]] for v in cycle)
        if cost < 0:
            return "negcycle", -np.inf, set()
    best, states = np.inf, {}
    paths = [[s]] if s == t else nx.all_simple_paths(graph, s, t)
    for path in paths:
        z = np.zeros(len(w))
        if weights_on == "edges":
            z[[e_idx[(path[i], path[i + 1])] for i in range(len(path) - 1)]] = 1.0
        else:
            z[[n_idx[v] for v in path]] = 1.0
        states[tuple(z)] = float(z @ w)
        best = min(best, float(z @ w))
    return "ok", best, {z for z, c in states.items() if np.isclose(c, best)}


@st.composite
def graph_cases(draw: st.DrawFn, kind: str) -> tuple[nx.Graph, str, str]:
    """Random small graph (kind: 'dag', 'digraph' or 'graph') with string node labels and s, t."""
    n = draw(st.integers(2, 5))
    if kind == "dag":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    elif kind == "digraph":
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j] + [(0, 0)]
    else:
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)] + [(n - 1, n - 1)]
    mask = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    chosen = draw(st.permutations([p for p, keep in zip(pairs, mask) if keep] or [pairs[0]]))
    perm = draw(st.permutations(range(n)))  # labels ≠ topological order
    graph = nx.DiGraph() if kind != "graph" else nx.Graph()
    graph.add_nodes_from(f"v{perm[i]}" for i in range(n))
    graph.add_edges_from((f"v{perm[i]}", f"v{perm[j]}") for i, j in chosen)
    nodes = list(graph.nodes)
    return graph, draw(st.sampled_from(nodes)), draw(st.sampled_from(nodes))


def weights_for(m: int, negative: bool) -> st.SearchStrategy[np.ndarray]:
    """Integer-valued weights (many ties) or floats, with negatives when asked."""
    low = -2 if negative else 0
    ints = st.lists(st.integers(low, 4).map(float), min_size=m, max_size=m)
    floats = st.lists(st.floats(low - 0.5, 4.0, allow_nan=False, width=32), min_size=m, max_size=m)
    return st.one_of(ints, floats).map(lambda xs: np.array(xs, dtype=np.float64))


def check_against_brute(oracle: ShortestPath, graph: nx.Graph, s: str, t: str, w: np.ndarray) -> None:
    status, best, optimal = brute_shortest_path(graph, s, t, oracle.weights_on, w)
    if status == "infeasible":
        with pytest.raises(InfeasibleError):
            oracle.solve(w)
        return
    if status == "negcycle":
        with pytest.raises(NegativeCycleError):
            oracle.solve(w)
        return
    z = oracle.solve(w)
    assert tuple(z) in optimal, (z, best)  # a feasible simple path of optimal cost
    np.testing.assert_array_equal(oracle.solve(w), z)  # ties: same weights, same state
    np.testing.assert_array_equal(oracle.solve_batch(np.stack([w, w + 1.0, w]))[[0, 2]], [z, z])


# --------------------------------------------------------------------------------------------------
# ShortestPath properties
# --------------------------------------------------------------------------------------------------


@given(case=graph_cases("dag"), weights_on=st.sampled_from(["edges", "nodes"]), data=st.data())
def test_dag_matches_brute_force(case, weights_on, data) -> None:
    """The DAG programme itself is tested against brute force in test_dag.py; here, ShortestPath around it."""
    graph, s, t = case
    oracle = ShortestPath(graph, s, t, weights_on=weights_on)
    w = data.draw(weights_for(oracle.n_vars, negative=True))
    assert oracle.is_dag == oracle._feasible
    check_against_brute(oracle, graph, s, t, w)


@given(
    case=graph_cases("digraph"),
    weights_on=st.sampled_from(["edges", "nodes"]),
    negative=st.booleans(),
    data=st.data(),
)
def test_digraph_matches_brute_force(case, weights_on, negative, data) -> None:
    graph, s, t = case
    oracle = ShortestPath(graph, s, t, weights_on=weights_on)
    check_against_brute(oracle, graph, s, t, data.draw(weights_for(oracle.n_vars, negative)))


@given(
    case=graph_cases("graph"),
    weights_on=st.sampled_from(["edges", "nodes"]),
    negative=st.booleans(),
    data=st.data(),
)
def test_undirected_matches_brute_force(case, weights_on, negative, data) -> None:
    graph, s, t = case
    oracle = ShortestPath(graph, s, t, weights_on=weights_on)
    assert not oracle.is_dag
    check_against_brute(oracle, graph, s, t, data.draw(weights_for(oracle.n_vars, negative)))


@given(case=graph_cases("dag"), data=st.data())
def test_dag_batches_give_each_row_the_state_of_solve_ties_included(case, data) -> None:
    graph, s, t = case
    for weights_on, values in (("edges", [0.0, 1.0]), ("nodes", [-1.0, 0.0, 1.0])):
        oracle = ShortestPath(graph, s, t, weights_on=weights_on)
        if not oracle.is_dag:
            return
        w = np.array(
            data.draw(st.lists(st.sampled_from(values), min_size=oracle.n_vars, max_size=oracle.n_vars))
        )
        rows = np.stack([w, 1.0 - w, w, np.zeros_like(w)] * 16)  # ties everywhere; 64 rows: NumPy
        np.testing.assert_array_equal(oracle.solve_batch(rows), [oracle.solve(r) for r in rows])


def test_dag_batch_runs_the_level_programme_once(monkeypatch) -> None:
    from imle_solvers.adapters.graphs._levels import LevelPlan

    oracle = ShortestPath(grid_dag(5), (0, 0), (4, 4))
    x = np.random.default_rng(0).integers(-2, 3, size=(64, oracle.n_vars)).astype(np.float64)  # ties
    calls = []
    original = LevelPlan.predecessors
    monkeypatch.setattr(LevelPlan, "predecessors", lambda plan, cost: calls.append(1) or original(plan, cost))
    batch = oracle.solve_batch(x)
    assert calls == [1]
    np.testing.assert_array_equal(batch, [oracle.solve(r) for r in x])


def grid_dag(n: int) -> nx.DiGraph:
    """n × n grid with east and north arcs."""
    graph = nx.DiGraph()
    graph.add_edges_from(((r, c), (r, c + 1)) for r in range(n) for c in range(n - 1))
    graph.add_edges_from(((r, c), (r + 1, c)) for r in range(n - 1) for c in range(n))
    return graph


def test_dag_tie_rule_on_a_diamond() -> None:
    graph = nx.DiGraph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")])
    oracle = ShortestPath(graph, "s", "t")
    assert oracle.edges == [("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")]
    assert oracle.solve(np.ones(4)).tolist() == [1.0, 0.0, 1.0, 0.0]  # (a, t) precedes (b, t)
    assert oracle.solve_batch(np.ones((64, 4))).tolist() == [[1.0, 0.0, 1.0, 0.0]] * 64


def test_dag_paths_large_dag_agree_with_networkx() -> None:
    rng = np.random.default_rng(3)
    graph = nx.DiGraph()  # layered: source, 4 layers of 12 nodes, target
    layers = [["s"], *[[(k, i) for i in range(12)] for k in range(4)], ["t"]]
    graph.add_edges_from((u, v) for a, b in itertools.pairwise(layers) for u in a for v in b)
    oracle = ShortestPath(graph, "s", "t")
    assert oracle.is_dag
    for _ in range(5):
        w = rng.normal(size=oracle.n_vars)  # negative arcs: Dijkstra would be wrong here
        for (u, v), x in zip(oracle.edges, w):
            graph[u][v]["weight"] = x
        expected = nx.bellman_ford_path_length(graph, "s", "t")
        z = oracle.solve(w)
        assert z @ w == pytest.approx(expected)


def test_cyclic_digraph_negative_arcs_without_negative_cycle_bellman_ford() -> None:
    graph = nx.DiGraph([("s", "a"), ("a", "b"), ("b", "a"), ("b", "t"), ("s", "t")])
    oracle = ShortestPath(graph, "s", "t")
    assert not oracle.is_dag
    w = {("s", "a"): 1.0, ("a", "b"): -3.0, ("b", "a"): 4.0, ("b", "t"): 1.0, ("s", "t"): 0.0}  # a-b-a: +1
    z = oracle.solve(np.array([w[e] for e in oracle.edges]))
    assert {e for e, x in zip(oracle.edges, z) if x} == {("s", "a"), ("a", "b"), ("b", "t")}


def test_negative_cycle_on_the_way_raises_and_off_the_way_does_not() -> None:
    graph = nx.DiGraph([("s", "a"), ("a", "b"), ("b", "a"), ("a", "t"), ("s", "c"), ("c", "d"), ("d", "c")])
    oracle = ShortestPath(graph, "s", "t")
    costs = {("a", "b"): -2.0, ("b", "a"): 1.0, ("c", "d"): -5.0, ("d", "c"): 1.0}
    w = np.array([costs.get(e, 1.0) for e in oracle.edges])
    with pytest.raises(NegativeCycleError):
        oracle.solve(w)  # a → b → a costs −1 and can reach t
    costs[("b", "a")] = 3.0  # now only c → d → c is negative, and it cannot reach t
    w = np.array([costs.get(e, 1.0) for e in oracle.edges])
    z = oracle.solve(w)
    assert {e for e, x in zip(oracle.edges, z) if x} == {("s", "a"), ("a", "t")}


def test_undirected_negative_edge_is_a_negative_two_cycle() -> None:
    graph = nx.path_graph(["s", "a", "t"])
    oracle = ShortestPath(graph, "s", "t")
    with pytest.raises(NegativeCycleError, match="negative 2-cycle"):
        oracle.solve(np.array([1.0, -0.5]))
    nodes = ShortestPath(graph, "s", "t", weights_on="nodes")  # pairs sum ≥ 0: exact, no error
    np.testing.assert_array_equal(nodes.solve(np.array([2.0, -1.0, 1.0])), [1.0, 1.0, 1.0])
    with pytest.raises(NegativeCycleError):
        nodes.solve(np.array([0.5, -1.0, 2.0]))


def test_node_weights_include_both_endpoints_and_match_networkx() -> None:
    graph = nx.grid_2d_graph(4, 5).to_directed()
    oracle = ShortestPath(graph, (0, 0), (3, 4), weights_on="nodes")
    rng = np.random.default_rng(0)
    w = rng.random(oracle.n_vars)
    weight = dict(zip(oracle.nodes, w))
    length = nx.dijkstra_path_length(graph, (0, 0), (3, 4), weight=lambda u, v, d: weight[v])
    z = oracle.solve(w)
    assert z @ w == pytest.approx(length + weight[(0, 0)])
    assert z[oracle.nodes.index((0, 0))] == 1.0 and z[oracle.nodes.index((3, 4))] == 1.0
    assert oracle.expected_nonzeros == 8.0  # 7 hops + 1


def test_source_equals_target_and_expected_nonzeros() -> None:
    graph = nx.DiGraph([("s", "a"), ("a", "t")])
    assert ShortestPath(graph, "s", "s").solve(np.array([1.0, 1.0])).tolist() == [0.0, 0.0]
    assert ShortestPath(graph, "a", "a", weights_on="nodes").solve(np.ones(3)).tolist() == [0.0, 1.0, 0.0]
    assert ShortestPath(graph, "s", "s").expected_nonzeros is None
    assert ShortestPath(graph, "s", "t").expected_nonzeros == 2.0
    assert ShortestPath(graph, "t", "s").expected_nonzeros is None


# --------------------------------------------------------------------------------------------------
# ShortestPath errors, pickling, threads
# --------------------------------------------------------------------------------------------------


def test_disconnected_source_target_is_infeasible_with_row() -> None:
    graph = nx.DiGraph([("s", "a"), ("t", "a")])
    oracle = ShortestPath(graph, "s", "t")
    with pytest.raises(InfeasibleError, match="no path") as info:
        oracle.solve_batch(np.ones((3, 2)))
    assert info.value.rows == (0,)


def test_negative_cycle_error_names_the_batch_row() -> None:
    graph = nx.DiGraph([("s", "a"), ("a", "s"), ("a", "t")])
    oracle = ShortestPath(graph, "s", "t")
    w = np.ones((4, 3))
    w[2, :2] = -1.0
    with pytest.raises(NegativeCycleError) as info:
        oracle.solve_batch(w)
    assert info.value.rows == (2,)


@pytest.mark.timeout(20)  # a predecessor cycle that is not caught loops for ever
def test_a_broken_search_tree_names_its_row_and_never_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    # s → a ⇄ t: rounding could leave Dijkstra's predecessors with the cycle a → t → a; the trace stops
    # after n arcs and names the row whose tree it was, as every other error of the batch does
    from imle_solvers.adapters.graphs import shortest_path

    oracle = ShortestPath(nx.DiGraph([("s", "a"), ("a", "t"), ("t", "a")]), "s", "t")
    real = shortest_path._block_dijkstra

    def broken(*args: object) -> np.ndarray:
        pred = real(*args)  # [K, n], nodes s = 0, a = 1, t = 2
        pred[1, 1], pred[1, 2] = 2, 1  # row 1: a's predecessor is t, t's is a
        return pred

    monkeypatch.setattr(shortest_path, "_block_dijkstra", broken)
    with pytest.raises(NegativeCycleError, match="predecessor cycle") as info:
        oracle.solve_batch(np.ones((3, 3)))
    assert info.value.rows == (1,)


@pytest.mark.parametrize("weights_on", ["edges", "nodes"])
def test_a_negative_self_loop_on_the_way_names_its_rows_in_a_batch(weights_on: str) -> None:
    graph = nx.DiGraph([("s", "a"), ("a", "a"), ("a", "t"), ("s", "t")])
    oracle = ShortestPath(graph, "s", "t", weights_on=weights_on)  # type: ignore[arg-type]
    loop = oracle.edges.index(("a", "a")) if weights_on == "edges" else oracle.nodes.index("a")
    w = np.ones((5, oracle.n_vars))
    w[[1, 3], loop] = -0.25
    with pytest.raises(NegativeCycleError, match="self-loop") as info:
        oracle.solve_batch(w)
    assert info.value.rows == (1, 3)
    with pytest.raises(NegativeCycleError, match="self-loop"):
        oracle.solve(w[1])
    w[[1, 3], loop] = 0.0  # a loop of cost 0 is never taken, and is no error
    np.testing.assert_array_equal(oracle.solve_batch(w), [oracle.solve(r) for r in w])


@pytest.mark.parametrize("directed", [True, False])
def test_general_graph_batch_equals_row_by_row_solves(directed: bool) -> None:
    graph = nx.gnp_random_graph(25, 0.2, seed=5, directed=directed)
    oracle = ShortestPath(graph, 0, 24)
    assert not oracle.is_dag
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, size=(40, oracle.n_vars)).astype(np.float64)  # ties: block Dijkstra rows
    if directed:  # c + p_u − p_v: negative arcs, no negative cycle → Bellman-Ford rows
        pot = rng.integers(0, 4, size=25)
        x[1::3] += np.array([pot[u] - pot[v] for u, v in oracle.edges])
        assert (x.min(axis=1) < 0).any()
    np.testing.assert_array_equal(oracle.solve_batch(x), [oracle.solve(r) for r in x])


def test_undirected_batch_names_every_row_with_a_negative_edge() -> None:
    oracle = ShortestPath(nx.cycle_graph(5), 0, 2)
    x = np.ones((6, 5))
    x[[1, 4], 3] = -0.5
    with pytest.raises(NegativeCycleError, match="negative 2-cycle") as info:
        oracle.solve_batch(x)
    assert info.value.rows == (1, 4)


def test_invalid_weights_are_rejected_before_solving() -> None:
    oracle = ShortestPath(nx.DiGraph([("s", "t")]), "s", "t")
    w = np.ones((3, 1))
    w[1, 0] = np.nan
    with pytest.raises(InvalidWeightsError) as info:
        oracle.solve_batch(w)
    assert info.value.rows == (1,)
    with pytest.raises(InvalidWeightsError, match="n_vars=1"):
        oracle.solve_batch(np.ones((2, 3)))
    with pytest.raises(InvalidWeightsError, match="floating"):
        oracle.solve(np.ones(1, dtype=np.int64))
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.ones((2, 1)))


def test_bad_constructor_arguments() -> None:
    graph = nx.DiGraph([("s", "t")])
    with pytest.raises(ValueError, match="source 'x' is not a node"):
        ShortestPath(graph, "x", "t")
    with pytest.raises(ValueError, match="target"):
        ShortestPath(graph, "s", "y")
    with pytest.raises(ValueError, match="weights_on"):
        ShortestPath(graph, "s", "t", weights_on="arcs")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multigraph"):
        ShortestPath(nx.MultiDiGraph([("s", "t")]), "s", "t")
    with pytest.raises(ValueError, match="at least one edge"):
        ShortestPath(nx.empty_graph(["s", "t"], create_using=nx.DiGraph), "s", "t")
    with pytest.raises(TypeError, match="networkx graph"):
        ShortestPath([("s", "t")], "s", "t")


@pytest.mark.parametrize(
    "make",
    [
        lambda: ShortestPath(nx.gnp_random_graph(12, 0.3, seed=1, directed=True), 0, 11),
        lambda: ShortestPath(nx.grid_2d_graph(3, 3), (0, 0), (2, 2), weights_on="nodes"),
        lambda: GridShortestPath(5, 4, neighbourhood=4),
    ],
)
def test_pickle_round_trip_and_threads(make) -> None:
    oracle = make()
    rng = np.random.default_rng(0)
    w = rng.random((40, oracle.n_vars))
    expected = oracle.solve_batch(w)  # creates this thread's scratch matrix first
    clone = pickle.loads(pickle.dumps(oracle))
    np.testing.assert_array_equal(clone.solve_batch(w), expected)
    with ThreadPoolExecutor(4) as pool:  # per-thread scratch: concurrent calls do not interfere
        rows = list(pool.map(clone.solve, list(w) * 3))
    np.testing.assert_array_equal(np.array(rows), np.concatenate([expected] * 3))


# --------------------------------------------------------------------------------------------------
# GridShortestPath
# --------------------------------------------------------------------------------------------------


@functools.cache
def grid_paths(h: int, w: int, nb: int) -> np.ndarray:
    """Cell indicators of every simple top-left → bottom-right path, ``(P, h·w)``."""
    graph = nx.grid_2d_graph(h, w)
    if nb == 8:
        graph.add_edges_from(
            ((r, c), (r + 1, c + dc))
            for r in range(h - 1)
            for c in range(w)
            for dc in (-1, 1)
            if 0 <= c + dc < w
        )
    paths = [[(0, 0)]] if h * w == 1 else nx.all_simple_paths(graph, (0, 0), (h - 1, w - 1))
    out = []
    for path in paths:
        z = np.zeros(h * w)
        z[[r * w + c for r, c in path]] = 1.0
        out.append(z)
    return np.array(out)


def grid_negative_pair(h: int, w: int, nb: int, x: np.ndarray) -> bool:
    cells = x.reshape(h, w)
    pairs = [(cells[:, :-1], cells[:, 1:]), (cells[:-1], cells[1:])]
    if nb == 8:
        pairs += [(cells[:-1, :-1], cells[1:, 1:]), (cells[:-1, 1:], cells[1:, :-1])]
    return any(bool((a + b < 0).any()) for a, b in pairs)


@st.composite
def grid_cases(draw: st.DrawFn) -> tuple[int, int, int, np.ndarray]:
    nb = draw(st.sampled_from([4, 8]))
    sizes = [(1, 1), (1, 4), (2, 2), (2, 3), (3, 2), (3, 3)] + ([(3, 4)] if nb == 4 else [])
    h, w = draw(st.sampled_from(sizes))
    x = draw(weights_for(h * w, negative=True))
    return h, w, nb, x


@given(case=grid_cases())
def test_grid_matches_brute_force(case) -> None:
    h, w, nb, x = case
    oracle = GridShortestPath(h, w, neighbourhood=nb)
    if grid_negative_pair(h, w, nb, x):
        with pytest.raises(NegativeCycleError):
            oracle.solve(x)
        return
    paths = grid_paths(h, w, nb)
    z = oracle.solve(x)
    assert any((z == p).all() for p in paths)  # a simple corner-to-corner path
    assert z @ x == pytest.approx((paths @ x).min(), abs=1e-9)


@given(h=st.integers(1, 2), w=st.integers(2, 3), data=st.data())
def test_grid_negative_cycle_iff_adjacent_pair_sum_negative(h, w, data) -> None:
    """The documented criterion, checked against every simple cycle of the king's graph."""
    x = data.draw(weights_for(h * w, negative=True))
    graph = nx.DiGraph()
    for a, b in itertools.permutations(range(h * w), 2):
        (ra, ca), (rb, cb) = divmod(a, w), divmod(b, w)
        if max(abs(ra - rb), abs(ca - cb)) == 1:
            graph.add_edge(a, b)
    brute = any(sum(x[v] for v in cycle) < 0 for cycle in nx.simple_cycles(graph))
    assert brute == grid_negative_pair(h, w, 8, x)


@given(nb=st.sampled_from([4, 8]), data=st.data())
def test_grid_batch_rows_equal_single_solves_ties_included(nb, data) -> None:
    oracle = GridShortestPath(4, 5, neighbourhood=nb)
    rows = data.draw(st.integers(1, 37))  # crosses the 16-row chunks
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 3, size=(rows, 4, 5)).astype(np.float64)  # many ties
    x[::2, ::2, ::2] = -1.0  # every other row has negative cells (never adjacent): reweighted costs
    x = x.reshape(rows, 20)
    batch = oracle.solve_batch(x)
    np.testing.assert_array_equal(batch, np.array([oracle.solve(r) for r in x]))


def test_grid_agrees_with_networkx_on_12x12() -> None:
    oracle = GridShortestPath(12, 12)
    graph = nx.grid_2d_graph(12, 12)
    graph.add_edges_from(
        ((r, c), (r + 1, c + dc)) for r in range(11) for c in range(12) for dc in (-1, 1) if 0 <= c + dc < 12
    )
    rng = np.random.default_rng(7)
    x = rng.random((20, 12, 12)) * 10 + 0.01
    x[:, ::2, ::2] *= -0.001  # negative cells, never adjacent: no negative cycle
    x = x.reshape(20, 144)
    states = oracle.solve_batch(x)
    for row, z in zip(x, states):
        cell = dict(zip(oracle.nodes, row))
        half = {(u, v): cell[u] / 2 + cell[v] / 2 for u, v in graph.edges}
        nx.set_edge_attributes(graph, half, "cost")
        length = nx.dijkstra_path_length(graph, (0, 0), (11, 11), weight="cost")
        assert z @ row == pytest.approx(length + (row[0] + row[-1]) / 2)
    assert oracle.expected_nonzeros == 12.0


def test_grid_negative_cycle_rows_and_arguments() -> None:
    oracle = GridShortestPath(3, 3)
    x = np.ones((5, 9))
    x[1, 4], x[3, 0] = -1.5, -2.0
    with pytest.raises(NegativeCycleError) as info:
        oracle.solve_batch(x)
    assert info.value.rows == (1, 3)
    x[1, 4], x[3, 0] = -1.0, -1.0  # pair sums exactly 0: allowed, exact
    assert oracle.solve_batch(x).shape == (5, 9)
    with pytest.raises(InvalidWeightsError):
        oracle.solve_batch(np.ones((2, 8)))
    for bad in [dict(height=0, width=3), dict(height=2, width=2.5), dict(height=2, width=2, neighbourhood=6)]:
        with pytest.raises(ValueError):
            GridShortestPath(**bad)  # type: ignore[arg-type]
    assert GridShortestPath(3, 4, neighbourhood=4).expected_nonzeros == 6.0
    assert GridShortestPath(1, 1).solve_batch(np.array([[-3.0], [2.0]])).tolist() == [[1.0], [1.0]]
    assert len(GridShortestPath(2, 2).edges) == 6 and GridShortestPath(2, 3).nodes[4] == (1, 1)
