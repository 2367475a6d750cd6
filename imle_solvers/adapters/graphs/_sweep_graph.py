"""A chunk of grid sweeps recorded once as a CUDA graph and replayed: one launch instead of ~70.

[`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath] converges by chunks of Jacobi sweeps of about
nine small kernels each; at Warcraft sizes the host spends more time launching them than the GPU spends
running them. A `SweepGraph` records one chunk on static buffers for one problem shape and replays it; the
sweep index lives on the device, so the same recording serves every chunk.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

GRAPHS_KEPT = 4
"""Recorded shapes kept per oracle (a training batch and an evaluation batch, and a few spares)."""

Sweeps = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]
"""``sweeps(dist, level, w, first, count)`` → device flag "the last sweep changed something"."""


class SweepGraph:
    """``count`` sweeps recorded as one CUDA graph on static ``dist``, ``level``, ``w`` and ``k`` buffers.

    Recording waits on the current stream through a side stream (events, no host synchronisation), and
    runs no kernel: the buffers are only read and written by replays. It checks for unsafe CUDA calls in
    this thread only, so that other threads (solving on other oracles, copying data) are not disturbed.

    Parameters
    ----------
    sweeps
        The sweep chunk to record; ``first`` is a device counter it advances once per sweep.
    shape
        ``(H + 2, W + 2, N)``, the padded distance grid.
    dtype
        Of the distances (and the costs).
    device
        Of the distances (and the costs).
    count
        Sweeps per replay.
    """

    def __init__(
        self,
        sweeps: Sweeps,
        shape: tuple[int, int, int],
        dtype: torch.dtype,
        device: torch.device,
        count: int,
    ) -> None:
        h2, w2, n = shape
        self.count = count
        self.dist = torch.empty(shape, dtype=dtype, device=device)  # d   [H+2, W+2, N]
        self.level = torch.empty(shape, dtype=torch.int32, device=device)  # L   [H+2, W+2, N]
        self.w = torch.empty((h2 - 2, w2 - 2, n), dtype=dtype, device=device)  # c   [H, W, N]
        self.k = torch.ones((), dtype=torch.int32, device=device)  # index of the next sweep
        self.graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)  # the buffers' allocation is ordered before the recording
        with torch.cuda.stream(side):
            self.graph.capture_begin(capture_error_mode="thread_local")  # other threads may go on working
            try:
                self.changed = sweeps(self.dist, self.level, self.w, self.k, count)  # flag   []
            finally:
                self.graph.capture_end()
        current.wait_stream(side)

    def start(self, w: torch.Tensor) -> None:
        """Load a problem (stream-ordered): costs ``w`` ``[H, W, N]``, ``d = +∞`` but ``d(s) = w(s)``,
        ``L = 0``."""
        self.w.copy_(w)
        self.dist.fill_(float("inf"))
        self.dist[1, 1].copy_(w[0, 0])  # d(s) = w(s)
        self.level.zero_()
        self.k.fill_(1)

    def replay(self) -> torch.Tensor:
        """Run the next ``count`` sweeps; → the device flag "the last one changed something"."""
        self.graph.replay()
        return self.changed


class SweepGraphs:
    """The recorded `SweepGraph` of each shape and stream, the most recently used `GRAPHS_KEPT`.

    A graph's buffers serve one solve at a time: callers hold `lock` from `get` until their results are
    copied out, and each CUDA stream gets its own graph, so that work queued on two streams never shares
    them.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Held while a solve uses a graph's buffers."""
        self._graphs: OrderedDict[tuple[object, ...], SweepGraph] = OrderedDict()

    def get(
        self,
        sweeps: Sweeps,
        shape: tuple[int, int, int],
        dtype: torch.dtype,
        device: torch.device,
        count: int,
    ) -> SweepGraph:
        """The graph for this padded shape, dtype, device and the current stream, recorded on first use."""
        stream = torch.cuda.current_stream(device).cuda_stream
        key = (shape, dtype, device, count, stream)
        graph = self._graphs.get(key)
        if graph is None:
            graph = SweepGraph(sweeps, shape, dtype, device, count)
            self._graphs[key] = graph
            while len(self._graphs) > GRAPHS_KEPT:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        return graph

    def __len__(self) -> int:
        return len(self._graphs)

    def __reduce__(self) -> tuple[type[SweepGraphs], tuple[()]]:
        return SweepGraphs, ()  # pickled and deep-copied empty: graphs and locks stay with their process
