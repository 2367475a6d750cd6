"""Predict-then-optimize data: the SPO generating model, optimal labels, splits."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from imle_solvers.adapters import DAGShortestPath
from imle_solvers.data import PTODataset, shortest_path


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``np.testing.assert_allclose`` for tensors (``torch.testing`` costs seconds to import)."""
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1.3e-6, atol=1e-5)


def grid_paths(oracle: DAGShortestPath) -> np.ndarray:
    """All monotone south-west → north-east paths of a small grid, as arc indicators."""
    index = {e: i for i, e in enumerate(oracle.edges)}
    target = oracle.target
    out = []
    stack: list[tuple[object, list[int]]] = [(oracle.source, [])]
    while stack:
        node, used = stack.pop()
        if node == target:
            z = np.zeros(oracle.n_vars)
            z[used] = 1
            out.append(z)
            continue
        for (u, v), i in index.items():
            if u == node:
                stack.append((v, [*used, i]))
    return np.array(out)


def test_fixed_seed_values() -> None:
    # PyEPO's draw order (B, x, ε from RandomState(135)); values recorded from this implementation
    d = shortest_path(3, deg=2, noise_width=0.5, seed=135)
    np.testing.assert_allclose(
        d.features[0].numpy(), [0.189780, 0.281312, 0.804075, 0.343585, 0.796995], atol=1e-6
    )
    np.testing.assert_allclose(
        d.costs[0, :6].numpy(), [1.416918, 1.633803, 1.202865, 0.735007, 0.673360, 1.945560], atol=1e-5
    )
    np.testing.assert_allclose(d.objectives.numpy(), [6.913897, 5.736040, 5.733779], atol=1e-5)


@pytest.mark.parametrize("deg", [1, 2, 4])
def test_costs_follow_the_formula(deg: int) -> None:
    d = shortest_path(400, num_features=5, deg=deg, noise_width=0.0, seed=7)
    x = d.features.double().numpy()
    basis = np.array(d.info["basis"], dtype=float)
    assert basis.shape == (40, 5) and set(np.unique(basis)) <= {0.0, 1.0}
    expected = ((x @ basis.T / np.sqrt(5) + 3) ** deg + 1) / 3.5**deg
    np.testing.assert_allclose(d.costs.numpy(), expected, rtol=1e-5)
    # features are standard normal
    assert abs(x.mean()) < 0.1 and abs(x.std() - 1) < 0.1


def test_noise_is_uniform_multiplicative() -> None:
    clean = shortest_path(2000, deg=1, noise_width=0.0, seed=3)
    noisy = shortest_path(2000, deg=1, noise_width=0.5, seed=3)
    np.testing.assert_array_equal(clean.features.numpy(), noisy.features.numpy())  # same x, same B
    eps = (noisy.costs / clean.costs).double().numpy()  # ε ~ U[0.5, 1.5]
    assert eps.min() >= 0.5 - 1e-5 and eps.max() <= 1.5 + 1e-5
    assert abs(eps.mean() - 1.0) < 0.01 and abs(eps.var() - 1 / 12) < 0.005
    # statistics of the noiseless costs for deg = 1: E[c] = 4 / 3.5
    assert abs(clean.costs.double().mean().item() - 4 / 3.5) < 0.02


def test_labels_are_optimal_paths() -> None:
    d = shortest_path(30, grid=(3, 4), deg=2, noise_width=0.5, seed=1)
    assert isinstance(d.oracle, DAGShortestPath) and d.oracle.n_vars == 17
    paths = grid_paths(d.oracle)
    best = (d.costs.double().numpy() @ paths.T).min(1)
    np.testing.assert_allclose(d.objectives.numpy(), best, rtol=1e-5)
    assert torch.all(d.solutions.sum(1) == 5)


