"""The discrete k-subset variational auto-encoder (paper, sec. 6 "Discrete Variational Auto-Encoder").

The encoder maps an image to ``θ ∈ R^{20×20}``: the weights of 20 independent k-subset
distributions over 20 binary variables (``k = 10`` here, as in the paper). A perturb-and-MAP layer
draws one state per distribution (``S = 1``), ``z = TopK(θ + ε)``, and the decoder maps the
``20×20`` binary code back to pixel logits. The loss per image is

    binary cross-entropy(x, decoder(z)) + Σ_{20 latents} KL(q ‖ uniform),   q = softmax(θ)

the paper's "KL divergence between the marginals of the variables and the uniform distribution",
as in the Gumbel-softmax VAE it builds on (exact for the categorical VAE). ``kl="exact"`` uses the
exact ``KL(p(z; θ) ‖ uniform over k-subsets)`` instead (`imle_solvers.experiments.ksubset`; about
twice the time per step). Methods compared, all through the public
API: I-MLE (`IMLE` with `PerturbedTarget(λ)`, λ ∈ {1, 10}) with Sum-of-Gamma noise at τ = 10 and with
Gumbel(0, 1) noise; the straight-through estimator (`STE`); and, as the categorical reference, the
Gumbel-softmax trick on a 1-subset (20-way categorical) VAE with the same networks.

Architecture and optimiser follow the appendix: encoder dense 512-256-400 (ReLU), decoder dense
256-512-pixels (ReLU, logits), Adam with learning rate 1e-3, batch size 100. The test loss after
each epoch is the training objective on the test images with one perturbed sample per image, the
noise drawn from a generator re-seeded identically at every evaluation.

Entry points: [`run_vae`][imle_solvers.experiments.vae.run_vae] →
[`VAEResult`][imle_solvers.experiments.vae.VAEResult], `plot_curves`, `plot_reconstructions`, and
`main` (the ``imle-solvers vae`` command).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import MissingExtraError, require
from ..estimators import STE
from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..report import format_table, progress
from ..target import PerturbedTarget
from ..topk import TopK
from .images import ImageData, load_images
from .ksubset import kl_to_uniform

__all__ = [
    "METHODS",
    "GumbelSoftmax",
    "SubsetVAE",
    "VAEConfig",
    "VAEMethod",
    "VAEResult",
    "main",
    "plot_curves",
    "plot_reconstructions",
    "result_table",
    "run_vae",
]

N_LATENT = 20  # latent distributions
N_VARS = 20  # binary variables per distribution


class GumbelSoftmax(nn.Module):
    """The Gumbel-softmax (concrete) relaxation of a categorical sample (Jang et al., 2017).

    Training: ``softmax((θ + g) / t)``, ``g ~ Gumbel(0, 1)``; evaluation: ``softmax(θ / t)``.

    Parameters
    ----------
    temperature
        t > 0.
    generator
        Optional `torch.Generator` on the weights' device.
    """

    def __init__(self, temperature: float = 0.5, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.generator = generator

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return torch.softmax(theta / self.temperature, dim=-1)
        g = Gumbel(1.0).sample(theta.shape, theta.device, theta.dtype, self.generator)  # g   [..., n]
        return torch.softmax((theta + g) / self.temperature, dim=-1)  # relaxed one-hot      [..., n]


@dataclasses.dataclass(frozen=True)
class VAEMethod:
    """One way of sampling the latent code and differentiating through it.

    Parameters
    ----------
    name
        Label in tables and plots.
    k
        Subset size of each latent distribution (1: categorical).
    make
        ``make(k, generator) -> nn.Module`` mapping θ ``[..., 20]`` to z ``[..., 20]``.
    """

    name: str
    k: int
    make: Callable[[int, torch.Generator | None], nn.Module]


def _imle(noise: Callable[[int], NoiseDistribution], lam: float | None) -> Callable[..., nn.Module]:
    """I-MLE with the fixed-λ target of the paper, or the library's default target when ``lam`` is None."""

    def make(k: int, generator: torch.Generator | None) -> nn.Module:
        target = None if lam is None else PerturbedTarget(lam)
        return IMLE(TopK(k, N_VARS), noise=noise(k), target=target, generator=generator)

    return make


