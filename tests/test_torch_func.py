"""Every estimator under `torch.func` (grad, per-sample gradients with vmap(grad), jacrev) and on an
empty batch, on a device-native and on a host oracle."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

from imle_solvers import (
    IMLE,
    STE,
    AdaptiveTarget,
    Blackbox,
    Gumbel,
    InvalidWeightsError,
    MapOracle,
    NoNoise,
    PerturbedOptimizer,
    PerturbedTarget,
    RelativeTarget,
    RowAdaptiveTarget,
    TopK,
)
from tests.support.oracles import EnumOracle, k_subsets

M = 6
# rows enough that the default's local step gives several rows a nonzero gradient, whatever the seed
W = torch.randn(32, M, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
COEF = torch.linspace(-1.0, 2.0, M, dtype=torch.float64)

ORACLES: dict[str, Callable[[], MapOracle]] = {
    "torch": lambda: TopK(2, M),
    "host": lambda: EnumOracle(k_subsets(M, 2)),
}


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(7)


# Every estimator with options that exercise its noise and its samples; a fresh layer per call, so two
# layers built alike draw the same noise.
ESTIMATORS: dict[str, Callable[[MapOracle], nn.Module]] = {
    "imle": lambda o: IMLE(o, samples=2, generator=_gen()),
    "imle-relative": lambda o: IMLE(o, None, RelativeTarget(), samples=2, generator=_gen()),
    "imle-pid": lambda o: IMLE(o, Gumbel(), PerturbedTarget(2.0), samples=2, generator=_gen()),
    "blackbox": lambda o: Blackbox(o, lam=3.0),
    "ste": lambda o: STE(o, samples=2, generator=_gen()),
    "perturbed-optimizer": lambda o: PerturbedOptimizer(o, samples=3, generator=_gen()),
}


def _loss(z: torch.Tensor) -> torch.Tensor:
    """A per-row loss that is not linear in z, so the upstream gradient depends on the state."""
    return ((z - 0.3) ** 2 * COEF).sum()


def _autograd(layer: nn.Module, w: torch.Tensor) -> torch.Tensor:
    x = w.clone().requires_grad_(True)
    _loss(layer(x)).backward()
    assert x.grad is not None
    return x.grad


@pytest.mark.timeout(60)
@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_func_grad_equals_autograd(name: str, oracle: str) -> None:
    make = ESTIMATORS[name]
    functional = torch.func.grad(lambda w: _loss(make(ORACLES[oracle]())(w)))(W)
    expected = _autograd(make(ORACLES[oracle]()), W)
    torch.testing.assert_close(functional, expected)
    assert expected.abs().sum() > 0, "the comparison needs a nonzero gradient"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("name", sorted(n for n in ESTIMATORS if n != "imle"))
def test_vmap_grad_gives_the_per_sample_gradients(name: str, oracle: str) -> None:
    # the loss is a sum over rows, so the per-sample gradients are the rows of the batch gradient (the
    # vmapped rows go to the oracle as one batch, so they draw the noise of one batched call); the
    # default AutoTarget sizes its step over the batch it sees: under vmap a row is its own batch (below)
    make = ESTIMATORS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no vmap fallback warning, no zero-gradient warning
        per_sample = torch.func.vmap(torch.func.grad(lambda w: _loss(make(ORACLES[oracle]())(w))))(W)
    assert per_sample.shape == W.shape
    torch.testing.assert_close(per_sample, _autograd(make(ORACLES[oracle]()), W))
    assert (per_sample.abs().sum(1) > 0).sum() >= 2, "several rows need a nonzero gradient"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("oracle", sorted(ORACLES))
def test_vmap_grad_of_the_default_is_the_gradient_of_each_row_alone(oracle: str) -> None:
    # no noise, so that a row alone and the row under vmap see the same θ + ε: the default's unit is
    # then that row's own, as a per-sample gradient means
    def layer() -> nn.Module:
        return IMLE(ORACLES[oracle](), NoNoise())

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        per_sample = torch.func.vmap(torch.func.grad(lambda w: _loss(layer()(w))))(W)
    alone = torch.cat([_autograd(layer(), W[i : i + 1]) for i in range(len(W))])
    torch.testing.assert_close(per_sample, alone)
    assert not torch.allclose(per_sample, _autograd(layer(), W))  # the batch's unit is another
    assert (per_sample.abs().sum(1) > 0).sum() >= 2, "several rows need a nonzero gradient"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_jacrev_equals_one_backward_per_output(name: str, oracle: str) -> None:
    make = ESTIMATORS[name]
    jacobian = torch.func.jacrev(lambda w: make(ORACLES[oracle]())(w))(W)
    x = W.clone().requires_grad_(True)
    z = make(ORACLES[oracle]())(x)
    assert jacobian.shape == (*z.shape, *W.shape)
    rows = []
    for i in range(z.numel()):  # one-hot upstreams: a fixed λ's unit step is not small, so no warning
        upstream = torch.zeros(z.numel(), dtype=z.dtype)
        upstream[i] = 1.0
        (g,) = torch.autograd.grad(z, x, upstream.view_as(z), retain_graph=True)
        rows.append(g)
    torch.testing.assert_close(jacobian.reshape(z.numel(), *W.shape), torch.stack(rows))
    assert jacobian.abs().sum() > 0


def test_jacrev_sends_every_vmapped_backward_to_the_host_oracle_in_one_call() -> None:
    oracle = EnumOracle(k_subsets(M, 2))
    torch.func.jacrev(IMLE(oracle, samples=2, generator=_gen()))(W)
    n, s = W.shape[0], 2
    outputs = n * s * M  # one vmapped backward per output entry
    assert oracle.batch_calls == [n * s, outputs * 2 * n * s]  # each solves both MAPs of the default


def test_checks_still_run_under_grad_and_host_oracles_validate_under_vmap() -> None:
    bad = W.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(InvalidWeightsError, match=r"batch row 2: weights contain NaN or inf"):
        torch.func.grad(lambda w: _loss(IMLE(TopK(2, M))(w)))(bad)
    host = EnumOracle(k_subsets(M, 2))
    with pytest.raises(InvalidWeightsError, match="NaN or inf"):
        torch.func.vmap(torch.func.grad(lambda w: _loss(IMLE(host)(w))))(bad)
    assert host.solve_calls == 0


@pytest.mark.parametrize("target", [AdaptiveTarget(), RowAdaptiveTarget()], ids=["aimle", "row-adaptive"])
def test_stateful_targets_refuse_vmap_with_a_clear_error(target: object) -> None:
    solver = EnumOracle(k_subsets(M, 2))
    layer = IMLE(solver, Gumbel(), target, generator=_gen())  # type: ignore[arg-type]
    message = rf"^{type(target).__name__} adapts its state in every backward pass and does not support"
    with pytest.raises(RuntimeError, match=message):
        torch.func.vmap(torch.func.grad(lambda w: _loss(layer(w))))(W)
    assert solver.batch_calls == []  # refused in the forward pass, before any solve
    with pytest.raises(RuntimeError, match=message):
        torch.func.jacrev(layer)(W)
    layer.eval()
    torch.func.vmap(layer)(W)  # the noise-free forward has no backward: allowed


# --------------------------------------------------------------------------- the empty batch
EMPTY_ESTIMATORS: dict[str, Callable[[MapOracle], nn.Module]] = {
    **ESTIMATORS,
    "imle-aimle": lambda o: IMLE(o, Gumbel(), AdaptiveTarget(), samples=2, generator=_gen()),
    "imle-row-adaptive": lambda o: IMLE(o, Gumbel(), RowAdaptiveTarget(), samples=2, generator=_gen()),
    "imle-default-s1": lambda o: IMLE(o, generator=_gen()),
}


@pytest.mark.parametrize("lead", [(0,), (3, 0)], ids=["B=0", "3x0"])
@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("name", sorted(EMPTY_ESTIMATORS))
def test_an_empty_batch_goes_forward_and_backward(name: str, oracle: str, lead: tuple[int, ...]) -> None:
    solver = ORACLES[oracle]()
    layer = EMPTY_ESTIMATORS[name](solver)
    state = {key: value.clone() for key, value in layer.state_dict().items()}
    x = torch.zeros(*lead, M, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = layer(x)
        _loss(z).backward()
    samples = getattr(layer, "samples", 1)
    expected = (*lead, M) if samples == 1 or isinstance(layer, PerturbedOptimizer) else (*lead, samples, M)
    assert z.shape == expected and z.dtype == x.dtype
    assert x.grad is not None and x.grad.shape == x.shape
    for key, value in layer.state_dict().items():  # an empty batch teaches a stateful target nothing
        assert torch.equal(value, state[key]), key
    if isinstance(solver, EnumOracle):
        assert solver.batch_calls == [] and solver.solve_calls == 0


def test_a_solve_under_vmap_of_rows_that_are_not_vmapped_is_one_call() -> None:
    # inside a vmap, a solve of rows that do not depend on the vmapped input solves them once (vmap
    # runs the function as it is: there is nothing to fold)
    from imle_solvers.perturb_and_map import _TransformedSolve

    solver = EnumOracle(k_subsets(M, 2))
    shared = W[:2]  # [2, m], not vmapped
    out = torch.func.vmap(lambda row: _TransformedSolve.apply(shared, solver, None) * row.sum())(W)
    assert out.shape == (len(W), 2, M) and solver.batch_calls == [2]
    expected = torch.from_numpy(solver.solve_batch(shared.numpy()))
    torch.testing.assert_close(out, expected * W.sum(1)[:, None, None])


# --------------------------------------------------------------------------- CUDA
CUDA_LAYERS: dict[str, Callable[[torch.Generator], nn.Module]] = {
    "imle": lambda g: IMLE(TopK(2, M), samples=2, generator=g),
    "imle-pid": lambda g: IMLE(TopK(2, M), Gumbel(), PerturbedTarget(2.0), samples=2, generator=g),
    "blackbox": lambda g: Blackbox(TopK(2, M), lam=3.0),
    "ste": lambda g: STE(TopK(2, M), samples=2, generator=g),
    "perturbed-optimizer": lambda g: PerturbedOptimizer(TopK(2, M), samples=3, generator=g),
}


@pytest.mark.cuda
@pytest.mark.timeout(120)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(CUDA_LAYERS))
def test_cuda_torch_func_and_empty_batch_stay_on_device_without_sync(name: str) -> None:  # pragma: no cover
    w, coef = W.to("cuda"), COEF.to("cuda")
    layer = CUDA_LAYERS[name](torch.Generator("cuda").manual_seed(0))

    def loss(x: torch.Tensor) -> torch.Tensor:
        return ((layer(x) - 0.3) ** 2 * coef).sum()

    torch.func.vmap(torch.func.grad(loss))(w)  # warm-up: noise tables reach the device
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        per_sample = torch.func.vmap(torch.func.grad(loss))(w)
        jacobian = torch.func.jacrev(layer)(w)
        empty = torch.zeros(0, M, device="cuda", dtype=torch.float64, requires_grad=True)
        layer(empty).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert per_sample.device.type == "cuda" and per_sample.shape == w.shape
    assert bool(torch.isfinite(per_sample).all()) and jacobian.device.type == "cuda"
    assert empty.grad is not None and empty.grad.shape == (0, M)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("error:Dynamo does not know how to trace")
def test_torch_compile_traces_the_layer_checks_without_a_graph_break_warning() -> None:
    layer = IMLE(TopK(2, M)).eval()
    compiled = torch.compile(lambda w: layer(w) * COEF)
    for _ in range(2):  # the second call runs the compiled code
        torch.testing.assert_close(compiled(W), layer(W) * COEF)