def test_dataset_protocol_and_split() -> None:
    d = shortest_path(10, seed=2)
    x, c, z, f = d[3]
    assert x.shape == (5,) and c.shape == (40,) and z.shape == (40,) and f.shape == ()
    assert x.dtype == torch.float32 and c.dtype == torch.float32
    train, test = d.split(6)
    assert len(train) == 6 and len(test) == 4 and train.oracle is d.oracle
    close(test.costs, d.costs[6:])
    everything, nothing = d.split(10)  # both ends are allowed: a split with an empty side
    assert (len(everything), len(nothing)) == (10, 0) and len(d.split(0)[0]) == 0
    with pytest.raises(ValueError):
        d.split(11)
    with pytest.raises(ValueError):
        d.split(-1)
    with pytest.raises(ValueError):
        PTODataset(d.features[:3], d.costs, d.oracle)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"deg": 0}, "deg"), ({"noise_width": 1.0}, "noise_width"), ({"num_features": 0}, "num_features")],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shortest_path(5, **kwargs)


def test_same_seed_same_data_different_seed_different_basis() -> None:
    a, b, c = shortest_path(5, seed=11), shortest_path(5, seed=11), shortest_path(5, seed=12)
    close(a.costs, b.costs)
    assert a.info["basis"] != c.info["basis"]


def test_knapsack_generator_and_labels() -> None:
    pytest.importorskip("ortools")
    from imle_solvers.data import knapsack

    d = knapsack(12, num_features=4, num_items=8, dim=2, capacity=12.0, deg=2, noise_width=0.2, seed=5)
    assert d.oracle.sense == "max" and d.oracle.n_vars == 8
    w = np.array(d.info["item_weights"])
    assert w.shape == (2, 8) and w.min() >= 3.0 and w.max() < 8.0
    assert np.allclose(w * 100, np.round(w * 100))  # hundredths
    basis = np.array(d.info["basis"], dtype=float)
    x = d.features.double().numpy()
    clean = 5 * ((x @ basis.T / 2.0 + 3) ** 2 + 1) / 3.5**2  # 5·[(Bx/√p + 3)^deg + 1]/3.5^deg
    v = d.costs.double().numpy()
    assert np.all(v == np.ceil(v))  # rounded up to integers
    ratio = v / clean  # ⌈5cε⌉ / 5c lies in [1 − ē, 1 + ē + 1/(5c)]
    assert ratio.min() >= 0.8 - 1e-6 and np.all(v - clean * 1.2 <= 1 + 1e-6)
    # labels: feasible and optimal by brute force over all 2^8 subsets
    subsets = np.array([[(i >> j) & 1 for j in range(8)] for i in range(256)], dtype=float)
    feasible = subsets[(subsets @ w.T <= 12.0 + 1e-9).all(1)]
    z = d.solutions.double().numpy()
    assert np.all(z @ w.T <= 12.0 + 1e-9)
    np.testing.assert_allclose(d.objectives.numpy(), (v @ feasible.T).max(1), rtol=1e-6)
    assert d.oracle.expected_nonzeros == pytest.approx(z.sum(1).mean())  # κ for SumOfGamma


def test_terrain_maps() -> None:
    from imle_solvers.data import terrain_maps
    from imle_solvers.data.terrain import TERRAIN_COSTS

    d = terrain_maps(6, size=5, seed=3, pixels=4)
    assert d.features.shape == (6, 3, 20, 20) and d.costs.shape == (6, 25)
    assert float(d.features.min()) >= 0 and float(d.features.max()) <= 1
    types = d.info["types"]
    np.testing.assert_allclose(d.costs.numpy(), TERRAIN_COSTS[types].reshape(6, 25), rtol=1e-6)
    # the label is the cheapest 8-neighbour path: same cost as the oracle's own optimum, corners on it
    z = d.solutions.numpy()
    assert np.all(z[:, 0] == 1) and np.all(z[:, -1] == 1)
    again = d.oracle.solve_batch(d.costs.double().numpy())
    np.testing.assert_allclose((again * d.costs.double().numpy()).sum(1), d.objectives.numpy(), rtol=1e-6)
    # each terrain type renders differently (mean colour per type differs)
    img = d.features.numpy().reshape(6, 3, 5, 4, 5, 4).mean(axis=(3, 5))  # per-cell colour   [n, 3, K, K]
    means = np.array([img.transpose(0, 2, 3, 1)[types == t].mean(0) for t in np.unique(types)])
    assert len(np.unique(np.round(means, 2), axis=0)) == len(means)
    with pytest.raises(ValueError, match="pixels"):
        terrain_maps(2, pixels=3)


