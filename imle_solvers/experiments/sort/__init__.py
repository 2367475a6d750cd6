"""Learning to sort handwritten numbers through a matching layer (Grover et al. 2019; Mena et al. 2018).

A sequence holds ``n`` numbers of ``d`` handwritten digits each (scikit-learn's 8×8 digits side by
side); the task is to put them in ascending order from their images alone. A CNN
(`NumberScorer`) scores every number, ``s ∈ R^n``; the scores define the assignment weights
``θ[r, i] = w_r · s_i`` with rank weights ``w_r = 2r − (n − 1)`` (`assignment_weights`: NeuralSort's
score-to-rank logits), whose MAP assignment, [`TorchMatching`][imle_solvers.TorchMatching]``(n, n)``,
sorts the scores. Training is supervised by the true sorting permutation ``P``: the loss is
``‖z − P‖²`` on the layer's output ``z`` (twice the Hamming distance for a permutation), averaged
over the sequences. The methods compared on the same network, data and loss are the registry
`METHODS`: I-MLE and the straight-through estimator through the matching oracle, and the
Gumbel-Sinkhorn relaxation. Every method is evaluated the same way, by the permutation ``MAP(θ)``
on held-out sequences written with held-out digit images: the share of sequences sorted exactly
and the share of positions holding the right number.

Entry points: [`run_sort`][imle_solvers.experiments.sort.run_sort] →
[`SortResult`][imle_solvers.experiments.sort.SortResult], and `main` (``imle-solvers sort``). By role:

* ``data.py``     — the digit pools, the sequences of numbers and their sorting permutations;
* ``model.py``    — `NumberScorer` and `assignment_weights`;
* ``sinkhorn.py`` — `log_sinkhorn` and `GumbelSinkhorn`;
* ``methods.py``  — `METHODS`, the registry of methods compared;
* ``results.py``  — `SortRun`, `SortResult`, the accuracies and the summary;
* ``run.py``      — `SortConfig` and `run_sort` (what the command does);
* ``cli.py``      — `result_table` and ``main(argv)``.
"""

from __future__ import annotations

from .cli import COMMAND, build_parser, main, result_table
from .data import DigitPool, Sequences, load_digit_pools, make_sequences, sorting_permutation
from .methods import METHODS, SortMethod
from .model import NumberScorer, assignment_weights, rank_weights
from .results import SUMMARY, SortResult, SortRun, permutation_accuracy
from .run import QUICK, SortConfig, run_sort
from .sinkhorn import GumbelSinkhorn, log_sinkhorn

__all__ = [
    "COMMAND",
    "METHODS",
    "QUICK",
    "SUMMARY",
    "DigitPool",
    "GumbelSinkhorn",
    "NumberScorer",
    "Sequences",
    "SortConfig",
    "SortMethod",
    "SortResult",
    "SortRun",
    "assignment_weights",
    "build_parser",
    "load_digit_pools",
    "log_sinkhorn",
    "main",
    "make_sequences",
    "permutation_accuracy",
    "rank_weights",
    "result_table",
    "run_sort",
    "sorting_permutation",
]
