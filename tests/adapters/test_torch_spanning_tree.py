"""TorchSpanningTree against the host SpanningTree (Kruskal; states, ties included), brute force and
NetworkX; its fixed-round device schedule on CPU tensors, its errors, and inside an I-MLE layer."""

from __future__ import annotations

import itertools
import pickle

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import IMLE, InvalidWeightsError, SpanningTree, SumOfGamma, TorchSpanningTree
from imle_solvers.adapters.graphs import spanning_tree as tree_module
from imle_solvers.testing import assert_oracle_contract

pytestmark = pytest.mark.timeout(30)  # graph solvers in this process: a test that loops fails, not the suite


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 7, max_edges: int = 10) -> tuple[int, list[tuple[int, int]]]:
    """Nodes ``0 … n−1`` and an edge list in random order: maybe disconnected, maybe a self-loop."""
    n = draw(st.integers(1, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=max_edges, unique=True)) if pairs else []
    if not edges or draw(st.booleans()):
        edges.append((0, 0))
    edges = [(v, u) if draw(st.booleans()) else (u, v) for u, v in draw(st.permutations(edges))]
    return n, edges


def host_tree(n: int, edges: list[tuple[int, int]], kind: str) -> tuple[SpanningTree, list[tuple[int, int]]]:
    """The host oracle on these edges, and its edge order (NetworkX's, to be given to the device one)."""
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    oracle = SpanningTree(graph, kind=kind)  # type: ignore[arg-type]
    return oracle, list(oracle.edges)


