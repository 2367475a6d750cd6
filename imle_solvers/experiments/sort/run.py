"""The sorting task's runner: `run_sort` trains every method, n and seed of a `SortConfig`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ..._checks import positive_int
from ...adapters.graphs.matching import TorchMatching
from ...app.config import RunSettings, count, inherit, option, positive_number, render
from ...app.machine import resolve_device
from ...app.report import progress
from ...app.session import Session
from ...errors import ConfigError
from .data import DigitPool, Sequences, load_digit_pools, make_sequences
from .methods import METHODS, SortMethod
from .model import NumberScorer, assignment_weights
from .results import SUMMARY, SortResult, SortRun, permutation_accuracy

__all__ = ["MAX_DIGITS", "QUICK", "SortConfig", "header", "run_sort"]

QUICK: dict[str, Any] = {"seeds": (0,), "steps": 40, "n_test": 100}
"""What ``--quick`` changes: one seed, 40 steps, 100 test sequences (seconds)."""

_FULL: dict[str, Any] = {"seeds": (0, 1, 2), "steps": 1500, "n_test": 1000}

_LOSS_POINTS = 10
"""The training loss is recorded as its mean over each tenth of the steps."""


MAX_DIGITS = 18
"""The most digits a number may have: numbers are drawn as 64-bit integers below ``10**digits``, and
``10**18 < 2**63 ≤ 10**19``."""


def _digits(value: int) -> int:
    """The constraint of ``digits``: a count of at most `MAX_DIGITS`."""
    digits = positive_int("", value)
    if digits > MAX_DIGITS:
        raise ValueError(f"must be at most {MAX_DIGITS} (the numbers are 64-bit integers), got {digits}")
    return digits


def _default(name: str) -> str:
    return f"{render(_FULL[name])}; --quick: {render(QUICK[name])}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SortConfig(RunSettings):
    """Settings of [`run_sort`][imle_solvers.experiments.sort.run_sort] and ``imle-solvers sort``;
    ``None`` takes the full experiment's value, or the quick one with ``quick``.

    Attributes
    ----------
    methods
        Keys of [`METHODS`][imle_solvers.experiments.sort.METHODS].
    ns
        Numbers per sequence.
    seeds
        Seeds: the split of the digit images, the sequences, the initialisation and the noise.
    digits
        Digits per number, at most `MAX_DIGITS` (the numbers are 64-bit integers).
    steps
        Adam steps (each on a fresh batch of training sequences).
    batch_size
        Sequences per step.
    n_test
        Test sequences (written with the held-out digit images).
    lr
        Adam's learning rate.
    noise_tau
        Temperature τ of the SumOfGamma noise of I-MLE and STE.
    lam
        λ of I-MLE's target ``θ' = θ − λ ∇z L`` (paper, eq. 8). The loss is the mean over the batch,
        so ``∇z L = 2(z − P) / batch_size`` and the target moves the wrong entries by ``2λ / batch_size``
        (10 at the defaults).
    sinkhorn_tau
        Temperature τ of Gumbel-Sinkhorn.
    sinkhorn_iters
        Sinkhorn rounds of Gumbel-Sinkhorn.
    channels
        Channels of the scoring CNN's first convolution.
    hidden
        Width of its dense layer.
    quick
        One seed, few steps, a small test set (seconds).
    device
        Torch device (``cpu``, ``cuda``, ``cuda:N``, ``auto``).
    threads
        torch CPU threads during the run.
    out
        Folder for ``results.json`` and ``results.md``.
    show_progress
        A progress bar.
    """

    command: ClassVar[str] = "sort"
    description: ClassVar[str] = (
        "Learn to sort sequences of n handwritten multi-digit numbers (scikit-learn's digits): a CNN scores "
        "each number,\nthe permutation is trained through a matching layer. Exact and per-position test "
        "accuracy of every method, n and seed."
    )

    methods: tuple[str, ...] = option(
        tuple(METHODS),
        "methods to compare (listed below)",
        flags=("--methods", "--method"),
        choices=lambda: tuple(METHODS),
        metavar="NAME",
    )
    ns: tuple[int, ...] = option((3, 5, 9), "numbers per sequence n", check=count, metavar="N")
    digits: int = option(2, f"digits per number (at most {MAX_DIGITS})", check=_digits)
    steps: int | None = option(None, "Adam steps", check=count, default_text=lambda: _default("steps"))
    batch_size: int = option(20, "sequences per step", check=count)
    n_test: int | None = option(
        None,
        "test sequences",
        flags=("--n-test", "--test"),
        check=count,
        default_text=lambda: _default("n_test"),
    )
    lr: float = option(3e-3, "Adam learning rate", check=positive_number)
    noise_tau: float = option(1.0, "SumOfGamma temperature τ (imle, ste)", check=positive_number)
    lam: float = option(100.0, "λ of the I-MLE target (paper, eq. 8)", check=positive_number)
    sinkhorn_tau: float = option(1.0, "Gumbel-Sinkhorn temperature τ", check=positive_number)
    sinkhorn_iters: int = option(20, "Sinkhorn rounds", check=count)
    channels: int = option(8, "channels of the CNN's first convolution", check=count)
    hidden: int = option(64, "width of the CNN's dense layer", check=count)
    quick: bool = option(False, "one seed, few steps, a small test set (seconds)")
    # None: the full or the quick experiment's seeds (a narrower default than the shared one's type)
    seeds: tuple[int, ...] | None = inherit(  # type: ignore[assignment]
        "seeds", None, default_text=lambda: _default("seeds")
    )

    @classmethod
    def help_epilog(cls) -> str:
        width = max(len(name) for name in METHODS)
        return "methods:\n" + "\n".join(f"  {n:<{width}}  {METHODS.help(n)}" for n in METHODS)

    def validate(self) -> None:
        high = 10**self.digits
        bad = [n for n in self.ns if not 2 <= n <= high]
        if bad:
            raise ConfigError(
                f"must be in [2, {high}] (distinct {self.digits}-digit numbers), got {bad}", "ns"
            )

    def resolved(self) -> SortConfig:
        """The settings a run uses: every ``None`` filled from the full or the quick experiment."""
        values = QUICK if self.quick else _FULL
        return dataclasses.replace(
            self, **{name: values[name] for name in _FULL if getattr(self, name) is None}
        )


def _loss_curve(losses: list[torch.Tensor]) -> list[float]:
    """Mean of each of (at most) ten consecutive, near-equal chunks of the per-step losses."""
    chunks = torch.stack(losses).double().cpu().tensor_split(min(_LOSS_POINTS, len(losses)))
    return [float(c.mean()) for c in chunks]


def _evaluate(net: NumberScorer, test: Sequences, n: int, batch: int = 500) -> tuple[float, float]:
    """(exact, per-position) accuracy of the permutation ``MAP(θ)`` (the sorting of the scores)."""
    net.eval()
    oracle = TorchMatching(n, n)
    with torch.no_grad():
        predicted = torch.cat(
            [
                oracle.solve_torch(assignment_weights(net(test.images[start : start + batch])))  # MAP(θ)
                for start in range(0, len(test), batch)
            ]
        )
    return permutation_accuracy(predicted, test.permutation, n)


def _train_one(
    key: str,
    n: int,
    seed: int,
    pools: tuple[DigitPool, DigitPool],
    cfg: SortConfig,
    method: SortMethod | None = None,
) -> SortRun:
    """One run; ``method`` replaces ``METHODS[key]()`` (``bench targets`` passes its own layers)."""
    assert cfg.steps is not None and cfg.n_test is not None
    device = resolve_device(cfg.device)
    train_pool, test_pool = pools
    streams = [torch.Generator().manual_seed(4 * seed + i) for i in range(2)]  # training, test sequences
    test = make_sequences(test_pool, cfg.n_test, n, cfg.digits, streams[1]).to(device)
    torch.manual_seed(seed)  # the same initial network (and dropout) for every method
    net = NumberScorer(cfg.digits, cfg.channels, cfg.hidden).to(device)
    method = METHODS[key]() if method is None else method
    layer = method.make(n, cfg, torch.Generator(device=device).manual_seed(4 * seed + 2))
    optimiser = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    net.train()
    layer.train()
    for _ in range(cfg.steps):
        batch = make_sequences(train_pool, cfg.batch_size, n, cfg.digits, streams[0]).to(device)
        theta = assignment_weights(net(batch.images))  # θ[r, i] = w_r s_i   [B, n·n]
        z = layer(theta)  # z = MAP(θ + ε), or Sinkhorn((θ + g)/τ)   [B, n·n]
        loss = (z - batch.permutation).square().sum(dim=-1).mean()  # ‖z − P‖², mean over sequences
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(loss.detach())  # kept on the device: no synchronisation per step
    seconds = time.perf_counter() - start
    exact, per_position = _evaluate(net, test, n)
    return SortRun(
        method=key,
        label=method.name,
        n=n,
        seed=seed,
        exact=exact,
        per_position=per_position,
        train_loss=_loss_curve(losses),
        seconds=seconds,
    )


def run_sort(
    config: SortConfig | None = None, *, on_result: Callable[[SortRun], None] | None = None
) -> SortResult:
    """Train the number scorer with every method, n and seed; exact and per-position test accuracy.

    Does what ``imle-solvers sort`` does: the machine is checked first (``device``, ``out``:
    [`ConfigError`][imle_solvers.errors.ConfigError] before any work), ``threads`` is applied and
    restored, each run is written to ``out`` as it finishes, then ``results.json`` and ``results.md``;
    on Ctrl-C the finished runs are kept.

    Parameters
    ----------
    config
        The settings (default [`SortConfig`][imle_solvers.experiments.sort.SortConfig]`()`).
    on_result
        Called with each run as soon as it finishes.
    """
    given = SortConfig() if config is None else config
    cfg = given.resolved()
    assert cfg.seeds is not None
    with Session(given, SUMMARY, resolved=cfg.as_dict(), on_result=on_result) as session:
        plan = [(seed, n, key) for seed in cfg.seeds for n in cfg.ns for key in cfg.methods]
        pools: dict[int, tuple[DigitPool, DigitPool]] = {}
        items = progress(plan, desc="sort", total=len(plan)) if cfg.show_progress else iter(plan)
        for seed, n, key in items:
            if seed not in pools:
                pools[seed] = load_digit_pools(seed)
            session.add(_train_one(key, n, seed, pools[seed], cfg))
        result = SortResult(cfg.as_dict(), list(session.records))
        session.finish(markdown=header(result))
    return result


def header(result: SortResult) -> str:
    """One line saying what ran."""
    c = result.config
    return (
        f"Sorting {c['digits']}-digit handwritten numbers (scikit-learn digits), {c['steps']} steps of "
        f"{c['batch_size']} sequences, {c['n_test']} test sequences, SoG τ = {c['noise_tau']:g}, "
        f"λ = {c['lam']:g}, Sinkhorn τ = {c['sinkhorn_tau']:g} × {c['sinkhorn_iters']} rounds, "
        f"seeds {list(c['seeds'])}, device {c['device']}"
    )
