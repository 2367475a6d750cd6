"""Where a terrain training step spends its time on a GPU, and the CPU SoG sampler on many threads."""

import time

import torch
from torch.profiler import ProfilerActivity, profile

from imle_solvers import Gumbel, SumOfGamma
from imle_solvers.training.command import main

# 1. SoG on the CPU with the default (all-core) thread pool: per-op times at a small shape
shape, g = (32, 10, 40), torch.Generator().manual_seed(0)
sog = SumOfGamma(k=5)
sog.sample(shape)
u = torch.rand(shape)
pos = torch.logit(u).add_(90.0).mul_(91.0).clamp_(0.0, 16383.5)
idx = pos.to(torch.int32).view(-1)
table = torch.randn(16385)
ops = {
    "Gumbel.sample": lambda: Gumbel().sample(shape, generator=g),
    "SoG.sample": lambda: sog.sample(shape, generator=g),
    "rand": lambda: torch.rand(shape, generator=g),
    "logit": lambda: torch.logit(u),
    "to int32": lambda: pos.to(torch.int32),
    "index_select int32": lambda: table.index_select(0, idx),
    "index_select int64": lambda: table.index_select(0, idx.long()),
    "frac": lambda: torch.frac(pos),
}
print("threads", torch.get_num_threads())
for name, fn in ops.items():
    fn()
    t = time.perf_counter()
    for _ in range(50):
        fn()
    print(f"{name:22s} {(time.perf_counter() - t) / 50 * 1e3:.4f} ms")

# 2. a profiled terrain epoch, 30×30, resnet stem, on CUDA (data cached by a first run)
args = [
    "--problem",
    "terrain",
    "--size",
    "30",
    "--model",
    "resnet-stem",
    "--method",
    "imle-mumu",
    "--n-train",
    "700",
    "--n-test",
    "70",
    "--epochs",
    "1",
    "--device",
    "cuda",
    "--quiet",
    "--threads",
    "8",
    "--out",
]
main([*args, "/tmp/prof-warm"])  # generates and caches the maps

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    main([*args, "/tmp/prof-run"])
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
