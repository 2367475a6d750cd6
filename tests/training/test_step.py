"""The training step: eager, recorded (the logic of the CUDA graph step on the CPU, the graph on CUDA),
compiled, bfloat16 autocast and channels-last; no host read inside an epoch."""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

import imle_solvers.training.loop as loop
import imle_solvers.training.step as step_module
from imle_solvers.training import TrainPlan, TrainRun, make_problem, train_model
from imle_solvers.training.methods import build_method
from imle_solvers.training.problems import Problem
from imle_solvers.training.step import GraphStep, TrainStep, make_step
from tests.support.training import plan_of, with_step

SMALL = {
    "problem": "warcraft",
    "n_train": 30,
    "n_test": 12,
    "size": 4,
    "model": "terrain-cnn",
    "oracle": "device",
    "epochs": 2,
    "batch_size": 8,  # batches 8, 8, 8 and a last one of 6
    "lr": 1e-2,
    "lr_drops": (1,),
    "samples": 2,
}
"""30 + 12 generated 4×4 Warcraft maps (32×32 pixels), the small CNN, solved on the CPU: two epochs, the
learning rate divided by 10 after the first."""


def _plan(**step: Any) -> TrainPlan:
    """`SMALL`'s plan, its step changed (``compile``, ``amp``, ``channels_last``)."""
    return with_step(plan_of(**SMALL), **step)


@pytest.fixture(scope="module")
def problem(tmp_path_factory: pytest.TempPathFactory) -> Problem:
    return make_problem(_plan(), 0)


def _train(problem: Problem, method: str = "imle-mumu", seed: int = 0, **step: Any) -> tuple[TrainRun, Any]:
    torch.manual_seed(seed)
    model = problem.model()
    return train_model(_plan(**step), problem, method, seed, model=model), model


def _same_run(a: TrainRun, b: TrainRun) -> None:
    assert a.curve == b.curve and a.accuracy_curve == b.accuracy_curve and a.train_loss == b.train_loss
    assert a.lr == b.lr


class InlineRecorder:
    """A `Recorder` without CUDA: warm-up calls the step, a "recording" is the step function itself."""

    log: ClassVar[list[str]] = []

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def warm_up(self, fn: Callable[[], None]) -> None:
        self.log.append("warm-up")
        fn()

    def record(self, fn: Callable[[], None]) -> Callable[[], None]:
        self.log.append("record")

        def replay() -> None:
            self.log.append("replay")
            fn()

        return replay


class FailingRecorder(InlineRecorder):
    def record(self, fn: Callable[[], None]) -> Callable[[], None]:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore text")


