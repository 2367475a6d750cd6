"""SolutionCache: cached answers are cached feasible states and the best of the cache; p=0 / p=1 extremes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import IMLE, ImleSolversError, InfeasibleError, InvalidWeightsError
from imle_solvers.errors import InvalidSolutionError
from imle_solvers.pool import SolutionCache, SolverPool
from tests.support.oracles import Enum, k_subsets
from tests.support.pool_oracles import FLAG, Failing

pytestmark = pytest.mark.timeout(10)

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


def slots(cache: SolutionCache) -> list[int]:
    """Which of STATES sits in each slot of the cache."""
    return [int(np.flatnonzero((STATES == z).all(1))[0]) for z in cache.states]


def test_eviction_is_first_in_first_out_slot_by_slot() -> None:
    cache = SolutionCache(Enum(STATES), p=0.0, max_size=3)
    cache.add(STATES[[0, 1, 2]])
    assert slots(cache) == [0, 1, 2]
    cache.add(STATES[[3]])  # full: the oldest (0) makes room
    assert slots(cache) == [3, 1, 2]
    cache.add(STATES[[1]])  # found again: not refreshed (first in, first out, not least recently used)
    cache.add(STATES[[4]])
    assert slots(cache) == [3, 4, 2]
    cache.add(STATES[[5, 6]])  # then 2, then 3: the replacement pointer wraps around
    assert slots(cache) == [6, 4, 5]
    cache.add(STATES[[0]])
    assert slots(cache) == [6, 0, 5]
    cache.clear()
    cache.add(STATES[[7, 8, 9, 10]])  # a cleared cache starts again at slot 0
    assert slots(cache) == [10, 8, 9]


def test_an_evicted_state_is_no_longer_served() -> None:
    cache = SolutionCache(Enum(STATES), p=1.0, max_size=2)
    cache.add(STATES[[0, 1]])
    w = STATES[0] - 0.5  # STATES[0] is the best state for these weights
    np.testing.assert_array_equal(cache.lookup(w[None])[0], STATES[0])
    cache.add(STATES[[2]])  # evicts STATES[0]
    served = cache.solve_batch(w[None])[0]  # p=1: answered from the cache, which lost STATES[0]
    assert cache.hits == 1 and cache.misses == 0 and not np.array_equal(served, STATES[0])
    assert any(np.array_equal(served, STATES[i]) for i in (1, 2))


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


def test_a_cache_with_a_pool_sends_only_the_rows_it_does_not_answer() -> None:
    inner = Enum(STATES)
    with SolverPool(2, "thread", fallback=False) as pool:
        cache = SolutionCache(inner, p=0.5, seed=3, pool=pool)
        cache.solve_batch(weights(20, 0))
        assert pool.stats["rows"] == 20  # empty cache: all rows solved through the pool
        cache.solve_batch(weights(40, 1))
        assert 20 < pool.stats["rows"] < 60 and cache.hits == 60 - pool.stats["rows"]
        assert cache.misses == pool.stats["rows"]
        layer = IMLE(cache, samples=2)  # the cache is the layer's oracle; the pool is the cache's
        w = torch.randn(4, STATES.shape[1], requires_grad=True)
        layer(w).sum().backward()
        # forward B·S = 8 rows, backward 2·B·S = 16 (the default target is two-sided)
        assert w.grad is not None and cache.hits + cache.misses == 60 + 8 + 16


def test_a_pool_solves_a_cache_like_any_oracle() -> None:
    """No special case: on threads the cache is shared (and thread-safe); its rows are the pool's rows."""
    inner = Enum(STATES)
    cache = SolutionCache(inner, p=0.5, seed=1)
    with SolverPool(2, "thread", fallback=False, chunksize=3) as pool:
        for seed in range(4):
            w = weights(30, seed)
            out = pool.solve_batch(cache, w)
            assert (out[:, None, :] == STATES[None]).all(-1).any(-1).all()  # feasible states
        assert pool.stats["rows"] == 120 and cache.hits + cache.misses == 120
        assert cache.hits > 0 and inner.solve_calls == cache.misses


