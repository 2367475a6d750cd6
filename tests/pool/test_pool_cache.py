"""SolutionCache: cached answers are cached feasible states and the best of the cache; p=0 / p=1 extremes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import IMLE, InfeasibleError
from imle_solvers.pool import SolutionCache, SolverPool
from tests.support.oracles import Enum, k_subsets
from tests.support.pool_oracles import FLAG, Failing

STATES = k_subsets(6, 3)


def weights(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, STATES.shape[1]))


@given(
    sense=st.sampled_from(["max", "min"]),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 10**6),
    n=st.integers(1, 30),
)
def test_every_answer_is_a_solver_state_or_the_best_cached_state(
    sense: str, p: float, seed: int, n: int
) -> None:
    inner = Enum(STATES, sense=sense)
    cache = SolutionCache(inner, p=p, seed=seed)
    cache.solve_batch(weights(8, seed))  # warm up (cache empty: every row solved)
    before = cache.states
    w = weights(n, seed + 1)
    out = cache.solve_batch(w)
    exact = inner.solve_batch(w)
    scores = w @ before.T  # ⟨w, z⟩ for every state that was in the cache   [n, K]
    best = scores.max(1) if sense == "max" else scores.min(1)
    for i in range(n):
        in_cache = (before == out[i]).all(1).any()
        is_exact = np.array_equal(out[i], exact[i])
        assert is_exact or in_cache
        if in_cache and not is_exact:  # answered from the cache: the best state of the cache
            np.testing.assert_allclose(w[i] @ out[i], best[i])
    assert (out[:, None, :] == STATES[None]).all(-1).any(-1).all()  # every answer is feasible


def test_p0_always_calls_the_solver_and_p1_never_after_warm_up() -> None:
    inner = Enum(STATES)
    cache = SolutionCache(inner, p=0.0, seed=0)
    for seed in range(3):
        cache.solve_batch(weights(10, seed))
    assert inner.solve_calls == 30 and cache.hits == 0 and cache.misses == 30 and cache.size > 0

    inner = Enum(STATES)
    cache = SolutionCache(inner, p=1.0, seed=0)
    cache.solve_batch(weights(10, 0))  # empty cache: solved
    assert inner.solve_calls == 10
    out = cache.solve_batch(weights(50, 1))
    assert inner.solve_calls == 10 and cache.hits == 50
    np.testing.assert_array_equal(out, cache.lookup(weights(50, 1)))


def test_dedup_and_oldest_state_replaced_first() -> None:
    cache = SolutionCache(Enum(STATES), p=0.0, max_size=3)
    negative_zeros = np.where(STATES[1] == 0, -0.0, STATES[1])  # the same state as STATES[1]
    assert cache.add(np.vstack([STATES[[0, 0, 1]], negative_zeros])) == 2  # duplicates skipped
    assert cache.add(STATES[[2, 3]]) == 2
    kept = cache.states
    assert cache.size == 3 and not (kept == STATES[0]).all(1).any()  # the oldest went first
    assert all((kept == STATES[i]).all(1).any() for i in (1, 2, 3))


def test_solver_errors_name_rows_of_the_whole_batch() -> None:
    cache = SolutionCache(Failing(STATES, "library"), p=0.5, seed=0)
    cache.add(STATES[:2])  # warm: about half of the rows are answered from the cache
    w = weights(9)
    w[7, 0] = FLAG
    w[:, 1] = 5.0  # the cached answers are irrelevant here; only the solver's error matters
    for _ in range(20):  # until row 7 is drawn for the solver
        try:
            cache.solve_batch(w)
        except InfeasibleError as err:
            assert err.rows == (7,)
            break
    else:
        pytest.fail("row 7 never reached the solver")


def test_a_pool_routes_cached_rows_locally_and_the_rest_to_itself() -> None:
    inner = Enum(STATES)
    cache = SolutionCache(inner, p=0.5, seed=3)
    with SolverPool(2, "thread", fallback=False) as pool:
        pool.solve_batch(cache, weights(20, 0))
        assert pool.stats["rows"] == 20  # empty cache: all rows solved through the pool
        pool.solve_batch(cache, weights(40, 1))
        assert 20 < pool.stats["rows"] < 60 and cache.hits == 60 - pool.stats["rows"]
        layer = IMLE(cache, samples=2, pool=pool)  # as a layer's oracle
        w = torch.randn(4, STATES.shape[1], requires_grad=True)
        layer(w).sum().backward()
        assert w.grad is not None


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SolutionCache(Enum(STATES), p=1.5)
    with pytest.raises(ValueError):
        SolutionCache(Enum(STATES), max_size=0)
    with pytest.raises(TypeError):
        SolutionCache(object())  # type: ignore[arg-type]
    assert "SolutionCache(" in repr(SolutionCache(Enum(STATES)))
    single = SolutionCache(Enum(STATES), p=0.0)
    np.testing.assert_array_equal(single.solve(weights(1)[0]), Enum(STATES).solve(weights(1)[0]))
