"""Private bounds (dpm_jax.bounds): coverage, clustering quality against known bounds, cost.

    python benchmarks/private_bounds.py                        # every section
    python benchmarks/private_bounds.py --sections coverage --keys 5
    python benchmarks/private_bounds.py --sections quality --presets default,covering
    python benchmarks/private_bounds.py --sections cost --cost-n 1000000
    python benchmarks/private_bounds.py --sections quantiles

Sections (epsilon = 1 in total, delta = n^-1.5 as in the DPM paper, medians over --keys keys):

* coverage: the released box of dpm_jax.private_bounds with its share of the budget, on
  Gaussian blobs, Student t (3 degrees of freedom), UCI Letters (integers 0..15), the
  BIRCH-like grid (range 1e6) and cases where it is expected to lose (data off zero with a
  small spread, a Gaussian straddling 0 at small n); the fraction of points inside the box
  (all dimensions at once) and the largest ratio of box width to the true range.
* quality: dpm_jax.cluster with bounds="private" (each preset: its share of the same total epsilon) against
  the same keys with the data set's known bounds: ARI, accuracy, k on Synth-10d, UCI
  Letters and the structure zoo (at --zoo-n points).
* quantiles: the private-quantile alternative (an exponential mechanism per dimension and side
  over the same domain, at share 0.15), simulated for its utility only.
* cost: one private-bounds estimate against a warm cluster call, same data, same process
  (the two interleaved; the load average is recorded).
  A "cost_before_after" entry of the results file (cost runs of two versions of dpm_jax,
  alternated, with their protocol) is kept and shown under it.

Results go to benchmarks/results/private_bounds.json (and a .md table). Timing numbers
are ratios measured in one run; the machine is described in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from dpm_jax import bounds as bounds_lib
from dpm_jax.eval import datasets as D
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.zoo import labelled_scores, paper_delta
from dpm_jax.mechanisms import cdp_delta

RESULTS = Path(__file__).resolve().parent / "results"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def coverage_sets() -> dict[str, np.ndarray]:
    """name -> points (float32); fixed seeds."""
    rng = np.random.default_rng(0)
    return {
        "blobs-10d-1e4": D.synthetic_blobs(n=10_000, d=10, seed=1).points,
        "blobs-10d-1e5": D.synthetic_blobs(n=100_000, d=10, seed=1).points,
        "student-t3-5d-1e4": rng.standard_t(3, size=(10_000, 5)).astype(np.float32),
        "student-t3-10d-1e5": rng.standard_t(3, size=(100_000, 10)).astype(np.float32),
        "letters-16d-2e4": D.letters().points,
        "birch-grid-2d-1e4": D.grid_clusters(n=10_000).points,
        "birch-grid-2d-1e5": D.grid_clusters(n=100_000).points,
        "loses: uniform[1000,1001]-2d-1e4": rng.uniform(1000, 1001, (10_000, 2)).astype(np.float32),
        "loses?: N(3,5^2)-10d-1e4": (3 + 5 * rng.standard_normal((10_000, 10))).astype(np.float32),
        "uniform[0,1e-3]-2d-1e4": rng.uniform(0, 1e-3, (10_000, 2)).astype(np.float32),
        "all-negative-4d-1e4": -rng.exponential(7.0, (10_000, 4)).astype(np.float32),
    }


PRESETS = {
    "default": bounds_lib.PrivateBounds(),  # bounds="private" in cluster and kmeans
    "share-0.15": bounds_lib.PrivateBounds(share=0.15),
    "share-0.15-widen-1.41": bounds_lib.PrivateBounds(share=0.15, widen=2**0.5),
    "share-0.1-widen-2.83": bounds_lib.COVERING._replace(share=0.1),
    "share-0.125-widen-2.83": bounds_lib.COVERING._replace(share=0.125),
    "share-0.15-widen-2.83": bounds_lib.COVERING._replace(share=0.15),
    "covering": bounds_lib.COVERING,  # dpm_jax.private_bounds's default; the synthesis's
}


def _score_box(X: np.ndarray, lo: np.ndarray, hi: np.ndarray, covered: list, ratios: list) -> None:
    """Append the fraction of the points inside the box and its largest width / true range."""
    covered.append(float(np.mean(np.all((X >= lo) & (X <= hi), axis=1))))
    ratios.append(float(np.max((hi - lo) / np.maximum(X.max(0) - X.min(0), 1e-30))))


def _medians(covered: list, ratios: list) -> dict:
    return dict(
        coverage=float(np.median(covered)), max_ratio=float(np.median(ratios)), coverage_all=covered,
        max_ratio_all=ratios,
    )  # fmt: skip


def coverage(keys: int) -> list[dict]:
    rows = []
    for name, X in coverage_sets().items():
        n, d = X.shape
        points = jnp.asarray(X)
        for preset, request in PRESETS.items():
            budget = dpm_jax.Budget(1.0, paper_delta(n))
            plan, _ = bounds_lib.split_for_bounds(budget, request, d)
            covered, ratios = [], []
            for k in range(keys):
                lo, hi = map(np.asarray, bounds_lib.estimate_bounds(jax.random.key(k), points, jnp.ones(n, bool), plan))
                _score_box(X, lo, hi, covered, ratios)
            row = dict(
                data=name, n=n, d=d, preset=preset, share=request.share, widen=request.widen,
                noise=type(plan.noise).__name__, threshold=plan.threshold,
            ) | _medians(covered, ratios)  # fmt: skip
            rows.append(row)
            _log(f"coverage {name} {preset}: {row['coverage']:.4f} ratio {row['max_ratio']:.2f}")
    return rows


def _largest_rho(epsilon: float, delta: float) -> float:
    """The largest rho whose zCDP is (epsilon, delta)-DP (bisection on cdp_delta)."""
    low, high = 0.0, epsilon
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if cdp_delta(middle, epsilon) <= delta else (low, middle)
    return low


def _log_coordinate(x: np.ndarray) -> np.ndarray:
    """The fixed domain's log scale: sign(x) (log2 |x| + 127), |x| < 2**-126 at 0 (about [-255, 255])."""
    magnitude = np.log2(np.maximum(np.abs(x.astype(np.float64)), 2.0**-126)) + 127.0
    return np.sign(x) * np.where(np.abs(x) < 2.0**-126, 0.0, magnitude)


