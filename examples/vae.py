"""The I-MLE paper's discrete 10-subset VAE (sec. 6), as a script.

    python examples/vae.py --out runs/vae           # all methods, seeds 0 1 2, 30 epochs of the digits
    python examples/vae.py --data ~/mnist.npz --epochs 100    # MNIST from disk, the paper's 100 epochs
    python examples/vae.py --methods imle-sog-10 gsm-categorical --seeds 0 --epochs 5   # a quick look

Options are those of `imle-solvers vae` (``--help``). Prints the table and, with ``--out DIR``, writes
``results.json``, ``results.md``, ``vae_curves.png`` (test loss per epoch) and ``vae_recon.png`` (test
digits and their reconstructions) there. See docs/experiments.md.

The same experiment through the Python API:

    from imle_solvers.experiments.vae import VAEConfig, run_vae, result_table
    result = run_vae(VAEConfig(methods=("imle-sog-10", "ste-gumbel"), seeds=(0,), epochs=5, out="runs/vae5"))
    print(result_table(result))
"""

from __future__ import annotations

import sys

from imle_solvers.experiments import vae

if __name__ == "__main__":
    sys.exit(vae.main(sys.argv[1:]))
