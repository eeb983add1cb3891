"""Why a target is missed, in the exponential mechanism's own numbers: the selection probabilities.

    nice python benchmarks/selection.py --out benchmarks/results/selection.json

For one released run of the default DPM (and the same key with ``split_window=1``) on a
data set, every reached node above the run's depth is re-scored from the data exactly as
the engine scores it (the node's public cell from the released splits, its half-bin
counts, :func:`dpm_jax.scoring.split_scores` with the released n~, the level's epsilon and
offset from the ledger, :func:`dpm_jax.mechanisms.em_exponent_scale`), and the
exponential mechanism's probability of each candidate is computed. Per node it reports
the probability that the drawn split cuts through a true cluster (at least 5 % of that
cluster's points of the node on each side) and the probability that its split interval is
empty. Evaluation only: it reads the data and the labels, so none of it is a DP release.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

import dpm_jax
from dpm_jax.budget import Budget
from dpm_jax.diagnostics.explain import _node_box
from dpm_jax.eval import datasets
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.zoo import paper_delta
from dpm_jax.files import write_json
from dpm_jax.mechanisms import em_exponent_scale
from dpm_jax.scoring import boundary_statistics, exponent_ratio, score_coefficients, split_scores

CASES = {"zoo-sine": lambda: datasets.sine_clusters(100_000), "zoo-grid": lambda: datasets.grid_clusters(100_000)}
CUT_SHARE = 0.05  # a cluster is cut when at least this share of its node points lies on each side


def _node_probabilities(points, labels, box, noisy_count, epsilon, offset, config) -> dict:
    """The exponential mechanism's law over one node's candidates, and what the candidates do."""
    lower, upper = box
    inside = np.all((points >= lower) & (points < upper), axis=1)
    node_points, node_labels = points[inside], labels[inside]
    bins = 2 * config.max_splits_per_dim
    width = (upper - lower) / bins
    index = np.clip(np.floor((node_points - lower) / width).astype(np.int64), 0, bins - 1)
    counts = np.stack([np.bincount(index[:, j], minlength=bins) for j in range(points.shape[1])]).astype(np.int32)
    coefficients = score_coefficients(config.t, config.q, config.alpha)
    size = max(int(round(noisy_count)), 1)
    statistics = lambda c: boundary_statistics(c, config.split_window)
    scores = split_scores(jax.numpy.asarray(counts), jax.numpy.int32(size), coefficients, statistics)
    exact = np.asarray(scores.limbs[1], np.float64) * 2.0**30 + np.asarray(scores.limbs[0], np.float64)
    window_counts = np.asarray(statistics(jax.numpy.asarray(counts))[0])
    valid = np.zeros_like(exact, bool)
    valid[:, : bins - 1] = True  # candidates at boundaries 1 .. 2B - 1
    ratio = float(exponent_ratio(np.float32(noisy_count), offset, np.int32(size)))
    scale = float(em_exponent_scale(epsilon, coefficients.sensitivity, ratio))  # base-2 exponent per unit of G
    exponent = np.where(valid, scale * (exact - exact[valid].max()), -np.inf)
    probability = np.exp2(exponent)
    probability /= probability.sum()
    cuts = np.zeros_like(valid)
    classes, label_index = np.unique(node_labels, return_inverse=True)
    sizes = np.bincount(label_index, minlength=len(classes))
    for dim in range(points.shape[1]):
        per_label = np.zeros((len(classes), bins))
        np.add.at(per_label, (label_index, index[:, dim]), 1)
        left_share = np.cumsum(per_label, axis=1)[:, :-1] / sizes[:, None]  # boundary i = 1 .. 2B - 1
        cut = (left_share >= CUT_SHARE) & (left_share <= 1 - CUT_SHARE) & (sizes[:, None] >= 20)
        cuts[dim, : bins - 1] = cut.any(axis=0)
    return {
        "points": int(inside.sum()),
        "clusters": int(len(np.unique(node_labels))),
        "exponent_scale": scale,
        "p_cut_cluster": float(probability[cuts].sum()),
        "p_empty_window": float(probability[(window_counts == 0) & valid].sum()),
    }


def analyse(data, key, config) -> list[dict]:
    n = len(data.points)
    budget = Budget(1.0, paper_delta(n))
    result = dpm_jax.cluster(key, data.points, budget, bounds=data.bounds, config=config)
    depth = int(result.depth)
    releases = result.releases_at(depth)  # the run's own releases, as diagnostics.explain reads them
    splits, offsets = releases.split_epsilons, releases.count_offsets[:depth]
    tree = jax.tree.map(np.asarray, result.tree)
    d = data.points.shape[1]
    lower, upper = (np.full(d, bound, np.float64) for bound in data.bounds)
    run = config.at_depth(depth) if config.tau_r == "auto" else config
    rows = []
    for node in np.flatnonzero(tree.reached):
        level = int(node).bit_length() - 1
        if level >= depth:
            continue
        box = _node_box(int(node), tree.split_dim, tree.split_position.astype(np.float64), lower, upper)
        row = _node_probabilities(
            data.points, data.labels, box, float(tree.noisy_count[node]), splits[level], offsets[level], run
        )
        rows.append({"node": int(node), "level": level, **row})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--key", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/selection.json"))
    args = parser.parse_args(argv)
    variants = {"default": dpm_jax.DPMConfig(), "split_window=1": dpm_jax.DPMConfig(split_window=1)}
    out = {"machine": machine_description(), "key": args.key, "cases": {}}
    for name in args.cases.split(","):
        data = CASES[name]()
        out["cases"][name] = {}
        for variant, config in variants.items():
            rows = analyse(data, jax.random.key(args.key), config)
            out["cases"][name][variant] = rows
            for level in sorted({r["level"] for r in rows}):
                at = [r for r in rows if r["level"] == level]
                print(
                    f"{name:9s} {variant:15s} level {level}: {len(at):3d} nodes, "
                    f"median {np.median([r['clusters'] for r in at]):5.1f} clusters, "
                    f"P(cut a cluster) mean {np.mean([r['p_cut_cluster'] for r in at]):.2f}, "
                    f"P(empty window) mean {np.mean([r['p_empty_window'] for r in at]):.2f}, "
                    f"B {np.median([r['exponent_scale'] for r in at]):.3g}",
                    flush=True,
                )
    write_json(args.out, out)


if __name__ == "__main__":
    main()
