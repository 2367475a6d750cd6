"""The pool tests' states and weight batches, and checks on worker processes (alive, gone)."""

from __future__ import annotations

import os
import time

import numpy as np

from tests.support.oracles import k_subsets
from tests.support.pool_oracles import FLAG

STATES = k_subsets(7, 3)  # 35 states: rows of random weights have (almost surely) distinct answers


def batch(n: int, seed: int = 0, flag_row: int | None = None) -> np.ndarray:
    w = np.random.default_rng(seed).normal(size=(n, STATES.shape[1]))
    if flag_row is not None:
        w[flag_row, 0] = FLAG
    return w


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0): look at its state
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids: list[int], seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False
