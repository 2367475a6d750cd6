"""Plans and problems of ``imle-solvers train`` for tests: a `TrainConfig`'s fields in, the resolved
plan (or its problem) out."""

from __future__ import annotations

import dataclasses
from typing import Any

from imle_solvers.training import TrainConfig, TrainPlan, make_problem
from imle_solvers.training.plan import Compile
from imle_solvers.training.problems import Problem


def plan_of(**fields: Any) -> TrainPlan:
    """``TrainConfig(**fields).plan()``, without progress bars unless asked for."""
    fields.setdefault("show_progress", False)
    return TrainConfig(**fields).plan()


def problem_of(problem: str, n_train: int, n_test: int, seed: int = 0, **fields: Any) -> Problem:
    """``make_problem`` of the plan of these settings (``size``, ``model``, ``oracle``, ``data``...)."""
    return make_problem(plan_of(problem=problem, n_train=n_train, n_test=n_test, **fields), seed)


def with_step(plan: TrainPlan, **step: Any) -> TrainPlan:
    """``plan`` with its step changed (``compile`` as a name or a `Compile`, ``amp``, ``channels_last``,
    ``cudnn_benchmark``): what no configuration gives on this machine, e.g. a recorded step on the CPU."""
    if "compile" in step:
        step["compile"] = Compile(step["compile"])
    return dataclasses.replace(plan, step=dataclasses.replace(plan.step, **step))
