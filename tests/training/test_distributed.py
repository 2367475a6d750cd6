"""Data-parallel training: shares of a batch, the noise of the global batch, and ``torchrun`` with two
processes giving the result of one."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import runpy
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from imle_solvers import IMLE, FenchelYoungLoss, Gumbel, NoNoise, SumOfGamma, TopK
from imle_solvers.errors import ConfigError, InfeasibleError
from imle_solvers.training import TrainConfig, main, run
from imle_solvers.training.distributed import (
    DistributedContext,
    GlobalBatchNoise,
    Shard,
    check_batches,
    is_main_process,
    planned_world_size,
    process_group,
    shard_noise,
    share,
)
from imle_solvers.training.loop import _global_rows
from imle_solvers.training.plan import Compile
from tests.support.launch import torchrun
from tests.support.paths import ROOT
from tests.training.ddp_worker import (
    FLOAT64_METHODS,
    TINY,
    adaptive_cases,
    adaptive_states,
    buffers_case,
    case_key,
    evaluation_case,
    train_float64,
)

# --- shares, checks and the environment (no processes) ------------------------------------------------


@given(rows=st.integers(0, 200), world=st.integers(1, 9))
def test_shares_are_contiguous_balanced_and_cover_the_rows(rows: int, world: int) -> None:
    bounds = [share(rows, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))  # contiguous, in rank order
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    ("n_train", "batch", "world", "field"),
    [(100, 1, 2, "batch_size"), (100, 3, 4, "batch_size"), (33, 16, 2, "n_train"), (34, 16, 3, "n_train")],
)
def test_a_process_without_rows_is_refused_before_any_work(
    n_train: int, batch: int, world: int, field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        check_batches(n_train, batch, world)
    assert info.value.field == field and "training process" in str(info.value)


@pytest.mark.parametrize(("n_train", "batch", "world"), [(32, 16, 2), (34, 16, 2), (35, 16, 3), (7, 1, 1)])
def test_every_process_gets_rows_in_every_step(n_train: int, batch: int, world: int) -> None:
    check_batches(n_train, batch, world)


def test_the_batch_check_runs_before_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    config = TrainConfig(problem="shortest-path", methods=("two-stage",), n_train=30, n_test=8, batch_size=2)
    with pytest.raises(ConfigError, match="batch_size must be at least the number of training processes"):
        run(config)  # no rendezvous is attempted: nothing would answer


def test_the_environment_names_the_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert planned_world_size() == 1 and is_main_process()
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    assert planned_world_size() == 3 and not is_main_process()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="WORLD_SIZE must be an integer, got 'two'"):
        planned_world_size()
    monkeypatch.setenv("RANK", "-1")
    with pytest.raises(ConfigError, match="RANK must be >= 0"):
        is_main_process()


def test_a_cuda_graph_step_is_refused_with_several_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import imle_solvers.training.plan as plan_module

    monkeypatch.setenv("WORLD_SIZE", "2")
    config = TrainConfig(
        problem="terrain", methods=("imle",), compile="graph", device="cpu", n_train=8, batch_size=4
    )
    with pytest.raises(ConfigError, match="records the training step as a CUDA graph, but it needs a CUDA"):
        run(config)  # before any rendezvous
    # on a GPU (as this machine's plan would see one): refused for the processes, auto falls back
    monkeypatch.setattr(
        plan_module, "resolve_device", lambda name, rank=None: torch.device("cuda", rank or 0)
    )
    monkeypatch.setattr(plan_module, "bf16_supported", lambda device: True)
    many = TrainConfig(problem="terrain", device="cuda", n_train=8, batch_size=4)
    with pytest.raises(ConfigError, match="2 training processes: DistributedDataParallel's all-reduce"):
        many.replace(compile="graph").plan()
    step = many.plan().step
    assert step.compile.value == "off" and "2 training processes" in step.reason  # auto: no graph
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert TrainConfig(
        problem="terrain", device="cuda", n_train=8, batch_size=4
    ).plan().step.compile.value == ("graph")  # one process: the recorded step
    from imle_solvers.training import make_problem, train_model

    plan = TrainConfig(n_train=16, n_test=8, batch_size=8).plan()
    plan = dataclasses.replace(plan, device=torch.device("cuda"))
    plan = dataclasses.replace(plan, step=dataclasses.replace(plan.step, compile=Compile.GRAPH))
    prob = make_problem(dataclasses.replace(plan, device=torch.device("cpu")), 0)
    group = DistributedContext(0, 2, 0, "gloo", torch.device("cpu"))
    with pytest.raises(ConfigError, match="2 training processes: DistributedDataParallel's all-reduce"):
        train_model(plan, prob, "spo+", 0, distributed=group)  # a group the plan did not know of


def test_an_nccl_group_is_refused_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # a group the caller initialised
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    with pytest.raises(ConfigError, match="cannot train on the CPU with an nccl process group") as info:
        process_group("cpu", 5.0)
    assert info.value.field == "device"
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")  # the CPU's backend is taken
    assert process_group("cpu", 5.0) == DistributedContext(1, 2, 0, "gloo", torch.device("cpu"))


def test_one_process_trains_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert process_group("cpu", 5.0) is None


@pytest.mark.parametrize("device", ["cuda:1", "cuda"])
def test_each_process_takes_its_own_gpu(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError) as info:
        process_group(device, 5.0)  # refused before any rendezvous
    assert info.value.field == "device"
    assert ("cuda:LOCAL_RANK" in str(info.value)) == (device == "cuda:1")
    assert ("LOCAL_RANK=1 has no GPU" in str(info.value)) == (device == "cuda")


# --- the noise of the global batch --------------------------------------------------------------------


@pytest.mark.parametrize("base", [Gumbel(1.0), SumOfGamma(k=3)])
def test_each_process_gets_its_rows_of_the_global_noise(base: object) -> None:
    total, shape = 7, (3, 5)
    torch.manual_seed(11)
    whole = base.sample((total, *shape))  # type: ignore[attr-defined]  # one process, the whole batch
    for world in (2, 3):
        for rank in range(world):
            rows = Shard(*share(total, rank, world), total)
            torch.manual_seed(11)
            mine = GlobalBatchNoise(base, rows).sample((rows.stop - rows.start, *shape))  # type: ignore[arg-type]
            assert torch.equal(mine, whole[rows.start : rows.stop])


def test_each_process_keeps_only_its_rows_of_the_global_noise() -> None:
    # a view of the whole batch's noise would keep all B rows alive in every process: W× the memory
    for rows in (Shard(2, 5, 9), Shard(0, 4, 8)):
        mine = GlobalBatchNoise(Gumbel(), rows).sample((rows.stop - rows.start, 2, 6))
        assert mine.shape == (rows.stop - rows.start, 2, 6)
        assert mine.untyped_storage().nbytes() == mine.numel() * mine.element_size()


def test_noise_for_rows_a_process_does_not_hold_is_refused() -> None:
    noise = GlobalBatchNoise(Gumbel(), Shard(2, 5, 9))
    with pytest.raises(ValueError, match="noise for 4 rows asked of a process holding rows 2:5 of"):
        noise.sample((4, 1, 3))


def test_perturbation_layers_draw_the_global_noise() -> None:
    oracle = TopK(2, 6)
    imle, fy, nonoise = IMLE(oracle, Gumbel()), FenchelYoungLoss(oracle), IMLE(oracle, NoNoise())
    rows = Shard()
    assert shard_noise([imle, fy, nonoise, torch.nn.Sequential(IMLE(oracle))], rows) == 3
    assert isinstance(imle.noise, GlobalBatchNoise) and isinstance(fy.noise, GlobalBatchNoise)
    assert isinstance(nonoise.noise, NoNoise)  # nothing to draw
    assert shard_noise([imle], rows) == 0  # not wrapped twice
    rows.start, rows.stop, rows.total = 1, 3, 4
    theta = torch.randn(4, 6)
    torch.manual_seed(5)
    whole = IMLE(oracle, Gumbel(), samples=2)(theta)  # one process, the global batch   [4, 2, 6]
    torch.manual_seed(5)
    layer = IMLE(oracle, Gumbel(), samples=2)
    shard_noise([layer], rows)
    assert torch.equal(layer(theta[1:3]), whole[1:3])
    assert "GlobalBatchNoise(Gumbel" in repr(layer.noise)


def test_a_step_of_a_share_reports_its_rows_in_the_global_batch() -> None:
    from imle_solvers.training.loop import _LossDisplay, _train_epoch

    class FailingStep:  # stands in for a TrainStep: the oracle fails on the share's second row
        data = type("Data", (), {"__len__": lambda self: 10})()
        device = torch.device("cpu")
        running = torch.zeros(())

        def __init__(self) -> None:
            self.seen: list[list[int]] = []

        def __call__(self, indices: torch.Tensor) -> None:
            self.seen.append(indices.tolist())
            if len(self.seen) == 2:
                raise InfeasibleError("no state", rows=[1])

    step = FailingStep()
    group = DistributedContext(1, 2, 1, "gloo", torch.device("cpu"))
    rows = Shard()
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(InfeasibleError) as info:
        _train_epoch(step, gen, 7, _LossDisplay(None, step.running, 10, 7), rows, group)  # type: ignore[arg-type]
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist()
    assert step.seen == [order[4:7], order[9:10]]  # rank 1's shares: rows 4-6 of 7, then row 2 of 3
    assert (rows.start, rows.stop, rows.total) == (2, 3, 3)
    assert info.value.rows == (3,) and "(training process 1 of 2)" in str(info.value)


def test_the_progress_bar_shows_the_mean_loss_of_this_process_s_rows() -> None:
    from imle_solvers.training.loop import _LossDisplay

    class Bar:
        def __init__(self) -> None:
            self.shown: list[str] = []

        def update(self, n: int) -> None:
            pass

        def set_postfix(self, loss: str, refresh: bool) -> None:
            self.shown.append(loss)

    bar = Bar()
    display = _LossDisplay(bar, torch.tensor(10.0), 8, 4, share=0.5)  # 8 instances, 2 processes
    display.update(1)  # the last batch: this process summed the loss of its 4 rows
    assert bar.shown == ["2.5"]


def test_a_solver_error_names_the_row_of_the_global_batch() -> None:
    group = DistributedContext(1, 2, 1, "gloo", torch.device("cpu"))
    err = InfeasibleError("no state", rows=[0, 2])
    _global_rows(err, Shard(4, 7, 7), group)
    assert err.rows == (4, 6) and str(err) == "batch rows 4, 6: no state (training process 1 of 2)"


# --- two processes under torchrun ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One torchrun launch of ``ddp_worker.py`` (its docstring lists what it runs)."""
    out = tmp_path_factory.mktemp("ddp")
    return out, torchrun([str(ROOT / "tests" / "training" / "ddp_worker.py"), str(out)])


