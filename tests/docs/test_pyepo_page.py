"""docs/pyepo.md: the I-MLE loop, copied as printed, runs as the timed script does (one torch thread)."""

from __future__ import annotations

import re

from tests.support.paths import ROOT


def test_the_imle_loop_sets_the_one_thread_its_timing_assumes() -> None:
    page = (ROOT / "docs" / "pyepo.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    loops = [block for block in blocks if "IMLE(data.oracle" in block]
    assert len(loops) == 1
    loop = loops[0]
    assert "torch.set_num_threads(1)" in loop and loop.index("torch.set_num_threads(1)") < loop.index(
        "for epoch"
    )
    script = (ROOT / "examples" / "pyepo_migration.py").read_text(encoding="utf-8")
    assert "torch.set_num_threads(1)" in script  # the script behind the table
    table = page[page.index("Command: `python examples/pyepo_migration.py") :]
    assert "one thread" in table[:400] and "**One thread.**" in page


def test_the_switching_snippets_of_nce_and_cave_run() -> None:
    import pytest

    pytest.importorskip("clarabel")
    page = (ROOT / "docs" / "pyepo.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    (nce,) = [block for block in blocks if "NCELoss(data.oracle" in block]
    (cave,) = [block for block in blocks if "CaVELoss(data.oracle)" in block]
    scope: dict[str, object] = {}
    exec(nce.replace("shortest_path(200,", "shortest_path(40,"), scope)  # fewer instances, same code
    assert scope["nce"].cache.size >= 1  # type: ignore[attr-defined]
    exec(cave, scope)
    assert float(scope["loss"].detach()) >= 0  # type: ignore[attr-defined]


def test_the_tsp_snippet_runs_without_pyepo_s_own_solves() -> None:
    import pytest

    pytest.importorskip("pyepo")
    pytest.importorskip("ortools")
    page = (ROOT / "docs" / "pyepo.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    (snippet,) = [block for block in blocks if "equivalent_oracle(optmodel)" in block and "tspModel" in block]
    assert "optDataset(" not in snippet  # the warning's slow path is not the one shown
    scope: dict[str, object] = {}
    exec(snippet.replace("genData(1000,", "genData(6,"), scope)  # fewer instances, same code
    train, oracle = scope["train"], scope["oracle"]
    assert train.oracle is oracle and type(oracle).__name__ == "TravellingSalesperson"  # type: ignore[attr-defined]
    assert len(train) == 6 and train.solutions.sum(1).tolist() == [20.0] * 6  # type: ignore[attr-defined]
    optmodel = scope["optmodel"]
    for cost, tour in zip(train.costs[:2], train.solutions[:2]):  # type: ignore[attr-defined]
        optmodel.setObj(cost.numpy())  # type: ignore[attr-defined]
        _, value = optmodel.solve()  # type: ignore[attr-defined]
        assert abs(float((cost * tour).sum()) - value) <= 1e-4 * abs(value)  # CP-SAT's tour is optimal
    warning = page[page.index("!!! warning \"PyEPO's `optDataset`") :][:700]
    assert "about 1 s per 20-node tour" in warning and "15-20 minutes" in warning