def all_forests(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    size = n - nx.number_connected_components(graph)
    out = []
    for subset in itertools.combinations(range(len(edges)), size):
        forest = nx.Graph()
        forest.add_nodes_from(range(n))
        forest.add_edges_from(edges[i] for i in subset)
        if nx.is_forest(forest) and forest.number_of_edges() == size:
            z = np.zeros(len(edges))
            z[list(subset)] = 1.0
            out.append(z)
    return np.array(out)


def weights(m: int, rows: int = 3) -> st.SearchStrategy[np.ndarray]:
    """``(rows, m)``: small integers (ties), floats, or either with ±inf and −0.0 mixed in."""
    ints = st.integers(-2, 2).map(float)
    floats = st.floats(-3, 3, allow_nan=False, width=32)
    special = st.sampled_from([np.inf, -np.inf, -0.0, 0.0])
    entry = st.one_of(ints, floats, special) if m > 1 else st.one_of(ints, floats)
    return st.lists(entry, min_size=rows * m, max_size=rows * m).map(
        lambda xs: np.array(xs, dtype=np.float64).reshape(rows, m)
    )


@given(graph=graphs(), kind=st.sampled_from(["min", "max"]), data=st.data())
def test_states_are_kruskal_states_and_optimal(graph, kind, data) -> None:
    n, drawn = graph
    host, edges = host_tree(n, drawn, kind)
    oracle = TorchSpanningTree(n, edges, kind=kind)
    w = data.draw(weights(len(edges)))
    z = oracle.solve_torch(torch.from_numpy(w)).numpy()
    forests = all_forests(n, edges)
    sign = 1.0 if kind == "max" else -1.0
    for row, state in zip(w, z):
        np.testing.assert_array_equal(state, host._solve(row))  # Kruskal, stable sort: ties included
        assert (np.abs(forests - state).max(axis=1) == 0).any()  # a spanning forest
        if np.isfinite(row).all():
            assert sign * (state @ row) == pytest.approx((sign * forests @ row).max(), abs=1e-9)
    assert oracle.sense == kind and oracle.expected_nonzeros == host.expected_nonzeros


@given(graph=graphs(max_nodes=9, max_edges=20), data=st.data())
def test_fixed_schedule_equals_early_stop(graph, data) -> None:
    """The device schedule (⌈log₂ V⌉ rounds, full pointer jumping) gives the CPU's states."""
    n, edges = graph
    oracle = TorchSpanningTree(n, edges)
    key = torch.from_numpy(data.draw(weights(len(edges), rows=4)))
    assert torch.equal(oracle._boruvka(key, early_stop=False), oracle._boruvka(key, early_stop=True))


def test_worst_case_merging_needs_every_round() -> None:
    """On a path whose edge weights pair the components up level by level (the weight of edge
    ``(i, i+1)`` is the number of trailing zeros of ``i + 1``), each round only halves them."""
    for n in (2, 3, 8, 9, 64, 100):
        edges = [(i, i + 1) for i in range(n - 1)]
        w = torch.tensor([float(((i + 1) & -(i + 1)).bit_length()) for i in range(n - 1)])
        oracle = TorchSpanningTree(n, edges)
        assert oracle._boruvka(w[None], early_stop=False).all()  # a path is its own spanning tree
        short = TorchSpanningTree(n, edges)
        short._rounds -= 1
        if n & (n - 1) == 0:  # a power of two: ⌈log₂ V⌉ rounds are needed, one fewer is not enough
            assert not short._boruvka(w[None], early_stop=False).all()


def test_agrees_with_networkx_on_larger_graphs() -> None:
    rng = np.random.default_rng(0)
    for n, m, seed in [(40, 150, 1), (100, 180, 2), (64, 2016, 3)]:
        graph = nx.gnm_random_graph(n, m, seed=seed)
        edges = list(graph.edges)
        for kind, mst in (("min", nx.minimum_spanning_tree), ("max", nx.maximum_spanning_tree)):
            oracle = TorchSpanningTree(n, edges, kind=kind)
            w = torch.from_numpy(rng.normal(size=(6, len(edges))))
            z = oracle.solve_torch(w)
            np.testing.assert_array_equal(z.numpy(), SpanningTree(graph, kind=kind).solve_batch(w.numpy()))
            for row, state in zip(w.numpy(), z.numpy()):
                for (u, v), x in zip(edges, row):
                    graph[u][v]["weight"] = x
                assert state @ row == pytest.approx(mst(graph).size(weight="weight"))


def test_ties_go_to_the_first_edge_and_parallel_edges_and_loops() -> None:
    cycle = [(0, 1), (1, 2), (2, 3), (3, 0)]
    z = TorchSpanningTree(4, cycle).solve_torch(torch.ones(4))
    assert z.tolist() == [1.0, 1.0, 1.0, 0.0]  # the last edge closes the cycle
    assert TorchSpanningTree(4, cycle, kind="max").solve_torch(torch.ones(4)).tolist() == [1, 1, 1, 0]
    signed_zero = TorchSpanningTree(3, [(0, 1), (1, 2), (0, 2)]).solve_torch(torch.tensor([0.0, 0.0, -0.0]))
    assert signed_zero.tolist() == [1.0, 1.0, 0.0]  # −0.0 ties with 0.0 (float32 codes and float64 ranks)
    signed_zero64 = TorchSpanningTree(3, [(0, 1), (1, 2), (0, 2)]).solve_torch(
        torch.tensor([0.0, 0.0, -0.0], dtype=torch.float64)
    )
    assert signed_zero64.tolist() == [1.0, 1.0, 0.0]
    parallel = TorchSpanningTree(3, [(0, 1), (1, 0), (1, 1), (1, 2)])
    assert parallel.solve_torch(torch.tensor([[2.0, 1.0, -9.0, 5.0], [1.0, 1.0, 0.0, 0.0]])).tolist() == [
        [0.0, 1.0, 0.0, 1.0],
        [1.0, 0.0, 0.0, 1.0],
    ]
    assert parallel.expected_nonzeros == 2.0


def test_infinite_weights_are_ordinary_weights() -> None:
    oracle = TorchSpanningTree(4, [(0, 1), (1, 2), (2, 3), (0, 2), (1, 3)])
    inf = float("inf")
    for dtype in (torch.float16, torch.float32, torch.float64):
        w = torch.tensor([[inf, 1.0, inf, 2.0, -inf], [inf, inf, inf, inf, inf]], dtype=dtype)
        z = oracle.solve_torch(w)
        assert z.dtype == dtype
        assert z.tolist() == [[0.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]]


def test_degenerate_graphs() -> None:
    loop = TorchSpanningTree(1, [(0, 0)])
    assert loop.expected_nonzeros is None
    assert loop.solve_torch(torch.tensor([[-5.0], [3.0]])).tolist() == [[0.0], [0.0]]
    single = TorchSpanningTree(2, [(0, 1)], kind="max")
    assert single.solve_torch(torch.tensor([-7.0])).tolist() == [1.0] and single.expected_nonzeros == 1.0
    forest = TorchSpanningTree(6, [(0, 1), (1, 2), (0, 2), (4, 5)])  # node 3 isolated, two trees
    assert forest.expected_nonzeros == 3.0
    assert forest.solve_torch(torch.tensor([3.0, 2.0, 1.0, 9.0])).tolist() == [0.0, 1.0, 1.0, 1.0]


def test_shapes_dtypes_and_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = nx.gnm_random_graph(12, 30, seed=4)
    oracle = TorchSpanningTree(12, list(graph.edges))
    w = torch.randn(2, 5, 7, 30, generator=torch.Generator().manual_seed(0))
    z = oracle.solve_torch(w)
    assert z.shape == w.shape and z.dtype == w.dtype
    assert (z.sum(-1) == oracle.expected_nonzeros).all()
    monkeypatch.setattr(tree_module, "_CPU_BLOCK", 64)  # blocks of 2 rows
    assert torch.equal(oracle.solve_torch(w), z)
    assert oracle.solve_torch(torch.zeros(0, 30)).shape == (0, 30)
    assert oracle.solve_torch(torch.zeros(30, dtype=torch.int64)).dtype == torch.int64
    # integer weights are compared as integers: 2**24 + 1 and 2**24 are one float32 number
    parallel = TorchSpanningTree(2, [(0, 1), (0, 1)])
    big = torch.tensor([[2**24 + 1, 2**24], [2**24, 2**24 + 1]], dtype=torch.int64)
    assert parallel.solve_torch(big).tolist() == [[0, 1], [1, 0]]
    half = w.reshape(-1, 30)[:4].to(torch.bfloat16)  # no NumPy twin: the NaN check runs in torch
    assert torch.equal(oracle.solve_torch(half).double(), oracle.solve_torch(half.double()))
    half[2, 3] = float("nan")
    with pytest.raises(InvalidWeightsError) as info:
        oracle.solve_torch(half)
    assert info.value.rows == (2,)


def exact_kruskal(n: int, edges: list[tuple[int, int]], w: list[int], kind: str) -> list[int]:
    """Kruskal on Python integers (exact at any size), ties to the first edge: the 0/1 state."""
    order = sorted(range(len(edges)), key=lambda j: w[j] if kind == "min" else -w[j])  # stable
    parent, state = list(range(n)), [0] * len(edges)

    def root(a: int) -> int:
        while parent[a] != a:
            a = parent[a]
        return a

    for j in order:
        a, b = root(edges[j][0]), root(edges[j][1])
        if a != b:
            parent[a] = b
            state[j] = 1
    return state


INT64_EDGE = [-(2**63), -(2**63) + 1, -1, 0, 1, 2**53, 2**53 + 1, 2**62, 2**62 + 1, 2**63 - 2, 2**63 - 1]


@given(
    graph=graphs(max_nodes=5, max_edges=8),
    kind=st.sampled_from(["min", "max"]),
    data=st.data(),
)
def test_int64_weights_beyond_2_to_53_are_compared_exactly(
    graph: tuple[int, list[tuple[int, int]]], kind: str, data: st.DataObject
) -> None:
    """int64 weights that float64 would round (2^62 + 1 → 2^62), the ends of int64 included: the
    states of Kruskal on exact integers, on the CPU path and on the device's fixed schedule."""
    n, edges = graph
    base = data.draw(st.sampled_from([0, 2**53, 2**62, -(2**62)]))
    values = st.one_of(st.integers(-3, 3).map(lambda d: base + d), st.sampled_from(INT64_EDGE))
    rows = data.draw(
        st.lists(st.lists(values, min_size=len(edges), max_size=len(edges)), min_size=2, max_size=3)
    )
    oracle = TorchSpanningTree(n, edges, kind=kind)  # type: ignore[arg-type]
    w = torch.tensor(rows, dtype=torch.int64)
    z = oracle.solve_torch(w)
    assert z.dtype == torch.int64
    assert z.tolist() == [exact_kruskal(n, edges, row, kind) for row in rows]
    fixed = oracle._boruvka(oracle._key(w), early_stop=False)  # the accelerator's schedule
    assert fixed.long().tolist() == z.tolist()


def test_a_maximum_tree_keeps_the_heavier_of_two_edges_float64_cannot_tell_apart() -> None:
    triangle = [(0, 1), (1, 2), (0, 2)]
    w = torch.tensor([[2**62, 2**62 + 1, 2**62], [2**62 + 1, 2**62, 2**62 + 2]], dtype=torch.int64)
    assert TorchSpanningTree(3, triangle, kind="max").solve_torch(w).tolist() == [[1, 1, 0], [1, 0, 1]]
    assert TorchSpanningTree(3, triangle, kind="min").solve_torch(w).tolist() == [[1, 0, 1], [1, 1, 0]]
    ends = torch.tensor([-(2**63), 2**63 - 1, -(2**63) + 1], dtype=torch.int64)  # ~w: no overflow at −2^63
    assert TorchSpanningTree(3, triangle, kind="max").solve_torch(ends).tolist() == [0, 1, 1]
    assert TorchSpanningTree(3, triangle, kind="min").solve_torch(ends).tolist() == [1, 0, 1]
    small = torch.tensor([3, 1, 2], dtype=torch.int32)  # narrower integers are widened to int64
    assert TorchSpanningTree(3, triangle, kind="max").solve_torch(small).tolist() == [1, 0, 1]
    assert TorchSpanningTree(3, triangle, kind="max").solve_torch(small).dtype == torch.int32


def test_nan_rows_are_named_and_bad_arguments_refused() -> None:
    oracle = TorchSpanningTree(3, [(0, 1), (1, 2), (0, 2)])
    w = torch.zeros(4, 3)
    w[1, 0] = w[3, 2] = float("nan")
    with pytest.raises(InvalidWeightsError, match="NaN") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (1, 3)
    with pytest.raises(InvalidWeightsError, match="shape"):
        oracle.solve_torch(torch.zeros(2, 4))
    for bad_edges, match in [
        ([], "at least one edge"),
        ([(0, 3)], "pairs"),
        ([(0, 1, 2)], "pairs"),
        ([(True, 1)], "pairs"),
        ([(0.0, 1)], "pairs"),
        ([(-1, 1)], "pairs"),
        ([3], "pairs"),
    ]:
        with pytest.raises(ValueError, match=match):
            TorchSpanningTree(3, bad_edges)
    with pytest.raises(ValueError, match="kind"):
        TorchSpanningTree(3, [(0, 1)], kind="minimum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_nodes"):
        TorchSpanningTree(0, [(0, 0)])
    assert TorchSpanningTree(np.int64(2), [(np.int64(0), 1)]).edges == [(0, 1)]


@pytest.mark.parametrize("kind", ["min", "max"])
def test_oracle_contract(kind: str) -> None:
    edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 3), (1, 3)]
    oracle = TorchSpanningTree(4, edges, kind=kind)  # type: ignore[arg-type]
    assert_oracle_contract(oracle, states=all_forests(4, edges))
    clone = pickle.loads(pickle.dumps(oracle))
    w = torch.randn(8, 6, generator=torch.Generator().manual_seed(5))
    assert torch.equal(clone.solve_torch(w), oracle.solve_torch(w))