def close_lists(got: Sequence[Any], want: Sequence[Any], rtol: float, what: str) -> None:
    assert len(got) == len(want), what
    for step, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-3, err_msg=f"{what}, step {step}")


@pytest.mark.timeout(180)
def test_torchrun_command_trains_on_two_processes_as_on_one(
    two_processes: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1 and done.stdout.count("| imle-mumu") == 1  # rank 0 prints
    ddp = json.loads((out / "cli" / "results.json").read_text())
    assert ddp["distributed"] == {"world_size": 2, "backend": "gloo", "device": "cpu"}
    one = run(TrainConfig.from_argv([*TINY, "--quiet"]))  # one process, the same global batch
    assert [r["method"] for r in ddp["runs"]] == [r.method for r in one] == ["imle-mumu", "pfyl", "spo+"]
    for got, want in zip(ddp["runs"], one):
        assert got["curve"][0] == pytest.approx(want.curve[0], rel=1e-12)  # the sharded evaluation
        # float32: Adam's first steps turn gradient entries of ~1e-8 (zero up to the order of the sums)
        # into steps of a few 1e-3; the float64 test below compares every gradient exactly
        np.testing.assert_allclose(got["curve"], want.curve, rtol=2e-3)
        np.testing.assert_allclose(got["train_loss"], want.train_loss, rtol=2e-3)
        assert got["curve"][1] != got["curve"][0]  # it trained


@pytest.mark.timeout(180)
def test_every_process_evaluates_with_rank_0_s_buffers_and_the_accuracy_of_one(
    two_processes: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from imle_solvers.training.loop import evaluate

    out, done = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"checks-rank{r}.json").read_text()) for r in (0, 1)]
    want = {name: buffer.tolist() for name, buffer in buffers_case(0).named_buffers()}
    assert want != {name: buffer.tolist() for name, buffer in buffers_case(1).named_buffers()}
    one = evaluate(*evaluation_case())  # one process, the whole test set
    assert one["accuracy"] == 20 / 31  # a test that can fail: neither 0 nor 1
    for got in ranks:
        assert got["buffers"] == want  # running mean, variance and batch count of rank 0
        # shares of 16 and 15 instances: the sums, and the divisor, of the whole test set
        assert got["evaluation"]["accuracy"] == one["accuracy"]
        assert got["evaluation"]["regret"] == pytest.approx(one["regret"], rel=1e-12)


