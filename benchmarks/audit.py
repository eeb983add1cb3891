"""Empirical privacy audit of dpm_jax: lower bounds on the epsilon actually spent.

For each configuration, runs the mechanism on a pair of neighbouring data sets
(``dpm_jax.audit``) and reports the Clopper-Pearson lower bound on epsilon (all
events and directions simultaneously at the stated confidence) next to the claimed
epsilon, for the real library and for deliberately broken variants, which must
exceed their claim.

    python benchmarks/audit.py --runs 100000 --out results/audit.json

Prints a table and writes JSON (per configuration: claim, bound, per-event counts
and intervals, run time; plus the machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from dpm_jax import audit as audit_lib
from dpm_jax import budget as budget_lib
from dpm_jax import mechanisms

BOUNDS = (-1.0, 1.0)
COUNT_CONFIG = dpm_jax.DPMConfig(tau_r=1, tau_e=-1e6, sigma_step=0.25, num_sigmas=1,
                                 epsilon_shares=(0.01, 0.97, 0.01, 0.01))


def count_heavy_cluster(epsilon: float, runs: int, confidence: float):
    """Full cluster, 97% of epsilon on the counts; 20 points at -1 +- one at +1."""
    budget = dpm_jax.Budget(epsilon, 1e-6)
    a, b = audit_lib.far_point_neighbours(np.full((20, 1), -1.0), BOUNDS, masked=True)
    events = {
        "root >= n+1 and right >= 1": audit_lib.both(audit_lib.node_count_at_least(1, 21),
                                                     audit_lib.node_count_at_least(3, 1)),
        "root >= n+1": audit_lib.node_count_at_least(1, 21),
        "right >= 1": audit_lib.node_count_at_least(3, 1),
        "right >= 3": audit_lib.node_count_at_least(3, 3),
    }
    mechanism = audit_lib.cluster_mechanism(budget, BOUNDS, COUNT_CONFIG)
    return budget.epsilon, audit_lib.audit(jax.random.key(0), mechanism, a, b, events, runs,
                                           delta=budget.delta, confidence=confidence)


def default_cluster(epsilon: float, runs: int, confidence: float, tau_r: int = 3):
    """Full cluster, paper defaults; two blobs in [-100, 100]^2 +- a point at (100, 100)."""
    budget = dpm_jax.Budget(epsilon, 1e-6)
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(-50, 2, (100, 2)), rng.normal(-20, 2, (100, 2))])
    bounds = (-100.0, 100.0)
    a, b = audit_lib.far_point_neighbours(points, bounds, masked=True)
    events = {
        "root >= n+1": audit_lib.node_count_at_least(1, len(points) + 1),
        "root >= n+10": audit_lib.node_count_at_least(1, len(points) + 10),
        "k == 1": audit_lib.num_clusters_equals(1),
        "k == 3": audit_lib.num_clusters_equals(3),
        "first split in dim 0": audit_lib.first_split_dim_equals(0),
        "first split above 0": audit_lib.first_split_above(0.0),
        "first split above 50": audit_lib.first_split_above(50.0),
        "centre in [50,100]^2": audit_lib.center_in_box([50.0, 50.0], [100.0, 100.0]),
        "centre in [0,100]^2": audit_lib.center_in_box([0.0, 0.0], [100.0, 100.0]),
    }
    mechanism = audit_lib.cluster_mechanism(budget, bounds, dpm_jax.DPMConfig(tau_r=tau_r))
    return budget.epsilon, audit_lib.audit(jax.random.key(1), mechanism, a, b, events, runs,
                                           delta=budget.delta, confidence=confidence)


def split_step(epsilon: float, runs: int, confidence: float):
    """One split choice from library pieces, public n~ = 72, alpha = 0.01 (see tests)."""
    points = np.concatenate([np.full(66, 0.5), np.full(6, 1.0)]).astype(np.float32)[:, None]
    a, b = points, np.concatenate([points, np.zeros((1, 1), np.float32)])
    mechanism = audit_lib.split_step_mechanism(72.0, epsilon, 0.125, dpm_jax.DPMConfig(alpha=0.01))
    events = {"a lower candidate": lambda out: out[1] < 4, "candidate 0": lambda out: out[1] == 0}
    return epsilon, audit_lib.audit(jax.random.key(2), mechanism, a, b, events, runs,
                                    confidence=confidence)


def worst_case_exponential(epsilon: float, runs: int, confidence: float):
    """The exponential mechanism on scores that move by exactly +-Delta."""
    sensitivity = 0.5
    scores_a = jnp.array([0.0, 3.0 / epsilon], jnp.float32)
    scores_b = scores_a + jnp.array([sensitivity, -sensitivity])

    def mechanism(key, scores):
        _, candidate = mechanisms.exponential_mechanism(
            key, scores[None, None, :], jnp.ones((1, 1, 2), bool), epsilon, jnp.array([sensitivity]))
        return candidate[0]

    return epsilon, audit_lib.audit(jax.random.key(3), mechanism, scores_a, scores_b,
                                    {"candidate 0": lambda c: c == 0}, runs, confidence=confidence)


def discrete_laplace_count(epsilon: float, runs: int, confidence: float):
    """noisy_count alone on |S| = 10 vs 11, tail events n~ >= 11, 12, 14."""
    mechanism = lambda key, count: mechanisms.noisy_count(key, count, epsilon)
    events = {f"n~ >= {t}": (lambda t: lambda out: out >= t)(t) for t in (11, 12, 14)}
    return epsilon, audit_lib.audit(jax.random.key(4), mechanism, jnp.int32(10), jnp.int32(11),
                                    events, runs, confidence=confidence)


def halved_noise(original):
    return lambda key, epsilon: original(key, 2.0 * np.asarray(epsilon, np.float64))


def reused_across_levels(original):
    def allocate(budget, config):
        allocation = original(budget, config)
        total = math.fsum(allocation.count_epsilons)
        return allocation._replace(count_epsilons=(total,) * len(allocation.count_epsilons))
    return allocate


def without_factor_2(original):
    return lambda key, scores, valid, epsilon, sensitivity: original(key, scores, valid,
                                                                     2.0 * epsilon, sensitivity)


def configurations(runs: int):
    """(name, variant, broken piece or None, function, epsilon, runs)."""
    count, allocate, exponential = (mechanisms.count_noise, budget_lib.allocate,
                                    mechanisms.exponential_mechanism)
    return [
        ("discrete Laplace count", "library", None, discrete_laplace_count, 1.0, runs),
        ("cluster, count-heavy", "library", None, count_heavy_cluster, 1.0, runs),
        ("cluster, count-heavy", "noise scale halved", (count, halved_noise(count)),
         count_heavy_cluster, 1.0, runs),
        ("cluster, count-heavy", "count budget reused across levels",
         (allocate, reused_across_levels(allocate)), count_heavy_cluster, 1.0, runs),
        ("cluster, defaults, tau_r=3", "library", None, default_cluster, 1.0, runs // 2),
        ("cluster, defaults, tau_r=3", "library", None, default_cluster, 0.1, runs // 2),
        ("split step (library pieces)", "library", None, split_step, 1.0, runs),
        ("split step (library pieces)", "no factor 2", (exponential, without_factor_2(exponential)),
         split_step, 1.0, runs),
        ("exponential mechanism, worst case", "library", None, worst_case_exponential, 1.0, runs),
        ("exponential mechanism, worst case", "no factor 2",
         (exponential, without_factor_2(exponential)), worst_case_exponential, 1.0, runs),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs per data set")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    rows = []
    for name, variant, broken, function, epsilon, runs in configurations(args.runs):
        tick = time.time()
        if broken is None:
            claimed, result = function(epsilon, runs, args.confidence)
        else:
            with audit_lib.substituted(*broken):
                claimed, result = function(epsilon, runs, args.confidence)
        seconds = time.time() - tick
        best = max(result.per_event, key=lambda e: e.epsilon_lower_bound)
        verdict = ("VIOLATION" if result.epsilon_lower_bound > claimed else "ok")
        rows.append(dict(configuration=name, variant=variant, claimed_epsilon=claimed,
                         best_event=best.name, verdict=verdict, seconds=round(seconds, 1),
                         **result.to_dict()))
        print(f"{name:<36}{variant:<34}claimed {claimed:<5g} lower bound "
              f"{result.epsilon_lower_bound:6.3f}  {verdict:<9} ({best.name}; {runs} runs, "
              f"{seconds:.0f}s)", flush=True)
    machine = (f"{platform.machine()} {os.cpu_count()} cores, {platform.system()}, "
               f"jax {jax.__version__} on {jax.default_backend()}")
    print(f"\nconfidence {args.confidence} (simultaneous over events and directions); {machine}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as handle:
            json.dump(dict(machine=machine, confidence=args.confidence, runs=args.runs,
                           results=rows), handle, indent=1)
    library_ok = all(r["verdict"] == "ok" for r in rows if r["variant"] == "library")
    broken_caught = all(r["verdict"] == "VIOLATION" for r in rows if r["variant"] != "library")
    return 0 if library_ok and broken_caught else 1


if __name__ == "__main__":
    sys.exit(main())
