"""`torch.compile` of a function that calls a layer: every noise, with and without a generator, across
batch sizes (an epoch's smaller last batch makes Dynamo recompile with a dynamic batch size)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from imle_solvers import IMLE, Gumbel, NoiseDistribution, NoNoise, Normal, SumOfGamma, TopK

M, S = 10, 2
NOISES: dict[str, NoiseDistribution] = {
    "gumbel": Gumbel(),
    "sum-of-gamma-table": SumOfGamma(),
    "sum-of-gamma-exact": SumOfGamma(exact=True),
    "normal": Normal(),
    "none": NoNoise(),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()  # no compiled frames (and no recompile count) shared between cases
    yield
    torch._dynamo.reset()


def _run(noise: NoiseDistribution, seeded: bool, backend: str | None) -> list[torch.Tensor]:
    """Outputs and input gradients at batch sizes 8, then 5; compiled unless ``backend`` is None."""
    generator = torch.Generator().manual_seed(7) if seeded else None
    layer = IMLE(TopK(3, M), noise, samples=S, generator=generator)
    coef = torch.arange(S * M, dtype=torch.float32).view(S, M)

    def f(w: torch.Tensor) -> torch.Tensor:
        return (layer(w) * coef).sum(dim=(-2, -1))  # [B]

    fn = f if backend is None else torch.compile(f, backend=backend)
    torch.manual_seed(0)  # the noise when there is no generator
    results = []
    for batch in (8, 5):
        w = torch.randn(batch, M, generator=torch.Generator().manual_seed(batch)).requires_grad_()
        out = fn(w)
        (out * torch.arange(1.0, batch + 1)).sum().backward()
        assert w.grad is not None
        results += [out.detach(), w.grad]
    return results


def _check(name: str, seeded: bool, backend: str) -> None:
    compiled = _run(NOISES[name], seeded, backend=backend)
    eager = _run(NOISES[name], seeded, backend=None)
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got, want)
    assert any(bool(grad.abs().sum() > 0) for grad in compiled[1::2])  # gradients that can differ


# Each case costs seconds of Dynamo tracing: the default suite runs the noises whose draws Dynamo
# traces into the graph on torch's global generator, and one with a generator; the rest are slow.
FAST = [("gumbel", False), ("gumbel", True), ("normal", False), ("sum-of-gamma-table", False)]
SLOW = [(name, seeded) for name in sorted(NOISES) for seeded in (False, True) if (name, seeded) not in FAST]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "seeded"), FAST)
def test_compiled_layer_survives_a_second_batch_size_and_equals_eager(name: str, seeded: bool) -> None:
    """Forward and backward under `torch.compile` equal the eager layer's, draw for draw, at the first
    batch size and at the second (where Dynamo recompiles with a symbolic batch size)."""
    _check(name, seeded, "eager")


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "seeded"), SLOW)
def test_compiled_layer_with_a_generator_equals_eager(name: str, seeded: bool) -> None:
    _check(name, seeded, "eager")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(NOISES))
def test_compiled_layer_with_aot_autograd_equals_eager(name: str) -> None:
    """The same through AOTAutograd, which traces the layer's backward into the graph too."""
    for seeded in (False, True):
        _check(name, seeded, "aot_eager")
