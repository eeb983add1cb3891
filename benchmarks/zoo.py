"""The structure zoo: DPM variants, k-means and DP-Lloyd on data sets shaped like real clustering problems.

    python benchmarks/zoo.py                          # everything missing from benchmarks/results/zoo.json
    python benchmarks/zoo.py --datasets zoo-grid,zoo-sine --sizes 100000 --epsilons 1
    python benchmarks/zoo.py --algorithms dpm --fresh # re-run DPM (e.g. after an engine change)
    python benchmarks/zoo.py --render                 # only redraw the .md table and the .png figure

Protocol: every zoo data set (dpm_jax.eval.datasets.ZOO, data seed 0) at every
``--sizes`` n and ``--epsilons`` epsilon, delta = n^-1.5 (the DPM paper, "DPM:
Clustering Sensitive Data through Separation", Section 6.1). Each algorithm runs
with ``--keys`` keys; every (data set, n, epsilon) cell uses the same keys for every
algorithm (paired comparisons). DPM is not told k; k-means (non-private, k-means++
and Lloyd) and DP-Lloyd (Su et al., (epsilon, 0)-DP) are given the true k. k-means
does not depend on epsilon, so it runs once per (data set, n). Scores per run
(dpm_jax.eval.zoo.labelled_scores): adjusted Rand index, accuracy, k; the JSON keeps
every run and the medians. DPM rows also carry dpm_jax.diagnostics.plan at the depth
the run used (what the budget allows per level; public arithmetic, no data) and the
number of split candidates per dimension at the root, range / beta (beta as released).

Resumable: results are written after every cell; a cell already in ``--out`` is
skipped when its algorithm's config and code commit are unchanged (the last git
commit touching its code: dpm_jax/ outside dpm_jax/eval/ for DPM, the baselines'
package for k-means and DP-Lloyd); ``--fresh`` re-runs the selected cells anyway.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import jax
import numpy as np

import dpm_jax
from dpm_jax import diagnostics
from dpm_jax.eval import baselines
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import ZOO, load_dataset
from dpm_jax.eval.zoo import DPM_VARIANTS, paper_delta, run_dpm, labelled_scores
from dpm_jax.files import write_json

BASELINES = ("kmeans", "dp-lloyd")
SCORES = ("ari", "accuracy", "k")
REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPOSITORY / "benchmarks" / "results" / "zoo.json"


CODE_PATHS = {"dpm": ("dpm_jax", ":!dpm_jax/eval"), "baselines": ("dpm_jax/eval/baselines",)}


def code_commit(algorithm: str) -> str:
    """The last commit that changed ``algorithm``'s code (``CODE_PATHS``), or 'unknown'."""
    paths = CODE_PATHS["dpm" if algorithm in DPM_VARIANTS else "baselines"]
    command = ["git", "-C", str(REPOSITORY), "log", "-1", "--format=%h", "--", *paths]
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cell_keys(seed: int, dataset: str, n: int, epsilon: float | None, runs: int) -> jax.Array:
    """``runs`` keys of one (data set, n, epsilon) cell, the same for every algorithm."""
    label = zlib.crc32(f"{dataset}/{n}/{epsilon}".encode())
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), label), runs)


def _centers_of_baseline(algorithm: str, keys, data, num_classes: int, epsilon: float | None):
    centers = []
    for key in keys:
        if algorithm == "kmeans":
            result = baselines.kmeans(key, data.points, num_classes)
        else:
            result = baselines.dp_lloyd(
                key, data.points, num_classes, epsilon, data.bounds, num_points_public=len(data.points)
            )
        centers.append(np.asarray(result.centers))
    return np.stack(centers), np.ones((len(keys), num_classes), bool)


def plan_of(n: int, d: int, budget: dpm_jax.Budget, config: dpm_jax.DPMConfig) -> dict:
    """dpm_jax.diagnostics.plan at the run's depth (under tau_r="auto" the one its rule picks at n):
    the per-level budget arithmetic (public numbers)."""
    plan = diagnostics.plan(float(n), d, budget, config)
    return {
        "tau_r": len(plan.levels),
        "useful_depth": plan.useful_depth,
        "candidates": plan.candidates,
        "exponent_scale": [level.exponent_scale for level in plan.levels],
        "near_random": [level.near_random for level in plan.levels],
    }


