"""Data-parallel training under ``torchrun``: your own DDP loop around an I-MLE layer, or the command's.

Launch N processes on one machine (``gloo`` on the CPU, ``nccl`` with one GPU per process):

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py            # your own loop
    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --command  # run(TrainConfig(...))
    python examples/ddp_train.py                                               # one process

**Your own loop** is the DDP loop you know: a `DistributedSampler` deals the instances out, the model is
wrapped in `DistributedDataParallel`, and the I-MLE layer sits after it (it has no parameters). Two points
are particular to perturb-and-MAP layers:

* each process draws its own noise (``generator`` seeded with the rank): with one seed everywhere, the
  processes would perturb their instances with the same numbers;
* an ``AdaptiveTarget`` adds its statistics over the processes in every
  backward pass (one small all-reduce), so every process holds the same β: that of one process on the
  global batch. Every process must therefore run the layer's backward equally often.

**The command's loop** (``--command``): ``imle_solvers.training.run`` under torchrun trains as
``torchrun --nproc-per-node N -m imle_solvers train ...`` does, with the result of one process.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from imle_solvers import IMLE, AdaptiveTarget, SumOfGamma
from imle_solvers.data import shortest_path
from imle_solvers.losses import regret


def own_loop(
    epochs: int = 5, batch_size: int = 32, seed: int = 0, n_train: int = 1000
) -> tuple[float, float, float]:
    """Train a linear model on the SPO shortest-path data with AI-MLE.

    Returns ``(test regret, β, n̄)`` (n̄: AI-MLE's moving average of nonzero gradient entries per
    sample), the same on every process.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))  # nccl on GPUs
    rank = dist.get_rank() if world > 1 else 0

    data = shortest_path(n_train + 200, num_features=5, grid=(5, 5), deg=4, noise_width=0.5, seed=seed)
    train, test = data.split(n_train)  # every process builds the same data from the seed
    torch.manual_seed(seed)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model: nn.Module = nn.Linear(5, data.oracle.n_vars)
    if world > 1:
        model = DistributedDataParallel(model)
    target = AdaptiveTarget(nonzero_target=4.0)
    noise = torch.Generator().manual_seed(seed * 1000 + rank)  # this process's own noise
    layer = IMLE(data.oracle, SumOfGamma(), target, samples=4, generator=noise)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    instances = TensorDataset(train.features, train.costs)
    sampler = DistributedSampler(instances, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(instances, batch_size=batch_size // world, sampler=sampler)  # global batch 32
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new order every epoch, the same on every process
        for x, c in loader:
            z = layer(model(x))  # sampled paths z = MAP(θ + ε)   [b, S, m]
            loss = (c.unsqueeze(1) * z).sum(-1).mean()  # ⟨c, z⟩, the cost of the decisions
            opt.zero_grad()
            loss.backward()  # DDP averages the model's gradients; AdaptiveTarget adds its counts
            opt.step()
    with torch.no_grad():
        net = model.module if isinstance(model, DistributedDataParallel) else model
        score = regret(data.oracle, net(test.features), test.costs, optimal=test.solutions).item()
    return score, float(target.beta), float(target.nonzeros)


def command_loop() -> None:
    """The command's loop from Python: what ``torchrun ... -m imle_solvers train ...`` does."""
    from imle_solvers.training import TrainConfig, run

    config = TrainConfig(problem="shortest-path", methods=("imle-mumu", "aimle"), deg=4, epochs=3)
    for result in run(config):  # every process returns the runs; rank 0 printed the progress
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{result.method:>10}: normalised test regret {result.regret:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--command", action="store_true", help="run(TrainConfig(...)) instead")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--n-train", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command:
        command_loop()
        return
    score, beta, nonzeros = own_loop(args.epochs, n_train=args.n_train)
    rank = int(os.environ.get("RANK", "0"))
    line = f"rank {rank}: normalised test regret {score:.4f}, AI-MLE β {beta:.6f}, n̄ {nonzeros:.6f}\n"
    sys.stdout.write(line)  # one write: the processes' lines do not interleave
    sys.stdout.flush()


if __name__ == "__main__":
    main()
