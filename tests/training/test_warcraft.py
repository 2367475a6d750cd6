"""The Warcraft problem: the published files, their checks, ``train --problem warcraft``, its defaults."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from imle_solvers import SumOfGamma
from imle_solvers.data.warcraft import inspect_warcraft, warcraft_folder, warcraft_maps
from imle_solvers.errors import ConfigError, DataError
from imle_solvers.training import TrainConfig, main
from tests.support.training import plan_of, problem_of
from tests.support.warcraft import COUNTS, write_warcraft


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``DIR`` holding ``DIR/4x4/{train,val,test}_{maps,shortest_paths,vertex_weights}.npy``."""
    root = tmp_path_factory.mktemp("warcraft")
    write_warcraft(root, 4)
    return root


def test_reads_the_published_layout(published: Path, tmp_path: Path) -> None:
    folder = published / "4x4"
    arrays = {
        kind: np.load(folder / f"train_{kind}.npy") for kind in ("maps", "shortest_paths", "vertex_weights")
    }
    assert warcraft_folder(published, 4) == folder == warcraft_folder(folder, 4)  # DIR or DIR/KxK
    for root in (published, folder):
        data = warcraft_maps(root, 4, "train")
        assert len(data) == COUNTS["train"] and data.info["split"] == "train"
        # images: the file's [N, H, W, 3] as a channels-last [N, 3, H, W] view, bytes as stored
        assert data.features.shape == (28, 3, 32, 32) and data.features.dtype == torch.uint8
        assert data.features.is_contiguous(memory_format=torch.channels_last)
        np.testing.assert_array_equal(data.features.permute(0, 2, 3, 1).numpy(), arrays["maps"])
        np.testing.assert_array_equal(data.costs.numpy(), arrays["vertex_weights"].reshape(28, 16))
        np.testing.assert_array_equal(data.solutions.numpy(), arrays["shortest_paths"].reshape(28, 16))
        expected = (arrays["vertex_weights"] * arrays["shortest_paths"]).reshape(28, 16).sum(1)
        np.testing.assert_allclose(data.objectives.numpy(), expected, rtol=1e-6)  # f* = ⟨c, z*⟩
        # the oracle solves the file's problem: its optimum costs what the published path costs
        again = data.oracle.solve_batch(data.costs.double().numpy())
        np.testing.assert_allclose((again * data.costs.double().numpy()).sum(1), expected, rtol=1e-6)
    first = warcraft_maps(published, 4, "test", n=5)
    np.testing.assert_array_equal(first.costs.numpy(), warcraft_maps(published, 4, "test").costs[:5].numpy())
    assert len(warcraft_maps(published, 4, "val")) == COUNTS["val"]
    meta = inspect_warcraft(published, 4, "test")
    assert (meta.count, meta.height, meta.width, meta.folder) == (14, 32, 32, folder)
    flat = tmp_path / "flat"
    write_warcraft(flat, 4, nested=False, seed=3)  # the files directly in DIR
    assert warcraft_folder(flat, 4) == flat and len(warcraft_maps(flat, 4, "test")) == 14
    # other dtypes the published format may use: bool or float paths, float64 or integer weights
    for kind, dtype in (
        ("shortest_paths", bool),
        ("shortest_paths", np.float32),
        ("vertex_weights", np.int16),
    ):
        array = np.load(flat / f"test_{kind}.npy")
        np.save(flat / f"test_{kind}.npy", array.astype(dtype))
        assert len(warcraft_maps(flat, 4, "test")) == 14


def _rewrite(
    kind: str, change: Callable[[np.ndarray], np.ndarray], split: str = "train"
) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / f"{split}_{kind}.npy"
        np.save(path, change(np.load(path)))

    return apply


def _garbage(folder: Path) -> None:
    (folder / "train_maps.npy").write_bytes(b"not a numpy file")