def test_terrain_maps_as_bytes_and_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.data.terrain as terrain
    from imle_solvers.data import terrain_maps

    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "cache"))
    floats = terrain_maps(5, size=4, seed=1, pixels=4)
    small = terrain_maps(5, size=4, seed=1, pixels=4, image_dtype=torch.uint8, cache=True)
    assert small.features.dtype == torch.uint8
    assert torch.equal(small.features, floats.features.mul(255).round().to(torch.uint8))  # rounded
    assert torch.equal(floats.solutions, small.solutions)
    stored = list((tmp_path / "cache" / "terrain").iterdir())
    assert [p.name for p in stored] == ["v3-K4-n5-seed1"]  # one folder, no temporary one left
    # compact: the types and the paths (the images are rendered from the types)
    assert sorted(p.name for p in stored[0].iterdir()) == ["solutions.npy", "types.npy"]

    def no_generation(*args: object) -> None:
        raise AssertionError("generated again instead of read from the cache")

    monkeypatch.setattr(terrain, "_terrain_types", no_generation)
    monkeypatch.setattr(terrain.TorchGridShortestPath, "solve_torch", no_generation)
    again = terrain_maps(5, size=4, seed=1, pixels=4, image_dtype=torch.uint8, cache=True)
    for a, b in [
        (again.features, small.features),
        (again.costs, small.costs),
        (again.solutions, small.solutions),
        (again.objectives, small.objectives),
    ]:
        assert torch.equal(a, b)
    np.testing.assert_array_equal(again.info["types"], small.info["types"])
    other_p = terrain_maps(5, size=4, seed=1, pixels=2, image_dtype=torch.uint8, cache=True)  # same entry
    assert other_p.features.shape == (5, 3, 8, 8) and torch.equal(other_p.solutions, small.solutions)
    with pytest.raises(ValueError, match="uint8"):
        terrain_maps(5, size=4, seed=1, pixels=4, cache=True)
    with pytest.raises(ValueError, match="image_dtype"):
        terrain_maps(5, size=4, pixels=4, image_dtype=torch.float64)


def test_terrain_maps_do_not_depend_on_how_they_are_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.data.terrain as terrain
    from imle_solvers.data import terrain_maps

    whole = terrain_maps(7, size=5, seed=2, pixels=4, image_dtype=torch.uint8)
    monkeypatch.setattr(terrain, "_chunk", lambda size, pixels: 2)  # maps made two at a time
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # and on more threads
    try:
        pieces = terrain_maps(7, size=5, seed=2, pixels=4, image_dtype=torch.uint8)
    finally:
        torch.set_num_threads(threads)
    for name in ("features", "costs", "solutions", "objectives"):
        assert torch.equal(getattr(whole, name), getattr(pieces, name)), name
    np.testing.assert_array_equal(whole.info["types"], pieces.info["types"])
    other = terrain_maps(7, size=5, seed=3, pixels=4, image_dtype=torch.uint8)  # another seed: other maps
    assert not torch.equal(other.features, whole.features)
    assert not np.array_equal(other.info["types"], whole.info["types"])


def test_every_terrain_map_has_its_own_pixel_noise() -> None:
    from imle_solvers.data import terrain_maps
    from imle_solvers.data.terrain import _tiles

    d = terrain_maps(6, size=3, seed=5, pixels=4)
    clean = _tiles(4)[torch.as_tensor(d.info["types"])].permute(0, 3, 1, 4, 2, 5).reshape(6, 3, 12, 12)
    noise = (d.features - clean).reshape(6, -1)  # the pixel noise   [n, 3·12·12]
    inside = ((d.features > 0) & (d.features < 1)).reshape(6, -1)  # where the clamp cut nothing
    assert inside.float().mean() > 0.8
    assert 0.07 < float(noise[inside].std()) < 0.09  # σ = 0.08
    for i in range(6):
        for j in range(i):
            both = inside[i] & inside[j]
            assert not torch.allclose(noise[i][both], noise[j][both])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(120)
