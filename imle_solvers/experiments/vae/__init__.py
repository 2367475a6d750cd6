"""The discrete k-subset variational auto-encoder (paper, sec. 6 "Discrete Variational Auto-Encoder").

The encoder maps an image to ``θ ∈ R^{20×20}``: the weights of 20 independent k-subset
distributions over 20 binary variables (``k = 10`` here, as in the paper). A perturb-and-MAP layer
draws one state per distribution (``S = 1``), ``z = TopK(θ + ε)``, and the decoder maps the
``20×20`` binary code back to pixel logits. The loss per image is

    binary cross-entropy(x, decoder(z)) + Σ_{20 latents} KL(q ‖ uniform),   q = softmax(θ)

the paper's "KL divergence between the marginals of the variables and the uniform distribution", as in the
Gumbel-softmax VAE it builds on (exact for the categorical VAE). ``kl="exact"`` uses the exact
``KL(p(z; θ) ‖ uniform over k-subsets)`` instead (``ksubset.py``; about twice the time per step). Methods
compared, all through the public API: I-MLE (`IMLE` with `PerturbedTarget(λ)`, λ ∈ {1, 10}) with Sum-of-Gamma
noise at τ = 10 and with Gumbel(0, 1) noise; the straight-through estimator (`STE`); and, as the categorical
reference, the Gumbel-softmax trick on a 1-subset (20-way categorical) VAE with the same networks.

Architecture and optimiser follow the appendix: encoder dense 512-256-400 (ReLU), decoder dense
256-512-pixels (ReLU, logits), Adam with learning rate 1e-3, batch size 100. The test loss after
each epoch is the training objective on the test images with one perturbed sample per image, the
noise drawn from a generator re-seeded identically at every evaluation.

Entry points: [`run_vae`][imle_solvers.experiments.vae.run_vae] →
[`VAEResult`][imle_solvers.experiments.vae.VAEResult], `plot_curves`, `plot_reconstructions`, and
`main` (the ``imle-solvers vae`` command). By role:

* ``model.py``   — `SubsetVAE`, the networks, and the loss (`vae_loss`, `latent_kl`);
* ``ksubset.py`` — the exact k-subset partition function, marginals and KL to the uniform distribution;
* ``images.py``  — the data: scikit-learn's digits, or MNIST from disk;
* ``methods.py`` — `METHODS`, the registry of latent samplers compared, and `GumbelSoftmax`;
* ``run.py``     — `VAEConfig`, `run_vae` (what the command does), `VAERun` and `VAEResult`;
* ``report.py``  — `SUMMARY` (the metrics over seeds), `result_table`, `plot_curves` and
  `plot_reconstructions`;
* ``cli.py``     — ``main(argv)``.
"""

from __future__ import annotations

from .cli import build_parser, main
from .methods import METHODS, PAPER_METHODS, GumbelSoftmax, VAEMethod
from .model import N_LATENT, N_VARS, SubsetVAE, latent_kl, vae_loss
from .report import plot_curves, plot_reconstructions, result_table
from .run import VAEConfig, VAEResult, VAERun, run_vae

__all__ = [
    "METHODS",
    "N_LATENT",
    "N_VARS",
    "PAPER_METHODS",
    "GumbelSoftmax",
    "SubsetVAE",
    "VAEConfig",
    "VAEMethod",
    "VAEResult",
    "VAERun",
    "build_parser",
    "latent_kl",
    "main",
    "plot_curves",
    "plot_reconstructions",
    "result_table",
    "run_vae",
    "vae_loss",
]