def _truncated(folder: Path) -> None:
    path = folder / "train_maps.npy"
    path.write_bytes(path.read_bytes()[:1000])


def _archive(folder: Path) -> None:
    with open(folder / "train_vertex_weights.npy", "wb") as fh:
        np.savez(fh, weights=np.zeros((28, 4, 4)))


def _objects(folder: Path) -> None:
    np.save(folder / "train_shortest_paths.npy", np.empty((28, 4, 4), dtype=object), allow_pickle=True)


def _cell(
    kind: str, rows: list[int], value: float, cell: int = 5, dtype: type = np.float32
) -> Callable[[Path], None]:
    def change(array: np.ndarray) -> np.ndarray:
        array = array.astype(dtype)
        array.reshape(len(array), -1)[rows, cell] = value
        return array

    return _rewrite(kind, change)


def _paths(rows: list[int], change: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    def apply(array: np.ndarray) -> np.ndarray:
        array = array.copy()
        for r in rows:
            array[r] = change(array[r])
        return array

    return _rewrite("shortest_paths", apply)


def _corners_only(path: np.ndarray) -> np.ndarray:
    only = np.zeros_like(path)
    only[0, 0] = only[-1, -1] = 1
    return only


def _with_extra_cell(path: np.ndarray) -> np.ndarray:
    """The path and one more cell: beside it (a shortcut or a branch) or apart (a second piece)."""
    extra = path.copy()
    extra.reshape(-1)[np.flatnonzero(path.reshape(-1) == 0)[0]] = 1
    return extra


PATH = "paths from the top-left to the bottom-right cell (8-neighbour steps, each cell once, no shortcut)"


HEADER_DEFECTS = [
    (lambda f: (f / "train_vertex_weights.npy").unlink(), "train_vertex_weights.npy is missing"),
    (
        _rewrite("maps", lambda a: a.astype(np.float32)),
        "maps.npy holds float32 [28, 32, 32, 3], expected uint8",
    ),
    (
        _rewrite("maps", lambda a: a.transpose(0, 3, 1, 2)),
        "holds uint8 [28, 3, 32, 32], expected uint8 [N, H, W, 3]",
    ),
    (_rewrite("maps", lambda a: a[:, :2, :2]), "holds 2×2 images, fewer pixels than 4×4 cells"),
    (_rewrite("maps", lambda a: a[:, :, :2]), "holds 32×2 images, fewer pixels than 4×4 cells"),  # one side
    (_rewrite("shortest_paths", lambda a: a[:, :3, :3]), "expected bool, integer or float [N, 4, 4]"),
    (
        _rewrite("vertex_weights", lambda a: a > 1),
        "holds bool [28, 4, 4], expected integer or float [N, 4, 4]",
    ),
    (_rewrite("vertex_weights", lambda a: a[:27]), "train_vertex_weights.npy holds 27 maps"),
    (_garbage, "train_maps.npy cannot be read as a NumPy array"),
    (_truncated, "train_maps.npy cannot be read as a NumPy array"),
    (_archive, "train_vertex_weights.npy is not a single NumPy array"),
    (_objects, "train_shortest_paths.npy cannot be read as a NumPy array"),
]
VALUE_DEFECTS = [
    (
        _cell("shortest_paths", [3, 5], 2.0),
        "2 map(s) have path cells other than 0 and 1 (instances 3, 5)",
    ),
    (_cell("shortest_paths", [1], 0.0, cell=0), "miss the top-left or the bottom-right cell (instance 1)"),
    (
        _cell("shortest_paths", [4], 0.0, cell=15),
        "miss the top-left or the bottom-right cell (instance 4)",
    ),
    (_cell("vertex_weights", [2], -0.5), "have negative weights (instance 2)"),
    (_cell("vertex_weights", [0, 27], float("nan")), "have NaN or infinite weights (instances 0, 27)"),
    (_cell("vertex_weights", [6], float("inf")), "have NaN or infinite weights (instance 6)"),
    # float64 weights are checked before the cast to float32: -1e-50 would become -0.0, 1e300 +inf
    (_cell("vertex_weights", [8], -1e-50, dtype=np.float64), "have negative weights (instance 8)"),
    (
        _cell("vertex_weights", [9, 11], 1e300, dtype=np.float64),
        "2 map(s) have weights beyond float32's range (at most 3.403e+38) (instances 9, 11)",
    ),
    (_cell("vertex_weights", [3], 1e39, dtype=np.float64), "have weights beyond float32's range"),
    (_paths([2], lambda z: np.ones_like(z)), f"are not {PATH} (instance 2)"),  # every cell
    (_paths([7], _corners_only), "are not paths from the top-left to the bottom-right cell"),
    (_paths([0, 5], _with_extra_cell), "2 map(s) are not paths from the top-left"),  # a shortcut or a piece
]


@pytest.mark.parametrize(("defect", "message"), HEADER_DEFECTS + VALUE_DEFECTS)
def test_every_defect_of_the_files_is_a_data_error(
    defect: Callable[[Path], None], message: str, tmp_path: Path
) -> None:
    folder = write_warcraft(tmp_path, 4)
    defect(folder)
    with pytest.raises(DataError, match=re.escape(message)) as err:
        warcraft_maps(tmp_path, 4, "train")
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)
    if (defect, message) in HEADER_DEFECTS:  # found from the headers alone, before any data is read
        with pytest.raises(DataError, match=re.escape(message)):
            inspect_warcraft(tmp_path, 4, "train")
    else:
        assert inspect_warcraft(tmp_path, 4, "train").count == 28
    assert len(warcraft_maps(tmp_path, 4, "test")) == 14  # the other splits are untouched


