"""The paper's synthetic top-k experiment (sec. 6 and appendix, "Synthetic Experiments").

A 5-subset distribution over ``m = 10`` items, ``p(z; θ) ∝ exp(⟨z, θ⟩)`` on the ``C(10, 5) = 252``
states, and the loss ``L(θ) = E_{z ~ p(z; θ)} ‖z − b‖²`` with ``b ~ N(0, I)`` drawn once. Everything
(``L``, the marginals ``μ(θ)``, exact samples) is computed *exactly* by enumerating the 252 states,
so that estimators can be compared on the true objective:

* I-MLE (PID target, eq. 8) with Sum-of-Gamma noise (eq. 9) and with Gumbel noise,
* the straight-through estimator (STE) with Gumbel (and Sum-of-Gamma) noise,
* the score-function estimator (SFE) with exact samples and exact marginals, ``∇ ≈ ‖z − b‖² (z − μ(θ))``,
  ``z ~ p(z; θ)`` (implemented here; it is not a library estimator).

Each run is 50 steps of SGD with momentum 0.9 from the same ``θ₀``; the runs differ only in the
estimators' randomness. All runs *and* all learning rates of a grid point go through the layer as
one batch (rows = learning rates × runs), one layer call per step, so the whole grid takes seconds.

Public entry points: [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] →
[`ToyResult`][imle_solvers.experiments.topk_toy.ToyResult], `plot`, and `main` (the
``imle-solvers toy`` command). By role:

* ``problem.py`` — `ToyProblem`, the exact ``L``, marginals, samples and SFE on the enumerated states;
* ``methods.py`` — `METHODS`, the registry of the estimators compared, and the gradient each gives;
* ``run.py``     — `run_toy`: the batched SGD over the (λ, η) grid, then the best settings afresh;
* ``results.py`` — `ToyResult` and its rows, `ToyRow`;
* ``report.py``  — `result_table`, `summarize_instances`, `compare_grid` and `plot`;
* ``cli.py``     — `ToyConfig`, ``run(config)`` (what the command does) and ``main(argv)``.
"""

from __future__ import annotations

from .cli import QUICK, ToyConfig, build_parser, main
from .methods import DEFAULT_METHODS, METHODS, SOG, SOG_LITERAL, ToyMethod
from .problem import ToyProblem, enumerate_states
from .report import compare_grid, plot, result_table, summarize_instances
from .results import ToyResult, ToyRow
from .run import DEFAULT_LAMBDAS, DEFAULT_LRS, DEFAULT_SFE_LRS, MOMENTUM, run_toy, sgd_momentum_step

__all__ = [
    "DEFAULT_LAMBDAS",
    "DEFAULT_LRS",
    "DEFAULT_METHODS",
    "DEFAULT_SFE_LRS",
    "METHODS",
    "MOMENTUM",
    "QUICK",
    "SOG",
    "SOG_LITERAL",
    "ToyConfig",
    "ToyMethod",
    "ToyProblem",
    "ToyResult",
    "ToyRow",
    "build_parser",
    "compare_grid",
    "enumerate_states",
    "main",
    "plot",
    "result_table",
    "run_toy",
    "sgd_momentum_step",
    "summarize_instances",
]
