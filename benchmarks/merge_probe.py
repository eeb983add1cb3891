"""Issue 27's probe (stop 43): merge DPM's leaves back where no split cut a valley. NOT private.

    nice python benchmarks/merge_probe.py --keys 8 [--gate 2.5] [--cells zoo,table2] [--tag NAME]

Every earlier fix for "large clusters beside small ones" *halted* a node that looked like one
cluster, and each also halted the sine or the 64-d pair near the root (docs/evaluation.md). This
probe asks whether a *merge* works: DPM splits as it does today; afterwards the leaves under an
inner node v become one cluster if v's drawn split cut through no valley and none of the splits
below it clearly did.

Per inner node v (drawn split at position s in dimension j, cell [a, b) in j): with the node's
points' histogram in j of ``BINS`` half-bins over [a, b), W = the points in the window of
``HALF_BINS`` half-bins on each side of s, L / R = the largest window of that width entirely
left / right of W's; S = 2 W - min(L, R) (S > 0: the split's window holds more than half of the
smaller peak beside it). A point moves W, L and R by at most one each, in one node per level:
sensitivity 3 per level. The probe adds *continuous* Laplace noise of scale b_l = 3 / epsilon_l
(NumPy's, not an exact sampler) with a share of epsilon spread over levels 0..depth-1 in
proportion to (l + 1) ** ``--level-power`` (default 1: 1, 2, ..., depth), and DPM itself runs at
the rest. A node v merges its subtree iff
its noisy S >= ``--strict`` b_l, at most a share ``--block-share`` (default 0: none) of the inner
nodes of its subtree has noisy S < -``--lenient`` b (clearly a valley), and
(``--gate`` > 0) its size times the window's share of the cell is at least ``--gate`` b_l (a public
gate in a mechanism would use the released n~; the probe uses the node's true size).

What is NOT a release here: the statistic is exact and its noise continuous, the node sizes of the
gate are exact, and every clustering is scored by the exact centroids of its groups (not DPM's
released centres). The numbers say whether the mechanism is worth building, nothing more.
Per cell the JSON row holds: DPM at epsilon ("full"), DPM at (1 - share) epsilon without the merge
("cut") and the same run merged ("merged"), ARI and k per key (``zoo.py``'s keys, seed 0).
``--cells`` takes zoo, table2, private (the zoo at n = 20,000 with private bounds) and focus (uniform,
sine and unbalanced at n = 100,000). ``--structure-share 0`` runs the merged runs without the "no structure" test
(:mod:`dpm_jax.structure`), whose 0.05 of epsilon the merge's share would replace.
Results: benchmarks/results/merge_probe.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
from typing import NamedTuple

import numpy as np

import dpm_jax
from dpm_jax.diagnostics.explain import _node_box
from dpm_jax.eval.datasets import ZOO, load_dataset
from dpm_jax.eval.zoo import labelled_scores, paper_delta
from zoo import cell_keys

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
BINS = 256  # the cell grid's half-bins per cell (2 max_splits_per_dim)
HALF_BINS = 12  # the merge window's half-bins on each side of the split (twice the split window's)
ZOO_SIZES = (5000, 100_000)
EPSILONS = (0.5, 1.0, 2.0)
TABLE2 = ("synth-10d", "synth-100d", "letters")
FOCUS = tuple((name, eps) for name in ("zoo-uniform", "zoo-sine", "zoo-unbalanced") for eps in EPSILONS)


class Settings(NamedTuple):
    share: float  # of epsilon, for the statistic (DPM runs at the rest)
    strict: float  # noise scales: a merge root's noisy S at least this
    lenient: float  # noise scales: an inner node with noisy S below minus this is clearly a valley
    gate: float  # noise scales: a merge root's expected full window (0: no gate)
    structure_share: float | None = None  # the merged runs' DPMConfig.structure_share (None: the default)
    block_share: float = 0.0  # a subtree merges if at most this share of its inner nodes is clearly a valley
    level_power: float = 1.0  # level l's part of the share is proportional to (l + 1) ** level_power


class Tree(NamedTuple):
    """The released tree as NumPy arrays, and each point's leaf (heap id)."""

    is_split: np.ndarray
    dim: np.ndarray
    position: np.ndarray
    depth: int
    point_leaf: np.ndarray
    point_level: np.ndarray  # the level of each point's leaf


