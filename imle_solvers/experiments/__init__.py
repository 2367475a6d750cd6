"""Experiments behind `imle-solvers demo`, `toy`, `vae` and `l2x` (and the scripts in `examples/`)."""
