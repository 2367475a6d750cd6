"""The resolved plan of ``imle-solvers train``: each ``auto`` rule by itself, then `resolve` on a CPU and on
a (pretended) GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import imle_solvers.training.plan as plan_module
from imle_solvers import Gumbel, SumOfGamma
from imle_solvers.app.config import fields
from imle_solvers.app.machine import resolve_device
from imle_solvers.errors import ConfigError
from imle_solvers.training import TrainConfig
from imle_solvers.training.plan import (
    Compile,
    auto_amp,
    auto_channels_last,
    auto_compile,
    auto_oracle,
    bf16_supported,
    recording_blocker,
    require_recordable,
)
from tests.support.training import plan_of
from tests.support.warcraft import write_warcraft

CPU, CUDA, CUDA1 = torch.device("cpu"), torch.device("cuda"), torch.device("cuda", 1)


# --- the rules, one by one ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("problem", "device", "oracle"),
    [
        ("terrain", CPU, "host"),  # SciPy's Dijkstra on the CPU
        ("warcraft", CPU, "host"),
        ("terrain", CUDA, "device"),
        ("warcraft", CUDA1, "device"),
        ("knapsack", CPU, "device"),  # TorchKnapsack is the CPU's fastest knapsack oracle too
        ("shortest-path", CPU, "device"),
        ("shortest-path", CUDA, "device"),
        ("tsp", CPU, "host"),  # no device-native TSP oracle: CP-SAT on every device
        ("tsp", CUDA, "host"),
        ("a-problem-without-defaults", CPU, "host"),
    ],
)
def test_auto_oracle(problem: str, device: torch.device, oracle: str) -> None:
    assert auto_oracle(problem, device) == oracle


@pytest.mark.parametrize(
    ("device", "model", "bf16", "amp", "last"),
    [
        (CUDA, "resnet-stem", True, True, True),
        (CUDA, "terrain-cnn", True, True, True),
        (CUDA, "resnet-stem", False, False, True),  # no native bfloat16 (before Ampere): float32
        (CUDA, "linear", True, False, False),  # the linear model gains nothing
        (CPU, "resnet-stem", True, False, False),  # the CPU: float32, contiguous
        (CPU, "linear", False, False, False),
    ],
)
def test_auto_amp_and_channels_last(
    device: torch.device, model: str, bf16: bool, amp: bool, last: bool
) -> None:
    assert auto_amp(device, model, bf16) is amp
    assert auto_channels_last(device, model) is last


def test_bf16_needs_a_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bf16_supported(CPU) is False
    if not torch.cuda.is_available():
        assert bf16_supported(CUDA) is False  # asked without a GPU: no, not an error
    # on a machine with an Ampere-or-later GPU: the GPU runs bfloat16 natively, the CPU still does not
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert bf16_supported(CUDA) is True and bf16_supported(CPU) is False


@pytest.mark.parametrize(
    ("device", "oracle", "workers", "dask", "world", "reason"),
    [
        (CUDA, "device", 0, None, 1, None),
        (CUDA1, "device", 0, None, 1, None),
        (CPU, "device", 0, None, 1, "it needs a CUDA device, got cpu"),
        (CUDA, "host", 0, None, 1, "the oracles solve on the host (--oracle host)"),
        (CUDA, "device", 2, None, 1, "a solver pool solves on the host (--workers 2)"),
        (CUDA, "device", 1, None, 1, "a solver pool solves on the host (--workers 1)"),  # a pool too
        (CUDA, "device", 0, "tcp://h:8786", 1, "a Dask cluster solves on the host (--dask-address)"),
        (CUDA, "device", 0, None, 2, "2 training processes: DistributedDataParallel's all-reduce"),
        (CPU, "host", 3, None, 4, "it needs a CUDA device, got cpu"),  # the first reason is given
    ],
)
def test_what_rules_out_the_recorded_step(
    device: torch.device, oracle: str, workers: int, dask: str | None, world: int, reason: str | None
) -> None:
    found = recording_blocker(device, oracle, workers, dask, world)
    assert found == reason if reason is None else (found is not None and found.startswith(reason))


def test_auto_compile_is_the_recorded_step_unless_ruled_out() -> None:
    mode, reason = auto_compile(None)
    assert mode is Compile.GRAPH and mode.records and not mode.compiles and "recorded step" in reason
    mode, reason = auto_compile("it needs a CUDA device, got cpu")
    assert mode is Compile.OFF and reason == (
        "auto: eager steps, the recorded step is ruled out: it needs a CUDA device, got cpu"
    )
    assert [m.value for m in Compile] == ["off", "graph", "model", "model+graph"]  # --compile's names
    assert [m for m in Compile if m.records] == [Compile.GRAPH, Compile.MODEL_GRAPH]
    assert [m for m in Compile if m.compiles] == [Compile.MODEL, Compile.MODEL_GRAPH]


def test_an_explicit_recorded_step_that_cannot_be_recorded_is_refused() -> None:
    with pytest.raises(
        ConfigError, match="model\\+graph records the training step as a CUDA graph, but x"
    ) as e:
        require_recordable(Compile.MODEL_GRAPH, "x")
    assert e.value.field == "compile"
    require_recordable(Compile.MODEL, "x")  # no recording: nothing to rule out
    require_recordable(Compile.GRAPH, None)


def test_the_device_is_resolved_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("auto") == (CUDA if torch.cuda.is_available() else CPU)
    assert resolve_device(CUDA1) is CUDA1 and resolve_device("cuda:1") == CUDA1
    # one of several training processes: its own GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda", local_rank=1) == CUDA1 and resolve_device("cpu", local_rank=1) == CPU
    with pytest.raises(ConfigError, match="each takes cuda:LOCAL_RANK"):
        resolve_device("cuda:0", local_rank=1)
    with pytest.raises(ConfigError, match="LOCAL_RANK=2 has no GPU of its own"):
        resolve_device("cuda", local_rank=2)


# --- resolve --------------------------------------------------------------------------------------------


def test_on_the_cpu_every_step_is_eager_float32() -> None:
    plan = plan_of(problem="warcraft", n_train=140)
    assert plan.device == CPU and plan.oracle == "host"
    assert plan.step == plan_module.StepPlan(
        compile=Compile.OFF,
        amp=False,
        channels_last=False,
        cudnn_benchmark=False,
        reason="auto: eager steps, the recorded step is ruled out: it needs a CUDA device, got cpu",
    )
    assert plan.settings_text == "--compile off --amp off --channels-last off"
    # what results.json records: every option by its name, resolved, and why the step runs as it does
    names = {spec.name for spec in fields(TrainConfig)}
    assert set(plan.record) == names | {"compile_reason"}
    assert {k for k, v in plan.record.items() if v is None} == {"data", "dask_address", "out"}
    assert plan.record["compile"] == "off" and plan.record["device"] == "cpu"
    assert plan.record["oracle"] == "host" and plan.record["n_train"] == 140
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.model = "linear"  # type: ignore[misc]


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`resolve` as it decides on a machine with an Ampere-or-later CUDA device (nothing runs on it)."""
    monkeypatch.setattr(
        plan_module, "resolve_device", lambda name, rank=None: torch.device("cuda", rank or 0)
    )
    monkeypatch.setattr(plan_module, "bf16_supported", lambda device: True)


