"""The package's layering, read from its source: no import cycle, and no import up the layers.

Every module of ``imle_solvers`` is parsed (`ast`). An import is an edge from the importing module to the
most specific module of the package it names: ``import a.b`` → ``a.b``; ``from a import b`` → ``a.b``
when that is a module, else ``a``; relative imports resolved against the importer's package; at any
depth (module level, inside functions and classes); and the modules named by a string in a module that
imports by name (``importlib.import_module``, ``lazy_exports``: the CLI's commands, the bench suites, the
pool's backends, the packages' lazily loaded names). The package ``__init__`` that Python runs before
a submodule is no edge of its own: a package that imports its own submodules is how it exports them.

Imports under ``if TYPE_CHECKING:`` never run. They count for the layers (a type from a higher layer in
a lower layer's signature is still a dependency that points up) but not for cycles (they are how a
module names the types of a module that imports it).

The rules:

(a) no import cycle between modules, whatever runs it (module level, function level or by name); no
    cycle is allowed;
(b) a module imports only modules of its own layer or of a lower one, in this order: the core (the
    modules of `CORE`), ``pool/``, ``adapters/``, the package root (the public façade: ``import
    imle_solvers`` loads neither the application nor the data sets), ``data/``, ``interop/``, ``app/``,
    ``training/``, ``experiments/``, ``benchmarks/``, ``cli``, ``__main__``. So the core imports only the
    core, the pool never imports the adapters, and the core, the pool and the adapters never import the
    data sets, the interop bridges or the application (app, training, experiments, benchmarks, cli).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(60)

Kind = Literal["module", "function", "type-checking", "by-name"]

CORE = frozenset(
    {
        "oracle",
        "noise",
        "target",
        "adaptive",
        "imle",
        "perturb_and_map",
        "estimators",
        "losses",
        "topk",
        "errors",
        "_checks",
        "_collective",
        "_device",
        "_lazy",
        "_interrupt",
        "_command_start",
        "testing",
    }
)
"""The modules of the core (top-level modules of the package)."""

ROOT_LAYER = frozenset(
    {"cave", "contrastive", "frank_wolfe", "perturbation_gradient", "ranking", "solution_pool"}
)
"""Top-level modules of the root layer: the losses over solution pools and the linear forms of the adapters
(they may import the core, the pool and the adapters, as the package's own ``__init__`` does)."""

LAYERS = (
    "core",
    "pool",
    "adapters",
    "root",
    "data",
    "interop",
    "app",
    "training",
    "experiments",
    "benchmarks",
    "cli",
    "__main__",
)
"""Lowest first: a module may import its own layer and the layers before it."""

RUNS: frozenset[Kind] = frozenset({"module", "function", "by-name"})
"""The kinds of import that run (and so can close a cycle)."""


@dataclasses.dataclass(frozen=True)
class Import:
    """One edge of the module graph."""

    source: str
    target: str
    line: int
    kind: Kind

    def __str__(self) -> str:
        return f"{self.source}:{self.line} → {self.target} ({self.kind})"


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """``dotted name → file`` of every module of ``package`` (a folder below ``root``)."""
    found = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """``id`` of every node under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) block."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def _function_nodes(tree: ast.Module) -> set[int]:
    """``id`` of every node inside a function body (it runs when the function is called)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(n) for n in ast.walk(node)} - {id(node)}
    return inside


def _resolve(base: str, level: int, name: str | None) -> str:
    """The absolute module of ``from <level dots><name> import ...`` in the package ``base``."""
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{name}" if name else base


