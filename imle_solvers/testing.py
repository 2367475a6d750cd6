"""Checks for adapter authors: does an oracle keep the [`MapOracle`][imle_solvers.MapOracle] contract?

```python
from imle_solvers.testing import assert_oracle_contract

assert_oracle_contract(MyOracle(...), states=all_feasible_states)   # in your test suite
```

The contract (paper, eq. 3 and Example 3): ``solve`` returns a best state of ``C`` for *any* finite
weights, negative ones included, in the oracle's ``sense``; ``solve_batch`` agrees with ``solve`` row by
row; ties are broken deterministically; the input is never modified; NaN/inf weights and a wrong
length raise [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] naming the row; a
[`TorchOracle`][imle_solvers.TorchOracle] gives the same states through ``solve_torch`` and keeps the
weights' dtype.

Without ``states`` or ``brute_force`` the sense is still checked: every returned state is feasible, so
the state returned for a row must score at least as well, under that row's weights, as the states
returned for every other row (and for the negated weights). An oracle that minimises while it declares
``"max"`` fails this at once.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .errors import ImleSolversError, InvalidWeightsError
from .oracle import MapOracle, TorchOracle

__all__ = ["assert_oracle_contract"]


_REPEATS = 3
"""How many more times each row is solved to check that the same weights give the same state."""


def _fail(oracle: MapOracle, what: str) -> AssertionError:
    return AssertionError(f"{oracle!r} breaks the MapOracle contract: {what}")


def _tied(weights: np.ndarray) -> np.ndarray:
    """Rows with ties, at the scale and sign pattern of ``weights``: ``(T, m)``.

    The first rows with every magnitude replaced by the row's mean magnitude (signs kept), and one
    constant row (every state of a fixed size ties on it).
    """
    head = weights[:8]
    magnitude = np.abs(head).mean(axis=1, keepdims=True)  # [T, 1]
    constant = np.full((1, weights.shape[1]), np.abs(weights).mean())  # [1, m]
    return np.concatenate([np.sign(head) * magnitude, constant])


def _has_ties(w: np.ndarray) -> bool:
    return len(np.unique(w)) < len(w)


def _check_sense(oracle: MapOracle, weights: np.ndarray, batch: np.ndarray, sign: float, atol: float) -> None:
    """Each returned state is feasible, so the state of row i must be best among all of them for w_i."""
    others = [batch]
    try:
        others.append(np.asarray(oracle.solve_batch(-weights)))  # the opposite extremes
    except ImleSolversError:
        pass  # an oracle may refuse negated weights (e.g. negative cycles) with a typed error
    candidates = np.concatenate(others)  # [K, m] feasible states
    scores = sign * (weights @ candidates.T)  # score of every candidate under every row   [B, K]
    own = sign * np.einsum("bm,bm->b", weights, batch)  # [B]
    tol = atol * np.maximum(1.0, np.abs(weights).sum(axis=1))  # [B]
    worse = np.flatnonzero(own < scores.max(axis=1) - tol)
    if worse.size:
        i = int(worse[0])
        j = int(scores[i].argmax())
        source = f"row {j}" if j < len(batch) else f"the negated row {j - len(batch)}"
        raise _fail(
            oracle,
            f"row {i}: the state returned for {source} scores {sign * scores[i, j]:.6g} under row {i}'s "
            f"weights, better in the declared sense {oracle.sense!r} than the state returned for row {i} "
            f"({sign * own[i]:.6g}); does the oracle optimise the other sense?",
        )


def assert_oracle_contract(
    oracle: MapOracle,
    *,
    states: Sequence[Sequence[float]] | np.ndarray | None = None,
    brute_force: Callable[[np.ndarray], float] | None = None,
    weights: np.ndarray | None = None,
    n_checks: int = 20,
    scales: Sequence[float] = (1e-3, 1.0, 1e3),
    picklable: bool = True,
    seed: int = 0,
    atol: float = 1e-6,
) -> None:
    """Raise ``AssertionError`` naming the first broken promise of the oracle contract.

    Parameters
    ----------
    oracle
        The oracle under test.
    states
        All feasible states (small instances): each returned state must be one of them and be optimal
        among them in the oracle's sense.
    brute_force
        Alternatively, ``weights -> optimal objective value`` (in the oracle's sense).
    weights
        ``(B, m)`` weights to check; default ``n_checks`` standard normal rows times each of ``scales``
        (negative weights included, as perturbations produce them). Rows with ties are added to them:
        the first rows with every magnitude replaced by the row's mean magnitude (signs kept) and a
        constant row; every row is solved several times.
    n_checks
        Random rows per scale when ``weights`` is not given.
    scales
        Magnitudes of the random weights.
    picklable
        Also check that a pickled copy gives the same states (needed by process pools).
    seed
        Seed of the random weights.
    atol
        Tolerance on objective values (relative to the weights' magnitude).

    Raises
    ------
    AssertionError
        Naming the first broken promise (and the row).
    ValueError
        For ``weights`` of the wrong shape.
    """
    if not isinstance(oracle, MapOracle):
        raise AssertionError(f"{oracle!r} is not a MapOracle")
    if oracle.sense not in ("max", "min"):
        raise _fail(oracle, f"sense must be 'max' or 'min', got {oracle.sense!r}")
    m = oracle.n_vars
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise _fail(oracle, f"n_vars must be a positive integer, got {m!r}")
    if weights is None:
        rng = np.random.default_rng(seed)
        weights = np.concatenate([scale * rng.standard_normal((n_checks, m)) for scale in scales])
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != m or weights.shape[0] == 0:
        raise ValueError(f"weights must have shape (B, {m}) with B >= 1, got {weights.shape}")
    weights = np.concatenate([weights, _tied(weights)])  # [B + ties, m]
    feasible = None if states is None else np.asarray(states, dtype=np.float64)

    original = weights.copy()
    batch = np.asarray(oracle.solve_batch(weights))
    if not np.array_equal(weights, original):
        raise _fail(oracle, "solve_batch modified its input")
    if batch.shape != weights.shape:
        raise _fail(oracle, f"solve_batch returned shape {batch.shape} for weights {weights.shape}")
    if not np.isfinite(batch).all():
        raise _fail(oracle, "solve_batch returned non-finite states")
    sign = 1.0 if oracle.sense == "max" else -1.0
    for i, w in enumerate(weights):
        row = w.copy()
        z = np.asarray(oracle.solve(row))
        if not np.array_equal(row, w):
            raise _fail(oracle, f"solve modified its input (row {i})")
        if z.shape != (m,):
            raise _fail(oracle, f"solve returned shape {z.shape}, expected ({m},)")
        for _ in range(_REPEATS):
            again = np.asarray(oracle.solve(w.copy()))
            if not np.array_equal(z, again):
                what = "ties are broken at random" if _has_ties(w) else "solve is not deterministic"
                raise _fail(oracle, f"{what} (row {i}: the same weights gave two states)")
        if not np.array_equal(z, batch[i]):
            raise _fail(oracle, f"solve_batch row {i} differs from solve")
        tol = atol * max(1.0, float(np.abs(w).sum()))
        if feasible is not None:
            if not (np.abs(feasible - z).max(axis=1) < 1e-9).any():
                raise _fail(oracle, f"row {i}: the returned state is not among the feasible states")
            best = float((sign * feasible @ w).max())
            if sign * float(z @ w) < best - tol:
                raise _fail(oracle, f"row {i}: objective {float(z @ w):.6g}, optimum {sign * best:.6g}")
        if brute_force is not None:
            optimum = float(brute_force(w.copy()))
            if abs(float(z @ w) - optimum) > tol:
                raise _fail(oracle, f"row {i}: objective {float(z @ w):.6g}, brute force {optimum:.6g}")

    _check_sense(oracle, weights, batch, sign, atol)
    if not np.array_equal(np.asarray(oracle.solve_batch(weights.copy())), batch):
        raise _fail(oracle, "solve_batch is not deterministic (the same batch gave other states)")

    bad = weights[:3].copy()
    bad[1, 0] = np.nan
    try:
        oracle.solve_batch(bad)
    except InvalidWeightsError as err:
        if 1 not in err.rows:
            raise _fail(oracle, f"a NaN in row 1 raised InvalidWeightsError naming rows {err.rows}") from None
    else:
        raise _fail(oracle, "a NaN weight did not raise InvalidWeightsError")
    try:
        oracle.solve_batch(np.zeros((2, m + 1)))
    except InvalidWeightsError:
        pass
    else:
        raise _fail(oracle, f"weights of length {m + 1} did not raise InvalidWeightsError")

    if isinstance(oracle, TorchOracle):
        for dtype in (torch.float32, torch.float64):
            tw = torch.as_tensor(weights, dtype=dtype)
            before = tw.clone()
            tz = oracle.solve_torch(tw)
            if not torch.equal(tw, before):
                raise _fail(oracle, "solve_torch modified its input")
            if tz.dtype != dtype or tz.shape != tw.shape:
                got, given = f"{tz.dtype} {tuple(tz.shape)}", f"{dtype} {tuple(tw.shape)}"
                raise _fail(oracle, f"solve_torch returned {got} for {given}")
        z64 = oracle.solve_torch(torch.as_tensor(weights)).numpy()
        if not np.array_equal(z64, batch):
            raise _fail(oracle, "solve_torch and solve_batch disagree")
    if picklable:
        try:
            copy = pickle.loads(pickle.dumps(oracle))
        except Exception as exc:  # any pickling failure is the finding
            raise _fail(
                oracle,
                f"it does not pickle ({type(exc).__name__}: {exc}); pass picklable=False "
                "if it is only used in-process or on threads",
            ) from exc
        if not np.array_equal(np.asarray(copy.solve_batch(weights)), batch):
            raise _fail(oracle, "a pickled copy gives other states")
