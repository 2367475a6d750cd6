"""The VAE's runner: `run_vae` trains every method and seed of a `VAEConfig` and gives a `VAEResult`."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.nn import functional as F

from ...app.config import RunSettings, count, inherit, option, path_text, positive_number
from ...app.machine import resolve_device
from ...app.report import progress
from ...app.session import Session
from ...errors import ConfigError
from .images import ImageData, load_images
from .methods import METHODS, PAPER_METHODS, VAEMethod
from .model import N_LATENT, N_VARS, SubsetVAE, latent_kl, vae_loss
from .report import SUMMARY, plot_curves, plot_reconstructions

__all__ = ["VAEConfig", "VAEResult", "VAERun", "header", "run_vae"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAEConfig(RunSettings):
    """Settings of [`run_vae`][imle_solvers.experiments.vae.run_vae] and ``imle-solvers vae`` (defaults:
    the paper's, on digits).

    Attributes
    ----------
    methods
        Keys of [`METHODS`][imle_solvers.experiments.vae.METHODS] (default: `PAPER_METHODS`).
    seeds
        One run per seed (initialisation, batch order, noise).
    epochs
        Passes over the training images; the paper: 100 (of MNIST). The default 30 epochs of the digits
        keep the full comparison within minutes on a CPU.
    batch_size
        Images per Adam step (the paper: 100).
    lr
        Adam's learning rate (the paper: 1e-3).
    data
        ``None`` for scikit-learn's digits, else a path for
        [`load_mnist`][imle_solvers.experiments.vae.images.load_mnist].
    max_train
        Use at most this many training images (``None``: all).
    max_test
        Use at most this many test images (``None``: all).
    kl
        ``"softmax"`` (the paper's KL term) or ``"exact"`` (see `latent_kl`).
    device
        Torch device of the models, data and noise (``cpu``, ``cuda``, ``cuda:N``, ``auto``).
    threads
        torch CPU threads during the run.
    out
        Folder for ``results.json``, ``results.md``, ``vae_curves.png`` and ``vae_recon.png``.
    show_progress
        A progress bar per run.
    """

    command: ClassVar[str] = "vae"
    description: ClassVar[str] = (
        "The I-MLE paper's discrete 10-subset VAE (20 latent 10-subsets of 20 variables), every method "
        "and seed;\nthe test loss after every epoch."
    )

    methods: tuple[str, ...] = option(
        PAPER_METHODS,
        "methods to compare (listed below)",
        flags=("--methods", "--method"),
        choices=lambda: tuple(METHODS),
        metavar="NAME",
    )
    epochs: int = option(30, "epochs (the paper: 100 on MNIST)", check=count)
    batch_size: int = option(100, "images per step", check=count)
    lr: float = option(1e-3, "Adam learning rate", check=positive_number)
    data: str | None = option(
        None,
        "MNIST on disk: a directory of IDX files, one IDX file or an .npz",
        metavar="PATH",
        check=path_text,
        default_text="scikit-learn's bundled 8×8 digits",
    )
    max_train: int | None = option(
        None, "use at most this many training images", check=count, default_text="all"
    )
    max_test: int | None = option(None, "use at most this many test images", check=count, default_text="all")
    kl: str = option(
        "softmax", "KL term: the paper's softmax marginals or the exact one", choices=("softmax", "exact")
    )
    seeds: tuple[int, ...] = inherit("seeds", (0, 1, 2))

    @classmethod
    def help_epilog(cls) -> str:
        return f"methods (default: all but λ = 100, 1000):\n{METHODS.listing()}"

    def preflight(self) -> None:
        super().preflight()
        if self.data is not None and not os.path.exists(self.data):
            raise ConfigError(f"{self.data!r}: no such file or folder", "data")


@dataclasses.dataclass(frozen=True)
class VAERun:
    """One finished (method, seed) run of the VAE.

    Attributes
    ----------
    method
        The method's key.
    label
        Its label in tables and plots.
    seed
        Seed of the initialisation, the batch order and the noise.
    test_loss
        Mean test loss per image before training and after every epoch (``epochs + 1`` numbers).
    train_loss
        Mean training loss per image, the same way.
    seconds
        Training wall time.
    """

    method: str
    label: str
    seed: int
    test_loss: list[float]
    train_loss: list[float]
    seconds: float

    @property
    def key(self) -> str:
        """The file name of the run: ``<method>-seed<seed>``."""
        return f"{self.method}-seed{self.seed}"

    @property
    def final_test_loss(self) -> float:
        """Test loss after the last epoch."""
        return self.test_loss[-1]

    @property
    def best_test_loss(self) -> float:
        """Lowest test loss after any epoch."""
        return min(self.test_loss[1:]) if len(self.test_loss) > 1 else self.test_loss[0]

    @property
    def final_train_loss(self) -> float:
        """Training loss of the last epoch."""
        return self.train_loss[-1]


@dataclasses.dataclass
class VAEResult:
    """Outcome of [`run_vae`][imle_solvers.experiments.vae.run_vae].

    Attributes
    ----------
    config
        The settings, the data set name and sizes.
    runs
        One [`VAERun`][imle_solvers.experiments.vae.VAERun] per (method, seed), in that order.
    reconstructions
        ``method → [n, pixels]`` noise-free reconstructions (σ(logits) of ``MAP(θ)``) of the first test
        images by the first seed's model; ``"original"`` holds the images themselves.
    shape
        ``(H, W)`` of an image.
    """

    config: dict[str, Any]
    runs: list[VAERun]
    reconstructions: dict[str, list[list[float]]]
    shape: tuple[int, int]

    def curves(self, field: str = "test_loss") -> dict[str, list[list[float]]]:
        """``method → [seeds][epochs + 1]`` of ``test_loss`` or ``train_loss``."""
        out: dict[str, list[list[float]]] = {}
        for run in self.runs:
            out.setdefault(run.method, []).append(getattr(run, field))
        return out

    def labels(self) -> dict[str, str]:
        """``method → label``."""
        return {run.method: run.label for run in self.runs}


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
    method: VAEMethod, data: ImageData, config: VAEConfig, seed: int
) -> tuple[list[float], list[float], float, SubsetVAE]:
    device = resolve_device(config.device)
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
    bar = config.show_progress
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


def run_vae(
    config: VAEConfig | None = None, *, on_result: Callable[[VAERun], None] | None = None
) -> VAEResult:
    """Train the discrete VAE with every method and seed of ``config``; test loss after each epoch.

    Does what ``imle-solvers vae`` does: the machine is checked first (``device``, ``data``, ``out``:
    [`ConfigError`][imle_solvers.errors.ConfigError] before any work), ``threads`` is applied and
    restored, each run is written to ``out`` as it finishes, then ``results.json``, ``results.md`` and
    the two figures; on Ctrl-C the finished runs are kept.

    Parameters
    ----------
    config
        The settings (default [`VAEConfig`][imle_solvers.experiments.vae.VAEConfig]`()`: the paper's).
    on_result
        Called with each run as soon as it finishes.
    """
    config = VAEConfig() if config is None else config
    with Session(config, SUMMARY, on_result=on_result) as session:
        try:
            data = load_images(config.data)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {config.data!r}: {exc}", "data") from None
        if config.max_train is not None or config.max_test is not None:
            data = dataclasses.replace(
                data, train=data.train[: config.max_train], test=data.test[: config.max_test]
            )
        recon: dict[str, list[list[float]]] = {"original": data.test[:10].tolist()}
        for key in config.methods:
            method = METHODS[key]()
            for seed in config.seeds:
                test_curve, train_curve, secs, model = _train_one(method, data, config, seed)
                if seed == config.seeds[0]:
                    model.eval()  # noise-free MAP(θ) (or softmax(θ/t)) for the figure
                    with torch.no_grad():
                        logits, _ = model(data.test[:10].to(resolve_device(config.device)))
                    recon[key] = torch.sigmoid(logits).cpu().tolist()
                session.add(VAERun(key, method.name, seed, test_curve, train_curve, secs))
        info = {
            **config.as_dict(),
            "data_name": data.name,
            "n_train": int(data.train.shape[0]),
            "n_test": int(data.test.shape[0]),
            "latent": f"{N_LATENT} × {N_VARS}",
        }
        result = VAEResult(info, list(session.records), recon, data.shape)
        session.finish(
            markdown=header(result),
            extra={
                "data": {k: info[k] for k in ("data_name", "n_train", "n_test", "latent")},
                "reconstructions": recon,
                "shape": list(data.shape),
            },
            plots=[
                ("vae_curves.png", lambda path: plot_curves(result, path)),
                ("vae_recon.png", lambda path: plot_reconstructions(result, path)),
            ],
        )
    return result


def header(result: VAEResult) -> str:
    """One line saying what ran."""
    cfg = result.config
    return (
        f"Discrete VAE on {cfg['data_name']} ({cfg['n_train']} train / {cfg['n_test']} test images), "
        f"latent {cfg['latent']}, {cfg['epochs']} epochs, batch {cfg['batch_size']}, Adam {cfg['lr']:g}, "
        f"seeds {list(cfg['seeds'])}, device {cfg['device']}"
    )
