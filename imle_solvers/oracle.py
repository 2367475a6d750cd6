"""MAP oracles: the only thing I-MLE needs from a combinatorial problem (paper, sec. 3, eq. 2-3).

A MAP oracle maps weights to a highest-scoring state of the constrained exponential family
``p(z; θ) ∝ exp(⟨z, θ⟩) · [z ∈ C]`` (eq. 1), i.e. ``MAP(θ) = argmax_{z ∈ C} ⟨z, θ⟩``.

Two contracts:

* [`MapOracle`][imle_solvers.MapOracle] — a host (numpy) solver: CP-SAT, PuLP, NetworkX, your own code.
* [`TorchOracle`][imle_solvers.TorchOracle] — a device-native, batched solver (e.g.
  [`TopK`][imle_solvers.TopK]) that never leaves the weights' device.

Sign convention: ``oracle.sense == "max"`` means the weights handed to it are scores θ; ``"min"`` means they
are costs ``c = −θ`` (Example 3 of the paper). Layers take weights in the oracle's own sense; all I-MLE
arithmetic is done in θ-space by `map_solve`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import torch

from ._checks import instance_of, one_of, positive_int
from .errors import ImleSolversError, InvalidWeightsError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BatchSolver",
    "MapOracle",
    "TorchOracle",
    "check_oracle",
    "check_samples",
    "check_weights",
    "map_solve",
    "sense_sign",
]

Sense = Literal["max", "min"]


class MapOracle(abc.ABC):
    """A MAP solver for a constrained discrete distribution (paper, eq. 3 and Example 3).

    Subclasses set ``n_vars`` (and, where the defaults do not fit, the other attributes below) and
    implement `solve`.

    Attributes
    ----------
    sense
        ``"max"``: weights are scores θ to maximise; ``"min"``: weights are costs to minimise (θ = −cost).
    n_vars
        Length ``m`` of a weight vector (and of a state).
    expected_nonzeros
        ``⟨z, 1⟩`` of a typical state (``k`` for a k-subset, the mean path length, …) or ``None`` when
        unknown. [`SumOfGamma`][imle_solvers.SumOfGamma] with ``k=None`` uses it (Theorem 1).
    in_process_safe
        ``True`` declares that `solve` cannot crash or hang the calling process (pure Python/numpy/torch code,
        no native solver), so a ``backend="process"`` [`SolverPool`][imle_solvers.pool.SolverPool] may solve
        small batches in the caller when that is faster. ``False`` (the default) keeps every row of such a
        pool in its worker processes (unless the pool was created with ``fallback=True``).

    Notes
    -----
    ``solve`` must be correct for *any* finite weights, negative ones included (perturbations and SPO+'s
    ``2ĉ − c`` produce them), or raise a typed error from [`imle_solvers.errors`][imle_solvers.errors].
    It must not modify ``weights`` in place (they may be a view of the caller's tensor). Ties may be
    broken arbitrarily but deterministically: the same weights always give the same state.
    [`assert_oracle_contract`][imle_solvers.testing.assert_oracle_contract] checks all of this.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 2-3 and Example 3,
    <https://arxiv.org/abs/2106.01798>.
    """

    sense: Sense = "max"
    n_vars: int
    expected_nonzeros: float | None = None
    in_process_safe: bool = False

    @abc.abstractmethod
    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one instance.

        Parameters
        ----------
        weights
            ``(m,)`` float array in the oracle's `sense`.

        Returns
        -------
        numpy.ndarray
            ``(m,)`` state in ``C`` (usually 0/1), float64.
        """

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        """Solve a batch, validating every row before the first solve.

        Parameters
        ----------
        weights
            ``(B, m)`` float array in the oracle's `sense`.

        Returns
        -------
        numpy.ndarray
            ``(B, m)`` float64 states, row ``i`` solving ``weights[i]``. A solver error is re-raised
            with ``.rows == (i,)``.
        """
        weights = self.validate(weights)
        if weights.ndim != 2:
            raise InvalidWeightsError(f"solve_batch expects a (B, {self.n_vars}) array, got {weights.shape}")
        return self._solve_rows(weights, range(weights.shape[0]))

    def _solve_rows(
        self,
        weights: np.ndarray,
        rows: Sequence[int],
        solve: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Loop ``solve`` (default `solve`) over validated rows; errors are tagged with ``rows``."""
        solve = self.solve if solve is None else solve
        out = np.empty(weights.shape, dtype=np.float64)
        for i, row in enumerate(rows):
            try:
                out[i] = solve(weights[i])
            except ImleSolversError as err:
                if not err.rows:
                    err.with_rows([row])
                raise
        return out

    def validate(self, weights: np.ndarray) -> np.ndarray:
        """Check a ``(B, m)`` (or ``(m,)``) batch and return it as a C-contiguous float64 array.

        Raises
        ------
        InvalidWeightsError
            For a non-floating dtype, a last dimension other than `n_vars`, or NaN/inf entries (the message
            names the offending rows).
        """
        arr = np.asarray(weights)
        if arr.dtype.kind != "f":
            raise InvalidWeightsError(
                f"weights must have a floating dtype, got {arr.dtype}; convert with .astype(np.float64)"
            )
        if arr.ndim == 0 or arr.shape[-1] != self.n_vars:
            raise InvalidWeightsError(
                f"{type(self).__name__} expects weights whose last dimension is n_vars={self.n_vars}, "
                f"got shape {arr.shape}"
            )
        rows = arr.reshape(-1, self.n_vars) if self.n_vars > 0 else np.empty((0, 0))  # [B, m]
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            raise InvalidWeightsError("weights contain NaN or inf", rows=np.flatnonzero(bad).tolist())
        return np.ascontiguousarray(arr, dtype=np.float64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_vars={self.n_vars}, sense={self.sense!r})"


class TorchOracle(MapOracle):
    """A device-native MAP oracle: batched, on the weights' device, with no host synchronisation.

    Implement `solve_torch`; `solve` and `solve_batch` (numpy) are derived from it, so a ``TorchOracle`` also
    works anywhere a [`MapOracle`][imle_solvers.MapOracle] is expected. It is ``in_process_safe``: pools solve
    it in the caller.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 3, <https://arxiv.org/abs/2106.01798>.
    """

    in_process_safe: bool = True

    @abc.abstractmethod
    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Solve ``(..., m)`` weights (oracle sense) into ``(..., m)`` states, same device and dtype."""

    @staticmethod
    def from_function(
        fn: Callable[[torch.Tensor], torch.Tensor],
        n_vars: int,
        *,
        sense: Sense = "max",
        expected_nonzeros: float | None = None,
        name: str | None = None,
    ) -> TorchOracle:
        """Wrap a batched torch function ``(..., m) -> (..., m)`` as a `TorchOracle`, with no subclass.

        For users who already have a MAP routine in torch (a top-k, an argmax, a batched dynamic
        programme), as torch-imle's ``@imle`` decorator takes one.

        Parameters
        ----------
        fn
            Batched MAP: weights ``(..., m)`` in ``sense`` → states ``(..., m)`` on the same device.
            It must not modify its input.
        n_vars
            m, the length of a weight vector.
        sense
            ``"max"`` (``fn`` maximises ``⟨z, w⟩``) or ``"min"``.
        expected_nonzeros
            ``⟨z, 1⟩`` of a typical state, for ``SumOfGamma(k=None)``.
        name
            Shown in ``repr`` (default: ``fn.__name__``).

        Examples
        --------
        >>> import torch
        >>> from imle_solvers import IMLE, TorchOracle
        >>> argmax = TorchOracle.from_function(
        ...     lambda w: torch.nn.functional.one_hot(w.argmax(-1), w.shape[-1]).to(w.dtype), n_vars=4,
        ...     expected_nonzeros=1)
        >>> IMLE(argmax).eval()(torch.tensor([[0.1, 3.0, 0.2, 0.0]])).tolist()  # eval(): the noise-free MAP
        [[0.0, 1.0, 0.0, 0.0]]
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        positive_int("n_vars", n_vars)
        one_of("sense", sense, ("max", "min"))
        return _FunctionOracle(fn, int(n_vars), sense, expected_nonzeros, name)

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` numpy instance through `solve_torch`."""
        return self.solve_batch(np.asarray(weights)[None])[0]

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        """Solve a ``(B, m)`` numpy batch through `solve_torch` on the CPU."""
        arr = self.validate(weights)
        if arr.ndim != 2:
            raise InvalidWeightsError(f"solve_batch expects a (B, {self.n_vars}) array, got {arr.shape}")
        return self.solve_torch(torch.from_numpy(arr)).numpy().astype(np.float64, copy=False)


class _FunctionOracle(TorchOracle):
    """A [`TorchOracle`][imle_solvers.TorchOracle] around a batched torch function."""

    def __init__(
        self,
        fn: Callable[[torch.Tensor], torch.Tensor],
        n_vars: int,
        sense: Sense,
        expected_nonzeros: float | None,
        name: str | None,
    ) -> None:
        self.fn = fn
        self.n_vars = n_vars
        self.sense = sense
        self.expected_nonzeros = None if expected_nonzeros is None else float(expected_nonzeros)
        self.name = name or getattr(fn, "__name__", "fn")

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        states = self.fn(weights)
        if not isinstance(states, torch.Tensor) or states.shape != weights.shape:
            raise InvalidWeightsError(
                f"{self.name} must return a tensor of the weights' shape {tuple(weights.shape)}, got "
                f"{getattr(states, 'shape', type(states).__name__)}"
            )
        return states.to(weights.dtype)

    def __repr__(self) -> str:
        return f"TorchOracle.from_function({self.name}, n_vars={self.n_vars}, sense={self.sense!r})"


class BatchSolver(Protocol):
    """What `map_solve` needs from a pool: see [`imle_solvers.SolverPool`][imle_solvers.pool.SolverPool]."""

    def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        """Solve ``(N, m)`` oracle-sense weights, returning ``(N, m)`` states in row order."""
        ...


def check_oracle(oracle: object) -> MapOracle:
    """Return ``oracle`` if it is a [`MapOracle`][imle_solvers.MapOracle] instance, else raise ``TypeError``.

    Layers, losses and pools call it before anything else; a class passed for an instance
    (``IMLE(TopK)``) gets the advice to instantiate it.
    """
    return instance_of("oracle", oracle, MapOracle)


def check_samples(samples: int) -> int:
    """Return ``samples`` as an int if it is a positive integer, else raise ``ValueError``."""
    return positive_int("samples", samples)


def sense_sign(oracle: MapOracle) -> float:
    """``+1`` for a ``"max"`` oracle, ``−1`` for ``"min"``: ``θ = sign · weights``."""
    one_of("oracle.sense", oracle.sense, ("max", "min"))
    return 1.0 if oracle.sense == "max" else -1.0


def check_weights(weights: torch.Tensor, oracle: MapOracle, *, check_finite: bool = True) -> None:
    """Validate layer input ``(..., m)`` before any noise is drawn or any solver runs.

    Parameters
    ----------
    weights
        The tensor handed to a layer.
    oracle
        The oracle that will solve it (for ``n_vars``).
    check_finite
        Also check for NaN/inf. On an accelerator this needs one host synchronisation, so layers skip it for
        [`TorchOracle`][imle_solvers.TorchOracle] on non-CPU devices unless asked.

    Raises
    ------
    InvalidWeightsError
        Naming the flat batch rows (over the leading dimensions) that are bad.
    """
    if not isinstance(weights, torch.Tensor):
        raise InvalidWeightsError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if not weights.is_floating_point():
        raise InvalidWeightsError(
            f"weights must have a floating dtype, got {weights.dtype}; use weights.float()"
        )
    if weights.dim() == 0 or weights.shape[-1] != oracle.n_vars:
        raise InvalidWeightsError(
            f"{type(oracle).__name__} expects weights of shape (..., {oracle.n_vars}), "
            f"got {tuple(weights.shape)}"
        )
    if check_finite:
        finite_rows = torch.isfinite(weights.detach().reshape(-1, oracle.n_vars)).all(dim=1)
        if not bool(finite_rows.all()):
            bad = torch.nonzero(~finite_rows).flatten().tolist()
            raise InvalidWeightsError("weights contain NaN or inf", rows=bad)


def map_solve(oracle: MapOracle, theta: torch.Tensor, pool: BatchSolver | None = None) -> torch.Tensor:
    """``MAP(θ)`` for a ``(N, m)`` batch given in θ-space (maximise ``⟨z, θ⟩``), on θ's device and dtype.

    This is the single place where tensors meet solvers:

    * a [`TorchOracle`][imle_solvers.TorchOracle] solves on the device — no copy, no sync;
    * any other oracle gets **one** host copy of the whole batch, solved by ``pool`` (or serially by
      ``oracle.solve_batch``), and **one** copy back.

    Parameters
    ----------
    oracle
        The MAP oracle; θ is converted to its sense (``weights = sign · θ``).
    theta
        ``(N, m)`` scores.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] that spreads the rows over workers.

    Returns
    -------
    torch.Tensor
        ``(N, m)`` states; an empty batch (``N = 0``) returns at once, without an oracle or pool call.
    """
    sign = sense_sign(oracle)
    if theta.shape[0] == 0:  # an empty batch: no oracle or pool call
        return torch.zeros_like(theta)
    weights = theta if sign > 0 else -theta  # θ → oracle sense   [N, m]
    if isinstance(oracle, TorchOracle):
        return oracle.solve_torch(weights).to(theta.dtype)
    host = _to_host(weights)  # one device → host copy of the whole batch   [N, m] float64
    states = pool.solve_batch(oracle, host) if pool is not None else oracle.solve_batch(host)
    return _to_device(states, theta)


def _to_host(weights: torch.Tensor) -> np.ndarray:
    """One copy of a ``(N, m)`` tensor to a float64 numpy array (pinned staging on CUDA)."""
    w = weights.detach()
    if w.device.type == "cuda":
        staging = torch.empty(w.shape, dtype=w.dtype, pin_memory=True)
        staging.copy_(w)  # synchronous: the solver needs the values now
        return staging.numpy().astype(np.float64, copy=False)
    # No defensive copy: oracles must not modify their input (see MapOracle); float32 → float64 is the
    # one copy, and a float64 batch is handed over as a view.
    return w.to(torch.float64).numpy()


def _to_device(states: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """One copy of solver states back to ``like``'s device and dtype."""
    out = torch.from_numpy(np.ascontiguousarray(states)).to(like.dtype)
    if like.device.type == "cuda":
        return out.pin_memory().to(like.device, non_blocking=True)
    return out.to(like.device)
