"""Learning to explain (paper, sec. 6 "Learning to Explain", after Chen et al. 2018), on planted data.

An *explainer* reads a review and scores its positions, ``θ ∈ R^L``; a k-subset layer turns the
scores into a k-hot mask ``z``; a *predictor* sees only the selected tokens (the mean of their
embeddings) and regresses the rating; the loss is the MSE. Nothing tells the explainer which
tokens matter: it learns it through the gradient of the predictor's loss with respect to ``z``.
The corpus is generated with planted explanations (`imle_solvers.experiments.planted`), so the
*subset precision* of the learned selection, which the paper measures against human annotations
on BeerAdvocate, is measured exactly.

Networks (the L2X architecture of the paper's appendix, narrower for a CPU): the explainer embeds
the tokens, applies a convolution, takes a global max-pooled feature and two more local
convolutions, concatenates local and global features and maps them to one score per position;
the predictor has its own embedding, averages the ``k`` selected embeddings and applies a dense
layer and a sigmoid. Adam (1e-3), batch size 40, the model with the best validation MSE among
the epochs is evaluated on the test set, with the hard top-k of θ as the explanation.

Methods (the sampler between explainer and predictor):

| key | method |
|---|---|
| ``imle-sog`` | `IMLE(TopK(k, L), noise=SumOfGamma(k=k, tau=τ), target=PerturbedTarget(λ))` |
| ``imle-gumbel`` | the same with `Gumbel(1.0)` noise |
| ``ste`` | `STE(TopK(k, L), noise=SumOfGamma(k=k, tau=τ))` |
| ``l2x`` | L2X's relaxed top-k, t = 0.1 (`L2XRelaxedTopK`) |
| ``softsub`` | Xie and Ermon's relaxed subset sampling, t = 0.5 (`SoftSub`) |

Entry points: [`run_l2x`][imle_solvers.experiments.l2x.run_l2x] and `main` (``imle-solvers l2x``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._checks import positive_int
from ..estimators import STE
from ..imle import IMLE
from ..noise import Gumbel, SumOfGamma
from ..report import format_table, progress, write_outputs
from ..target import PerturbedTarget
from ..topk import TopK
from .planted import CorpusSpec, PlantedCorpus, make_corpus, subset_precision
from .relaxed_subsets import L2XRelaxedTopK, SoftSub

__all__ = ["METHODS", "Explainer", "L2XConfig", "L2XResult", "Predictor", "main", "result_table", "run_l2x"]

#: ``make(k, n_positions, config, generator) -> sampler``: θ ``[B, L]`` → mask ``[B, L]``
Maker = Callable[[int, int, "L2XConfig", "torch.Generator | None"], nn.Module]


def _imle_sog(k: int, n: int, cfg: L2XConfig, gen: torch.Generator | None) -> nn.Module:
    noise = SumOfGamma(k=k, tau=cfg.tau_factor * k, s=10)
    return IMLE(TopK(k, n), noise=noise, target=PerturbedTarget(cfg.lam), generator=gen)


def _imle_gumbel(k: int, n: int, cfg: L2XConfig, gen: torch.Generator | None) -> nn.Module:
    return IMLE(TopK(k, n), noise=Gumbel(1.0), target=PerturbedTarget(cfg.lam), generator=gen)


def _ste(k: int, n: int, cfg: L2XConfig, gen: torch.Generator | None) -> nn.Module:
    return STE(TopK(k, n), noise=SumOfGamma(k=k, tau=cfg.tau_factor * k, s=10), generator=gen)


#: key → (label, sampler factory)
METHODS: dict[str, tuple[str, Maker]] = {
    "imle-sog": ("I-MLE SoG", _imle_sog),
    "imle-gumbel": ("I-MLE Gumbel(0,1)", _imle_gumbel),
    "ste": ("STE SoG", _ste),
    "l2x": ("L2X (t=0.1)", lambda k, n, cfg, gen: L2XRelaxedTopK(k, 0.1, generator=gen)),
    "softsub": ("SoftSub (t=0.5)", lambda k, n, cfg, gen: SoftSub(k, 0.5, generator=gen)),
}


class Explainer(nn.Module):
    """Scores ``[B, L]`` for ``[B, L]`` token ids: the L2X explainer (local + global convolutions).

    References
    ----------
    Chen, Song, Wainwright & Jordan, "Learning to Explain: An Information-Theoretic Perspective on Model
    Interpretation", ICML 2018, <https://arxiv.org/abs/1802.07814>.
    """

    def __init__(self, vocab: int, emb: int = 32, filters: int = 64, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(0.2)
        self.conv = nn.Conv1d(emb, filters, 3, padding=1)
        self.global_dense = nn.Linear(filters, hidden)
        self.local = nn.Sequential(
            nn.Conv1d(filters, filters, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(filters, filters, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Dropout(0.2), nn.Conv1d(filters + hidden, hidden, 1), nn.ReLU(), nn.Conv1d(hidden, 1, 1)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(self.drop(self.embed(tokens)).transpose(1, 2)))  # [B, F, L]
        glob = torch.relu(self.global_dense(h.max(dim=-1).values))  # global max-pool → dense   [B, H]
        both = torch.cat([self.local(h), glob[:, :, None].expand(-1, -1, h.shape[-1])], dim=1)  # [B, F+H, L]
        return self.head(both).squeeze(1)  # θ: one score per position   [B, L]


class Predictor(nn.Module):
    """Rating in (0, 1) from the selected tokens: mean of their embeddings → dense → sigmoid."""

    def __init__(self, vocab: int, k: int, emb: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.k = k
        self.embed = nn.Embedding(vocab, emb)
        self.out = nn.Sequential(nn.Linear(emb, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = (self.embed(tokens) * mask[..., None]).sum(dim=1) / self.k  # mean of selected   [B, E]
        return torch.sigmoid(self.out(pooled)).squeeze(-1)  # [B]


@dataclasses.dataclass(frozen=True, kw_only=True)
class L2XConfig:
    """Settings of [`run_l2x`][imle_solvers.experiments.l2x.run_l2x].

    Attributes
    ----------
    methods, ks, seeds
        What to compare: keys of `METHODS`, subset sizes, seeds (corpus draw, initialisation, noise).
    n_train, n_val, n_test
        Reviews per split (one generated corpus per seed).
    epochs, batch_size, lr
        Adam; the model with the best validation MSE is tested.
    lam
        λ of the I-MLE target. The paper's grid is 10, 100, 1000; here the loss is the batch *mean* and
        the predictor averages over the k selected tokens, so ``∇z L`` is ~``40 k`` times smaller per
        entry and λ must be larger for the target state to differ from the sampled one (λ = 100
        left I-MLE at chance precision, λ = 10⁴ did not; see docs).
    tau_factor
        SoG temperature τ = ``tau_factor`` · k (the paper's grid: 1, 2, 3).
    emb, filters, hidden
        Network widths (the paper: 200, 250, 100).
    corpus
        The generated corpus' shape.
    device
        Torch device.
    """

    methods: tuple[str, ...] = tuple(METHODS)
    ks: tuple[int, ...] = (5, 10, 15)
    seeds: tuple[int, ...] = (0, 1, 2)
    n_train: int = 1000
    n_val: int = 250
    n_test: int = 500
    epochs: int = 8
    batch_size: int = 40
    lr: float = 1e-3
    lam: float = 10000.0
    tau_factor: float = 1.0
    emb: int = 32
    filters: int = 32
    hidden: int = 32
    corpus: CorpusSpec = dataclasses.field(default_factory=CorpusSpec)
    device: str = "cpu"

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown methods {unknown}; choose among {sorted(METHODS)}")
        bad = [k for k in self.ks if not 1 <= k < self.corpus.length]
        if bad or not self.ks:
            raise ValueError(f"k must be in [1, {self.corpus.length}), got {list(self.ks)}")
        for name in ("n_train", "n_val", "n_test", "epochs", "batch_size"):
            positive_int(name, getattr(self, name))
        if not self.seeds:
            raise ValueError("need at least one seed")


@dataclasses.dataclass
class L2XResult:
    """Outcome of [`run_l2x`][imle_solvers.experiments.l2x.run_l2x].

    Attributes
    ----------
    config
        The settings.
    runs
        One dict per (method, k, seed): ``mse`` and ``precision`` on the test set (both × 100, as the
        paper), ``best_epoch``, ``val_mse`` per epoch (× 100), ``train_loss`` per epoch, ``seconds``.
    oracle_precision
        ``k → `` precision × 100 of a selector that picks planted tokens first (the ceiling).
    """

    config: dict[str, Any]
    runs: list[dict[str, Any]]
    oracle_precision: dict[int, float]

    def save_json(self, path: str | Path) -> None:
        """Write everything to ``path`` as JSON."""
        Path(path).write_text(json.dumps(dataclasses.asdict(self), indent=1))


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
    key: str, k: int, seed: int, splits: tuple[PlantedCorpus, PlantedCorpus, PlantedCorpus], cfg: L2XConfig
) -> dict[str, Any]:
    device = torch.device(cfg.device)
    train, val, test = splits
    torch.manual_seed(seed)
    vocab, length = cfg.corpus.vocab_size, cfg.corpus.length
    explainer = Explainer(vocab, cfg.emb, cfg.filters, cfg.hidden).to(device)
    predictor = Predictor(vocab, k, cfg.emb, cfg.hidden).to(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    sampler = METHODS[key][1](k, length, cfg, gen)
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
    return {
        "method": key, "k": k, "seed": seed, "mse": 100 * mse, "precision": 100 * precision,
        "best_epoch": best[1] + 1, "val_mse": val_curve, "train_loss": train_curve, "seconds": seconds,
    }  # fmt: skip


def run_l2x(config: L2XConfig | None = None, *, progress_bar: bool = False) -> L2XResult:
    """Train explainer + predictor for every method, k and seed; test MSE and subset precision.

    Parameters
    ----------
    config
        The settings (default [`L2XConfig`][imle_solvers.experiments.l2x.L2XConfig]`()`).
    progress_bar
        Show a progress bar on stderr.
    """
    cfg = L2XConfig() if config is None else config
    device = torch.device(cfg.device)
    plan = [(seed, k, key) for seed in cfg.seeds for k in cfg.ks for key in cfg.methods]
    corpora: dict[int, tuple[PlantedCorpus, PlantedCorpus, PlantedCorpus]] = {}
    runs = []
    oracle: dict[int, list[float]] = {}
    items = progress(plan, desc="l2x", total=len(plan)) if progress_bar else iter(plan)
    for seed, k, key in items:
        if seed not in corpora:
            full = make_corpus(cfg.n_train + cfg.n_val + cfg.n_test, cfg.corpus, seed=seed)
            full = PlantedCorpus(
                full.tokens.to(device), full.ratings.to(device), full.planted.to(device), cfg.corpus
            )
            a, b = cfg.n_train, cfg.n_train + cfg.n_val
            corpora[seed] = (full.subset(slice(0, a)), full.subset(slice(a, b)), full.subset(slice(b, None)))
        if key == cfg.methods[0]:
            oracle.setdefault(k, []).append(100 * corpora[seed][2].oracle_precision(k))
        runs.append(_train_one(key, k, seed, corpora[seed], cfg))
    info = {
        **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "corpus"},
        "corpus": dataclasses.asdict(cfg.corpus), "names": {key: METHODS[key][0] for key in cfg.methods},
    }  # fmt: skip
    return L2XResult(info, runs, {k: sum(v) / len(v) for k, v in oracle.items()})


def result_table(result: L2XResult) -> str:
    """Markdown table: test MSE and subset precision (× 100, mean ± std over seeds) per k and method."""
    rows = []
    for k in result.config["ks"]:
        for key in result.config["methods"]:
            runs = [r for r in result.runs if r["method"] == key and r["k"] == k]
            mse = torch.tensor([r["mse"] for r in runs], dtype=torch.float64)
            prec = torch.tensor([r["precision"] for r in runs], dtype=torch.float64)
            rows.append(
                {
                    "k": k,
                    "method": result.config["names"][key],
                    "test MSE ×100": _pm(mse),
                    "subset precision %": _pm(prec),
                    "planted ceiling %": f"{result.oracle_precision[k]:.1f}",
                    "s / run": f"{sum(r['seconds'] for r in runs) / len(runs):.1f}",
                }
            )
    return format_table(rows)


def _pm(values: torch.Tensor) -> str:
    std = float(values.std()) if values.numel() > 1 else 0.0
    return f"{float(values.mean()):.2f} ± {std:.2f}"


def build_parser() -> argparse.ArgumentParser:
    """The options of ``imle-solvers l2x``."""
    parser = argparse.ArgumentParser(
        prog="imle-solvers l2x",
        description="Learning to explain with k-subset masks on a corpus with planted explanations.",
    )
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="M",
                        help=f"methods (default all): {', '.join(METHODS)}")  # fmt: skip
    parser.add_argument(
        "--ks", type=int, nargs="+", default=[5, 10, 15], help="subset sizes (default 5 10 15)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parser.add_argument("--train", type=int, default=1000, help="training reviews (default 1000)")
    parser.add_argument("--val", type=int, default=250, help="validation reviews (default 250)")
    parser.add_argument("--test", type=int, default=500, help="test reviews (default 500)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs (default 8)")
    parser.add_argument("--lam", type=float, default=10000.0, help="I-MLE λ (default 10000)")
    parser.add_argument("--tau-factor", type=float, default=1.0, help="SoG τ = factor · k (default 1)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    parser.add_argument("--out", default="runs/l2x", help="output directory (default runs/l2x)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers l2x``: train, print the table, write ``l2x.json`` and ``l2x.md`` to ``--out``."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = L2XConfig(
            methods=tuple(args.methods), ks=tuple(args.ks), seeds=tuple(args.seeds), n_train=args.train,
            n_val=args.val, n_test=args.test, epochs=args.epochs, lam=args.lam, tau_factor=args.tau_factor,
            device=args.device,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    start = time.perf_counter()
    result = run_l2x(config, progress_bar=not args.no_progress)
    elapsed = time.perf_counter() - start
    table = result_table(result)
    c = result.config
    header = (
        f"Learning to explain on a planted corpus ({c['n_train']}/{c['n_val']}/{c['n_test']} reviews of "
        f"{c['corpus']['length']} tokens), {c['epochs']} epochs, λ = {c['lam']:g}, "
        f"SoG τ = {c['tau_factor']:g}·k, "
        f"seeds {list(c['seeds'])}, device {c['device']}; {elapsed:.0f} s in all"
    )
    print(header)
    print(table)
    command = "imle-solvers l2x " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    written = write_outputs(Path(args.out), "l2x", result.save_json, f"{header}\n\n{table}", command)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
