"""The fixed-λ target's zero-gradient warning: given when MORE than half of the rows with an upstream
gradient are lost to a small step, not at exactly half."""

from __future__ import annotations

import warnings

import pytest
import torch

from imle_solvers import PerturbedTarget
from imle_solvers.target import warn_if_mostly_zero

M, S = 8, 2


def _warnings(lost: int, live: int, dead: int = 0) -> tuple[list[str], dict[str, bool]]:
    """Messages of one call with ``live`` rows of nonzero ∇zL (the first ``lost`` of them with an
    all-zero gradient) and ``dead`` rows of zero ∇zL (never counted), every step small."""
    n = live + dead
    theta = torch.arange(float(M)).expand(n, 1, M)  # std 2.29: a step below 0.229 is small
    eps = torch.zeros(n, S, M)
    grad_z = torch.full((n, S, M), 0.01)  # λ∇zL = 0.01 ≪ 0.229
    grad_z[live:] = 0.0  # rows outside the loss
    grad_theta = torch.ones(n, M)
    grad_theta[:lost] = 0.0
    grad_theta[live:] = 0.0  # (zero too, but not counted)
    state: dict[str, bool] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_mostly_zero(PerturbedTarget(1.0), theta, eps, grad_z, grad_theta, state)
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)], state


@pytest.mark.parametrize(("lost", "live", "dead"), [(2, 4, 0), (3, 6, 0), (1, 2, 3), (0, 4, 0), (4, 8, 5)])
def test_exactly_half_of_the_rows_lost_is_no_warning(lost: int, live: int, dead: int) -> None:
    messages, state = _warnings(lost, live, dead)
    assert messages == [] and not state.get("warned")


@pytest.mark.parametrize(
    ("lost", "live", "dead", "percent"), [(3, 4, 0, 75), (4, 6, 0, 67), (2, 2, 3, 100), (5, 8, 5, 62)]
)
def test_more_than_half_of_the_rows_lost_warns_once(lost: int, live: int, dead: int, percent: int) -> None:
    messages, state = _warnings(lost, live, dead)
    assert len(messages) == 1 and state["warned"]
    assert f"all-zero gradient for {percent}% of the rows" in messages[0]


def _messages(grad_z: torch.Tensor) -> list[str]:
    """One call with every row's gradient all zero and the step of ``grad_z`` (λ = 1)."""
    n = grad_z.shape[0]
    theta = torch.arange(float(M)).expand(n, 1, M)  # std 2.29: a step below 0.229 is small
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_mostly_zero(PerturbedTarget(1.0), theta, torch.zeros(n, S, M), grad_z, torch.zeros(n, M), {})
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_the_step_is_measured_by_its_largest_entry_in_absolute_value() -> None:
    assert len(_messages(torch.full((4, S, M), -0.01))) == 1  # a step of −0.01 is as small as +0.01
    moving = torch.full((4, S, M), 0.01)
    moving[..., 0] = 5.0  # its largest entry moves 5 ≫ 0.229: the state is confirmed, not lost
    assert _messages(moving) == []
    moving[..., 0] = -5.0
    assert _messages(moving) == []