def _ste(noise: Callable[[int], NoiseDistribution]) -> Callable[..., nn.Module]:
    def make(k: int, generator: torch.Generator | None) -> nn.Module:
        return STE(TopK(k, N_VARS), noise=noise(k), generator=generator)

    return make


def _sog(k: int) -> NoiseDistribution:
    return SumOfGamma(k=k, tau=10.0, s=10)  # the paper's SoG at temperature τ = 10


def _gumbel(k: int) -> NoiseDistribution:
    return Gumbel(1.0)


#: The compared methods (``k`` is the subset size of the 10-subset VAE unless the method fixes it).
#: `PAPER_METHODS` (the default) are the paper's; the λ = 100, 1000 variants are opt-in.
METHODS: dict[str, VAEMethod] = {
    "imle-sog-1": VAEMethod("I-MLE SoG(τ=10) λ=1", 10, _imle(_sog, 1.0)),
    "imle-sog-10": VAEMethod("I-MLE SoG(τ=10) λ=10", 10, _imle(_sog, 10.0)),
    "imle-gumbel-1": VAEMethod("I-MLE Gumbel(0,1) λ=1", 10, _imle(_gumbel, 1.0)),
    "imle-gumbel-10": VAEMethod("I-MLE Gumbel(0,1) λ=10", 10, _imle(_gumbel, 10.0)),
    # the library's default target: its step does not shrink with the batch-mean loss
    "imle-sog-default": VAEMethod("I-MLE SoG(τ=10), default target", 10, _imle(_sog, None)),
    "imle-gumbel-default": VAEMethod("I-MLE Gumbel(0,1), default target", 10, _imle(_gumbel, None)),
    # beyond the paper's λ grid: with the batch-mean loss, λ ∈ {1, 10} leaves most rows without gradient
    "imle-sog-100": VAEMethod("I-MLE SoG(τ=10) λ=100", 10, _imle(_sog, 100.0)),
    "imle-sog-1000": VAEMethod("I-MLE SoG(τ=10) λ=1000", 10, _imle(_sog, 1000.0)),
    "imle-gumbel-100": VAEMethod("I-MLE Gumbel(0,1) λ=100", 10, _imle(_gumbel, 100.0)),
    "imle-gumbel-1000": VAEMethod("I-MLE Gumbel(0,1) λ=1000", 10, _imle(_gumbel, 1000.0)),
    "ste-sog": VAEMethod("STE SoG(τ=10)", 10, _ste(_sog)),
    "ste-gumbel": VAEMethod("STE Gumbel(0,1)", 10, _ste(_gumbel)),
    "gsm-categorical": VAEMethod(
        "Gumbel-softmax, 1-subset (t=0.5)", 1, lambda k, gen: GumbelSoftmax(0.5, generator=gen)
    ),
}


PAPER_METHODS: tuple[str, ...] = tuple(k for k in METHODS if not k.endswith(("-100", "-1000")))


