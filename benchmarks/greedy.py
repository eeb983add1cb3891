"""The unified greedy k-means (dpm_jax.kmeans) against its issue's targets.

    nice python benchmarks/greedy.py --out benchmarks/results/greedy.json [--parts quality,elbow,speed,projection]
    nice python benchmarks/greedy.py --parts prefixes,elbow --keys 3 --seeds d,100,101,102,103,104

Parts (medians over ``--keys`` keys, 5 by default; data: dpm_jax.eval.datasets.synthetic_blobs,
Gaussian blobs of std 1 with centres uniform in [-100, 100]^d, bounds (-100, 100)):
  quality     cost / k-means++ (dpm_jax.eval.baselines.kmeans, k-means++ then Lloyd, same key)
              without noise (budget None) in 2 and 10 d, and at epsilon = 1, delta = 1e-6;
              the greedy's prefixes k' <= k (its raw centres, before the lift) against
              k-means++ run at k'.
  elbow       the private elbow (epsilon = 1, n = 10^5, d = 2) on K = 4, 8, 16, 32 blobs,
              k = 1.5 K + 2 centres asked for, for both prefix orders (``order=``) on the same
              keys; on the data seeds of ``--seeds`` ("d": the benchmark's seed, K).
  speed       warm seconds of one private run: Synth-10d-like data (10 d, 64 blobs, k = 64)
              at n = 25k, 50k, 100k (linearity), and the 2-d k = 8 run.
  projection  the random projection's cost in 10 d (8 blobs; Synth-10d, 64 blobs): working
              grids of 2 and 3 dimensions, without noise and at epsilon = 1.
  methods     method="exponential" against method="histogram" (Section 4), same keys, same run,
              epsilon = 1: cost / k-means++ (one k-means++ per key, shared), accuracy and
              warm seconds on 2-d 8 blobs (k = 8) and Synth-10d (k = 64, 2-d projection),
              and the private elbow on K = 4 .. 32 blobs (k = 1.5 K + 2).
  prefixes    8 blobs in 2 and 10 d (k = 8), on the data seeds of ``--seeds`` ("d": the
              benchmark's seed, d), without noise and at epsilon = 1: the cost of every prefix
              k' <= k against k-means++ at k' (median over the keys of k-means++), for both
              prefix orders (``order=``, same keys, same run) and, without noise, Mettu and
              Plaxton's unscaled ball values (the start scores times r_i^z). Three measures:
              "relift" (NOT private: the exact means of the cells of the first k' greedy
              centres in working coordinates), "released" (the first k' released centres as
              they are) and "merged" (``KMeansResult.prefix``: post-processing of the release).
Outputs: ``--out`` (JSON) and the same path with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from dpm_jax.eval import baselines
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import paper_blobs, synthetic_blobs
from dpm_jax.eval.metrics import clustering_accuracy
from dpm_jax.greedy.api import METHODS, ORDERS

BUDGET = dpm_jax.Budget(1.0, 1e-6)


def cost(X, centers) -> float:
    X, centers = jnp.asarray(X), jnp.asarray(centers)
    total = 0.0
    for start in range(0, X.shape[0], 20000):
        block = X[start : start + 20000]
        total += float(jnp.sum(jnp.min(jnp.sum((block[:, None] - centers[None]) ** 2, -1), 1)))
    return total


def kmeanspp(key, X, k) -> float:
    return cost(X, baselines.kmeans(key, X, k).centers)


def quality(num_keys: int) -> list[dict]:
    rows = []
    for d in (2, 10):
        data = synthetic_blobs(100_000, d, 8, seed=d)
        X, k = data.points, 8
        for budget in (None, BUDGET):
            ratios, prefixes = [], []
            for s in range(num_keys):
                key = jax.random.key(s)
                result = dpm_jax.kmeans(key, X, k, budget, bounds=data.bounds)
                reference = kmeanspp(key, X, k)
                ratios.append(cost(X, result.centers) / reference)
                if budget is None and d == 2:
                    raw = np.asarray(result.greedy_centers) * 200.0 - 100.0
                    prefixes.append([cost(X, raw[:j]) / kmeanspp(key, X, j) for j in range(1, k + 1)])
            row = dict(d=d, k=k, n=len(X), epsilon=None if budget is None else budget.epsilon, ratios=ratios)
            row["median_ratio"] = float(np.median(ratios))
            if prefixes:
                row["prefix_ratio_medians"] = np.median(np.array(prefixes), axis=0).tolist()
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def elbow(num_keys: int, seeds=("d",)) -> list[dict]:
    rows = []
    for seed in seeds:
        for true_k in (4, 8, 16, 32):
            data_seed = true_k if seed == "d" else int(seed)
            data = synthetic_blobs(100_000, 2, true_k, seed=data_seed)
            k = int(1.5 * true_k) + 2
            for budget in (None, BUDGET):
                for order in ORDERS:
                    found = [
                        int(
                            dpm_jax.kmeans(
                                jax.random.key(s), data.points, k, budget, bounds=data.bounds, order=order
                            ).elbow_k
                        )
                        for s in range(num_keys)
                    ]
                    row = dict(true_k=true_k, seed=data_seed, k=k, epsilon=None if budget is None else 1.0)
                    row.update(order=order, elbow=found, median=float(np.median(found)))
                    row["within_25_percent"] = bool(abs(row["median"] - true_k) <= 0.25 * true_k)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def _seconds(fn, repeats: int) -> float:
    jax.block_until_ready(fn(jax.random.key(100)))  # compile
    times = []
    for s in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(jax.random.key(s)))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def speed(num_keys: int) -> list[dict]:
    rows = []
    for d, num_blobs, k, sizes in ((10, 64, 64, (25_000, 50_000, 100_000)), (2, 8, 8, (100_000,))):
        for n in sizes:
            data = synthetic_blobs(n, d, num_blobs, seed=1)
            X = jnp.asarray(data.points)
            run = lambda key: dpm_jax.kmeans(key, X, k, BUDGET, bounds=data.bounds).centers  # noqa: E731
            row = dict(d=d, k=k, n=n, warm_seconds_median=_seconds(run, num_keys))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def projection(num_keys: int) -> list[dict]:
    rows = []
    cases = (("blobs-10d-8", synthetic_blobs(100_000, 10, 8, seed=10), 8), ("synth-10d", paper_blobs(10), 64))
    for name, data, k in cases:
        for grid_dim in (2, 3):
            for budget in (None, BUDGET):
                ratios = []
                for s in range(num_keys):
                    key = jax.random.key(s)
                    result = dpm_jax.kmeans(key, data.points, k, budget, bounds=data.bounds, grid_dim=grid_dim)
                    ratios.append(cost(data.points, result.centers) / kmeanspp(key, data.points, k))
                row = dict(data=name, k=k, grid_dim=grid_dim, epsilon=None if budget is None else 1.0, ratios=ratios)
                row["median_ratio"] = float(np.median(ratios))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def _accuracy(data, centers) -> float:
    """Clustering accuracy (majority class of every centre's cell), when the data have labels."""
    X, C = jnp.asarray(data.points), jnp.asarray(centers)
    slot = jnp.concatenate(
        [jnp.argmin(jnp.sum((X[i : i + 20000, None] - C[None]) ** 2, -1), 1) for i in range(0, X.shape[0], 20000)]
    )
    labels = jnp.asarray(data.labels)
    return float(clustering_accuracy(slot, labels, C.shape[0], int(labels.max()) + 1))


def methods(num_keys: int) -> list[dict]:
    """Both methods on the same data and keys, k-means++ computed once per key (shared)."""
    rows = []
    cases = (("blobs-2d-8", synthetic_blobs(100_000, 2, 8, seed=2), 8), ("synth-10d", paper_blobs(10), 64))
    for name, data, k in cases:
        references = [kmeanspp(jax.random.key(s), data.points, k) for s in range(num_keys)]
        for method in METHODS:
            run = lambda key: dpm_jax.kmeans(key, data.points, k, BUDGET, bounds=data.bounds, method=method)  # noqa: E731
            jax.block_until_ready(run(jax.random.key(100)))  # compile outside the timings
            ratios, accuracies, seconds = [], [], []
            for s in range(num_keys):
                start = time.perf_counter()
                result = jax.block_until_ready(run(jax.random.key(s)))
                seconds.append(time.perf_counter() - start)
                ratios.append(cost(data.points, result.centers) / references[s])
                accuracies.append(_accuracy(data, result.centers))
            row = dict(data=name, k=k, method=method, epsilon=1.0, ratios=ratios, median_ratio=float(np.median(ratios)))
            row.update(median_accuracy=float(np.median(accuracies)), median_seconds=float(np.median(seconds)))
            rows.append(row)
            print(json.dumps(row), flush=True)
    for true_k in (4, 8, 16, 32):
        data = synthetic_blobs(100_000, 2, true_k, seed=true_k)
        k = int(1.5 * true_k) + 2
        for method in METHODS:
            found = [
                int(
                    dpm_jax.kmeans(jax.random.key(s), data.points, k, BUDGET, bounds=data.bounds, method=method).elbow_k
                )
                for s in range(num_keys)
            ]
            row = dict(data=f"elbow K={true_k}", k=k, method=method, epsilon=1.0, elbow=found)
            row["median_elbow"] = float(np.median(found))
            row["within_25_percent"] = bool(abs(row["median_elbow"] - true_k) <= 0.25 * true_k)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _lifted_prefix_costs(X, working, greedy_centers) -> list[float]:
    """Data-space cost of every prefix k' after the exact lift (each point's nearest of the first k'
    greedy centres in working coordinates, then the cells' exact means)."""
    X, W, G = jnp.asarray(X), jnp.asarray(working), jnp.asarray(greedy_centers)
    costs = []
    for j in range(1, G.shape[0] + 1):
        slot = jnp.argmin(jnp.sum((W[:, None] - G[None, :j]) ** 2, -1), 1)
        sizes = jnp.zeros(j).at[slot].add(1.0)
        means = jnp.zeros((j, X.shape[1])).at[slot].add(X) / jnp.maximum(sizes, 1.0)[:, None]
        costs.append(cost(X, means))
    return costs


def _mettu_plaxton_centers(working, k: int, plan):
    """The non-private greedy with Mettu and Plaxton's unscaled values (sum of (r_i - dist)^z: the
    scores of a start ball times r_i^z); the descent compares balls of one level, so its choices
    are those of the built greedy. Post-processing of the exact values: an experiment, not an API."""
    from dpm_jax.greedy import nets, select

    values, child_scores = select.point_scores(jnp.asarray(working), jnp.ones(working.shape[0], bool), plan.nets)
    levels = jnp.asarray(nets.start_candidates(plan.nets)[0])
    weighted = values.astype(jnp.float32) * nets.radius(levels, plan.nets.dim) ** plan.nets.z
    greedy = select.greedy_centers(jax.random.key(0), (weighted, child_scores), plan.nets, k, select.argmax_chooser)
    return greedy.centers


def prefixes(num_keys: int, seeds=("d",)) -> list[dict]:
    """Every prefix k' <= k against k-means++ at k' (2 and 10 d; the data seeds ``seeds``), without noise and at
    epsilon = 1, for both prefix orders on the same keys, and without noise Mettu and Plaxton's unscaled values."""
    from dpm_jax.greedy import api

    rows = []
    k = 8
    for d in (2, 10):
        for seed in seeds:
            data_seed = d if seed == "d" else int(seed)
            data = synthetic_blobs(100_000, d, k, seed=data_seed)
            X = jnp.asarray(data.points)
            plan = api.plan_greedy(None, k, d, 2, api.DEFAULT_LEVELS, api.MAX_GRID_DIM, 0)
            lower, upper = (jnp.full(d, b, jnp.float32) for b in data.bounds)
            working = api._working_coordinates(X, lower, upper, plan)[0]
            references = np.array(
                [[kmeanspp(jax.random.key(s), X, j) for j in range(1, k + 1)] for s in range(num_keys)]
            )
            reference = np.median(references, axis=0)  # k-means++ at every k', median over its keys
            for budget in (None, BUDGET):
                greedy_keys = range(1) if budget is None else range(num_keys)  # no noise: deterministic
                for order in (*ORDERS, "mettu_plaxton") if budget is None else ORDERS:
                    measures = dict(relift=[], released=[], merged=[])
                    for s in greedy_keys:
                        if order == "mettu_plaxton":
                            centers = _mettu_plaxton_centers(working, k, plan)
                            measures["relift"].append(np.array(_lifted_prefix_costs(X, working, centers)) / reference)
                            continue
                        result = dpm_jax.kmeans(jax.random.key(s), X, k, budget, bounds=data.bounds, order=order)
                        measures["relift"].append(
                            np.array(_lifted_prefix_costs(X, working, result.greedy_centers)) / reference
                        )
                        measures["released"].append(
                            np.array([cost(X, result.centers[:j]) for j in range(1, k + 1)]) / reference
                        )
                        measures["merged"].append(
                            np.array([cost(X, result.prefix(j)) for j in range(1, k + 1)]) / reference
                        )
                    row = dict(
                        d=d, seed=data_seed, k=k, epsilon=None if budget is None else budget.epsilon, order=order
                    )
                    for name, ratios in measures.items():
                        if ratios:
                            medians = np.median(np.array(ratios), axis=0)  # over the greedy's keys
                            row[name] = medians.tolist()
                            row[f"worst_{name}"] = float(medians.max())
                            row[f"worst_{name}_at"] = int(np.argmax(medians)) + 1
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


PARTS = dict(quality=quality, elbow=elbow, speed=speed, projection=projection, methods=methods, prefixes=prefixes)


def markdown(document: dict) -> str:
    lines = [f"# dpm_jax.kmeans (the unified greedy): {document['machine']['platform']}, shared machine", ""]
    for name, rows in document["parts"].items():
        columns = list(dict.fromkeys(column for row in rows for column in row))  # every row's keys, first-seen order
        lines += [f"## {name}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in rows:
            lines.append("| " + " | ".join(_fmt(row[c]) if c in row else "" for c in columns) + " |")
        lines.append("")
    return "\n".join(lines)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/greedy.json")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument(
        "--seeds",
        default="d",
        help="data seeds of the prefixes and elbow parts, comma separated; d: the benchmark's own seed",
    )
    args = parser.parse_args(argv)
    seeds = tuple(args.seeds.split(","))
    out = Path(args.out)
    document = json.loads(out.read_text()) if out.exists() else dict(parts={})
    document["machine"] = machine_description()
    for name in args.parts.split(","):
        seeded = name in ("prefixes", "elbow")
        document["parts"][name] = PARTS[name](args.keys, seeds) if seeded else PARTS[name](args.keys)
        out.write_text(json.dumps(document, indent=1))
    out.with_suffix(".md").write_text(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
