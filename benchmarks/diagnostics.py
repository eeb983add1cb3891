"""Does dpm_jax.diagnostics.plan's recommended depth match the depth that clusters best?

    python benchmarks/diagnostics.py --out benchmarks/results/diagnostics.json

For data sets where the right answer is known (Gaussian blobs: the notebook's first
example, 16 blobs of 20,000 points in 2-D, and Synth-10d-like data at n = 20,000 and
100,000; UCI Letters with its 26 classes), runs ``cluster`` at several tau_r over fixed keys and reports the median
adjusted Rand index and k beside the plan's useful depth (computed from public n,
d, epsilon only), and the same for ``tau_r="auto"`` (the depth chosen from a noisy
count, dpm_jax.depth). Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import numpy as np
from sklearn.metrics import adjusted_rand_score

import dpm_jax
from dpm_jax import diagnostics
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import letters, synthetic_blobs
from dpm_jax.eval.metrics import assign_to_centers

CASES = {  # name: loader of a labelled data set with public bounds
    "notebook: 16 blobs, 2-D, n = 20,000": lambda: synthetic_blobs(20_000, 2, num_blobs=16, seed=0),
    "64 blobs, 10-D, n = 20,000": lambda: synthetic_blobs(20_000, 10, num_blobs=64, seed=0),
    "64 blobs, 10-D, n = 100,000": lambda: synthetic_blobs(100_000, 10, num_blobs=64, seed=0),
    "UCI Letters, 16-D, n = 20,000, 26 classes": letters,
}


def run_case(data, epsilon, depths, keys):
    (n, d), blobs = data.points.shape, len(np.unique(data.labels))
    budget = dpm_jax.Budget(epsilon, n ** -1.5)
    plan = diagnostics.plan(n, d, budget)
    rows = []
    for tau_r in [*depths, "auto"]:
        config = dpm_jax.DPMConfig(tau_r=tau_r)
        aris, ks = [], []
        for k in range(keys):
            result = dpm_jax.cluster(jax.random.key(k), data.points, budget, bounds=data.bounds,
                                     config=config)
            labels = np.asarray(assign_to_centers(data.points, result.centers, result.valid).labels)
            aris.append(adjusted_rand_score(data.labels, labels))
            ks.append(int(result.k))
        useful = None if tau_r == "auto" else diagnostics.plan(n, d, budget, config).useful_depth
        rows.append(dict(tau_r=tau_r, ari_median=float(np.median(aris)), k_median=float(np.median(ks)),
                         ari=aris, k=ks, plan_useful_depth=useful))
    return dict(n=n, d=d, blobs=blobs, epsilon=epsilon, default_plan_useful_depth=plan.useful_depth,
                recommended_tau_r=diagnostics.recommended_tau_r(n, d, budget), depths=rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--depths", default="3,4,5,6,7")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    depths = [int(x) for x in args.depths.split(",")]
    report = dict(machine=machine_description(), keys=args.keys, cases={})
    for name, load in CASES.items():
        case = run_case(load(), args.epsilon, depths, args.keys)
        report["cases"][name] = case
        best = max((row for row in case["depths"] if row["tau_r"] != "auto"), key=lambda row: row["ari_median"])
        print(f"{name}: plan's useful depth (tau_r = 7 budget) {case['default_plan_useful_depth']}, "
              f"recommended tau_r {case['recommended_tau_r']}; best tau_r by median ARI {best['tau_r']}",
              flush=True)
        for row in case["depths"]:
            print(f"   tau_r={row['tau_r']}: median ARI {row['ari_median']:.3f}, median k {row['k_median']:.0f}, "
                  f"plan's useful depth at this tau_r {row['plan_useful_depth']}", flush=True)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
