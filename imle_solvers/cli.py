"""The `imle-solvers` command: `demo`, `toy`, `vae`, `l2x`, `train` and `bench`.

Each command lives in its own module exposing `main(argv: list[str]) -> int`; the module is
imported only when its command runs, so `imle-solvers --help` is instant and needs no extras.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "HelpFormatter", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "imle_solvers.experiments.pto_demo",
        "train a shortest-path model three ways and plot its learning curves",
    ),
    "toy": ("imle_solvers.experiments.topk_toy", "the I-MLE paper's synthetic top-k experiment"),
    "vae": ("imle_solvers.experiments.vae", "the I-MLE paper's discrete 10-subset VAE"),
    "l2x": ("imle_solvers.experiments.l2x", "learning to explain on a planted-explanation corpus"),
    "train": ("imle_solvers.training", "predict-then-optimize training: compare methods on one problem"),
    "bench": ("imle_solvers.benchmarks", "time the solver back ends, the pool, the layer and training"),
}
"""Command name → (module whose `main(argv)` runs it, one-line summary shown by `--help`)."""

DESCRIPTION = """\
Differentiable combinatorial solvers for PyTorch (Implicit MLE).

Run 'imle-solvers COMMAND --help' for the options of a command."""

EPILOG = """\
examples:
  imle-solvers demo                       # a first run: writes runs/demo/curves.png
  imle-solvers train --method all --deg 4
  imle-solvers bench backends --quick"""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default and keeps the description's line breaks.

    As `argparse.ArgumentDefaultsHelpFormatter`, but silent about defaults that say nothing (`None`,
    `False` of a flag) and about help that already names its default.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the command listing, `--version`, and errors for a missing command."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="imle-solvers",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"imle-solvers {__version__}",
        help="show the version and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)
    for name, (_, summary) in COMMANDS.items():
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `imle-solvers` console script; returns the exit status.

    A missing or unknown command prints the usage and returns 2, as argparse does.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        try:
            build_parser().parse_args(args)  # prints help, version or the usage error
        except SystemExit as exc:
            return int(exc.code or 0) if not isinstance(exc.code, str) else 2
        return 2  # pragma: no cover - parse_args always exits here
    module = importlib.import_module(COMMANDS[args[0]][0])
    try:
        return int(module.main(args[1:]) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
