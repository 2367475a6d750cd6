"""Start ``torchrun`` as a user would, in its own process group, and kill the whole group at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from tests.support.paths import ROOT


def torchrun(
    args: Sequence[str], nproc: int = 2, timeout: float = 150, launcher: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node N [LAUNCHER] ARGS`` (a free port: tests may run side by
    side); the agent and every worker it started are killed if they outlive ``timeout`` seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *launcher,
        *args,
    ]
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:  # every process of the launch: the agent and its workers
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)
