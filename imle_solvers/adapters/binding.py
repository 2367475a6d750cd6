"""Binding constraints of a 0/1 linear programme at a state: the normals of the rows it meets with equality.

For ``C = {z ∈ {0, 1}^m : A_ub z ≤ b_ub, A_eq z = b_eq}`` and a state ``z``, the binding (active)
constraints in canonical ``a z ≤ b`` orientation are the rows of ``A_ub`` with ``a z = b``, both ``±a`` of
every equality row, ``−e_j`` for ``z_j`` at its lower bound and ``+e_j`` at its upper bound. Their cone
is the normal cone of the polytope at ``z``: ``z`` maximises ``⟨θ, ·⟩`` over the LP relaxation exactly when θ
lies in it, which is what CaVE trains towards ([`CaVELoss`][imle_solvers.CaVELoss]).

`binding_constraints` knows the oracles with such a form: a declared [`ILP`][imle_solvers.ILP] (rows on its
state columns), [`DAGShortestPath`][imle_solvers.DAGShortestPath] (flow conservation at every node),
[`TorchKnapsack`][imle_solvers.TorchKnapsack] (capacity rows),
[`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (degree rows; see its note), and the
wrappers [`SolutionCache`][imle_solvers.SolutionCache] and [`ClampedCosts`][imle_solvers.ClampedCosts]
(their inner oracle's). Any oracle of your own can define ``binding_constraints(state) -> (R, m)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import ImleSolversError
from ..oracle import MapOracle

__all__ = ["UnsupportedOracleError", "binding_constraints", "binding_constraints_batch"]

TOL = 1e-5
"""Absolute slack below which a row or bound counts as binding (PyEPO's)."""


class UnsupportedOracleError(ImleSolversError, TypeError):
    """The oracle has no linear form whose binding constraints can be read (CaVE needs one)."""


def binding_constraints(oracle: MapOracle, state: Any) -> np.ndarray:
    """The normals of the constraints binding at ``state``, ``(R, m)`` rows in ``a z ≤ b`` orientation.

    Order: binding inequality rows, then ``+a`` and ``−a`` of each equality row, then ``−e_j`` for
    variables at their lower bound, ``+e_j`` at their upper bound.

    Parameters
    ----------
    oracle
        An oracle with a linear form (see the module's list) or a ``binding_constraints(state)`` method.
    state
        ``(m,)`` a feasible state (e.g. the optimal ``z*(c)``).

    Raises
    ------
    UnsupportedOracleError
        For an oracle with no known linear form (named), or an ILP row that mixes state and auxiliary
        columns (its activity at ``state`` depends on auxiliary values the oracle does not return).
    """
    z = np.asarray(state.detach().cpu() if isinstance(state, torch.Tensor) else state, dtype=np.float64)
    if z.shape != (oracle.n_vars,):
        raise ImleSolversError(f"state must have shape ({oracle.n_vars},), got {z.shape}")
    method = getattr(oracle, "binding_constraints", None)
    if callable(method):
        return np.asarray(method(z), dtype=np.float64).reshape(-1, oracle.n_vars)
    from ..pool._cache import SolutionCache
    from .clamp import ClampedCosts

    if isinstance(oracle, (SolutionCache, ClampedCosts)):
        return binding_constraints(oracle.oracle, z)
    rows = _linear_rows(oracle)
    if rows is None:
        raise UnsupportedOracleError(
            f"{type(oracle).__name__} has no linear form to read binding constraints from (CaVE needs one): "
            "use an ILP, DAGShortestPath, TorchKnapsack or TravellingSalesperson, or give the oracle a "
            "binding_constraints(state) method"
        )
    a_ub, b_ub, a_eq, lb, ub = rows
    out = []
    if a_ub is not None and b_ub is not None and len(a_ub):
        out.append(a_ub[np.abs(a_ub @ z - b_ub) < TOL])  # a z = b   [R₁, m]
    if a_eq is not None and len(a_eq):
        out += [a_eq, -a_eq]  # both orientations of every equality   [2R₂, m]
    eye = np.eye(oracle.n_vars)
    low = np.abs(z - lb) < TOL
    out.append(-eye[low])  # z_j = lb_j: −e_j
    out.append(eye[(np.abs(z - ub) < TOL) & ~low])  # z_j = ub_j: +e_j
    return np.vstack(out)


def binding_constraints_batch(oracle: MapOracle, states: torch.Tensor) -> torch.Tensor:
    """`binding_constraints` of every row of ``(N, m)`` states, zero-padded to ``(N, R_max, m)`` (as
    PyEPO's ``collate_tight_constraints``), on the states' device and dtype."""
    rows = [binding_constraints(oracle, z) for z in states.detach().cpu().numpy()]
    width = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width, oracle.n_vars))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out).to(device=states.device, dtype=states.dtype)


