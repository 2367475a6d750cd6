"""Backend names → runner classes: the one place in the pool that knows the names.

Each backend module is imported when a pool of that backend is created (the Dask one imports
``distributed`` only when it first connects); the modules import the interface (`_runner.py`), never
this registry, so the pool's modules form no import cycle.
"""

from __future__ import annotations

import importlib
from typing import Literal

from ._runner import Runner, RunnerOptions

__all__ = ["BACKENDS", "Backend", "make_runner"]

Backend = Literal["process", "thread", "serial", "dask"]

BACKENDS: dict[str, tuple[str, str]] = {
    "process": ("._process", "ProcessRunner"),
    "thread": ("._thread", "ThreadRunner"),
    "serial": ("._serial", "SerialRunner"),
    "dask": ("._dask", "DaskRunner"),
}
"""Backend name → (module, runner class)."""

_CLUSTER_BACKENDS = ("dask",)  # the backends that take ``client`` / ``dask_address``


def make_runner(backend: str, options: RunnerOptions) -> Runner:
    """The runner of ``backend`` (it checks its options now and starts its workers lazily).

    Raises
    ------
    ValueError
        ``dask_address`` or ``client`` given to another backend, or a runner's own option check.
    """
    if (options.dask_address is not None or options.client is not None) and backend not in _CLUSTER_BACKENDS:
        raise ValueError("dask_address / client only apply to backend='dask'")
    module, name = BACKENDS[backend]
    runner: Runner = getattr(importlib.import_module(module, __package__), name)(options)
    return runner
