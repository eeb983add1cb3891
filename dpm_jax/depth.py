"""``DPMConfig(tau_r="auto")``: the depth chosen inside the program from a noisy count.

The right depth depends on the data size: at n * epsilon = 20,000 seven levels spread
the split budget over levels whose draws are near random, and the top splits, which
matter most, get too little of it (docs/evaluation.md, benchmarks/depth_rule.py). The
size is private (add/remove-one neighbours change it), so choosing the depth from it is
a release:

1. one discrete Laplace count of the points with AUTO_DEPTH_EPSILON_SHARE of epsilon
   (:func:`dpm_jax.mechanisms.noisy_count`, sensitivity 1, key stream ``keys.DEPTH``);
2. the depth D = :func:`depth_rule` of that noisy count and of the *remaining* budget,
   post-processing: the number of public thresholds (:class:`DepthPlan`) it reaches,
   compared in exact integers, so the choice is a traced int32 and the whole run stays
   one jit/vmap-able program;
3. the run with the allocation of depth D (:func:`dpm_jax.budget.allocate` of the
   remaining budget at tau_r = D), in a tree padded to ``max_depth`` levels whose
   levels from D on split nothing.

Privacy: adaptive sequential composition. The count is (epsilon_depth, tv (1 +
e^epsilon_depth))-DP; every depth's run spends the remaining budget (the count's part is the budget minus it,
an exact subtraction), so for every value of D the ledger (:func:`ledger_entry` plus the
run's lines at depth D) adds up to the user's budget, never more (float rounding is
absorbed by :func:`dpm_jax.budget.allocate`). Which of the precomputed allocations runs depends only
on the released count.

The rule: :func:`dpm_jax.diagnostics.recommended_tau_r` (the deepest tau_r whose
levels are all not near random, Lemma 5's exponent scale) plus AUTO_DEPTH_SLACK levels,
clipped to [1, max_depth]. The slack is measured (benchmarks/depth_rule.py): on every
case but one of many clusters at n = 5,000 one level deeper than the plan's clusters
best or as well, since the deepest level only splits nodes whose children both reach
tau_e.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact, keys
from dpm_jax.budget import Budget, allocate, validate_budget_and_config
from dpm_jax.config import AUTO_DEPTH, DPMConfig
from dpm_jax.diagnostics import recommended_tau_r
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import count_sampler_tv, noisy_count
from dpm_jax.mechanisms import tv_delta

__all__ = [
    "AUTO_DEPTH_EPSILON_SHARE",
    "AUTO_DEPTH_SLACK",
    "DepthPlan",
    "plan_depth",
    "depth_rule",
    "feasible_depth",
    "noisy_size",
    "depth_of",
    "ledger_entry",
]

AUTO_DEPTH_EPSILON_SHARE = 0.02  # noise scale 50 / epsilon points: ample for a depth
AUTO_DEPTH_SLACK = 1  # levels beyond recommended_tau_r (benchmarks/depth_rule.py)
_MAX_SAMPLER_SHARE = 0.01  # of delta, as dpm_jax.budget allows the samplers of a run
_MAX_COUNT = 2**31 - 1  # dpm_jax.api.MAX_POINTS: thresholds above it are never reached


class DepthPlan(NamedTuple):
    """The public arithmetic of ``tau_r="auto"`` for one (budget, config, d); hashable.

    ``thresholds[i]``: the smallest integer noisy count at which the depth is at least
    i + 2 (None: never, below 2**31), so depth = 1 + the number of thresholds reached.
    """

    epsilon: float  # of the depth's noisy count
    delta: float  # charged for it: at least its sampler's tv (1 + e^epsilon)
    sampler_delta: float  # that tv (1 + e^epsilon)
    remaining: Budget  # what the run after the count spends; epsilon + remaining.epsilon == budget's
    deepest: int  # the deepest depth the rule can pick: max_depth, or less on a small budget
    thresholds: tuple[int | None, ...]


@functools.lru_cache(maxsize=64)
def plan_depth(budget: Budget, config: DPMConfig, d: int) -> DepthPlan:
    """The count's budget, the remaining budget and the depth thresholds (public numbers only)."""
    validate_budget_and_config(budget, config)
    if config.tau_r != AUTO_DEPTH:
        raise ValueError(f"plan_depth is for tau_r={AUTO_DEPTH!r}, got {config.tau_r!r}")
    # The remaining parts are rounded so that part + remaining is the budget exactly: a - b is
    # exact for b in [a/2, a] (Sterbenz), so the ledger's lines never add up to more than it.
    remaining_epsilon = budget.epsilon * (1.0 - AUTO_DEPTH_EPSILON_SHARE)
    epsilon = budget.epsilon - remaining_epsilon
    sampler_delta = tv_delta(count_sampler_tv(epsilon), epsilon)
    if not sampler_delta <= _MAX_SAMPLER_SHARE * budget.delta:  # also: budget.delta - remaining is exact
        raise ValueError(
            f"degenerate budget: at epsilon {budget.epsilon:.4g} the depth count's sampler would need delta "
            f"{sampler_delta:.3g}, more than {_MAX_SAMPLER_SHARE:.0%} of delta {budget.delta:.3g}; lower epsilon, "
            "raise delta, or fix tau_r"
        )
    remaining_delta = budget.delta - sampler_delta
    while budget.delta - remaining_delta < sampler_delta:
        remaining_delta = math.nextafter(remaining_delta, 0.0)
    remaining = Budget(remaining_epsilon, remaining_delta)
    rule = functools.partial(depth_rule, d=d, budget=remaining, config=config)
    thresholds = tuple(_smallest_count_reaching(rule, depth) for depth in range(2, config.max_depth + 1))
    deepest = feasible_depth(remaining, config, d)
    return DepthPlan(epsilon, budget.delta - remaining_delta, sampler_delta, remaining, deepest, thresholds)


