"""The KD-tree paper's experiments with dpm_jax.synthesize: Figure 3 (a, b), Figure 4, App. G.3, speed.

    nice python benchmarks/synth_kdtree.py [--keys 5]
        [--only fig3,fig3_variants,box_config,refine_config,floor,fig4,g3,speed,capacity] [--methods grid,kdtree,...]

--methods reruns Figure 3 for those methods only and keeps the other methods' rows.

"Differentially Private Synthetic Data Using KD-Trees", Section 4 and App. G, against the
published results of Balog et al. (ICML 2018) in ../shared/data/balog (kernel
exp(-gamma ||x - y||^2), gamma = 1 / (100 sqrt(D))^2, RKHS distance of the weighted set).
Figure 3 measures each release twice: the weighted cell centres (point masses), and the
mixture of uniform distributions on the released boxes with the same weights, which is
what SynthResult.sample draws from (dpm_jax.eval.mmd.rkhs_distance_boxes).

Neighbours: Balog et al. use replace-one; dpm_jax uses add/remove-one. A replace-one
neighbour is two add/remove steps, so an (e/2, d')-DP add/remove mechanism is
(e, d' (1 + e^(e/2)))-DP under replace-one: every run here uses Budget(e / 2,
1e-6 / (1 + e^(e/2))) to compare at Balog's (e, 1e-6) replace-one.

Public bounds: [-1000, 1200] in every coordinate (the mixtures' means are drawn from
N(100, 200^2): +-5.5 sd of the means' law), never the data's min and max.
Results: benchmarks/results/synth_kdtree.{json,md,png}; medians over --keys keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import time

import jax
import numpy as np

from dpm_jax.budget import Budget
from dpm_jax.eval.mmd import balog_gamma, kernel_mean, rkhs_distance, rkhs_distance_boxes
from dpm_jax.synth.api import synthesize
from dpm_jax.synth.plan import SynthConfig, plan_synthesis

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "balog"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
BALOG_BOUNDS = (-1000.0, 1200.0)
EPSILONS = (0.01, 0.1, 1.0)


def replace_one_budget(epsilon: float, delta: float = 1e-6) -> Budget:
    """The add/remove budget that is (epsilon, delta)-DP under replace-one (module docstring)."""
    return Budget(epsilon / 2, delta / (1.0 + math.exp(epsilon / 2)))


def runs(X, budget, bounds, method, config, num_keys, seed=0, boxes=False):
    """The weighted sets of ``num_keys`` runs (vmap over keys, one compilation): (centers,
    weights, valid), and the boxes (lower, upper) after them when ``boxes``."""
    keys = jax.random.split(jax.random.key(seed), num_keys)
    # The experiments' sizes are public (Balog et al.'s replace-one relation keeps n fixed and known):
    # stated as the capacity the thresholds are computed from (SynthConfig.max_rows).
    config = dataclasses.replace(config, max_rows=len(X))
    one = lambda k, x: synthesize(k, x, budget, bounds, method=method, config=config)  # noqa: E731
    out = jax.jit(jax.vmap(one, in_axes=(0, None)))(keys, X)  # X an argument: no constant folding of it
    fields = ("centers", "weights", "valid", "lower", "upper")[: 5 if boxes else 3]
    return [tuple(np.asarray(getattr(out, f)[i]) for f in fields) for i in range(num_keys)]


def distances(X, sets, gamma, kxx, measure="centres"):
    """RKHS distance per run; an empty release is the zero embedding: sqrt(kxx).

    measure "centres": a point mass at every released cell's centre (DPM's own centres for
    "dpm"), weighted by the noisy counts; "boxes": the mixture of uniform distributions on
    the released boxes with those weights, the law SynthResult.sample draws from.
    """
    out = []
    for centers, weights, valid, *box in sets:
        live = valid & (weights > 0)
        if not live.any():
            out.append(math.sqrt(kxx))
        elif measure == "boxes":
            lower, upper = box
            out.append(rkhs_distance_boxes(X, lower[live], upper[live], weights[live], gamma, kxx))
        else:
            out.append(rkhs_distance(X, centers[live], weights[live], gamma, kxx))
    return out


def evaluate(X, kxx, gamma, epsilon, method, bounds, num_keys, config=SynthConfig(), delta=1e-6, boxes=False, seed=0):
    """One configuration's runs; ``boxes``: the box-uniform measure too, on the same releases."""
    start = time.perf_counter()
    sets = runs(X, replace_one_budget(epsilon, delta), bounds, method, config, num_keys, seed=seed, boxes=boxes)
    seconds = time.perf_counter() - start
    dist = distances(X, sets, gamma, kxx)
    cells = [int((v & (w > 0)).sum()) for _, w, v, *_ in sets]
    row = dict(
        epsilon=epsilon,
        method=method,
        config=repr(config),
        median=float(np.median(dist)),
        distances=dist,
        median_cells=float(np.median(cells)),
        seconds_all_keys=round(seconds, 2),
    )
    if boxes:
        dist_boxes = distances(X, sets, gamma, kxx, measure="boxes")
        row.update(median_boxes=float(np.median(dist_boxes)), distances_boxes=dist_boxes)
    if seed:
        row.update(seed=seed)
    return row