def run_cell(seed: int, runs: int, dataset: str, n: int, epsilon: float | None, algorithm: str) -> dict:
    """Every run of one algorithm on one (data set, n, epsilon); returns the JSON row."""
    data = load_dataset(dataset, n=n)
    d = data.points.shape[1]
    num_classes = int(np.max(data.labels)) + 1
    keys = cell_keys(seed, dataset, n, epsilon, runs)
    row = {
        "dataset": dataset,
        "n": n,
        "d": d,
        "true_k": num_classes,
        "epsilon": epsilon,
        "algorithm": algorithm,
        "runs": runs,
    }
    start = time.perf_counter()
    if algorithm in DPM_VARIANTS:
        config = DPM_VARIANTS[algorithm]
        budget = dpm_jax.Budget(epsilon=epsilon, delta=paper_delta(n))
        centers, valid, interval = run_dpm(keys, data.points, budget, data.bounds, config)
        candidates = (data.bounds[1] - data.bounds[0]) / np.mean(interval, axis=1)
        row.update(
            config=repr(config),
            plan=plan_of(n, d, budget, config),
            root_candidates_per_dim=candidates.tolist(),
            median_root_candidates_per_dim=float(np.median(candidates)),
        )
    else:
        centers, valid = _centers_of_baseline(algorithm, keys, data, num_classes, epsilon)
        row.update(config=algorithm)
    row["code"] = code_commit(algorithm)
    row["seconds"] = time.perf_counter() - start  # compile included
    scores = [labelled_scores(data.points, data.labels, centers[i], valid[i], num_classes) for i in range(runs)]
    for name in SCORES:
        row[name] = [score[name] for score in scores]
        row[f"median_{name}"] = float(np.median(row[name]))
    return row


def selected_cells(datasets, sizes, epsilons, algorithms):
    """(data set, n, epsilon, algorithm) of the selection; k-means once per (data set, n), epsilon None."""
    for dataset in datasets:
        for n in sizes:
            if "kmeans" in algorithms:
                yield dataset, n, None, "kmeans"
            for epsilon in epsilons:
                for algorithm in algorithms:
                    if algorithm != "kmeans":
                        yield dataset, n, epsilon, algorithm


def _cell_id(row: dict) -> tuple:
    return row["dataset"], row["n"], row["epsilon"], row["algorithm"]


def is_current(row: dict | None, algorithm: str) -> bool:
    """Whether a stored row still stands for ``algorithm`` as configured and coded now."""
    config = repr(DPM_VARIANTS[algorithm]) if algorithm in DPM_VARIANTS else algorithm
    return row is not None and row.get("config") == config and row.get("code") == code_commit(algorithm)


def run(args: argparse.Namespace) -> dict:
    """Run the missing or stale cells of the selection, saving ``args.out`` after each."""
    document = json.loads(args.out.read_text()) if args.out.exists() else {"rows": []}
    rows = {_cell_id(row): row for row in document["rows"]}
    cells = list(selected_cells(args.datasets, args.sizes, args.epsilons, args.algorithms))
    start = time.perf_counter()
    for index, (dataset, n, epsilon, algorithm) in enumerate(cells):
        cell = (dataset, n, epsilon, algorithm)
        if not args.fresh and is_current(rows.get(cell), algorithm):
            continue
        rows[cell] = run_cell(args.seed, args.keys, *cell)
        document.update(rows=list(rows.values()), machine=machine_description(), seed=args.seed)
        write_json(args.out, document, indent=1)
        print(
            f"[{index + 1}/{len(cells)}] {dataset} n={n} eps={epsilon} {algorithm}: median ARI "
            f"{rows[cell]['median_ari']:.3f}, k {rows[cell]['median_k']:.0f} of {rows[cell]['true_k']} "
            f"({rows[cell]['seconds']:.1f} s; {time.perf_counter() - start:.0f} s so far)",
            file=sys.stderr,
        )
    document.setdefault("run_seconds", {})[time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())] = (
        time.perf_counter() - start
    )
    write_json(args.out, document, indent=1)
    return document


# ----------------------------------------------------------------------- output
def _algorithms(document: dict) -> list[str]:
    present = {row["algorithm"] for row in document["rows"]}
    return [name for name in (*DPM_VARIANTS, *BASELINES) if name in present] + sorted(
        present - set(DPM_VARIANTS) - set(BASELINES)
    )


def _find(document: dict, dataset: str, n: int, epsilon: float, algorithm: str) -> dict | None:
    wanted = None if algorithm == "kmeans" else epsilon
    return next((row for row in document["rows"] if _cell_id(row) == (dataset, n, wanted, algorithm)), None)