def _step(**fields: object) -> tuple[str, bool, bool, str]:
    plan = plan_of(**fields)
    return plan.step.compile.value, plan.step.amp, plan.step.channels_last, plan.oracle


@pytest.mark.usefixtures("gpu")
def test_on_a_gpu_auto_is_the_measured_fastest(monkeypatch: pytest.MonkeyPatch) -> None:
    # the recorded step, bfloat16 and channels-last for the CNNs, device-native oracles
    assert _step(problem="warcraft") == ("graph", True, True, "device")
    assert _step(problem="terrain", model="terrain-cnn") == ("graph", True, True, "device")
    assert _step(problem="shortest-path") == ("graph", False, False, "device")  # the linear model: float32
    assert _step(problem="tsp") == ("off", False, False, "host")  # CP-SAT tours: the step needs the host
    assert plan_of(problem="warcraft").step.cudnn_benchmark is True
    # eager where the step cannot be recorded, with the reason
    assert _step(problem="warcraft", oracle="host") == ("off", True, True, "host")
    assert _step(problem="warcraft", workers=2) == ("off", True, True, "host")  # a pool: the host oracles
    reason = plan_of(problem="warcraft", workers=2).step.reason
    assert (
        reason
        == "auto: eager steps, the recorded step is ruled out: a solver pool solves on the host (--workers 2)"
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _step(problem="warcraft", n_train=140) == ("off", True, True, "device")
    monkeypatch.setenv("WORLD_SIZE", "1")
    # what is asked for is what runs; a recording that cannot be is refused before any work
    assert _step(problem="warcraft", compile="model", amp="off", channels_last="off") == (
        "model",
        False,
        False,
        "device",
    )
    assert plan_of(problem="warcraft", compile="off").step.reason == "asked for"
    with pytest.raises(ConfigError, match="graph records the training step as a CUDA graph, but the oracles"):
        plan_of(problem="warcraft", compile="graph", oracle="host")
    monkeypatch.setattr(plan_module, "bf16_supported", lambda device: False)
    assert _step(problem="warcraft") == ("graph", False, True, "device")


@pytest.mark.usefixtures("gpu")
def test_the_record_says_what_the_step_runs_on_a_gpu() -> None:
    # results.json records the resolved step, not the option as given (auto)
    record = plan_of(problem="warcraft").record
    assert (record["compile"], record["amp"], record["channels_last"]) == ("graph", "bf16", "on")
    record = plan_of(problem="warcraft", compile="off", amp="off", channels_last="off").record
    assert (record["compile"], record["amp"], record["channels_last"]) == ("off", "off", "off")


def test_the_noise_option_picks_the_distribution() -> None:
    for noise, kind in (("sog", SumOfGamma), ("gumbel", Gumbel)):
        drawn = plan_of(noise=noise, tau=2.5).options.noise
        assert type(drawn) is kind and drawn.tau == 2.5, noise


def test_published_files_give_the_counts_and_more_is_refused(tmp_path: Path) -> None:
    # --data: as many maps as the files hold (28 training, 14 test), or as asked; more is refused
    write_warcraft(tmp_path, 4)
    fields = {"problem": "warcraft", "size": 4, "data": str(tmp_path), "batch_size": 5}
    assert (plan_of(**fields).data.n_train, plan_of(**fields).data.n_test) == (28, 14)
    exact = plan_of(**fields, n_train=28, n_test=14).data
    assert (exact.n_train, exact.n_test) == (28, 14)  # all of them: not more than the files hold
    fewer = plan_of(**fields, n_train=5).data
    assert (fewer.n_train, fewer.n_test) == (5, 14)
    with pytest.raises(ConfigError, match=r"test_maps\.npy holds 14 maps, 15 are asked for") as info:
        plan_of(**fields, n_test=15)
    assert info.value.field == "data"


def test_a_batch_larger_than_the_training_set_warns() -> None:
    with pytest.warns(RuntimeWarning, match="the batch size 32 is larger than the 20 training instances"):
        plan = plan_of(n_train=20)
    assert plan.schedule.batch_size == 32  # as asked: one step of all 20 instances per epoch
    plan_of(n_train=32)  # equal: no warning


def test_the_plan_is_the_only_way_settings_reach_training() -> None:
    # the training package reads no TrainConfig field after resolving it
    import ast
    import inspect

    import imle_solvers.training.loop as loop
    import imle_solvers.training.problems as problems
    import imle_solvers.training.runner as runner

    for module in (loop, problems, runner):
        tree = ast.parse(inspect.getsource(module))
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert "resolved" not in names
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("train_model", "make_problem")
        ]
        for call in calls:  # the plan whole, never its fields one by one
            assert len(call.args) <= 4 and not any(
                k.arg in ("epochs", "batch_size", "lr") for k in call.keywords
            )


