"""Tests of the solver pool: backends, the solution cache, Dask, and what every backend guarantees."""