@pytest.mark.parametrize("seed", [0, 3])
def test_the_recorded_step_replays_the_eager_step(
    problem: Problem, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, eager_model = _train(problem, seed=seed)
    InlineRecorder.log = []
    monkeypatch.setattr(step_module, "CudaGraphRecorder", InlineRecorder)
    graph, graph_model = _train(problem, seed=seed, compile="graph")
    _same_run(graph, eager)  # the static index buffer, the replays and the eager last batch: same steps
    for p, q in zip(graph_model.parameters(), eager_model.parameters()):
        assert torch.equal(p, q)
    assert graph.step == "graph" and eager.step == "off"
    # epoch 1: 2 warm-up steps, a recording replayed for the third batch, the last (6 maps) eagerly;
    # epoch 2: the learning rate changed, so the step is recorded again and replayed for every full batch
    assert InlineRecorder.log == [
        "warm-up",
        "warm-up",
        "record",
        "replay",
        "record",
        "replay",
        "replay",
        "replay",
    ]


def test_a_step_that_cannot_be_recorded_runs_eagerly(
    problem: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, _ = _train(problem)
    monkeypatch.setattr(step_module, "CudaGraphRecorder", FailingRecorder)
    with pytest.warns(RuntimeWarning, match="could not be recorded as a CUDA graph") as caught:
        fallback, _ = _train(problem, compile="graph")
    assert len(caught) == 1  # once, not per step
    _same_run(fallback, eager)
    assert fallback.step == (
        "off (recording the CUDA graph failed: RuntimeError: CUDA error: operation not permitted when stream "
        "is capturing)"
    )


def test_make_step_and_its_errors(problem: Problem) -> None:
    model = problem.model()
    method = build_method("imle-mumu", problem.train_oracle, samples=1)
    opt = torch.optim.Adam(model.parameters())
    running = torch.zeros(())
    assert type(make_step("off", model, method, opt, problem.train, running, batch_size=8)) is TrainStep
    with pytest.raises(
        ValueError, match="compile must be one of 'off', 'graph', 'model', 'model\\+graph', got 'fast'"
    ):
        make_step("fast", model, method, opt, problem.train, running, batch_size=8)
    with pytest.raises(ValueError, match="CUDA graphs record work on a CUDA device, got cpu"):
        GraphStep(model, method, opt, problem.train, running, batch_size=8)
    step = make_step("off", model, method, opt, problem.train, running, batch_size=8)
    step(torch.arange(8))
    assert running > 0 and all(p.grad is not None for p in model.parameters())  # one full step ran


def test_under_autocast_the_method_gets_float32_weights(problem: Problem) -> None:
    # the model runs in bfloat16 (its linear head outputs bfloat16); layers, losses and solvers get float32
    m = problem.train.costs.shape[1]
    model = torch.nn.Sequential(problem.model(), torch.nn.Linear(m, m))
    method = build_method("imle-mumu", problem.train_oracle, samples=1)
    seen: list[torch.dtype] = []
    rule = method.rule
    method.rule = lambda c_hat, batch: (seen.append(c_hat.dtype), rule(c_hat, batch))[1]  # type: ignore[assignment]
    opt = torch.optim.Adam(model.parameters())
    step = make_step("off", model, method, opt, problem.train, torch.zeros(()), batch_size=8, amp=True)
    step(torch.arange(8))
    step(torch.arange(8, 16))
    assert seen == [torch.float32, torch.float32]


def test_the_compiled_model_trains_as_the_eager_one(
    problem: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_module, "COMPILE_BACKEND", "aot_eager")  # torch.compile, no code generation
    eager, eager_model = _train(problem)
    compiled, compiled_model = _train(problem, compile="model")
    assert compiled.step == "model"
    np.testing.assert_allclose(compiled.train_loss, eager.train_loss, rtol=1e-4)
    np.testing.assert_allclose(compiled.curve, eager.curve, rtol=1e-4, atol=1e-6)
    for p, q in zip(compiled_model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-3, atol=1e-5)
    monkeypatch.setattr(step_module, "CudaGraphRecorder", InlineRecorder)
    InlineRecorder.log = []
    both, _ = _train(problem, compile="model+graph")  # the compiled model inside the recorded step
    assert both.step == "model+graph" and InlineRecorder.log.count("record") == 2
    np.testing.assert_allclose(both.train_loss, eager.train_loss, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_inductor_compiled_model_trains_as_the_eager_one(problem: Problem) -> None:
    eager, _ = _train(problem, method="two-stage")
    compiled, _ = _train(problem, method="two-stage", compile="model")
    np.testing.assert_allclose(compiled.train_loss, eager.train_loss, rtol=1e-4)


def test_bf16_autocast_stays_close_to_float32(problem: Problem) -> None:
    torch.manual_seed(0)
    model = problem.model()
    x = problem.train.features[:8]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(x)
    assert low.dtype == torch.float32  # the cost head runs in float32 under autocast
    np.testing.assert_allclose(low.detach().numpy(), model(x).detach().numpy(), rtol=0.03, atol=1e-3)
    # the gradient of a regression loss through the autocast model points the same way (no solver involved)
    grads = []
    for enabled in (False, True):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            c_hat = model(x)
        ((c_hat - problem.train.costs[:8]) ** 2).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0) > 0.99
    plain, _ = _train(problem, method="two-stage")
    amp, _ = _train(problem, method="two-stage", amp=True)
    # bf16 rounding, amplified by two epochs at lr 1e-2: a few per cent apart, depending on the seed
    np.testing.assert_allclose(amp.train_loss, plain.train_loss, rtol=0.08)
    # through the solver: the same learning curve up to a few decisions
    plain, _ = _train(problem)
    amp, _ = _train(problem, amp=True)
    np.testing.assert_allclose(amp.train_loss, plain.train_loss, rtol=0.1)  # a sampled path may differ
    assert abs(amp.regret - plain.regret) < 0.05 and abs(amp.accuracy - plain.accuracy) <= 2 / 12


def test_evaluation_runs_the_model_under_autocast_when_asked(problem: Problem) -> None:
    seen: list[bool] = []
    model = problem.model()
    model.register_forward_hook(lambda *args: seen.append(torch.is_autocast_enabled("cpu")))
    plain = loop.evaluate(model, problem.test, problem.eval_oracle, batch=8)
    low = loop.evaluate(model, problem.test, problem.eval_oracle, batch=8, amp=True)
    assert seen == [False, False, True, True]  # 12 test maps in batches of 8
    assert abs(low["regret"] - plain["regret"]) < 0.05


def test_channels_last_changes_the_layout_not_the_result(problem: Problem) -> None:
    plain, _ = _train(problem)
    last, last_model = _train(problem, channels_last=True)
    np.testing.assert_allclose(last.train_loss, plain.train_loss, rtol=1e-4)
    np.testing.assert_allclose(last.curve, plain.curve, rtol=1e-4, atol=1e-6)
    assert last_model.stem.weight.is_contiguous(memory_format=torch.channels_last)
    assert problem.train.features.is_contiguous()  # the caller's data set is not changed
    converted = loop._channels_last(problem.train)
    assert converted.features.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(converted.features, problem.train.features) and converted.costs is problem.train.costs
    assert loop._channels_last(converted) is converted  # nothing to do: the same data set


READS = ("item", "__float__", "__int__", "__bool__", "tolist", "cpu", "numpy")


@contextmanager
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count the tensor reads (``.item()``, ``float(t)``, ``.cpu()``...) that the training package makes
    inside ``_train_epoch``, by function."""
    counts: Counter[str] = Counter()
    active = [False]
    for name in READS:
        original = getattr(torch.Tensor, name)

        def read(self: torch.Tensor, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_code
            if active[0] and "imle_solvers/training/" in caller.co_filename.replace("\\", "/"):
                counts[caller.co_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, read)
    epoch = loop._train_epoch

    def counted(*args: Any, **kwargs: Any) -> None:
        active[0] = True
        try:
            epoch(*args, **kwargs)
        finally:
            active[0] = False

    monkeypatch.setattr(loop, "_train_epoch", counted)
    yield counts


@pytest.mark.parametrize("n_train", [30, 64])
def test_no_host_read_inside_an_epoch_but_the_loss_display(
    problem: Problem, n_train: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = make_problem(plan_of(**{**SMALL, "n_train": n_train, "n_test": 4}), 1).train
    data = Problem(train, problem.test, problem.model, problem.train_oracle, problem.eval_oracle, {})
    with host_reads(monkeypatch) as counts:
        _train(data)
    assert not counts  # the steps, the method's loss and the loop read nothing back
    monkeypatch.setattr(loop, "_progress_bar", lambda total, desc, show: _Bar())
    with host_reads(monkeypatch) as counts:
        _train(data)
    batches = -(-n_train // 8)
    shown = batches // loop.LOSS_EVERY + (batches % loop.LOSS_EVERY != 0)  # every 10 steps and the last
    assert counts == Counter({"update": 2 * shown})  # 2 epochs; on CUDA a copy that has already arrived


class _Bar:
    """A progress bar that records what it is told."""

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        assert float(kwargs["loss"]) > 0

    def close(self) -> None:
        pass


def test_the_loss_display_on_the_cpu() -> None:
    bar = _Recorder()
    running = torch.tensor(0.0)
    display = loop._LossDisplay(bar, running, n=25, batch_size=2)  # 13 steps, the last of 1 instance
    for b in range(13):
        running += 2.0 if b < 12 else 1.0  # a loss of 1 per instance
        display.update(b)
    assert bar.updates == 13 and bar.shown == ["1", "1"]  # after step 10 and after the last step
    loop._LossDisplay(None, running, 25, 2).update(0)  # no bar: nothing to do


class _Recorder:
    def __init__(self) -> None:
        self.updates, self.shown = 0, []

    def update(self, n: int) -> None:
        self.updates += n

    def set_postfix(self, **kwargs: str) -> None:
        self.shown.append(kwargs["loss"])


def test_time_limit_stops_after_the_epoch_that_passes_it(problem: Problem) -> None:
    five = plan_of(**{**SMALL, "epochs": 5})
    run = train_model(five, problem, "two-stage", 0, time_limit=0.0)
    assert len(run.epoch_times) == 1 and len(run.curve) == 2 and len(run.eval_times) == 2
    run = train_model(_plan(), problem, "two-stage", 0, time_limit=1e9)
    assert len(run.epoch_times) == 2


# --- on a GPU ------------------------------------------------------------------------------------------


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _sync_debug(mode: str) -> None:
    """``torch.cuda.set_sync_debug_mode(mode)`` without torch's warning that the mode is a prototype (the
    warning is torch's, not the step's: it says nothing of what the tests check)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
        torch.cuda.set_sync_debug_mode(mode)


@contextmanager
def no_sync_in_epochs(monkeypatch: pytest.MonkeyPatch, skip: int = 0) -> Iterator[None]:
    """``torch.cuda.set_sync_debug_mode("error")`` inside every ``_train_epoch`` but the first ``skip``: a
    host synchronisation there raises. The mode is back to ``default`` after each epoch, whatever
    happened in it."""
    epoch = loop._train_epoch
    calls = [0]

    def strict(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        try:
            _sync_debug("error" if calls[0] > skip else "default")
            epoch(*args, **kwargs)
        finally:
            _sync_debug("default")

    monkeypatch.setattr(loop, "_train_epoch", strict)
    yield


CUDA_STEP = {
    **SMALL,
    "model": "resnet-stem",
    "device": "cuda",
    "epochs": 3,
    "lr_drops": (2,),
    "show_progress": True,
}
"""The CUDA comparison: `SMALL` with the paper's CNN, three epochs (the recording after the drop)."""


def _cuda_train(problem: Problem, method: str, **step: Any) -> tuple[TrainRun, torch.Tensor]:
    """A run of ``CUDA_STEP`` with this step (eager float32 by default; cuDNN's algorithm search off);
    → the run and the trained parameters, flat, in float64 on the CPU."""
    step = {"compile": "off", "amp": False, "channels_last": False, "cudnn_benchmark": False, **step}
    plan = with_step(plan_of(**CUDA_STEP), **step)
    torch.manual_seed(0)
    model = problem.model()
    run = train_model(plan, problem, method, 0, model=model)
    return run, _flat(model)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().cpu().flatten() for p in model.parameters()])


