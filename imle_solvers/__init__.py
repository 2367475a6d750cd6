"""imle_solvers: differentiable combinatorial solvers for PyTorch via Implicit MLE.

The core (oracles, noise, targets, the I-MLE layer, estimators, top-k, errors) is imported eagerly;
solver adapters, the ILP front end, pools, losses and data sets are loaded on first access so that
``import imle_solvers`` never imports OR-Tools, PuLP, NetworkX or Dask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _command_start  # noqa: F401  # first: Ctrl-C while PyTorch loads is one line in the command
from ._lazy import lazy_exports
from .adaptive import AdaptiveTarget, RowAdaptiveTarget
from .errors import (
    ImleSolversError,
    InfeasibleError,
    InvalidSolutionError,
    InvalidWeightsError,
    MissingExtraError,
    NegativeCycleError,
    SolverTimeoutError,
    UnboundedError,
    UnprovenSolutionWarning,
    WorkerCrashedError,
)
from .estimators import STE, Blackbox, NegativeIdentity, PerturbedOptimizer
from .imle import IMLE  # also binds imle_solvers.imle: the module, callable as imle(...)
from .noise import Gumbel, NoiseDistribution, NoNoise, Normal, SumOfGamma
from .oracle import MapOracle, TorchOracle
from .target import AutoTarget, OptimalTarget, PerturbedTarget, RelativeTarget, TargetDistribution
from .topk import TopK

__version__ = "0.1.0"

# name -> module that defines it (imported on first attribute access, PEP 562)
_LAZY: dict[str, str] = {
    "hamming_loss": ".losses",
    "regret": ".losses",
    "SPOPlusLoss": ".losses",
    "FenchelYoungLoss": ".losses",
    "NCELoss": ".contrastive",
    "CMAPLoss": ".contrastive",
    "PointwiseLTRLoss": ".ranking",
    "PairwiseLTRLoss": ".ranking",
    "ListwiseLTRLoss": ".ranking",
    "RegularizedOptimizer": ".frank_wolfe",
    "RegularizedFenchelYoungLoss": ".frank_wolfe",
    "PerturbationGradientLoss": ".perturbation_gradient",
    "CaVELoss": ".cave",
    "ILP": ".adapters",
    "SolverPool": ".pool",
    "SolutionCache": ".pool",
    "PoolPlan": ".pool",
    "CPSATOracle": ".adapters",
    "PulpOracle": ".adapters",
    "ShortestPath": ".adapters",
    "GridShortestPath": ".adapters",
    "Matching": ".adapters",
    "SpanningTree": ".adapters",
    "DAGShortestPath": ".adapters",
    "TorchGridShortestPath": ".adapters",
    "TorchKnapsack": ".adapters",
    "ClampedCosts": ".adapters",
    "TorchMatching": ".adapters",
    "TorchSpanningTree": ".adapters",
    "TravellingSalesperson": ".adapters",
}

__all__ = [
    "ILP",
    "IMLE",
    "STE",
    "AdaptiveTarget",
    "AutoTarget",
    "Blackbox",
    "CMAPLoss",
    "CPSATOracle",
    "CaVELoss",
    "ClampedCosts",
    "DAGShortestPath",
    "FenchelYoungLoss",
    "GridShortestPath",
    "Gumbel",
    "ImleSolversError",
    "InfeasibleError",
    "InvalidSolutionError",
    "InvalidWeightsError",
    "ListwiseLTRLoss",
    "MapOracle",
    "Matching",
    "MissingExtraError",
    "NCELoss",
    "NegativeCycleError",
    "NegativeIdentity",
    "NoNoise",
    "NoiseDistribution",
    "Normal",
    "OptimalTarget",
    "PairwiseLTRLoss",
    "PerturbationGradientLoss",
    "PerturbedOptimizer",
    "PerturbedTarget",
    "PointwiseLTRLoss",
    "PoolPlan",
    "PulpOracle",
    "RegularizedFenchelYoungLoss",
    "RegularizedOptimizer",
    "RelativeTarget",
    "RowAdaptiveTarget",
    "SPOPlusLoss",
    "ShortestPath",
    "SolutionCache",
    "SolverPool",
    "SolverTimeoutError",
    "SpanningTree",
    "SumOfGamma",
    "TargetDistribution",
    "TopK",
    "TorchGridShortestPath",
    "TorchKnapsack",
    "TorchMatching",
    "TorchOracle",
    "TorchSpanningTree",
    "TravellingSalesperson",
    "UnboundedError",
    "UnprovenSolutionWarning",
    "WorkerCrashedError",
    "__version__",
    "hamming_loss",
    "imle",
    "regret",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    # At run time `imle_solvers.imle` is the module imle.py, whose calls go to its function `imle`
    # (one object, so the package attribute never shadows the module); type checkers see the function.
    from .adapters import (
        ILP,
        ClampedCosts,
        CPSATOracle,
        DAGShortestPath,
        GridShortestPath,
        Matching,
        PulpOracle,
        ShortestPath,
        SpanningTree,
        TorchGridShortestPath,
        TorchKnapsack,
        TorchMatching,
        TorchSpanningTree,
        TravellingSalesperson,
    )
    from .cave import CaVELoss
    from .contrastive import CMAPLoss, NCELoss
    from .frank_wolfe import RegularizedFenchelYoungLoss, RegularizedOptimizer
    from .imle import imle
    from .losses import FenchelYoungLoss, SPOPlusLoss, hamming_loss, regret
    from .perturbation_gradient import PerturbationGradientLoss
    from .pool import PoolPlan, SolutionCache, SolverPool
    from .ranking import ListwiseLTRLoss, PairwiseLTRLoss, PointwiseLTRLoss
