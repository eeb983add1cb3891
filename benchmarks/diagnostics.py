"""dpm_jax.diagnostics against measured DPM runs.

    nice python benchmarks/diagnostics.py --out benchmarks/results/diagnostics.json [--sections a,b]

Sections (each replaces its own key in an existing --out file, so one can be re-run alone):

* ``depth``: does :func:`dpm_jax.diagnostics.recommended_tau_r` match the depth that
  clusters best? For data sets where the right answer is known (the notebook's 16
  blobs of 20,000 points in 2-D, Synth-10d-like data at n = 20,000 and 100,000, UCI
  Letters with its 26 classes) it runs ``cluster`` at several tau_r over fixed keys
  and reports the median adjusted Rand index and k beside the plan's useful depth,
  and the same for ``tau_r="auto"`` (the depth chosen from a noisy count,
  dpm_jax.depth). Results under the key ``cases``.
* ``theory``: the e_c table and Equation 21's alpha edge (theory paper, Section 2.2.2).
* ``single_gaussian``: one N(0, 10**2 I) cluster of 100,000 points in 10-D at alpha
  1, 2, 5, 10: measured median log2 k against the predicted halting depth.
* ``uniform``: uniform data (no clusters): measured leaves, and the plan's flag.
* ``sweep``: 64 blobs in 10-D at n = 20,000 and 100,000 over a sweep of n * epsilon:
  measured median k against the separation model's E(64) and min_n_epsilon(64)
  (the figure of docs/diagnostics.md, ``--figure``).
* ``theorem``: the corrected Theorem 2.9 bound against the Monte-Carlo rate at which
  every node has halted by depth j over vmapped runs (``--mc-keys``, >= 200).
* ``warning_cost``: what the budget warning adds to a warm ``cluster`` call (it reads
  the released n~ back to the host and plans at it): warm calls with and without the
  check, interleaved in one process, medians.

Runs of one setting are ``jax.vmap``-ed over keys 0..keys-1; medians are reported.
``--split-grid`` picks the grid of the measured runs: ``paper`` (the theory paper's
subject, Algorithm 2's beta; the default here) or ``cell`` (dpm_jax's default); the
cell grid's results go under ``<section>_cell``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import jax
import numpy as np
from sklearn.metrics import adjusted_rand_score

import dpm_jax
from dpm_jax import diagnostics
from dpm_jax.depth import exponent_scale
from dpm_jax.budget import allocate
from dpm_jax.diagnostics import theory
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
    budget = dpm_jax.Budget(epsilon, n**-1.5)
    plan = diagnostics.plan(n, d, budget)
    rows = []
    for tau_r in [*depths, "auto"]:
        config = dpm_jax.DPMConfig(tau_r=tau_r)
        aris, ks = [], []
        for k in range(keys):
            result = dpm_jax.cluster(jax.random.key(k), data.points, budget, bounds=data.bounds, config=config)
            labels = np.asarray(assign_to_centers(data.points, result.centers, result.valid).labels)
            aris.append(adjusted_rand_score(data.labels, labels))
            ks.append(int(result.k))
        useful = None if tau_r == "auto" else diagnostics.plan(n, d, budget, config).useful_depth
        rows.append(
            dict(
                tau_r=tau_r,
                ari_median=float(np.median(aris)),
                k_median=float(np.median(ks)),
                ari=aris,
                k=ks,
                plan_useful_depth=useful,
            )
        )
    return dict(
        n=n,
        d=d,
        blobs=blobs,
        epsilon=epsilon,
        default_plan_useful_depth=plan.useful_depth,
        recommended_tau_r=diagnostics.recommended_tau_r(n, d, budget),
        depths=rows,
    )


def depth_section(args) -> dict:
    depths = [int(x) for x in args.depths.split(",")]
    cases = {}
    for name, load in CASES.items():
        case = run_case(load(), args.epsilon, depths, args.keys)
        cases[name] = case
        best = max((row for row in case["depths"] if row["tau_r"] != "auto"), key=lambda row: row["ari_median"])
        print(
            f"{name}: plan's useful depth (tau_r = 7 budget) {case['default_plan_useful_depth']}, "
            f"recommended tau_r {case['recommended_tau_r']}; best tau_r by median ARI {best['tau_r']}",
            flush=True,
        )
        for row in case["depths"]:
            print(
                f"   tau_r={row['tau_r']}: median ARI {row['ari_median']:.3f}, median k {row['k_median']:.0f}, "
                f"plan's useful depth at this tau_r {row['plan_useful_depth']}",
                flush=True,
            )
    return dict(keys=args.keys, cases=cases)


def vmapped_runs(points, budget, bounds, config, keys):
    """``cluster`` under jax.vmap over keys 0..keys-1 (one compiled program per setting)."""
    run = jax.vmap(lambda key: dpm_jax.cluster(key, points, budget, bounds=bounds, config=config))
    return run(jax.random.split(jax.random.key(0), keys))


def theory_section(args) -> dict:
    table = theory.central_emptiness_table(7)
    edge = (1 - 2 / 128) / (1 - table[0])
    print(
        "e_c(i), i = 0..6: " + " ".join(f"{e:.3f}" for e in table) + f"; halting at the root needs alpha > {edge:.3f}"
    )
    return dict(central_emptiness=table, alpha_edge_at_root=edge)


def gaussian_section(args) -> dict:
    n, d = 100_000, 10
    rng = np.random.default_rng(0)
    points = (10.0 * rng.standard_normal((n, d))).astype(np.float32)
    budget, rows = dpm_jax.Budget(1.0, n**-1.5), []
    for alpha in GAUSSIAN_ALPHAS[args.split_grid]:
        config = dpm_jax.DPMConfig(alpha=alpha, split_grid=args.split_grid)
        ks = np.asarray(vmapped_runs(points, budget, (-100.0, 100.0), config, args.keys).k).tolist()
        halting = diagnostics.plan(n, d, budget, config).single_cluster_halting()
        measured = float(np.log2(np.median(ks)))
        rows.append(
            dict(
                alpha=alpha,
                k=ks,
                k_median=float(np.median(ks)),
                log2_k_median=measured,
                predicted_depth=halting.depth,
                predicted_depth_one_dimension=halting.depth_one_dimension,
                within_one=abs(halting.depth - measured) <= 1,
            )
        )
        print(
            f"one Gaussian, alpha {alpha:g}: k {min(ks)}-{max(ks)} (median {np.median(ks):g}, log2 {measured:.2f}); "
            f"predicted depth {halting.depth} (one-dimension model {halting.depth_one_dimension})",
            flush=True,
        )
    return dict(n=n, d=d, keys=args.keys, rows=rows)


def uniform_section(args) -> dict:
    n, d = 100_000, 10
    points = np.random.default_rng(0).uniform(-100, 100, (n, d)).astype(np.float32)
    budget, config = dpm_jax.Budget(1.0, n**-1.5), dpm_jax.DPMConfig(split_grid=args.split_grid)
    ks = np.asarray(vmapped_runs(points, budget, (-100.0, 100.0), config, args.keys).k).tolist()
    flag = diagnostics.plan(n, d, budget, config).uniform_halting()
    print(
        f"uniform data: {min(ks)}-{max(ks)} leaves of {config.max_clusters} (median {np.median(ks):g}); "
        f"plan flags it: {flag.flagged} (on the boundary: {flag.on_boundary})",
        flush=True,
    )
    return dict(
        n=n,
        d=d,
        keys=args.keys,
        k=ks,
        k_median=float(np.median(ks)),
        flagged=flag.flagged,
        on_boundary=flag.on_boundary,
    )


SWEEP = (10_000, 20_000, 40_000, 50_000, 60_000, 100_000)
GAUSSIAN_ALPHAS = dict(paper=(1.0, 2.0, 5.0, 10.0), cell=(2.0, 5.0, 10.0, 20.0))


def sweep_section(args) -> dict:
    rows = []
    for n in (20_000, 100_000):
        data = synthetic_blobs(n, 10, num_blobs=64, seed=0)
        for n_epsilon in SWEEP:
            budget = dpm_jax.Budget(n_epsilon / n, n**-1.5)
            config = dpm_jax.DPMConfig(split_grid=args.split_grid)
            ks = np.asarray(vmapped_runs(data.points, budget, data.bounds, config, args.keys).k).tolist()
            plan = diagnostics.plan(n, 10, budget, config)
            rows.append(
                dict(
                    n=n,
                    n_epsilon=n_epsilon,
                    k=ks,
                    k_median=float(np.median(ks)),
                    predicted_k=plan.expected_clusters(64),
                    max_reliable_k=plan.max_reliable_k(),
                )
            )
            print(
                f"64 blobs, n {n:,}, n*epsilon {n_epsilon:,}: median k {np.median(ks):g} "
                f"[{min(ks)}, {max(ks)}], model E(64) {rows[-1]['predicted_k']:.1f}",
                flush=True,
            )
    config = dpm_jax.DPMConfig(split_grid=args.split_grid)
    curve = {
        n: [
            (ne, diagnostics.plan(n, 10, dpm_jax.Budget(ne / n, n**-1.5), config).expected_clusters(64))
            for ne in np.geomspace(5_000, 200_000, 25)
        ]
        for n in (20_000, 100_000)
    }
    needed = {
        n: diagnostics.plan(n, 10, dpm_jax.Budget(1.0, n**-1.5), config).min_n_epsilon(64) for n in (20_000, 100_000)
    }
    print("min_n_epsilon(64): " + ", ".join(f"n {n:,}: {v:,.0f}" for n, v in needed.items()), flush=True)
    return dict(
        keys=args.keys,
        rows=rows,
        model_curve={str(n): c for n, c in curve.items()},
        min_n_epsilon_64={str(n): v for n, v in needed.items()},
    )


def sweep_figure(sweep: dict, path: str, grid: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for (n, curve), colour in zip(sweep["model_curve"].items(), ("tab:blue", "tab:orange")):
        axes.plot(*zip(*curve), color=colour, label=f"model E(64), n = {int(n):,}")
        rows = [row for row in sweep["rows"] if row["n"] == int(n)]
        axes.plot(
            [r["n_epsilon"] for r in rows],
            [r["k_median"] for r in rows],
            "o",
            color=colour,
            label=f"measured median k, n = {int(n):,}",
        )
        axes.axvline(sweep["min_n_epsilon_64"][n], color=colour, linestyle=":", linewidth=1)
    axes.set_xscale("log")
    axes.set_xlabel("n * epsilon")
    axes.set_ylabel("clusters found (64 blobs)")
    axes.set_title(f"Predicted vs measured k, {grid} grid (dotted: min_n_epsilon(64))")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


THEOREM_LEVELS = 4  # levels 0..3: the bound for "every node halted by depth j", j <= 3


def node_summary(points, count, tau_e, beta, lower, upper, max_splits, config):
    """Lemma 2.4/2.7's summary of one node from its points (the benchmark may read data; diagnostics never do)."""
    centres, emptiness = [], []
    for dim in range(points.shape[1]):
        splits = min(math.ceil((upper - lower) / beta[dim] - 1e-6), max_splits)
        edges = lower + beta[dim] * np.arange(splits + 1)
        column = np.sort(points[:, dim])
        ranks = np.searchsorted(column, edges[:-1] + beta[dim] / 2)  # points strictly below the candidate
        inside = np.diff(np.searchsorted(column, edges))
        centres += [theory.centreness(max(min(r, count - r), 0.0) / count, config.t, config.q) for r in ranks]
        emptiness += list(1.0 - inside / count)
    c, e = np.array(centres), np.array(emptiness)
    threshold = theory.centreness(tau_e / count, config.t, config.q)
    halting, inner = c <= threshold, (c >= config.t) & (c > threshold)
    summary = theory.NodeSummary(
        int(halting.sum()),
        int((~halting & ~inner).sum()),
        int(inner.sum()),
        threshold,
        float(e.min()),
        float(e[inner].max()) if inner.any() else 0.0,
    )
    return summary, c, e


