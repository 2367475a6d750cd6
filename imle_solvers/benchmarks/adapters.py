"""``imle-solvers bench adapters``: adapter per-call time vs the bare solver call, in one run.

Rows come from two parts: graph adapters (``adapters_graphs.py``) and ILP back ends
(``adapters_ilp.py``). Each row has ``adapter``, ``instance``, ``adapter_ms``, ``bare_ms``, ``ratio``
and ``reference_ms`` (a time measured once for comparison, or empty).
"""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run both parts and return their rows."""
    from . import adapters_graphs, adapters_ilp

    return [*adapters_graphs.run(quick=quick), *adapters_ilp.run(quick=quick)]
