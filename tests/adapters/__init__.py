"""Tests of the adapters: ILP back ends (CP-SAT, PuLP), graph oracles, custom adapters, PyEPO."""