def _named_modules(
    tree: ast.Module, text: str, module: str, home: str, modules: dict[str, Path], package: str
) -> Iterator[tuple[str, ast.stmt | ast.Constant, bool]]:
    """``(module imported, the node that imports it, whether by name)`` for every import of one module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node, False) for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            origin = _resolve(home, node.level, node.module) if node.level else (node.module or "")
            if origin != package and not origin.startswith(package + "."):
                continue
            for alias in node.names:
                if f"{origin}.{alias.name}" in modules:
                    yield f"{origin}.{alias.name}", node, False
                else:
                    if origin not in modules:
                        raise AssertionError(
                            f"{module}:{node.lineno} imports {origin}, no module of the package"
                        )
                    yield origin, node, False
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "import_module(" not in text and "lazy_exports(" not in text:
                continue  # a string names a module only where the module imports by name
            match = re.fullmatch(r"(\.*)([A-Za-z_][\w.]*)", node.value)
            if match is not None:
                dots, name = match.groups()
                target = _resolve(home, len(dots), name) if dots else name
                if target in modules:
                    yield target, node, True


def imports_of(root: Path, package: str) -> list[Import]:
    """Every import between modules of ``package``, as `Import` edges (see the module docstring)."""
    modules = modules_of(root, package)
    edges: list[Import] = []
    for module, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        typing_only, in_function = _type_checking_nodes(tree), _function_nodes(tree)
        home = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for target, node, by_name in _named_modules(tree, text, module, home, modules, package):
            if target == module:
                continue
            kind: Kind = "module"
            if id(node) in typing_only:
                kind = "type-checking"
            elif by_name:
                kind = "by-name"
            elif id(node) in in_function:
                kind = "function"
            edges.append(Import(module, target, node.lineno, kind))
    return edges


def layer_of(module: str, package: str = "imle_solvers") -> str:
    """The layer (an entry of `LAYERS`) of a module of ``package``."""
    if module == package:
        return "root"
    top = module.removeprefix(package + ".").split(".")[0]
    if top in CORE:
        return "core"
    if top in ROOT_LAYER:
        return "root"
    assert top in LAYERS, f"{module}: give this new top-level module a layer in tests/test_layering.py"
    return top


def layer_violations(edges: Iterable[Import], package: str = "imle_solvers") -> list[str]:
    """Every edge that goes from a layer up to a later one, described."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [
        f"{e} goes up from {layer_of(e.source, package)} to {layer_of(e.target, package)}"
        for e in edges
        if rank[layer_of(e.target, package)] > rank[layer_of(e.source, package)]
    ]


def import_cycles(edges: Iterable[Import]) -> list[list[Import]]:
    """One cycle (its edges, in order) per strongly connected group of modules, over the imports that run."""
    graph: dict[str, dict[str, Import]] = {}
    for e in edges:
        if e.kind in RUNS:
            graph.setdefault(e.source, {}).setdefault(e.target, e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = []
    for group in groups:  # breadth first from the group's first module, back to it: a shortest cycle
        start = min(group)
        reached: dict[str, Import] = {}  # module → the edge that first reached it
        queue, closing = deque([start]), None
        while closing is None:
            node = queue.popleft()
            for nxt, edge in sorted(graph[node].items()):
                if nxt == start:
                    closing = edge
                    break
                if nxt in group and nxt not in reached:
                    reached[nxt] = edge
                    queue.append(nxt)
        cycle = [closing]
        while cycle[-1].source != start:
            cycle.append(reached[cycle[-1].source])
        cycles.append(cycle[::-1])
    return cycles


@functools.cache
def package_imports() -> tuple[Import, ...]:
    return tuple(imports_of(ROOT, "imle_solvers"))


# --- the package ------------------------------------------------------------------------------------


def test_the_package_has_no_import_cycle() -> None:
    cycles = import_cycles(package_imports())
    assert not cycles, "import cycles:\n" + "\n".join(" ; ".join(map(str, c)) for c in cycles)


def test_no_module_imports_a_higher_layer() -> None:
    bad = layer_violations(package_imports())
    assert not bad, "imports up the layers:\n" + "\n".join(bad)


def test_every_module_has_a_layer_and_the_graph_is_read_at_all() -> None:
    edges = package_imports()
    for module in modules_of(ROOT, "imle_solvers"):
        layer_of(module)
    found = {(e.source, e.target, e.kind) for e in edges}
    for edge in [
        ("imle_solvers.imle", "imle_solvers.perturb_and_map", "module"),  # from .perturb_and_map import ...
        ("imle_solvers.adapters.ilp._ilp", "imle_solvers.errors", "module"),  # from ...errors (two levels)
        ("imle_solvers", "imle_solvers.adapters", "type-checking"),
        ("imle_solvers", "imle_solvers.adapters", "by-name"),  # the lazy table ".adapters"
        ("imle_solvers.pool._backends", "imle_solvers.pool._process", "by-name"),  # "._process"
        ("imle_solvers.cli", "imle_solvers.training.command", "by-name"),  # "imle_solvers.training.command"
        ("imle_solvers.app.session", "imle_solvers.app.config", "module"),
        ("imle_solvers.experiments.vae.report", "imle_solvers.experiments.vae.run", "type-checking"),
    ]:
        assert edge in found, edge
    assert any(e.kind == "function" and e.source.startswith("imle_solvers.adapters.") for e in edges)


def test_importing_the_core_and_its_public_names_loads_no_application_module() -> None:
    """What actually runs: the library's public names (solvers' extras aside) load only the core, the pool
    and the adapters."""
    above = tuple(f"imle_solvers.{name}" for name in ("data", "interop", "app", "training", "experiments"))
    above += ("imle_solvers.benchmarks", "imle_solvers.cli")
    code = (
        "import sys, imle_solvers, imle_solvers.losses, imle_solvers.pool, imle_solvers.adapters\n"
        "from imle_solvers.errors import MissingExtraError\n"
        "for name in imle_solvers.__all__ + imle_solvers.adapters.__all__:\n"
        "    try:\n"
        "        getattr(imle_solvers, name, None) or getattr(imle_solvers.adapters, name)\n"
        "    except MissingExtraError:\n"
        "        pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({above!r})))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=50)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


# --- the checks themselves, on a small package --------------------------------------------------------


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "imle_solvers" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_function_level_import_is_found_and_reported_with_its_lines(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__.py": "",
            "oracle.py": "from .noise import Gumbel\n",
            "noise.py": "def f():\n    from . import oracle\n",
            "topk.py": "from .oracle import MapOracle\n",
        },
    )
    edges = imports_of(tmp_path, "imle_solvers")
    assert {(e.source, e.target, e.kind) for e in edges} == {
        ("imle_solvers.oracle", "imle_solvers.noise", "module"),
        ("imle_solvers.noise", "imle_solvers.oracle", "function"),
        ("imle_solvers.topk", "imle_solvers.oracle", "module"),
    }
    [cycle] = import_cycles(edges)
    assert [str(e) for e in cycle] == [
        "imle_solvers.noise:2 → imle_solvers.oracle (function)",
        "imle_solvers.oracle:1 → imle_solvers.noise (module)",
    ]


def test_a_longer_cycle_is_reported_once_and_in_order(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import imle_solvers.b\n",
            "b.py": "from imle_solvers import c\n",
            "c.py": "from .a import x\n",
            "d.py": "from . import a\n",
        },
    )
    [cycle] = import_cycles(imports_of(tmp_path, "imle_solvers"))
    assert [(e.source, e.target) for e in cycle] == [
        ("imle_solvers.a", "imle_solvers.b"),
        ("imle_solvers.b", "imle_solvers.c"),
        ("imle_solvers.c", "imle_solvers.a"),
    ]


