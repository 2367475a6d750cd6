"""Graph adapters with weights whose sums overflow: the right answer or a typed error, never a hang."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from imle_solvers.adapters import GridShortestPath, Matching, ShortestPath, SpanningTree
from imle_solvers.adapters.graphs import grid as grid_module
from imle_solvers.errors import InvalidWeightsError

pytestmark = pytest.mark.timeout(30)  # graph solvers in this process: a test that loops fails, not the suite


def test_grid_batch_of_huge_costs_terminates_with_the_path() -> None:
    grid = GridShortestPath(3, 3)
    z = grid.solve_batch(np.full((1, 9), 9e307))
    assert z.reshape(3, 3).tolist() == grid.solve_batch(np.ones((1, 9))).reshape(3, 3).tolist()
    mixed = np.ones((3, 9))
    mixed[1] = 1e308
    mixed[2, [1, 2, 5]] = -1e308  # a cheap corridor of huge negative cells: a negative 2-cycle
    with pytest.raises(Exception, match="negative") as info:
        grid.solve_batch(mixed)
    assert info.value.rows == (2,)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(grid.solve_batch(mixed[:2]), grid.solve_batch(np.ones((2, 9))))


def test_grid_solve_of_huge_costs() -> None:
    grid = GridShortestPath(3, 3)
    np.testing.assert_array_equal(grid.solve(np.full(9, 1e308)), grid.solve(np.ones(9)))
    w = np.full(9, 1e308)
    w[[3, 6, 7]] = 1e300  # down the left edge, then right: cheaper by far
    assert grid.solve(w).reshape(3, 3).tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 1]]
    with pytest.raises(InvalidWeightsError):
        grid.solve(1e308)  # type: ignore[arg-type]


def test_grid_walk_is_bounded_even_without_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """If a predecessor chain were ever broken, the walk raises naming the row instead of looping."""
    grid = GridShortestPath(2, 2)

    real = grid_module._block_dijkstra

    def broken(indices: np.ndarray, indptr: np.ndarray, n: int, cost: np.ndarray, source: int) -> np.ndarray:
        pred = real(indices, indptr, n, cost, source)
        pred[cost[:, 0] > 1] = -9999  # rows marked by a cost > 1 lose their predecessors
        return pred

    monkeypatch.setattr(grid_module, "_block_dijkstra", broken)
    w = np.ones((20, 4))
    w[17] = 2.0
    with pytest.raises(InvalidWeightsError, match="overflow") as info:
        grid.solve_batch(w)
    assert info.value.rows == (17,)  # the second row of the second block of 16


def test_matching_with_huge_weights_is_not_empty() -> None:
    graph = nx.complete_graph(5)
    matching = Matching(graph)
    for value in (1e308, 1.7e308):
        huge = matching.solve(np.full(matching.n_vars, value))
        assert huge.sum() == 2
        np.testing.assert_array_equal(huge, matching.solve(np.ones(matching.n_vars)))
    batch = np.ones((2, matching.n_vars))
    batch[1] *= 1e308
    z = matching.solve_batch(batch)
    np.testing.assert_array_equal(z[1], z[0])


def test_shortest_path_overflow_is_solved_not_a_cycle() -> None:
    graph = nx.DiGraph([(0, 1), (1, 2), (2, 3), (0, 3), (3, 0)])
    sp = ShortestPath(graph, 0, 3)  # not a DAG: SciPy's Dijkstra
    w = np.full(sp.n_vars, 1e308)
    w[sp.edges.index((0, 3))] = 1.5e308  # one huge arc beats three: 3e308 overflows without scaling
    state = sp.solve(w)
    assert state[sp.edges.index((0, 3))] == 1 and state.sum() == 1
    np.testing.assert_array_equal(sp.solve_batch(w[None])[0], state)
    undirected = ShortestPath(nx.cycle_graph(6), 0, 3, weights_on="nodes")
    z = undirected.solve_batch(np.full((2, 6), 1e308))
    assert (z.sum(1) == 4).all()


def test_spanning_tree_with_huge_weights() -> None:
    tree = SpanningTree(nx.cycle_graph(4))
    w = np.array([1e308, -1e308, 1.7e308, 0.0])
    z = tree.solve(w)
    assert z.tolist() == [1.0, 1.0, 0.0, 1.0]
