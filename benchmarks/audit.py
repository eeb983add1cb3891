"""Empirical privacy audit of dpm_jax: lower bounds on the epsilon actually spent.

For each configuration, runs the mechanism on a pair of neighbouring data sets
(``dpm_jax.eval.audit``) and reports the Clopper-Pearson lower bound on epsilon (all
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
from dpm_jax.eval import audit as audit_lib
from dpm_jax.testing import substituted
from dpm_jax import budget as budget_lib
from dpm_jax import averaging, exact, mechanisms

BOUNDS = (-1.0, 1.0)
COUNT_CONFIG = dpm_jax.DPMConfig(
    tau_r=1, tau_e=-1e6, sigma_step=0.25, num_sigmas=1, epsilon_shares=(0.01, 0.97, 0.01, 0.01)
)


def count_heavy_cluster(epsilon: float, runs: int, confidence: float):
    """Full cluster, 97% of epsilon on the counts; 20 points at -1 +- one at +1."""
    budget = dpm_jax.Budget(epsilon, 1e-6)
    a, b = audit_lib.far_point_neighbours(np.full((20, 1), -1.0), BOUNDS, masked=True)
    events = {
        "root >= n+1 and right >= 1": audit_lib.both(
            audit_lib.noisy_count_at_least(1, 21), audit_lib.noisy_count_at_least(3, 1)
        ),
        "root >= n+1": audit_lib.noisy_count_at_least(1, 21),
        "right >= 1": audit_lib.noisy_count_at_least(3, 1),
        "right >= 3": audit_lib.noisy_count_at_least(3, 3),
    }
    mechanism = audit_lib.cluster_mechanism(budget, BOUNDS, COUNT_CONFIG)
    return budget.epsilon, audit_lib.audit(
        jax.random.key(0), mechanism, a, b, events, runs, delta=budget.delta, confidence=confidence
    )


def default_cluster(epsilon: float, runs: int, confidence: float, tau_r: int = 3):
    """Full cluster, paper defaults; two blobs in [-100, 100]^2 +- a point at (100, 100)."""
    budget = dpm_jax.Budget(epsilon, 1e-6)
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(-50, 2, (100, 2)), rng.normal(-20, 2, (100, 2))])
    bounds = (-100.0, 100.0)
    a, b = audit_lib.far_point_neighbours(points, bounds, masked=True)
    events = {
        "root >= n+1": audit_lib.noisy_count_at_least(1, len(points) + 1),
        "root >= n+10": audit_lib.noisy_count_at_least(1, len(points) + 10),
        "k == 1": audit_lib.num_clusters_equals(1),
        "k == 3": audit_lib.num_clusters_equals(3),
        "first split in dim 0": audit_lib.first_split_dim_equals(0),
        "first split above 0": audit_lib.first_split_above(0.0),
        "first split above 50": audit_lib.first_split_above(50.0),
        "centre in [50,100]^2": audit_lib.center_in_box([50.0, 50.0], [100.0, 100.0]),
        "centre in [0,100]^2": audit_lib.center_in_box([0.0, 0.0], [100.0, 100.0]),
    }
    mechanism = audit_lib.cluster_mechanism(budget, bounds, dpm_jax.DPMConfig(tau_r=tau_r))
    return budget.epsilon, audit_lib.audit(
        jax.random.key(1), mechanism, a, b, events, runs, delta=budget.delta, confidence=confidence
    )


def split_step(epsilon: float, runs: int, confidence: float):
    """One split choice from library pieces, public n~ = 72, alpha = 0.01 (see tests)."""
    points = np.concatenate([np.full(66, 0.5), np.full(6, 1.0)]).astype(np.float32)[:, None]
    a, b = points, np.concatenate([points, np.zeros((1, 1), np.float32)])
    mechanism = audit_lib.split_step_mechanism(72, epsilon, 0.125, dpm_jax.DPMConfig(alpha=0.01, split_grid="paper"))
    events = {"a lower candidate": lambda out: out[1] < 4, "candidate 0": lambda out: out[1] == 0}
    return epsilon, audit_lib.audit(
        jax.random.key(2),
        mechanism,
        a,
        b,
        events,
        runs,
        delta=mechanisms.em_sampler_tv(8) * (1 + math.exp(epsilon)),
        confidence=confidence,
    )


def worst_case_exponential(epsilon: float, runs: int, confidence: float):
    """The exponential mechanism on scores that move by exactly +-Delta."""
    sensitivity = 1024
    scores_a = jnp.array([0, round(6 * 1024 / epsilon)], jnp.int32)
    scores_b = scores_a + jnp.array([sensitivity, -sensitivity], jnp.int32)
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def mechanism(key, scores):
        return mechanisms.exponential_mechanism(
            key, table, exact.from_int32(scores[None, :]), jnp.ones((1, 2), bool), epsilon, sensitivity
        )[0]

    return epsilon, audit_lib.audit(
        jax.random.key(3), mechanism, scores_a, scores_b, {"candidate 0": lambda c: c == 0}, runs, confidence=confidence
    )


def discrete_laplace_count(epsilon: float, runs: int, confidence: float):
    """discrete_laplace_count alone on |S| = 10 vs 11, tail events n~ >= 11, 12, 14."""
    mechanism = lambda key, count: exact.to_float32(mechanisms.discrete_laplace_count(key, count, epsilon))
    events = {f"n~ >= {t}": (lambda t: lambda out: out >= t)(t) for t in (11, 12, 14)}
    return epsilon, audit_lib.audit(
        jax.random.key(4), mechanism, jnp.int32(10), jnp.int32(11), events, runs, confidence=confidence
    )


def halved_noise(original):
    return lambda key, epsilon: original(key, 2.0 * np.asarray(epsilon, np.float64))


def reused_across_levels(original):
    def allocate(budget, config, d):
        allocation = original(budget, config, d)
        total = math.fsum(allocation.count_epsilons)
        return allocation._replace(count_epsilons=(total,) * len(allocation.count_epsilons))

    return allocate


def doubled_exponent(original):
    """Delta_f halved, or the factor 2 of Definition 4 dropped: the exponent doubled."""
    return lambda epsilon, sensitivity, ratio=1.0: 2.0 * original(epsilon, sensitivity, ratio)


def float32_sum_construction(epsilon: float, runs: int, confidence: float):
    """cluster (one leaf) on the float32-sum neighbours; events on the released centre."""
    a, b = audit_lib.float32_sum_neighbours()
    budget = dpm_jax.Budget(epsilon, 1e-6)
    exact_centre = (16_383 + 40_000 * 0.3 * 2.0**-10) / (len(a[0]) - 1)
    events = {
        f"centre > exact + {s:g}": (lambda s: lambda r: r.centers[0, 0] > exact_centre + s)(s)
        for s in (-2e-4, 0.0, 2e-4, 4e-4, 8e-4)
    }
    mechanism = audit_lib.cluster_mechanism(budget, (-1.0, 1.0), dpm_jax.DPMConfig(tau_r=1, tau_e=1e9))
    return epsilon, audit_lib.audit(
        jax.random.key(4), mechanism, a, b, events, runs, delta=budget.delta, confidence=confidence, batch_size=256
    )


def float32_leaf_sums(codes, point_mask, point_slot, num_slots):
    """The planted bug: leaf sums accumulated in float32 (the engine before exact sums)."""
    sums = jax.ops.segment_sum(
        jnp.where(point_mask[:, None], codes.astype(jnp.float32), 0.0), point_slot, num_segments=num_slots
    )
    high = jnp.floor(sums / 2.0**30)
    return exact.Int(((sums - high * 2.0**30).astype(jnp.int32), high.astype(jnp.int32)))


def count_addition(epsilon: float, runs: int, confidence: float):
    """The tree's count release (add_count_noise) at counts 2**24 + 1 vs 2**24 + 2."""

    def mechanism(key, count):
        noise = mechanisms.count_noise(key, np.full((1,), epsilon))
        return exact.to_float32(mechanisms.add_count_noise(count[None], noise))[0]

    events = {f"release <= 2**24 + {k}": (lambda k: lambda v: v <= 2.0**24 + k)(k) for k in range(4)}
    return epsilon, audit_lib.audit(
        jax.random.key(5),
        mechanism,
        jnp.int32(2**24 + 1),
        jnp.int32(2**24 + 2),
        events,
        runs,
        delta=mechanisms.count_sampler_tv(epsilon) * (1 + math.exp(epsilon)),
        confidence=confidence,
    )


