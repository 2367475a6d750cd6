"""GPU check and benchmark of the device-native assignment and spanning-tree oracles, in one run.

    PYTHONPATH=. python scripts/gpu_graphs.py                        # CUDA (under 90 s on an H100)
    PYTHONPATH=. python scripts/gpu_graphs.py --device cpu --quick   # a dry run of the script on the CPU

1. Checks the device's states: ``TorchMatching`` against SciPy's ``linear_sum_assignment(maximize=True)``
   row by row (float32 and float64 weights, integer ties, constant matrices, forbidden ``-inf`` pairs,
   rectangular and degenerate shapes), and ``TorchSpanningTree`` against the CPU oracle (ties included)
   and against the total weight of NetworkX's minimum spanning tree; NaN rows come back NaN; on CUDA,
   no call synchronises the host (``torch.cuda.set_sync_debug_mode("error")``).
2. Prints instances per second at batch 4096 for n = 8 … 256: the oracle on the device against SciPy
   in a loop (assignment) and NetworkX in a loop (spanning tree); the references are timed on the
   first instances of the batch and counted per instance.
3. Prints the CPU oracle (SciPy on ``torch.get_num_threads()`` threads, and on one thread) against the
   SciPy loop at n ≤ 64, batches 256 and 4096.

Exits with status 1 when a check fails. Needs torch, numpy, scipy and networkx.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from imle_solvers import TorchMatching, TorchSpanningTree

FAILURES: list[str] = []


def check(ok: bool, what: str) -> None:
    if not ok:
        FAILURES.append(what)
        print(f"FAIL {what}", flush=True)


def seconds(fn: Callable[[], Any], device: str, reps: int) -> float:
    """Median wall time of ``fn`` (after one warm-up call), synchronising around CUDA calls; one
    timed call only when the warm-up took over 2 s."""
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    reps = 1 if time.perf_counter() - start > 2.0 else reps
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def scipy_states(w: np.ndarray, r: int, c: int) -> np.ndarray:
    """SciPy's assignment of each row of ``w`` as a 0/1 state; NaN rows where SciPy refuses."""
    out = np.zeros(w.shape)
    for k, row in enumerate(w):
        try:
            i, j = linear_sum_assignment(row.reshape(r, c), maximize=True)
        except ValueError:  # NaN / +inf entries, or no assignment avoiding the -inf pairs
            out[k] = np.nan
            continue
        out[k, i * c + j] = 1.0
    return out


def same(a: torch.Tensor, b: np.ndarray) -> bool:
    a_np = a.double().cpu().numpy()
    return bool(
        np.array_equal(np.isnan(a_np), np.isnan(b)) and np.array_equal(np.nan_to_num(a_np), np.nan_to_num(b))
    )


def check_matching(device: str, quick: bool) -> None:
    rng = np.random.default_rng(0)
    shapes = [(1, 1), (1, 6), (6, 1), (8, 8), (5, 11), (11, 5), (32, 32)]
    shapes += [] if quick else [(64, 40), (40, 64), (128, 128), (256, 256)]
    for r, c in shapes:
        oracle, m = TorchMatching(r, c), r * c
        n = 64 if m <= 4096 else 12
        forbidden = rng.integers(0, 3, (n, m)).astype(np.float64)
        forbidden[rng.random((n, m)) < 0.2] = -np.inf
        bad = rng.normal(size=(n, m))
        bad[1, 0], bad[2, -1] = np.nan, np.inf
        cases = {
            "float32": torch.from_numpy(rng.normal(size=(n, m))).float(),
            "float64": torch.from_numpy(rng.normal(size=(n, m))),
            "integer ties": torch.from_numpy(rng.integers(-2, 3, (n, m)).astype(np.float64)),
            "constant": torch.zeros(n, m, dtype=torch.float64),
            "forbidden pairs": torch.from_numpy(forbidden),
            "NaN / +inf rows": torch.from_numpy(bad),
        }
        for name, w in cases.items():
            expected = scipy_states(w.double().numpy(), r, c)
            if device == "cpu":  # the CPU raises typed errors for bad rows: compare the others
                keep = ~np.isnan(expected).any(axis=1)
                z = oracle.solve_torch(w[torch.from_numpy(keep)])
                ok = same(z, expected[keep])
            else:
                z = oracle.solve_torch(w.to(device))
                ok = z.device.type == device and z.dtype == w.dtype and same(z, expected)
            check(ok, f"TorchMatching({r}, {c}) on {device}, {name}: states differ from SciPy's")
    print(f"assignment states checked: {len(shapes)} shapes × 6 weight kinds", flush=True)