def markdown(document: dict) -> str:
    """One table per data set: rows (n, epsilon), columns algorithms, cells 'ARI / accuracy / k' medians."""
    algorithms = _algorithms(document)
    runs = sorted({row["runs"] for row in document["rows"]})
    lines = [
        f"Medians over {'/'.join(map(str, runs))} keys; cells: adjusted Rand index / accuracy / k found. "
        "DPM is not told k; kmeans (non-private) and dp-lloyd get the true k. "
        "`useful` is dpm_jax.diagnostics.plan's useful depth of the default DPM (levels whose split is not "
        "near random) against its depth tau_r.\n"
    ]
    for dataset in dict.fromkeys(row["dataset"] for row in document["rows"]):
        rows = [row for row in document["rows"] if row["dataset"] == dataset]
        d, true_k = rows[0]["d"], rows[0]["true_k"]
        lines.append(f"#### {dataset} (d = {d}, true k = {true_k})\n")
        lines.append("| n | epsilon | " + " | ".join(algorithms) + " | useful / tau_r |")
        lines.append("|---|---|" + "---|" * (len(algorithms) + 1))
        for n in sorted({row["n"] for row in rows}):
            for epsilon in sorted({row["epsilon"] for row in rows if row["epsilon"] is not None}):
                cells = []
                for algorithm in algorithms:
                    row = _find(document, dataset, n, epsilon, algorithm)
                    cells.append(
                        "–"
                        if row is None
                        else f"{row['median_ari']:.2f} / {row['median_accuracy']:.2f} / {row['median_k']:.0f}"
                    )
                default = _find(document, dataset, n, epsilon, "dpm")
                plan = "–" if default is None else f"{default['plan']['useful_depth']} / {default['plan']['tau_r']}"
                lines.append(f"| {n:,} | {epsilon:g} | " + " | ".join(cells) + f" | {plan} |")
        lines.append("")
    return "\n".join(lines)


def figure(document: dict, path: Path) -> None:
    """Median ARI (top) and median k found (bottom) against epsilon; solid n = largest, dashed n = smallest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    datasets = list(dict.fromkeys(row["dataset"] for row in document["rows"]))
    algorithms = _algorithms(document)
    sizes = sorted({row["n"] for row in document["rows"]})
    fig, axes = plt.subplots(2, len(datasets), figsize=(3.0 * len(datasets), 6.2), squeeze=False)
    colours = dict(zip(algorithms, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for column, dataset in enumerate(datasets):
        rows = [row for row in document["rows"] if row["dataset"] == dataset]
        epsilons = sorted({row["epsilon"] for row in rows if row["epsilon"] is not None})
        for n, style in zip(sizes, ("--", "-"), strict=False):
            for algorithm in algorithms:
                found = [_find(document, dataset, n, epsilon, algorithm) for epsilon in epsilons]
                for axis, score in zip(axes[:, column], ("median_ari", "median_k"), strict=True):
                    axis.plot(
                        epsilons,
                        [np.nan if row is None else row[score] for row in found],
                        style,
                        marker="o",
                        markersize=3,
                        color=colours[algorithm],
                        label=f"{algorithm}, n = {n:,}",
                    )
        axes[0, column].set_title(f"{dataset} (k = {rows[0]['true_k']})", fontsize=9)
        axes[0, column].set_ylim(-0.05, 1.05)
        axes[1, column].axhline(rows[0]["true_k"], color="black", linewidth=0.8)
        axes[1, column].set_yscale("log")
        axes[1, column].yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axes[1, column].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        for axis in axes[:, column]:
            axis.set_xscale("log", base=2)
            axis.set_xlabel("epsilon", fontsize=8)
    axes[0, 0].set_ylabel("median adjusted Rand index")
    axes[1, 0].set_ylabel("median k found (line: true k)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(document: dict, out: Path) -> None:
    table = markdown(document)
    out.with_suffix(".md").write_text(table)
    figure(document, out.with_suffix(".png"))
    print(table)


def _names(text: str, known, what: str) -> list[str]:
    names = list(known) if text == "all" else text.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; known: {', '.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default="all", help="comma-separated zoo names, or 'all'")
    parser.add_argument("--sizes", default="5000,100000")
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--algorithms", default="all", help="DPM variant names, kmeans, dp-lloyd; or 'all'")
    parser.add_argument("--keys", type=int, default=5, help="runs per cell (medians over them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="re-run selected cells even if stored and current")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--render", action="store_true", help="only redraw the .md and .png of --out")
    args = parser.parse_args(argv)
    if not args.render:
        args.datasets = _names(args.datasets, ZOO, "data sets")
        args.algorithms = _names(args.algorithms, (*DPM_VARIANTS, *BASELINES), "algorithms")
        args.sizes = [int(size) for size in args.sizes.split(",")]
        args.epsilons = [float(epsilon) for epsilon in args.epsilons.split(",")]
        if args.keys < 1 or min(args.sizes) < 100 or min(args.epsilons) <= 0:
            parser.error("need --keys >= 1, sizes >= 100 and epsilons > 0")
        run(args)
    write_reports(json.loads(args.out.read_text()), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