def _from_log_coordinate(g: np.ndarray) -> np.ndarray:
    return np.sign(g) * np.exp2(np.abs(g) - 127.0)


def _lower_quantile(g_sorted: np.ndarray, rank: float, epsilon: float, rng) -> float:
    """Smith's exponential mechanism for the rank-th smallest point on [-255, 255] (log scale)."""
    ends = np.concatenate([[-255.0], g_sorted, [255.0]])
    lengths = np.diff(ends)  # interval i holds i points below it
    utility = -np.abs(np.arange(len(lengths)) - rank)
    with np.errstate(divide="ignore"):
        score = np.log(lengths) + epsilon * utility / 2 + rng.gumbel(size=len(lengths))
    i = int(np.argmax(score))
    return float(rng.uniform(ends[i], ends[i + 1]))


def quantile_utility(X: np.ndarray, budget, share: float, widen: float, seed: int, failure: float = 1e-4):
    """(lower, upper) of the private-quantile alternative, simulated for its utility only (float
    Gumbel noise: not a private implementation, and not in dpm_jax).

    Per dimension and side, Smith's exponential mechanism for a quantile (Smith 2011, "Privacy-
    preserving statistical estimation with optimal convergence rates", Section 3) over the fixed
    domain on its log scale (the bucket grid's sign and binary exponent, made continuous): an
    interval between consecutive points is drawn with weight length x exp(-epsilon |rank - r| / 2),
    then a point uniformly in it; sensitivity 1 for add/remove-one. 2d selections share the bounds'
    budget: each gets the larger of epsilon_b / (2d) (basic composition) and sqrt(4 rho_b / d) (each
    selection is epsilon^2/8-zCDP: Cesar and Rogers 2021), rho_b the largest rho that is
    (epsilon_b, delta_b)-DP. The rank r plays the threshold's role: the ~127 binades beyond the
    data must lose to the intervals near rank r, so r = 2 ln(B / failure) / epsilon_each, B = 509.
    Widened as the bounds are.
    """
    n, d = X.shape
    eps_b, delta_b = budget.epsilon * share, budget.delta * share
    each = max(eps_b / (2 * d), np.sqrt(4 * _largest_rho(eps_b, delta_b) / d))
    rank = 2 * np.log(len(bounds_lib.bucket_edges(0)) / failure) / each
    rng = np.random.default_rng(seed)
    lower, upper = np.empty(d), np.empty(d)
    for j in range(d):
        g = np.sort(_log_coordinate(X[:, j]))
        lower[j] = _from_log_coordinate(_lower_quantile(g, rank, each, rng))
        upper[j] = -_from_log_coordinate(_lower_quantile(np.sort(-g), rank, each, rng))
    lower = np.where(lower < 0, lower * widen, lower / widen)
    upper = np.where(upper > 0, upper * widen, upper / widen)
    return lower, upper, each, rank


