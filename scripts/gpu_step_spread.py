"""How far a recorded training step's parameters drift from the eager step's, and why: measured on a GPU.

    PYTHONPATH=. python scripts/gpu_step_spread.py                  # on a CUDA machine, about 30 s
    PYTHONPATH=. python scripts/gpu_step_spread.py --device cpu     # a dry run of the eager columns

The problem of the CUDA test ``test_cuda_recorded_step_trains_as_the_eager_step_without_host_sync``: 30
generated 4 × 4 Warcraft maps, ``resnet-stem``, batches of 8, 3 epochs at lr 1e-2 divided by 10 after the
second (12 Adam steps), deterministic cuDNN algorithms, cuDNN's algorithm search off. For I-MLE μ-μ
(noise), I-MLE M-M and DBB (no noise) it trains the same initial model several ways and prints, for
each, the distance ‖θ − θ_eager‖ of its final parameters to the eager run's, as a share of how far the
eager run moved them (‖θ_eager − θ_0‖):

* ``eager again``: the same eager run a second time: the GPU's own run-to-run spread;
* ``graph``: the recorded step (``--compile graph``), Adam capturable as in the eager run;
* ``eager, Adam not capturable``: the eager step with the Adam of earlier versions, which did its
  bias correction on the host (the arithmetic the recorded step's Adam differed by);
* ``graph / eager, no TF32``: both with TF32 convolutions off (``torch.backends.cudnn.allow_tf32``);
* ``eager, cuDNN search``: deterministic algorithms off and cuDNN's algorithm search on.

Then a profile of one 30 × 30 eager bfloat16 channels-last step of the protocol (batch 70, 20 steps):
the CUDA kernels that take its time. Exit status 0 unless a run raises.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from typing import Any

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
parser.add_argument("--no-profile", action="store_true", help="skip the profile of the 30 × 30 step")
args = parser.parse_args()

import torch  # noqa: E402

from imle_solvers.app.report import format_table  # noqa: E402
from imle_solvers.training import TrainConfig, make_problem, train_model  # noqa: E402
from imle_solvers.training.plan import Compile, TrainPlan  # noqa: E402

CUDA = args.device == "cuda"
if CUDA and not torch.cuda.is_available():
    sys.exit("no CUDA device: run with --device cpu for a dry run")
START = time.perf_counter()

SETTINGS = dict(
    problem="warcraft",
    n_train=30,
    n_test=12,
    size=4,
    model="resnet-stem",
    oracle="device",
    epochs=3,
    batch_size=8,
    lr=1e-2,
    lr_drops=(2,),
    samples=2,
    device=args.device,
    show_progress=False,
)


def plan_for(compile: str) -> TrainPlan:
    plan = TrainConfig(**SETTINGS).plan()  # type: ignore[arg-type]
    step = dataclasses.replace(
        plan.step, compile=Compile(compile), amp=False, channels_last=False, cudnn_benchmark=False
    )
    return dataclasses.replace(plan, step=step)


@contextlib.contextmanager
def backends(tf32: bool = True, deterministic: bool = True, search: bool = False) -> Iterator[None]:
    saved = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic = tf32, deterministic
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic, _ = saved
        torch.backends.cudnn.benchmark = saved[2]


@contextlib.contextmanager
def adam_not_capturable() -> Iterator[None]:
    """``torch.optim.Adam`` built with ``capturable=False`` whatever ``train_model`` asks."""
    original = torch.optim.Adam

    class Plain(original):  # type: ignore[misc, valid-type]
        def __init__(self, params: Any, **kwargs: Any) -> None:
            kwargs["capturable"] = False
            super().__init__(params, **kwargs)

    torch.optim.Adam = Plain  # type: ignore[misc]
    try:
        yield
    finally:
        torch.optim.Adam = original  # type: ignore[misc]


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().cpu().flatten() for p in model.parameters()])


def trained(
    problem: Any, method: str, compile: str = "off", search: bool = False
) -> tuple[torch.Tensor, str]:
    plan = plan_for(compile)
    if search:
        plan = dataclasses.replace(plan, step=dataclasses.replace(plan.step, cudnn_benchmark=True))
    torch.manual_seed(0)
    model = problem.model()
    run = train_model(plan, problem, method, 0, model=model)
    return flat(model), run.step


def spread_table() -> None:
    problem = make_problem(plan_for("off"), 0)
    torch.manual_seed(0)
    start = flat(problem.model())
    rows = []
    for method in ("imle-mumu", "imle-mm", "dbb"):
        with backends():
            eager, _ = trained(problem, method)
            again, _ = trained(problem, method)
            graph, kind = trained(problem, method, "graph") if CUDA else (None, "")
            with adam_not_capturable():
                plain, _ = trained(problem, method)
        with backends(tf32=False):
            eager32, _ = trained(problem, method)
            graph32, _ = trained(problem, method, "graph") if CUDA else (None, "")
        with backends(deterministic=False):
            searched, _ = trained(problem, method, search=True)
        moved = float((eager - start).norm())

        def share(a: torch.Tensor | None, b: torch.Tensor, moved: float = moved) -> str:
            return "—" if a is None else f"{float((a - b).norm()) / moved:.2e}"

        rows.append(
            {
                "method": method,
                "‖θ_eager − θ_0‖": f"{moved:.4g}",
                "eager again": share(again, eager),
                "graph": share(graph, eager) + (f" ({kind})" if kind and kind != "graph" else ""),
                "eager, Adam not capturable": share(plain, eager),
                "graph vs eager, no TF32": share(graph32, eager32),
                "no TF32 vs TF32": share(eager32, eager),
                "eager, cuDNN search": share(searched, eager),
            }
        )
    print(format_table(rows))
    print(
        "(each: ‖θ − θ_eager‖ / ‖θ_eager − θ_0‖ after 12 Adam steps; the CUDA test allows the graph "
        "max(4 × eager again, 3 %))"
    )


def profile_step() -> None:
    from torch.profiler import ProfilerActivity, profile

    from imle_solvers.training.step import make_step

    plan = TrainConfig(
        problem="warcraft", size=30, n_train=1400, n_test=70, device=args.device, show_progress=False
    ).plan()
    plan = dataclasses.replace(plan, step=dataclasses.replace(plan.step, compile=Compile.OFF))
    problem = make_problem(plan, 0)
    from imle_solvers.training.loop import _channels_last
    from imle_solvers.training.methods import METHODS

    model = problem.model().to(plan.device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    train = _channels_last(problem.train.to(plan.device))
    method = METHODS["imle-mumu"](problem.train_oracle, plan.options)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, capturable=CUDA)
    running = torch.zeros((), device=plan.device)
    step = make_step("off", model, method, opt, train, running, batch_size=70, amp=plan.step.amp)
    torch.backends.cudnn.benchmark = True
    batches = [torch.arange(i * 70, (i + 1) * 70, device=plan.device) for i in range(20)]
    for b in batches[:5]:  # warm-up: cuDNN's search, Triton
        step(b)
    if CUDA:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    t = time.perf_counter()
    with profile(activities=activities) as prof:
        for b in batches:
            step(b)
        if CUDA:
            torch.cuda.synchronize()
    ms = (time.perf_counter() - t) / len(batches) * 1e3
    print(f"eager {plan.settings_text} step at 30 × 30, batch 70: {ms:.2f} ms (under the profiler)")
    key = "self_cuda_time_total" if CUDA else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=70))


print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0) if CUDA else 'cpu'}")
print("\n=== the recorded step against eager steps (shares of the distance training moved θ)")
spread_table()
print(f"({time.perf_counter() - START:.1f} s)")
if not args.no_profile:
    print("\n=== where a 30 × 30 eager bf16 channels-last step spends its time")
    profile_step()
print(f"done in {time.perf_counter() - START:.1f} s")