@pytest.mark.usefixtures("gpu")
def test_a_run_says_in_one_line_why_its_steps_are_not_recorded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import imle_solvers.training.runner as runner
    from imle_solvers.training import run

    seen = []
    monkeypatch.setattr(runner, "_train_all", lambda plan, session, group: seen.append(plan))
    run(TrainConfig(problem="warcraft", oracle="host", show_progress=False))  # nothing trains here
    (plan,) = seen
    assert plan.device.type == "cuda" and plan.step.compile is Compile.OFF
    assert capsys.readouterr().err.splitlines() == [
        "steps: auto: eager steps, the recorded step is ruled out: the oracles solve on the host "
        "(--oracle host)"
    ]
    run(TrainConfig(problem="warcraft", compile="model", show_progress=False))
    assert capsys.readouterr().err.splitlines() == [
        "steps: eager steps, model compiled by torch.compile (asked for)"
    ]
    run(TrainConfig(problem="warcraft", show_progress=False))  # recorded: nothing to say
    assert seen[-1].step.compile is Compile.GRAPH and capsys.readouterr().err == ""


def test_a_run_line_says_how_its_steps_ran_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    from imle_solvers.training import run
    from imle_solvers.training.plan import steps_text

    assert [steps_text(c.value) for c in Compile] == [
        "eager steps",
        "steps replayed from a CUDA graph",
        "eager steps, model compiled by torch.compile",
        "steps replayed from a CUDA graph, model compiled by torch.compile",
    ]
    assert steps_text("off (recording the CUDA graph failed: out of memory)") == (
        "eager steps (recording the CUDA graph failed: out of memory)"
    )
    run(TrainConfig(methods=("two-stage",), n_train=16, n_test=8, batch_size=8, epochs=1))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "seed 0: test regret" in x]
    assert line.endswith("s/epoch, eager steps") and "steps: off" not in line
