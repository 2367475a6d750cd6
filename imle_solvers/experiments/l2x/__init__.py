"""Learning to explain (paper, sec. 6 "Learning to Explain", after Chen et al. 2018), on planted data.

An *explainer* reads a review and scores its positions, ``θ ∈ R^L``; a k-subset layer turns the scores into a
k-hot mask ``z``; a *predictor* sees only the selected tokens (the mean of their embeddings) and regresses the
rating; the loss is the MSE. Nothing tells the explainer which tokens matter: it learns it through the
gradient of the predictor's loss with respect to ``z``. The corpus is generated with planted explanations
(``planted.py``), so the *subset precision* of the learned selection, which the paper measures against human
annotations on BeerAdvocate, is measured exactly.

Networks (the L2X architecture of the paper's appendix, narrower for a CPU): the explainer embeds
the tokens, applies a convolution, takes a global max-pooled feature and two more local
convolutions, concatenates local and global features and maps them to one score per position;
the predictor has its own embedding, averages the ``k`` selected embeddings and applies a dense
layer and a sigmoid. Adam (1e-3), batch size 40, the model with the best validation MSE among
the epochs is evaluated on the test set, with the hard top-k of θ as the explanation.

The samplers between explainer and predictor are the registry `METHODS`. Entry points:
[`run_l2x`][imle_solvers.experiments.l2x.run_l2x] → [`L2XResult`][imle_solvers.experiments.l2x.L2XResult],
and `main` (``imle-solvers l2x``). By role:

* ``planted.py``         — the generated corpus with planted explanations, and subset precision;
* ``relaxed_subsets.py`` — the relaxed baselines, L2X's and Xie and Ermon's;
* ``model.py``           — `Explainer` and `Predictor`;
* ``methods.py``         — `METHODS`, the registry of samplers compared;
* ``run.py``             — `L2XConfig`, `run_l2x` (what the command does), `L2XRun` and `L2XResult`;
* ``cli.py``             — `result_table` and ``main(argv)``.
"""

from __future__ import annotations

from .cli import build_parser, main, result_table
from .methods import METHODS, L2XMethod
from .model import Explainer, Predictor
from .planted import CorpusSpec, PlantedCorpus, make_corpus, subset_precision
from .relaxed_subsets import L2XRelaxedTopK, SoftSub
from .run import SUMMARY, L2XConfig, L2XResult, L2XRun, run_l2x

__all__ = [
    "METHODS",
    "SUMMARY",
    "CorpusSpec",
    "Explainer",
    "L2XConfig",
    "L2XMethod",
    "L2XRelaxedTopK",
    "L2XResult",
    "L2XRun",
    "PlantedCorpus",
    "Predictor",
    "SoftSub",
    "build_parser",
    "main",
    "make_corpus",
    "result_table",
    "run_l2x",
    "subset_precision",
]
