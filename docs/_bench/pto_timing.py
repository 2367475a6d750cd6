"""Seconds per training epoch on the PyEPO shortest-path protocol (1,000 instances, batch 32), issue 5.

All configurations run interleaved in one process (3 rounds, 2 epochs each) so that they see the same
machine load; the I-MLE epoch is also timed with the host oracle ``graphs.ShortestPath`` instead of the
torch-native ``DAGShortestPath``. Run: ``python docs/_bench/pto_timing.py``.
"""

import collections
import os

import networkx as nx
import numpy as np
import torch

from imle_solvers import Gumbel, MapOracle
from imle_solvers.adapters.graphs import ShortestPath
from imle_solvers.data import shortest_path
from imle_solvers.training import train_model
from imle_solvers.training.models import linear_model

torch.set_num_threads(1)


class Reordered(MapOracle):
    """graphs.ShortestPath with the arcs in DAGShortestPath.grid order."""

    sense = "min"

    def __init__(self, dag):
        self.inner = ShortestPath(nx.DiGraph(dag.edges), dag.source, dag.target)
        self.idx = np.array([self.inner.edges.index(e) for e in dag.edges])
        self.n_vars = dag.n_vars
        self.expected_nonzeros = dag.expected_nonzeros

    def solve(self, w):
        v = np.empty_like(w)
        v[self.idx] = w
        return self.inner.solve(v)[self.idx]

    def solve_batch(self, w):
        w = self.validate(w)
        v = np.empty_like(w)
        v[:, self.idx] = w
        return self.inner.solve_batch(v)[:, self.idx]


train, test = shortest_path(2000, deg=2, noise_width=0.5, seed=0).split(1000)
test = test.split(100)[0]
rows = []


def run(name, label, oracle=None, noise=None, epochs=3):
    torch.manual_seed(0)
    opts = {"samples": 10}
    if noise is not None:
        opts["noise"] = noise
    out = train_model(
        linear_model(5, 40),
        name,
        train,
        test,
        epochs=epochs,
        seed=0,
        train_oracle=oracle,
        method_options=opts,
        show_progress=False,
    )
    t = sorted(out["epoch_times"])[len(out["epoch_times"]) // 2]
    rows.append((label, t))
    print(f"{label:60s} {t:.3f} s/epoch", flush=True)


for _round in range(3):
    run("imle", "I-MLE PID, SoG, S=10, DAGShortestPath", epochs=2)
    run("imle-mumu", "I-MLE mu-mu, SoG, S=10, DAGShortestPath", epochs=2)
    run("imle", "I-MLE PID, Gumbel, S=10, DAGShortestPath", noise=Gumbel(), epochs=2)
    run(
        "imle",
        "I-MLE PID, SoG, S=10, graphs.ShortestPath (per-row host DP)",
        oracle=Reordered(train.oracle),
        epochs=2,
    )
    run("spo+", "SPO+", epochs=2)
    run("two-stage", "two-stage", epochs=2)
agg = collections.defaultdict(list)
for k, v in rows:
    agg[k].append(v)
print()
for k, v in agg.items():
    print(f"| {k} | {np.median(v):.3f} | {min(v):.3f} |")
print("loadavg", os.getloadavg())