def test_type_checking_imports_close_no_cycle_but_count_for_the_layers(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__.py": "",
            "oracle.py": "import typing\nif typing.TYPE_CHECKING:\n    from .training.loop import T\n",
            "training/__init__.py": "",
            "training/loop.py": "from ..oracle import MapOracle\n",
        },
    )
    edges = imports_of(tmp_path, "imle_solvers")
    assert import_cycles(edges) == []
    assert layer_violations(edges) == [
        "imle_solvers.oracle:3 → imle_solvers.training.loop (type-checking) goes up from core to training"
    ]


def test_imports_by_name_and_upward_imports_of_the_pool_and_adapters_are_found(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__.py": "from ._lazy import lazy_exports\nget = lazy_exports({'X': '.adapters'})\n",
            "_lazy.py": "",
            "pool/__init__.py": "import importlib\nB = {'p': '._proc'}\nimportlib.import_module(B['p'])\n",
            "pool/_proc.py": "from ..adapters import ilp\n",
            "adapters/__init__.py": "",
            "adapters/ilp.py": "def f():\n    from ..app.config import C\n    from ..pool import _proc\n",
            "app/__init__.py": "",
            "app/config.py": "from .. import _lazy\n",
        },
    )
    edges = imports_of(tmp_path, "imle_solvers")
    assert ("imle_solvers", "imle_solvers.adapters", "by-name") in {
        (e.source, e.target, e.kind) for e in edges
    }
    assert ("imle_solvers.pool", "imle_solvers.pool._proc", "by-name") in {
        (e.source, e.target, e.kind) for e in edges
    }
    assert sorted(layer_violations(edges)) == [
        "imle_solvers.adapters.ilp:2 → imle_solvers.app.config (function) goes up from adapters to app",
        "imle_solvers.pool._proc:1 → imle_solvers.adapters.ilp (module) goes up from pool to adapters",
    ]
    [cycle] = import_cycles(edges)
    assert {e.source for e in cycle} == {"imle_solvers.pool._proc", "imle_solvers.adapters.ilp"}


def test_a_top_level_module_without_a_layer_fails_with_a_hint() -> None:
    with pytest.raises(AssertionError, match="give this new top-level module a layer"):
        layer_of("imle_solvers.plugins.x")