def tree_of(result) -> Tree:
    point_leaf = np.asarray(result.leaf_node)[np.asarray(result.labels_nonprivate)]
    t = result.tree
    return Tree(
        np.asarray(t.is_split),
        np.asarray(t.split_dim),
        np.asarray(t.split_position, np.float64),
        int(result.depth),
        point_leaf,
        np.floor(np.log2(point_leaf)).astype(int),
    )


def split_nodes(tree: Tree) -> list[int]:
    """The heap ids of the split nodes, breadth first (every child after its parent)."""
    out, queue = [], [1]
    while queue:
        v = queue.pop(0)
        if v < len(tree.is_split) and tree.is_split[v]:
            out.append(v)
            queue += [2 * v, 2 * v + 1]
    return out


def members(tree: Tree, v: int) -> np.ndarray:
    """(n,) bool: the points in node v's subtree."""
    level = int(np.log2(v))
    return (tree.point_level >= level) & ((tree.point_leaf >> np.maximum(tree.point_level - level, 0)) == v)


def valley_statistic(values: np.ndarray, lo: float, hi: float, split: float) -> tuple[int, int]:
    """(W, min(L, R)) of the node's coordinates ``values`` in the split's dimension (module docstring)."""
    half_width = (hi - lo) * HALF_BINS / BINS
    window = int(np.sum(np.abs(values - split) < half_width))
    counts = np.histogram(values, bins=BINS, range=(lo, hi))[0]
    windows = np.convolve(counts, np.ones(2 * HALF_BINS, int), mode="valid")
    centres = lo + (np.arange(len(windows)) + HALF_BINS) * (hi - lo) / BINS
    left, right = windows[centres <= split - half_width], windows[centres >= split + half_width]
    peak = min(left.max() if left.size else 0, right.max() if right.size else 0)
    return window, int(peak)


def merged_groups(tree: Tree, points: np.ndarray, lower, upper, epsilon: float, settings: Settings, rng) -> np.ndarray:
    """(n,) group id per point: its leaf, or the heap id of the merged subtree holding it."""
    weights = np.arange(1, tree.depth + 1, dtype=float) ** settings.level_power
    noisy, gated, nodes = {}, set(), split_nodes(tree)
    for v in nodes:
        lo, hi = _node_box(v, tree.dim, tree.position, lower, upper)
        inside = members(tree, v)
        j = tree.dim[v]
        window, peak = valley_statistic(points[inside, j], lo[j], hi[j], tree.position[v])
        scale = 3.0 / (epsilon * settings.share * weights[int(np.log2(v))] / weights.sum())
        noisy[v] = (2 * window - peak + rng.laplace(0.0, scale)) / scale
        if settings.gate and inside.sum() * (2 * HALF_BINS / BINS) / scale < settings.gate:
            gated.add(v)
    inner, valleys = {}, {}  # per subtree: its inner nodes, and those clearly a valley
    for v in reversed(nodes):
        inner[v] = 1 + sum(inner.get(c, 0) for c in (2 * v, 2 * v + 1))
        valleys[v] = (noisy[v] < -settings.lenient) + sum(valleys.get(c, 0) for c in (2 * v, 2 * v + 1))
    group = tree.point_leaf.copy()
    for v in nodes:  # breadth first: the highest merge root wins
        clear = valleys[v] <= settings.block_share * inner[v]
        if v not in gated and noisy[v] >= settings.strict and clear:
            inside = members(tree, v) & (group == tree.point_leaf)
            group[inside] = v
    return group


def score(data, points: np.ndarray, group: np.ndarray) -> tuple[float, int]:
    ids, label = np.unique(group, return_inverse=True)
    centres = np.stack([points[label == g].mean(0) for g in range(len(ids))])
    num_classes = int(np.max(data.labels)) + 1
    return labelled_scores(data.points, data.labels, centres, np.ones(len(ids), bool), num_classes)["ari"], len(ids)


