"""Quality of DPM on the paper's synthetic data (Section 6.1, Table 2), many keys.

    python benchmarks/quality.py --keys 10 --out results/quality.json

For each setting it runs ``dpm_jax.cluster`` under ``jax.vmap`` over keys and
reports the median (and min/max) of k, clustering accuracy (Definition 12) and the
silhouette score of a 10,000-point sample (labels = nearest DP centre). The settings
include n = 20,000 at epsilon = 1, where DPM as published does not separate the 64
blobs, and n = 20,000 at epsilon = 5, whose epsilon * n equals the paper's setting.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import jax
import numpy as np

import dpm_jax
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import synthetic_blobs
from dpm_jax.eval.metrics import assign_to_centers, clustering_accuracy, sampled_silhouette_score
from dpm_jax.files import write_json

SETTINGS = [  # (n, d, epsilon)
    (100_000, 10, 1.0),
    (100_000, 100, 1.0),
    (20_000, 10, 1.0),
    (20_000, 10, 5.0),
]


def evaluate(n: int, d: int, epsilon: float, num_keys: int, batch: int) -> dict:
    data = synthetic_blobs(n=n, d=d, seed=42)
    budget = dpm_jax.Budget(epsilon, 1.0 / (n * math.sqrt(n)))  # the paper's delta
    run = jax.jit(jax.vmap(lambda k: dpm_jax.cluster(k, data.points, budget, bounds=data.bounds)))
    keys = jax.random.split(jax.random.key(2024), num_keys)
    k, accuracy, silhouette = [], [], []
    start = time.perf_counter()
    for first in range(0, num_keys, batch):
        results = run(keys[first : first + batch])
        for r in range(results.k.shape[0]):
            labels = assign_to_centers(data.points, results.centers[r], results.valid[r]).labels
            num_slots = results.centers.shape[1]
            k.append(int(results.k[r]))
            accuracy.append(float(clustering_accuracy(labels, data.labels, num_slots, 64)))
            silhouette.append(
                float(sampled_silhouette_score(jax.random.key(r), data.points, labels, num_slots, 10_000))
            )
        print(f"  n={n} d={d} eps={epsilon}: {len(k)}/{num_keys} keys", file=sys.stderr)
    summary = lambda values: dict(
        median=float(np.median(values)), min=float(np.min(values)), max=float(np.max(values)), values=values
    )
    return dict(
        n=n,
        d=d,
        epsilon=epsilon,
        delta=budget.delta,
        keys=num_keys,
        k=summary(k),
        accuracy=summary(accuracy),
        silhouette=summary(silhouette),
        seconds=time.perf_counter() - start,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--batch", type=int, default=5, help="keys per vmap call")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = [evaluate(n, d, eps, args.keys, args.batch) for n, d, eps in SETTINGS]
    report = dict(machine=machine_description(), results=rows)
    for row in rows:
        print(
            f"n={row['n']:>6} d={row['d']:>3} eps={row['epsilon']:<4} k={row['k']['median']:>5.1f} "
            f"accuracy={row['accuracy']['median']:.3f} [{row['accuracy']['min']:.3f}, {row['accuracy']['max']:.3f}] "
            f"silhouette={row['silhouette']['median']:.3f} "
            f"[{row['silhouette']['min']:.3f}, {row['silhouette']['max']:.3f}]"
        )
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
