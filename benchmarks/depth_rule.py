"""The evidence behind ``tau_r="auto"``'s rule: every fixed depth against the depth "auto" picks.

    nice python benchmarks/depth_rule.py --keys 8 --out benchmarks/results/depth_rule.json

For each case (the issue's notebook example, its zoo's grid and sine at n = 100,000, UCI
Letters, Synth-10d, and small cases where the budget is short: 64 blobs at n = 20,000,
the zoo's grid, unbalanced and elongated clusters at n = 5,000), epsilon = 1, delta =
n^-1.5, the same ``--keys`` keys for every setting: the median adjusted Rand index,
accuracy and k of DPM at each fixed depth 3..8 and with ``tau_r="auto"``, beside the
depth the rule gives at the true n (dpm_jax.depth.depth_rule on the remaining budget)
and :func:`dpm_jax.diagnostics.recommended_tau_r` (the rule without its slack).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np

import dpm_jax
from dpm_jax.depth import depth_rule, plan_depth
from dpm_jax.diagnostics import recommended_tau_r
from dpm_jax.eval import datasets
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.zoo import labelled_scores, paper_delta, run_dpm
from dpm_jax.files import write_json

CASES = {
    "notebook": lambda: datasets.synthetic_blobs(20_000, 2, num_blobs=16, seed=0),
    "blobs64-20k": lambda: datasets.synthetic_blobs(20_000, 2, num_blobs=64, seed=0),
    "grid-5k": lambda: datasets.grid_clusters(5_000),
    "unbalanced-5k": lambda: datasets.unbalanced_clusters(5_000),
    "elongated-5k": lambda: datasets.elongated_clusters(5_000),
    "letters": datasets.letters,
    "grid-100k": lambda: datasets.grid_clusters(100_000),
    "sine-100k": lambda: datasets.sine_clusters(100_000),
    "synth-10d": lambda: datasets.paper_blobs(10),
}
DEPTHS = (3, 4, 5, 6, 7, 8)


def _scores(data, budget, config, keys) -> dict:
    centers = run_dpm(keys, data.points, budget, data.bounds, config)
    classes = len(np.unique(data.labels))
    runs = [
        labelled_scores(data.points, data.labels, centers.centers[i], centers.valid[i], classes)
        for i in range(len(keys))
    ]
    return {f"{field}_median": float(np.median([run[field] for run in runs])) for field in ("ari", "accuracy", "k")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/depth_rule.json"))
    args = parser.parse_args(argv)
    keys = jax.random.split(jax.random.key(0), args.keys)
    rows = []
    for name in args.cases.split(","):
        data = CASES[name]()
        n, d = data.points.shape
        budget = dpm_jax.Budget(1.0, paper_delta(n))
        auto = dpm_jax.DPMConfig(tau_r="auto")
        remaining = plan_depth(budget, auto, d).remaining
        row = {
            "case": name,
            "n": n,
            "d": d,
            "true_k": int(len(np.unique(data.labels))),
            "rule_depth": depth_rule(n, d, remaining, auto),
            "recommended_tau_r": recommended_tau_r(n, d, remaining, auto.at_depth(7)),
        }
        start = time.perf_counter()
        for depth in DEPTHS:
            row[f"depth{depth}"] = _scores(data, budget, dpm_jax.DPMConfig(tau_r=depth), keys)
        row["auto"] = _scores(data, budget, auto, keys)
        row["seconds"] = time.perf_counter() - start
        print(
            name,
            f"rule {row['rule_depth']} (recommended {row['recommended_tau_r']}):",
            " ".join(f"{depth}:{row[f'depth{depth}']['ari_median']:.3f}" for depth in DEPTHS),
            f"auto:{row['auto']['ari_median']:.3f}",
            flush=True,
        )
        rows.append(row)
    write_json(args.out, {"machine": machine_description(), "epsilon": 1.0, "keys": args.keys, "rows": rows})
    args.out.with_suffix(".md").write_text(_table(rows))


def _table(rows: list[dict]) -> str:
    header = "| case | n | true k | rule (recommended) | " + " | ".join(f"depth {d}" for d in DEPTHS) + " | auto |"
    lines = [
        "Median ARI / k over the keys at each fixed depth and with tau_r='auto' (epsilon = 1). "
        "Bold: the depth the rule picks at the true n.",
        "",
        header,
        "|" + "---|" * (len(DEPTHS) + 5),
    ]
    for row in rows:
        cells = []
        for depth in DEPTHS:
            cell = f"{row[f'depth{depth}']['ari_median']:.2f} / {row[f'depth{depth}']['k_median']:.0f}"
            cells.append(f"**{cell}**" if depth == row["rule_depth"] else cell)
        auto = f"{row['auto']['ari_median']:.2f} / {row['auto']['k_median']:.0f}"
        lines.append(
            f"| {row['case']} | {row['n']:,} | {row['true_k']} | {row['rule_depth']} ({row['recommended_tau_r']}) | "
            + " | ".join(cells)
            + f" | {auto} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
