# %% [markdown]
# # From PyEPO to imle_solvers
#
# A PyEPO training script (shortest path on a 5 × 5 grid, SPO+), then the same data and solver
# trained through imle_solvers: SPO+ on PyEPO's own `optModel`, and I-MLE. Every regret is PyEPO's
# `pyepo.metric.regret` on the same test set. Needs `pip install 'imle-solvers[pyepo]'`.
#
# Run as a script (`python examples/pyepo_migration.py --help`) or open it as a notebook (Jupytext or
# VS Code read the `# %%` cells).

# %%
from __future__ import annotations

import argparse
import statistics
import time

import pyepo
import torch
from pyepo.model.ort import shortestPathModel
from torch import nn
from torch.utils.data import DataLoader

from imle_solvers import IMLE, PerturbedTarget, SPOPlusLoss, SumOfGamma
from imle_solvers.adapters import DAGShortestPath
from imle_solvers.interop.pyepo import PyEPOOracle, from_pyepo


def pyepo_data(n_train: int, n_test: int, deg: int, seed: int = 135):  # type: ignore[no-untyped-def]
    """PyEPO's shortest-path data: 5 features, 40 arc costs, noise half-width 0.5."""
    optmodel = shortestPathModel(grid=(5, 5))
    x, c = pyepo.data.shortestpath.genData(n_train + n_test, 5, (5, 5), deg=deg, noise_width=0.5, seed=seed)
    train = pyepo.data.dataset.optDataset(optmodel, x[:n_train], c[:n_train])
    test = pyepo.data.dataset.optDataset(optmodel, x[n_train:], c[n_train:])
    return optmodel, train, test


# %% [markdown]
# ## The PyEPO script


