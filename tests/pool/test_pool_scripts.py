"""A process pool started by a script run the obvious way (``python script.py``), with and without the
``if __name__ == "__main__":`` guard: workers never re-run a script that has no guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

LIBRARY_ORACLE = """
import numpy as np
from imle_solvers import SolverPool, TopK
print("script body", flush=True)  # a worker that re-ran the script would print this again
with SolverPool(2, "{backend}", fallback=False, chunksize=1) as pool:
    print(pool.solve_batch(TopK(1, 3), np.eye(3)[::-1].copy()).tolist(), flush=True)
"""

OWN_ORACLE = """
import numpy as np
from imle_solvers import SolverPool
from imle_solvers.oracle import MapOracle

class Mine(MapOracle):
    sense = "max"
    n_vars = 3
    expected_nonzeros = 1.0

    def solve(self, w):
        z = np.zeros(3)
        z[int(np.argmax(w))] = 1.0
        return z

def main():
    with SolverPool(2, "process", fallback=False, chunksize=1) as pool:
        print(pool.solve_batch(Mine(), np.eye(3)).tolist(), flush=True)
"""


def _run(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["process", pytest.param("dask", marks=pytest.mark.slow)])
def test_a_script_without_the_guard_starts_a_pool_once(backend: str, tmp_path: Path) -> None:
    if backend == "dask":
        pytest.importorskip("distributed")
    done = _run(tmp_path, LIBRARY_ORACLE.format(backend=backend))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "script body",
        "[[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]",
    ]


@pytest.mark.slow  # a fresh interpreter and a pool: ~15 s on 2 loaded cores
@pytest.mark.timeout(150)
def test_with_the_guard_the_workers_import_the_script_and_its_oracle_class(tmp_path: Path) -> None:
    done = _run(tmp_path, OWN_ORACLE + '\nif __name__ == "__main__":\n    main()\n')
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]"


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_without_the_guard_an_oracle_class_of_the_script_is_refused_with_advice(tmp_path: Path) -> None:
    done = _run(tmp_path, OWN_ORACLE + "\nmain()\n")
    assert done.returncode == 1 and "Traceback" in done.stderr
    assert "its class is defined in __main__, which the workers do not import" in done.stderr
    assert done.stderr.count("Traceback (most recent call last)") <= 2  # one error, not every worker's crash
