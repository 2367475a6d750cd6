"""The paper's Warcraft shortest-path experiment (sec. 6) on generated terrain maps.

A small CNN (in the spirit of the paper's truncated ResNet18) reads a 96 × 96 RGB terrain map and
predicts the 12 × 12 cell costs; the decision is the cheapest 8-neighbour top-left → bottom-right
path (``GridShortestPath``, Dijkstra). Accuracy = share of test maps whose predicted path has the
optimal cost. Compared, as in the paper's Table 4 (Warcraft 12 × 12: I-MLE μ-μ 97.2% > BB 95.2% >
DPO 94.8%):

* I-MLE μ-μ — optimal target (eq. 10) + regret loss ``⟨c, z⟩`` (Fact 2), SumOfGamma noise;
* BB — blackbox differentiation (Vlastelica et al.), λ = 20, Hamming loss to the optimal path;
* DPO — perturbed optimizer (Berthet et al.), σ = 1, 10 samples, squared error to the optimal path;
* DPO + FY loss — the same perturbed optimizer trained with its Fenchel-Young loss (Berthet et al.'s
  recommended loss; not in the paper's table).

Predicted costs are positive (softplus); perturbed and target costs are clamped at 0 before
Dijkstra (``ClampedCosts``): a negative cell next to another would make a negative cycle.

Run:  python examples/terrain_maps.py [--n-train 1000] [--epochs 10] [--seeds 0 1 2] [--plot PATH]
      [--model terrain-cnn|resnet-stem] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from imle_solvers.app.report import format_table
from imle_solvers.training import TrainConfig, make_problem, train_model

METHODS = {"imle-mumu": "I-MLE μ-μ", "dbb": "BB", "dpo": "DPO", "pfyl": "DPO + FY loss"}
COLOURS = {"imle-mumu": "tab:blue", "dbb": "tab:orange", "dpo": "magenta", "pfyl": "tab:red"}
PAPER = {"imle-mumu": 97.2, "dbb": 95.2, "dpo": 94.8, "pfyl": "—"}


def plot(problem: object, models: dict[str, torch.nn.Module], path: str) -> None:
    """The first test maps with the optimal path and each method's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = problem.test  # type: ignore[attr-defined]
    k, pix = 12, test.features.shape[-1] // 12
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6))
    for ax, i in zip(axes, range(3)):
        ax.imshow(test.features[i].permute(1, 2, 0).cpu().numpy())
        curves: list[tuple[str, torch.Tensor, str, int]] = [("optimal", test.solutions[i].cpu(), "w", 9)]
        with torch.no_grad():
            for name, model in models.items():
                model.eval()
                device = next(model.parameters()).device
                costs = model(test.features[i : i + 1].to(device))[0].double().cpu().numpy()
                z = torch.from_numpy(test.oracle.solve(costs))
                curves.append((METHODS[name], z, COLOURS[name], 5))
        for label, z, colour, size in curves:
            r, c = np.divmod(np.flatnonzero(z.numpy().reshape(k * k)), k)
            ax.plot(c * pix + pix / 2, r * pix + pix / 2, "o", ms=size, label=label, color=colour, alpha=0.8)
        ax.axis("off")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("terrain maps: optimal path (white) and predicted paths", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--plot", default=None, help="save a figure of test maps and paths here")
    parser.add_argument(
        "--model",
        choices=["terrain-cnn", "resnet-stem"],
        default="terrain-cnn",
        help="the light CNN or the paper's ResNet18 first block",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda: model, data and noise live there")
    args = parser.parse_args()
    torch.set_num_threads(1)
    acc: dict[str, list[float]] = {m: [] for m in METHODS}
    config = TrainConfig(
        problem="terrain",
        methods=tuple(METHODS),
        n_train=args.n_train,
        n_test=args.n_test,
        epochs=args.epochs,
        model=args.model,
        device=args.device,
        show_progress=True,
    )
    plan = config.plan()  # the problem's defaults and the device's fastest settings, resolved once
    for seed in args.seeds:
        problem = make_problem(plan, seed)
        models = {}
        for name in METHODS:
            torch.manual_seed(seed)
            model = problem.model()
            out = train_model(plan, problem, name, seed, model=model)
            acc[name].append(100 * out.accuracy)
            models[name] = model
            print(f"seed {seed} {name:>10}: accuracy {100 * out.accuracy:.1f}%", flush=True)
        if args.plot and seed == args.seeds[0]:
            plot(problem, models, args.plot)
    rows = [
        {
            "method": METHODS[m],
            "accuracy % (ours)": f"{np.mean(a):.1f} ± {np.std(a):.1f}",
            "paper (Warcraft 12x12)": PAPER[m],
        }
        for m, a in acc.items()
    ]
    print()
    print(format_table(rows))
    order = sorted(["imle-mumu", "dbb", "dpo"], key=lambda m: -np.mean(acc[m]))
    same = order == ["imle-mumu", "dbb", "dpo"]
    print(
        f"\nordering: {' > '.join(METHODS[m] for m in order)} — "
        f"{'same as' if same else 'differs from'} the paper's I-MLE μ-μ > BB > DPO"
    )


if __name__ == "__main__":
    main()