def test_arguments_of_the_loader(published: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="holds 28 maps, 29 were asked for"):
        warcraft_maps(published, 4, "train", n=29)
    assert len(warcraft_maps(published, 4, "train", n=0)) == 0
    with pytest.raises(DataError, match="expected bool, integer or float \\[N, 5, 5\\]"):
        warcraft_maps(published / "4x4", 5)  # a size the files do not hold
    with pytest.raises(DataError, match="is not a folder"):
        warcraft_maps(tmp_path / "nowhere", 4)
    with pytest.raises(ValueError, match="split must be one of 'train', 'val', 'test', got 'dev'"):
        warcraft_maps(published, 4, "dev")
    with pytest.raises(ValueError, match="n must be a non-negative integer, got -1"):
        warcraft_maps(published, 4, n=-1)
    with pytest.raises(ValueError, match="size must be an integer >= 2"):
        inspect_warcraft(published, 1)


# --- train --problem warcraft -----------------------------------------------------------------------------


TINY = [
    *("--problem", "warcraft", "--size", "4", "--n-train", "28", "--n-test", "14", "--model", "terrain-cnn"),
    *("--batch-size", "7"),
]


def _no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.training.runner as runner

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("training started before the data were checked")

    monkeypatch.setattr(runner, "train_model", boom)