Rows = tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray]


def _linear_rows(oracle: MapOracle) -> Rows | None:
    """``(A_ub, b_ub, A_eq, lb, ub)`` of the oracles with a known linear form, else ``None``."""
    from .graphs.dag import DAGShortestPath
    from .graphs.tsp import TravellingSalesperson
    from .ilp import ILP
    from .knapsack import TorchKnapsack

    m = oracle.n_vars
    zeros, ones = np.zeros(m), np.ones(m)
    if isinstance(oracle, ILP):
        return _ilp_rows(oracle)
    if isinstance(oracle, DAGShortestPath):  # Σ_out z − Σ_in z = [v = s] − [v = t] at every node
        a_eq = np.zeros((len(oracle.nodes), m))
        index = {node: k for k, node in enumerate(oracle.nodes)}
        for e, (u, v) in enumerate(oracle.edges):
            a_eq[index[u], e] += 1.0
            a_eq[index[v], e] -= 1.0
        return None, None, a_eq, zeros, ones
    if isinstance(oracle, TorchKnapsack):  # Σ_i w_id z_i ≤ capacity_d
        return oracle.weights.T.astype(np.float64), oracle.capacities.astype(np.float64), None, zeros, ones
    if isinstance(oracle, TravellingSalesperson):  # Σ_{e ∋ v} z_e = 2 (degree rows)
        n = oracle.n_nodes
        a_eq = np.zeros((n, m))
        for e, (i, j) in enumerate(oracle.edges):
            a_eq[i, e] = a_eq[j, e] = 1.0
        return None, None, a_eq, zeros, ones
    return None


def _ilp_rows(oracle: Any) -> Rows:
    """The rows of a declared ILP on its state columns (``row_lb ≤ A x ≤ row_ub``)."""
    form = oracle.form
    m = form.n_vars
    a = form.A.tocsr()
    state_cols = a[:, :m].toarray()  # [rows, m]
    aux = a[:, m:]
    mixed = np.flatnonzero((np.abs(aux).sum(axis=1).A1 > 0) & (np.abs(state_cols).sum(axis=1) > 0))
    if mixed.size:
        raise UnsupportedOracleError(
            f"{oracle!r}: row {int(mixed[0])} mixes state and auxiliary columns, so whether it binds at a "
            "state depends on auxiliary values the oracle does not return (declare the ILP on its state "
            "columns only)"
        )
    keep = np.abs(state_cols).sum(axis=1) > 0  # rows on auxiliary columns only have no normal here
    low, high = form.row_lb[keep], form.row_ub[keep]
    rows = state_cols[keep]
    eq = low == high
    upper = ~eq & np.isfinite(high)
    lower = ~eq & np.isfinite(low)
    a_ub = np.vstack([rows[upper], -rows[lower]])  # a x ≤ ub and −a x ≤ −lb
    b_ub = np.concatenate([high[upper], -low[lower]])
    return a_ub, b_ub, rows[eq], form.col_lb[:m], form.col_ub[:m]