@cuda
@pytest.mark.cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["imle-mumu", "imle-mm", "dbb"])
def test_cuda_recorded_step_trains_as_the_eager_step_without_host_sync(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # pragma: no cover - GPU only
    # deterministic convolutions; Adam is built the same way (capturable) for both step modes, and the
    # replays draw the noise of the eager steps (the same generator offsets). What can still differ is
    # the order of floating-point sums inside kernels: the distance between two eager runs measures it
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    problem = make_problem(plan_of(**CUDA_STEP), 0)
    torch.manual_seed(0)
    start = _flat(problem.model())
    with no_sync_in_epochs(monkeypatch):
        eager, eager_params = _cuda_train(problem, method)
        again, again_params = _cuda_train(problem, method)
        graph, graph_params = _cuda_train(problem, method, compile="graph")
    assert (eager.step, again.step, graph.step) == ("off", "off", "graph")  # recorded, no fallback
    assert graph.lr == pytest.approx([1e-2, 1e-2, 1e-3])  # the recording after the drop uses the new rate
    moved = float((eager_params - start).norm())  # how far 12 Adam steps moved the parameters
    spread = float((again_params - eager_params).norm())  # eager vs eager on this GPU
    drift = float((graph_params - eager_params).norm())  # recorded vs eager
    # a step lost, a stale batch or a learning rate not dropped moves the parameters by > 8 % of `moved`
    allowed = max(4 * spread, 0.03 * moved)
    numbers = f"{method}: moved {moved:.4g}, eager spread {spread:.3g}, graph drift {drift:.3g}"
    print(numbers)
    assert moved > 0 and drift <= allowed, numbers
    np.testing.assert_allclose(graph.train_loss, eager.train_loss, rtol=0.1, err_msg=numbers)
    np.testing.assert_allclose(graph.curve, eager.curve, rtol=0.1, atol=0.01, err_msg=numbers)


BF16 = {
    "problem": "warcraft",
    "size": 12,
    "n_train": 2800,
    "n_test": 500,
    "model": "resnet-stem",
    "device": "cuda",
    "epochs": 5,
    "schedule": "constant",
    "batch_size": 70,
    "lr": 5e-4,
    "methods": ("imle-mumu",),
    "show_progress": False,
}
"""bfloat16 against float32 on a problem large enough for its averages to be stable: 2,800 maps of
12 × 12 (40 steps an epoch), five epochs at the protocol's batch and learning rate."""


@cuda
@pytest.mark.cuda
@pytest.mark.timeout(300)
def test_cuda_bf16_and_channels_last_train_as_float32(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # pragma: no cover - GPU only
    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    plan = plan_of(**BF16)
    problem = make_problem(plan, 0)
    runs = {}
    for name, step in {
        "float32": {"compile": "off", "amp": False, "channels_last": False},
        "bf16": {"compile": "off", "amp": True, "channels_last": True},
        "recorded bf16": {"compile": "graph", "amp": True, "channels_last": True},
    }.items():
        runs[name] = train_model(with_step(plan, **step), problem, "imle-mumu", 0)
    base = runs["float32"]
    for name, run in runs.items():
        losses = [np.round(r.train_loss, 3).tolist() for r in (run, base)]
        numbers = (
            f"{name}: loss {losses[0]} vs {losses[1]}, accuracy {run.accuracy:.3f} vs {base.accuracy:.3f}"
        )
        print(numbers)
        # the mean loss of 2,800 maps: bfloat16's rounding changes some decisions, not the learning
        np.testing.assert_allclose(run.train_loss, base.train_loss, rtol=0.05, err_msg=numbers)
        assert abs(run.accuracy - base.accuracy) <= 0.15, numbers
        assert run.train_loss[-1] < run.train_loss[0], numbers  # it learns
    assert runs["recorded bf16"].step == "graph"


@cuda
@pytest.mark.cuda
@pytest.mark.timeout(300)
def test_cuda_run_with_the_auto_settings_records_its_step(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # pragma: no cover - GPU only
    from imle_solvers.training import TrainConfig, run
    from imle_solvers.training.plan import Compile, bf16_supported

    monkeypatch.setenv("IMLE_SOLVERS_CACHE", str(tmp_path))
    config = TrainConfig(
        problem="warcraft", size=12, n_train=140, n_test=70, epochs=2, device="cuda", show_progress=False
    )
    step = config.plan().step
    assert (step.compile, step.channels_last, step.amp) == (
        Compile.GRAPH,
        True,
        bf16_supported(torch.device("cuda")),
    )
    with no_sync_in_epochs(monkeypatch, skip=1):  # epoch 1: cuDNN's algorithm search in the warm-up steps
        (result,) = run(config)
    assert result.step == "graph" and np.isfinite(result.regret) and len(result.curve) == 3
