"""Run by ``torchrun`` from ``test_distributed.py`` (one launch for every two-process check):

1. ``imle-solvers train`` (the command line's ``main``) on the two processes, writing ``OUT/cli``;
   then the group's buffer broadcast and a sharded evaluation of a fixed model on 31 instances
   (``OUT/checks-rank<R>.json``);
2. ``train_model`` in float64 with the process group, recording the gradient of every step after
   DistributedDataParallel's all-reduce (``OUT/float64-rank<R>.json``);
3. a hand-written DDP loop around an AI-MLE layer, recording the layer's state after every step
   (``OUT/adaptive-rank<R>.json``).

``ddp_worker.py hang SECONDS``: rank 1 stops answering, rank 0 waits in an all-reduce (the timeout test).

The test computes the same in one process and compares. Importable: the test builds its reference with
`train_float64` and `TINY` from here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from imle_solvers.data.dataset import PTODataset
from imle_solvers.training import TrainConfig, make_problem, train_model
from imle_solvers.training.distributed import DistributedContext

TINY = (
    "--problem",
    "shortest-path",
    "--n-train",
    "40",
    "--n-test",
    "30",
    "--epochs",
    "1",
    "--batch-size",
    "7",  # shares of 4 and 3, and a last batch of 5 (3 and 2): the gradients weighted by share size
    "--samples",
    "3",
    "--deg",
    "2",
    "--seed",
    "3",
    "--methods",
    "imle-mumu",
    "pfyl",
    "spo+",
)
"""The command line of check 1 (and of its one-process reference)."""

FLOAT64_METHODS = ("imle", "imle-mumu", "aimle", "pfyl", "dpo", "spo+", "two-stage")
"""Methods of check 2: noise through the layers (SumOfGamma, Gumbel, Normal) and none; the default
target's unit and AI-MLE's λ from the norms of the global batch."""

ADAPTIVE_VARIANTS = ("inside", "after", "unsynced", "row")
"""Check 3: AdaptiveTarget inside the DDP-wrapped model (its buffers broadcast from rank 0 at every
forward), after it, after it with ``sync=False`` (each process adapts to its own share), and
RowAdaptiveTarget."""


@contextlib.contextmanager
def recorded_gradients() -> Iterator[list[list[float]]]:
    """The gradients Adam steps with (after DDP's all-reduce), one flat list per step."""
    steps: list[list[float]] = []
    original = torch.optim.Adam.step

    def step(self: torch.optim.Adam, *args: Any, **kwargs: Any) -> Any:
        grads = [
            p.grad.flatten() for group in self.param_groups for p in group["params"] if p.grad is not None
        ]
        steps.append(torch.cat(grads).tolist())
        return original(self, *args, **kwargs)

    torch.optim.Adam.step = step  # type: ignore[method-assign]
    try:
        yield steps
    finally:
        torch.optim.Adam.step = original  # type: ignore[method-assign]


def _float64(data: PTODataset) -> PTODataset:
    return PTODataset(data.features.double(), data.costs.double(), data.oracle, data.solutions.double())


def train_float64(distributed: DistributedContext | None) -> dict[str, Any]:
    """Two epochs of every method of `FLOAT64_METHODS` in float64 (sums exact to ~1e-15)."""
    config = TrainConfig(problem="shortest-path", n_train=40, n_test=30, deg=2, epochs=2, batch_size=7)
    plan = config.replace(lr=0.05, samples=3, show_progress=False).plan()
    prob = make_problem(plan, 5)
    prob = dataclasses.replace(prob, train=_float64(prob.train), test=_float64(prob.test))
    out: dict[str, Any] = {}
    for name in FLOAT64_METHODS:
        torch.manual_seed(5)
        model = prob.model().double()
        with recorded_gradients() as grads:
            result = train_model(plan, prob, name, 5, model=model, distributed=distributed)
        out[name] = {
            "grads": grads,
            "curve": result.curve,
            "train_loss": result.train_loss,
            "epoch_times": result.epoch_times,
        }
    return out


def evaluation_case() -> tuple[torch.nn.Module, PTODataset]:
    """A fixed model (the identity) and 31 test instances of top-3-of-8 (shares of 16 and 15) whose
    features are the true values, negated on every third row: 20 of the 31 decisions are optimal."""
    from imle_solvers import TopK

    values = torch.rand(31, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    sign = torch.ones(31, 1, dtype=torch.float64)
    sign[::3] = -1.0  # rows 0, 3, ..., 30: the worst 3 items are picked
    return torch.nn.Identity(), PTODataset(values * sign, values, TopK(3, 8))


def buffers_case(rank: int) -> torch.nn.Module:
    """A batch-norm layer whose buffers differ on every process (rank 0: mean 1, variance 10, 5 batches)."""
    layer = torch.nn.BatchNorm1d(3)
    values = {"running_mean": rank + 1.0, "running_var": 10.0 * (rank + 1), "num_batches_tracked": rank + 5}
    for name, buffer in layer.named_buffers():
        buffer.fill_(values[name])
    return layer


def checks(group: DistributedContext) -> dict[str, Any]:
    """Rank 0's buffers given to every process, and the sharded evaluation of `evaluation_case`."""
    from imle_solvers.training.loop import evaluate

    layer = buffers_case(group.rank)
    group.sync_buffers(layer)
    model, data = evaluation_case()
    return {
        "buffers": {name: buffer.tolist() for name, buffer in layer.named_buffers()},
        "evaluation": evaluate(model, data, distributed=group),
    }


ADAPTIVE_BATCHES = (8, 9)
"""Global batches of check 3: 8 (shares of 4 and 4) and 9 (5 and 4, and a last batch of 3: 2 and 1)."""


def adaptive_states(
    distributed: DistributedContext | None, variant: str, batch: int = 8, dtype: torch.dtype = torch.float64
) -> dict[str, Any]:
    """SGD steps over 48 rows in global batches of ``batch`` of a linear model and an I-MLE layer with an
    adaptive target; the target's state after every step and the final weights.

    Every process's loss is ``W/B ×`` the sum over its share (B the global batch, W the processes), so
    that DDP's average of the processes' gradients is the mean over the global batch whatever the shares'
    sizes, as a hand-written loop does it; the layer then sees ``W·∇zL`` of one process, which the
    targets' positive homogeneity absorbs (W = 2: exactly).
    """
    from torch.nn.parallel import DistributedDataParallel

    from imle_solvers import IMLE, AdaptiveTarget, RowAdaptiveTarget, SumOfGamma, TopK
    from imle_solvers.training.distributed import Shard, shard_noise

    data = torch.Generator().manual_seed(1)
    x = torch.randn(48, 6, generator=data, dtype=torch.float64).to(dtype)
    c = torch.randn(48, 10, generator=data, dtype=torch.float64).to(dtype)
    torch.manual_seed(0)
    target: Any = (
        RowAdaptiveTarget(nonzero_target=0.3, step=0.1)
        if variant == "row"
        else AdaptiveTarget(nonzero_target=2.5, step=0.05, momentum=0.5, sync=variant != "unsynced")
    )
    linear = torch.nn.Linear(6, 10).to(dtype)
    layer = IMLE(TopK(3, 10), SumOfGamma(), target, samples=3)
    net: torch.nn.Module = torch.nn.Sequential(linear, layer) if variant == "inside" else linear
    world = 1 if distributed is None else distributed.world_size
    rows = Shard(0, batch, batch)
    if distributed is not None:
        net = DistributedDataParallel(net)  # broadcast_buffers: rank 0's buffers at every forward
        shard_noise([layer], rows)  # the noise of the global batch, as one process draws it
    opt = torch.optim.SGD(linear.parameters(), lr=0.1)
    states = []
    for begin in range(0, 48, batch):
        total = min(batch, 48 - begin)  # the last batch may be smaller
        rows.start, rows.stop = (0, total) if distributed is None else distributed.share(total)
        rows.total = total
        part = slice(begin + rows.start, begin + rows.stop)  # this process's share
        z = net(x[part]) if variant == "inside" else layer(net(x[part]))  # MAP(θ + ε)   [b, 3, 10]
        loss = (c[part].unsqueeze(1) * z).sum() * (world / total)  # DDP's average: the global mean
        opt.zero_grad()
        loss.backward()
        opt.step()
        if variant == "row":
            states.append([target.alpha])
        else:
            states.append([float(target.beta), float(target.nonzeros), float(target.last_update)])
    return {"states": states, "weight": linear.weight.detach().double().flatten().tolist()}


def adaptive_cases() -> list[tuple[str, int, torch.dtype]]:
    """Every (variant, global batch, dtype) of check 3: both batches in float64, the odd one in float32."""
    cases = [(v, b, torch.float64) for v in ADAPTIVE_VARIANTS for b in ADAPTIVE_BATCHES]
    return cases + [(v, 9, torch.float32) for v in ADAPTIVE_VARIANTS if v != "unsynced"]


def case_key(variant: str, batch: int, dtype: torch.dtype) -> str:
    return f"{variant}-{batch}-{str(dtype).removeprefix('torch.')}"


def main(out: Path) -> int:
    from imle_solvers import cli
    from imle_solvers.training.distributed import process_group

    rank = int(os.environ["RANK"])
    status = cli.main(["train", *TINY, "--quiet", "--out", str(out / "cli")])
    if status != 0:
        return status
    group = process_group("cpu", 60.0)  # the group the command initialised
    assert group is not None and group.world_size == 2 and group.rank == rank
    (out / f"checks-rank{rank}.json").write_text(json.dumps(checks(group)))
    result = train_float64(group)
    (out / f"float64-rank{rank}.json").write_text(json.dumps(result))
    states = {case_key(*case): adaptive_states(group, *case) for case in adaptive_cases()}
    (out / f"adaptive-rank{rank}.json").write_text(json.dumps(states))
    return 0


def hang(seconds: float) -> int:
    """Rank 1 stops answering; rank 0's next collective must fail after the group's timeout."""
    import time

    from imle_solvers.training.distributed import process_group

    group = process_group("cpu", seconds)
    assert group is not None
    if group.rank == 1:
        time.sleep(600)  # killed by torchrun once rank 0 fails
    group.all_reduce(torch.ones(1))
    return 0  # pragma: no cover - the all-reduce times out


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "hang":
        sys.exit(hang(float(sys.argv[2])))
    sys.exit(main(Path(sys.argv[1])))