def float32_count_addition(true_counts, noise):
    """The planted bug: the count added to its noise in float32 (the engine before)."""
    value = jnp.asarray(true_counts).astype(jnp.float32) + exact.to_float32(noise)
    high = jnp.floor(value / 2.0**30)
    return exact.Int(((value - high * 2.0**30).astype(jnp.int32), high.astype(jnp.int32)))


def configurations(runs: int):
    """(name, variant, broken piece or None, function, epsilon, runs)."""
    count, allocate, scale = (mechanisms.count_noise, budget_lib.allocate, mechanisms.em_exponent_scale)
    return [
        ("discrete Laplace count", "library", None, discrete_laplace_count, 1.0, runs),
        ("cluster, count-heavy", "library", None, count_heavy_cluster, 1.0, runs),
        ("cluster, count-heavy", "noise scale halved", (count, halved_noise(count)), count_heavy_cluster, 1.0, runs),
        (
            "cluster, count-heavy",
            "count budget reused across levels",
            (allocate, reused_across_levels(allocate)),
            count_heavy_cluster,
            1.0,
            runs,
        ),
        ("cluster, defaults, tau_r=3", "library", None, default_cluster, 1.0, runs // 2),
        ("cluster, defaults, tau_r=3", "library", None, default_cluster, 0.1, runs // 2),
        ("split step (tree.select_splits)", "library", None, split_step, 1.0, runs),
        ("split step (tree.select_splits)", "Delta_f halved", (scale, doubled_exponent(scale)), split_step, 1.0, runs),
        ("exponential mechanism, worst case", "library", None, worst_case_exponential, 1.0, runs),
        (
            "exponential mechanism, worst case",
            "no factor 2",
            (scale, doubled_exponent(scale)),
            worst_case_exponential,
            1.0,
            runs,
        ),
        ("float32-sum neighbours, cluster", "library", None, float32_sum_construction, 1.0, min(runs, 4096)),
        (
            "float32-sum neighbours, cluster",
            "float32 leaf sums",
            (averaging.leaf_sums, float32_leaf_sums),
            float32_sum_construction,
            1.0,
            min(runs, 4096),
        ),
        ("count at 2**24, add_count_noise", "library", None, count_addition, 1.0, runs),
        (
            "count at 2**24, add_count_noise",
            "float32 count addition",
            (mechanisms.add_count_noise, float32_count_addition),
            count_addition,
            1.0,
            runs,
        ),
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
            with substituted(*broken):
                claimed, result = function(epsilon, runs, args.confidence)
        seconds = time.time() - tick
        best = max(result.per_event, key=lambda e: e.epsilon_lower_bound)
        verdict = "VIOLATION" if result.epsilon_lower_bound > claimed else "ok"
        rows.append(
            dict(
                configuration=name,
                variant=variant,
                claimed_epsilon=claimed,
                best_event=best.name,
                verdict=verdict,
                seconds=round(seconds, 1),
                **result.to_dict(),
            )
        )
        print(
            f"{name:<36}{variant:<34}claimed {claimed:<5g} lower bound "
            f"{result.epsilon_lower_bound:6.3f}  {verdict:<9} ({best.name}; {runs} runs, "
            f"{seconds:.0f}s)",
            flush=True,
        )
    machine = (
        f"{platform.machine()} {os.cpu_count()} cores, {platform.system()}, "
        f"jax {jax.__version__} on {jax.default_backend()}"
    )
    print(f"\nconfidence {args.confidence} (simultaneous over events and directions); {machine}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as handle:
            json.dump(dict(machine=machine, confidence=args.confidence, runs=args.runs, results=rows), handle, indent=1)
    library_ok = all(r["verdict"] == "ok" for r in rows if r["variant"] == "library")
    broken_caught = all(r["verdict"] == "VIOLATION" for r in rows if r["variant"] != "library")
    return 0 if library_ok and broken_caught else 1


if __name__ == "__main__":
    sys.exit(main())
