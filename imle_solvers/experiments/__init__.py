"""Experiments behind `imle-solvers demo`, `toy`, `vae`, `l2x` and `sort` (and the scripts in `examples/`)."""