def random_graph(n: int, m: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A connected graph: a random spanning path, then random distinct pairs up to ``m`` edges."""
    order = rng.permutation(n).tolist()
    edges = {(min(a, b), max(a, b)) for a, b in itertools.pairwise(order)}
    while len(edges) < min(m, n * (n - 1) // 2):
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            edges.add((min(a, b), max(a, b)))
    return sorted(edges)


def check_spanning_tree(device: str, quick: bool) -> None:
    import networkx as nx

    rng = np.random.default_rng(1)
    sizes = [(2, 1), (8, 28), (32, 128)] + ([] if quick else [(128, 512), (256, 1024)])
    for n, m in sizes:
        edges = [*random_graph(n, m, rng), (0, 0)]  # and a self-loop, never chosen
        for kind in ("min", "max"):
            oracle = TorchSpanningTree(n, edges, kind=kind)
            for w in (
                torch.from_numpy(rng.normal(size=(128, len(edges)))).float(),
                torch.from_numpy(rng.integers(-1, 2, (128, len(edges))).astype(np.float64)),
            ):
                cpu = oracle.solve_torch(w)
                z = oracle.solve_torch(w.to(device))
                check(torch.equal(z.cpu(), cpu), f"TorchSpanningTree({n}, {m}, {kind}) on {device} ≠ CPU")
                graph = nx.Graph()
                graph.add_nodes_from(range(n))
                for row, state in zip(w[:4].double().numpy(), z[:4].double().cpu().numpy()):
                    for (a, b), x in zip(edges, row.tolist()):
                        if a != b:
                            graph.add_edge(a, b, weight=x)
                    tree = (nx.minimum_spanning_tree if kind == "min" else nx.maximum_spanning_tree)(graph)
                    check(
                        abs(float(state @ row) - tree.size(weight="weight"))
                        < 1e-6 * max(1.0, np.abs(row).sum()),
                        f"TorchSpanningTree({n}, {m}, {kind}) on {device}: weight ≠ NetworkX's",
                    )
    nan = torch.zeros(3, 3)
    nan[1, 1] = float("nan")
    if device != "cpu":
        z = TorchSpanningTree(3, [(0, 1), (1, 2), (0, 2)]).solve_torch(nan.to(device))
        check(bool(z[1].isnan().all()) and not bool(z[[0, 2]].isnan().any()), "NaN row not NaN on the device")
    print(f"spanning-tree states checked: {len(sizes)} graphs × 2 kinds × 2 weight kinds", flush=True)


def check_no_sync(device: str) -> None:
    if device != "cuda":
        return
    match, tree = (
        TorchMatching(24, 24),
        TorchSpanningTree(64, random_graph(64, 256, np.random.default_rng(2))),
    )
    wm, wt = (
        torch.rand(256, 576, device="cuda"),
        torch.rand(256, tree.n_vars, device="cuda", dtype=torch.float64),
    )
    match.solve_torch(wm), tree.solve_torch(wt), tree.solve_torch(wt.float())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        match.solve_torch(wm), tree.solve_torch(wt), tree.solve_torch(wt.float())
        ok = True
    except RuntimeError as exc:
        print(exc)
        ok = False
    finally:
        torch.cuda.set_sync_debug_mode("default")
    check(ok, "a device solve synchronised the host")
    print("no host synchronisation: checked", flush=True)


def scipy_loop(ref: np.ndarray) -> None:
    for x in ref:  # [n, n] float64
        linear_sum_assignment(x, True)


def networkx_loop(nx: Any, graph: Any, edges: list[tuple[int, int]], ref: np.ndarray) -> None:
    for row in ref:  # the weights written into the graph, then NetworkX's Kruskal
        for (a, b), x in zip(edges, row.tolist()):
            graph[a][b]["weight"] = x
        nx.minimum_spanning_tree(graph)


def bench(device: str, quick: bool, batch: int | None = None, sizes: tuple[int, ...] | None = None) -> None:
    import networkx as nx

    batch = batch or (256 if quick else 4096)
    sizes = sizes or ((8, 32) if quick else (8, 16, 32, 64, 128, 256))
    ref_cap = {8: 1024, 16: 512, 32: 256, 64: 128, 128: 32, 256: 16}
    rng = np.random.default_rng(3)
    print(f"\n| assignment n×n, batch {batch} | {device} inst/s | SciPy loop inst/s | speed-up |")
    print("|---|---|---|---|")
    for n in sizes:
        oracle = TorchMatching(n, n)
        w = torch.from_numpy(rng.random((batch, n * n))).float()
        w_dev = w.to(device)
        t_dev = seconds(partial(oracle.solve_torch, w_dev), device, 3)
        k = min(batch, ref_cap[n])
        ref = w[:k].double().numpy().reshape(k, n, n)
        t_ref = seconds(partial(scipy_loop, ref), "cpu", 1) / k * batch
        print(f"| {n}×{n} | {batch / t_dev:,.0f} | {batch / t_ref:,.0f} | {t_ref / t_dev:.1f}× |", flush=True)
    title = f"spanning tree, n nodes, 4n edges, batch {batch}"
    print(f"\n| {title} | {device} inst/s | NetworkX loop inst/s | speed-up |")
    print("|---|---|---|---|")
    for n in sizes:
        edges = random_graph(n, 4 * n, rng)
        oracle = TorchSpanningTree(n, edges)
        w = torch.from_numpy(rng.random((batch, len(edges)))).float()
        w_dev = w.to(device)
        t_dev = seconds(partial(oracle.solve_torch, w_dev), device, 3)
        graph = nx.Graph(edges)
        k = min(batch, ref_cap[n] // 4)
        ref = w[:k].double().numpy()
        t_ref = seconds(partial(networkx_loop, nx, graph, edges, ref), "cpu", 1) / k * batch
        print(
            f"| n = {n} ({len(edges)} edges) | {batch / t_dev:,.0f} | {batch / t_ref:,.0f} "
            f"| {t_ref / t_dev:.1f}× |",
            flush=True,
        )


def bench_cpu(quick: bool) -> None:
    threads = torch.get_num_threads()
    rng = np.random.default_rng(4)
    print(f"\n| CPU assignment | batch | SciPy loop µs/inst | TorchMatching, {threads} threads | 1 thread |")
    print("|---|---|---|---|---|")
    for n in (8, 32) if quick else (8, 16, 32, 64):
        oracle = TorchMatching(n, n)
        for batch in (256,) if quick else (256, 4096):
            w = torch.from_numpy(rng.random((batch, n * n)))
            ref = w.numpy().reshape(batch, n, n)
            t_ref = seconds(partial(scipy_loop, ref), "cpu", 3)
            t_all = seconds(partial(oracle.solve_torch, w), "cpu", 3)
            torch.set_num_threads(1)
            try:
                t_one = seconds(partial(oracle.solve_torch, w), "cpu", 3)
            finally:
                torch.set_num_threads(threads)
            per = 1e6 / batch
            print(
                f"| {n}×{n} | {batch} | {t_ref * per:.2f} | {t_all * per:.2f} ({t_ref / t_all:.2f}×) "
                f"| {t_one * per:.2f} ({t_ref / t_one:.2f}×) |",
                flush=True,
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and batch 256: seconds")
    parser.add_argument(
        "--batch", type=int, default=None, help="the benchmark's batch (default 4096; 256 with --quick)"
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="the benchmark's n (default 8 … 256; 8 32 with --quick)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available; run with --device cpu for a dry run")
        return 1
    start = time.perf_counter()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; CPU threads {torch.get_num_threads()}", flush=True)
    check_matching(args.device, args.quick)
    check_spanning_tree(args.device, args.quick)
    check_no_sync(args.device)
    print(f"checks done in {time.perf_counter() - start:.1f} s: {len(FAILURES)} failure(s)", flush=True)
    bench(args.device, args.quick, args.batch, tuple(args.sizes) if args.sizes else None)
    bench_cpu(args.quick)
    print(f"\ntotal {time.perf_counter() - start:.1f} s; {len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
