"""``python -m imle_solvers``: the ``imle-solvers`` command (see [`imle_solvers.cli`][imle_solvers.cli])."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