@pytest.mark.timeout(180)
def test_every_step_on_two_processes_has_the_gradient_of_one(
    two_processes: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"float64-rank{r}.json").read_text()) for r in (0, 1)]
    one = train_float64(None)
    for name in FLOAT64_METHODS:
        want = one[name]
        assert len(want["grads"]) == 2 * 6  # two epochs of 6 steps (5 batches of 7, one of 5)
        for got in ranks:  # each process: the all-reduced gradient, the global loss, the whole curve
            close_lists(got[name]["grads"], want["grads"], 1e-9, name)
            np.testing.assert_allclose(got[name]["curve"], want["curve"], rtol=1e-9, err_msg=name)
            loss = got[name]["train_loss"]  # summed in float32 by the loop, in a different order
            np.testing.assert_allclose(loss, want["train_loss"], rtol=1e-6, err_msg=name)
        # an epoch lasts as long as its slowest process, the same number everywhere (--time-limit stops
        # every process after the same epoch)
        assert ranks[0][name]["epoch_times"] == ranks[1][name]["epoch_times"], name


@pytest.mark.timeout(180)
def test_adaptive_targets_on_two_processes_hold_the_state_of_one(
    two_processes: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"adaptive-rank{r}.json").read_text()) for r in (0, 1)]
    for case in adaptive_cases():
        key = case_key(*case)
        one = adaptive_states(None, *case)  # one process, the global batches
        moved = {tuple(state) for state in one["states"]}
        assert len(moved) > 2, key  # the state moves step by step (a test that can fail)
        for got in ranks:
            if case[0] == "unsynced":  # each process adapts to its own share: not the state of one
                assert not np.allclose(got[key]["states"], one["states"], rtol=1e-6), key
                continue
            # β, n̄, u (α) after every step: the same bits, equal shares or not (a global batch of 9 is
            # cut 5 / 4, its last batch of 3 cut 2 / 1), in float32 as in float64
            assert got[key]["states"] == one["states"], key
            # the weights: DDP sums the two shares' gradients in another order than one process does
            rtol = 1e-12 if case[2] == torch.float64 else 1e-5
            np.testing.assert_allclose(got[key]["weight"], one["weight"], rtol=rtol, err_msg=key)