def probe_cell(name: str, n: int | None, epsilon: float, runs: int, settings: Settings, private: bool) -> dict:
    data = load_dataset(name, n=n) if name in ZOO else load_dataset(name)
    n = len(data.points)
    bounds = "private" if private else data.bounds
    rng = np.random.default_rng(0)
    out = {"full": [], "cut": [], "merged": []}
    config = dpm_jax.DPMConfig()
    if settings.structure_share is not None:
        config = dpm_jax.DPMConfig(structure_share=settings.structure_share)
    for key in cell_keys(0, name, n, epsilon, runs):
        full = dpm_jax.cluster(key, data.points, dpm_jax.Budget(epsilon=epsilon, delta=paper_delta(n)), bounds)
        cut_budget = dpm_jax.Budget(epsilon=epsilon * (1 - settings.share), delta=paper_delta(n))
        cut = dpm_jax.cluster(key, data.points, cut_budget, bounds, config=config)
        lower, upper = (np.asarray(a, np.float64) for a in cut.bounds)
        points = np.clip(np.asarray(data.points, np.float64), lower, upper)
        tree = tree_of(cut)
        out["full"].append(score(data, points, tree_of(full).point_leaf))
        out["cut"].append(score(data, points, tree.point_leaf))
        out["merged"].append(score(data, points, merged_groups(tree, points, lower, upper, epsilon, settings, rng)))
    row = dict(
        dataset=name, n=n, epsilon=epsilon, bounds="private" if private else "known", settings=settings._asdict()
    )
    for part, scores in out.items():
        row[part] = dict(
            ari=[a for a, _ in scores], k=[k for _, k in scores], median_ari=statistics.median(a for a, _ in scores)
        )
    return row


def cells(names: str):
    for group in names.split(","):
        if group == "zoo":
            yield from ((name, n, eps, False) for name in ZOO for n in ZOO_SIZES for eps in EPSILONS)
        elif group == "table2":
            yield from ((name, None, 1.0, False) for name in TABLE2)
        elif group == "focus":  # the cells the level weights move (stop 43)
            yield from ((name, 100_000, eps, False) for name, eps in FOCUS)
        elif group == "private":  # issue 24's cells: the default private bounds at n = 20,000
            yield from ((name, 20_000, 1.0, True) for name in ZOO)


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Merge probe (benchmarks/merge_probe.py; NOT private: exact statistics, continuous noise, exact centroids)",
        "",
        "| tag | data | n | epsilon | bounds | full ARI (median k) | cut ARI (k) | merged ARI (k) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cols = [f"{r[p]['median_ari']:.3f} ({statistics.median(r[p]['k']):g})" for p in ("full", "cut", "merged")]
        lines.append(
            f"| {r['tag']} | {r['dataset']} | {r['n']:,} | {r['epsilon']} | {r['bounds']} | " + " | ".join(cols) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="zoo,table2")
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--strict", type=float, default=4.0)
    parser.add_argument("--lenient", type=float, default=2.0)
    parser.add_argument("--gate", type=float, default=2.5)
    parser.add_argument("--structure-share", type=float, default=None, help="the merged runs' structure_share")
    parser.add_argument("--block-share", type=float, default=0.0, help="share of valleys a merged subtree may hold")
    parser.add_argument("--level-power", type=float, default=1.0, help="level l's share ~ (l + 1) ** this")
    parser.add_argument("--tag", default="default")
    args = parser.parse_args(argv)
    settings = Settings(
        args.share, args.strict, args.lenient, args.gate, args.structure_share, args.block_share, args.level_power
    )
    out_path = RESULTS / "merge_probe.json"
    rows = [r for r in (json.loads(out_path.read_text()) if out_path.exists() else []) if r["tag"] != args.tag]
    for name, n, epsilon, private in cells(args.cells):
        row = dict(tag=args.tag, **probe_cell(name, n, epsilon, args.keys, settings, private))
        print(
            json.dumps(
                {k: v for k, v in row.items() if k not in ("full", "cut", "merged")}
                | {p: row[p]["median_ari"] for p in ("full", "cut", "merged")}
            ),
            flush=True,
        )
        rows.append(row)
        out_path.write_text(json.dumps(rows, indent=1))
        (RESULTS / "merge_probe.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
