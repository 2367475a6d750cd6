"""The shortest augmenting path assignment of SciPy's ``linear_sum_assignment`` as one Triton kernel.

One program solves one instance: the rows are augmented one after the other (Crouse 2016, the
algorithm and the arithmetic of SciPy's ``rectangular_lsap.cpp`` since SciPy 1.10), each by a
Dijkstra search over the columns whose steps are vector operations over the ``BLOCK ≥ n_cols``
lanes of the program. Every float operation is SciPy's, in its order and in float64, and every
choice among equal values follows SciPy's scan order, so the kernel returns SciPy's assignment,
ties included. Triton is imported on the first `kernel` call, not with this module.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["kernel", "launch_config", "solve"]

triton: Any = None  # the modules, set by `kernel` (the kernel's source resolves `tl` here)
tl: Any = None


def _lsap_program(  # type: ignore[no-untyped-def]
    cost_ptr, ok_ptr, col4row_ptr, status_ptr, n_rows, n_cols, BLOCK: tl.constexpr
):
    """Solve instance ``program_id(0)``: costs ``[n_rows, n_cols]`` (``n_rows ≤ n_cols``, float64,
    minimised) → ``col4row`` (the column of every row) and ``status`` (0 solved, 1 infeasible, 2 a
    loop bound was hit, which the algorithm never does)."""
    b = tl.program_id(0).to(tl.int64)
    base = cost_ptr + b * n_rows * n_cols
    offs = tl.arange(0, BLOCK)  # lane = column j (column vectors) or row i (row vectors)
    cols = offs < n_cols
    inf_vec = tl.full([BLOCK], float("inf"), tl.float64)
    u = tl.zeros([BLOCK], tl.float64)  # row duals                                  [rows]
    v = tl.zeros([BLOCK], tl.float64)  # column duals                               [cols]
    col4row = tl.full([BLOCK], -1, tl.int32)
    row4col = tl.full([BLOCK], -1, tl.int32)
    path = tl.full([BLOCK], -1, tl.int32)  # row from which each column was last reached
    n_todo = tl.where(tl.load(ok_ptr + b) != 0, n_rows, 0)
    status = tl.zeros([], tl.int32)
    cur = tl.zeros([], tl.int32)
    while cur < n_todo:
        # -- shortest augmenting path from row `cur` (SciPy's augmenting_path) -------------------
        spc = inf_vec  # shortest path costs
        taken = ~cols  # SC: columns already scanned (lanes past n_cols never take part)
        seen = offs == cur  # SR: rows scanned
        via = tl.zeros([BLOCK], tl.float64)  # spc of the column through which each row was reached
        rank = (n_cols - 1 - offs).to(tl.int32)  # position in SciPy's `remaining` (filled reversed)
        n_left = n_cols
        min_val = tl.zeros([], tl.float64)
        i = cur
        u_i = tl.sum(tl.where(offs == cur, u, 0.0), axis=0)
        sink = tl.full([], -1, tl.int32)
        while (sink < 0) & (n_left > 0):  # (a free column always exists: n_left bounds the loop anyway)
            seen = seen | (offs == i)
            c = tl.load(base + i.to(tl.int64) * n_cols + offs, mask=cols, other=float("inf"))
            r = min_val + c - u_i - v  # r = minVal + cost[i, j] − u[i] − v[j], left to right
            open_ = ~taken
            better = open_ & (r < spc)
            path = tl.where(better, i, path)
            spc = tl.where(better, r, spc)
            lowest = tl.min(tl.where(open_, spc, inf_vec), axis=0)
            # SciPy's scan keeps the first minimum in `remaining` order, unless a later (or that)
            # minimum is a free column: then the last free one. Encoded as one max over the lanes.
            tie = open_ & (spc == lowest)
            key = tl.where(tie & (row4col < 0), 2 * BLOCK + rank, tl.where(tie, BLOCK - 1 - rank, -1))
            best = tl.max(key * BLOCK + offs, axis=0)
            j = (best % BLOCK).to(tl.int32)
            best_key = best // BLOCK
            pos = tl.where(best_key >= 2 * BLOCK, best_key - 2 * BLOCK, BLOCK - 1 - best_key).to(tl.int32)
            min_val = lowest
            mate = tl.sum(tl.where(offs == j, row4col, 0), axis=0)
            # remaining[index] = remaining[--num_remaining]: the last one moves to the chosen position
            rank = tl.where(open_ & (rank == n_left - 1), pos, rank)
            taken = taken | (offs == j)
            n_left -= 1
            if lowest == float("inf"):  # no column reachable: infeasible (SciPy returns −1)
                status = tl.full([], 1, tl.int32)
                sink = tl.full([], 0, tl.int32)
                n_todo = cur
            elif mate < 0:
                sink = j
            else:
                via = tl.where(offs == mate, lowest, via)
                i = mate
                u_i = tl.sum(tl.where(offs == mate, u, 0.0), axis=0)
        if sink < 0:  # never taken (the rows ≤ the columns): a guard against an endless kernel
            status = tl.full([], 2, tl.int32)
            n_todo = cur
        if status == 0:
            # -- dual update: u[cur] += minVal; u[i] += minVal − spc[col4row[i]]; v[j] −= minVal − spc[j]
            u = tl.where(offs == cur, u + min_val, u)
            u = tl.where(seen & (offs != cur), u + (min_val - via), u)
            v = tl.where(taken & cols, v - (min_val - spc), v)
            # -- augment along the path back to row `cur`
            j = sink
            done = tl.zeros([], tl.int32)
            hops = tl.zeros([], tl.int32)
            while (done == 0) & (hops <= cur):  # the path back to row `cur` has at most cur + 1 hops
                i = tl.sum(tl.where(offs == j, path, 0), axis=0)
                row4col = tl.where(offs == j, i, row4col)
                nxt = tl.sum(tl.where(offs == i, col4row, 0), axis=0)
                col4row = tl.where(offs == i, j, col4row)
                j = nxt
                hops += 1
                done = (i == cur).to(tl.int32)
            if done == 0:  # never taken: the same guard
                status = tl.full([], 2, tl.int32)
                n_todo = cur
            cur += 1
    tl.store(col4row_ptr + b * n_rows + offs, col4row, mask=offs < n_rows)
    tl.store(status_ptr + b, status)


_KERNEL: list[Any] = []


def kernel() -> Any:
    """The kernel, decorated on first use (``triton.jit``; Triton's CPU interpreter when the
    environment sets ``TRITON_INTERPRET=1`` before Triton is imported)."""
    global triton, tl
    if not _KERNEL:
        import triton as triton_module
        import triton.language as language

        triton, tl = triton_module, language
        _KERNEL.append(triton.jit(_lsap_program, do_not_specialize=["n_rows", "n_cols"]))
    return _KERNEL[0]


def launch_config(n_cols: int) -> tuple[int, int]:
    """``(BLOCK, num_warps)`` of an instance with ``n_cols`` columns."""
    block = max(16, 1 << max(0, n_cols - 1).bit_length())  # the next power of two
    return block, 1 if block <= 64 else 2 if block <= 128 else 4 if block <= 512 else 8


def solve(cost: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Assign ``[B, R, C]`` float64 costs (``R ≤ C ≤ MAX_COLS``, minimised; rows with ``ok`` false are
    skipped) → ``col4row [B, R]`` int32 and ``status [B]`` int32 (0 solved, 1 infeasible, 2 a loop bound
    hit: never, by construction; the caller treats any nonzero status as a failed row)."""
    n, rows, cols = cost.shape
    col4row = torch.full((n, rows), -1, dtype=torch.int32, device=cost.device)
    status = torch.zeros(n, dtype=torch.int32, device=cost.device)
    if n == 0:
        return col4row, status
    block, warps = launch_config(cols)
    kernel()[(n,)](
        cost.contiguous(),
        ok.to(torch.int8),
        col4row,
        status,
        rows,
        cols,
        BLOCK=block,
        num_warps=warps,
        enable_fp_fusion=False,  # additions only, but never a fused multiply-add: SciPy's roundings
    )
    return col4row, status
