"""``dpm-jax kmeans``: the unified greedy k-means / k-median (:func:`dpm_jax.kmeans`) from the command line.

The release JSON has the fields of ``dpm-jax cluster``'s that apply (columns, k, centers,
counts, budget, bounds, ledger) and the greedy's own: the noisy cost curve over k' <= k,
the elbow read from it and the public parameters (z, levels, grid_dim, projection_seed, method, order).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dpm_jax.budget import Budget
from dpm_jax.cli.bounds_option import released_bounds
from dpm_jax.cli.readers import read_points
from dpm_jax.cli.run_options import add_run_command, budget_and_bounds
from dpm_jax.files import write_atomically
from dpm_jax.greedy.api import (
    DEFAULT_LEVELS,
    DEFAULT_METHOD,
    DEFAULT_ORDER,
    MAX_GRID_DIM,
    METHODS,
    ORDERS,
    KMeansResult,
    kmeans,
)
from dpm_jax.keys import key_from_seed

__all__ = ["add_parser", "kmeans_release"]


def add_parser(commands, seed_type) -> argparse.ArgumentParser:
    """Register the ``kmeans`` sub-command on ``commands``; cli.main sets its handler."""
    run = add_run_command(
        commands,
        "kmeans",
        seed_type,
        help="DP k-means / k-median with a given k (the unified greedy) and the private cost curve",
        description="Cluster the rows of INPUT into K centres under (epsilon, delta)-DP with the unified "
        "greedy and write the release (centres, noisy sizes, cost curve, elbow, ledger) as JSON.",
    )
    run.add_argument("--k", type=int, required=True, help="number of centres")
    run.add_argument("--z", type=int, default=2, choices=(1, 2), help="2: k-means (default), 1: k-median")
    run.add_argument("--levels", type=int, default=DEFAULT_LEVELS, help="last level of the nets")
    run.add_argument("--grid-dim", type=int, default=MAX_GRID_DIM, help="working dimension (higher d is projected)")
    run.add_argument(
        "--method",
        default=DEFAULT_METHOD,
        choices=METHODS,
        help="histogram (default): every ball value released once; exponential: a mechanism per choice",
    )
    run.add_argument(
        "--order",
        default=DEFAULT_ORDER,
        choices=ORDERS,
        help="order of the centres and the cost curve's prefixes: greedy (default: the order of selection) "
        "or weighted (re-ordered from the release: better solutions for k' < K, a weaker elbow)",
    )
    run.add_argument("--out", metavar="FILE", default=None, help="write the JSON release here (default stdout)")
    return run


def kmeans_release(result: KMeansResult, budget: Budget, bounds, args: argparse.Namespace, columns) -> dict:
    """The JSON-ready release: DP outputs and public inputs only (the given bounds, or their DP estimate)."""
    return dict(
        columns=list(columns),
        k=int(result.centers.shape[0]),
        centers=np.asarray(result.centers).tolist(),
        counts=np.asarray(result.sizes).tolist(),
        cost_curve=np.asarray(result.cost_curve).tolist(),
        elbow_k=int(result.elbow_k),
        budget=dict(epsilon=budget.epsilon, delta=budget.delta),
        bounds=dict(zip(("lower", "upper"), released_bounds(bounds, result))),
        config=dict(
            z=args.z,
            levels=args.levels,
            grid_dim=args.grid_dim,
            projection_seed=0,
            method=args.method,
            order=args.order,
        ),
        ledger=result.ledger.to_dicts(),
    )


def run_kmeans(args: argparse.Namespace, check_writable, status) -> int:
    """The sub-command; ``check_writable`` and ``status`` are cli.main's (no import circle)."""
    budget, bounds = budget_and_bounds(args)
    check_writable(args.out)
    points = read_points(args.input)
    start = time.perf_counter()
    result = kmeans(
        key_from_seed(args.seed),
        points.values,
        args.k,
        budget,
        bounds=bounds,
        z=args.z,
        levels=args.levels,
        grid_dim=args.grid_dim,
        method=args.method,
        order=args.order,
    )
    text = json.dumps(kmeans_release(result, budget, bounds, args, points.columns), indent=2, allow_nan=False)
    if args.out is None:
        print(text)
    else:
        write_atomically(args.out, lambda f: f.write(text + "\n"))
    status(
        f"k={args.k} centres in {time.perf_counter() - start:.1f} s; elbow at k'={int(result.elbow_k)}; "
        f"ledger total epsilon={result.ledger.total_epsilon:.6g}, delta={result.ledger.total_delta:.3g}"
    )
    return 0