def balog(d: int) -> dict:
    alg1 = json.loads((DATA / f"D{d}_alg1_random_M10000.json").read_text())
    alg2 = json.loads((DATA / f"D{d}_alg2_random_M10000.json").read_text())
    return dict(
        alg1=[min(row) for row in alg1["dists_alg1"]],
        alg2_best=[min(row) for row in alg2["dists_alg2"]],
        alg2_M=alg2["M"],
    )


FIG3_METHODS = ("grid", "kdtree", "privtree", "refine", "dpm")


def figure3(num_keys: int, methods=FIG3_METHODS) -> list[dict]:
    rows = []
    for d in (2, 5):
        X, kxx = _balog_data(d)
        for method in methods:
            for epsilon in EPSILONS:
                row = evaluate(X, kxx, balog_gamma(d), epsilon, method, BALOG_BOUNDS, num_keys, boxes=True)
                row.update(figure="3a" if d == 2 else "3b", d=d)
                print(json.dumps({k: v for k, v in row.items() if not k.startswith("distances")}), flush=True)
                rows.append(row)
    return rows


PRIVTREE_VARIANTS = (SynthConfig(cells_per_axis=4.0),)  # a coarser forced level below the tree


def figure3_variants(num_keys: int) -> list[dict]:
    """Figure 3b (d = 5) for PrivTree configurations other than the default."""
    X, kxx = _balog_data(5)
    rows = []
    for config in PRIVTREE_VARIANTS:
        for epsilon in EPSILONS:
            row = evaluate(X, kxx, balog_gamma(5), epsilon, "privtree", BALOG_BOUNDS, num_keys, config=config)
            row.update(figure="3b", d=5)
            print(json.dumps({k: v for k, v in row.items() if k != "distances"}), flush=True)
            rows.append(row)
    return rows


TUNING_SEED = 100  # keys jax.random.split(key(100), n): never the test keys (seed 0)
BOX_CANDIDATES = tuple(SynthConfig(cells_per_axis=c) for c in (4.0, 5.5, 7.0, 10.0, 14.0)) + tuple(
    SynthConfig(tree_share=share) for share in (0.15, 0.5)
)


def box_config(num_keys: int) -> list[dict]:
    """Is the default SynthConfig still the right one under the box measure at epsilon 0.1 (d = 5)?

    Every candidate of BOX_CANDIDATES (tree_share only for the trees) is scored by its median
    box-measure distance on the tuning keys (TUNING_SEED); each method's best is then run on
    the test keys (seed 0, Figure 3's) at every epsilon, both measures.
    """
    X, kxx = _balog_data(5)
    rows = []
    for method in ("grid", "kdtree", "privtree"):
        tuned = []
        for config in BOX_CANDIDATES:
            if method == "grid" and config.tree_share != SynthConfig().tree_share:
                continue  # the grid has no tree
            row = evaluate(
                X, kxx, balog_gamma(5), 0.1, method, BALOG_BOUNDS, num_keys, config, boxes=True, seed=TUNING_SEED
            )
            row.update(part="tuning", d=5)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("distances")}), flush=True)
            tuned.append((row["median_boxes"], config))
            rows.append(row)
        best = min(tuned, key=lambda t: t[0])[1]
        for epsilon in EPSILONS:
            row = evaluate(X, kxx, balog_gamma(5), epsilon, method, BALOG_BOUNDS, num_keys, best, boxes=True)
            row.update(part="test", d=5)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("distances")}), flush=True)
            rows.append(row)
    return rows


