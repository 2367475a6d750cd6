"""The ILP family: integer linear programmes as MAP oracles, on CP-SAT, CBC or HiGHS.

* [`ILP`][imle_solvers.ILP] — declare ``A_ub z ≤ b_ub``, ``A_eq z = b_eq``, bounds and integrality;
  pick a back end;
* [`CPSATOracle`][imle_solvers.CPSATOracle] — a ``cp_model.CpModel`` of your own (extra ``cpsat``);
* [`PulpOracle`][imle_solvers.PulpOracle] — a ``pulp.LpProblem`` of your own, solved by CBC, HiGHS or any
  PuLP solver object (extra ``pulp``).

How the package is laid out: ``_linear.py`` holds the solver-neutral model every back end is built from
(`LinearForm`), ``_check.py`` the check every returned state passes (`FeasibilityCheck`), ``_engine.py``
the one interface of the back ends (`Engine`: ``solve(costs) -> Outcome``) and the oracle that turns an
outcome into a state or a typed error (`EngineOracle`). One module per back end implements `Engine`:
``_cbc.py`` (`CbcEngine`), ``_highs.py`` (`HighsEngine`), ``cpsat.py`` (`CpsatEngine`, beside
[`CPSATOracle`][imle_solvers.CPSATOracle]) and ``pulp.py`` (`PulpEngine`, any PuLP solver object, beside
[`PulpOracle`][imle_solvers.PulpOracle]). ``_ilp.py`` holds [`ILP`][imle_solvers.ILP].

Solvers are imported on first use: importing this package needs NumPy and SciPy only.
"""

from __future__ import annotations

from ._ilp import ILP
from .cpsat import CPSATOracle
from .pulp import PulpOracle

__all__ = ["ILP", "CPSATOracle", "PulpOracle"]