def test_train_reads_the_published_files(
    published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = [*TINY, "--data", str(published), "--epochs", "2", "--batch-size", "7", "--method", "imle-mumu"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Warcraft 4×4 ({published}), terrain-cnn" in printed
    saved = json.loads((out / "results.json").read_text())
    config, run = saved["config"], saved["runs"][0]
    assert (
        config["data"] == str(published) and config["schedule"] == "paper" and config["lr_drops"] == [30, 40]
    )
    assert run["problem"] == "warcraft" and 0.0 <= run["accuracy"] <= 1.0 and np.isfinite(run["regret"])
    assert len(run["accuracy_curve"]) == len(run["eval_times"]) == 3 and run["step"] == "off"
    # the same files through the Python API, with the oracle's κ = the training paths' mean length
    prob = problem_of("warcraft", 28, 14, 0, size=4, data=str(published), batch_size=7)
    lengths = np.load(published / "4x4" / "train_shortest_paths.npy").reshape(28, -1).sum(1)
    for oracle in (prob.train_oracle, prob.eval_oracle):
        assert oracle.expected_nonzeros == pytest.approx(lengths.mean())
    assert SumOfGamma().resolve(prob.train_oracle).k == pytest.approx(lengths.mean())
    native = problem_of("warcraft", 28, 14, 0, size=4, data=str(published), oracle="device", batch_size=7)
    assert "TorchGridShortestPath" in repr(native.train_oracle)  # the device-native oracles too
    for oracle in (native.train_oracle, native.eval_oracle):
        assert oracle.expected_nonzeros == pytest.approx(lengths.mean())


def test_without_data_the_generated_maps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    warcraft = problem_of("warcraft", 12, 4, 5, size=4, model="resnet-stem", batch_size=4)
    terrain = problem_of("terrain", 12, 4, 5, size=4, model="resnet-stem", batch_size=4)
    assert torch.equal(warcraft.train.features, terrain.train.features)
    assert torch.equal(warcraft.test.costs, terrain.test.costs)
    mean_path = float(warcraft.train.solutions.sum(1).mean())
    assert warcraft.train_oracle.expected_nonzeros == pytest.approx(mean_path) != 4.0  # κ, not K
    assert terrain.train_oracle.expected_nonzeros == 4.0
    with pytest.raises(ConfigError, match="model 'linear' does not fit problem 'warcraft'"):
        problem_of("warcraft", 4, 4, 0, size=4, model="linear")


def test_bad_files_stop_the_command_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_training(monkeypatch)
    for i, (defect, message) in enumerate(HEADER_DEFECTS[:4] + VALUE_DEFECTS[:4]):
        root = tmp_path / str(i)
        defect(write_warcraft(root, 4))
        argv = [*TINY, "--data", str(root), "--quiet"]
        if (defect, message) in HEADER_DEFECTS:  # the headers are checked with the options
            with pytest.raises(SystemExit) as exc:
                main(argv)
            assert exc.value.code == 2
        else:  # the values when the data are read, before training
            assert main(argv) == 2
        first, hint = capsys.readouterr().err.splitlines()  # one line and a pointer to --help
        assert first.startswith("imle-solvers train: error: argument --data: ") and message in first
        assert hint == "Try 'imle-solvers train --help' for more information."


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--problem", "terrain", "--size", "4", "--data", "{data}"], "--data: needs --problem warcraft"),
        (
            [*TINY[:4], "--n-train", "100", "--data", "{data}"],
            "train_maps.npy holds 28 maps, 100 are asked for",
        ),
        (
            [*TINY[:4], "--n-train", "10", "--n-test", "15", "--data", "{data}"],
            "test_maps.npy holds 14 maps, 15 are asked for",
        ),
        (
            [*TINY[:2], "--size", "5", "--n-train", "2", "--n-test", "2", "--data", "{data}"],
            "no Warcraft data of size 5: neither 5x5/ nor *_maps.npy (it has 4x4)",
        ),
        ([*TINY, "--data", "{data}/nowhere"], "is not a folder"),
        ([*TINY, "--data", ""], "--data: must be a file or folder name, got ''"),
        (
            [*TINY, "--compile", "graph", "--oracle", "host"],
            "--compile: graph records the training step as a CUDA graph, but ",
        ),
        ([*TINY, "--compile", "model+graph", "--workers", "2"], "model+graph records the training step"),
    ],
)
def test_bad_options_of_the_warcraft_problem(
    argv: list[str],
    message: str,
    published: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _no_training(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main([a.replace("{data}", str(published)) for a in argv] + ["--quiet"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_graph_needs_cuda(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _no_training(monkeypatch)
    for device in ("cpu", "auto"):
        with pytest.raises(SystemExit) as exc:
            main([*TINY, "--compile", "graph", "--device", device, "--quiet"])
        assert exc.value.code == 2
        assert (
            "--compile: graph records the training step as a CUDA graph, but it needs a CUDA device, got cpu"
            in (capsys.readouterr().err)
        )
    with pytest.raises(ConfigError, match="compile graph records the training step as a CUDA graph"):
        TrainConfig(problem="warcraft", compile="graph").preflight()


def test_warcraft_defaults_are_the_papers_protocol() -> None:
    paper = plan_of(problem="warcraft")
    assert paper.schedule.name == "paper"
    assert (paper.schedule.epochs, paper.schedule.batch_size, paper.schedule.lr) == (50, 70, 5e-4)
    assert paper.schedule.lr_drops == (30, 40) and paper.options.samples == 1
    assert (paper.model, paper.data.n_train, paper.data.n_test, paper.data.size) == (
        "resnet-stem",
        10_000,
        1000,
        12,
    )
    assert plan_of(problem="warcraft", schedule="constant").schedule.lr_drops == ()
    assert plan_of(problem="terrain").schedule.name == "constant"
    assert plan_of(problem="warcraft", epochs=3, lr_drops=(1,)).schedule.lr_drops == (1,)


def test_data_counts_default_to_what_the_files_hold(
    published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_of(problem="warcraft", size=4, data=str(published), batch_size=7)
    assert (plan.data.n_train, plan.data.n_test) == (COUNTS["train"], COUNTS["test"])  # 28 and 14
    assert plan.record["n_train"] == 28 and plan.record["n_test"] == 14
    assert (
        plan_of(problem="warcraft", size=4, data=str(published), n_train=10, batch_size=7).data.n_train
    ) == 10
    # the validation split is not used: a folder without it trains as well
    bare = tmp_path / "bare"
    write_warcraft(bare, 4)
    for kind in ("maps", "shortest_paths", "vertex_weights"):
        (bare / "4x4" / f"val_{kind}.npy").unlink()
    _no_training(monkeypatch)
    assert plan_of(problem="warcraft", size=4, data=str(bare), batch_size=7).data.n_train == 28
    with pytest.warns(RuntimeWarning, match="batch size 70 is larger than the 28 training instances"):
        plan_of(problem="warcraft", size=4, data=str(published))  # the paper's batch of 70


@settings(max_examples=60)
@given(
    size=st.integers(2, 7),
    seed=st.integers(0, 2**16),
    pick=st.integers(0, 10**6),
)
def test_optimal_paths_are_paths_and_one_cell_more_or_less_is_not(size: int, seed: int, pick: int) -> None:
    from imle_solvers.adapters.graphs import GridShortestPath
    from imle_solvers.data.warcraft import _corner_to_corner

    weights = np.random.default_rng(seed).uniform(0.5, 10.0, size * size)  # positive: no shortcut is free
    path = GridShortestPath(size, size).solve(weights).reshape(size, size).astype(bool)
    assert _corner_to_corner(path[None]).tolist() == [True]
    off, on = np.flatnonzero(~path.reshape(-1)), np.flatnonzero(path.reshape(-1))
    variants = []
    if off.size:  # one more cell: a shortcut beside the path, or a second piece
        more = path.copy()
        more.reshape(-1)[off[pick % off.size]] = True
        variants.append(more)
    inner = on[(on != 0) & (on != size * size - 1)]
    if inner.size:  # one cell less: the path breaks (it had no shortcut to keep it whole)
        less = path.copy()
        less.reshape(-1)[inner[pick % inner.size]] = False
        variants.append(less)
    full = np.ones_like(path)
    if size > 2:
        variants.append(full)
    assert not _corner_to_corner(np.stack(variants)).any() if variants else True
    both = np.stack([path, *variants])  # judged map by map, in one call
    assert _corner_to_corner(both).tolist() == [True] + [False] * len(variants)
