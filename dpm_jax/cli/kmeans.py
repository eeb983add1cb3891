"""``dpm-jax kmeans``: the unified greedy k-means / k-median (:func:`dpm_jax.kmeans`) from the command line.

The release JSON has the fields of ``dpm-jax cluster``'s that apply (columns, k, centers,
counts, budget, bounds, ledger) and the greedy's own: the noisy cost curve over k' <= k,
the elbow read from it and the public parameters (z, levels, grid_dim, projection_seed, method).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from dpm_jax.budget import Budget
from dpm_jax.cli.readers import read_points
from dpm_jax.files import write_atomically
from dpm_jax.greedy.api import DEFAULT_LEVELS, MAX_GRID_DIM, METHODS, KMeansResult, kmeans
from dpm_jax.keys import key_from_seed

__all__ = ["add_parser", "kmeans_release"]


def add_parser(commands, seed_type) -> argparse.ArgumentParser:
    """Register the ``kmeans`` sub-command on ``commands``; cli.main sets its handler."""
    run = commands.add_parser(
        "kmeans",
        help="DP k-means / k-median with a given k (the unified greedy) and the private cost curve",
        description="Cluster the rows of INPUT into K centres under (epsilon, delta)-DP with the unified "
        "greedy and write the release (centres, noisy sizes, cost curve, elbow, ledger) as JSON.",
    )
    run.add_argument("input", metavar="INPUT", help="an (n, d) table: .npy, .csv (header optional), .parquet")
    run.add_argument("--k", type=int, required=True, help="number of centres")
    run.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon > 0")
    run.add_argument("--delta", type=float, required=True, help="total delta in (0, 1)")
    run.add_argument(
        "--bounds", type=float, nargs=2, metavar=("LO", "HI"), default=None, help="public range (required)"
    )
    run.add_argument("--z", type=int, default=2, choices=(1, 2), help="2: k-means (default), 1: k-median")
    run.add_argument("--levels", type=int, default=DEFAULT_LEVELS, help="last level of the nets")
    run.add_argument("--grid-dim", type=int, default=MAX_GRID_DIM, help="working dimension (higher d is projected)")
    run.add_argument(
        "--method",
        default="exponential",
        choices=METHODS,
        help="exponential: a mechanism per choice; histogram: every ball value released once",
    )
    run.add_argument("--seed", type=seed_type, default=None, help="integer seed (keep it secret); default: fresh")
    run.add_argument("--out", metavar="FILE", default=None, help="write the JSON release here (default stdout)")
    return run


def kmeans_release(result: KMeansResult, budget: Budget, bounds, args: argparse.Namespace, columns) -> dict:
    """The JSON-ready release: DP outputs and public inputs only."""
    return dict(
        columns=list(columns),
        k=int(result.centers.shape[0]),
        centers=np.asarray(result.centers).tolist(),
        counts=np.asarray(result.sizes).tolist(),
        cost_curve=np.asarray(result.cost_curve).tolist(),
        elbow_k=int(result.elbow_k),
        budget=dict(epsilon=budget.epsilon, delta=budget.delta),
        bounds=dict(lower=bounds[0], upper=bounds[1]),
        config=dict(z=args.z, levels=args.levels, grid_dim=args.grid_dim, projection_seed=0, method=args.method),
        ledger=result.ledger.to_dicts(),
    )


def run_kmeans(args: argparse.Namespace, check_writable, status, command_error) -> int:
    """The sub-command; ``check_writable``, ``status`` and ``command_error`` are cli.main's (no import circle)."""
    if args.bounds is None:
        raise command_error("--bounds LO HI is required: the public range of the data, fixed without looking at it")
    lower, upper = args.bounds
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise command_error(f"--bounds needs finite LO < HI, got {lower} {upper}")
    budget = Budget(epsilon=args.epsilon, delta=args.delta)
    check_writable(args.out)
    points = read_points(args.input)
    start = time.perf_counter()
    result = kmeans(
        key_from_seed(args.seed),
        points.values,
        args.k,
        budget,
        bounds=(lower, upper),
        z=args.z,
        levels=args.levels,
        grid_dim=args.grid_dim,
        method=args.method,
    )
    text = json.dumps(kmeans_release(result, budget, (lower, upper), args, points.columns), indent=2, allow_nan=False)
    if args.out is None:
        print(text)
    else:
        write_atomically(args.out, lambda f: f.write(text + "\n"))
    status(
        f"k={args.k} centres in {time.perf_counter() - start:.1f} s; elbow at k'={int(result.elbow_k)}; "
        f"ledger total epsilon={result.ledger.total_epsilon:.6g}, delta={result.ledger.total_delta:.3g}"
    )
    return 0
