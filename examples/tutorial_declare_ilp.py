# %% [markdown]
# # Tutorial 1 — declare an ILP and train through it
#
# A 0/1 knapsack declared with `ILP` becomes a differentiable layer with `IMLE`. A linear model learns
# item values from features so that the knapsack it fills is the best one for the *true* values.
# Open this file as a notebook (Jupytext, VS Code, PyCharm read the `# %%` cells) or run it as a script:
# `python examples/tutorial_declare_ilp.py` (a few seconds on a laptop core).

# %%
import numpy as np
import torch

from imle_solvers import ILP, IMLE, SumOfGamma, regret

torch.manual_seed(0)
rng = np.random.default_rng(0)

# %% [markdown]
# ## The problem
#
# Ten items with fixed integer weights and a capacity: maximise the total value of the chosen items.
# `sense="max"` says that the weights handed to the oracle are values to maximise.

# %%
n_items = 10
item_weights = rng.integers(1, 8, size=n_items)
capacity = int(item_weights.sum() // 3)
knapsack = ILP(n_items, A_ub=item_weights[None], b_ub=[capacity], sense="max", backend="cpsat")
print(knapsack, "capacity", capacity)
print("best choice for values 1..10:", knapsack.solve(np.arange(1.0, n_items + 1)))

# %% [markdown]
# ## Data: values depend on features
#
# Each instance has 10 items with 4 features each; the true value of an item is a noisy linear function
# of its features. The model only sees the features.

# %%
n_train, n_test, p = 96, 48, 4
w_true = rng.normal(size=p)
x = torch.tensor(rng.normal(size=(n_train + n_test, n_items, p)), dtype=torch.float32)  # [N, n, p]
values = (x @ torch.tensor(w_true, dtype=torch.float32)).clamp(min=-2.0) + 3.0  # v = g(x) > 0   [N, n]
x_train, v_train, x_test, v_test = x[:n_train], values[:n_train], x[n_train:], values[n_train:]

# %% [markdown]
# ## The layer and the loss
#
# `IMLE` samples `z = MAP(v̂ + ε)` in the forward pass and, in the backward pass, solves once more at a
# target `v̂ − λ∇zL` with the same noise (Algorithm 1 of the paper). The default target chooses λ relative
# to `v̂ + ε`, so the loss below can be averaged (`.mean()`) without shrinking the target step to nothing.
# `⟨z, 1⟩` is not fixed by a `≤` constraint, so `SumOfGamma` gets its `k` explicitly. The loss is the
# negated true value of the chosen items: the model is trained on the quality of its decisions, not on
# predicting the values.

# %%
layer = IMLE(knapsack, noise=SumOfGamma(k=3), samples=2)
model = torch.nn.Linear(p, 1)
opt = torch.optim.Adam(model.parameters(), lr=0.05)


def test_regret() -> float:
    with torch.no_grad():
        return float(regret(knapsack, model(x_test).squeeze(-1), v_test))


print(f"test regret before training: {test_regret():.3f}")
for epoch in range(3):
    for i in range(0, n_train, 16):
        v_hat = model(x_train[i : i + 16]).squeeze(-1)  # predicted values   [B, n]
        z = layer(v_hat)  # z = MAP(v̂ + ε)   [B, S, n]
        loss = -(z * v_train[i : i + 16, None]).sum(-1).mean()  # − true value of the choice
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch + 1}: test regret {test_regret():.3f}")

# %% [markdown]
# The regret (the share of the best total value lost by deciding with predicted values) falls as the
# model learns. Swap `backend="cpsat"` for `"highs"` or `"cbc"` to use another solver; see
# [Performance](../docs/performance.md) for which is fastest on which problem shape.
