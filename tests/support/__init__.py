"""What the test modules share; no tests here, and no test module imports another test module.

* `oracles` — `k_subsets` and the enumeration oracles `Enum` (what the pool tests ship) and `EnumOracle`
  (the same, counting its ``solve_batch`` calls);
* `pool_oracles` — `FLAG` and the picklable oracles that misbehave on purpose, for the pool tests;
* `pool` — the pool tests' states, weight batches and process checks;
* `ilp_cases` — random small ILPs, brute force and hard instances for the ILP adapter tests;
* `paths` — the repository root.

Pool worker processes import these modules by their path ``tests.support.…`` when they unpickle an
oracle (the suite runs from the repository root, which pytest puts on ``sys.path``), so this package
and `oracles` / `pool_oracles` import nothing heavier than NumPy and `imle_solvers`.
"""