def theorem_section(args) -> dict:
    """Corrected Theorem 2.9 (Lemmas 2.4 and 2.7 per level, minimum over the nodes the runs reached) vs Monte Carlo."""
    n, d, alpha, lower, upper = 20_000, 2, 5.0, -100.0, 100.0
    points = (10.0 * np.random.default_rng(1).standard_normal((n, d))).astype(np.float32)
    budget, config = dpm_jax.Budget(1.0, n**-1.5), dpm_jax.DPMConfig(alpha=alpha, split_grid=args.split_grid)
    allocation = allocate(budget, config, d)
    runs = vmapped_runs(points, budget, (lower, upper), config, args.mc_keys)
    tree = jax.tree_util.tree_map(np.asarray, runs.tree)
    betas = np.asarray(runs.split_interval_size)
    halt = [[] for _ in range(THEOREM_LEVELS)]
    carry_on = [[] for _ in range(THEOREM_LEVELS)]
    exact = [[] for _ in range(THEOREM_LEVELS)]  # the exponential mechanism's own halting mass per node
    for run in range(args.mc_keys):
        node_of = np.ones(n, np.int64)
        tau_e = tree.noisy_count[run, 1] / 2**config.tau_r
        for level in range(THEOREM_LEVELS):
            for node in range(2**level, 2 ** (level + 1)):
                if not tree.reached[run, node]:
                    continue
                count = float(tree.noisy_count[run, node])
                scale = exponent_scale(allocation.split_epsilons[level], count, allocation.count_offsets[level], config)
                summary, c, e = node_summary(
                    points[node_of == node], count, tau_e, betas[run], lower, upper, config.max_splits_per_dim, config
                )
                halt[level].append(theory.halt_lower_bound(summary, scale, alpha, config.t))
                carry_on[level].append(theory.continue_lower_bound(summary, scale, alpha, config.t))
                f = c + alpha * e
                weights = np.exp(scale * (f - f.max()))
                exact[level].append(float(weights[c <= summary.threshold].sum() / weights.sum()))
            dims, positions = tree.split_dim[run, node_of], tree.split_position[run, node_of]
            go_right = points[np.arange(n), np.maximum(dims, 0)] >= positions
            node_of = np.where(tree.is_split[run, node_of], 2 * node_of + go_right, node_of)
    depth_of_run = np.array([int(np.flatnonzero(reached).max()).bit_length() - 1 for reached in tree.reached])
    worst_halt = [min(values) if values else 0.0 for values in halt]
    worst_carry = [min(values) if values else 0.0 for values in carry_on]
    # Informational: the same sum with each level's smallest exact halting mass (and 1 minus the largest) in
    # place of the Lemmas: DPM halts on noisy child counts, the mass counts candidates by exact rank.
    exact_halt = [min(values) if values else 0.0 for values in exact]
    exact_carry = [1.0 - max(values) if values else 0.0 for values in exact]
    rows = []
    for depth in range(THEOREM_LEVELS):
        rate = float(np.mean(depth_of_run <= depth))
        bound = theory.halting_bound(worst_halt, worst_carry, depth)
        with_exact = theory.halting_bound(exact_halt, exact_carry, depth)
        rows.append(
            dict(
                depth=depth,
                monte_carlo_rate=rate,
                bound=bound,
                holds=bound <= rate,
                sum_with_exact_node_probabilities=with_exact,
            )
        )
        print(
            f"Theorem 2.9 (corrected), every node halted by depth {depth}: bound {bound:.3g} <= Monte-Carlo "
            f"rate {rate:.3f} over {args.mc_keys} runs: {bound <= rate} (the sum with exact node "
            f"probabilities: {with_exact:.3f})",
            flush=True,
        )
    print(
        f"   root: exact exponential-mechanism halting mass (mean over runs) {np.mean(exact[0]):.3f}, "
        f"Lemma 2.4 bound {worst_halt[0]:.3g}, 1 - Lemma 2.7 {1 - worst_carry[0]:.3g}",
        flush=True,
    )
    return dict(
        n=n,
        d=d,
        alpha=alpha,
        runs=args.mc_keys,
        halt_lower=worst_halt,
        continue_lower=worst_carry,
        exact_halt_min=exact_halt,
        exact_continue_min=exact_carry,
        exact_root_halting_mean=float(np.mean(exact[0])),
        rows=rows,
    )


