"""``imle-solvers vae``: the parser (`build_parser`), the `VAEConfig` it gives, and `main`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ...report import write_outputs
from .methods import METHODS, PAPER_METHODS
from .report import plot_curves, plot_reconstructions, result_table
from .run import VAEConfig, run_vae

__all__ = ["build_parser", "config_from_args", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The options of ``imle-solvers vae``."""
    parser = argparse.ArgumentParser(
        prog="imle-solvers vae",
        description="The I-MLE paper's discrete 10-subset VAE (20 latent 10-subsets of 20 variables).",
    )
    methods_help = f"among {', '.join(METHODS)} (default: all but λ = 100, 1000)"
    parser.add_argument("--methods", nargs="+", default=list(PAPER_METHODS), choices=list(METHODS),
                        metavar="M", help=methods_help)  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parser.add_argument("--epochs", type=int, default=30, help="epochs (default 30; the paper: 100 on MNIST)")
    parser.add_argument("--batch-size", type=int, default=100, help="batch size (default 100)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    parser.add_argument("--data", default=None,
                        help="MNIST on disk: a directory of IDX files, one IDX file or an .npz "
                             "(default: scikit-learn's bundled 8×8 digits)")  # fmt: skip
    parser.add_argument("--max-train", type=int, default=None, help="use at most this many training images")
    parser.add_argument("--max-test", type=int, default=None, help="use at most this many test images")
    parser.add_argument("--kl", choices=["softmax", "exact"], default="softmax",
                        help="KL term: the paper's softmax marginals (default) or the exact one")  # fmt: skip
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    parser.add_argument("--out", default="runs/vae", help="output directory (default runs/vae)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def config_from_args(args: argparse.Namespace) -> VAEConfig:
    """The [`VAEConfig`][imle_solvers.experiments.vae.VAEConfig] of the parsed options (``ValueError``
    when they are invalid)."""
    return VAEConfig(
        methods=tuple(args.methods), seeds=tuple(args.seeds), epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, data=args.data, max_train=args.max_train,
        max_test=args.max_test, kl=args.kl, device=args.device,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers vae``: train, print the table, write ``vae.json``, ``vae.md`` and the two figures."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    start = time.perf_counter()
    result = run_vae(config, progress_bar=not args.no_progress)
    elapsed = time.perf_counter() - start
    table = result_table(result)
    cfg = result.config
    header = (
        f"Discrete VAE on {cfg['data_name']} ({cfg['n_train']} train / {cfg['n_test']} test images), "
        f"latent {cfg['latent']}, {cfg['epochs']} epochs, batch {cfg['batch_size']}, Adam {cfg['lr']:g}, "
        f"seeds {list(cfg['seeds'])}, device {cfg['device']}; {elapsed:.0f} s in all"
    )
    print(header)
    print(table)
    out = Path(args.out)
    command = "imle-solvers vae " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    written = write_outputs(
        out,
        "vae",
        result.save_json,
        f"{header}\n\n{table}",
        command,
        plots=lambda: [
            plot_curves(result, out / "vae_curves.png"),
            plot_reconstructions(result, out / "vae_recon.png"),
        ],
    )
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