class SubsetVAE(nn.Module):
    """Encoder → latent sampler → decoder, the paper's appendix architecture.

    Parameters
    ----------
    n_pixels
        Input and output size.
    sampler
        θ ``[B, 20, 20]`` → z ``[B, 20, 20]`` (an `IMLE`, `STE` or `GumbelSoftmax` layer).
    """

    def __init__(self, n_pixels: int, sampler: nn.Module) -> None:
        super().__init__()
        code = N_LATENT * N_VARS
        self.encoder = nn.Sequential(
            nn.Linear(n_pixels, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, code)
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, n_pixels)
        )
        self.sampler = sampler

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, pixels]`` → (pixel logits ``[B, pixels]``, θ ``[B, 20, 20]``)."""
        theta = self.encoder(x).view(-1, N_LATENT, N_VARS)  # θ   [B, 20, 20]
        z = self.sampler(theta)  # z = MAP(θ + ε) (or a relaxed sample)         [B, 20, 20]
        return self.decoder(z.reshape(-1, N_LATENT * N_VARS)), theta


def latent_kl(theta: torch.Tensor, k: int, kl: str = "softmax") -> torch.Tensor:
    """``[B]`` Σ over the latents of the KL term: ``Σ q log(q n)``, ``q = softmax(θ)`` (``"softmax"``,
    the paper's), or the exact ``KL(p(z; θ) ‖ uniform over k-subsets)`` (``"exact"``)."""
    if kl == "exact":
        return kl_to_uniform(theta, k).sum(dim=-1)
    log_q = torch.log_softmax(theta, dim=-1)  # log q   [B, 20, 20]
    return (log_q.exp() * (log_q + math.log(theta.shape[-1]))).sum(dim=(-2, -1))  # Σ q log(q n)   [B]


def vae_loss(
    logits: torch.Tensor, theta: torch.Tensor, x: torch.Tensor, k: int, kl: str = "softmax"
) -> torch.Tensor:
    """``[B]`` per-image loss: Σ_pixels BCE(x, σ(logits)) + Σ_latents KL (see `latent_kl`)."""
    bce = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=-1)  # [B]
    return bce + latent_kl(theta, k, kl)  # [B]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAEConfig:
    """Settings of [`run_vae`][imle_solvers.experiments.vae.run_vae] (defaults: the paper's, on digits).

    Attributes
    ----------
    methods
        Keys of `METHODS` (default: `PAPER_METHODS`, the paper's λ ∈ {1, 10}).
    seeds
        One run per seed (initialisation, batch order, noise).
    epochs, batch_size, lr
        Adam with learning rate ``lr``; the paper: 100 epochs (of MNIST), batch 100, 1e-3. The default
        30 epochs of the digits keep the full comparison within minutes on a CPU.
    data
        ``None`` for scikit-learn's digits, else a path for
        [`load_mnist`][imle_solvers.experiments.images.load_mnist].
    max_train, max_test
        Optional caps on the number of images (for quick runs).
    kl
        ``"softmax"`` (the paper's KL term) or ``"exact"`` (see `latent_kl`).
    device
        Torch device of the models, data and noise.
    """

    methods: tuple[str, ...] = PAPER_METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 30
    batch_size: int = 100
    lr: float = 1e-3
    data: str | None = None
    max_train: int | None = None
    max_test: int | None = None
    kl: str = "softmax"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kl not in ("softmax", "exact"):
            raise ValueError(f"kl must be 'softmax' or 'exact', got {self.kl!r}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown methods {unknown}; choose among {sorted(METHODS)}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.seeds:
            raise ValueError("need at least one seed")


@dataclasses.dataclass
class VAEResult:
    """Outcome of [`run_vae`][imle_solvers.experiments.vae.run_vae].

    Attributes
    ----------
    config
        The settings, the data set name and sizes.
    test_loss, train_loss
        ``method → [seeds][epochs + 1]`` mean loss per image (entry 0: before training).
    seconds
        ``method → [seeds]`` training wall time of each run.
    reconstructions
        ``method → [n, pixels]`` noise-free reconstructions (σ(logits) of ``MAP(θ)``) of the first test
        images by the first seed's model; ``"original"`` holds the images themselves.
    shape
        ``(H, W)`` of an image.
    """

    config: dict[str, Any]
    test_loss: dict[str, list[list[float]]]
    train_loss: dict[str, list[list[float]]]
    seconds: dict[str, list[float]]
    reconstructions: dict[str, list[list[float]]]
    shape: tuple[int, int]

    def save_json(self, path: str | Path) -> None:
        """Write everything to ``path`` as JSON."""
        Path(path).write_text(json.dumps(dataclasses.asdict(self), indent=1))


def _evaluate(model: SubsetVAE, images: torch.Tensor, k: int, kl: str, batch_size: int, seed: int) -> float:
    """Mean test loss per image, one perturbed sample each, noise from a generator seeded with ``seed``."""
    gen = torch.Generator(device=images.device).manual_seed(seed)
    previous = getattr(model.sampler, "generator", None)
    setattr(model.sampler, "generator", gen)  # the same noise at every evaluation  # noqa: B010
    total = 0.0
    try:
        with torch.no_grad():
            for batch in images.split(batch_size):
                with torch.enable_grad():  # the exact KL needs μ = ∇ log Z
                    theta = model.encoder(batch).view(-1, N_LATENT, N_VARS).detach().requires_grad_(True)
                    kl_term = latent_kl(theta, k, kl).detach()  # [B]
                z = model.sampler(theta.detach())
                logits = model.decoder(z.reshape(-1, N_LATENT * N_VARS))
                bce = F.binary_cross_entropy_with_logits(logits, batch, reduction="none").sum(dim=-1)
                total += float((bce + kl_term).sum())
    finally:
        setattr(model.sampler, "generator", previous)  # noqa: B010
    return total / images.shape[0]


def _train_one(
    method: VAEMethod, data: ImageData, config: VAEConfig, seed: int, bar: bool
) -> tuple[list[float], list[float], float, SubsetVAE]:
    device = torch.device(config.device)
    torch.manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    model = SubsetVAE(data.n_pixels, method.make(method.k, gen)).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    train, test = data.train.to(device), data.test.to(device)
    order_gen = torch.Generator().manual_seed(seed)
    eval_seed = 12345
    test_curve = [_evaluate(model, test, method.k, config.kl, config.batch_size, eval_seed)]
    train_curve = [_evaluate(model, train, method.k, config.kl, config.batch_size, eval_seed)]
    start = time.perf_counter()
    epochs = progress(range(config.epochs), desc=f"{method.name} seed {seed}", leave=False) if bar else None
    for _ in epochs if epochs is not None else range(config.epochs):
        model.train()
        total = 0.0
        for idx in torch.randperm(train.shape[0], generator=order_gen).split(config.batch_size):
            x = train[idx.to(device)]
            logits, theta = model(x)
            loss = vae_loss(
                logits, theta, x, method.k, config.kl
            ).mean()  # mean over the batch (as the paper's Keras)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * x.shape[0]
        train_curve.append(total / train.shape[0])
        test_curve.append(_evaluate(model, test, method.k, config.kl, config.batch_size, eval_seed))
    return test_curve, train_curve, time.perf_counter() - start, model


def run_vae(config: VAEConfig | None = None, *, progress_bar: bool = False) -> VAEResult:
    """Train the discrete VAE with every method and seed of ``config``; test loss after each epoch.

    Parameters
    ----------
    config
        The settings (default [`VAEConfig`][imle_solvers.experiments.vae.VAEConfig]`()`: the paper's).
    progress_bar
        Show a progress bar per run on stderr.
    """
    config = VAEConfig() if config is None else config
    data = load_images(config.data)
    if config.max_train is not None or config.max_test is not None:
        data = dataclasses.replace(
            data, train=data.train[: config.max_train], test=data.test[: config.max_test]
        )
    test_loss: dict[str, list[list[float]]] = {}
    train_loss: dict[str, list[list[float]]] = {}
    seconds: dict[str, list[float]] = {}
    recon: dict[str, list[list[float]]] = {"original": data.test[:10].tolist()}
    for key in config.methods:
        method = METHODS[key]
        for seed in config.seeds:
            test_curve, train_curve, secs, model = _train_one(method, data, config, seed, progress_bar)
            test_loss.setdefault(key, []).append(test_curve)
            train_loss.setdefault(key, []).append(train_curve)
            seconds.setdefault(key, []).append(secs)
            if seed == config.seeds[0]:
                model.eval()  # noise-free MAP(θ) (or softmax(θ/t)) for the figure
                with torch.no_grad():
                    logits, _ = model(data.test[:10].to(config.device))
                recon[key] = torch.sigmoid(logits).cpu().tolist()
    info = {
        **{f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
        "data_name": data.name, "n_train": int(data.train.shape[0]), "n_test": int(data.test.shape[0]),
        "latent": f"{N_LATENT} × {N_VARS}", "names": {key: METHODS[key].name for key in config.methods},
    }  # fmt: skip
    return VAEResult(info, test_loss, train_loss, seconds, recon, data.shape)


def result_table(result: VAEResult) -> str:
    """Markdown table: final and best test loss (mean ± std over seeds), train loss, seconds per run."""
    rows = []
    for key, curves in result.test_loss.items():
        t = torch.tensor(curves)  # [seeds, epochs + 1]
        final, best = t[:, -1], t[:, 1:].min(dim=1).values
        train = torch.tensor(result.train_loss[key])[:, -1]
        rows.append(
            {
                "method": result.config["names"][key],
                "final test loss": _pm(final),
                "best test loss": _pm(best),
                "final train loss": _pm(train),
                "s / run": f"{sum(result.seconds[key]) / len(result.seconds[key]):.1f}",
            }
        )
    return format_table(rows)


def _pm(values: torch.Tensor) -> str:
    std = float(values.std()) if values.numel() > 1 else 0.0
    return f"{float(values.mean()):.2f} ± {std:.2f}"


def _best_imle(result: VAEResult) -> list[str]:
    final = {k: sum(c[-1] for c in v) / len(v) for k, v in result.test_loss.items() if k.startswith("imle")}
    return [min(final, key=final.__getitem__)] if final else []


def plot_curves(result: VAEResult, path: str | Path) -> Path:
    """Test loss per epoch (mean ± std over seeds) of every method, in three panels as the paper's
    figure: I-MLE, STE, and the categorical Gumbel-softmax VAE next to the best I-MLE. Needs matplotlib."""
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    panels = [
        ("(a) 10-subset VAE, I-MLE", [k for k in result.test_loss if k.startswith("imle")]),
        ("(b) 10-subset VAE, STE", [k for k in result.test_loss if k.startswith("ste")]),
        ("(c) best I-MLE vs 1-subset Gumbel-softmax", [*_best_imle(result), "gsm-categorical"]),
    ]
    fig = Figure(figsize=(13.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    colours: dict[str, str] = {}
    for ax, (title, keys) in zip(axes, panels):
        for key in [k for k in keys if k in result.test_loss]:
            t = torch.tensor(result.test_loss[key])[:, 1:]  # skip the untrained point   [seeds, epochs]
            mean, std = t.mean(dim=0), (t.std(dim=0) if t.shape[0] > 1 else torch.zeros(t.shape[1]))
            x = torch.arange(1, t.shape[1] + 1)
            colour = colours.setdefault(key, f"C{len(colours)}")
            ax.plot(x, mean, label=result.config["names"][key], color=colour)
            ax.fill_between(x, mean - std, mean + std, alpha=0.2, color=colour)
        ax.set(title=title, xlabel="epoch")
        if keys:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("test loss (BCE + KL) per image")
    all_final = [min(c[-1] for c in curves) for curves in result.test_loss.values()]
    axes[0].set_ylim(min(all_final) - 2.0, max(all_final) + 15.0)
    fig.savefig(path, dpi=90)
    return path


def plot_reconstructions(result: VAEResult, path: str | Path) -> Path:
    """The first test images (top row) and their noise-free reconstructions by each method."""
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = ["original", *[k for k in result.reconstructions if k != "original"]]
    n = len(result.reconstructions["original"])
    fig = Figure(figsize=(1.0 * n + 1.8, 0.95 * len(keys)), layout="constrained")
    axes = fig.subplots(len(keys), n, squeeze=False)
    for i, key in enumerate(keys):
        for j in range(n):
            image = torch.tensor(result.reconstructions[key][j]).view(*result.shape)
            axes[i][j].imshow(image.numpy(), cmap="gray", vmin=0.0, vmax=1.0)
            axes[i][j].set_axis_off()
        label = "test image" if key == "original" else result.config["names"][key]
        axes[i][0].text(-0.5, 0.5, label, transform=axes[i][0].transAxes, ha="right", va="center", fontsize=7)
    fig.savefig(path, dpi=80)
    return path


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


def main(argv: Sequence[str] | None = None) -> int:
    """``imle-solvers vae``: train, print the table, write ``vae.json``, ``vae.md`` and the two figures."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = VAEConfig(
            methods=tuple(args.methods), seeds=tuple(args.seeds), epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, data=args.data, max_train=args.max_train,
            max_test=args.max_test, kl=args.kl, device=args.device,
        )  # fmt: skip
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
    out.mkdir(parents=True, exist_ok=True)
    result.save_json(out / "vae.json")
    command = "imle-solvers vae " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    (out / "vae.md").write_text(f"{header}\n\n{table}\n\nCommand: `{command.strip()}`\n")
    written = [out / "vae.json", out / "vae.md"]
    try:
        written += [
            plot_curves(result, out / "vae_curves.png"),
            plot_reconstructions(result, out / "vae_recon.png"),
        ]
    except MissingExtraError as exc:
        print(f"no plot: {exc}", file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
