"""Reading a toy result: the table, the summary over instances, the grid comparison and the figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...app.report import format_table
from ...errors import require
from .methods import METHODS
from .results import ToyResult, ToyRow

__all__ = ["ROWS", "compare_grid", "plot", "result_table", "summarize_instances"]


def result_table(result: ToyResult | Sequence[ToyRow]) -> str:
    """The Markdown table of `ToyResult.rows`: final ``L`` mean ± std, gap to ``L*``, best λ and lr."""
    table = []
    for row in result.rows if isinstance(result, ToyResult) else result:
        table.append(
            {
                "method": row.method,
                "λ": "—" if row.lam is None else f"{row.lam:g}",
                "η": f"{row.eta:g}",
                "SGD lr": f"{row.lr:g}",
                "grid edge": row.edge or "",
                "steps": row.steps,
                "final L (mean ± std)": f"{row.mean:.3f} ± {row.std:.3f}",
                "L − L*": f"{row.gap:.3f}",
            }
        )
    return format_table(table)


class _Rows:
    """The toy's summary of finished rows: each row is already a mean ± std over the runs."""

    def rows(self, records: Sequence[ToyRow]) -> list[dict[str, Any]]:
        return [row.to_dict() for row in records]

    def table(self, records: Sequence[ToyRow]) -> str:
        return result_table(records)


ROWS = _Rows()
"""The summary of ``imle-solvers toy``'s results (one row per method, as finished)."""


def summarize_instances(results: Sequence[ToyResult], reference: str = "ste-gumbel") -> list[dict[str, Any]]:
    """Aggregate [`run_toy`][imle_solvers.experiments.topk_toy.run_toy] results over several instances
    (seeds): how robust is the ranking?

    Per row key: the mean and median over instances of the gap ``L − L*`` (mean over runs, at the
    method's best setting on that instance), the number of instances where the method's gap is below
    ``reference``'s, and the mean rank among the 50-step methods (1 = best).

    Parameters
    ----------
    results
        One result per instance, all with the same methods.
    reference
        Row key the methods are compared with (default STE with Gumbel noise).
    """
    if not results:
        raise ValueError("summarize_instances needs at least one result")
    keys = [row.key for row in results[0].rows]
    gaps = torch.tensor([[next(r.gap for r in res.rows if r.key == key) for key in keys] for res in results])
    short = [i for i, row in enumerate(results[0].rows) if row.steps == results[0].config["steps"]]
    ranks = torch.zeros_like(gaps)
    ranks[:, short] = gaps[:, short].argsort(dim=1).argsort(dim=1).to(gaps.dtype) + 1  # 1 = best
    ref = keys.index(reference) if reference in keys else None
    summary = []
    for j, key in enumerate(keys):
        row: dict[str, Any] = {
            "method": results[0].rows[j].method,
            "key": key,
            "instances": len(results),
            "mean gap": float(gaps[:, j].mean()),
            "median gap": float(gaps[:, j].median()),
            "mean rank": float(ranks[:, j].mean()) if j in short else None,
        }
        if ref is not None:
            row[f"beats {reference}"] = int((gaps[:, j] < gaps[:, ref]).sum()) if j != ref else None
        summary.append(row)
    return summary


def compare_grid(result: ToyResult, first: str = "imle-sog", second: str = "imle-gumbel") -> dict[str, Any]:
    """Compare two λ-methods point by point over the (λ, η) grid (the paper's SoG-vs-Gumbel heat-map).

    Returns ``wins`` (grid points where ``first`` has the strictly lower mean final ``L``), ``total``,
    ``mean_diff`` (mean of ``first − second``) and ``std_wins`` (points where ``first`` has the lower
    standard deviation over the runs).
    """
    index = {(g["key"], g["lam"], g["eta"]): g for g in result.grid}
    pairs = [
        (g, index[(second, g["lam"], g["eta"])])
        for g in result.grid
        if g["key"] == first and (second, g["lam"], g["eta"]) in index
    ]
    if not pairs:
        raise ValueError(f"no common grid points of {first!r} and {second!r} in this result")
    return {
        "wins": sum(a["mean"] < b["mean"] for a, b in pairs),
        "total": len(pairs),
        "mean_diff": sum(a["mean"] - b["mean"] for a, b in pairs) / len(pairs),
        "std_wins": sum(a["std"] < b["std"] for a, b in pairs),
    }


