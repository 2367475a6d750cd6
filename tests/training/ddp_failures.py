"""Run by ``torchrun`` from ``test_torchrun_failures.py``: ``imle-solvers train`` on two processes that go
wrong in one way, each process writing its exit status to ``OUT/status-rank<R>``.

``ddp_failures.py MODE OUT`` with MODE

* ``mismatch``: each process is started with its own ``--seed`` (its rank);
* ``die``: process 1 kills itself (SIGKILL) as its second epoch starts;
* ``hang``: process 1 stops answering (sleeps) as its second epoch starts, ``--dist-timeout 3``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch

ARGS = (
    "train",
    "--problem",
    "shortest-path",
    "--n-train",
    "32",
    "--n-test",
    "16",
    "--epochs",
    "3",
    "--batch-size",
    "8",
    "--methods",
    "spo+",
    "--quiet",
)


def _at_second_epoch(action: Any) -> None:
    """Make this process call ``action`` when its second epoch starts."""
    import imle_solvers.training.loop as loop

    real, epochs = loop._train_epoch, []

    def epoch(*args: Any, **kwargs: Any) -> Any:
        epochs.append(1)
        if len(epochs) == 2:
            action()
        return real(*args, **kwargs)

    loop._train_epoch = epoch


def main(mode: str, out: Path) -> int:
    from imle_solvers import cli

    rank = int(os.environ["RANK"])
    args = [*ARGS, "--dist-timeout", "3" if mode == "hang" else "60"]
    if mode == "mismatch":
        args += ["--seed", str(rank)]
    elif mode == "die" and rank == 1:
        _at_second_epoch(lambda: os.kill(os.getpid(), signal.SIGKILL))
    elif mode == "hang" and rank == 1:
        _at_second_epoch(lambda: time.sleep(600))
    status = cli.main(args)
    (out / f"status-rank{rank}").write_text(str(status))
    return status


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
