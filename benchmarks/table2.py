"""Reproduce Tables 2 and 3 of the DPM paper: quality and speed of DPM against its baselines.

    python benchmarks/table2.py --datasets synth-10d,synth-100d,digits,china-pixels,letters \\
        --runs 20 --epsilon 1.0 --out results.json

Protocol (the DPM paper, Sections 6.1 and 6.2):
  * every algorithm runs ``--runs`` times per data set with epsilon = ``--epsilon``
    and delta = 1 / (n sqrt(n)); the baselines get the number of classes (for an
    unlabelled data set, the k of the best reference below), DPM does not;
  * references for the KMeans distance: ``--reference-runs`` non-private k-means
    runs (n_init=1), the ``--references`` best by silhouette score kept;
  * metrics of every run, computed in float64 on the nearest-valid-centre labels
    (the authors' evaluation labels points the same way): inertia (squared
    distances), silhouette score on ``--silhouette-sample`` points (the authors
    use 10,000), clustering accuracy (labelled data only), normalised KMeans
    distance, the number of clusters k and the seconds of the run. JAX programs
    are compiled by a warm-up run first, reported as ``first_run_seconds``.

Algorithms (``--algorithms``, default all available):
  dpm             dpm_jax.cluster with the default config; every other DPM variant of
                  dpm_jax.eval.zoo.DPM_VARIANTS (e.g. dpm-paper, dpm-depth7) by its
                  name; dpm-lattice: the default config told the data set's public
                  lattice step (UCI Letters, digits, china-pixels: 1), dpm_jax.eval.zoo.variant_config
  dp-lloyd        dpm_jax.eval.baselines.dp_lloyd (Su et al.'s DP k-means, JAX)
  kmeans          dpm_jax.eval.baselines.kmeans (k-means++ and Lloyd, JAX, n_init=1)
  kmeans-sklearn  scikit-learn's KMeans (n_init=1), the authors' non-private baseline
  diffprivlib     diffprivlib's KMeans, the authors' DP-Lloyd; skipped when it cannot
                  be imported (diffprivlib 0.6 imports scikit-learn internals that
                  scikit-learn >= 1.6 no longer has)
  dpm-numpy       the plain NumPy DPM of dpm_jax/eval/baselines/numpy_dpm.py, the sequential
                  speed baseline
  greedy          dpm_jax.kmeans, the unified greedy k-means (given the baselines' k)
  greedy-histogram  the same with method="histogram" (every ball value released once, Section 4)

Outputs: ``--out`` (JSON rows), the same path with ``.md`` (Markdown tables) and
``.png`` (a figure comparing the algorithms). For the data sets of the paper's
Tables 2 and 3 (Synth-10d, Synth-100d, UCI Letters) every cell the paper reports is
printed beside ours, "ours (paper mean ± std)", from ``PAPER``; the adjusted Rand
index (not in the paper) is reported for labelled data.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from dpm_jax.config import PAPER_GRID
from dpm_jax.eval import baselines, metrics
from dpm_jax.eval.baselines.numpy_dpm import reference_dpm
from dpm_jax.eval.benchmark import machine_description
from dpm_jax.eval.datasets import Dataset, load_dataset
from dpm_jax.eval.zoo import DPM_VARIANTS, LATTICE_VARIANTS, variant_config

DPM_NAMES = (*DPM_VARIANTS, *LATTICE_VARIANTS)
ALGORITHMS = (
    "kmeans",
    "kmeans-sklearn",
    "dp-lloyd",
    "diffprivlib",
    *DPM_NAMES,
    "dpm-numpy",
    "greedy",
    "greedy-histogram",
)
METRICS = ("silhouette", "accuracy", "ari", "inertia", "kmeans_distance", "k", "seconds")
METRIC_TITLES = {
    "silhouette": "Silh. score (up)",
    "accuracy": "Accuracy (up)",
    "ari": "Adjusted Rand index (up)",
    "inertia": "Inertia (down)",
    "kmeans_distance": "Norm. KMeans dist. (down)",
    "k": "k",
    "seconds": "Seconds per run",
}
# The paper's Tables 2 and 3 (epsilon = 1, 20 runs): (mean, std) per data set, paper column and metric.
PAPER = {
    "synth-10d": {
        "KMeans": {
            "silhouette": (0.97, 0.00),
            "accuracy": (1.00, 0.00),
            "inertia": (1.0e6, 2.0e-10),
            "kmeans_distance": (0.00, 0.00),
        },
        "DP-Lloyd": {
            "silhouette": (0.61, 0.05),
            "accuracy": (0.66, 0.05),
            "inertia": (6.0e8, 1.0e8),
            "kmeans_distance": (0.12, 0.01),
        },
        "DPM": {
            "silhouette": (0.96, 0.02),
            "accuracy": (0.99, 0.01),
            "inertia": (1.8e7, 2.7e7),
            "kmeans_distance": (0.01, 0.00),
        },
    },
    "synth-100d": {
        "KMeans": {
            "silhouette": (0.98, 0.00),
            "accuracy": (1.00, 0.00),
            "inertia": (1.0e7, 2.6e-9),
            "kmeans_distance": (0.00, 0.00),
        },
        "DP-Lloyd": {
            "silhouette": (0.58, 0.04),
            "accuracy": (0.63, 0.04),
            "inertia": (1.5e10, 9.7e8),
            "kmeans_distance": (0.21, 0.01),
        },
        "DPM": {
            "silhouette": (0.98, 0.01),
            "accuracy": (1.00, 0.01),
            "inertia": (5.4e8, 3.4e8),
            "kmeans_distance": (0.03, 0.00),
        },
    },
    "letters": {  # Table 3, UCI Letters (the paper uses 18,720 of the 20,000 points)
        "KMeans": {
            "silhouette": (0.15, 0.00),
            "accuracy": (0.28, 0.01),
            "inertia": (5.8e5, 2.8e3),
            "kmeans_distance": (0.00, 0.00),
        },
        "DP-Lloyd": {
            "silhouette": (0.09, 0.02),
            "accuracy": (0.13, 0.02),
            "inertia": (1.1e6, 6.4e4),
            "kmeans_distance": (0.20, 0.01),
        },
        "DPM": {
            "silhouette": (0.05, 0.01),
            "accuracy": (0.20, 0.02),
            "inertia": (9.5e5, 3.3e4),
            "kmeans_distance": (0.10, 0.01),
        },
    },
}
PAPER_COLUMN = {
    "kmeans": "KMeans",
    "kmeans-sklearn": "KMeans",
    "dp-lloyd": "DP-Lloyd",
    "diffprivlib": "DP-Lloyd",
    "dpm-numpy": "DPM",
    **{name: "DPM" for name in DPM_NAMES},
}
# Candidate k of the reference search for data sets without labels (Section 6.1, UCI Gas).
UNLABELLED_K_GRID = (2, 3, 4, 5, 6, 8, 10, 12, 16)


@dataclasses.dataclass(frozen=True)
class Clustering:
    """What one run of one algorithm released: padded centres and their valid mask."""

    centers: np.ndarray
    valid: np.ndarray
    seconds: float


@dataclasses.dataclass(frozen=True)
class Task:
    """One data set prepared for the comparison."""

    dataset: Dataset
    num_clusters: int  # given to the baselines
    num_classes: int | None
    references: baselines.KMeansReferences
    budget: dpm_jax.Budget


# --------------------------------------------------------------------- progress
class ProgressBar:
    """A progress bar on stderr: ``[#####-----] 12/40 label  3.2 s``.

    Redrawn in place on a terminal; one line per step when stderr is a file.
    """

    def __init__(self, total: int, width: int = 30):
        self.total, self.width, self.done, self.start = total, width, 0, time.perf_counter()
        self.in_place = sys.stderr.isatty()

    def advance(self, label: str) -> None:
        self.done += 1
        filled = self.width * self.done // max(self.total, 1)
        elapsed = time.perf_counter() - self.start
        line = f"[{'#' * filled}{'-' * (self.width - filled)}] {self.done}/{self.total} {label:<36.36} {elapsed:7.1f} s"
        finished = self.done == self.total or not self.in_place
        sys.stderr.write(("\r" if self.in_place else "") + line + ("\n" if finished else ""))
        sys.stderr.flush()


# ------------------------------------------------------------------- algorithms
# A runner maps (key, task) to (centres (slots, d), valid (slots,)) of one run.
def _run_dpm_arrays(key, points, task: Task, config: dpm_jax.DPMConfig):
    result = dpm_jax.cluster(key, points, task.budget, bounds=task.dataset.bounds, config=config)
    return result.centers, result.valid


def _dpm_runner(name: str) -> Callable:
    return lambda key, task: _run_dpm_arrays(key, task.dataset.points, task, variant_config(name, task.dataset))


def _all_valid(centers, task: Task):
    return centers, np.ones(task.num_clusters, bool)


def _run_dp_lloyd(key, task: Task):
    data = task.dataset
    result = baselines.dp_lloyd(
        key, data.points, task.num_clusters, task.budget.epsilon, data.bounds, num_points_public=len(data.points)
    )
    return _all_valid(result.centers, task)


def _run_kmeans(key, task: Task):
    return _all_valid(baselines.kmeans(key, task.dataset.points, task.num_clusters).centers, task)


def _seed(key) -> int:
    return int(jax.random.randint(key, (), 0, 2**31 - 1))


def _run_kmeans_sklearn(key, task: Task):
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=task.num_clusters, n_init=1, random_state=_seed(key))
    return _all_valid(model.fit(task.dataset.points).cluster_centers_, task)


def _run_diffprivlib(key, task: Task):
    from diffprivlib.models import KMeans

    data = task.dataset
    d = data.points.shape[1]
    bounds = tuple(np.broadcast_to(np.asarray(b, float), (d,)) for b in data.bounds)
    model = KMeans(epsilon=task.budget.epsilon, bounds=bounds, n_clusters=task.num_clusters, random_state=_seed(key))
    return _all_valid(model.fit(data.points).cluster_centers_, task)


def _run_dpm_numpy(key, task: Task):
    """dpm_jax.eval.baselines.numpy_dpm's ``reference_dpm(rng, X, epsilon, delta, bounds, config)["centers"]``."""
    data = task.dataset
    result = reference_dpm(
        np.random.default_rng(_seed(key)),
        data.points,
        task.budget.epsilon,
        task.budget.delta,
        data.bounds,
        dpm_jax.DPMConfig(split_grid=PAPER_GRID, tau_r=7),  # the published design
    )
    centers = np.asarray(result["centers"], float)
    return centers, np.ones(len(centers), bool)


def _greedy_runner(method: str) -> Callable:
    def run(key, task: Task):
        """dpm_jax.kmeans (the unified greedy) with the baselines' k."""
        data = task.dataset
        result = dpm_jax.kmeans(key, data.points, task.num_clusters, task.budget, bounds=data.bounds, method=method)
        return _all_valid(result.centers, task)

    return run


def run_timed(runner: Callable, key, task: Task) -> Clustering:
    """One run of ``runner``, timed until its arrays are ready."""
    start = time.perf_counter()
    centers, valid = jax.block_until_ready(runner(key, task))
    return Clustering(np.asarray(centers), np.asarray(valid), time.perf_counter() - start)


def run_algorithm(
    algorithm: str, keys: list, warm_up_key, task: Task, dpm_batch: int
) -> tuple[float | None, list[Clustering]]:
    """All runs of ``algorithm``, one per key, after a warm-up run that compiles JAX programs.

    Returns the warm-up's seconds (None for programs that need no compiling) and the
    runs. With ``dpm_batch`` > 1, DPM runs ``dpm_batch`` keys per ``jax.vmap`` call
    (the last batch padded with repeated keys, so one shape is compiled) and every
    run is charged the call's time divided by ``dpm_batch``; the warm-up is then one
    batch.
    """
    if algorithm not in DPM_NAMES or dpm_batch == 1:
        runner = RUNNERS[algorithm]
        first = run_timed(runner, warm_up_key, task).seconds if algorithm in COMPILED else None
        return first, [run_timed(runner, key, task) for key in keys]

    data = task.dataset
    config = variant_config(algorithm, data)
    batched = jax.jit(jax.vmap(lambda key, points: _run_dpm_arrays(key, points, task, config), in_axes=(0, None)))

    def run_batch(batch_keys):
        padded = jnp.stack(batch_keys + [batch_keys[-1]] * (dpm_batch - len(batch_keys)))
        start = time.perf_counter()
        centers, valid = jax.block_until_ready(batched(padded, data.points))
        return np.asarray(centers), np.asarray(valid), time.perf_counter() - start

    first = run_batch([warm_up_key])[2]
    clusterings = []
    for start in range(0, len(keys), dpm_batch):
        batch_keys = keys[start : start + dpm_batch]
        centers, valid, seconds = run_batch(batch_keys)
        clusterings += [Clustering(centers[i], valid[i], seconds / dpm_batch) for i in range(len(batch_keys))]
    return first, clusterings


RUNNERS: dict[str, Callable] = {
    **{name: _dpm_runner(name) for name in DPM_NAMES},
    "dp-lloyd": _run_dp_lloyd,
    "kmeans": _run_kmeans,
    "kmeans-sklearn": _run_kmeans_sklearn,
    "diffprivlib": _run_diffprivlib,
    "dpm-numpy": _run_dpm_numpy,
    "greedy": _greedy_runner("exponential"),
    "greedy-histogram": _greedy_runner("histogram"),
}
COMPILED = {*DPM_NAMES, "dp-lloyd", "kmeans", "greedy", "greedy-histogram"}  # JAX programs: a warm-up run compiles them


def unavailable_reason(algorithm: str) -> str | None:
    """Why ``algorithm`` cannot run here, or None."""
    if algorithm == "kmeans-sklearn":
        return None if importlib.util.find_spec("sklearn") else "scikit-learn is not installed"
    if algorithm == "diffprivlib":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import diffprivlib.models  # noqa: F401
        except Exception as error:  # ImportError, or its imports of scikit-learn internals failing
            return f"diffprivlib cannot be imported ({type(error).__name__}: {error})"
        return None
    return None


# ---------------------------------------------------------------------- metrics
def evaluate(key, task: Task, clustering: Clustering, silhouette_sample: int) -> dict[str, float]:
    """All metrics of one clustering, in float64 (module docstring)."""
    data = task.dataset
    with jax.enable_x64(True):
        points = jnp.asarray(data.points, jnp.float64)
        centers = jnp.asarray(clustering.centers, jnp.float64)
        valid = jnp.asarray(clustering.valid)
        assignment = metrics.assign_to_centers(points, centers, valid)
        num_slots = centers.shape[0]
        values = {
            "inertia": float(jnp.sum(assignment.squared_distances)),
            "silhouette": float(
                metrics.sampled_silhouette_score(key, points, assignment.labels, num_slots, silhouette_sample)
            ),
            "kmeans_distance": float(
                metrics.normalised_kmeans_distance(
                    centers,
                    valid,
                    jnp.asarray(task.references.centers),
                    jnp.asarray(task.references.valid),
                    data.bounds,
                )
            ),
            "k": float(np.sum(clustering.valid)),
            "seconds": clustering.seconds,
        }
        if task.num_classes is not None:
            truth = jnp.asarray(data.labels)
            values["accuracy"] = float(
                metrics.clustering_accuracy(assignment.labels, truth, num_slots, task.num_classes)
            )
            values["ari"] = float(metrics.adjusted_rand_index(assignment.labels, truth, num_slots, task.num_classes))
    return values


def summarise(values: list[dict[str, float]]) -> dict[str, dict[str, float] | None]:
    """Mean and (population) standard deviation of every metric over the runs."""
    summary = {}
    for name in METRICS:
        column = [v[name] for v in values if name in v]
        summary[name] = (
            None if not column else {"mean": float(np.mean(column)), "std": float(np.std(column)), "values": column}
        )
    return summary


# ------------------------------------------------------------------------ tasks
def prepare(key, name: str, epsilon: float, reference_runs: int, num_references: int, silhouette_sample: int) -> Task:
    """Load a data set, fix the budget and compute its Section 6.2 references."""
    data = load_dataset(name)
    n = len(data.points)
    budget = dpm_jax.Budget(epsilon=epsilon, delta=1.0 / (n * math.sqrt(n)))
    if data.labels is not None:
        num_classes = int(np.max(data.labels)) + 1
        grid = (num_classes,)
    else:
        num_classes, grid = None, UNLABELLED_K_GRID
    runs_per_k = max(1, math.ceil(reference_runs / len(grid)))
    references = baselines.kmeans_references(key, data.points, grid, runs_per_k, num_references, silhouette_sample)
    num_clusters = num_classes if num_classes is not None else references.best_num_clusters
    return Task(data, num_clusters, num_classes, references, budget)


def run_benchmark(
    datasets: list[str],
    algorithms: list[str],
    runs: int,
    epsilon: float,
    seed: int,
    reference_runs: int,
    num_references: int,
    silhouette_sample: int,
    dpm_batch: int = 1,
) -> dict:
    """Every algorithm ``runs`` times on every data set; returns the JSON document."""
    root = jax.random.key(seed)
    rows, notes = [], {}
    progress = ProgressBar(len(datasets) * (1 + runs * len(algorithms)))
    for dataset_index, name in enumerate(datasets):
        dataset_key = jax.random.fold_in(root, dataset_index)
        task = prepare(
            jax.random.fold_in(dataset_key, 0), name, epsilon, reference_runs, num_references, silhouette_sample
        )
        progress.advance(f"{name}: references")
        for algorithm_index, algorithm in enumerate(algorithms):
            algorithm_key = jax.random.fold_in(dataset_key, 1 + algorithm_index)
            run_keys, metric_keys = zip(
                *(jax.random.split(jax.random.fold_in(algorithm_key, run)) for run in range(runs)), strict=True
            )
            first_run_seconds, clusterings = run_algorithm(
                algorithm, list(run_keys), jax.random.fold_in(algorithm_key, runs), task, dpm_batch
            )
            values = []
            for run, (metric_key, clustering) in enumerate(zip(metric_keys, clusterings, strict=True)):
                values.append(evaluate(metric_key, task, clustering, silhouette_sample))
                progress.advance(f"{name}: {algorithm} {run + 1}/{runs}")
            rows.append(
                {
                    "dataset": name,
                    "algorithm": algorithm,
                    "runs": runs,
                    "num_clusters_given": None if algorithm.startswith("dpm") else task.num_clusters,
                    "first_run_seconds": first_run_seconds,
                    **summarise(values),
                }
            )
        notes[name] = {
            "n": len(task.dataset.points),
            "d": task.dataset.points.shape[1],
            "bounds": list(task.dataset.bounds),
            "delta": task.budget.delta,
            "num_classes": task.num_classes,
            "num_clusters_given": task.num_clusters,
            "reference_k": task.references.num_clusters.tolist(),
            "reference_silhouette": task.references.silhouette.tolist(),
        }
    return {
        "rows": rows,
        "datasets": notes,
        "machine": machine_description(),
        "config": {
            "runs": runs,
            "epsilon": epsilon,
            "seed": seed,
            "reference_runs": reference_runs,
            "references": num_references,
            "silhouette_sample": silhouette_sample,
            "algorithms": algorithms,
            "dpm_batch": dpm_batch,
        },
    }


# ----------------------------------------------------------------------- output
def _cell(summary: dict | None, name: str, paper: tuple[float, float] | None = None) -> str:
    """'mean ± std' of our runs, then the paper's '(paper mean ± std)' where it reports the cell."""
    if summary is None:
        return "N/A"
    mean, std = summary["mean"], summary["std"]
    if name == "inertia":
        ours = f"{mean:.1e} ± {std:.1e}"
    elif name == "k":
        ours = f"{mean:.1f} ± {std:.1f}"
    else:
        ours = f"{mean:.3f} ± {std:.3f}"
    if paper is None:
        return ours
    return ours + (
        f" (paper {paper[0]:.1e} ± {paper[1]:.1e})"
        if name == "inertia"
        else f" (paper {paper[0]:.2f} ± {paper[1]:.2f})"
    )


def _paper_value(dataset: str, algorithm: str, metric: str) -> tuple[float, float] | None:
    return PAPER.get(dataset, {}).get(PAPER_COLUMN.get(algorithm), {}).get(metric)


def markdown(document: dict) -> str:
    """One Markdown table per data set: metrics as rows, algorithms as columns (like Table 2)."""
    lines = []
    machine = document["machine"]
    lines.append(
        f"Measured on {machine['processor']}, {machine['cpu_count']} CPU cores, "
        f"{', '.join(machine['devices'])}; jax {machine['jax']}. "
        f"{document['config']['runs']} runs, epsilon = {document['config']['epsilon']}, "
        "delta = 1/(n sqrt(n)); mean ± std; the paper's value in parentheses where it reports one.\n"
    )
    for name, info in document["datasets"].items():
        rows = [r for r in document["rows"] if r["dataset"] == name]
        given = "unlabelled, k from the reference search" if info["num_classes"] is None else "classes"
        lines.append(
            f"### {name} (n = {info['n']}, d = {info['d']}, bounds {tuple(info['bounds'])}, "
            f"baselines get k = {info['num_clusters_given']} ({given}))\n"
        )
        lines.append("| metric | " + " | ".join(r["algorithm"] for r in rows) + " |")
        lines.append("|---|" + "---|" * len(rows))
        for metric in METRICS:
            cells = (_cell(r.get(metric), metric, _paper_value(name, r["algorithm"], metric)) for r in rows)
            lines.append(f"| {METRIC_TITLES[metric]} | " + " | ".join(cells) + " |")
        first_cells = ["-" if r["first_run_seconds"] is None else f"{r['first_run_seconds']:.1f}" for r in rows]
        lines.append("| First run, compile included (s) | " + " | ".join(first_cells) + " |\n")
    return "\n".join(lines)


def figure(document: dict, path: Path) -> None:
    """Bars with standard-deviation whiskers: one panel per metric, data sets on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(document["datasets"])
    algorithms = list(dict.fromkeys(r["algorithm"] for r in document["rows"]))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    width = 0.8 / max(len(algorithms), 1)
    for axis, metric in zip(
        axes.flat, ("silhouette", "accuracy", "kmeans_distance", "inertia", "k", "seconds"), strict=True
    ):
        for index, algorithm in enumerate(algorithms):
            means, stds = [], []
            for name in datasets:
                row = next((r for r in document["rows"] if r["dataset"] == name and r["algorithm"] == algorithm), None)
                summary = None if row is None else row[metric]
                means.append(np.nan if summary is None else summary["mean"])
                stds.append(0.0 if summary is None else summary["std"])
            positions = np.arange(len(datasets)) + (index - (len(algorithms) - 1) / 2) * width
            axis.bar(positions, means, width, yerr=stds, capsize=2, label=algorithm)
        axis.set_xticks(np.arange(len(datasets)), datasets, rotation=20, fontsize=8)
        axis.set_title(METRIC_TITLES[metric], fontsize=10)
        if metric in ("inertia", "seconds"):
            axis.set_yscale("log")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(algorithms), fontsize=9)
    fig.suptitle(
        f"epsilon = {document['config']['epsilon']}, {document['config']['runs']} runs "
        f"({document['machine']['cpu_count']} CPU cores)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--datasets",
        default="synth-10d,synth-100d,digits,china-pixels",
        help="comma-separated names (dpm_jax.eval.datasets.DATASETS)",
    )
    parser.add_argument(
        "--algorithms", default=",".join(ALGORITHMS), help="comma-separated; unavailable ones are skipped with a note"
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reference-runs",
        type=int,
        default=40,
        help="non-private k-means runs searched for the KMeans distance references",
    )
    parser.add_argument("--references", type=int, default=20, help="references kept (Section 6.2: 20)")
    parser.add_argument("--silhouette-sample", type=int, default=10_000)
    parser.add_argument(
        "--dpm-batch",
        type=int,
        default=1,
        help="DPM runs per jax.vmap call (1: one call per run; no gain on CPU, try it on GPU)",
    )
    parser.add_argument("--out", type=Path, default=Path("results.json"))
    parser.add_argument("--render", action="store_true", help="only rewrite the .md and .png of an existing --out JSON")
    args = parser.parse_args(argv)
    if args.render:
        write_reports(json.loads(args.out.read_text()), args.out)
        return 0

    algorithms = []
    for algorithm in args.algorithms.split(","):
        if algorithm not in RUNNERS:
            parser.error(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
        reason = unavailable_reason(algorithm)
        if reason:
            print(f"skipping {algorithm}: {reason}", file=sys.stderr)
        else:
            algorithms.append(algorithm)
    if args.dpm_batch < 1:
        parser.error("--dpm-batch must be >= 1")
    document = run_benchmark(
        args.datasets.split(","),
        algorithms,
        args.runs,
        args.epsilon,
        args.seed,
        args.reference_runs,
        args.references,
        args.silhouette_sample,
        args.dpm_batch,
    )
    args.out.write_text(json.dumps(document, indent=1))
    write_reports(document, args.out)
    return 0


def write_reports(document: dict, out: Path) -> None:
    """The Markdown tables (printed too) and the figure beside the JSON file ``out``."""
    table = markdown(document)
    out.with_suffix(".md").write_text(table)
    figure(document, out.with_suffix(".png"))
    print(table)
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.png')}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
