"""0/1 knapsack with integer weights and one or more capacity rows, solved on the weights' device."""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

import numpy as np
import torch

from .._checks import non_negative_int, one_of
from ..errors import InvalidWeightsError
from ..oracle import TorchOracle

__all__ = ["TorchKnapsack"]

_MAX_LATTICE = 1 << 22
"""The dense dynamic programme is refused above this many capacity states ``∏ (C_d + 1)``."""
_MAX_SETS = 1 << 21
"""The enumeration of feasible item sets is refused above this many sets."""
_CHUNK_ENTRIES = 1 << 25
"""Rows solved together: keeps the DP decisions (or the set values) of one chunk near this many entries."""
_CPU_SCORES = 1 << 19
"""On the CPU the set scores are computed for this many (set, row) pairs at a time (cache-sized)."""
_MAX_COUNT = 1 << 61
"""Item weights and capacities stay below this: a set's load plus one more item stays within int64."""


def _counts(name: str, value: Any) -> np.ndarray:
    """``value`` as an array of Python ints, each a non-negative integer (integral floats accepted)."""
    arr = np.asarray(value, dtype=object)
    out = []
    for x in arr.reshape(-1).tolist():
        ok = isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))
        if ok and not isinstance(x, numbers.Integral):
            ok = math.isfinite(x) and float(x).is_integer()
        if not ok or x < 0:
            raise ValueError(
                f"{name} must be non-negative integers (scale decimals to integers first), got {x!r}"
            )
        out.append(int(x))
    return np.array(out, dtype=object).reshape(arr.shape)