REFINE_CANDIDATES = tuple(SynthConfig(cells_per_axis=c) for c in (8.0, 10.0, 12.0)) + tuple(
    SynthConfig(cells_per_axis=10.0, coarse_share=share) for share in (0.5, 0.7)
)


def refine_config(num_keys: int) -> list[dict]:
    """The default of "refine" (c of its children's depth, the coarse grid's share of the leaf
    epsilon), chosen at epsilon 0.1, d = 5 on the tuning keys (TUNING_SEED, not Figure 3's):
    every candidate of REFINE_CANDIDATES scored by its median box-measure distance (both
    measures reported). Figure 3 (``--only fig3``) then measures the default on the test keys."""
    X, kxx = _balog_data(5)
    rows = []
    for config in REFINE_CANDIDATES:
        row = evaluate(
            X, kxx, balog_gamma(5), 0.1, "refine", BALOG_BOUNDS, num_keys, config, boxes=True, seed=TUNING_SEED
        )
        row.update(part="tuning", d=5)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("distances")}), flush=True)
        rows.append(row)
    return rows


def _balog_data(d: int):
    """Balog et al.'s mixture in d dimensions and its kernel mean (their file)."""
    X = np.load(DATA / f"mixture_of_Gaussians_N100000_D{d}.npz")["X_private"]
    meta = json.loads((DATA / f"mixture_of_Gaussians_N100000_D{d}.json").read_text())
    return X, next(v for k, v in meta.items() if k.startswith("kernel_mean"))


def _true_counts(X, lower, upper):
    """The data's count in every box (half-open, [lower, upper)): NOT private, a diagnostic."""
    counts = np.zeros(len(lower))
    for r0 in range(0, len(X), 4096):
        inside = np.all((X[r0 : r0 + 4096, None] >= lower[None]) & (X[r0 : r0 + 4096, None] < upper[None]), -1)
        counts += inside.sum(0)
    return counts


def floor(num_keys: int) -> list[dict]:
    """Where the epsilon-0.1, d = 5 distance is lost (NOT private: reads the data's counts).

    For Figure 3b's releases at epsilon 0.1 (same keys): the released cells with the data's
    true counts instead of the noisy ones (the weights' noise), and, for the grid, every
    non-empty cell of the released resolution with its true count, kept when the count is
    at least 1 / 100 / 400 (what the leaf threshold costs when no noise is left).
    Both measures; medians over the keys.
    """
    X, kxx = _balog_data(5)
    gamma = balog_gamma(5)
    rows = []
    measured = {}  # the all-cells variants depend on the resolution only: one evaluation each

    def measure(key, c, lo, hi, w):
        if key not in measured:
            d_boxes = rkhs_distance_boxes(X, lo, hi, w, gamma, kxx)
            measured[key] = (rkhs_distance(X, c, w, gamma, kxx), d_boxes, len(w), float(np.sum(w)) / len(X))
        return measured[key]

    for method in ("grid", "privtree"):
        sets = runs(X, replace_one_budget(0.1), BALOG_BOUNDS, method, SynthConfig(), num_keys, boxes=True)
        variants = {}
        for centers, weights, valid, lower, upper in sets:
            live = valid & (weights > 0)
            centers, lower, upper = centers[live], lower[live], upper[live]
            true = _true_counts(X, lower, upper)
            kept = true > 0
            found = [("released cells, true counts", None, centers[kept], lower[kept], upper[kept], true[kept])]
            if method == "grid":  # one cell size: the released resolution
                edge = upper[0] - lower[0]
                cells, counts = np.unique(np.floor((X - BALOG_BOUNDS[0]) / edge), axis=0, return_counts=True)
                low = BALOG_BOUNDS[0] + cells * edge
                for least in (1, 100, 400):
                    k = counts >= least
                    name = f"all cells, true counts >= {least}"
                    found.append((name, (name, *edge), low[k] + edge / 2, low[k], low[k] + edge, counts[k]))
            for name, key, c, lo, hi, w in found:
                entry = variants.setdefault(name, dict(centres=[], boxes=[], cells=[], covered=[]))
                for k, value in zip(entry, measure(key or object(), c, lo, hi, w)):
                    entry[k].append(value)
        for name, entry in variants.items():
            row = dict(method=method, epsilon=0.1, d=5, variant=name, distances=entry)
            row.update({f"median_{k}": float(np.median(v)) for k, v in entry.items()})
            print(json.dumps({k: v for k, v in row.items() if k != "distances"}), flush=True)
            rows.append(row)
    return rows