def depth_rule(noisy_count: float, d: int, budget: Budget, config: DPMConfig) -> int:
    """The depth ``"auto"`` runs at for a released count: recommended_tau_r + AUTO_DEPTH_SLACK in [1, max_depth].

    Non-decreasing in the count (a larger node size only raises Lemma 5's exponent scale),
    which is what lets :class:`DepthPlan` store it as thresholds.
    """
    recommended = recommended_tau_r(max(float(noisy_count), 1.0), d, budget, config.at_depth(config.max_depth))
    return min(max(recommended + AUTO_DEPTH_SLACK, 1), feasible_depth(budget, config, d))


@functools.lru_cache(maxsize=64)
def feasible_depth(budget: Budget, config: DPMConfig, d: int) -> int:
    """The deepest depth <= max_depth whose allocation :func:`dpm_jax.budget.allocate` accepts.

    Raises allocate's ValueError when not even one level can run on this budget.
    """
    for depth in range(1, config.max_depth + 1):
        try:
            allocate(budget, config.at_depth(depth), d)
        except ValueError:
            if depth == 1:
                raise
            return depth - 1
    return config.max_depth


def _smallest_count_reaching(rule, depth: int) -> int | None:
    """The smallest integer count c with rule(c) >= depth, by bisection; None if none below 2**31.

    The rule reads counts below 1 as 1, so a depth it reaches at 1 is reached by every count
    (the threshold is the smallest count :func:`depth_of` compares, -(2**31 - 1)).
    """
    if rule(_MAX_COUNT) < depth:
        return None
    low, high = 1, _MAX_COUNT  # rule(high) >= depth
    if rule(low) >= depth:
        return -_MAX_COUNT
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if rule(middle) >= depth else (middle, high)
    return high


def noisy_size(key: jax.Array, num_points: jax.Array, plan: DepthPlan) -> exact.Int:
    """The depth's release: the number of points (int32; the True entries of the point mask, the
    rows of a stream) plus discrete Laplace noise of scale 1 / plan.epsilon from
    ``derive_key(key, keys.DEPTH)``, exact.

    Privacy: (plan.epsilon, plan.delta)-DP (:func:`dpm_jax.mechanisms.noisy_count`:
    sensitivity 1, one point changes the count by one). Traceable.
    """
    return noisy_count(keys.derive_key(key, keys.DEPTH), num_points, plan.epsilon)


def depth_of(released: exact.Int, plan: DepthPlan) -> jax.Array:
    """int32 D = 1 + the number of thresholds the released count reaches (exact integer comparisons)."""
    count = exact.clip_to_int32(released, -_MAX_COUNT, _MAX_COUNT)
    reached = [count >= threshold for threshold in plan.thresholds if threshold is not None]
    return 1 + sum((r.astype(jnp.int32) for r in reached), jnp.int32(0))


def ledger_entry(plan: DepthPlan, depth: int) -> LedgerEntry:
    """The count's ledger line (the first of every depth's ledger)."""
    return LedgerEntry(
        "depth",
        "discrete_laplace",
        None,
        plan.epsilon,
        plan.delta,
        1.0,
        f"count of all points; chose tau_r={depth} of 1..{plan.deepest}",
        1.0 / plan.epsilon,
        (keys.DEPTH,),
        sampler_delta=plan.sampler_delta,
    )
