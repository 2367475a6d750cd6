"""The I-MLE paper's synthetic top-k experiment (sec. 6 and appendix), as a script.

    python examples/topk_toy.py                         # the experiment: table + plot in runs/topk_toy
    python examples/topk_toy.py --out DIR --runs 100    # options of `imle-solvers toy`
    python examples/topk_toy.py --instances 10          # also: the same experiment on 10 instances
    python examples/topk_toy.py --noise-study 10        # only: SoG vs Gumbel at matched temperatures

Writes ``results.json``, ``results.md`` and ``topk_toy.png`` to ``--out`` (default ``runs/topk_toy``).
With ``--instances N`` it then repeats the experiment for seeds ``0 .. N-1`` (a fresh ``b`` and ``θ₀``
each) and writes ``instances.md`` / ``instances.json``: how often each method beats STE, its mean gap
``L − L*`` and its mean rank. With ``--noise-study N`` it runs only the five I-MLE noises (SoG and Gumbel
at temperatures 1 and 5, and the literal SoG(1,5,10)) on seeds ``0 .. N-1`` and writes
``noise_study.md`` / ``noise_study.json``: the paper's point-by-point heat-map comparison for each pair.
See docs/experiments.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from imle_solvers.app.report import format_table
from imle_solvers.experiments import topk_toy


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--instances", type=int, default=0)
    parser.add_argument("--noise-study", type=int, default=0)
    parser.add_argument("--out", default="runs/topk_toy")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--help", "-h", action="store_true")
    args, rest = parser.parse_known_args(argv)
    if args.help:
        print(__doc__)
        return topk_toy.main(["--help"])
    if args.noise_study > 0:
        return noise_study(args.noise_study, args.runs or 100, Path(args.out), argv)
    runs = [] if args.runs is None else ["--runs", str(args.runs)]
    status = topk_toy.main(["--out", args.out, *runs, *rest])
    if status or args.instances <= 0:
        return status

    results = []
    for seed in range(args.instances):
        print(f"instance {seed + 1}/{args.instances} (seed {seed})", file=sys.stderr)
        results.append(topk_toy.run_toy(runs=args.runs or 100, seed=seed))
    summary = topk_toy.summarize_instances(results)
    rows = [
        {
            **row,
            "mean gap": f"{row['mean gap']:.3f}",
            "median gap": f"{row['median gap']:.3f}",
            "mean rank": "—" if row["mean rank"] is None else f"{row['mean rank']:.2f}",
            "beats ste-gumbel": "—" if row.get("beats ste-gumbel") is None else row["beats ste-gumbel"],
        }
        for row in summary
    ]
    table = format_table(
        rows, columns=["method", "instances", "mean gap", "median gap", "mean rank", "beats ste-gumbel"]
    )
    # the paper's heat-map claim: SoG beats Gumbel at more than half of the (λ, η) grid points
    grids = [topk_toy.compare_grid(r) for r in results]
    wins, total = sum(g["wins"] for g in grids), sum(g["total"] for g in grids)
    std_wins = sum(g["std_wins"] for g in grids)
    heat = (
        f"I-MLE SoG(5,1,10) vs Gumbel(0,1), point by point over the (λ, η) grid of all instances: lower mean "
        f"final L at {wins} of {total} points, lower std at {std_wins} of {total} "
        f"(per instance: {', '.join(str(g['wins']) for g in grids)} of {grids[0]['total']})."
    )
    print(table)
    print(heat)
    out = Path(args.out)
    command = "python examples/topk_toy.py " + " ".join(argv)
    (out / "instances.md").write_text(f"{table}\n\n{heat}\n\nCommand: `{command.strip()}`\n")
    per_instance = [
        {
            "seed": r.config["seed"],
            "loss_star": r.config["loss_star"],
            "loss_init": r.config["loss_init"],
            "rows": [row.to_dict() for row in r.rows],
            "sog_vs_gumbel": g,
            "grid": r.grid,
        }
        for r, g in zip(results, grids)
    ]
    (out / "instances.json").write_text(json.dumps({"summary": summary, "instances": per_instance}, indent=1))
    print(f"wrote {out / 'instances.md'}, {out / 'instances.json'}")
    return 0


NOISES = ("imle-sog", "imle-gumbel", "imle-sog-literal", "imle-gumbel-5", "imle-sog-5")
PAIRS = (
    ("imle-sog", "imle-gumbel"),  # what we first compared: SoG(5,1,10) vs Gumbel(0,1)
    ("imle-sog-literal", "imle-gumbel"),  # the paper's comparison read literally: SoG(1,5,10) vs Gumbel(0,1)
    ("imle-sog-literal", "imle-gumbel-5"),  # the literal SoG against Gumbel at its own temperature 5
    ("imle-sog-5", "imle-gumbel-5"),  # SoG with κ = k against Gumbel, both at temperature 5
    ("imle-gumbel-5", "imle-gumbel"),  # temperature alone
)


def noise_study(instances: int, runs: int, out: Path, argv: list[str]) -> int:
    """SoG vs Gumbel point by point over the (λ, η) grid, at matched and unmatched temperatures."""
    results = []
    for seed in range(instances):
        print(f"instance {seed + 1}/{instances} (seed {seed})", file=sys.stderr)
        results.append(topk_toy.run_toy(runs=runs, seed=seed, methods=NOISES, long_steps=0, progress=False))
    rows = []
    for first, second in PAIRS:
        grids = [topk_toy.compare_grid(r, first, second) for r in results]
        wins, total = sum(g["wins"] for g in grids), sum(g["total"] for g in grids)
        std_wins = sum(g["std_wins"] for g in grids)
        rows.append(
            {
                "first": topk_toy.METHODS[first]().name,
                "second": topk_toy.METHODS[second]().name,
                "first lower mean L": f"{wins} / {total} ({100 * wins / total:.0f} %)",
                "first lower std": f"{std_wins} / {total} ({100 * std_wins / total:.0f} %)",
                "mean diff of final L": f"{sum(g['mean_diff'] for g in grids) / len(grids):+.3f}",
            }
        )
    summary = topk_toy.summarize_instances(results, reference="imle-gumbel")
    best = [
        {
            "method": s["method"],
            "mean gap (best setting)": f"{s['mean gap']:.3f}",
            "median gap": f"{s['median gap']:.3f}",
            "mean rank": f"{s['mean rank']:.2f}",
            "beats Gumbel(0,1)": "—" if s.get("beats imle-gumbel") is None else s["beats imle-gumbel"],
        }
        for s in summary
    ]
    text = format_table(rows) + "\n\n" + format_table(best)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    command = "python examples/topk_toy.py " + " ".join(argv)
    (out / "noise_study.md").write_text(f"{text}\n\nCommand: `{command.strip()}`\n")
    payload = {
        "pairs": rows,
        "summary": summary,
        "instances": [
            {"seed": r.config["seed"], "rows": [row.to_dict() for row in r.rows], "grid": r.grid}
            for r in results
        ],
    }
    (out / "noise_study.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {out / 'noise_study.md'}, {out / 'noise_study.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
