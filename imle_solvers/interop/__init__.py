"""Bridges to other predict-then-optimize libraries.

* `imle_solvers.interop.pyepo` — PyEPO's `optModel` as a MAP oracle and its `optDataset` as a
  [`PTODataset`][imle_solvers.data.PTODataset] (extra `pyepo`).

Each bridge imports its library only when used, so `import imle_solvers.interop` needs no extra.
"""

from __future__ import annotations

__all__: list[str] = []