def test_terrain_maps_made_on_cuda_are_the_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # pragma: no cover - GPU only
    from imle_solvers.data import terrain_maps

    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    for size, n in ((12, 300), (30, 120)):
        cpu = terrain_maps(n, size=size, seed=4, image_dtype=torch.uint8)
        gpu = terrain_maps(n, size=size, seed=4, image_dtype=torch.uint8, device="cuda")
        assert gpu.features.device.type == "cuda" and gpu.solutions.device.type == "cuda"
        for name in ("features", "costs", "solutions", "objectives"):
            assert torch.equal(getattr(gpu, name).cpu(), getattr(cpu, name)), (size, name)
        np.testing.assert_array_equal(gpu.info["types"], cpu.info["types"])
        # the cache one device writes is what the other reads
        written = terrain_maps(n, size=size, seed=4, image_dtype=torch.uint8, device="cuda", cache=True)
        read = terrain_maps(n, size=size, seed=4, image_dtype=torch.uint8, cache=True)
        assert torch.equal(written.features.cpu(), read.features)
        assert torch.equal(written.solutions.cpu(), read.solutions)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("empty", "No data left in file"),
        ("truncated", "could only read"),
        ("not-numpy", "not a NumPy|format version|pickle"),
        ("wrong-size", r"types.npy holds uint8 \(5, 3, 3\), expected uint8 \(5, 4, 4\)"),
        ("wrong-dtype", r"solutions.npy holds float64"),
        ("bad-values", "out of range"),
        ("missing", "No such file"),
    ],
)
def test_a_damaged_terrain_cache_is_regenerated(
    damage: str, reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imle_solvers.data import terrain_maps

    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    fresh = terrain_maps(5, size=4, seed=1, pixels=4, image_dtype=torch.uint8, cache=True)
    (folder,) = (tmp_path / "terrain").iterdir()
    target = {"wrong-dtype": "solutions.npy", "bad-values": "solutions.npy"}.get(damage, "types.npy")
    path = folder / target
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-10])
    elif damage == "not-numpy":
        path.write_bytes(b"\x93NUMPY garbage")
    elif damage == "wrong-size":  # types of another K: never used for this K
        np.save(path, np.zeros((5, 3, 3), dtype=np.uint8))
    elif damage == "wrong-dtype":
        np.save(path, np.load(path).astype(np.float64))
    elif damage == "bad-values":
        np.save(path, np.full((5, 16), 9, dtype=np.uint8))
    else:
        path.unlink()
    with pytest.warns(RuntimeWarning, match=rf"cached terrain maps in .* are unusable \((?:.*)({reason})"):
        again = terrain_maps(5, size=4, seed=1, pixels=4, image_dtype=torch.uint8, cache=True)
    assert torch.equal(again.features, fresh.features) and torch.equal(again.solutions, fresh.solutions)
    assert sorted(p.name for p in folder.iterdir()) == ["solutions.npy", "types.npy"]
    np.testing.assert_array_equal(np.load(path), np.load(folder / target))  # written whole again
    reread = terrain_maps(5, size=4, seed=1, pixels=4, image_dtype=torch.uint8, cache=True)  # no warning now
    assert torch.equal(reread.features, fresh.features)


def test_terrain_cache_that_cannot_be_written_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imle_solvers.data import terrain_maps

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(blocker / "below"))
    with pytest.warns(RuntimeWarning, match="not cached"):
        d = terrain_maps(3, size=3, pixels=2, image_dtype=torch.uint8, cache=True)
    assert d.features.shape == (3, 3, 6, 6)


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.data.cache import cache_dir

    monkeypatch.delenv("IMLE_SOLVERS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "imle_solvers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "imle_solvers"
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", "~/mine")  # as a shell profile may write it, unexpanded
    assert cache_dir() == tmp_path / "home" / "mine"
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path / "mine"))
    assert not (tmp_path / "mine").exists()  # created on first write only


