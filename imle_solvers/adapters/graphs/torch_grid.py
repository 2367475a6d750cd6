"""Shortest top-left → bottom-right grid path on the weights' device (torch): batched min-plus sweeps.

The device-native twin of [`GridShortestPath`][imle_solvers.GridShortestPath] (``grid.py``): the same
problem and layout, solved by synchronous Bellman-Ford sweeps over the image (NumPy on the CPU, one
fused Triton kernel on CUDA, torch operations elsewhere and as the reference) and read off by the
predecessor chain.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Literal

import numpy as np
import torch

from ..._checks import one_of
from ..._device import upload
from ...errors import InvalidWeightsError, MissingExtraError
from ...oracle import TorchOracle
from ._common import _grid_shape
from ._sweep_graph import SweepGraphs

__all__ = ["TorchGridShortestPath"]


_CPU_CHUNK = 4
"""Jacobi sweeps between two convergence checks (CPU: the check is a cheap host read)."""
_CPU_BLOCK_CELLS = 1 << 18
"""The CPU sweeps run on blocks of rows of about this many padded cells (a few arrays fit in L2)."""
_DEVICE_CHUNK = 8
"""Sweeps per chunk on an accelerator; at most `_IN_FLIGHT` chunks are queued ahead of the check."""
_IN_FLIGHT = 2
"""Chunks of sweeps queued on an accelerator ahead of the convergence check that reads the oldest."""
KERNEL_MAX_CELLS = 4096
"""Largest ``H·W`` the fused Triton kernel takes (one program holds a map in registers)."""
_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""Weight dtypes the kernel reads as they are (others are converted to float32 first, as the torch path)."""
_BACKENDS = ("auto", "torch", "triton")


@functools.cache
def _kernel_module() -> ModuleType | None:
    """``_grid_triton`` (it imports Triton at its first kernel), or ``None`` without Triton."""
    if importlib.util.find_spec("triton") is None:
        return None
    from . import _grid_triton

    return _grid_triton


