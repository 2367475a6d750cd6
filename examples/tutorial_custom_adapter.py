# %% [markdown]
# # Tutorial 2 — write your own adapter
#
# Any solver becomes a layer once it is wrapped as a `MapOracle`: set `sense`, `n_vars`,
# `expected_nonzeros` and write `solve`. Here: the assignment problem (match `n` workers to `n` jobs at
# minimum total cost) solved by SciPy's Hungarian algorithm. Open as a notebook or run as a script.

# %%
import itertools

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from imle_solvers import IMLE, MapOracle, hamming_loss
from imle_solvers.errors import InvalidWeightsError

torch.manual_seed(0)

# %% [markdown]
# ## The adapter
#
# Weights are the `n × n` cost matrix flattened row by row; a state is the flattened permutation matrix.
# `sense = "min"`: the weights are costs. `solve_batch`, input validation and row-numbered errors come
# from `MapOracle`.


# %%
class Assignment(MapOracle):
    """Min-cost perfect matching of an n×n cost matrix (weights and states flattened row by row)."""

    sense = "min"

    def __init__(self, n: int) -> None:
        self.n, self.n_vars = n, n * n
        self.expected_nonzeros = float(n)  # a permutation matrix has n ones

    def solve(self, weights: np.ndarray) -> np.ndarray:
        rows, cols = linear_sum_assignment(weights.reshape(self.n, self.n))
        z = np.zeros((self.n, self.n))
        z[rows, cols] = 1.0
        return z.ravel()


oracle = Assignment(3)

# %% [markdown]
# ## Check it against brute force
#
# Before training through an adapter, compare it with an enumeration on random (also negative) costs.


# %%
def brute_force(costs: np.ndarray, n: int) -> float:
    return min(sum(costs[i * n + j] for i, j in enumerate(perm)) for perm in itertools.permutations(range(n)))


rng = np.random.default_rng(0)
for _ in range(20):
    c = rng.normal(size=9)
    assert abs(float(c @ oracle.solve(c)) - brute_force(c, 3)) < 1e-9
print("adapter agrees with brute force on 20 random cost matrices")

# %% [markdown]
# Bad input is caught before any solve, naming the batch row:

# %%
bad = np.ones((4, 9))
bad[2, 0] = np.nan
try:
    oracle.solve_batch(bad)
except InvalidWeightsError as err:
    print("InvalidWeightsError:", err)

# %% [markdown]
# ## Train through it
#
# Learn a cost matrix whose optimal assignment is a given permutation: the Hamming loss to the target
# pulls the perturbed solutions towards it (I-MLE, Algorithm 1).

# %%
target = torch.tensor([[0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=torch.float32).flatten()
costs = torch.zeros(1, 9, requires_grad=True)
layer = IMLE(oracle, samples=4)  # SumOfGamma noise with k = expected_nonzeros = 3
opt = torch.optim.Adam([costs], lr=0.2)
for _ in range(30):
    z = layer(costs)  # (1, 4, 9) permutation matrices
    loss = hamming_loss(z, target.expand_as(z))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("learnt assignment:\n", oracle.solve(costs.detach().double().numpy()[0]).reshape(3, 3))
assert np.array_equal(oracle.solve(costs.detach().double().numpy()[0]), target.numpy())
