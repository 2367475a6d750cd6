"""The ``imle-solvers`` command: ``demo``, ``toy``, ``train``, ``bench``, ``vae`` and ``l2x``.

Each sub-command lives in its own module exposing ``main(argv: list[str]) -> int``; the module is
imported only when its command runs, so ``imle-solvers --help`` is instant and needs no extras.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

#: command -> (module with ``main(argv)``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("imle_solvers.experiments.pto_demo", "short predict-then-optimize run (I-MLE, SPO+, 2-stage)"),
    "toy": ("imle_solvers.experiments.topk_toy", "the paper's synthetic top-k experiment (sec. 6)"),
    "train": ("imle_solvers.training", "predict-then-optimize training with regret, SPO+, I-MLE, ..."),
    "bench": ("imle_solvers.benchmarks", "performance benchmarks: adapters, pool, layer"),
    "vae": ("imle_solvers.experiments.vae", "the paper's discrete 10-subset VAE (sec. 6)"),
    "l2x": ("imle_solvers.experiments.l2x", "learning to explain on a planted-explanation corpus (sec. 6)"),
}


def _usage() -> str:
    lines = ["usage: imle-solvers <command> [options]", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "Run 'imle-solvers <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``imle-solvers`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if args[0] in ("-V", "--version"):
        from . import __version__

        print(f"imle-solvers {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"imle-solvers: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(command[0])
    try:
        return int(module.main(args[1:]) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
