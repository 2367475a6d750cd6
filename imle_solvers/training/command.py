"""``imle-solvers train``: the parser (`build_parser`) and the command (`main`); the work is `run`.

Every option is checked when it is parsed (an argparse error, exit status 2) and the output folder
before any training; finished runs are written as they finish, and Ctrl-C keeps them (exit status 130).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch

from ..report import format_table
from .config import MODELS, ORACLES, SCHEDULES, TrainConfig, option_type
from .methods import METHODS
from .problems import PROBLEMS
from .results import ResultWriter, check_output_dir, summarize
from .runner import run

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
Predict-then-optimize training and a head-to-head comparison of methods.

A model predicts the weights of an optimisation problem from features and is trained, by one of
the methods, on the quality of the decisions it leads to. Reported: the normalised test regret
(PyEPO's metric) after every epoch, the share of test instances decided optimally, and the seconds
per training epoch.

Examples:
    imle-solvers train --problem shortest-path --method imle-mumu spo+ two-stage --deg 4 \\
        --seeds 0 1 2 --out runs/sp
    imle-solvers train --problem terrain --size 30 --model resnet-stem --schedule paper \\
        --method imle-mumu --device cuda --out runs/warcraft30
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``imle-solvers train`` (each numeric option checked by its constraint)."""
    methods_help = "; ".join(f"{k}: {v}" for k, v in METHODS.items())
    p = argparse.ArgumentParser(
        prog="imle-solvers train",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add("--problem", choices=list(PROBLEMS), default="shortest-path")
    add(
        "--method",
        dest="methods",
        nargs="+",
        default=["imle-mumu", "spo+", "two-stage"],
        metavar="NAME",
        help=f"one or more of: {methods_help}; or 'all'",
    )
    add("--epochs", type=option_type("epochs"), default=None, help="default: 10 (50 with --schedule paper)")
    add(
        "--batch-size",
        type=option_type("batch_size"),
        default=None,
        help="default: 32 (terrain 35; 70 with --schedule paper)",
    )
    add("--lr", type=option_type("lr"), default=None, help="Adam learning rate (1e-2; terrain 5e-4)")
    add(
        "--schedule",
        choices=list(SCHEDULES),
        default="constant",
        help="'paper': the Warcraft protocol, 50 epochs, batch 70, lr 5e-4 divided by 10 after epochs 30 "
        "and 40 (explicit options override it)",
    )
    add(
        "--lr-drops",
        dest="lr_drops",
        type=option_type("lr_drops"),
        nargs="+",
        default=None,
        metavar="EPOCH",
        help="epochs after which the learning rate is divided by 10 (default: the schedule's)",
    )
    add(
        "--seed",
        "--seeds",
        dest="seeds",
        type=option_type("seeds"),
        nargs="+",
        default=[0],
        help="one or more seeds (data and initialisation)",
    )
    add("--deg", type=option_type("deg"), default=1, help="polynomial degree of the cost model")
    add(
        "--noise-width",
        type=option_type("noise_width"),
        default=0.5,
        help="ē, multiplicative noise half-width",
    )
    add("--n-train", type=option_type("n_train"), default=None, help="default: 1000 (terrain 10000)")
    add("--n-test", type=option_type("n_test"), default=None, help="default: 1000")
    add(
        "--samples",
        type=option_type("samples"),
        default=None,
        help="S of perturbation methods (10; terrain 1)",
    )
    add(
        "--size", type=option_type("size"), default=12, help="terrain grid size K (the paper: 12, 18, 24, 30)"
    )
    add(
        "--model",
        choices=list(MODELS),
        default=None,
        help="linear (shortest-path, knapsack); terrain-cnn (terrain default) or resnet-stem (the paper's "
        "ResNet18 first block)",
    )
    add(
        "--noise",
        choices=["sog", "gumbel"],
        default="sog",
        help="I-MLE perturbation: SumOfGamma (κ from the oracle) or Gumbel",
    )
    add("--tau", type=option_type("tau"), default=1.0, help="temperature τ of the I-MLE noise")
    add("--lam", type=option_type("lam"), default=10.0, help="λ of the PID target (method imle)")
    add(
        "--bb-loss",
        choices=["regret", "hamming"],
        default=None,
        help="loss behind the dbb layer (default: regret; hamming on terrain)",
    )
    add(
        "--device",
        type=option_type("device"),
        default="cpu",
        help="cpu, cuda, cuda:N or auto (cuda when available); model, data and noise live there",
    )
    add(
        "--oracle",
        choices=list(ORACLES),
        default="auto",
        help="device: device-native oracles; host: solver-backed ones; auto: device-native on a GPU",
    )
    add("--workers", type=option_type("workers"), default=0, help="solver pool processes (0: solve inline)")
    add("--threads", type=option_type("threads"), default=1, help="torch CPU threads")
    add(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="generate terrain maps afresh instead of keeping them in the user cache folder",
    )
    add(
        "--out",
        default=None,
        metavar="DIR",
        help="write results.json, curves.png and runs/<method>-seed<seed>.json (each run as it finishes)",
    )
    add("--quiet", dest="show_progress", action="store_false", help="no progress bars")
    return p


def parse_config(parser: argparse.ArgumentParser, argv: Sequence[str]) -> TrainConfig:
    """Parse and check ``argv`` (exit status 2 on any error, before any work)."""
    args = parser.parse_args(list(argv))
    if args.methods == ["all"]:
        args.methods = list(METHODS)
    try:
        config = TrainConfig.from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if config.out is not None:
        try:
            check_output_dir(config.out)
        except ValueError as exc:
            parser.error(f"argument --out: {exc}")
    return config


def main(argv: Sequence[str]) -> int:
    """``imle-solvers train --problem ... --method ... [options]``; returns the exit status."""
    parser = build_parser()
    config = parse_config(parser, argv)
    torch.set_num_threads(config.threads)
    if config.device != "cpu":
        torch.backends.cudnn.benchmark = True  # fixed image sizes: let cuDNN pick the fastest convolutions
    writer = ResultWriter(None if config.out is None else check_output_dir(config.out), config.as_dict())
    start = time.perf_counter()
    try:
        run(config, on_result=writer.add)
    except KeyboardInterrupt:
        return _interrupted(writer)
    title = f"{config.problem}, deg {config.deg}"
    if config.problem == "terrain":
        title = f"terrain {config.size}×{config.size}, {config.model or 'terrain-cnn'}"
    print(f"\n{title}, {len(config.seeds)} seed(s), {time.perf_counter() - start:.1f} s in all\n")
    print(format_table(summarize(writer.runs)))
    written = writer.finish(complete=True, plot_title=title)
    if writer.folder is not None:
        print(f"\nwrote {' and '.join(str(p) for p in written)} (runs in {writer.folder / 'runs'})")
    return 0


def _interrupted(writer: ResultWriter) -> int:
    """Ctrl-C: keep what finished, say where it is, exit status 130."""
    done = len(writer.runs)
    if writer.runs:
        print(format_table(summarize(writer.runs)))
    if writer.folder is not None and done:
        writer.finish(complete=False)
        print(
            f"interrupted: {done} finished run(s) kept in {writer.folder / 'runs'} "
            f"(summary in {writer.folder / 'results.json'})",
            file=sys.stderr,
        )
    elif writer.folder is not None:
        print(f"interrupted: no run had finished; nothing written to {writer.folder}", file=sys.stderr)
    else:
        print(
            f"interrupted: {done} finished run(s), printed above (use --out DIR to keep them)",
            file=sys.stderr,
        )
    return 130
