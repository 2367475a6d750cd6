"""The pool's own layering, read from its source: no backend name or cache special case in the pool or
its planner (its imports follow the package-wide rules of ``tests/test_layering.py``)."""

from __future__ import annotations

import ast

import pytest

from imle_solvers.pool._backends import BACKENDS
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(10)

POOL = ROOT / "imle_solvers" / "pool"


def test_the_pool_and_its_planner_never_branch_on_a_backend_name_nor_know_the_cache() -> None:
    for name in ("_pool.py", "_plan.py", "_serial.py"):
        tree = ast.parse((POOL / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                constants = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                assert not set(constants) & set(BACKENDS), (
                    f"{name}:{node.lineno} compares with a backend name"
                )
    assert "SolutionCache" not in (POOL / "_pool.py").read_text()
    # the cache is an oracle: MapOracle.solve_batch(weights), with nothing added to the signature
    tree = ast.parse((POOL / "_cache.py").read_text())
    solve_batch = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "solve_batch"
    )
    assert [a.arg for a in solve_batch.args.args] == ["self", "weights"]