class TorchGridShortestPath(TorchOracle):
    """[`GridShortestPath`][imle_solvers.GridShortestPath] on the weights' device: batched min-plus sweeps.

    The vertex-weighted grid path of the paper's Warcraft experiment (sec. 5; Example 3 for paths:
    ``θ = −c``), with the layout of [`GridShortestPath`][imle_solvers.GridShortestPath]: weights and
    states are the ``H·W`` cells in row-major order, the path runs from the top-left to the
    bottom-right cell through 8- (or 4-) neighbouring cells, and costs the sum of its cells, both
    corners included. The layer takes **costs** (``sense="min"``), batched over any leading
    dimensions, and the states come back on the weights' device and dtype.

    Parameters
    ----------
    height
        Rows ``H`` of the grid (``≥ 1``).
    width
        Columns ``W`` of the grid (``≥ 1``).
    neighbourhood
        ``8`` (king moves, as in Warcraft) or ``4`` (rook moves).
    cuda_graphs
        For the torch code path on CUDA: record each chunk of sweeps once per batch shape as a CUDA graph
        and replay it (one launch instead of about 70 small kernels; same states). ``False`` launches the
        kernels one by one, as on other accelerators.
    backend
        ``"auto"`` (default): on CUDA the fused Triton kernel where Triton is installed and
        ``H·W ≤ 4096``, else the torch code path; NumPy on the CPU. ``"torch"``: never the kernel (the
        reference path). ``"triton"``: always the kernel; raises
        [`MissingExtraError`][imle_solvers.errors.MissingExtraError] without Triton and ``ValueError`` for
        ``H·W > 4096``; on CPU weights it runs only under Triton's interpreter (``TRITON_INTERPRET=1`` set
        before Triton is imported: slow, for testing), other weights raise
        [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError]. The states are identical on
        every path.

    Notes
    -----
    *Algorithm.* Bellman-Ford in synchronous (Jacobi) sweeps on the image: with ``d(s) = w(s)`` and
    ``d = +∞`` elsewhere, one sweep sets ``d(v) ← min(d(v), w(v) + min_{u ~ v} d(u))`` for every cell at
    once (a 3×3 neighbourhood minimum), and records the sweep ``L(v)`` of each cell's last strict
    decrease. A sweep that changes nothing is a fixed point, i.e. the exact shortest distances. Each
    cell's predecessor is then its neighbour of least ``d``, ties to the least ``L``, then to the first
    direction in the order N, S, W, E, NW, NE, SW, SE; ``d`` and ``L`` cannot both stay equal along a
    predecessor chain, so the chains end at the source even with zero costs. The path is read off by
    pointer doubling (``⌈log₂ H·W⌉`` gather/scatter steps, no data-dependent loop).

    *Sweep budget and convergence.* Sweep ``k`` is exact for every path of at most ``k`` moves, so
    ``H·W`` sweeps always suffice; typical maps converge after about the number of moves on their
    longest shortest path. Sweeps run in fixed chunks, each ending with a device-side "did the last
    sweep change anything" flag. On the CPU the flag is read after every chunk of 4 sweeps. On an
    accelerator it is copied without blocking into pinned host memory and polled with a CUDA event
    query while the next chunk (8 sweeps) is already queued, so the stream never waits for the host
    and no synchronising call is made (``torch.cuda.set_sync_debug_mode("error")`` passes); the
    extra chunk in flight when convergence is seen is wasted work, at most 16 sweeps. With
    ``cuda_graphs`` (the default) a chunk is one graph replay on buffers kept per batch shape and CUDA
    stream (the last four), recorded on first use without a host synchronisation; solves on one oracle
    take turns on them. When the caller is itself capturing a CUDA graph, the full ``H·W``-sweep budget
    runs instead (exact, fixed work).

    *The fused kernel* (CUDA, Triton) runs the same algorithm as one launch: one program per map keeps
    the map's costs, distances and levels in registers, exchanges neighbour distances through a small
    scratch row in L1/L2, sweeps until a sweep changes nothing (at most ``H·W``), then follows the
    predecessor chain from the target. The convergence test happens inside the kernel, so the host
    neither waits nor polls, and the launch can be captured in a CUDA graph. Its states are
    bit-identical to the torch path's (ties included): the same comparisons, additions and dtypes.

    *Costs.* Costs must be ≥ 0 (with a negative cell the grid has a negative 2-cycle, the problem
    of [`GridShortestPath`][imle_solvers.GridShortestPath] raises
    [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError] or changes method). On the CPU a
    negative or NaN cost raises [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError]
    naming the rows; on an accelerator that check would need a host synchronisation, so such rows come
    back as all-NaN states instead. Perturbed costs can dip below 0: wrap the oracle in
    [`ClampedCosts`][imle_solvers.ClampedCosts] (it stays on the device for a torch oracle). Rows
    whose path sums overflow the dtype (e.g. cells near ``1e308`` in float64), or whose target only
    ``+inf`` cells reach, also come back all-NaN. Weights of other dtypes than float32 and float64
    (half, bfloat16, integers) are solved in float32; the states come back in the weights' dtype.

    *torch.compile.* The solve runs eagerly inside a compiled model (a graph break: the NumPy code, the
    host-side convergence polling and the kernel launch are not traced).

    *Ties* are broken by the rule above, identically on every device (only comparisons, additions
    and index arithmetic, all exact). They need not match SciPy's Dijkstra in
    [`GridShortestPath`][imle_solvers.GridShortestPath], whose choice depends on its heap; the two
    agree whenever the shortest path is unique. With float costs the distances are float sums, so
    near-ties are decided by rounding (as for every float solver).

    ``expected_nonzeros`` is the number of cells of a shortest path under unit weights, as for the
    host oracle. The oracle is picklable (its small per-device index tensor is rebuilt on first use).

    References
    ----------
    * Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers", ICLR
      2020, <https://arxiv.org/abs/1912.02175> (the Warcraft shortest-path benchmark).
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, sec. 5 (the Warcraft experiment), <https://arxiv.org/abs/2106.01798>.
    * Bellman, "On a routing problem", Quarterly of Applied Mathematics 16, 1958,
      <https://doi.org/10.1090/qam/102435> (the Bellman-Ford recursion the sweeps iterate).

    Examples
    --------
    >>> import torch
    >>> grid = TorchGridShortestPath(3, 3)
    >>> w = torch.tensor([1, 9, 9,
    ...                   1, 9, 9,
    ...                   9, 1, 1.0])
    >>> grid.solve_torch(w).reshape(3, 3).int().tolist()
    [[1, 0, 0], [1, 0, 0], [0, 1, 1]]
    """

    sense = "min"
    in_process_safe = True

    def __init__(
        self,
        height: int,
        width: int,
        neighbourhood: Literal[4, 8] = 8,
        *,
        cuda_graphs: bool = True,
        backend: Literal["auto", "torch", "triton"] = "auto",
    ) -> None:
        self.height, self.width, self.neighbourhood = _grid_shape(height, width, neighbourhood)
        self.cuda_graphs = bool(cuda_graphs)
        self.backend: Literal["auto", "torch", "triton"] = one_of("backend", backend, _BACKENDS)
        """Which code path solves: ``"auto"``, ``"torch"`` or ``"triton"`` (see Parameters)."""
        if self.backend == "triton":
            if self.height * self.width > KERNEL_MAX_CELLS:
                raise ValueError(
                    f"backend='triton' takes grids of at most {KERNEL_MAX_CELLS} cells, got "
                    f"{self.height}×{self.width}; use backend='auto' (the torch path takes any size)"
                )
            if _kernel_module() is None:
                raise MissingExtraError(
                    "backend='triton' needs Triton; install it with: pip install 'imle-solvers[triton]'"
                )
        self._graphs = SweepGraphs()  # recorded sweep chunks per CUDA problem shape
        self.n_vars = self.height * self.width
        self.expected_nonzeros = float(
            max(self.height, self.width) if neighbourhood == 8 else self.height + self.width - 1
        )
        # neighbour offsets (dr, dc): N, S, W, E, then the diagonals NW, NE, SW, SE (the tie order)
        self._steps = [(-1, 0), (1, 0), (0, -1), (0, 1)]
        if neighbourhood == 8:
            self._steps += [(-1, -1), (-1, 1), (1, -1), (1, 1)]
        self._offsets: dict[torch.device, torch.Tensor] = {}  # flat offsets of the steps, per device

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_offsets"] = {}  # device tensors are not pickled
        return state

    @property
    def nodes(self) -> list[tuple[int, int]]:
        """The cells ``(row, col)`` in row-major order: the order of weights and states."""
        return [(i // self.width, i % self.width) for i in range(self.n_vars)]

    @torch.compiler.disable  # runs eagerly in a compiled model: NumPy, host polling, a kernel launch
    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Path masks for ``(..., H·W)`` costs; same shape, device and dtype.  No host synchronisation."""
        if weights.shape[-1:] != (self.n_vars,):
            raise InvalidWeightsError(
                f"{self!r} expects weights of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        kernel = self._kernel(weights.device)
        lead = weights.shape[:-1]
        w = weights.detach().reshape(-1, self.n_vars)  # c   [N, H·W]
        if w.shape[0] == 0:
            return weights.new_zeros(weights.shape)
        if self.n_vars == 1:  # the single cell is the path, whatever its weight
            return weights.new_ones(weights.shape)
        if kernel is not None:  # one launch; half and bfloat16 are read as they are, solved in float32
            native = w.dtype in _KERNEL_DTYPES
            out = weights.dtype if native else torch.float32
            states = kernel.solve_grid(
                w if native else w.to(torch.float32), self.height, self.width, self.neighbourhood == 8, out
            )
            return states.to(weights.dtype).reshape(*lead, self.n_vars)
        dtype = weights.dtype if weights.dtype in (torch.float32, torch.float64) else torch.float32
        w = w.to(dtype)
        if w.device.type == "cpu":  # NumPy only (tiny torch ops pay for waking the intra-op thread pool)
            states = torch.from_numpy(self._solve_numpy(w.numpy()))  # [N, H·W]
        else:
            states = self._solve_torch_ops(w)
        return states.to(weights.dtype).reshape(*lead, self.n_vars)

    def _solve_torch_ops(self, w: torch.Tensor) -> torch.Tensor:
        """The torch code path (the kernel's reference; any device): float32 or float64 costs
        ``[N, H·W]`` → states; rows with a negative or NaN cost, or no finite path, are all-NaN."""
        invalid = ~(w >= 0).all(dim=1)  # a negative or NaN cost   [N]
        w_t = w.clamp_min(0).T.reshape(self.height, self.width, -1).contiguous()  # invalid rows: NaN below
        dist, level = self._distances_torch(w_t)  # d, L   [H+2, W+2, N]
        state, end = self._trace(dist, level), dist[self.height, self.width]
        bad = ~torch.isfinite(end) | invalid  # overflowed path sums, negative or NaN costs   [N]
        return state.masked_fill(bad[:, None], float("nan"))

    def _kernel(self, device: torch.device) -> ModuleType | None:
        """The fused kernel's module where it solves weights on ``device``; ``None``: the torch path."""
        if self.backend == "torch" or (self.backend == "auto" and device.type != "cuda"):
            return None
        if self.backend == "auto":
            return _kernel_module() if self.n_vars <= KERNEL_MAX_CELLS else None
        module = _kernel_module()
        assert module is not None  # checked when the oracle was made
        if device.type != "cuda" and not (device.type == "cpu" and module.interpreted()):
            raise InvalidWeightsError(
                f"backend='triton' runs on CUDA weights (CPU weights only under Triton's interpreter, "
                f"TRITON_INTERPRET=1 set before Triton is imported), got weights on {device}"
            )
        return module

    def _solve_numpy(self, w: np.ndarray) -> np.ndarray:
        """The CPU path: ``(N, H·W)`` costs → states, in cache-sized blocks of rows (each block stops
        sweeping when it converges)."""
        nan = np.isnan(w).any(axis=1)  # [N]
        if nan.any():
            raise InvalidWeightsError("NaN cell costs", rows=np.flatnonzero(nan).tolist())
        negative = (w < 0).any(axis=1)  # [N]
        if negative.any():
            raise InvalidWeightsError(
                "negative cell costs (the grid then has a negative 2-cycle); wrap the oracle in "
                "ClampedCosts to clamp perturbed costs at 0",
                rows=np.flatnonzero(negative).tolist(),
            )
        state = np.empty(w.shape, dtype=w.dtype)  # [N, H·W]
        block = max(16, _CPU_BLOCK_CELLS // ((self.height + 2) * (self.width + 2)))
        for start in range(0, w.shape[0], block):
            w_blk = np.ascontiguousarray(w[start : start + block].T).reshape(self.height, self.width, -1)
            dist, level = self._distances_numpy(w_blk)  # [H+2, W+2, n_b]
            state[start : start + block] = self._trace_numpy(dist, level)
            state[start : start + block][~np.isfinite(dist[self.height, self.width])] = np.nan  # overflow
        return state

    # ---- distances: synchronous min-plus sweeps (d and L padded with a +inf border) --------------

    def _distances_numpy(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sweeps on the CPU, in NumPy with preallocated buffers.  → d, L   [H+2, W+2, N]"""
        h, wd, n = w.shape
        dist = np.full((h + 2, wd + 2, n), np.inf, dtype=w.dtype)  # +inf border: no neighbour there
        dist[1, 1] = w[0, 0]  # d(s) = w(s)
        level = np.zeros((h + 2, wd + 2, n), dtype=np.int32)
        rows = np.empty((h + 2, wd, n), dtype=w.dtype)
        cand = np.empty((h, wd, n), dtype=w.dtype)
        improved = np.empty((h, wd, n), dtype=bool)
        with np.errstate(over="ignore"):  # overflowing rows end at +inf and come back NaN
            self._numpy_sweeps(w, dist, level, rows, cand, improved)
        return dist, level

    def _numpy_sweeps(
        self,
        w: np.ndarray,
        dist: np.ndarray,
        level: np.ndarray,
        rows: np.ndarray,
        cand: np.ndarray,
        improved: np.ndarray,
    ) -> None:
        """Sweeps in place until one changes nothing (checked every `_CPU_CHUNK`), at most ``H·W``."""
        inner, inner_level = dist[1:-1, 1:-1], level[1:-1, 1:-1]  # views of the real cells   [H, W, N]
        sweep = 0
        while sweep < self.n_vars:  # a simple path has ≤ H·W − 1 moves; one more sweep shows the fixed point
            for _ in range(min(_CPU_CHUNK, self.n_vars - sweep)):
                sweep += 1
                if self.neighbourhood == 8:  # separable 3×3 minimum (the cell itself included: c ≥ 0)
                    np.minimum(dist[:, :-2], dist[:, 1:-1], out=rows)
                    np.minimum(rows, dist[:, 2:], out=rows)
                    np.minimum(rows[:-2], rows[1:-1], out=cand)
                    np.minimum(cand, rows[2:], out=cand)
                else:  # N, S, W, E
                    np.minimum(dist[:-2, 1:-1], dist[2:, 1:-1], out=cand)
                    np.minimum(cand, dist[1:-1, :-2], out=cand)
                    np.minimum(cand, dist[1:-1, 2:], out=cand)
                cand += w  # w(v) + min_{u ~ v} d(u)                                      [H, W, N]
                np.less(cand, inner, out=improved)  # strict decrease
                np.minimum(inner, cand, out=inner)  # Jacobi: every cell from the previous sweep
                np.copyto(inner_level, sweep, where=improved)  # L(v) = last sweep that lowered d(v)
            if not improved.any():
                break

    def _sweeps_torch(
        self, dist: torch.Tensor, level: torch.Tensor, w: torch.Tensor, first: int | torch.Tensor, count: int
    ) -> torch.Tensor:
        """Sweeps ``first … first + count − 1`` in place (torch); → device flag "the last one changed".

        ``first`` may be a 0-dim device counter (a CUDA graph's): it is then advanced once per sweep."""
        inner, inner_level = dist[1:-1, 1:-1], level[1:-1, 1:-1]  # [H, W, N]
        improved = torch.zeros((), dtype=torch.bool, device=dist.device)
        for i in range(count):  # sweep k = first + i
            if self.neighbourhood == 8:
                rows = torch.minimum(torch.minimum(dist[:, :-2], dist[:, 1:-1]), dist[:, 2:])  # [H+2, W, N]
                cand = torch.minimum(torch.minimum(rows[:-2], rows[1:-1]), rows[2:])  # [H, W, N]
            else:
                cand = torch.minimum(
                    torch.minimum(dist[:-2, 1:-1], dist[2:, 1:-1]),
                    torch.minimum(dist[1:-1, :-2], dist[1:-1, 2:]),
                )
            cand.add_(w)  # w(v) + min_{u ~ v} d(u)
            improved = cand < inner
            inner.copy_(torch.minimum(inner, cand))
            if isinstance(first, torch.Tensor):  # L(v) ← k where d(v) decreased, k on the device
                inner_level.copy_(torch.where(improved, first, inner_level))
                first.add_(1)
            else:
                inner_level.masked_fill_(improved, first + i)
        return improved.any()

    def _distances_torch(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sweeps on an accelerator, with the non-blocking convergence check.  → d, L   [H+2, W+2, N]"""
        h, wd, n = w.shape
        budget = self.n_vars
        capturing = w.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if w.device.type == "cuda" and self.cuda_graphs and not capturing:
            with self._graphs.lock:  # one solve at a time on a graph's buffers
                graph = self._graphs.get(
                    self._sweeps_torch, (h + 2, wd + 2, n), w.dtype, w.device, _DEVICE_CHUNK
                )
                graph.start(w)
                self._converge(budget, lambda done, count: graph.replay())  # sweeps past the budget: no-ops
                return graph.dist.clone(), graph.level.clone()  # the buffers serve the next call
        dist = w.new_full((h + 2, wd + 2, n), float("inf"))
        dist[1, 1] = w[0, 0]  # d(s) = w(s)
        level = torch.zeros((h + 2, wd + 2, n), dtype=torch.int32, device=w.device)
        if w.device.type != "cuda" or capturing:
            self._sweeps_torch(dist, level, w, 1, budget)  # fixed work, exact
        else:
            self._converge(budget, lambda done, count: self._sweeps_torch(dist, level, w, done + 1, count))
        return dist, level

    @staticmethod
    def _converge(budget: int, chunk: Callable[[int, int], torch.Tensor]) -> None:
        """Run ``chunk(done, count)`` (sweeps ``done + 1 … done + count``, → device flag "changed") until a
        chunk changes nothing or ``budget`` sweeps ran, reading the flags without a host synchronisation."""
        flags = torch.empty(-(-budget // _DEVICE_CHUNK), dtype=torch.bool, pin_memory=True)  # one per chunk
        pending: deque[tuple[torch.cuda.Event, torch.Tensor]] = deque()
        done = 0
        while done < budget:
            count = min(_DEVICE_CHUNK, budget - done)
            changed = chunk(done, count)
            flag = flags[done // _DEVICE_CHUNK]
            done += count
            flag.copy_(changed, non_blocking=True)  # device → pinned host memory, no stream stall
            event = torch.cuda.Event()
            event.record()
            pending.append((event, flag))
            while pending and (len(pending) >= _IN_FLIGHT or pending[0][0].query()):
                event, flag = pending.popleft()
                while not event.query():  # the next chunk is queued behind it: the device stays busy
                    time.sleep(0)
                if not bool(flag):  # pinned host memory, written before the event: no synchronisation
                    return

    # ---- path: predecessors, then pointer doubling ---------------------------------------------

    def _trace_numpy(self, dist: np.ndarray, level: np.ndarray) -> np.ndarray:
        """`_trace` on the CPU: the same predecessor rule, evaluated only along the paths.  → ``[n, H·W]``

        Walks all rows back from the target together; at each step every row's current cell moves to
        its neighbour of least ``(d, L)``, first in direction order (the rule of `_trace`).
        """
        h, w, n = self.height, self.width, dist.shape[-1]
        pw = w + 2  # padded row length
        d_flat, l_flat = dist.ravel(), level.ravel()  # entry (p, row) at p·n + row
        offsets = [(dr * pw + dc) * n for dr, dc in self._steps]
        source = pw + 1  # padded index of cell (0, 0)
        state = np.zeros((n, h * w), dtype=dist.dtype)
        rows = np.flatnonzero(np.isfinite(dist[h, w]))  # overflowed rows stay 0 (NaN-masked later)
        cur = np.full(rows.size, h * pw + w)  # padded index of the target   [n]
        for _ in range(h * w):  # a predecessor chain has at most H·W − 1 moves
            r, c = np.divmod(cur, pw)
            state[rows, (r - 1) * w + c - 1] = 1.0
            moving = cur != source
            if not moving.any():
                break
            rows, cur = rows[moving], cur[moving]
            at = cur * n + rows  # flat index of each row's current cell   [n']
            best = at + offsets[0]
            best_d, best_l = d_flat.take(best), l_flat.take(best)
            for off in offsets[1:]:
                u = at + off
                d_u, l_u = d_flat.take(u), l_flat.take(u)
                better = (d_u < best_d) | ((d_u == best_d) & (l_u < best_l))
                best_d = np.where(better, d_u, best_d)
                best_l = np.where(better, l_u, best_l)
                best = np.where(better, u, best)
            cur = (best - rows) // n
        return state

    def _trace(self, dist: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        """0/1 path masks from converged distances and levels ``[H+2, W+2, N]``.  → ``[N, H·W]``"""
        h, w, n = self.height, self.width, dist.shape[-1]
        device = dist.device
        best_d = torch.full((h, w, n), float("inf"), dtype=dist.dtype, device=device)
        best_l = torch.full((h, w, n), torch.iinfo(torch.int32).max, dtype=torch.int32, device=device)
        best_k = torch.zeros((h, w, n), dtype=torch.int64, device=device)
        for k, (dr, dc) in enumerate(self._steps):  # first minimum of (d(u), L(u)) in direction order
            d_u = dist[1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w]  # [H, W, N]
            l_u = level[1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w]
            better = (d_u < best_d) | ((d_u == best_d) & (l_u < best_l))
            best_d = torch.where(better, d_u, best_d)
            best_l = torch.where(better, l_u, best_l)
            best_k.masked_fill_(better, k)
        offsets = self._offsets.get(device)
        if offsets is None:  # one host → device copy per device, made on the first call (no sync)
            offsets = upload(torch.tensor([dr * w + dc for dr, dc in self._steps], dtype=torch.int64), device)
            self._offsets[device] = offsets
        cells = torch.arange(h * w, device=device)
        pred = cells + offsets[best_k.reshape(h * w, n).T]  # predecessor of every cell   [N, H·W]
        pred[:, 0] = 0  # the source points at itself
        pred = pred.clamp_(0, h * w - 1)  # only overflowed rows (NaN-masked) can point off the grid
        mark = torch.zeros((n, h * w), dtype=dist.dtype, device=device)
        mark[:, h * w - 1] = 1.0  # the target
        one = mark.new_ones(())
        for _ in range(max(1, math.ceil(math.log2(h * w)))):  # mark ∪= pred^(2^j)(mark): the prefix doubles
            mark = torch.minimum(mark.scatter_add(1, pred, mark), one)
            pred = pred.gather(1, pred)
        return mark

    def __repr__(self) -> str:
        backend = "" if self.backend == "auto" else f", backend={self.backend!r}"
        return (
            f"TorchGridShortestPath({self.height}×{self.width}, neighbourhood={self.neighbourhood}{backend})"
        )
