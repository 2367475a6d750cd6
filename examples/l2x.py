"""Learning to explain with k-subset masks (the I-MLE paper's sec. 6), on a corpus with planted explanations.

    python examples/l2x.py --out runs/l2x           # all methods, k = 5 10 15, seeds 0 1 2
    python examples/l2x.py --ks 10 --methods imle-sog softsub --seeds 0   # a quick look
    python examples/l2x.py --device cuda            # the same on a GPU

Options are those of `imle-solvers l2x` (``--help``). Prints the table and, with ``--out DIR``, writes
``results.json`` and ``results.md`` (test MSE and subset precision, × 100, mean ± std over the seeds) there.

The corpus generator alone:

    from imle_solvers.experiments.l2x.planted import make_corpus
    corpus = make_corpus(1000, seed=0)      # .tokens [N, 50], .ratings [N], .planted [N, 50]
    corpus.oracle_precision(10)             # the best subset precision any explainer can reach
"""

from __future__ import annotations

import sys

from imle_solvers.experiments import l2x

if __name__ == "__main__":
    sys.exit(l2x.main(sys.argv[1:]))
