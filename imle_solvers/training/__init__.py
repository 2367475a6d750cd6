"""``imle-solvers train``: predict-then-optimize training and head-to-head comparison of methods.

A model predicts the weights of an optimisation problem from features and is trained, by one of
the `METHODS`, on the quality of the decisions it leads to. By role:

* ``config.py``   — `TrainConfig`, every option declared once (the parser is generated from it);
* ``plan.py``     — `TrainPlan`, the settings resolved once (every default and ``auto`` rule decided);
* ``methods.py``  — `METHODS`, the registry of training methods (name → documented factory);
* ``runner.py``   — `run` (config → one `TrainRun` per method and seed, written as each finishes);
* ``loop.py``     — `train_model` (one run of a plan, on any device) and `evaluate`;
* ``problems.py`` — data, model and oracles per ``--problem``; ``models.py`` the networks;
* ``results.py``  — `TrainRun`, the summary over seeds, the learning-curve plot;
* ``command.py``  — ``main(argv)``.

Example:

```python
from imle_solvers.training import TrainConfig, run

results = run(TrainConfig(problem="shortest-path", methods=("imle-mumu", "spo+"), seeds=(0, 1)))
```

One run of one's own, from the same settings:

```python
from imle_solvers.training import TrainConfig, make_problem, train_model

plan = TrainConfig(problem="shortest-path", epochs=2, n_train=200, n_test=100).plan()
result = train_model(plan, make_problem(plan, seed=0), "imle-mumu", seed=0)
```
"""

from __future__ import annotations

from .command import build_parser, main
from .config import TrainConfig
from .loop import evaluate, train_model
from .methods import METHODS, MethodOptions, build_method
from .plan import TrainPlan
from .problems import PROBLEMS, make_problem
from .results import TrainRun, plot_curves, summarize
from .runner import run

__all__ = [
    "METHODS",
    "PROBLEMS",
    "MethodOptions",
    "TrainConfig",
    "TrainPlan",
    "TrainRun",
    "build_method",
    "build_parser",
    "evaluate",
    "main",
    "make_problem",
    "plot_curves",
    "run",
    "summarize",
    "train_model",
]