# %%
def train_pyepo_spo(optmodel, train, epochs: int, seed: int = 0) -> nn.Module:  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    model = nn.Linear(5, 40)
    spop = pyepo.func.SPOPlus(optmodel, processes=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for x, c, w, z in DataLoader(train, batch_size=32, shuffle=True):
            loss = spop(model(x), c, w, z)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


# %% [markdown]
# PyEPO's I-MLE, for comparison (10 samples, λ = 10, its default Sum-of-Gamma noise, L1 loss to the
# optimal solution as its documentation suggests): every perturbed solve goes through the OR-Tools model.


# %%
def train_pyepo_imle(optmodel, train, epochs: int, seed: int = 0) -> nn.Module:  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    model = nn.Linear(5, 40)
    ptb = pyepo.func.implicitMLE(optmodel, n_samples=10, sigma=1.0, lambd=10, processes=1)
    l1 = nn.L1Loss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for x, _c, w, _z in DataLoader(train, batch_size=32, shuffle=True):
            loss = l1(ptb(model(x)), w)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


# %% [markdown]
# ## The same with imle_solvers
#
# Two lines change the data and the solver over: `from_pyepo(train)` keeps PyEPO's features, costs and
# optimal solutions, and `PyEPOOracle(optmodel)` solves with PyEPO's model. The loop is plain PyTorch.


# %%
def train_ours_spo(optmodel, train, epochs: int, seed: int = 0) -> nn.Module:  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    data = from_pyepo(train)  # PyEPO optDataset → PTODataset
    spop = SPOPlusLoss(PyEPOOracle(optmodel))  # PyEPO optModel → MapOracle
    model = nn.Linear(5, 40)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for x, c, z, _f in DataLoader(data, batch_size=32, shuffle=True):
            loss = spop(model(x), c, optimal=z)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


# %% [markdown]
# I-MLE with the PID target (paper, eq. 8, λ = 10) and the decision loss ⟨c, z⟩ of each sample.
# Here the solver is the torch-native `DAGShortestPath`, whose arc
# order is PyEPO's, so ten perturbed solves per instance cost microseconds; `PyEPOOracle(optmodel)`
# works the same, at PyEPO's solver speed.


# %%
def train_ours_imle(train, epochs: int, seed: int = 0, samples: int = 10) -> nn.Module:  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    data = from_pyepo(train, oracle=DAGShortestPath.grid(5, 5))
    layer = IMLE(data.oracle, noise=SumOfGamma(k=8), target=PerturbedTarget(lam=10.0), samples=samples)
    model = nn.Linear(5, 40)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for x, c, _z, _f in DataLoader(data, batch_size=32, shuffle=True):
            z = layer(model(x))  # z = MAP(ĉ + ε), paths   [B, S, 40]
            loss = (z * c[:, None, :]).sum()  # ⟨c, z⟩ summed: ∇z = c per instance
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


# %% [markdown]
# ## Regret on the same test set


# %%
def compare(
    n_train: int = 1000,
    n_test: int = 1000,
    epochs: int = 5,
    deg: int = 4,
    pyepo_imle: bool = True,
    repeats: int = 1,
) -> dict[str, dict[str, float]]:
    """Train every run ``repeats`` times (the same seed: the regrets repeat, the times vary), round-robin so
    that all runs see the same machine load; print each run's test regret and training time (median, and
    the range over repeats) and each of our runs' speed-up over PyEPO's run of the same method, computed
    repeat by repeat (both sides timed in the same round)."""
    optmodel, train, test = pyepo_data(n_train, n_test, deg)
    loader = DataLoader(test, batch_size=256)
    torch.manual_seed(0)
    untrained = float(pyepo.metric.regret(nn.Linear(5, 40), optmodel, loader))
    print(f"{'untrained':<38} test regret {untrained:.4f}")
    runs = {
        "PyEPO SPO+": lambda: train_pyepo_spo(optmodel, train, epochs),
        "PyEPO I-MLE": lambda: train_pyepo_imle(optmodel, train, epochs),
        "imle_solvers SPO+ (PyEPOOracle)": lambda: train_ours_spo(optmodel, train, epochs),
        "imle_solvers I-MLE (DAGShortestPath)": lambda: train_ours_imle(train, epochs),
    }
    if not pyepo_imle:
        del runs["PyEPO I-MLE"]
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    regrets: dict[str, float] = {}
    for _ in range(repeats):
        for name, fit in runs.items():
            start = time.perf_counter()
            model = fit()
            seconds[name].append(time.perf_counter() - start)
            regrets[name] = float(pyepo.metric.regret(model, optmodel, loader))
    results: dict[str, dict[str, float]] = {"untrained": {"regret": untrained}}
    for name in runs:
        times = seconds[name]
        results[name] = {"regret": regrets[name], "seconds": statistics.median(times)}
        spread = f" [{min(times):.1f}-{max(times):.1f}]" if repeats > 1 else ""
        print(
            f"{name:<38} test regret {regrets[name]:.4f}   {statistics.median(times):.1f} s training{spread}"
        )
    pairs = [
        ("imle_solvers SPO+ (PyEPOOracle)", "PyEPO SPO+"),
        ("imle_solvers I-MLE (DAGShortestPath)", "PyEPO I-MLE"),
    ]
    for ours, theirs in pairs:
        if theirs in seconds:
            ratios = [t / o for t, o in zip(seconds[theirs], seconds[ours])]  # repeat by repeat
            results[ours]["speed-up"] = statistics.median(ratios)
            spread = f" [{min(ratios):.1f}-{max(ratios):.1f}] over {repeats} repeats" if repeats > 1 else ""
            print(f"{ours} vs {theirs}: speed-up {statistics.median(ratios):.1f}×{spread}")
    return results


# %%
if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Regret of PyEPO and imle_solvers on the same data.")
    parser.add_argument("--n-train", type=int, default=1000, help="training instances")
    parser.add_argument("--n-test", type=int, default=1000, help="test instances")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs")
    parser.add_argument("--deg", type=int, default=4, help="polynomial degree of the cost model")
    parser.add_argument("--no-pyepo-imle", action="store_true", help="skip PyEPO's I-MLE (the slowest run)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="train every run this many times (timing spread)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    compare(
        args.n_train,
        args.n_test,
        args.epochs,
        args.deg,
        pyepo_imle=not args.no_pyepo_imle,
        repeats=args.repeats,
    )