def test_in_an_imle_layer_with_the_default_noise() -> None:
    graph = nx.complete_graph(5)
    oracle = TorchSpanningTree(5, list(graph.edges), kind="max")
    layer = IMLE(oracle, samples=2, generator=torch.Generator().manual_seed(0))
    assert isinstance(layer.noise, SumOfGamma) and layer.noise.k == 4  # V − 1 edges in every tree
    # enough rows that the default's local step changes some state, whatever the seed
    theta = torch.randn(32, 10, generator=torch.Generator().manual_seed(1), requires_grad=True)
    z = layer(theta)
    assert z.shape == (32, 2, 10) and (z.sum(-1) == 4).all()
    loss = (z * torch.linspace(-1, 1, 10)).sum()
    loss.backward()
    assert theta.grad is not None and torch.isfinite(theta.grad).all() and theta.grad.abs().sum() > 0


def test_cpu_batches_are_solved_in_blocks_under_torch_s_grain_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # no intra-op threads: a block holds at most _CPU_BLOCK entries, and no more blocks than that needs
    oracle = TorchSpanningTree(6, list(itertools.combinations(range(6), 2)))  # 15 edges
    seen: list[int] = []
    real = TorchSpanningTree._boruvka

    def boruvka(self: TorchSpanningTree, key: torch.Tensor, *, early_stop: bool) -> torch.Tensor:
        seen.append(key.shape[0])
        return real(self, key, early_stop=early_stop)

    monkeypatch.setattr(TorchSpanningTree, "_boruvka", boruvka)
    per_block = tree_module._CPU_BLOCK // oracle.n_vars
    w = torch.rand(2 * per_block + 5, oracle.n_vars, generator=torch.Generator().manual_seed(0))
    states = oracle.solve_torch(w)
    assert seen == [per_block, per_block, 5]
    assert torch.equal(states[-5:], oracle.solve_torch(w[-5:]))  # blocks change nothing
    seen.clear()
    oracle.solve_torch(w[:7])
    assert seen == [7]


def test_off_the_cpu_nothing_is_read_back_to_the_host() -> None:
    # on the meta device a tensor has no values: any host read (a sync on CUDA) would raise
    oracle = TorchSpanningTree(5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (1, 3)], kind="max")
    for w in (torch.rand(4, 7), torch.randint(0, 9, (4, 7))):
        z = oracle.solve_torch(w.to("meta"))
        assert z.device.type == "meta" and z.shape == (4, 7) and z.dtype == w.dtype