def figure4(num_keys: int) -> list[dict]:
    """Algorithm 1 (grid) on 100,000 standard Gaussian points, distance against (eps n)^(-1/3).

    Kernel exp(-||x - y||^2 / (2 d)) (the paper does not state Figure 4's); bounds [-5, 5].
    """
    rows = []
    rng = np.random.default_rng(4)
    for d in (1, 2, 3):
        X = rng.standard_normal((100_000, d)).astype(np.float32)
        gamma = 1.0 / (2.0 * d)
        kxx = kernel_mean(X, gamma)
        for epsilon in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0):
            row = evaluate(X, kxx, gamma, epsilon, "grid", (-5.0, 5.0), num_keys)
            row.update(figure="4", d=d, rate=(epsilon * 100_000) ** (-1 / 3))
            print(json.dumps({k: v for k, v in row.items() if k != "distances"}), flush=True)
            rows.append(row)
    return rows


def mixture(n, d, sd, seed):
    """Balog et al.'s generator: 10 components, weights 1, 1/2, .., 1/10, means ~ N(100, 200^2 I)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, 11)
    means = rng.normal(100.0, 200.0, (10, d))
    component = rng.choice(10, size=n, p=weights / weights.sum())
    return (means[component] + rng.normal(0.0, sd, (n, d))).astype(np.float32)


def g3(num_keys: int) -> list[dict]:
    """App. G.3: d = 10 mixtures with component sd 3 against sd 30 (n = 20,000: the exact
    data term costs n^2 kernel values on this machine)."""
    rows = []
    for sd in (3.0, 30.0):
        X = mixture(20_000, 10, sd, seed=10)
        gamma = balog_gamma(10)
        kxx = kernel_mean(X, gamma)
        for method in ("grid", "kdtree", "dpm"):
            for epsilon in (0.1, 1.0):
                row = evaluate(X, kxx, gamma, epsilon, method, BALOG_BOUNDS, num_keys)
                row.update(figure="G.3", d=10, sd=sd)
                print(json.dumps({k: v for k, v in row.items() if k != "distances"}), flush=True)
                rows.append(row)
    return rows


def _first_and_warm(run, X, repeats: int) -> tuple[float, float]:
    """Wall time of ``run``'s first call (key 0, compiling) and the median of ``repeats`` warm calls."""
    start = time.perf_counter()
    jax.block_until_ready(run(jax.random.key(0), X))
    first = time.perf_counter() - start
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(r + 1), X))
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def speed(repeats: int = 3) -> list[dict]:
    """Warm wall time of synthesize (median of ``repeats``), 100k x 10 and 1M x 10, eps = 1."""
    rows = []
    for n in (100_000, 1_000_000):
        X = mixture(n, 10, 30.0, seed=1)
        for method in ("grid", "kdtree", "privtree", "refine"):
            run = jax.jit(lambda k, x: synthesize(k, x, Budget(1.0, 1e-6), BALOG_BOUNDS, method=method))
            first, warm = _first_and_warm(run, X, repeats)
            rows.append(dict(n=n, d=10, method=method, first_call=round(first, 2), warm_median=warm))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def capacity(repeats: int = 3) -> list[dict]:
    """Warm wall time at small d, the default max_rows against a stated 2**17: the leaves' implicit
    empty-cell draws are sized for the worst case of max_rows rows (capacity below), whatever X holds."""
    rows = []
    budget, stated = Budget(1.0, 1e-6), SynthConfig(max_rows=2**17)
    for d in (2, 5):
        for n in (200, 100_000):
            X = np.random.default_rng(0).uniform(0.0, 16.0, (n, d)).astype(np.float32)
            for method in ("grid", "kdtree", "privtree", "refine"):
                for config in (SynthConfig(), stated):
                    run = jax.jit(lambda k, x: synthesize(k, x, budget, (0.0, 16.0), method=method, config=config))
                    _, warm = _first_and_warm(run, X, repeats)
                    leaves = plan_synthesis(budget, config, method, d).leaves
                    rows.append(
                        dict(
                            n=n,
                            d=d,
                            method=method,
                            max_rows=config.max_rows,
                            leaf_capacity=leaves.capacity,
                            warm_median=warm,
                        )
                    )
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def table(results: dict) -> str:
    """Markdown tables of the medians, Balog et al.'s numbers beside them."""
    lines = [
        f"Machine: {results.get('machine', '?')}. RKHS distance, median over the keys (lower is better).",
        "",
        "Figure 3, two measures of the same releases: *centres*, a point mass at each released cell's",
        "centre (DPM's own centres for dpm), weighted by the noisy counts; *boxes*, the mixture of",
        "uniform distributions on the released boxes with those weights, which is the law",
        "`SynthResult.sample` draws from (rkhs_distance_boxes, exact).",
        "",
    ]
    for figure, d in (("3a", 2), ("3b", 5)):
        ref = results["balog"][f"d{d}"]
        lines += [f"### Figure {figure} (d = {d}, n = 100,000, replace-one (epsilon, 1e-6))", ""]
        lines += ["| method | " + " | ".join(f"eps {e}" for e in EPSILONS) + " |", "|---" * 4 + "|"]
        for method in FIG3_METHODS:
            rows = [r for r in results.get("fig3", []) if r["d"] == d and r["method"] == method]
            cells = [f"{r['median']:.4g} ({r['median_cells']:.0f} cells)" for r in rows]
            lines.append(f"| dpm_jax {method}, centres | " + " | ".join(cells) + " |")
            if rows and all("median_boxes" in r for r in rows):
                lines.append(
                    f"| dpm_jax {method}, boxes | " + " | ".join(f"{r['median_boxes']:.4g}" for r in rows) + " |"
                )
        lines.append(
            "| Balog Alg. 1 (best over public-set sizes) | " + " | ".join(f"{v:.4g}" for v in ref["alg1"]) + " |"
        )
        lines.append(
            f"| Balog Alg. 2 (best over M <= {ref['alg2_M']}) | "
            + " | ".join(f"{v:.4g}" for v in ref["alg2_best"])
            + " |"
        )
        lines.append("")
    if "box_config" in results:
        lines += [
            "### Figure 3b under the box measure: the configuration chosen at epsilon 0.1 on other keys",
            "",
            f"Tuning: median box-measure distance at epsilon 0.1 over keys split from key({TUNING_SEED});"
            " test: the chosen configuration on Figure 3's keys (key(0)), both measures.",
            "",
            "| part | method | config | epsilon | centres | boxes | cells |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results["box_config"]:
            config = r["config"].replace("SynthConfig(levels=None, decisions=None, ", "(")
            lines.append(
                f"| {r['part']} | {r['method']} | {config} | {r['epsilon']} | {r['median']:.4g} |"
                f" {r['median_boxes']:.4g} | {r['median_cells']:.0f} |"
            )
        lines.append("")
    if "refine_config" in results:
        lines += [
            "### refine: its default chosen at epsilon 0.1, d = 5 on other keys",
            "",
            f"Median distances over keys split from key({TUNING_SEED}) (not Figure 3's); chosen by the boxes column.",
            "",
            "| cells_per_axis | coarse_share | centres | boxes | cells |",
            "|---|---|---|---|---|",
        ]
        for r in results["refine_config"]:
            config = eval(r["config"], {"SynthConfig": SynthConfig})  # noqa: S307 (our own repr)
            lines.append(
                f"| {config.cells_per_axis} | {config.coarse_share} | {r['median']:.4g} | {r['median_boxes']:.4g} |"
                f" {r['median_cells']:.0f} |"
            )
        lines.append("")
    if "floor" in results:
        lines += [
            "### Figure 3b at epsilon 0.1: where the distance goes (NOT private: true counts)",
            "",
            "Figure 3's releases (same keys); the released cells re-weighted by the data's true counts; for the"
            " grid, every non-empty cell of the released resolution with its true count, kept above a count."
            " covered: the share of the data in the kept cells.",
            "",
            "| method | variant | centres | boxes | cells | covered |",
            "|---|---|---|---|---|---|",
        ]
        for r in results["floor"]:
            lines.append(
                f"| {r['method']} | {r['variant']} | {r['median_centres']:.4g} | {r['median_boxes']:.4g} |"
                f" {r['median_cells']:.0f} | {r['median_covered']:.3f} |"
            )
        lines.append("")
    if "fig3_variants" in results:
        lines += [
            "### Figure 3b, PrivTree variants (d = 5)",
            "",
            "| config | epsilon | median | cells |",
            "|---|---|---|---|",
        ]
        for r in results["fig3_variants"]:
            lines.append(f"| {r['config']} | {r['epsilon']} | {r['median']:.4g} | {r['median_cells']:.0f} |")
        lines.append("")
    for name, title, key in (
        ("fig4", "Figure 4: grid on 100,000 N(0, I_d) points", "d"),
        ("g3", "App. G.3: d = 10 mixtures, n = 20,000", "sd"),
    ):
        if name not in results:
            continue
        lines += [
            f"### {title}",
            "",
            f"| {key} | method | epsilon | median distance | cells |",
            "|---|---|---|---|---|",
        ]
        for r in results[name]:
            lines.append(f"| {r[key]} | {r['method']} | {r['epsilon']} | {r['median']:.4g} | {r['median_cells']:.0f} |")
        lines.append("")
    if "speed" in results:
        lines += [
            "### Speed (eps = 1, d = 10)",
            "",
            "| n | method | first call s | warm median s |",
            "|---|---|---|---|",
        ]
        for r in results["speed"]:
            lines.append(f"| {r['n']:,} | {r['method']} | {r['first_call']} | {r['warm_median']:.3f} |")
    if "capacity" in results:
        lines += [
            "",
            "### Speed at small d: the default max_rows (2**24) against a stated 2**17 (eps = 1, uniform data)",
            "",
            "| d | n | method | max_rows | leaves' empty-cell capacity | warm median s |",
            "|---|---|---|---|---|---|",
        ]
        for r in results["capacity"]:
            lines.append(
                f"| {r['d']} | {r['n']:,} | {r['method']} | {r['max_rows']:,} | {r['leaf_capacity']:,} | "
                f"{r['warm_median']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for d in (1, 2, 3):
        rows = [r for r in results.get("fig4", []) if r["d"] == d]
        if rows:
            axes[0].loglog([r["rate"] for r in rows], [r["median"] for r in rows], "o-", label=f"d = {d}")
    axes[0].set(xlabel="(epsilon n)^(-1/3)", ylabel="RKHS distance (median)", title="Figure 4: grid, N(0, I_d)")
    axes[0].legend()
    for d, marker in ((2, "o"), (5, "s")):
        for method in FIG3_METHODS:
            rows = [r for r in results.get("fig3", []) if r["d"] == d and r["method"] == method]
            colour = f"C{FIG3_METHODS.index(method)}"  # one colour per method, both measures
            if rows:
                eps = [r["epsilon"] for r in rows]
                axes[1].loglog(eps, [r["median"] for r in rows], marker + "-", color=colour, label=f"{method} d={d}")
            if rows and all("median_boxes" in r for r in rows):
                boxes = [r["median_boxes"] for r in rows]
                axes[1].loglog(eps, boxes, marker + ":", color=colour, mfc="none", label=f"{method} d={d} boxes")
        axes[1].loglog(EPSILONS, results["balog"][f"d{d}"]["alg2_best"], marker + "--k", label=f"Balog Alg 2 d={d}")
    axes[1].set(
        xlabel="epsilon (replace-one)",
        ylabel="RKHS distance (median)",
        title="Figure 3: centres (solid), boxes (dotted, open)",
    )
    axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(RESULTS / "synth_kdtree.png", dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--only", default="fig3,fig4,g3,speed")
    parser.add_argument("--methods", default=",".join(FIG3_METHODS), help="Figure 3's methods to rerun")
    args = parser.parse_args(argv)
    out_path = RESULTS / "synth_kdtree.json"
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    parts = dict(
        fig3=figure3,
        fig3_variants=figure3_variants,
        box_config=box_config,
        refine_config=refine_config,
        floor=floor,
        fig4=figure4,
        g3=g3,
    )
    methods = tuple(args.methods.split(","))
    for name in args.only.split(","):
        if name == "fig3":  # the rerun methods' rows replace theirs; the others' stay
            kept = [r for r in results.get("fig3", []) if r["method"] not in methods]
            fresh = figure3(args.keys, methods)
            results[name] = sorted(kept + fresh, key=lambda r: (r["d"], FIG3_METHODS.index(r["method"]), r["epsilon"]))
        else:
            results[name] = speed() if name == "speed" else capacity() if name == "capacity" else parts[name](args.keys)
        results["balog"] = dict(d2=balog(2), d5=balog(5))
        results["machine"] = "shared 2-core CPU (about six engineers' jobs), JAX CPU"
        out_path.write_text(json.dumps(results, indent=1))
        (RESULTS / "synth_kdtree.md").write_text(table(results))
        plot(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