def quantiles(keys: int, share: float) -> list[dict]:
    rows = []
    for name, X in coverage_sets().items():
        n, d = X.shape
        budget = dpm_jax.Budget(1.0, paper_delta(n))
        for widen in (1.0, 2**1.5):
            covered, ratios = [], []
            for k in range(keys):
                lo, hi, each, rank = quantile_utility(X, budget, share, widen, seed=k)
                _score_box(X, lo, hi, covered, ratios)
            row = dict(data=name, n=n, d=d, share=share, widen=widen, epsilon_each=each, rank=rank)
            row |= _medians(covered, ratios)
            rows.append(row)
            _log(f"quantiles {name} widen {widen:.3g}: {row['coverage']:.4f} ratio {row['max_ratio']:.2f}")
    return rows


def _scores(data: D.Dataset, budget, bounds, keys: int, config) -> dict:
    run = jax.jit(jax.vmap(lambda key: dpm_jax.cluster(key, data.points, budget, bounds=bounds, config=config)))
    result = run(jax.random.split(jax.random.key(7), keys))
    num_classes = int(np.max(data.labels)) + 1
    centers, valid = np.asarray(result.centers), np.asarray(result.valid)
    runs = [labelled_scores(data.points, data.labels, centers[i], valid[i], num_classes) for i in range(keys)]
    return {name: float(np.median([r[name] for r in runs])) for name in ("ari", "accuracy", "k")} | {"runs": runs}


def quality(keys: int, presets: list[str], zoo_n: int, only: list[str] | None = None) -> list[dict]:
    names = ["synth-10d", "letters", *D.ZOO]
    rows = []
    for name in names if only is None else [n for n in names if n in only]:
        data = D.letters() if name == "letters" else D.load_dataset(name, **({"n": zoo_n} if name in D.ZOO else {}))
        n = data.points.shape[0]
        budget, config = dpm_jax.Budget(1.0, paper_delta(n)), dpm_jax.DPMConfig()
        known = _scores(data, budget, data.bounds, keys, config)
        row = dict(data=data.name, n=n, d=data.points.shape[1], known=known)
        for preset in presets:
            row[preset] = _scores(data, budget, PRESETS[preset], keys, config)
        rows.append(row)
        summary = " ".join(f"{k}: ari {v['ari']:.3f} k {v['k']:g}" for k, v in row.items() if isinstance(v, dict))
        _log(f"quality {data.name}: {summary}")
    return rows


def _seconds(fn, key: jax.Array) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(key))
    return time.perf_counter() - start


def cost(n: int, repeats: int) -> dict:
    data = D.synthetic_blobs(n=n, d=10, seed=42)
    points = jax.device_put(data.points)
    budget = dpm_jax.Budget(1.0, paper_delta(n))
    plan, _ = bounds_lib.split_for_bounds(budget, bounds_lib.PrivateBounds(), 10)
    mask = jnp.ones(n, bool)
    run_cluster = lambda key: dpm_jax.cluster(key, points, budget, bounds=data.bounds).centers
    run_bounds = lambda key: bounds_lib.estimate_bounds(key, points, mask, plan)
    run_cluster(jax.random.key(0)).block_until_ready()
    jax.block_until_ready(run_bounds(jax.random.key(0)))
    cluster_times, bounds_times = [], []
    for i in range(repeats):  # interleaved, so that a change of the machine's load meets both
        cluster_times.append(_seconds(run_cluster, jax.random.key(i + 1)))
        bounds_times.append(_seconds(run_bounds, jax.random.key(i + 1)))
    cluster_s, bounds_s = float(np.median(cluster_times)), float(np.median(bounds_times))
    load = os.getloadavg()
    _log(f"cost n={n}: cluster {cluster_s:.3f} s, bounds {bounds_s:.3f} s ({bounds_s / cluster_s:.1%}), load {load}")
    return dict(
        n=n, d=10, repeats=repeats, cluster_s=cluster_s, bounds_s=bounds_s, ratio=bounds_s / cluster_s,
        cluster_all=cluster_times, bounds_all=bounds_times, load_average=list(load),
    )  # fmt: skip


