from __future__ import annotations

import pickle

import pytest

from imle_solvers import errors
from imle_solvers.errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidWeightsError,
    MissingExtraError,
    NegativeCycleError,
    SolverTimeoutError,
    UnboundedError,
    WorkerCrashedError,
)

ALL = [
    InvalidWeightsError,
    InfeasibleError,
    UnboundedError,
    SolverTimeoutError,
    NegativeCycleError,
    WorkerCrashedError,
    MissingExtraError,
]


@pytest.mark.parametrize("cls", ALL)
def test_hierarchy_rows_and_pickle(cls: type[ImleSolversError]) -> None:
    err = cls("it broke", rows=[3, 5])
    assert isinstance(err, ImleSolversError)
    assert err.rows == (3, 5) and err.row == 3
    assert "batch rows 3, 5: it broke" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.rows == (3, 5) and str(back) == str(err)


def test_with_rows_and_no_rows() -> None:
    err = InfeasibleError("no path")
    assert err.row is None and str(err) == "no path"
    err.with_rows([7])
    assert err.rows == (7,) and str(err) == "batch row 7: no path"


def test_many_rows_are_abbreviated() -> None:
    err = InvalidWeightsError("bad", rows=range(25))
    assert "(25 rows in all)" in str(err)


def test_builtin_bases() -> None:
    assert issubclass(InvalidWeightsError, ValueError)
    assert issubclass(SolverTimeoutError, TimeoutError)
    assert issubclass(MissingExtraError, ImportError)


def test_require_names_the_extra() -> None:
    assert errors.require("math", "none") is __import__("math")
    with pytest.raises(MissingExtraError, match=r"pip install 'imle-solvers\[cpsat\]'"):
        errors.require("definitely_not_a_module_xyz", "cpsat")
