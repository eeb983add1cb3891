"""``DPMConfig(tau_r="auto")``: the depth chosen inside the program from a noisy count.

The right depth depends on the data size: at n * epsilon = 20,000 seven levels spread
the split budget over levels whose draws are near random, and the top splits, which
matter most, get too little of it (docs/evaluation.md, benchmarks/depth_rule.py). The
size is private (add/remove-one neighbours change it), so choosing the depth from it is
a release:

1. one discrete Laplace count of the points with AUTO_DEPTH_EPSILON_SHARE of epsilon
   (:func:`depth_release`, sensitivity 1, key stream ``keys.DEPTH``);
2. the depth D = :func:`depth_rule` of that noisy count and of the *remaining* budget,
   post-processing: the number of public thresholds (:class:`DepthPlan`) it reaches,
   compared in exact integers, so the choice is a traced int32 and the whole run stays
   one jit/vmap-able program;
3. the run with the allocation of depth D (:func:`dpm_jax.budget.allocate` of the
   remaining budget at tau_r = D), in a tree padded to ``max_depth`` levels whose
   levels from D on split nothing.

Privacy: adaptive sequential composition. The count is (epsilon_depth, tv (1 +
e^epsilon_depth))-DP; every depth's run spends the remaining budget (the count's part is the budget minus it,
an exact subtraction), so for every value of D the ledger (:func:`depth_release`'s line plus the
run's lines at depth D) adds up to the user's budget, never more (float rounding is
absorbed by :func:`dpm_jax.budget.allocate`). Which of the precomputed allocations runs depends only
on the released count.

The rule: :func:`recommended_tau_r` (the deepest tau_r whose levels are all not near
random, Lemma 5's exponent scale: the level arithmetic below, which
:func:`dpm_jax.diagnostics.plan` reports level by level) plus AUTO_DEPTH_SLACK levels,
clipped to [1, max_depth]. The slack is measured (benchmarks/depth_rule.py): on every
case but one of many clusters at n = 5,000 one level deeper than the plan's clusters
best or as well, since the deepest level only splits nodes whose children both reach
tau_e.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact, keys
from dpm_jax.averaging import leaf_sums_release
from dpm_jax.budget import Budget, allocate, validate_budget_and_config
from dpm_jax.dpm_releases import DPMReleases, dpm_releases
from dpm_jax.config import AUTO_DEPTH, DPMConfig
from dpm_jax.mechanisms import count_sampler_tv, tv_delta
from dpm_jax.releases import CountRelease, at_most

__all__ = [
    "FixedDepth",
    "AutoDepth",
    "depth_strategy",
    "plan_depth",
    "depth_rule",
    "exponent_scale",
    "drawable_per_node",
    "near_random",
    "recommended_tau_r",
]

AUTO_DEPTH_EPSILON_SHARE = 0.02  # noise scale 50 / epsilon points: ample for a depth
AUTO_DEPTH_SLACK = 1  # levels beyond recommended_tau_r (benchmarks/depth_rule.py)
_MAX_SAMPLER_SHARE = 0.01  # of delta, as dpm_jax.budget allows the samplers of a run
_MAX_RECOMMENDED_DEPTH = 12


def exponent_scale(split_epsilon: float, node_size: float, offset: float, config: DPMConfig) -> float:
    """B = epsilon_exp / (2 Delta_f), Delta_f = (t/q + alpha) / max(n_node - lambda, 1) (Lemma 5)."""
    return split_epsilon * max(node_size - offset, 1.0) / (2.0 * (config.t / config.q + config.alpha))


def drawable_per_node(d: int, config: DPMConfig) -> int:
    """M: the split candidates a node can draw, d times ``grid_shape.drawable_per_dim`` (the paper's grid
    at its smallest interval size, an upper bound, or the cell grid's 2 max_splits_per_dim - 1 inner
    half-bin boundaries). The split release's ``num_candidates`` is the static axis, d times
    ``candidates_per_dim``."""
    return d * config.grid_shape.drawable_per_dim


def near_random(scale: float, candidates: int, config: DPMConfig) -> bool:
    """B (t + alpha) < ln(M): even the largest score gap cannot outweigh the other candidates."""
    return scale * (config.t + config.alpha) < math.log(candidates)


def level_exponent_scales(n: float, d: int, budget: Budget, config: DPMConfig) -> tuple[float, ...]:
    """B of every split level of a fixed-depth run on ``n`` points under balanced splits (node size
    n / 2**l; :func:`dpm_jax.budget.allocate`'s epsilon_exp and lambda). Raises allocate's ValueError."""
    allocation = allocate(budget, config, d)
    return tuple(
        exponent_scale(allocation.split_epsilons[level], n / 2**level, allocation.count_offsets[level], config)
        for level in range(config.tau_r)
    )


def recommended_tau_r(n: float, d: int, budget: Budget, config: DPMConfig = DPMConfig()) -> int:
    """The largest depth tau_r (<= 12) at which no level is near random; 0 if none.

    A smaller tau_r gives each level more budget, so the search runs over tau_r itself.
    Measured against the depth that clusters best in benchmarks/diagnostics.py (results
    in benchmarks/results/diagnostics.json). Public inputs only.
    """
    best = 0
    candidates = drawable_per_node(d, config)
    for tau_r in range(1, _MAX_RECOMMENDED_DEPTH + 1):
        try:
            scales = level_exponent_scales(n, d, budget, dataclasses.replace(config, tau_r=tau_r))
        except ValueError:  # a budget the exact samplers cannot certify at this depth
            break
        if not any(near_random(scale, candidates, config) for scale in scales):
            best = tau_r
    return best


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
    if rule(exact.MAX_POINTS) < depth:
        return None
    low, high = 1, exact.MAX_POINTS  # rule(high) >= depth
    if rule(low) >= depth:
        return -exact.MAX_POINTS
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if rule(middle) >= depth else (middle, high)
    return high


def depth_release(plan: DepthPlan, depth: int | None = None) -> CountRelease:
    """The depth's count: discrete Laplace with plan.epsilon on the number of points (sensitivity 1,
    key stream ``keys.DEPTH``), charged plan.delta; ``depth`` (the depth it chose) names it in the line."""
    chose = "" if depth is None else f"; chose tau_r={depth} of 1..{plan.deepest}"
    return CountRelease(
        "depth",
        plan.epsilon,
        keys.DEPTH,
        offset_delta=at_most(plan.delta, [plan.sampler_delta], plan.delta - plan.sampler_delta),
        rule=f"count of all points{chose}",
    )


def noisy_size(key: jax.Array, num_points: jax.Array, plan: DepthPlan) -> exact.Int:
    """The depth's release (:func:`depth_release`): the number of points (int32; the True entries
    of the point mask, the rows of a stream) plus discrete Laplace noise of scale 1 / plan.epsilon
    from ``derive_key(key, keys.DEPTH)``, exact. Traceable.
    """
    release = depth_release(plan)
    return release.draw(keys.derive_key(key, release.stream), num_points)


def depth_of(released: exact.Int, plan: DepthPlan) -> jax.Array:
    """int32 D = 1 + the number of thresholds the released count reaches (exact integer comparisons)."""
    count = exact.clip_to_int32(released, -exact.MAX_POINTS, exact.MAX_POINTS)
    reached = [count >= threshold for threshold in plan.thresholds if threshold is not None]
    return 1 + sum((r.astype(jnp.int32) for r in reached), jnp.int32(0))


class FixedDepth(NamedTuple):
    """The depth rule of ``DPMConfig(tau_r=int)``: the paper's fixed depth (Algorithm 1's tau_r)."""

    depth: int

    def releases(self, budget: Budget, config: DPMConfig, d: int) -> tuple[tuple[int, DPMReleases], ...]:
        """The run's releases at its one depth; their lines add up to the budget."""
        allocation = allocate(budget, config, d)
        leaf_sums = leaf_sums_release(allocation.average_epsilon, allocation.average_delta, d)
        return ((self.depth, dpm_releases(allocation, config, d, leaf_sums)),)

    def choose(self, key: jax.Array, num_points: jax.Array) -> jax.Array:
        """int32 the depth (no release)."""
        return jnp.int32(self.depth)


