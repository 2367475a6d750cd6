"""``imle_solvers._collective``: the norms a batch's shares combine exactly, on one process (the
combination over processes is tested in ``tests/training/test_distributed.py``)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from imle_solvers._collective import LIMB_BITS, Sync, batch_norms, finite_part, sync_group


def _exact_norm(t: torch.Tensor) -> float:
    """‖t‖ from the exact sum of the squares of its float64 entries, rounded once."""
    total = sum((Fraction(v) ** 2 for v in t.double().flatten().tolist()), Fraction(0))
    return math.sqrt(total)


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_norms_are_the_frobenius_norms_to_float64_precision(scale: float) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = [
        torch.randn(40, 3, 7, generator=gen, dtype=torch.float64) * scale,
        -torch.rand(9, 5, generator=gen, dtype=torch.float64) * scale,  # negative entries only
        torch.randn(33, generator=gen, dtype=torch.float64) * scale,  # 1-dim: one row
        torch.tensor(-3.0 * scale, dtype=torch.float64),  # 0-dim
        torch.zeros(4, 6, dtype=torch.float64),  # no size at all
        torch.zeros(0, 6, dtype=torch.float64),  # no rows
    ]
    got = batch_norms(tensors)
    assert got.dtype == torch.float64 and got.shape == (len(tensors),)
    for norm, t in zip(got.tolist(), tensors):
        assert norm == pytest.approx(_exact_norm(t), rel=1e-14, abs=0.0)
    assert got[3] == 3.0 * scale and got[4] == 0.0 and got[5] == 0.0


def test_float32_rows() -> None:
    x = torch.tensor([[3.0, -4.0], [0.0, 12.0]])
    assert batch_norms([x]).tolist() == [13.0]


def test_each_row_is_rounded_to_the_nearest_fixed_point_multiple() -> None:
    # one entry per row (F = 61): rows of one tiny entry whose square is 0.75 of 2^-F times the peak's,
    # and the peak's row. Rounded to the nearest multiple each tiny row counts 2^-F (an error of a quarter
    # unit); cut off it would count 0 (three quarters)
    unit = 2.0**-61
    n = 2**20
    tiny = math.sqrt(0.75 * unit)
    x = torch.full((n + 1, 1), tiny, dtype=torch.float64)
    x[0, 0] = 1.0
    exact = 1.0 + n * tiny**2  # ‖x‖², to float64's precision: Σ of n equal terms
    got = float(batch_norms([x])[0]) ** 2
    assert abs(got - exact) <= 0.5 * n * unit + 4 * 2.0**-52  # at most half a unit a row


def test_limbs_hold_the_fixed_point_sums_exactly() -> None:
    # rows whose fixed-point sums use every bit of both limbs: the norm is the exact one
    x = torch.tensor([[1.0], [1.0 - 2.0**-30], [0.75], [2.0**-20 + 2.0**-40]], dtype=torch.float64)
    assert float(batch_norms([x])[0]) == pytest.approx(_exact_norm(x), rel=1e-15, abs=0.0)
    assert LIMB_BITS == 31


def test_finite_part_and_one_process_syncs_nothing() -> None:
    x = torch.tensor([1.0, -math.inf, math.nan, 2.0])
    assert finite_part(x).tolist() == [1.0, 0.0, 0.0, 2.0]
    assert sync_group(True, None) is None and sync_group(False, None) is None  # no process group here


def test_a_process_group_of_one_syncs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # "None (one process, or sync=False)": an initialised group of one process has nothing to combine
    import torch.distributed as dist

    sizes = {None: 1, "pair": 2}
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: sizes[group])
    assert sync_group(True, None) is None
    assert sync_group(True, "pair") == Sync("pair") and sync_group(False, "pair") is None
