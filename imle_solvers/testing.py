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

Without ``states`` or ``brute_force`` optimality is still checked against what the oracle itself
returns: every returned state is feasible, so the state returned for a row must score at least as well,
under that row's weights, as the states returned for every other row, for the negated weights, and for
probes that make one variable at a time far more and far less attractive than the others. An oracle
that minimises while it declares ``"max"``, one that answers at random, or one that returns the same
state for every weight vector, opposite ones included, fails this; so does one that ignores some of its
weights wherever its other states show the choice it missed. What this cannot see (a better state that
the oracle never returns, a variable that no returned state uses) is not a failure: it is said in a
`UserWarning` and in the returned [`ContractReport`][imle_solvers.testing.ContractReport]. Every
failure names the oracle and the row (or the probe) it concerns.
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .errors import ImleSolversError, InvalidWeightsError
from .oracle import MapOracle, TorchOracle

__all__ = ["ContractReport", "assert_oracle_contract"]


_REPEATS = 3
"""How many more times each row is solved to check that the same weights give the same state."""
_PROBED_VARIABLES = 32
"""Variables that get a one-variable probe (all of them when there are no more; else a random subset)."""


@dataclasses.dataclass(frozen=True)
class ContractReport:
    """What [`assert_oracle_contract`][imle_solvers.testing.assert_oracle_contract] checked.

    Attributes
    ----------
    rows
        Weight vectors solved and checked (the given or random rows, the tied rows, the probes).
    distinct_states
        Distinct states the oracle returned for them (and for the negated rows).
    reference
        Whether optimality was checked against a reference (``states`` or ``brute_force``).
    unchecked
        What could not be checked, one sentence each (empty with a reference).
    """

    rows: int
    distinct_states: int
    reference: bool
    unchecked: tuple[str, ...] = ()


def _fail(oracle: MapOracle, what: str) -> AssertionError:
    return AssertionError(f"{oracle!r} breaks the MapOracle contract: {what}")


def _first_row(a: np.ndarray, b: np.ndarray) -> int:
    """The first row where two arrays of the same shape differ."""
    return int(np.flatnonzero((np.asarray(a) != np.asarray(b)).reshape(len(a), -1).any(axis=1))[0])


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


def _solve_tolerant(
    oracle: MapOracle, weights: np.ndarray, what: str = "row"
) -> tuple[np.ndarray, np.ndarray]:
    """``(solved rows, their states)``: the batch at once, else row by row; rows the oracle refuses with
    a typed error (negative costs, negative cycles: allowed by the contract) are left out. A state of the
    wrong shape fails, naming the oracle and the ``what`` row it answered."""
    m = weights.shape[1]
    try:
        batch = np.asarray(oracle.solve_batch(weights))
    except ImleSolversError:
        pass
    else:
        if batch.shape != weights.shape:
            raise _fail(oracle, f"solve_batch returned shape {batch.shape} for the {what}s {weights.shape}")
        return np.arange(len(weights)), batch
    kept, states = [], []
    for i, w in enumerate(weights):
        try:
            z = np.asarray(oracle.solve(w.copy()))
        except ImleSolversError:
            continue
        if z.shape != (m,):
            raise _fail(oracle, f"{what} {i}: solve returned shape {z.shape}, expected ({m},)")
        states.append(z)
        kept.append(i)
    if not kept:
        return np.zeros(0, dtype=np.int64), np.zeros((0, m))
    return np.array(kept), np.stack(states)


