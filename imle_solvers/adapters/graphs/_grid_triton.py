"""The grid shortest path as one fused Triton kernel: one program per map, sweeps to a fixed point inside.

[`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath] uses this module only where it runs the
kernel (CUDA weights and Triton importable, or ``backend="triton"``). Triton is imported on the first
`kernel` call, not with this module, so that the
module imports (and its documentation builds, and the test suite collects) without Triton installed.
The kernel computes exactly what the torch code path of ``torch_grid.py`` computes (the reference):

* costs are read in their own dtype and converted to float32 (float64 stays float64), as ``.to()`` does;
  a row with a negative or NaN cost comes back all-NaN, the others are clamped at 0 (a no-op for them);
* ``d(s) = w(s)``, ``d = +∞`` elsewhere and on a padding border, ``L = 0``; Jacobi sweep ``k`` sets
  ``d(v) ← min(d(v), w(v) + min_{u ~ v} d(u))`` from the previous sweep's ``d`` and ``L(v) ← k`` where
  ``d(v)`` strictly decreased, until a sweep changes nothing or ``H·W`` sweeps ran (a fixed point either
  way, so the chunked, early-stopping torch loop ends at the same ``d`` and ``L``);
* each cell's predecessor is its neighbour of least ``(d, L)``, first in the direction order N, S, W, E,
  NW, NE, SW, SE, with the border taking part as ``(+∞, 0)``; the path is the predecessor chain from the
  bottom-right cell to the source (the set that the torch path's pointer doubling marks);
* a row whose distance to the target is not finite (overflow, or an infinite cost in the way) comes
  back all-NaN.

Only comparisons, one addition per candidate and index arithmetic touch the costs, so the states are
bit-identical to the torch path's.

The distance field of the current sweep lives in registers. Neighbour values are exchanged through a
small per-map scratch row in global memory (``2 × (H+2)·(W+2)`` values, written and read by one thread
block, so it stays in L1/L2), two copies used in turn so that one barrier per sweep separates the writes
of a sweep from its reads.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["default_warps", "interpreted", "kernel", "solve_grid"]

triton: Any = None  # the modules, set by `kernel` (the kernel's source resolves `tl` here)
tl: Any = None


# Triton reads a kernel's parameter annotations itself (``tl.constexpr``): the others stay unannotated.
def _grid_path_program(  # type: ignore[no-untyped-def]
    w_ptr,
    out_ptr,
    dist_ptr,
    aux_ptr,
    H: tl.constexpr,
    W: tl.constexpr,
    EIGHT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK: tl.constexpr,
    PBLOCK: tl.constexpr,
):
    """One map per program: costs ``w[row]`` ``[H·W]`` → 0/1 path mask ``out[row]`` ``[H·W]``.

    ``dist`` ``[N, 2, P]`` and ``aux`` ``[N, P]`` (int32) are scratch, ``P = (H+2)·(W+2)`` padded cells.
    """
    PW: tl.constexpr = W + 2  # padded row length
    P: tl.constexpr = (H + 2) * (W + 2)
    HW: tl.constexpr = H * W
    SRC: tl.constexpr = PW + 1  # padded index of cell (0, 0)
    TGT: tl.constexpr = H * PW + W  # padded index of cell (H-1, W-1)
    row = tl.program_id(0).to(tl.int64)
    d0 = dist_ptr + row * (2 * P)
    aux = aux_ptr + row * P
    i = tl.arange(0, BLOCK)  # cell, row-major   [BLOCK ≥ H·W]
    valid = i < HW
    p = (i // W + 1) * PW + i % W + 1  # its padded index

    raw = tl.load(w_ptr + row * HW + i, mask=valid, other=0.0)
    if FP64:
        raw = raw.to(tl.float64)
    else:
        raw = raw.to(tl.float32)
    invalid = tl.max(tl.where(valid & ~(raw >= 0), 1, 0), axis=0)  # a negative or NaN cost   []
    w = tl.maximum(raw, 0.0)  # c ≥ 0 (rows with a negative cost are masked at the end)
    inf = tl.zeros([BLOCK], dtype=w.dtype) + float("inf")

    # border: d = +∞ in both copies, L = 0
    j = tl.arange(0, PBLOCK)
    tl.store(d0 + j, tl.zeros([PBLOCK], dtype=w.dtype) + float("inf"), mask=j < 2 * P)
    tl.store(d0 + PBLOCK + j, tl.zeros([PBLOCK], dtype=w.dtype) + float("inf"), mask=j < 2 * P - PBLOCK)
    tl.store(aux + j, tl.zeros([PBLOCK], dtype=tl.int32), mask=j < P)

    d = tl.where(i == 0, w, inf)  # d(s) = w(s)   [BLOCK]
    lvl = tl.zeros([BLOCK], dtype=tl.int32)  # L
    k = tl.program_id(0) * 0  # sweeps done   []
    go = k == 0
    while go:  # Jacobi sweep k
        k += 1
        at = d0 + (k % 2) * P + p  # this sweep's copy (the other may still be read by the last sweep)
        tl.store(at, d, mask=valid)
        tl.debug_barrier()  # every d of the last sweep is written
        m = tl.minimum(
            tl.load(at - PW, mask=valid, other=float("inf")),  # N
            tl.load(at + PW, mask=valid, other=float("inf")),  # S
        )
        m = tl.minimum(m, tl.load(at - 1, mask=valid, other=float("inf")))  # W
        m = tl.minimum(m, tl.load(at + 1, mask=valid, other=float("inf")))  # E
        if EIGHT:  # the cell itself, in the torch path's 3×3 minimum, never improves on d(v)
            m = tl.minimum(m, tl.load(at - (PW + 1), mask=valid, other=float("inf")))
            m = tl.minimum(m, tl.load(at - (PW - 1), mask=valid, other=float("inf")))
            m = tl.minimum(m, tl.load(at + (PW - 1), mask=valid, other=float("inf")))
            m = tl.minimum(m, tl.load(at + (PW + 1), mask=valid, other=float("inf")))
        cand = w + m  # w(v) + min_{u ~ v} d(u)
        improved = valid & (cand < d)  # strict decrease
        d = tl.where(improved, cand, d)
        lvl = tl.where(improved, k, lvl)  # L(v) = last sweep that lowered d(v)
        go = (tl.max(improved.to(tl.int32), axis=0) > 0) & (k < HW)

    # predecessors: neighbour of least (d, L), first in direction order
    fin = d0 + ((k + 1) % 2) * P + p  # the copy no sweep reads any more
    tl.store(fin, d, mask=valid)
    la = aux + p
    tl.store(la, lvl, mask=valid)
    tl.debug_barrier()
    best_q = p - PW  # N, then the other directions in order: strictly smaller (d, L) replaces it
    best_d = tl.load(fin - PW, mask=valid, other=float("inf"))
    best_l = tl.load(la - PW, mask=valid, other=0)
    for t in tl.static_range(1, 8 if EIGHT else 4):  # S, W, E, NW, NE, SW, SE (unrolled)
        dr = 1 if t == 1 else 0 if t < 4 else -1 if t < 6 else 1  # row step
        dc = 0 if t == 1 else -1 if t == 2 else 1 if t == 3 else -1 if t % 2 == 0 else 1  # column step
        d_u = tl.load(fin + (dr * PW + dc), mask=valid, other=float("inf"))
        l_u = tl.load(la + (dr * PW + dc), mask=valid, other=0)
        better = (d_u < best_d) | ((d_u == best_d) & (l_u < best_l))
        best_d = tl.where(better, d_u, best_d)
        best_l = tl.where(better, l_u, best_l)
        best_q = tl.where(better, p + (dr * PW + dc), best_q)
    tl.debug_barrier()  # every L was read: aux now holds the predecessors
    tl.store(la, best_q, mask=valid)
    tl.debug_barrier()

    # the path: predecessor chain from the target back to the source (≤ H·W − 1 moves)
    cur = tl.program_id(0) * 0 + TGT  # []
    mark = p == TGT
    steps = tl.program_id(0) * 0
    while (cur != SRC) & (steps < HW):
        cur = tl.load(aux + cur)
        mark = mark | (p == cur)
        steps += 1

    end = tl.min(tl.where(i == HW - 1, d, inf), axis=0)  # d(t)   []
    bad = (invalid > 0) | ~(end < float("inf"))  # negative/NaN costs, overflowed sums, t unreachable
    state = tl.where(mark, 1.0, 0.0)
    state = tl.where(bad, float("nan"), state)
    tl.store(out_ptr + row * HW + i, state.to(out_ptr.dtype.element_ty), mask=valid)


def _next_pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


_KERNEL: list[Any] = []


def kernel() -> Any:
    """The kernel, decorated on first use (``triton.jit``; Triton's CPU interpreter when the
    environment sets ``TRITON_INTERPRET=1`` before Triton is imported)."""
    global triton, tl
    if not _KERNEL:
        import triton as triton_module
        import triton.language as language

        triton, tl = triton_module, language
        _KERNEL.append(triton.jit(_grid_path_program))
    return _KERNEL[0]


def interpreted() -> bool:
    """Whether the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1`` was set when this module
    was imported): then it takes CPU tensors, and only then."""
    return type(kernel()).__name__ == "InterpretedFunction"


def default_warps(height: int, width: int) -> int:
    """Warps per program for an ``H × W`` map: 4 from 256 cells on (the fastest or within 10 % of it at
    12×12 and 30×30, 70 and 4,096 maps, on an H100: ``scripts/gpu_grid.py --tune``), fewer for tiny
    maps, more from 2,048 cells (at most 16 cells a thread)."""
    block = _next_pow2(height * width)
    return max(1, min(block // 32, max(4, block // 256)))


def solve_grid(
    w: torch.Tensor,
    height: int,
    width: int,
    eight: bool,
    out_dtype: torch.dtype,
    num_warps: int | None = None,
) -> torch.Tensor:
    """States of ``(N, H·W)`` costs ``w`` (float16, bfloat16, float32 or float64; float64 is solved in
    float64, the others in float32), as ``out_dtype`` ``(N, H·W)``: one kernel launch, no host sync."""
    n, hw = w.shape
    fp64 = w.dtype == torch.float64
    cells = (height + 2) * (width + 2)
    compute = torch.float64 if fp64 else torch.float32
    w = w.contiguous()
    out = torch.empty((n, hw), dtype=out_dtype, device=w.device)
    dist = torch.empty((n, 2, cells), dtype=compute, device=w.device)  # scratch: d, two copies
    aux = torch.empty((n, cells), dtype=torch.int32, device=w.device)  # scratch: L, then predecessors
    block = _next_pow2(hw)
    kernel()[(n,)](
        w,
        out,
        dist,
        aux,
        H=height,
        W=width,
        EIGHT=eight,
        FP64=fp64,
        BLOCK=block,
        PBLOCK=_next_pow2(cells),
        num_warps=num_warps or default_warps(height, width),
    )
    return out