def test_a_cache_with_a_pool_refuses_to_be_shipped_with_advice() -> None:
    with SolverPool(2, "thread") as pool:
        cache = SolutionCache(Enum(STATES), pool=pool)
        with pytest.raises(TypeError, match="stays in the caller"):
            pickle.dumps(cache)
        with SolverPool(1, "process", fallback=False) as processes:
            with pytest.raises(TypeError, match="stays in the caller"):
                processes.solve_batch(cache, weights(2))
            assert processes.worker_pids() == []  # refused before any worker started
    alone = pickle.loads(pickle.dumps(SolutionCache(Enum(STATES), p=1.0, seed=0)))
    alone.solve_batch(weights(3))
    assert alone.size > 0 and alone.misses == 3  # the copy works (its lock was rebuilt)


# --------------------------------------------------------------------------- never a NaN/inf state
class NaNOracle(Enum):
    """Returns a NaN state on rows whose first weight is > 1 (a broken solver)."""

    def solve(self, weights: np.ndarray) -> np.ndarray:
        z = super().solve(weights)
        return np.full_like(z, np.nan) if weights[0] > 1 else z


def test_a_non_finite_solver_state_is_an_error_and_never_cached() -> None:
    cache = SolutionCache(NaNOracle(STATES), p=0.0, seed=0)
    w = weights(6, 2)
    w[:, 0] = 0.0
    w[4, 0] = 2.0
    with pytest.raises(InvalidSolutionError, match="NaNOracle returned a state with NaN or inf") as info:
        cache.solve_batch(w)
    assert info.value.rows == (4,) and cache.size == 0  # nothing of that batch was kept
    w[4, 0] = 0.0
    cache.solve_batch(w)
    assert cache.size > 0 and np.isfinite(cache.states).all()


def test_a_non_finite_solver_state_names_the_row_of_the_whole_batch() -> None:
    cache = SolutionCache(NaNOracle(STATES), p=0.5, seed=0)
    cache.add(STATES[:3])
    w = weights(10, 4)
    w[:, 0] = 0.0
    w[8, 0] = 2.0
    for _ in range(30):  # until row 8 is drawn for the solver, behind rows answered from the cache
        before = cache.size  # earlier calls may have cached the states of other rows
        try:
            cache.solve_batch(w)
        except InvalidSolutionError as err:
            assert err.rows == (8,) and "returned a state" in str(err)
            break
    else:
        pytest.fail("row 8 never reached the solver")
    assert cache.size == before and np.isfinite(cache.states).all()  # nothing of the failed batch is kept


def test_add_refuses_non_finite_states_and_wrong_shapes() -> None:
    cache = SolutionCache(Enum(STATES))
    bad = STATES[:3].copy()
    bad[1, 2] = np.inf
    with pytest.raises(InvalidSolutionError, match="NaN or inf") as info:
        cache.add(bad)
    assert info.value.rows == (1,) and cache.size == 0
    with pytest.raises(InvalidSolutionError, match="n_vars=6"):
        cache.add(np.zeros((2, 5)))


def test_non_finite_weights_are_refused_before_the_cache_is_touched() -> None:
    cache = SolutionCache(Enum(STATES), p=1.0, seed=0)
    cache.add(STATES[:4])
    w = weights(3)
    w[2, 1] = np.nan
    for call in (cache.solve_batch, cache.lookup):
        with pytest.raises(InvalidWeightsError) as info:
            call(w)
        assert info.value.rows == (2,)
    assert cache.hits == 0 and cache.misses == 0 and cache.size == 4


def test_rows_whose_cached_scores_overflow_go_to_the_solver() -> None:
    inner = Enum(STATES)
    cache = SolutionCache(inner, p=1.0, seed=0)
    cache.add(STATES)  # every state: a cached answer would be exact
    w = weights(4, 5)
    w[1] = [1.7e308, 1.7e308, -1.7e308, 1.0, 0.0, 0.0]  # ⟨w, z⟩ overflows to inf, or inf − inf = NaN
    with np.errstate(over="ignore", invalid="ignore"):  # the inner oracle's own products overflow
        out = cache.solve_batch(w)
        expected = inner.solve_batch(w)
    np.testing.assert_array_equal(out, expected)
    assert cache.misses == 1 and cache.hits == 3 and inner.solve_calls == 1 + 4  # 1 here, 4 for the check
    with pytest.raises(ImleSolversError, match="overflow") as info:
        cache.lookup(w)
    assert info.value.rows == (1,)


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