def test_dataset_to_a_device_keeps_the_oracle_and_solutions() -> None:
    from imle_solvers.data import shortest_path

    d = shortest_path(4, seed=0)
    assert d.to("cpu") is d
    moved = d.to("meta")  # a device with no data: shows that every tensor moves and nothing is solved
    assert moved.oracle is d.oracle and moved.info == d.info
    tensors = (moved.features, moved.costs, moved.solutions, moved.objectives)
    assert all(t.device.type == "meta" for t in tensors)
    assert d.features.device == torch.device("cpu")


def test_knapsack_torch_oracle_has_the_feasible_sets_of_the_decimal_capacities() -> None:
    from imle_solvers.adapters import TorchKnapsack
    from imle_solvers.data import knapsack

    d = knapsack(10, num_features=3, num_items=8, dim=2, capacity=(12.345, 10.0), seed=3)
    assert isinstance(d.oracle, TorchKnapsack)
    assert d.oracle.capacities.tolist() == [1234, 1000]  # ⌊100 · 12.345⌋; 100 · 10.00 is 1000, not 999
    w = np.array(d.info["item_weights"])  # [dim, m], hundredths
    subsets = np.array([[(i >> j) & 1 for j in range(8)] for i in range(256)])
    decimal = (subsets @ w.T <= np.array([12.345, 10.0]) + 1e-9).all(1)
    scaled = (subsets @ d.oracle.weights <= d.oracle.capacities).all(1)
    np.testing.assert_array_equal(decimal, scaled)  # the same feasible sets
    assert 0 < decimal.sum() < 256
    v = d.costs.double().numpy()
    np.testing.assert_allclose(d.objectives.numpy(), (v @ subsets[decimal].T).max(1), rtol=1e-6)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capacity": -1.0}, "capacity must be a finite number >= 0, got -1.0"),
        ({"capacity": (20.0, float("nan"))}, "capacity must be a finite number >= 0, got nan"),
        ({"capacity": (1.0, 2.0, 3.0)}, "capacity must be a scalar or dim=2 values, got 3 values"),
        ({"backend": "gurobi"}, "backend must be one of 'torch', 'cpsat', 'cbc', 'highs', got 'gurobi'"),
    ],
)
def test_knapsack_rejects_bad_capacities_and_backends(options: dict, message: str) -> None:
    from imle_solvers.data import knapsack

    with pytest.raises(ValueError, match=re.escape(message)):
        knapsack(4, **options)


def test_the_generators_documented_defaults_are_pinned() -> None:
    # PyEPO's protocol: 5 features, the 5 × 5 grid, degree 1, no noise, data seed 135; the knapsack's
    # 32 items, 2 resources of capacity 20, solved by TorchKnapsack
    import inspect

    from imle_solvers.data import knapsack

    def defaults(function: object) -> dict[str, object]:
        params = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
        return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}

    assert defaults(shortest_path) == {
        "num_features": 5,
        "grid": (5, 5),
        "deg": 1,
        "noise_width": 0.0,
        "seed": 135,
    }
    assert defaults(knapsack) == {
        "num_features": 5,
        "num_items": 32,
        "dim": 2,
        "capacity": 20.0,
        "deg": 1,
        "noise_width": 0.0,
        "seed": 135,
        "backend": "torch",
    }
    torch.testing.assert_close(
        shortest_path(4).costs, shortest_path(4, seed=135).costs
    )  # what it is called with


@pytest.mark.parametrize("seed", range(10))
def test_the_largest_degree_keeps_every_cost_a_normal_float32(seed: int) -> None:
    from imle_solvers.data.dataset import DEG_MAX
    from imle_solvers.data.knapsack import knapsack

    costs = shortest_path(2000, deg=DEG_MAX, seed=seed).costs  # float32, as training sees them
    tiny = torch.finfo(torch.float32).tiny
    assert bool(torch.isfinite(costs).all()) and float(costs.abs().min()) >= tiny * 0.5  # ε ≥ 1 − ē
    assert bool(torch.isfinite(knapsack(500, deg=DEG_MAX, seed=seed).costs).all())
    assert 3.5**-DEG_MAX >= tiny > 3.5 ** -(DEG_MAX + 1)  # the bound is where 3.5^-deg leaves float32


