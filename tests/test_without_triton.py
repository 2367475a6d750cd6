"""Without the ``triton`` extra: every module imports and the suite collects (Triton is optional)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import ROOT

# Hide an installed Triton from the import system, as if it were not installed: find_spec gives None and
# `import triton` raises ModuleNotFoundError.
HIDE_TRITON = """
import importlib.machinery, sys
class _NoTriton(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            return None
        return super().find_spec(name, path, target)
sys.meta_path[:] = [_NoTriton if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_TRITON + code], cwd=ROOT, capture_output=True, text=True, timeout=240
    )


def test_every_module_of_the_package_imports_without_triton() -> None:
    # pytest's --doctest-modules imports each of them: none may need Triton at import time
    done = _run(
        """
import importlib, pkgutil, imle_solvers
import importlib.util
assert importlib.util.find_spec("triton") is None
names = [m.name for m in pkgutil.walk_packages(imle_solvers.__path__, "imle_solvers.")]
for name in names:
    importlib.import_module(name)
assert "triton" not in sys.modules
print(len(names))
"""
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 100


@pytest.mark.slow  # a whole collection in a fresh interpreter (half a minute); the imports are checked above
def test_the_triton_tests_collect_and_skip_without_triton() -> None:
    done = _run(
        """
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/adapters/test_graphs_grid_triton.py",
                      "imle_solvers/adapters/graphs/_grid_triton.py", "-k", "not cuda"]))
"""
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "skipped" in done.stdout and "error" not in done.stdout.lower()