class TorchKnapsack(TorchOracle):
    """0/1 (multi-dimensional) knapsack as a device-native MAP oracle (sense ``"max"``).

    ``MAP(θ) = argmax_z ⟨z, θ⟩`` over ``z ∈ {0, 1}^n`` with ``Σ_i weights[i, d] · z_i ≤ capacities[d]``
    for every capacity row ``d`` (paper, eq. 2-3; the knapsack of PyEPO, Tang & Khalil 2022): the
    item **values** are the oracle's weights θ, the item weights are fixed here. Batched over any
    leading dimensions, exact, on the values' device, with no host synchronisation.

    Parameters
    ----------
    weights
        Item weights, ``(n_items, n_dims)`` (or ``(n_items,)`` for one row), non-negative integers
        (integral floats are accepted; scale decimal weights and capacities to integers first, e.g.
        ×100 for weights given to 0.01).
    capacities
        ``(n_dims,)`` non-negative integer capacities (a scalar for one row).
    method
        ``"dp"``: dynamic programme over the capacity lattice, ``O(n · ∏ (C_d + 1))`` per row.
        ``"enumerate"``: the feasible item sets are listed once, here (the item weights are fixed), and each
        row scores all of them, ``O(#sets)`` per row. ``"auto"`` (default) takes the cheaper; PyEPO's 2-D
        knapsack (weights 3.00-7.99 ×100, capacities 2000) has a few thousand feasible sets against a
        4-million-state lattice.

    Notes
    -----
    *Ties.* Among the optimal sets the oracle returns the one with the smallest ``Σ_i z_i 2^i``: an item
    is left out whenever an optimal set without it (and without the later items left out) exists. So
    items of zero or negative value are never taken. Both methods follow this rule with the same
    floating-point sums (item values added in index order), so they return identical states, and
    they do on every device (only additions, comparisons and first-maximum ``argmax``).

    *Dtypes.* The state has the values' dtype. Set values are summed in float32 for half-precision
    values (float16, bfloat16, as under CPU autocast: their own sums would round away the gaps between
    sets), in the values' dtype for float32 and float64, and in float64 for integer values.

    *Large numbers.* Item weights and capacities are read as exact integers: an item heavier than a
    capacity can never be taken (it is stored as weighing that capacity + 1), and a capacity above the
    total weight of all items never binds (it is stored as that total); `weights` and `capacities` hold
    these reduced values, which have the same feasible sets.

    ``expected_nonzeros`` is ``None`` unless given; [`SumOfGamma`][imle_solvers.SumOfGamma] then
    needs its ``k``.

    Raises
    ------
    ValueError
        For negative or non-integral item weights or capacities, mismatched shapes, reduced weights or
        capacities of 2⁶¹ or more, or an instance too large for both methods.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 2-3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
      Programming", Mathematical Programming Computation, 2024, <https://arxiv.org/abs/2206.14234>.

    Examples
    --------
    >>> import torch
    >>> knap = TorchKnapsack([[2], [3], [4]], [5])
    >>> knap.solve_torch(torch.tensor([3.0, 4.0, 5.0])).tolist()
    [1.0, 1.0, 0.0]
    """

    sense = "max"
    in_process_safe = True

    def __init__(
        self,
        weights: Any,
        capacities: Any,
        *,
        method: Literal["auto", "dp", "enumerate"] = "auto",
        expected_nonzeros: float | None = None,
    ) -> None:
        w = _counts("weights", weights)
        if w.ndim == 1:
            w = w[:, None]
        if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 1:
            raise ValueError(f"weights must have shape (n_items, n_dims), got {np.shape(weights)}")
        caps = _counts("capacities", capacities)
        if caps.ndim == 0:
            caps = np.full(w.shape[1], caps.item(), dtype=object)
        if caps.shape != (w.shape[1],):
            raise ValueError(f"capacities must have shape ({w.shape[1]},) to match weights, got {caps.shape}")
        # Exact reductions, in Python integers: an item heavier than a capacity never fits, whatever it
        # weighs (C + 1 says the same); a capacity above the total weight never binds (Σ w says the same).
        cap_list = caps.tolist()
        rows = [[min(x, c + 1) for x, c in zip(row, cap_list)] for row in w.tolist()]
        cap_list = [min(c, sum(row[d] for row in rows)) for d, c in enumerate(cap_list)]
        top = max(max(max(row) for row in rows), max(cap_list))
        if top >= _MAX_COUNT:
            raise ValueError(
                f"weights and capacities must stay below 2**61 once reduced (an item heavier than a capacity "
                f"counts as capacity + 1, a capacity above the total weight as that total), got {top}: "
                "scale them down"
            )
        one_of("method", method, ("auto", "dp", "enumerate"))
        self.weights = np.array(rows, dtype=np.int64)  # [n, D]
        """Item weights ``(n_items, n_dims)``, reduced as above (the same feasible sets)."""
        self.capacities = np.array(cap_list, dtype=np.int64)  # [D]
        """Capacities ``(n_dims,)``, reduced as above."""
        self.n_vars = int(w.shape[0])
        self.expected_nonzeros = expected_nonzeros
        lattice = math.prod(int(c) + 1 for c in self.capacities)
        dp_cost = self.n_vars * lattice if lattice <= _MAX_LATTICE else None
        sets = None
        if method != "dp":
            limit = _MAX_SETS if dp_cost is None or method == "enumerate" else min(_MAX_SETS, dp_cost)
            sets = self._feasible_sets(limit)
        if method == "enumerate" and sets is None:
            raise ValueError(f"more than {_MAX_SETS} feasible item sets: use method='dp'")
        if method == "dp" and dp_cost is None:
            raise ValueError(f"{lattice} capacity states (more than {_MAX_LATTICE}): use method='enumerate'")
        if sets is None and dp_cost is None:
            raise ValueError(
                f"instance too large: {lattice} capacity states and more than {_MAX_SETS} feasible item sets"
            )
        self.method: Literal["dp", "enumerate"] = (
            "enumerate"
            if sets is not None and (method == "enumerate" or dp_cost is None or sets.size <= dp_cost)
            else "dp"
        )
        if self.method == "enumerate":
            assert sets is not None
            self._sets = sets  # item ids per feasible set, padded with n; sorted by Σ 2^i   [F, K]
            self._build_parents()
            self._members = np.zeros((sets.shape[0], self.n_vars + 1), dtype=bool)
            self._members[np.arange(sets.shape[0])[:, None], sets] = True
            self._members = self._members[:, : self.n_vars]  # z of every set   [F, n]
        else:
            self._build_dp(lattice)
        self._device_cache: dict[torch.device, dict[str, torch.Tensor]] = {}

    @classmethod
    def from_decimal(cls, weights: Any, capacities: Any, decimals: int = 2, **kwargs: Any) -> TorchKnapsack:
        """The knapsack of item weights given to ``decimals`` places, scaled exactly to integers.

        ``W z ≤ C`` ⟺ ``(10^d W) z ≤ ⌊10^d C⌋`` when every weight is a multiple of ``10^−d``: the same
        feasible sets. PyEPO's knapsack draws its weights from ``3.00 … 7.99`` (``decimals=2``).

        Parameters
        ----------
        weights
            ``(n_items, n_dims)`` item weights (or ``(n_items,)``), given to ``decimals`` places.
        capacities
            ``(n_dims,)`` capacities (a scalar for one row), in the same unit; ⌊10^d C⌋ is kept.
        decimals
            ``d``, the places the weights are given to.
        **kwargs
            Passed to `TorchKnapsack` (``method``, ``expected_nonzeros``).

        Raises
        ------
        ValueError
            When a weight is not a multiple of ``10^−d`` (within ``10^−6`` of one after scaling), or
            for what `TorchKnapsack` refuses.
        """
        scale = 10 ** non_negative_int("decimals", decimals)
        with np.errstate(invalid="ignore", over="ignore"):
            w = np.asarray(weights, dtype=np.float64) * scale  # 10^d W
            caps = np.asarray(capacities, dtype=np.float64) * scale  # 10^d C
        w_int = np.rint(w)
        if not (np.abs(w - w_int) <= 1e-6).all():
            raise ValueError(
                f"weights must be multiples of 10**-{decimals} (decimals={decimals}); scale them yourself "
                "or pass more decimals"
            )
        near = np.abs(caps - np.rint(caps)) <= 1e-6  # 20.00 × 100 is 2000, not 1999.9999
        caps_int = np.where(near, np.rint(caps), np.floor(caps))  # ⌊10^d C⌋
        return cls(w_int, caps_int, **kwargs)

    # ---- set-up ----------------------------------------------------------------------------------

    def _feasible_sets(self, limit: int) -> np.ndarray | None:
        """All item sets within the capacities (depth-first), or ``None`` beyond ``limit`` sets.

        Returns ``[F, K]`` item ids padded with ``n`` (a zero-value column), sorted by ``Σ_i z_i 2^i``.
        """
        n, w, caps = self.n_vars, self.weights, self.capacities
        items = np.zeros((1, 0), dtype=np.int64)  # the sets of size k, sorted ids   [F_k, k]
        used = np.zeros((1, len(caps)), dtype=np.int64)  # their capacity use   [F_k, D]
        levels, total = [items], 1
        while items.shape[0]:
            step = max(1, (1 << 22) // (n * len(caps)))  # parents per chunk: bounded scratch
            grown_items, grown_used = [], []
            for lo in range(0, items.shape[0], step):
                part, part_used = items[lo : lo + step], used[lo : lo + step]
                last = part[:, -1] if part.shape[1] else np.full(part.shape[0], -1)
                grown = part_used[:, None, :] + w[None, :, :]  # add item j   [F', n, D]
                ok = (grown <= caps).all(axis=2) & (np.arange(n)[None, :] > last[:, None])  # [F', n]
                parent, item = np.nonzero(ok)
                total += parent.size
                if total > limit:
                    return None
                grown_items.append(np.concatenate([part[parent], item[:, None]], axis=1))
                grown_used.append(grown[parent, item])
            items, used = np.concatenate(grown_items), np.concatenate(grown_used)
            levels.append(items)
        size = max(len(level[0]) if level.size else 0 for level in levels)
        sets = np.concatenate(
            [
                np.pad(level, ((0, 0), (0, size - level.shape[1])), constant_values=n)
                for level in levels
                if level.shape[0]
            ]
        )  # [F, K]
        if size == 0:
            sets = np.full((1, 1), n, dtype=np.int64)
        member = np.zeros((sets.shape[0], n + 1), dtype=bool)
        member[np.arange(sets.shape[0])[:, None], sets] = True
        order = np.lexsort(member[:, :n].T)  # last key (item n − 1) first: ascending Σ_i z_i 2^i
        return sets[order]

    def _build_parents(self) -> None:
        """Per set size k ≥ 1: positions of its sets, of their parents (the set less its largest item,
        which comes earlier in the Σ 2^i order) and that largest item. A set's score is then its
        parent's plus one value: the same sum, in the same order, as adding its items one by one."""
        sets, n = self._sets, self.n_vars
        size = (sets < n).sum(axis=1)  # [F]
        last = np.where(size > 0, sets[np.arange(len(sets)), np.maximum(size - 1, 0)], n)  # [F]
        parent_rows = sets.copy()
        parent_rows[np.arange(len(sets)), np.maximum(size - 1, 0)] = n  # drop the largest item
        keys = np.ascontiguousarray(sets).view(np.dtype((np.void, sets.dtype.itemsize * sets.shape[1])))[:, 0]
        order = np.argsort(keys)
        parent_keys = np.ascontiguousarray(parent_rows).view(keys.dtype)[:, 0]
        parent = order[np.searchsorted(keys[order], parent_keys)]  # [F]
        self._levels = [
            (np.flatnonzero(size == k), parent[size == k], last[size == k])
            for k in range(1, int(size.max(initial=0)) + 1)
        ]

    def _build_dp(self, lattice: int) -> None:
        """Flat strides of the capacity lattice and, per item, its shift and where it fits."""
        dims = [int(c) + 1 for c in self.capacities]
        strides = np.cumprod([1, *dims[::-1]])[:-1][::-1]  # row-major strides   [D]
        coords = np.stack(np.unravel_index(np.arange(lattice), dims), axis=1)  # [L, D]
        self._lattice = lattice
        self._shift = (self.weights * strides).sum(axis=1)  # flat offset of each item   [n]
        self._fits = np.all(coords[None, :, :] >= self.weights[:, None, :], axis=2)  # [n, L]

    def _plan(self, device: torch.device) -> dict[str, torch.Tensor]:
        plan = self._device_cache.get(device)
        if plan is None:
            if self.method == "enumerate":
                plan = {
                    "sets": torch.from_numpy(self._sets).to(device),
                    "members": torch.from_numpy(self._members).to(device),
                }
            else:
                plan = {"fits": torch.from_numpy(self._fits).to(device)}
            self._device_cache[device] = plan
        return plan

    # ---- solving ---------------------------------------------------------------------------------

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """0/1 item choices for ``(..., n)`` item values; same shape, device and dtype."""
        if weights.shape[-1:] != (self.n_vars,):
            raise InvalidWeightsError(
                f"{self!r} expects values of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        if weights.is_complex():
            raise InvalidWeightsError(f"TorchKnapsack takes real item values, got {weights.dtype}")
        lead = weights.shape[:-1]
        # values summed in float32 or wider: half-precision sums would round away the gaps between sets
        acc = (
            torch.promote_types(weights.dtype, torch.float32)
            if weights.is_floating_point()
            else torch.float64
        )
        v = weights.detach().reshape(-1, self.n_vars).to(acc)  # θ   [N, n]
        per_row = self._sets.size if self.method == "enumerate" else self.n_vars * self._lattice
        chunk = max(1, _CHUNK_ENTRIES // max(per_row, 1))
        solve = self._solve_enumerate if self.method == "enumerate" else self._solve_dp
        if v.device.type == "cpu":  # NumPy only (tiny torch ops pay for waking the intra-op thread pool)
            solve_np = self._solve_enumerate_numpy if self.method == "enumerate" else self._solve_dp_numpy
            v_np = v.numpy()
            parts_np = [solve_np(v_np[start : start + chunk]) for start in range(0, v_np.shape[0], chunk)]
            z_np = np.concatenate(parts_np) if parts_np else np.zeros((0, self.n_vars), dtype=v_np.dtype)
            return torch.from_numpy(z_np).to(weights.dtype).reshape(*lead, self.n_vars)
        parts = [solve(v[start : start + chunk]) for start in range(0, v.shape[0], chunk)]
        z = torch.cat(parts) if parts else v.new_zeros((0, self.n_vars))
        return z.to(weights.dtype).reshape(*lead, self.n_vars)

    def _solve_enumerate(self, v: torch.Tensor) -> torch.Tensor:
        """Score every feasible set (item values added in index order), take the first maximum."""
        if v.device.type == "cpu":
            return torch.from_numpy(self._solve_enumerate_numpy(v.numpy()))
        return self._solve_enumerate_torch(v)

    def _solve_enumerate_numpy(self, v: np.ndarray) -> np.ndarray:
        """The enumeration in NumPy (the CPU path): the same sums and the same first maximum."""
        v_np = np.concatenate([v.T, np.zeros((1, v.shape[0]), dtype=v.dtype)])  # [n+1, N]
        step = max(8, _CPU_SCORES // self._sets.shape[0])  # rows per pass: the scores stay in cache
        best = np.empty(v.shape[0], dtype=np.int64)
        for lo in range(0, v.shape[0], step):
            part = np.ascontiguousarray(v_np[:, lo : lo + step])  # [n+1, N']
            score = np.zeros((self._sets.shape[0], part.shape[1]), dtype=part.dtype)  # ⟨z, θ⟩   [F, N']
            for rows, parent, item in self._levels:  # a set's score: its parent's + its last item's value
                score[rows] = score[parent] + part[item]
            best[lo : lo + step] = score.argmax(axis=0)  # first maximum: smallest Σ 2^i among the optima
        return self._members[best].astype(v.dtype)

    def _solve_enumerate_torch(self, v: torch.Tensor) -> torch.Tensor:
        """The enumeration as torch operations (accelerators)."""
        plan = self._plan(v.device)
        sets = plan["sets"]  # [F, K]
        v_pad = torch.cat([v.T, v.new_zeros((1, v.shape[0]))])  # value 0 for the padding id   [n+1, N]
        score = v_pad.index_select(0, sets[:, 0])  # ⟨z, θ⟩, summed in item order   [F, N]
        for k in range(1, sets.shape[1]):
            score += v_pad.index_select(0, sets[:, k])
        best = score.argmax(dim=0)  # first maximum: smallest Σ 2^i among the optima   [N]
        return plan["members"][best].to(v.dtype)

    def _solve_dp(self, v: torch.Tensor) -> torch.Tensor:
        """``V_i(c) = max(V_{i−1}(c), V_{i−1}(c − w_i) + θ_i)`` on the flat capacity lattice; backtrack."""
        if v.device.type == "cpu":
            return torch.from_numpy(self._solve_dp_numpy(v.numpy()))
        return self._solve_dp_torch(v)

    def _solve_dp_torch(self, v: torch.Tensor) -> torch.Tensor:
        """The programme as torch operations (accelerators)."""
        plan = self._plan(v.device)
        n_rows, lat = v.shape[0], self._lattice
        pad = int(self._shift.max())
        buf = v.new_full((n_rows, pad + lat), float("-inf"))  # -inf ahead of the lattice: c − w_i < 0
        value = buf[:, pad:]  # V(c) = best value within capacity c   [N, L]
        value.zero_()  # the empty set fits everywhere
        take = torch.empty((self.n_vars, n_rows, lat), dtype=torch.bool, device=v.device)
        fits = plan["fits"]  # [n, L]
        for i in range(self.n_vars):
            s = int(self._shift[i])
            cand = buf[:, pad - s : pad - s + lat] + v[:, i : i + 1]  # V(c − w_i) + θ_i   [N, L]
            torch.logical_and(cand > value, fits[i], out=take[i])  # strictly better: take item i
            value.copy_(torch.where(take[i], cand, value))
        z = v.new_zeros((n_rows, self.n_vars))
        cap = torch.full((n_rows, 1), lat - 1, dtype=torch.long, device=v.device)  # full capacity
        for i in range(self.n_vars - 1, -1, -1):  # backtrack from the last item
            t = take[i].gather(1, cap)  # [N, 1]
            z[:, i] = t[:, 0].to(v.dtype)
            cap = cap - t.long() * int(self._shift[i])
        return z

    def _solve_dp_numpy(self, v: np.ndarray) -> np.ndarray:
        """`_solve_dp` in NumPy (the CPU path): the same operations, so the same states."""
        n_rows, lat = v.shape[0], self._lattice
        pad = int(self._shift.max())
        buf = np.full((n_rows, pad + lat), -np.inf, dtype=v.dtype)
        value = buf[:, pad:]  # V(c)   [N, L]
        value[:] = 0.0
        take = np.empty((self.n_vars, n_rows, lat), dtype=bool)
        cand = np.empty((n_rows, lat), dtype=v.dtype)
        for i in range(self.n_vars):
            s = int(self._shift[i])
            np.add(buf[:, pad - s : pad - s + lat], v[:, i : i + 1], out=cand)  # V(c − w_i) + θ_i
            took = take[i]  # [N, L]
            np.greater(cand, value, out=took)
            np.logical_and(took, self._fits[i], out=took)  # strictly better and within capacity
            np.copyto(value, cand, where=took)
        z = np.zeros((n_rows, self.n_vars), dtype=v.dtype)
        rows = np.arange(n_rows)
        cap = np.full(n_rows, lat - 1)
        for i in range(self.n_vars - 1, -1, -1):
            t = take[i, rows, cap]
            z[:, i] = t
            cap = cap - t * int(self._shift[i])
        return z

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_device_cache"] = {}
        return state

    def __repr__(self) -> str:
        return (
            f"TorchKnapsack(n_items={self.n_vars}, capacities={self.capacities.tolist()}, "
            f"method={self.method!r})"
        )
