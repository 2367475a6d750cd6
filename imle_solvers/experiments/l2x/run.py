"""L2X's runner: `run_l2x` trains every method, k and seed of an `L2XConfig` and gives an `L2XResult`."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from ...app.config import RunSettings, count, inherit, option, positive_number
from ...app.machine import resolve_device
from ...app.report import progress
from ...app.results import Metric, Summary
from ...app.session import Session
from ...errors import ConfigError
from .methods import METHODS, L2XMethod
from .model import Explainer, Predictor
from .planted import CorpusSpec, PlantedCorpus, make_corpus, subset_precision

__all__ = ["SUMMARY", "L2XConfig", "L2XResult", "L2XRun", "header", "run_l2x"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class L2XConfig(RunSettings):
    """Settings of [`run_l2x`][imle_solvers.experiments.l2x.run_l2x] and ``imle-solvers l2x``.

    Attributes
    ----------
    methods
        Keys of [`METHODS`][imle_solvers.experiments.l2x.METHODS].
    ks
        Subset sizes k.
    seeds
        Seeds (corpus draw, initialisation, noise).
    n_train
        Training reviews (one generated corpus per seed).
    n_val
        Validation reviews (the epoch with the best validation MSE is tested).
    n_test
        Test reviews.
    epochs
        Passes over the training reviews.
    batch_size
        Reviews per Adam step.
    lr
        Adam's learning rate.
    lam
        λ of the I-MLE target. The paper's grid is 10, 100, 1000; here the loss is the batch *mean* and
        the predictor averages over the k selected tokens, so ``∇z L`` is ~``40 k`` times smaller per
        entry and λ must be larger for the target state to differ from the sampled one (λ = 100
        left I-MLE at chance precision, λ = 10⁴ did not; see the experiments page).
    tau_factor
        SoG temperature τ = ``tau_factor`` · k (the paper's grid: 1, 2, 3).
    emb
        Embedding width (the paper: 200).
    filters
        Convolution channels (the paper: 250).
    hidden
        Dense width (the paper: 100).
    corpus
        The generated corpus' shape (Python API only).
    device
        Torch device (``cpu``, ``cuda``, ``cuda:N``, ``auto``).
    threads
        torch CPU threads during the run.
    out
        Folder for ``results.json`` and ``results.md``.
    show_progress
        A progress bar.
    """

    command: ClassVar[str] = "l2x"
    description: ClassVar[str] = (
        "Learning to explain with k-subset masks on a corpus with planted explanations: test MSE and "
        "subset precision\nof every method, k and seed."
    )

    methods: tuple[str, ...] = option(
        tuple(METHODS),
        "methods to compare (listed below)",
        flags=("--methods", "--method"),
        choices=lambda: tuple(METHODS),
        metavar="NAME",
    )
    ks: tuple[int, ...] = option((5, 10, 15), "subset sizes k", check=count, metavar="K")
    n_train: int = option(1000, "training reviews", flags=("--n-train", "--train"), check=count)
    n_val: int = option(250, "validation reviews", flags=("--n-val", "--val"), check=count)
    n_test: int = option(500, "test reviews", flags=("--n-test", "--test"), check=count)
    epochs: int = option(8, "epochs", check=count)
    batch_size: int = option(40, "reviews per step", check=count)
    lr: float = option(1e-3, "Adam learning rate", check=positive_number)
    lam: float = option(10000.0, "λ of the I-MLE target", check=positive_number)
    tau_factor: float = option(1.0, "SoG temperature τ = factor · k", check=positive_number)
    emb: int = option(32, "embedding width", check=count)
    filters: int = option(32, "convolution channels", check=count)
    hidden: int = option(32, "dense width", check=count)
    corpus: CorpusSpec = dataclasses.field(default_factory=CorpusSpec)
    seeds: tuple[int, ...] = inherit("seeds", (0, 1, 2))

    @classmethod
    def help_epilog(cls) -> str:
        return "methods:\n" + METHODS.listing()

    def validate(self) -> None:
        if not isinstance(self.corpus, CorpusSpec):
            raise ConfigError(f"must be a CorpusSpec, got {self.corpus!r}", "corpus")
        bad = [k for k in self.ks if not k < self.corpus.length]
        if bad:
            raise ConfigError(f"must be in [1, {self.corpus.length}) (the review length), got {bad}", "ks")


@dataclasses.dataclass(frozen=True)
class L2XRun:
    """One finished (method, k, seed) run.

    Attributes
    ----------
    method
        The method's key.
    label
        Its label in tables.
    k
        Subset size.
    seed
        Seed of the corpus, the initialisation and the noise.
    mse
        Test MSE × 100 (as the paper) of the best-validation model.
    precision
        Its subset precision on the test set, in %.
    best_epoch
        The epoch with the best validation MSE (1-based).
    val_mse
        Validation MSE × 100 after every epoch.
    train_loss
        Mean training loss of every epoch.
    seconds
        Training wall time.
    ceiling
        Subset precision (%) of a selector that picks planted tokens first, on this test set.
    """

    method: str
    label: str
    k: int
    seed: int
    mse: float
    precision: float
    best_epoch: int
    val_mse: list[float]
    train_loss: list[float]
    seconds: float
    ceiling: float

    @property
    def key(self) -> str:
        """The file name of the run: ``<method>-k<k>-seed<seed>``."""
        return f"{self.method}-k{self.k}-seed{self.seed}"


SUMMARY = Summary(
    by=("k", "method", "label"),
    metrics=(
        Metric("mse", "test MSE ×100", 2),
        Metric("precision", "subset precision %", 2),
        Metric("ceiling", "planted ceiling %", 1, spread=False),
        Metric("seconds", "s / run", 1, spread=False),
    ),
)
"""Per (k, method), over seeds: test MSE and subset precision (mean ± std), the ceiling, seconds per run."""


@dataclasses.dataclass
class L2XResult:
    """Outcome of [`run_l2x`][imle_solvers.experiments.l2x.run_l2x].

    Attributes
    ----------
    config
        The settings.
    runs
        One [`L2XRun`][imle_solvers.experiments.l2x.L2XRun] per (seed, k, method).
    """

    config: dict[str, Any]
    runs: list[L2XRun]

    @property
    def oracle_precision(self) -> dict[int, float]:
        """``k →`` mean over seeds of the planted ceiling, in %."""
        out: dict[int, list[float]] = {}
        for run in self.runs:
            if run.method == self.runs[0].method:
                out.setdefault(run.k, []).append(run.ceiling)
        return {k: sum(v) / len(v) for k, v in out.items()}


def _evaluate(
    explainer: Explainer, sampler: nn.Module, predictor: Predictor, data: PlantedCorpus, batch: int
) -> tuple[float, float]:
    """(MSE, subset precision) with the hard top-k of θ as the explanation."""
    for module in (explainer, sampler, predictor):
        module.eval()
    se, masks = 0.0, []
    with torch.no_grad():
        for start in range(0, len(data), batch):
            part = data.subset(slice(start, start + batch))
            mask = sampler(explainer(part.tokens))  # hard top-k of θ in eval()   [B, L]
            se += float(((predictor(part.tokens, mask) - part.ratings) ** 2).sum())
            masks.append(mask)
    return se / len(data), subset_precision(torch.cat(masks), data.planted)


def _train_one(
    key: str,
    k: int,
    seed: int,
    splits: tuple[PlantedCorpus, PlantedCorpus, PlantedCorpus],
    cfg: L2XConfig,
    method: L2XMethod | None = None,
) -> L2XRun:
    """One run; ``method`` replaces ``METHODS[key]()`` (``bench targets`` passes its own samplers)."""
    device = resolve_device(cfg.device)
    train, val, test = splits
    torch.manual_seed(seed)
    vocab, length = cfg.corpus.vocab_size, cfg.corpus.length
    explainer = Explainer(vocab, cfg.emb, cfg.filters, cfg.hidden).to(device)
    predictor = Predictor(vocab, k, cfg.emb, cfg.hidden).to(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    method = METHODS[key]() if method is None else method
    sampler = method.make(k, length, cfg, gen)
    params = list(explainer.parameters()) + list(predictor.parameters())
    optimiser = torch.optim.Adam(params, lr=cfg.lr)
    order_gen = torch.Generator().manual_seed(seed)
    best: tuple[float, int, Any] = (float("inf"), -1, None)
    val_curve, train_curve = [], []
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        for module in (explainer, sampler, predictor):
            module.train()
        total = 0.0
        for idx in torch.randperm(len(train), generator=order_gen).split(cfg.batch_size):
            tokens, ratings = train.tokens[idx.to(device)], train.ratings[idx.to(device)]
            mask = sampler(explainer(tokens))  # z = TopK(θ + ε) or a relaxed mask   [B, L]
            loss = ((predictor(tokens, mask) - ratings) ** 2).mean()  # MSE (mean over the batch)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(idx)
        train_curve.append(total / len(train))
        val_mse, _ = _evaluate(explainer, sampler, predictor, val, 200)
        val_curve.append(100 * val_mse)
        if val_mse < best[0]:
            best = (val_mse, epoch, copy.deepcopy((explainer.state_dict(), predictor.state_dict())))
    seconds = time.perf_counter() - start
    explainer.load_state_dict(best[2][0])
    predictor.load_state_dict(best[2][1])
    mse, precision = _evaluate(explainer, sampler, predictor, test, 200)
    return L2XRun(
        method=key,
        label=method.name,
        k=k,
        seed=seed,
        mse=100 * mse,
        precision=100 * precision,
        best_epoch=best[1] + 1,
        val_mse=val_curve,
        train_loss=train_curve,
        seconds=seconds,
        ceiling=100 * test.oracle_precision(k),
    )


def run_l2x(
    config: L2XConfig | None = None, *, on_result: Callable[[L2XRun], None] | None = None
) -> L2XResult:
    """Train explainer + predictor for every method, k and seed; test MSE and subset precision.

    Does what ``imle-solvers l2x`` does: the machine is checked first (``device``, ``out``:
    [`ConfigError`][imle_solvers.errors.ConfigError] before any work), ``threads`` is applied and
    restored, each run is written to ``out`` as it finishes, then ``results.json`` and ``results.md``;
    on Ctrl-C the finished runs are kept.

    Parameters
    ----------
    config
        The settings (default [`L2XConfig`][imle_solvers.experiments.l2x.L2XConfig]`()`).
    on_result
        Called with each run as soon as it finishes.
    """
    cfg = L2XConfig() if config is None else config
    with Session(cfg, SUMMARY, on_result=on_result) as session:
        device = resolve_device(cfg.device)
        plan = [(seed, k, key) for seed in cfg.seeds for k in cfg.ks for key in cfg.methods]
        corpora: dict[int, tuple[PlantedCorpus, PlantedCorpus, PlantedCorpus]] = {}
        items = progress(plan, desc="l2x", total=len(plan)) if cfg.show_progress else iter(plan)
        for seed, k, key in items:
            if seed not in corpora:
                full = make_corpus(cfg.n_train + cfg.n_val + cfg.n_test, cfg.corpus, seed=seed)
                full = PlantedCorpus(
                    full.tokens.to(device), full.ratings.to(device), full.planted.to(device), cfg.corpus
                )
                a, b = cfg.n_train, cfg.n_train + cfg.n_val
                corpora[seed] = (
                    full.subset(slice(0, a)),
                    full.subset(slice(a, b)),
                    full.subset(slice(b, None)),
                )
            session.add(_train_one(key, k, seed, corpora[seed], cfg))
        result = L2XResult(cfg.as_dict(), list(session.records))
        session.finish(markdown=header(result))
    return result


def header(result: L2XResult) -> str:
    """One line saying what ran."""
    c = result.config
    return (
        f"Learning to explain on a planted corpus ({c['n_train']}/{c['n_val']}/{c['n_test']} reviews of "
        f"{c['corpus']['length']} tokens), {c['epochs']} epochs, λ = {c['lam']:g}, "
        f"SoG τ = {c['tau_factor']:g}·k, seeds {list(c['seeds'])}, device {c['device']}"
    )