def render(results: dict) -> str:
    lines = ["# Private bounds (benchmarks/private_bounds.py)", "", "## Coverage (epsilon 1 total)", ""]
    lines += ["| data | n | d | preset (share, widen) | noise | T | coverage | max width / range |", "|---" * 8 + "|"]
    for r in results.get("coverage", []):
        lines.append(
            f"| {r['data']} | {r['n']} | {r['d']} | {r['preset']} ({r['share']}, {r['widen']:.3g}) | {r['noise']} "
            f"| {r['threshold']} "
            f"| {r['coverage']:.4f} | {r['max_ratio']:.2f} |"
        )
    if results.get("quantiles"):
        lines += ["", "## Private quantiles instead (utility simulation at share 0.15; not in dpm_jax)", ""]
        lines += ["| data | n | d | widen | epsilon each | rank r | coverage | max width / range |", "|---" * 8 + "|"]
        for r in results["quantiles"]:
            lines.append(
                f"| {r['data']} | {r['n']} | {r['d']} | {r['widen']:.3g} | {r['epsilon_each']:.4f} | {r['rank']:.0f} "
                f"| {r['coverage']:.4f} | {r['max_ratio']:.3g} |"
            )
    if results.get("quality"):
        lines += ["", "## Clustering: known bounds vs private bounds (median ARI / accuracy / k)", ""]
        variants = [k for k in results["quality"][0] if isinstance(results["quality"][0][k], dict)]
        lines += ["| data | n | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
        for r in results["quality"]:
            cells = [f"{r[v]['ari']:.3f} / {r[v]['accuracy']:.3f} / {r[v]['k']:g}" for v in variants]
            lines.append(f"| {r['data']} | {r['n']} | " + " | ".join(cells) + " |")
    if results.get("cost"):
        c = results["cost"]
        lines += ["", f"## Cost at {c['n']} x {c['d']}", ""]
        lines.append(f"bounds {c['bounds_s']:.3f} s, warm cluster {c['cluster_s']:.3f} s: ratio {c['ratio']:.3f}")
        if "load_average" in c:
            lines.append(f"(medians of {c['repeats']}, interleaved; load average {c['load_average'][0]:.2f} after)")
    if results.get("cost_before_after"):
        c = results["cost_before_after"]
        lines += ["", c["protocol"], "", "| run | version | bounds s | cluster s | ratio | load average |"]
        lines.append("|---" * 6 + "|")
        for r in c["runs"]:
            lines.append(
                f"| {r['run']} | {r['version']} | {r['bounds_s']:.3f} | {r['cluster_s']:.3f} | {r['ratio']:.3f} "
                f"| {r['load_average'][0]:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", default="coverage,quantiles,quality,cost")
    parser.add_argument("--keys", type=int, default=5)
    presets_help = f"of {list(PRESETS)}"
    parser.add_argument("--presets", default="default,share-0.15,share-0.15-widen-1.41,covering", help=presets_help)
    parser.add_argument("--datasets", default=None, help="quality: only these (comma-separated; default all)")
    parser.add_argument("--zoo-n", type=int, default=20_000)
    parser.add_argument("--cost-n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "private_bounds.json"))
    args = parser.parse_args(argv)
    presets = args.presets.split(",")
    unknown = sorted(set(presets) - set(PRESETS))
    if unknown:
        parser.error(f"unknown presets {unknown}; known: {list(PRESETS)}")
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results["machine"] = machine_description() | {"note": "2 CPU cores shared with other jobs"}
    results["protocol"] = (
        f"epsilon 1 total, delta n^-1.5; {args.keys} keys per cell (medians); presets "
        + ", ".join(f"{name} (share {p.share}, widen {p.widen:.3g})" for name, p in PRESETS.items())
        + f"; quality: presets {args.presets} vs the data set's known bounds, same keys, zoo at n={args.zoo_n}; "
        f"cost: one warm cluster call vs one bounds estimate (default preset), blobs {args.cost_n} x 10, "
        f"median of {args.repeats}, interleaved in one process"
    )
    sections = args.sections.split(",")
    if "coverage" in sections:
        results["coverage"] = coverage(args.keys)
    if "quantiles" in sections:
        results["quantiles"] = quantiles(args.keys, PRESETS["share-0.15"].share)  # beside share-0.15(-widen-2.83)
    if "quality" in sections:
        results["quality"] = quality(args.keys, presets, args.zoo_n, args.datasets and args.datasets.split(","))
    if "cost" in sections:
        results["cost"] = cost(args.cost_n, args.repeats)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
