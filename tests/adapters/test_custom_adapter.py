"""The custom adapter printed in docs/custom-adapter.md: run as printed, checked, trained with I-MLE."""

from __future__ import annotations

import itertools
import pickle
import re
from typing import Any

import numpy as np
import pytest
import torch

from imle_solvers import IMLE, MapOracle, NoNoise, RelativeTarget, hamming_loss
from imle_solvers.errors import InvalidWeightsError
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "custom-adapter.md"
MARKER = "<!-- the block below is executed by tests/adapters/test_custom_adapter.py -->"


def _adapter_source() -> str:
    text = PAGE.read_text()
    assert MARKER in text, "the marked code block is missing from docs/custom-adapter.md"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], flags=re.S)
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def Assignment() -> Any:
    namespace: dict[str, Any] = {"__name__": "custom_adapter_doc"}
    exec(compile(_adapter_source(), str(PAGE), "exec"), namespace)
    cls = namespace["Assignment"]
    globals()["Assignment_"] = cls  # picklable by reference from this module
    cls.__module__, cls.__qualname__ = __name__, "Assignment_"
    return cls


def test_the_block_is_at_most_20_lines() -> None:
    assert len(_adapter_source().rstrip("\n").splitlines()) <= 20


def test_matches_brute_force_and_contract(Assignment: Any) -> None:
    oracle = Assignment(3)
    assert isinstance(oracle, MapOracle)
    assert oracle.sense == "min" and oracle.n_vars == 9 and oracle.expected_nonzeros == 3.0
    perms = [np.eye(3)[list(p)].ravel() for p in itertools.permutations(range(3))]
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = rng.normal(size=9) * rng.choice([0.1, 1.0, 10.0])  # negative costs included
        z = oracle.solve(w)
        assert any((z == p).all() for p in perms)
        assert z @ w == pytest.approx(min(p @ w for p in perms))
    with pytest.raises(InvalidWeightsError) as err:
        oracle.solve_batch(np.array([np.zeros(9), np.full(9, np.nan)]))
    assert err.value.rows == (1,)
    copy = pickle.loads(pickle.dumps(oracle))
    w = rng.normal(size=9)
    np.testing.assert_array_equal(copy.solve(w), oracle.solve(w))


def test_imle_trains_it(Assignment: Any) -> None:
    """A few SGD steps through I-MLE move MAP(costs) onto a target permutation."""
    torch.manual_seed(0)
    oracle = Assignment(4)
    target = torch.eye(4)[[1, 0, 3, 2]].flatten()
    costs = torch.zeros(2, 16)
    costs[:, torch.eye(4).flatten().bool()] = -0.1  # the identity is optimal at the start
    costs.requires_grad_(True)
    # no noise: the blackbox regime, which needs the large step (a local step flips no assignment here)
    layer = IMLE(oracle, noise=NoNoise(), target=RelativeTarget.large_step())
    optim = torch.optim.SGD([costs], lr=10.0)
    start = float(hamming_loss(layer.eval()(costs.detach()), target.expand(2, 16)))
    layer.train()
    for _ in range(5):
        optim.zero_grad()
        hamming_loss(layer(costs), target.expand(2, 16)).backward()
        optim.step()
    end = float(hamming_loss(layer.eval()(costs.detach()), target.expand(2, 16)))
    assert start == 0.5 and end == 0.0
    # the default noise (SumOfGamma with k from expected_nonzeros) runs forward and backward too
    sampled = IMLE(oracle, samples=3)(costs.detach().requires_grad_(True))
    assert sampled.shape == (2, 3, 16) and torch.all(sampled.sum(-1) == 4)


def test_the_adapter_keeps_the_contract(Assignment: Any) -> None:
    from imle_solvers.testing import assert_oracle_contract

    perms = [np.eye(3)[list(p)].ravel() for p in itertools.permutations(range(3))]
    assert_oracle_contract(Assignment(3), states=perms)


def test_the_page_code_blocks_after_the_adapter_run(Assignment: Any) -> None:
    text = PAGE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text[text.index("## Test it against") :], flags=re.S)
    namespace: dict[str, Any] = {"Assignment": Assignment, "np": np}
    for block in blocks[:2]:  # the contract check and the from_function example
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert namespace["z"].shape == (32, 10)