class AutoDepth(NamedTuple):
    """The depth rule of ``DPMConfig(tau_r="auto")``: a noisy count, then the depth of its thresholds."""

    plan: DepthPlan

    def releases(self, budget: Budget, config: DPMConfig, d: int) -> tuple[tuple[int, DPMReleases], ...]:
        """The releases of every depth 1..deepest on the remaining budget, each led by the depth's count."""
        depths = range(1, self.plan.deepest + 1)
        allocations = [allocate(self.plan.remaining, config.at_depth(depth), d) for depth in depths]
        # The leaf sums are drawn before the depth is known to them (one sampler table): every depth
        # averages with the smallest of its allocations' averaging budgets, which differ by at most
        # the ulps allocate rounds them down by, so each ledger still stays within the budget.
        leaf_sums = leaf_sums_release(
            min(a.average_epsilon for a in allocations), min(a.average_delta for a in allocations), d
        )
        return tuple(
            (
                depth,
                dpm_releases(allocation, config.at_depth(depth), d, leaf_sums, count_row=depth - 1)._replace(
                    depth_count=depth_release(self.plan, depth)
                ),
            )
            for depth, allocation in zip(depths, allocations)
        )

    def choose(self, key: jax.Array, num_points: jax.Array) -> jax.Array:
        """int32 the depth of a noisy count of ``num_points`` (:func:`noisy_size`, :func:`depth_of`). Traceable."""
        return depth_of(noisy_size(key, num_points, self.plan), self.plan)


def depth_strategy(budget: Budget, config: DPMConfig, d: int) -> FixedDepth | AutoDepth:
    """The depth rule of ``config``, chosen once: the engine never tests ``tau_r == "auto"`` again."""
    return AutoDepth(plan_depth(budget, config, d)) if config.tau_r == AUTO_DEPTH else FixedDepth(config.tau_r)
