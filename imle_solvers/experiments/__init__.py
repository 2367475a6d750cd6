"""Experiments behind ``imle-solvers demo`` and ``imle-solvers toy`` (and the scripts in ``examples/``)."""
