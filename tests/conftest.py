"""Shared test configuration: deterministic hypothesis profile, torch threads pinned."""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

settings.register_profile(
    "default",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "40")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")
