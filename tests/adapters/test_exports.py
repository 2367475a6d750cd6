"""One export rule: every public oracle has one home (its family's module) and is importable from
``imle_solvers`` and ``imle_solvers.adapters``, and is on the API page."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import imle_solvers
import imle_solvers.adapters as adapters
from imle_solvers import MapOracle
from tests.support.paths import ROOT

HOMES = {  # public oracle -> the module that defines it (its one home)
    "ILP": "imle_solvers.adapters.ilp._ilp",
    "CPSATOracle": "imle_solvers.adapters.ilp.cpsat",
    "PulpOracle": "imle_solvers.adapters.ilp.pulp",
    "ShortestPath": "imle_solvers.adapters.graphs.shortest_path",
    "DAGShortestPath": "imle_solvers.adapters.graphs.dag",
    "GridShortestPath": "imle_solvers.adapters.graphs.grid",
    "TorchGridShortestPath": "imle_solvers.adapters.graphs.torch_grid",
    "Matching": "imle_solvers.adapters.graphs.matching",
    "SpanningTree": "imle_solvers.adapters.graphs.spanning_tree",
    "TorchMatching": "imle_solvers.adapters.graphs.matching",
    "TorchSpanningTree": "imle_solvers.adapters.graphs.spanning_tree",
    "TorchKnapsack": "imle_solvers.adapters.knapsack",
    "TravellingSalesperson": "imle_solvers.adapters.graphs.tsp",
    "TopK": "imle_solvers.topk",
    "ClampedCosts": "imle_solvers.adapters.clamp",
}


@pytest.mark.parametrize("name", sorted(HOMES))
def test_every_oracle_is_importable_from_both_packages_and_documented(name: str) -> None:
    top, sub = getattr(imle_solvers, name), getattr(adapters, name)
    assert top is sub and issubclass(top, MapOracle)
    assert top.__module__ == HOMES[name]
    assert name in imle_solvers.__all__ and name in adapters.__all__
    assert f"::: imle_solvers.{name}\n" in (ROOT / "docs" / "api.md").read_text()


def test_no_public_oracle_is_left_out() -> None:
    """Every public MapOracle class in a public module under adapters/ is exported (and so listed above)."""
    found = set()
    for info in pkgutil.walk_packages(adapters.__path__, "imle_solvers.adapters."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, MapOracle) and obj.__module__ == info.name:
                if not name.startswith("_"):
                    found.add(name)
    assert found <= set(adapters.__all__), found - set(adapters.__all__)
    assert set(adapters.__all__) == set(HOMES)


@pytest.mark.timeout(45)  # a fresh interpreter
def test_old_homes_are_gone_and_solvers_stay_lazy() -> None:
    """No compatibility modules: the ILP family, the DAG oracle and its programme each have one home."""
    for gone in ("imle_solvers.ilp", "imle_solvers.adapters.dag", "imle_solvers.adapters._levels"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)
    assert not hasattr(importlib.import_module("imle_solvers.adapters.graphs.grid"), "TorchGridShortestPath")
    code = (
        "import sys, imle_solvers, imle_solvers.adapters as a\n"
        "a.ILP, a.DAGShortestPath, a.TorchKnapsack, a.TopK\n"
        "print(sorted(m for m in ('ortools', 'pulp', 'highspy', 'networkx', 'dask') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=40, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
