"""The pool's layering, read from its source: no import cycle inside ``pool/``, no import up into the
adapters or the application, and no backend name or cache special case in the pool or its planner."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from imle_solvers.pool._backends import BACKENDS
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(10)

POOL = ROOT / "imle_solvers" / "pool"
FORBIDDEN = ("adapters", "training", "experiments", "benchmarks", "interop", "cli")


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (anywhere in the file), as absolute dotted names."""
    package = "imle_solvers.pool"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
                if node.module is None:  # from . import x
                    found |= {f"{base}.{alias.name}" for alias in node.names}
                    continue
            else:
                module = node.module or ""
            found.add(module)
    return found


def pool_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(POOL.glob("*.py")):
        name = f"imle_solvers.pool.{path.stem}" if path.stem != "__init__" else "imle_solvers.pool"
        graph[name] = {m for m in imports_of(path) if m.startswith("imle_solvers.pool.")}
    for module, _ in BACKENDS.values():  # the registry imports the runners by name (importlib)
        graph["imle_solvers.pool._backends"].add(f"imle_solvers.pool{module}")
    return graph


def test_the_pool_modules_form_no_import_cycle() -> None:
    graph = pool_graph()
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " → ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = "done"

    for module in graph:
        if module not in state:
            visit(module, [])
    assert "imle_solvers.pool._runner" in graph["imle_solvers.pool._thread"]  # the graph is read at all


@pytest.mark.parametrize(
    "path", [*sorted(POOL.glob("*.py")), ROOT / "imle_solvers" / "_interrupt.py"], ids=lambda p: p.name
)
def test_the_pool_imports_nothing_above_the_core(path: Path) -> None:
    bad = {m for m in imports_of(path) if any(m.startswith(f"imle_solvers.{f}") for f in FORBIDDEN)}
    assert not bad, f"{path.name} imports {sorted(bad)}"


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