def plot(result: ToyResult, path: str | Path) -> Path:
    """Save the figure of the experiment to ``path`` (PNG, or any format matplotlib infers).

    Panels: (a) the optimisation curves, mean ± std over the runs of ``L(θ) − L*`` at each method's best
    setting; (b) the same zoomed on the perturb-and-MAP methods; (c) SFE over ``long_steps`` steps next to the
    50-step methods; (d) the paper's heat-map: mean final ``L`` of I-MLE with SoG minus I-MLE with Gumbel over
    the (λ, η) grid. Needs matplotlib (``pip install 'imle-solvers[plot]'``).
    """
    require("matplotlib", "plot")
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    star, steps = cfg["loss_star"], cfg["steps"]
    short = [row for row in result.rows if row.steps == steps]
    pam = [row for row in short if row.key in METHODS and METHODS[row.key]().kind != "sfe"]
    long = [row for row in result.rows if row.steps != steps]
    has_heat = {"imle-sog", "imle-gumbel"} <= {row.key for row in result.rows}
    fig = Figure(figsize=(11.0, 8.0), layout="constrained")
    (ax_all, ax_zoom), (ax_long, ax_heat) = fig.subplots(2, 2)
    colours: dict[str, Any] = {}

    def draw(ax: Any, row: ToyRow) -> None:
        mean = torch.tensor(result.curves[row.key]["mean"]) - star  # L − L*   [steps + 1]
        std = torch.tensor(result.curves[row.key]["std"])
        x = torch.arange(mean.shape[0])
        colour = colours.setdefault(row.key, f"C{len(colours)}")
        ax.plot(x, mean, label=row.method, color=colour)
        ax.fill_between(x, (mean - std).clamp_min(0), mean + std, alpha=0.15, color=colour)

    for row in short:
        draw(ax_all, row)
    ax_all.set(
        xlabel="SGD step",
        ylabel="L(θ) − L*   (mean ± std over runs)",
        title=f"(a) {cfg['runs']} runs from the same θ₀, best setting per method",
    )
    ax_all.legend(fontsize=7)
    for row in pam:
        draw(ax_zoom, row)
    top = max([row.gap + row.std for row in pam], default=1.0)
    ax_zoom.set(
        xlabel="SGD step",
        ylabel="L(θ) − L*",
        ylim=(0.0, 2.5 * top),
        title="(b) zoom: perturb-and-MAP estimators",
    )
    ax_zoom.legend(fontsize=7)
    for row in [r for r in short if r.key in ("imle-sog", "imle-gumbel", "sfe")] + long:
        draw(ax_long, row)
    ax_long.axvline(steps, color="grey", lw=0.8, ls=":")
    ax_long.set(xlabel="SGD step", ylabel="L(θ) − L*", title="(c) SFE over more steps")
    ax_long.legend(fontsize=7)
    if has_heat:
        lams, etas = cfg["lambdas"], cfg["lrs"]
        mean = {(g["key"], g["lam"], g["eta"]): g["mean"] for g in result.grid}
        diff = torch.tensor(
            [[mean[("imle-sog", lam, eta)] - mean[("imle-gumbel", lam, eta)] for eta in etas] for lam in lams]
        )  # SoG − Gumbel   [n_λ, n_η]
        finite = diff[torch.isfinite(diff)]
        bound = float(finite.abs().max()) if finite.numel() else 1.0
        image = ax_heat.imshow(diff.numpy(), cmap="coolwarm", vmin=-bound, vmax=bound, aspect="auto")
        for i in range(len(lams)):
            for j in range(len(etas)):
                ax_heat.text(j, i, f"{float(diff[i, j]):+.2f}", ha="center", va="center", fontsize=7)
        ax_heat.set_xticks(range(len(etas)), [f"{v:g}" for v in etas])
        ax_heat.set_yticks(range(len(lams)), [f"{v:g}" for v in lams])
        ax_heat.set(
            xlabel="step size η (I-MLE's SGD lr = η λ)",
            ylabel="λ",
            title="(d) mean final L, I-MLE SoG − Gumbel (blue: SoG better)",
        )
        fig.colorbar(image, ax=ax_heat)
    else:
        ax_heat.set_axis_off()
    fig.savefig(path, dpi=110)
    return path
