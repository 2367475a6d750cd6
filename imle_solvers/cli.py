"""The `imle-solvers` command (also `python -m imle_solvers`): `demo`, `toy`, `vae`, `l2x`, `sort`, `train`,
`bench`.

Each command lives in its own module exposing ``COMMAND`` (a [`Command`][imle_solvers.app.command.Command]:
its configuration type, whose fields generate its parser, and ``run(config)``, which does from Python
what the command does) and ``main(argv) -> int``. The module is imported only when its command runs,
so `imle-solvers --help` is instant and needs no extras.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence

from ._command_start import EXIT_STATUS, release
from .app.config import Parser, usage_error

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "imle_solvers.experiments.pto_demo",
        "train a shortest-path model three ways and plot its learning curves",
    ),
    "toy": ("imle_solvers.experiments.topk_toy.cli", "the I-MLE paper's synthetic top-k experiment"),
    "vae": ("imle_solvers.experiments.vae.cli", "the I-MLE paper's discrete 10-subset VAE"),
    "l2x": ("imle_solvers.experiments.l2x.cli", "learning to explain on a planted-explanation corpus"),
    "sort": (
        "imle_solvers.experiments.sort.cli",
        "learn to sort handwritten numbers through a matching layer",
    ),
    "train": (
        "imle_solvers.training.command",
        "predict-then-optimize training: compare methods on one problem",
    ),
    "bench": ("imle_solvers.benchmarks", "time the solver back ends, the pool, the layer and training"),
}
"""Command name → (module with its ``COMMAND`` and ``main(argv)``, one-line summary shown by `--help`)."""

DESCRIPTION = """\
Differentiable combinatorial solvers for PyTorch (Implicit MLE).

Run 'imle-solvers COMMAND --help' for the options of a command."""

EPILOG = """\
examples:
  imle-solvers demo --out runs/demo       # a first run: writes runs/demo/curves.png
  imle-solvers train --methods all --deg 4
  imle-solvers bench backends --quick"""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the command listing, `--version`, and errors for a missing command."""
    from . import __version__

    parser = Parser(
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

    A missing or unknown command prints one line (with the closest command for a misspelt one) and a
    pointer to ``--help``, and returns 2. Ctrl-C while the command loads prints ``interrupted`` and
    returns 130 (before this runs, while PyTorch loads, the package's start-up guard does the same).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        if args and args[0].startswith("-"):
            try:
                build_parser().parse_args(args)  # --help, --version, or an unknown option
            except SystemExit as exc:
                return int(exc.code or 0) if not isinstance(exc.code, str) else 2
        print(usage_error("imle-solvers", _unknown(args[0] if args else None)), file=sys.stderr, end="")
        return 2
    try:
        module = importlib.import_module(COMMANDS[args[0]][0])
        release()  # from here Ctrl-C raises KeyboardInterrupt, which the command handles
        return int(module.main(args[1:]) or 0)
    except KeyboardInterrupt:  # before the command's own handling (parsing)
        print("interrupted", file=sys.stderr)
        return EXIT_STATUS


def _unknown(name: str | None) -> str:
    listing = ", ".join(COMMANDS)
    if name is None:
        return f"a command is required: {listing}"
    close = difflib.get_close_matches(name.casefold(), list(COMMANDS), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown command {name!r}{hint}: the commands are {listing}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
