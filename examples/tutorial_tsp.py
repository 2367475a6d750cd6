# %% [markdown]
# # Tutorial 4 — the travelling salesperson, trained on a pool and on a Dask cluster
#
# A model predicts the edge costs of a travelling-salesperson problem from features (PyEPO's TSP data) and
# is trained on the length of the tours it leads to. Unlike a shortest path, every solve costs
# milliseconds (an exact tour from CP-SAT), so where the solves run decides the epoch time. First a TSP
# layer in 15 lines, then the same epoch with a process pool and with a Dask cluster, and what each
# costs. Open it as a notebook (about two minutes on 2 cores; `IMLE_SOLVERS_TUTORIAL_QUICK=1`: seconds).
# As a plain script, Python's process workers would re-read it (the reason scripts with process pools
# need a `__name__` guard, which notebook cells do not have): the library's pool starts its workers
# without re-running a script that has no guard, so `python examples/tutorial_tsp.py` works too.
#
# One run on a 2-core machine shared with other jobs (12 nodes, 128 instances, S = 10, batch 32): 29.7 s
# per epoch in the training process, 16.2 s on 2 worker processes (1.84×), 19.3 s on a 2-worker Dask
# cluster (1.54×).

# %%
import os
import time

import torch
from torch.utils.data import DataLoader

from imle_solvers import IMLE, SolverPool, TravellingSalesperson, regret
from imle_solvers.data import tsp

QUICK = os.environ.get("IMLE_SOLVERS_TUTORIAL_QUICK") == "1"
NODES, N_TRAIN, N_TEST, SAMPLES = (6, 16, 16, 2) if QUICK else (12, 128, 64, 10)

# %% [markdown]
# ## A TSP layer in 15 lines
#
# `tsp(...)` generates PyEPO's data (Euclidean distances of fixed nodes plus a degree-4 polynomial of the
# features) and solves the optimal tours. Its oracle, `TravellingSalesperson`, takes one cost per
# undirected edge `(i, j)`, `i < j`, in PyEPO's order, and returns the 0/1 edges of a shortest tour. The
# I-MLE layer perturbs the predicted costs, solves `S` tours per instance, and the loss is their true length.

# %%
train, test = tsp(N_TRAIN + N_TEST, num_nodes=NODES, deg=4, noise_width=0.5, seed=0).split(N_TRAIN)
oracle = train.oracle  # TravellingSalesperson(NODES): CP-SAT's circuit constraint
layer = IMLE(oracle, samples=SAMPLES)  # SumOfGamma noise with κ = NODES edges per tour


def epoch(layer: IMLE) -> tuple[float, torch.nn.Module]:
    """One pass over the training set from the same initial model → (seconds, trained model)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, oracle.n_vars)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = time.perf_counter()
    for x, c, _z, _f in DataLoader(train, batch_size=32, shuffle=True):
        tours = layer(model(x))  # S tours per instance   [B, S, m]
        loss = (tours * c[:, None]).sum(-1).mean()  # their true length
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start, model


def test_regret(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return float(regret(oracle, model(test.features), test.costs, optimal=test.solutions))


seconds, model = {}, None
seconds["in this process"], model = epoch(layer)
print(f"{oracle} | edges: {oracle.n_vars}")
print(f"one epoch in this process: {seconds['in this process']:.2f} s, test regret {test_regret(model):.3f}")
print("a predicted tour:", oracle.tour(layer.eval()(model(test.features[:1]))[0, 0]))  # noise-free in eval()
layer.train()

# %% [markdown]
# ## The same epoch on a process pool
#
# A `SolverPool` keeps worker processes alive across calls; each receives the oracle once and builds its
# CP-SAT model once, then every batch of `B · S` solves is split between the workers. The layer is the
# same; only `pool=` changes. On the command line:
# `imle-solvers train --problem tsp --workers 2`.

# %%
with SolverPool(2, backend="process") as pool:
    pool.solve_batch(oracle, train.costs[:4].double().numpy())  # start the workers, ship the oracle
    seconds["process pool, 2 workers"], _ = epoch(IMLE(oracle, samples=SAMPLES, pool=pool))
print(f"one epoch on 2 worker processes: {seconds['process pool, 2 workers']:.2f} s")

# %% [markdown]
# ## The same epoch on a Dask cluster
#
# A Dask cluster spreads the same batches over its workers, on this machine or on many. Without an
# address, `SolverPool(backend="dask")` starts a local cluster of `workers` processes, standing in for a
# real one (`dask scheduler` and `dask worker` programs: pass the scheduler's address as `dask_address=`,
# as `imle-solvers train --problem tsp --dask-address tcp://host:8786` does).

# %%
with SolverPool(2, backend="dask") as pool:
    pool.solve_batch(oracle, train.costs[:4].double().numpy())  # the oracle reaches the workers
    seconds["Dask, 2 workers"], _ = epoch(IMLE(oracle, samples=SAMPLES, pool=pool))
print(f"one epoch on a 2-worker Dask cluster: {seconds['Dask, 2 workers']:.2f} s")

# %% [markdown]
# ## What each costs
#
# In this process the epoch is the solves, one after the other. A pool divides them between its
# workers and adds a copy of each batch to and from the workers (milliseconds, against seconds of
# solves); a Dask cluster adds its scheduler's round trip per batch and pays off when its workers are
# many, or on other machines. On 2 cores shared with other work, expect less than the 2× of 2 idle cores.
# `SolutionCache(oracle, p=0.5, pool=pool)` answers half of the rows from the tours already found instead
# (`--solve-ratio 0.5` on the command line; PyEPO's `solve_ratio`), trading exactness for time.

# %%
for where, s in seconds.items():
    print(f"{where:<24} {s:6.2f} s/epoch   ×{seconds['in this process'] / s:.2f}")
assert isinstance(oracle, TravellingSalesperson)
