"""Private bounds on the synthetic-data and greedy entry points: what the bounds' share costs.

    nice python benchmarks/private_bounds_entry_points.py [--n 20000] [--keys 5]

At epsilon = 1 total (delta = 1e-6, add/remove-one), the same keys, one run each way:
  synthesis  dpm_jax.synthesize on the Balog et al. mixture (benchmarks/synth_kdtree.py's
             generator, d = 2, component sd 30), its metric: the RKHS distance of the
             weighted set (kernel exp(-gamma ||x - y||^2), gamma = 1 / (100 sqrt(d))^2), with
             the public bounds synth_kdtree.py uses, (-1000, 1200), against bounds="private"
             (the default share, 0.1 of the budget, spent on them).
  kmeans     dpm_jax.kmeans, k = 8, on Gaussian blobs (benchmarks/greedy.py's data: std 1,
             centres in [-100, 100]^d), its metric: cost / k-means++ (same key), with the
             public bounds (-100, 100) against bounds="private".
Medians over --keys keys. Results: benchmarks/results/private_bounds_entry_points.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import jax
import numpy as np

import dpm_jax
import dpm_jax.bounds
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import synthetic_blobs
from dpm_jax.eval.mmd import balog_gamma, kernel_mean

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the metrics of the two benchmarks
from greedy import cost, kmeanspp  # noqa: E402
from synth_kdtree import BALOG_BOUNDS, distances, mixture, runs  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
BUDGET = dpm_jax.Budget(1.0, 1e-6)
# None: the benchmark's public bounds; COVERING: a wider box (share 0.2, edges moved out by 2**1.5)
BOUNDS = {"public": None, "private": "private", "private COVERING": dpm_jax.bounds.COVERING}
DIAGNOSTIC = "public = key 0's private box (NOT private)"


def synthesis(n: int, num_keys: int) -> list[dict]:
    """The three bounds of BOUNDS, and DIAGNOSTIC: key 0's private estimate given as public
    bounds, which tells the box's effect on the synthesis from the share's (not a DP run)."""
    X = mixture(n, 2, 30.0, seed=0)
    gamma = balog_gamma(2)
    kxx = kernel_mean(X, gamma)
    tight = dpm_jax.bounds.PrivateBounds()  # the tight box (private_bounds defaults to COVERING)
    box = tuple(np.asarray(b) for b in dpm_jax.private_bounds(jax.random.key(0), X, dpm_jax.Budget(0.1, 1e-7), tight))
    rows = []
    for method in ("grid", "kdtree"):
        for name, bounds in (*BOUNDS.items(), (DIAGNOSTIC, box)):
            start = time.perf_counter()
            sets = runs(X, BUDGET, bounds or BALOG_BOUNDS, method, dpm_jax.SynthConfig(), num_keys)
            seconds = time.perf_counter() - start
            dist = distances(X, sets, gamma, kxx)
            row = dict(part="synthesis", method=method, bounds=name, n=n, d=2, distances=dist)
            if name == DIAGNOSTIC:
                row["box"] = [b.tolist() for b in box]
            row.update(median=float(np.median(dist)), seconds_all_keys=round(seconds, 2))
            row["median_cells"] = float(np.median([int((v & (w > 0)).sum()) for _, w, v in sets]))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def kmeans(n: int, num_keys: int) -> list[dict]:
    rows = []
    for d in (2, 10):
        data = synthetic_blobs(n, d, 8, seed=d)
        for name, bounds in BOUNDS.items():
            ratios, found = [], []
            for s in range(num_keys):
                key = jax.random.key(s)
                result = dpm_jax.kmeans(key, data.points, 8, BUDGET, bounds=bounds or data.bounds)
                ratios.append(cost(data.points, result.centers) / kmeanspp(key, data.points, 8))
                found.append([float(np.min(result.bounds[0])), float(np.max(result.bounds[1]))])
            row = dict(part="kmeans", d=d, k=8, n=n, bounds=name, ratios=ratios, median_ratio=float(np.median(ratios)))
            row["bounds_released"] = found
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def markdown(document: dict) -> str:
    lines = [
        "# Private bounds on synthesize and kmeans (epsilon = 1 total, delta = 1e-6)",
        "",
        f"Machine: {document['machine']['processor']}, {document['machine']['cpu_count']} CPUs "
        f"(load average {document['load_average']} at the start); medians over {document['keys']} keys.",
        "Public bounds: synthesis (-1000, 1200) (benchmarks/synth_kdtree.py), kmeans (-100, 100) "
        "(benchmarks/greedy.py); private: the default share (0.1) of the budget, the rest to the algorithm.",
        "",
        "COVERING: `dpm_jax.bounds.COVERING` (share 0.2, the box's edges moved out by 2^1.5). The last synthesis "
        "column gives key 0's private box as public bounds (NOT a private run): the synthesis on the box alone.",
        "",
        "| part | data | bounds | median | runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in document["rows"]:
        synthesis = r["part"] == "synthesis"
        numbers = r["distances" if synthesis else "ratios"]
        lines.append(
            f"| {r['part']} ({'RKHS distance' if synthesis else 'cost / k-means++'}) | "
            f"{r['method'] + ', d = 2' if synthesis else 'blobs, k = 8, d = ' + str(r['d'])}, n = {r['n']} | "
            f"{r['bounds']} | {r['median' if synthesis else 'median_ratio']:.4g} | "
            f"{', '.join(f'{v:.3g}' for v in numbers)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "private_bounds_entry_points.json"))
    args = parser.parse_args(argv)
    load = [round(v, 2) for v in os.getloadavg()]
    start = time.perf_counter()
    rows = synthesis(args.n, args.keys) + kmeans(args.n, args.keys)
    document = dict(
        machine=machine_description(),
        load_average=load,
        keys=args.keys,
        budget=dict(epsilon=BUDGET.epsilon, delta=BUDGET.delta),
        seconds=round(time.perf_counter() - start, 1),
        rows=rows,
    )
    out = pathlib.Path(args.out)
    out.write_text(json.dumps(document, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