def _probes(weights: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """Rows that make one variable at a time far more, then far less, attractive than the others (on
    top of a row of ``weights``, so that the rest still breaks ties): ``(P, m)`` and a name for each.

    They keep the sign pattern of ``weights``: for non-negative weights (costs that must not go
    negative) the variable is made less attractive by a large weight on it and more attractive by a
    large weight on every other one; for mixed signs by ``±`` a large weight on it.
    """
    m = weights.shape[1]
    chosen = (
        np.arange(m) if m <= _PROBED_VARIABLES else np.sort(rng.choice(m, _PROBED_VARIABLES, replace=False))
    )
    sign = -1.0 if (weights <= 0).all() and (weights < 0).any() else 1.0  # non-positive weights: mirrored
    mixed = (weights < 0).any() and (weights > 0).any()
    rows, names = [], []
    for n, j in enumerate(chosen.tolist()):
        base = weights[n % len(weights)]
        large = 1.0 + 2.0 * float(np.abs(base).sum())  # outweighs every other variable together
        one = np.zeros(m)
        one[j] = large
        if mixed:
            shifts = [(one, f"+{large:.3g} on variable {j}"), (-one, f"−{large:.3g} on variable {j}")]
        else:
            rest = large - one
            shifts = [
                (sign * one, f"{sign * large:+.3g} on variable {j}"),
                (sign * rest, f"{sign * large:+.3g} on every variable but {j}"),
            ]
        for shift, name in shifts:
            rows.append(base + shift)
            names.append(f"the probe {name}")
    return np.array(rows), names


def _check_against_own_states(
    oracle: MapOracle,
    weights: np.ndarray,
    batch: np.ndarray,
    sign: float,
    atol: float,
    rng: np.random.Generator,
) -> tuple[int, np.ndarray]:
    """Each returned state is feasible, so the state of every row (and of every probe) must be best,
    under that row's weights, among all the states the oracle returned. Returns the rows checked and
    the distinct states seen."""
    names = [f"row {i}" for i in range(len(batch))]
    solved, negated = _solve_tolerant(oracle, -weights, "negated row")  # the opposite extremes
    names += [f"the negated row {i}" for i in solved.tolist()]
    probe_weights, probe_names = _probes(weights, rng)
    solved, probe_states = _solve_tolerant(oracle, probe_weights, "probe row")
    probe_weights = probe_weights[solved]
    names += [probe_names[i] for i in solved.tolist()]
    rows = np.concatenate([weights, probe_weights])  # the rows whose state is checked   [B + P, m]
    own_states = np.concatenate([batch, probe_states])  # [B + P, m]
    candidates = np.concatenate([batch, negated, probe_states])  # [K, m] feasible states
    if candidates.shape[1:] != (weights.shape[1],) or not np.isfinite(candidates).all():
        raise _fail(oracle, "solve_batch returned non-finite states or states of the wrong shape")
    scores = sign * (rows @ candidates.T)  # score of every candidate under every row   [B + P, K]
    own = sign * np.einsum("bm,bm->b", rows, own_states)  # [B + P]
    tol = atol * np.maximum(1.0, np.abs(rows).sum(axis=1))  # [B + P]
    worse = np.flatnonzero(own < scores.max(axis=1) - tol)
    if worse.size:
        i = int(worse[0])
        j = int(scores[i].argmax())
        mine = names[i] if i < len(batch) else names[len(batch) + len(negated) + i - len(batch)]
        raise _fail(
            oracle,
            f"{mine}: the state returned for {names[j]} scores {sign * scores[i, j]:.6g} under "
            f"{mine}'s weights, better in the declared sense {oracle.sense!r} than the state returned "
            f"for {mine} ({sign * own[i]:.6g}); does the oracle optimise the other sense, or ignore "
            "some of its weights?",
        )
    return len(rows), np.unique(candidates, axis=0)


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
) -> ContractReport:
    """Raise ``AssertionError`` naming the first broken promise of the oracle contract.

    Without a reference (``states`` or ``brute_force``), optimality is checked against the states the
    oracle itself returns (the module's docstring); what that cannot check is said in a `UserWarning`
    and in the report's ``unchecked``.

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

    Returns
    -------
    ContractReport
        What was checked, and what could not be.

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
        raise _fail(oracle, f"row {_first_row(weights, original)}: solve_batch modified its input")
    if batch.shape != weights.shape:
        raise _fail(oracle, f"solve_batch returned shape {batch.shape} for weights {weights.shape}")
    if not np.isfinite(batch).all():
        rows = np.flatnonzero(~np.isfinite(batch).all(axis=1))
        raise _fail(oracle, f"row {int(rows[0])}: solve_batch returned a non-finite state")
    sign = 1.0 if oracle.sense == "max" else -1.0
    for i, w in enumerate(weights):
        row = w.copy()
        z = np.asarray(oracle.solve(row))
        if not np.array_equal(row, w):
            raise _fail(oracle, f"solve modified its input (row {i})")
        if z.shape != (m,):
            raise _fail(oracle, f"row {i}: solve returned shape {z.shape}, expected ({m},)")
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

    checked, seen = _check_against_own_states(
        oracle, weights, batch, sign, atol, np.random.default_rng([seed, 1])
    )
    reference = feasible is not None or brute_force is not None
    if len(seen) == 1 and not reference:
        raise _fail(
            oracle,
            f"it returned the same state for all {checked} weight vectors it was given (their negations "
            "and one-variable probes included): it ignores its weights, unless its problem has a single "
            "feasible state (then pass states=[that state])",
        )
    again = np.asarray(oracle.solve_batch(weights.copy()))
    if not np.array_equal(again, batch):
        where = f"row {_first_row(again, batch)}: " if again.shape == batch.shape else ""
        raise _fail(oracle, f"{where}solve_batch is not deterministic (the same batch gave other states)")

    bad = weights[:3].copy()
    bad[1, 0] = np.nan
    try:
        oracle.solve_batch(bad)
    except InvalidWeightsError as err:
        if 1 not in err.rows:
            raise _fail(oracle, f"a NaN in row 1 raised InvalidWeightsError naming rows {err.rows}") from None
    else:
        raise _fail(oracle, "row 1: a NaN weight did not raise InvalidWeightsError")
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
                raise _fail(
                    oracle, f"row {_first_row(tw.numpy(), before.numpy())}: solve_torch modified its input"
                )
            if tz.dtype != dtype or tz.shape != tw.shape:
                got, given = f"{tz.dtype} {tuple(tz.shape)}", f"{dtype} {tuple(tw.shape)}"
                raise _fail(oracle, f"solve_torch returned {got} for {given}")
        z64 = oracle.solve_torch(torch.as_tensor(weights)).numpy()
        if not np.array_equal(z64, batch):
            raise _fail(oracle, f"row {_first_row(z64, batch)}: solve_torch and solve_batch disagree")
    if picklable:
        try:
            copy = pickle.loads(pickle.dumps(oracle))
        except Exception as exc:  # any pickling failure is the finding
            raise _fail(
                oracle,
                f"it does not pickle ({type(exc).__name__}: {exc}); pass picklable=False "
                "if it is only used in-process or on threads",
            ) from exc
        theirs = np.asarray(copy.solve_batch(weights))
        if not np.array_equal(theirs, batch):
            where = f"row {_first_row(theirs, batch)}: " if theirs.shape == batch.shape else ""
            raise _fail(oracle, f"{where}a pickled copy gives other states")

    unchecked: list[str] = []
    if not reference:
        unchecked.append(
            f"optimality only against the {len(seen)} distinct states the oracle returned itself (a better "
            "state it never returns goes unnoticed): pass states= (every feasible state) or brute_force= "
            "(the optimal objective)"
        )
        never = np.flatnonzero((seen == 0).all(axis=0))
        if never.size:
            listed = ", ".join(map(str, never[:10].tolist())) + (", …" if never.size > 10 else "")
            unchecked.append(
                f"variables {listed} were 0 in every returned state, even under a large weight on them: "
                "whether a feasible state uses them"
            )
        warnings.warn(
            f"assert_oracle_contract({oracle!r}) could not check: " + "; ".join(unchecked),
            UserWarning,
            stacklevel=2,
        )
    return ContractReport(checked, len(seen), reference, tuple(unchecked))
