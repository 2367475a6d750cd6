"""The VAE's runner: `run_vae` trains every method and seed of a `VAEConfig` and gives a `VAEResult`."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from ..._checks import one_of, positive_int
from ...report import progress
from ..images import ImageData, load_images
from .methods import METHODS, PAPER_METHODS, VAEMethod
from .model import N_LATENT, N_VARS, SubsetVAE, latent_kl, vae_loss

__all__ = ["VAEConfig", "VAEResult", "run_vae"]


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
        one_of("kl", self.kl, ("softmax", "exact"))
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown methods {unknown}; choose among {sorted(METHODS)}")
        for name in ("epochs", "batch_size"):
            positive_int(name, getattr(self, name))
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
