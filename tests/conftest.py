"""Shared test configuration: deterministic hypothesis profile, torch threads pinned, Ctrl-C deliverable."""

from __future__ import annotations

import os
import signal

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

# A run started in the background by a non-interactive shell (`nohup`, `cmd &`, some CI agents) inherits
# SIGINT ignored, and so would every child interpreter the Ctrl-C tests start, which then never sees its
# KeyboardInterrupt. Python's own handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "default",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "40")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")
