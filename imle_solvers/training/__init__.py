"""``imle-solvers train``: predict-then-optimize training and head-to-head comparison of methods.

A model predicts the weights of an optimisation problem from features and is trained, by one of
the `METHODS`, on the quality of the decisions it leads to. By role:

* ``config.py``   — `TrainConfig`, every option declared once (the parser is generated from it);
* ``methods.py``  — `METHODS`, the registry of training methods (name → documented factory);
* ``runner.py``   — `run` (config → one `TrainRun` per method and seed, written as each finishes);
* ``loop.py``     — `train_model` and `evaluate` (one run, on any device);
* ``problems.py`` — data, model and oracles per ``--problem``; ``models.py`` the networks;
* ``results.py``  — `TrainRun`, the summary over seeds, the learning-curve plot;
* ``command.py``  — ``main(argv)``.

Example:

```python
from imle_solvers.training import TrainConfig, run

results = run(TrainConfig(problem="shortest-path", methods=("imle-mumu", "spo+"), seeds=(0, 1)))
```
"""

from __future__ import annotations

from .command import build_parser, main
from .config import TrainConfig
from .loop import evaluate, train_model
from .methods import METHODS, MethodOptions, build_method
from .problems import PROBLEMS, make_problem
from .results import TrainRun, plot_curves, summarize
from .runner import run

__all__ = [
    "METHODS",
    "PROBLEMS",
    "MethodOptions",
    "TrainConfig",
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