@pytest.mark.slow  # two fresh interpreters and torchrun's agent: 10-20 s
@pytest.mark.timeout(120)
def test_a_process_that_stops_answering_does_not_hang_the_others() -> None:
    start = time.monotonic()
    done = torchrun([str(ROOT / "tests" / "training" / "ddp_worker.py"), "hang", "3"], timeout=100)
    assert done.returncode != 0
    assert "Timed out" in done.stderr and "[rank0]" in done.stderr  # rank 0's all-reduce gave up
    assert time.monotonic() - start < 90  # rank 1 sleeps 600 s: torchrun stopped it


@pytest.mark.slow  # the documented command itself; the default suite runs its main() under torchrun
@pytest.mark.timeout(180)
def test_torchrun_dash_m_imle_solvers_train(tmp_path: Path) -> None:
    done = torchrun(["-m", "imle_solvers", "train", *TINY, "--quiet", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["distributed"]["world_size"] == 2 and saved["complete"] is True
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "imle-mumu-seed3.json",
        "pfyl-seed3.json",
        "spo+-seed3.json",
    ]


# --- the solver pool of a training run -----------------------------------------------------------------


def test_workers_and_a_dask_cluster_exclude_each_other() -> None:
    for workers in (1, 2):  # one pool process is a pool too
        with pytest.raises(ConfigError, match="--workers and --dask-address exclude each other"):
            TrainConfig(problem="knapsack", workers=workers, dask_address="tcp://127.0.0.1:8786")
    assert (
        TrainConfig(problem="knapsack", dask_address="tcp://127.0.0.1:8786").workers == 0
    )  # the cluster alone
    for bad in ("", "tcp://host :8786"):
        with pytest.raises(ConfigError, match="dask_address must be a Dask scheduler address"):
            TrainConfig(problem="knapsack", dask_address=bad)


@pytest.mark.timeout(60)
def test_an_unreachable_dask_scheduler_stops_the_command_before_training(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        nowhere = ["--dask-address", "tcp://127.0.0.1:9"]  # port 9: nothing listens
        status = main(
            [
                "--problem",
                "knapsack",
                "--method",
                "two-stage",
                "--n-train",
                "8",
                "--n-test",
                "4",
                "--batch-size",
                "4",
                *nowhere,
                "--quiet",
            ]
        )
    assert status == 2
    err, hint = capsys.readouterr().err.splitlines()
    assert hint == "Try 'imle-solvers train --help' for more information."
    assert err.startswith(
        "imle-solvers train: error: argument --dask-address: cannot reach the Dask scheduler"
    )


# --- the documented command lines ----------------------------------------------------------------------


def torchrun_lines() -> list[tuple[str, str]]:
    """``(where, line)`` of every ``torchrun ... -m imle_solvers ...`` in the docs, README and examples."""
    found = []
    for path in [*sorted(ROOT.joinpath("docs").glob("*.md")), ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
        lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        lines += [" ".join(span.split()) for span in re.findall(r"`(torchrun [^`]*)`", prose)]
        found += [(path.name, line.split("#")[0].strip()) for line in lines]
    for path in sorted(ROOT.joinpath("examples").glob("*.py")):
        found += [(path.name, line.split("#")[0].strip()) for line in path.read_text().splitlines()]
    return [(w, line) for w, line in found if line.startswith("torchrun ") and "-m imle_solvers" in line]


TORCHRUN_LINES = torchrun_lines()


def test_the_scaling_page_shows_torchrun_commands() -> None:
    assert sum(where == "scaling.md" for where, _ in TORCHRUN_LINES) >= 5


@pytest.mark.parametrize(("where", "line"), TORCHRUN_LINES, ids=[f"{w}: {x}" for w, x in TORCHRUN_LINES])
def test_every_documented_torchrun_command_parses(where: str, line: str) -> None:
    from torch.distributed.run import get_args_parser

    words = ["2" if re.fullmatch(r"[A-Z]+", w) else w for w in shlex.split(line)[1:] if w != "..."]
    words = [re.sub(r"<[a-z-]+>", "host", w) for w in words]  # tcp://<scheduler-host>:8786
    launch = get_args_parser().parse_args(words)  # torchrun's own options
    assert launch.module and launch.training_script == "imle_solvers", f"{where}: {line}"
    command, *argv = launch.training_script_args
    assert command == "train", f"{where}: {line}"
    TrainConfig(**vars(TrainConfig.parser().parse_args(argv)))  # the command's options


# --- the example --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_ddp_example_trains_in_one_process() -> None:
    example = runpy.run_path(str(ROOT / "examples" / "ddp_train.py"), run_name="example")
    score, beta, nonzeros = example["own_loop"](epochs=1, n_train=256)
    assert 0 < score < 0.5 and beta != 1.0 and nonzeros != 1.0  # it trained, and AI-MLE's state moved


@pytest.mark.slow  # torchrun and two fresh interpreters
@pytest.mark.timeout(180)
def test_the_ddp_example_on_two_processes_holds_one_beta() -> None:
    done = torchrun([str(ROOT / "examples" / "ddp_train.py"), "--epochs", "2", "--n-train", "256"])
    assert done.returncode == 0, done.stderr[-3000:]
    found = sorted(
        re.findall(r"rank (\d): (normalised test regret [\d.]+, AI-MLE β [\d.]+, n̄ [\d.]+)", done.stdout)
    )
    assert [rank for rank, _ in found] == ["0", "1"], done.stdout
    assert found[0][1] == found[1][1]  # the same regret, β and n̄ (AI-MLE's state)


# --- the benchmark of the docs' table -------------------------------------------------------------------


@pytest.mark.slow  # four training launches, a Dask cluster and CP-SAT steps: about a minute
@pytest.mark.timeout(400)
def test_bench_scaling_measures_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.benchmarks import scaling

    tiny = ("--n-train", "64", "--n-test", "32")
    monkeypatch.setattr(scaling, "PROTOCOLS", {"tiny": tiny, "tiny, CP-SAT": ("--oracle", "host", *tiny)})
    rows = scaling._training_rows(repeats=1, epochs=2)
    assert [(r["protocol"], r["processes"]) for r in rows] == [
        ("tiny", 1),
        ("tiny", 2),
        ("tiny, CP-SAT", 1),
        ("tiny, CP-SAT", 2),
    ]
    assert all(r["s_per_epoch"] > 0 and r["epochs"] == 1 for r in rows)
    assert (
        rows[0]["speed_up"] == 1.0 and rows[1]["speed_up"] == rows[0]["s_per_epoch"] / rows[1]["s_per_epoch"]
    )
    solver = scaling._solver_rows(rounds=1)
    assert [r["variant"].split()[0] for r in solver] == ["serial", "2", "Dask:"]
    assert all(r["rows"] == 512 and r["rounds"] == 1 and r["s_per_step"] > 0 for r in solver)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_benchmarks_dask_programs_leave_nothing_behind(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    from imle_solvers.benchmarks.scaling import dask_programs

    with dask_programs(2, tmp_path) as address, distributed.Client(address, timeout=30) as client:
        pids = [*client.run(os.getpid).values(), *client.run(os.getppid).values()]  # workers, nannies
        assert len(set(pids)) == 4
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


# --- AdaptiveTarget's collectives, one process standing in for two --------------------------------------


def _mirrored_group(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A process group of two whose other process holds a copy of this one's rows: every sum doubles,
    so the combined statistics (norms and counts per sample) are this process's own. Returns the list
    of collectives called."""
    import torch.distributed as dist

    calls: list[str] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)

    def all_gather(parts: list[torch.Tensor], tensor: torch.Tensor, group: object = None) -> None:
        calls.append("all_gather")
        for part in parts:
            part.copy_(tensor)

    def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM, group: object = None) -> None:
        if op == dist.ReduceOp.MAX:
            calls.append("all_reduce max")  # the same largest entries on both
            return
        calls.append("all_reduce")
        tensor.mul_(2)

    monkeypatch.setattr(dist, "all_gather", all_gather)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return calls


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
            ],
        ),
    ],
)
def test_adaptive_target_combines_its_statistics_without_a_host_sync(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    from imle_solvers import AdaptiveTarget

    def step(sync: bool) -> tuple[torch.Tensor, AdaptiveTarget]:
        target = AdaptiveTarget(nonzero_target=2.0, step=0.05, momentum=0.5, sync=sync).to(device)
        layer = IMLE(
            TopK(3, 10), Gumbel(), target, samples=2, generator=torch.Generator(device).manual_seed(0)
        )
        theta = torch.randn(6, 10, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
        upstream = torch.randn(6, 2, 10, generator=torch.Generator().manual_seed(2)).to(device)
        z = layer(theta)
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("error")  # any host synchronisation raises
        try:
            (z * upstream).sum().backward()
        finally:
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        assert theta.grad is not None
        return theta.grad, target

    calls = _mirrored_group(monkeypatch)
    alone, one = step(sync=False)
    assert calls == []  # sync=False: no collective
    mirrored, two = step(sync=True)
    # the largest entries and the fixed-point sums behind λ's norms, then the counts behind β
    assert calls == ["all_reduce max", "all_reduce", "all_reduce"]
    torch.testing.assert_close(mirrored, alone)  # λ from the combined norms: the same
    for name in ("beta", "nonzeros", "last_update"):
        torch.testing.assert_close(getattr(two, name), getattr(one, name))
    assert float(one.nonzeros) != 1.0  # the state moved


class _Stop(Exception):
    """Ends a replayed `batch_norms` call once the collective of interest is seen."""


def _norms_over_shares(parts: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """What each process returns from `batch_norms` when process ``r`` holds ``parts[r]`` (its share of
    every tensor). Its two collectives are played out across the processes in turn: the largest entries
    (max), then the fixed-point sums (sum)."""
    import torch.distributed as dist

    from imle_solvers._collective import Sync, batch_norms

    def play(share_: Sequence[torch.Tensor], peaks: torch.Tensor | None, sums: torch.Tensor | None) -> Any:
        seen: list[torch.Tensor] = []

        def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM, group: object = None) -> None:
            given = peaks if op == dist.ReduceOp.MAX else sums
            if given is None:  # the collective whose inputs are gathered now
                seen.append(tensor.clone())
                raise _Stop
            tensor.copy_(given)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(dist, "all_reduce", all_reduce)
            try:
                return batch_norms(list(share_), Sync())
            except _Stop:
                return seen[0]

    peaks = torch.stack([play(p, None, None) for p in parts]).amax(dim=0)  # every process's maxima
    sums = torch.stack([play(p, peaks, None) for p in parts]).sum(dim=0)  # every process's sums
    return [play(p, peaks, sums) for p in parts]


@given(
    rows=st.integers(2, 40),
    world=st.integers(2, 4),
    scale=st.sampled_from([1e-30, 1.0, 1e30]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_batch_norms_are_the_same_bits_however_the_rows_are_shared(
    rows: int, world: int, scale: float, dtype: torch.dtype, seed: int
) -> None:
    from imle_solvers._collective import batch_norms

    gen = torch.Generator().manual_seed(seed)
    theta = (torch.randn(rows, 1, 7, generator=gen, dtype=torch.float64) * scale).to(dtype)
    grad = (torch.randn(rows, 3, 7, generator=gen, dtype=torch.float64) * scale).to(dtype)
    flat = (torch.randn(rows, 5, generator=gen, dtype=torch.float64) * scale).to(dtype)  # 2-dim: rows too
    one = batch_norms([theta, grad, flat])  # one process, the whole batch
    want = torch.stack([theta.double().norm(), grad.double().norm(), flat.double().norm()])
    torch.testing.assert_close(one, want, rtol=1e-6, atol=0)
    if rows < world:
        return
    parts = [[theta[a:b], grad[a:b], flat[a:b]] for a, b in (share(rows, r, world) for r in range(world))]
    for got in _norms_over_shares(parts):  # e.g. 17 / 16 of 33 rows on two processes
        assert torch.equal(got, one)  # to the last bit
