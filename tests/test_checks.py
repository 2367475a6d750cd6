"""One message format for every argument check: '<name> must be <requirement>, got <value>'."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from imle_solvers import (
    IMLE,
    AdaptiveTarget,
    Gumbel,
    Normal,
    PerturbedOptimizer,
    PerturbedTarget,
    RelativeTarget,
    RowAdaptiveTarget,
    SumOfGamma,
    TopK,
)
from imle_solvers._checks import (
    distinct,
    in_range,
    instance_of,
    integer_at_least,
    non_negative,
    non_negative_int,
    one_of,
    positive,
    positive_int,
)


def test_helpers_accept_and_convert() -> None:
    assert positive("x", 2) == 2.0 and non_negative("x", 0) == 0.0 and positive_int("n", 3.0) == 3
    assert in_range("p", 0.0, 0, 1) == 0.0 and in_range("p", 1.0, 0, 1, closed="(]") == 1.0
    assert one_of("mode", "a", ("a", "b")) == "a"
    assert non_negative_int("n", 0.0) == 0 and integer_at_least("size", 2, 2) == 2
    assert distinct("seeds", [3, 1]) == (3, 1)


def test_helpers_accept_numpy_scalars() -> None:
    assert positive_int("n", np.int64(3)) == 3 and type(positive_int("n", np.int64(3))) is int
    assert positive("tau", np.float32(0.5)) == 0.5 and in_range("p", np.float64(0.25), 0, 1) == 0.25


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (lambda: positive("tau", 0), r"^tau must be a finite number > 0, got 0$"),
        (lambda: positive("tau", math.inf), r"^tau must be a finite number > 0, got inf$"),
        (lambda: positive("tau", math.nan), r"got nan"),
        (lambda: positive("tau", "1"), r"got '1'"),
        (lambda: non_negative("beta", -1e-9), r"^beta must be a finite number >= 0"),
        (lambda: positive_int("s", 2.5), r"^s must be a positive integer, got 2\.5$"),
        (lambda: positive_int("s", True), r"got True"),
        (lambda: in_range("momentum", 1.0, 0, 1), r"^momentum must be in \[0, 1\), got 1\.0$"),
        (lambda: in_range("p", 0.0, 0, 1, closed="(]"), r"must be in \(0, 1\]"),
        (lambda: one_of("noise_on", "x", ("theta", "costs")), r"one of 'theta', 'costs', got 'x'"),
        (lambda: positive_int("n", np.bool_(True)), r"got np\.True_|got True"),
        (lambda: non_negative_int("n", -1), r"^n must be a non-negative integer, got -1$"),
        (lambda: non_negative_int("n", False), r"got False"),
        (lambda: integer_at_least("size", 1, 2), r"^size must be an integer >= 2, got 1$"),
        (lambda: distinct("seeds", []), r"^seeds must be non-empty and without repeats, got \[\]$"),
        (lambda: distinct("seeds", (1, 1)), r"without repeats, got \[1, 1\]$"),
        (lambda: positive("", 0), r"^must be a finite number > 0, got 0$"),  # the caller names it
    ],
)
def test_helpers_reject_with_one_format(check: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check()


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: Gumbel(0), "Gumbel tau"),
        (lambda: Normal(-1), "Normal sigma"),
        (lambda: SumOfGamma(k=math.nan), "SumOfGamma k"),
        (lambda: SumOfGamma(s=0), "SumOfGamma s"),
        (lambda: RelativeTarget(lam=0), "RelativeTarget lam"),
        (lambda: PerturbedTarget(-2), "PerturbedTarget lam"),
        (lambda: AdaptiveTarget(decay=1.5), "AdaptiveTarget decay"),
        (lambda: RowAdaptiveTarget(nonzero_target=0), "RowAdaptiveTarget nonzero_target"),
        (lambda: TopK(0, 5), "TopK k"),
        (lambda: TopK(6, 5), "TopK k must be at most n_vars=5"),
        (lambda: IMLE(TopK(1, 3), samples=0), "samples"),
        (lambda: IMLE(TopK(1, 3), noise_on="both"), "noise_on"),  # type: ignore[arg-type]
        (lambda: PerturbedOptimizer(TopK(1, 3), noise="cauchy"), "PerturbedOptimizer noise"),  # type: ignore[arg-type]
    ],
)
def test_every_hyper_parameter_names_itself(make: Callable[[], object], name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}"):
        make()


class _Base:
    pass


class _Child(_Base):
    pass


def test_instance_of_accepts_instances_and_optional_none() -> None:
    child = _Child()
    assert instance_of("thing", child, _Base) is child
    assert instance_of("thing", None, _Base, optional=True) is None


@pytest.mark.parametrize(
    ("value", "optional", "message"),
    [
        (
            _Child,
            False,
            r"^thing must be a _Base instance, got the class _Child; pass an instance, "
            r"e\.g\. _Child\(\.\.\.\)$",
        ),
        (int, False, r"^thing must be a _Base instance, got the class int$"),
        ("gumbel", False, r"^thing must be a _Base instance, got 'gumbel' \(str\)$"),
        (None, False, r"^thing must be a _Base instance, got None \(NoneType\)$"),
        (3, True, r"^thing must be a _Base instance or None, got 3 \(int\)$"),
        ("x" * 100, False, r"got 'x{58}… \(str\)$"),  # long values are shortened
    ],
)
def test_instance_of_rejects_with_one_format(value: object, optional: bool, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        instance_of("thing", value, _Base, optional=optional)