@pytest.mark.parametrize("deg", [0, 70, 567, 1000])
def test_degrees_whose_costs_float32_cannot_hold_are_refused(deg: int) -> None:
    with pytest.raises(ValueError, match=r"deg must be"):
        shortest_path(10, deg=deg)


@pytest.mark.parametrize("generator", ["shortest_path", "knapsack", "tsp_costs"])
def test_whole_numbers_given_as_floats_are_counts_and_fractions_are_refused(generator: str) -> None:
    knapsack_module = importlib.import_module("imle_solvers.data.knapsack")
    tsp_module = importlib.import_module("imle_solvers.data.tsp")

    make = {
        "shortest_path": shortest_path,
        "knapsack": knapsack_module.knapsack,
        "tsp_costs": lambda *a, **k: tsp_module.tsp_costs(*a, num_nodes=5, **k),
    }[generator]

    def costs(out: object) -> np.ndarray:
        return np.asarray(out[1] if isinstance(out, tuple) else out.costs)  # type: ignore[attr-defined]

    np.testing.assert_array_equal(
        costs(make(6.0, num_features=4.0, deg=2.0)), costs(make(6, num_features=4, deg=2))
    )
    for bad in ({"num_samples": 6.5}, {"num_features": 2.5}, {"deg": 1.5}):
        name = next(iter(bad))
        args = {"num_samples": 6, **bad}
        n = args.pop("num_samples")
        with pytest.raises(ValueError, match=name):
            make(n, **args)


@pytest.mark.parametrize("deg", [70, 100, 1000])
def test_tsp_degrees_beyond_the_cost_models_range_are_refused(deg: int) -> None:
    from imle_solvers.data.tsp import tsp_costs

    with pytest.raises(ValueError, match=r"deg must be in \[1, 69\]"):
        tsp_costs(4, num_nodes=5, deg=deg)


def test_tsp_costs_that_float32_cannot_hold_are_refused_not_returned_as_inf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PyEPO's TSP cost model reaches further than the SPO one (B ∈ [−2, 2]): whatever lets a degree through,
    # a cost beyond float32 is refused, never returned as inf (deg 300 with the degree cap lifted)
    tsp_module = importlib.import_module("imle_solvers.data.tsp")
    uncapped = lambda n, p, deg, w: (int(n), int(p), int(deg), float(w))  # noqa: E731
    monkeypatch.setattr(tsp_module, "_check", uncapped)
    with pytest.raises(ValueError, match="deg=300 gives edge costs beyond float32's range"):
        tsp_module.tsp_costs(50, num_nodes=6, deg=300, seed=0)
    _, costs, _ = tsp_module.tsp_costs(200, num_nodes=6, deg=69, seed=0)  # the largest allowed degree fits
    assert np.isfinite(costs).all()


def test_tsp_data_refuse_a_maximising_oracle_and_count_nodes_given_as_floats() -> None:
    from imle_solvers.adapters.graphs.tsp import TravellingSalesperson
    from imle_solvers.data.tsp import tsp
    from imle_solvers.oracle import MapOracle

    class LongestIsNegated(MapOracle):
        """A tour oracle in the "max" sense: scores to maximise, i.e. the negated costs."""

        sense = "max"

        def __init__(self) -> None:
            self.inner = TravellingSalesperson(5)
            self.n_vars, self.expected_nonzeros = self.inner.n_vars, 5.0

        def solve(self, weights: np.ndarray) -> np.ndarray:
            return self.inner.solve(-weights)  # argmax ⟨w, z⟩ = argmin ⟨−w, z⟩

    plain = tsp(6, num_nodes=5.0, seed=3)  # a whole number of nodes given as a float is a count
    assert plain.info["num_nodes"] == 5 and isinstance(plain.info["num_nodes"], int)
    assert bool(((plain.costs * plain.solutions).sum(-1) <= (plain.costs * 1.0).sum(-1)).all())
    with pytest.raises(ValueError, match="sense 'min', got 'max'"):
        tsp(6, num_nodes=5, seed=3, oracle=LongestIsNegated())  # the costs would be taken as scores