def warning_cost_section(args) -> dict:
    from dpm_jax import api

    data = synthetic_blobs(100_000, 10, num_blobs=64, seed=0)
    budget = dpm_jax.Budget(1.0, 1e-6)
    checked = api.warn_if_starved

    def call(key):
        return dpm_jax.cluster(jax.random.key(key), data.points, budget, bounds=data.bounds).centers.block_until_ready()

    call(0)  # compile
    times = {"with the check": [], "without": []}
    for repeat in range(args.timing_calls):
        for name, hook in (("with the check", checked), ("without", lambda *a: None)):
            api.warn_if_starved = hook
            start = time.perf_counter()
            call(repeat)
            times[name].append(time.perf_counter() - start)
    api.warn_if_starved = checked
    medians = {name: float(np.median(values)) for name, values in times.items()}
    print(
        f"warm cluster call, Synth-10d 100k x 10: median {medians['with the check'] * 1e3:.1f} ms with the budget "
        f"check, {medians['without'] * 1e3:.1f} ms without (ratio "
        f"{medians['with the check'] / medians['without']:.3f}, {args.timing_calls} calls each)",
        flush=True,
    )
    return dict(
        n=100_000,
        d=10,
        calls=args.timing_calls,
        seconds=times,
        medians=medians,
        ratio=medians["with the check"] / medians["without"],
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=16)
    parser.add_argument("--mc-keys", type=int, default=200)
    parser.add_argument("--timing-calls", type=int, default=21)
    parser.add_argument(
        "--split-grid",
        choices=("paper", "cell"),
        default="paper",
        help="the grid of the measured runs (results of 'cell' under '<section>_cell')",
    )
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--depths", default="3,4,5,6,7")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--out", default=None)
    parser.add_argument("--figure", default=None, help="PNG of the sweep (docs/diagnostics_sweep.png)")
    args = parser.parse_args(argv)
    report = {}
    if args.out and os.path.exists(args.out):
        with open(args.out) as handle:
            report = json.load(handle)
    for name in args.sections.split(","):
        result = SECTIONS[name](args)
        result["machine"] = machine_description()
        if name == "depth":  # kept at the top level, where earlier results have it
            report.update(result)
        else:
            report[name if args.split_grid == "paper" else f"{name}_cell"] = result
    sweep = "sweep" if args.split_grid == "paper" else "sweep_cell"
    if args.figure and sweep in report:
        sweep_figure(report[sweep], args.figure, args.split_grid)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=1)
    return 0


SECTIONS = dict(
    depth=depth_section,
    theory=theory_section,
    single_gaussian=gaussian_section,
    uniform=uniform_section,
    sweep=sweep_section,
    theorem=theorem_section,
    warning_cost=warning_cost_section,
)

if __name__ == "__main__":
    sys.exit(main())
