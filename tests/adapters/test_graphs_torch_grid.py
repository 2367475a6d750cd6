"""TorchGridShortestPath: against SciPy's Dijkstra (GridShortestPath), ties, errors, devices."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import ClampedCosts, TorchOracle, imle
from imle_solvers.adapters import GridShortestPath, TorchGridShortestPath
from imle_solvers.errors import InvalidWeightsError


def assert_paths(states: np.ndarray, h: int, w: int, neighbourhood: int) -> None:
    """Every row is a 0/1 set of cells, connected by the allowed moves, holding both corners."""
    steps = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    if neighbourhood == 8:
        steps += [(-1, -1), (-1, 1), (1, -1), (1, 1)]
    for z in states:
        assert set(np.unique(z)) <= {0.0, 1.0}
        cells = {(i // w, i % w) for i in np.flatnonzero(z)}
        assert (0, 0) in cells and (h - 1, w - 1) in cells
        seen, todo = {(0, 0)}, [(0, 0)]
        while todo:
            r, c = todo.pop()
            for nxt in ((r + a, c + b) for a, b in steps):
                if nxt in cells and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen == cells


@given(
    h=st.integers(1, 12),
    w=st.integers(1, 12),
    neighbourhood=st.sampled_from([4, 8]),
    seed=st.integers(0, 2**31 - 1),
    levels=st.sampled_from([1, 2, 3, 0]),
)
def test_matches_scipy_dijkstra(h: int, w: int, neighbourhood: int, seed: int, levels: int) -> None:
    """Same cost as SciPy's Dijkstra; the same state when the costs are continuous (unique optimum).

    ``levels`` > 0 draws integer costs in ``[0, levels)``: many ties and zero costs.
    """
    rng = np.random.default_rng(seed)
    x = rng.integers(0, levels, (8, h * w)).astype(float) if levels else rng.random((8, h * w))
    host = GridShortestPath(h, w, neighbourhood).solve_batch(x)
    dev = TorchGridShortestPath(h, w, neighbourhood).solve_torch(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose((dev * x).sum(1), (host * x).sum(1), rtol=1e-12, atol=1e-12)
    assert_paths(dev, h, w, neighbourhood)
    if not levels:
        np.testing.assert_array_equal(dev, host)


def test_all_zero_costs_and_float32() -> None:
    oracle = TorchGridShortestPath(6, 5, 4)
    z = oracle.solve_torch(torch.zeros(3, 30, dtype=torch.float32))
    assert z.dtype == torch.float32
    assert_paths(z.numpy(), 6, 5, 4)
    assert (z.sum(1) == 6 + 5 - 1).all()  # fewest moves among the zero-cost paths (least L)


def test_ties_deterministic_and_documented_order() -> None:
    """Uniform costs: the fewest cells, first direction in N, S, W, E, NW, NE, SW, SE order."""
    oracle = TorchGridShortestPath(3, 3)
    z = oracle.solve_torch(torch.ones(2, 9)).reshape(2, 3, 3)
    assert z[0].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]  # the diagonal (3 cells)
    assert torch.equal(z[0], z[1])
    flat = TorchGridShortestPath(2, 3, 4).solve_torch(torch.ones(9, 6))
    assert (flat == flat[0]).all()


def test_leading_dims_and_examples() -> None:
    oracle = TorchGridShortestPath(4, 4)
    x = torch.rand(2, 3, 16, generator=torch.Generator().manual_seed(0))
    z = oracle.solve_torch(x)
    assert z.shape == (2, 3, 16)
    assert torch.equal(z.reshape(6, 16), oracle.solve_torch(x.reshape(6, 16)))
    np.testing.assert_array_equal(oracle.solve_batch(x.reshape(6, 16).double().numpy()), z.reshape(6, 16))
    assert oracle.solve_torch(torch.empty(0, 16)).shape == (0, 16)
    assert TorchGridShortestPath(1, 1).solve_torch(torch.tensor([[-3.0]])).tolist() == [[1.0]]
    assert isinstance(oracle, TorchOracle) and oracle.sense == "min" and oracle.in_process_safe
    assert oracle.expected_nonzeros == 4 and TorchGridShortestPath(3, 5, 4).expected_nonzeros == 7
    assert pickle.loads(pickle.dumps(oracle)).solve_torch(x).equal(z)
    assert oracle.nodes[5] == (1, 1)


def test_torch_kernels_match_numpy_kernels() -> None:
    """The accelerator code path (torch sweeps + pointer doubling), run on the CPU, gives the states
    of the NumPy code path bit for bit: what CUDA runs is the same programme."""
    rng = np.random.default_rng(3)
    for h, w, nb in [(5, 7, 8), (6, 4, 4), (1, 6, 8)]:
        oracle = TorchGridShortestPath(h, w, nb)
        for x in (rng.integers(0, 3, (16, h * w)).astype(np.float32), rng.random((16, h * w), np.float32)):
            wt = torch.from_numpy(x).T.reshape(h, w, -1).contiguous()
            dist, level = oracle._distances_torch(wt)
            via_torch = oracle._trace(dist, level).numpy()
            dist_np, level_np = oracle._distances_numpy(np.ascontiguousarray(wt.numpy()))
            np.testing.assert_array_equal(dist.numpy(), dist_np)
            np.testing.assert_array_equal(via_torch, oracle._trace_numpy(dist_np, level_np))


def _host_read(*args: object) -> None:
    raise AssertionError("a device value was read on the host")


def test_sweeps_on_a_device_counter_match_numbered_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CUDA graph records (the sweep index as a 0-dim tensor advanced in place, chunks run past
    the budget) gives the distances and levels of numbered sweeps, on the CPU."""
    rng = np.random.default_rng(4)
    for h, w, nb in [(6, 5, 8), (4, 7, 4)]:
        oracle = TorchGridShortestPath(h, w, nb)
        costs = torch.from_numpy(rng.random((h, w, 9)))  # [H, W, N]
        runs = []
        for counter in (False, True):
            dist = torch.full((h + 2, w + 2, 9), float("inf"), dtype=costs.dtype)
            dist[1, 1] = costs[0, 0]
            level = torch.zeros(dist.shape, dtype=torch.int32)
            if counter:
                k = torch.ones((), dtype=torch.int32)
                with monkeypatch.context() as m:  # the counter is never read on the host (no sync)
                    for read in ("__index__", "__int__", "item", "tolist", "__bool__"):
                        m.setattr(torch.Tensor, read, _host_read)
                    for _ in range(-(-h * w // 8)):  # chunks of 8: up to 7 sweeps past the H·W budget
                        oracle._sweeps_torch(dist, level, costs, k, 8)
                assert int(k) == 8 * -(-h * w // 8) + 1
            else:
                oracle._sweeps_torch(dist, level, costs, 1, h * w)
            runs.append((dist, level))
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
        assert int(runs[0][1].max()) > 1  # levels beyond the first sweep were recorded


def test_recorded_graphs_are_not_pickled() -> None:
    oracle = TorchGridShortestPath(3, 4, cuda_graphs=False)
    oracle._graphs._graphs[("shape",)] = object()  # type: ignore[assignment]
    copy = pickle.loads(pickle.dumps(oracle))
    assert len(copy._graphs) == 0 and copy.cuda_graphs is False and len(oracle._graphs) == 1


def test_snake_needs_many_sweeps() -> None:
    """A walled maze whose only cheap path winds through every row: far more sweeps than H + W."""
    h, w = 9, 9
    cost = np.full((h, w), 1000.0)
    cost[0::2, :] = 1.0  # open rows
    for r in range(1, h, 2):  # one gap per wall, alternating sides
        cost[r, w - 1 if r % 4 == 1 else 0] = 1.0
    x = cost.ravel()[None]
    for nb in (4, 8):
        host = GridShortestPath(h, w, nb).solve_batch(x)
        dev = TorchGridShortestPath(h, w, nb).solve_torch(torch.from_numpy(x)).numpy()
        assert (dev * x).sum() == (host * x).sum() < 1000


def test_negative_costs_raise_on_cpu_and_clamped_costs_stay_on_device() -> None:
    oracle = TorchGridShortestPath(3, 3)
    w = torch.ones(3, 9)
    w[2, 4] = -0.5
    with pytest.raises(InvalidWeightsError, match="negative") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (2,)
    clamped = ClampedCosts(oracle)
    assert isinstance(clamped, TorchOracle) and isinstance(clamped, ClampedCosts)
    assert torch.equal(clamped.solve_torch(w), oracle.solve_torch(w.clamp_min(0)))
    assert clamped.in_process_safe
    np.testing.assert_array_equal(clamped.solve_batch(w.double().numpy()), clamped.solve_torch(w).numpy())


def test_overflowing_sums_give_nan_rows_and_shape_errors() -> None:
    oracle = TorchGridShortestPath(3, 3)
    w = torch.ones(2, 9, dtype=torch.float64)
    w[1] = 1e308
    z = oracle.solve_torch(w)
    assert torch.isnan(z[1]).all() and not torch.isnan(z[0]).any()
    with pytest.raises(InvalidWeightsError, match=r"\(\.\.\., 9\)"):
        oracle.solve_torch(torch.ones(2, 8))
    with pytest.raises(ValueError, match="neighbourhood"):
        TorchGridShortestPath(3, 3, 6)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="height"):
        TorchGridShortestPath(0, 3)


def test_in_an_imle_layer() -> None:
    oracle = TorchGridShortestPath(4, 4)
    w = torch.rand(5, 16, requires_grad=True)
    z = imle(w, ClampedCosts(oracle))
    z.sum().backward()
    assert z.shape == (5, 16) and w.grad is not None and torch.isfinite(w.grad).all()


def test_nan_costs_raise_on_cpu_and_give_nan_rows_on_the_torch_path() -> None:
    """NaN costs: a typed error naming the rows on the CPU (before any sweep); the accelerator's torch
    path (run here on CPU tensors) returns those rows all-NaN, whatever the sweep count, and the others
    unchanged."""
    oracle = TorchGridShortestPath(4, 4)
    w = torch.rand(4, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w[1, 15] = float("nan")  # far from the source: the sweeps could converge before NaN spreads
    w[3, 5] = float("nan")
    w[2, 2] = -1.0
    with pytest.raises(InvalidWeightsError, match="NaN cell costs") as info:
        oracle.solve_torch(w)
    assert info.value.rows == (1, 3)
    z = oracle._solve_torch_ops(w)
    assert torch.isnan(z[1:]).all() and torch.equal(z[0], oracle.solve_torch(w[0]))


def test_solve_torch_compiles_with_a_graph_break() -> None:
    """Dynamo does not trace the NumPy path (it failed on ``np.copyto``): the solve runs eagerly."""
    oracle = TorchGridShortestPath(5, 4)
    x = torch.rand(3, 20, generator=torch.Generator().manual_seed(2))

    def f(x: torch.Tensor) -> torch.Tensor:
        return oracle.solve_torch(x.abs() + 0.5) * 2

    assert torch.equal(torch.compile(f, backend="eager")(x), f(x))
    with pytest.raises(InvalidWeightsError, match="negative") as info:  # errors still reach the caller
        torch.compile(oracle.solve_torch, backend="eager")(x - 0.5)
    assert info.value.rows is not None and len(info.value.rows) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_compiled_model_with_the_oracle_on_cpu() -> None:
    """``torch.compile(model)`` (Inductor) of a model with the oracle inside, directly and in an I-MLE
    layer in eval mode (the noise-free MAP state): the states of the eager model."""
    from imle_solvers import IMLE

    oracle = TorchGridShortestPath(6, 6)
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(36, 36), torch.nn.Softplus())
            self.layer = IMLE(ClampedCosts(oracle))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            costs = self.net(x)
            return oracle.solve_torch(costs), self.layer(costs)

    model = Model().eval()
    x = torch.rand(8, 36)
    compiled = torch.compile(model)
    for _ in range(2):  # the second call runs the compiled graphs
        got, want = compiled(x), model(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert_paths(got[0].numpy(), 6, 6, 8)
        x = torch.rand(8, 36)
