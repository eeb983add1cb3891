"""Split interval size estimation (Algorithm 2, Section 3.5, Lemmas 1 and 2).

Runs only with ``DPMConfig(split_grid="paper")``; the default cell grid
(:mod:`dpm_jax.histogram`) needs no interval size.

The paper sorts every dimension, takes the gaps between neighbouring values,
releases their 65th percentile with a DP percentile (sensitivity 2, Lemma 1) and
looks up the sigma of a Gaussian whose gaps have the closest percentile; beta is
sigma*/2. This module computes the same thing as one exponential mechanism over the
public grid of candidate sigmas:

* Reference table without simulation. For n i.i.d. N(0, sigma^2) points the
  number of gaps below y is, to O(1/n), n * integral phi(x) (1 - exp(-n phi(x) y /
  sigma)) dx, so the p-th percentile of the gaps is exactly proportional to
  sigma / n: y_p(sigma, n) = c_p * sigma / n with a universal constant c_p
  (:func:`gaussian_gap_constant`). The authors' Monte-Carlo table (59 sigmas x n
  points x 30 runs) is replaced by this closed form; ``tests/test_interval.py``
  checks it against simulation.

* Integer utility with sensitivity 2 per dimension. With every dimension scaled to
  [0, 1] by the public bounds, let C(y) be the number of neighbour gaps smaller than
  y, summed over the d' dimensions used. Adding or removing one point replaces, in
  each dimension, at most one gap by two (or two by one), so every per-dimension
  count changes by at most 2 (Lemma 1) and C by at most 2 d'. The utility of
  candidate sigma_g is -|C(c_p sigma_g / n~) - round(d' p (n~ - 1))|, an exact
  integer (n~ is already public), with sensitivity 2 d'. This is the average-count
  utility of sensitivity 2 times d', so the exponential mechanism's probabilities
  are the same; summing keeps everything in integers, where float32 averages near
  2**24 had drifted past their sensitivity.

Deviation from Algorithm 2, stated: the paper averages the g-th gap of every
dimension (line 5) before taking the percentile; an average of gaps at the same
sorted index mixes unrelated positions of different dimensions, and one added point
shifts the indices of every later gap in every dimension, so that statistic does not
have sensitivity 2 for d > 1. Averaging the *counts* over dimensions, as here, does.

Every coordinate is first quantised to 2**30 levels of its public range (a
per-record map, so DP is unaffected): integer sorts are several times faster than
float sorts in XLA on CPU. Above ``config.interval_max_dims`` dimensions a random,
data-independent subset of dimensions is sorted (the sort dominates the run time
at d = 100); the counts are averaged over that subset, which keeps sensitivity 2.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax._arrays import divide, looped_under_vmap, reciprocal
from dpm_jax.config import DPMConfig
from dpm_jax.mechanisms import exponential_mechanism
from dpm_jax.releases import SelectionRelease

__all__ = [
    "gaussian_gap_constant",
    "interval_dimensions",
    "num_interval_dimensions",
    "utility_sensitivity",
    "gap_histogram",
    "quantised",
    "counts_from_gap_histogram",
    "first_gap_threshold",
    "select_interval_size",
    "estimate_split_interval_size",
]

PERCENTILE_SENSITIVITY = 2  # Lemma 1, per dimension
_UTILITY_UNITS = 2**10
_QUANTISATION_LEVELS = 2**30
_SENTINEL = np.int32(2**31 - 1)


@functools.lru_cache(maxsize=None)
def gaussian_gap_constant(percentile: float) -> float:
    """c_p with: the p-th percentile of neighbour gaps of n N(0, s^2) points ~ c_p s / n.

    Solves integral phi(x) (1 - exp(-c phi(x))) dx = p / 100 by bisection.
    """
    x = np.linspace(-12.0, 12.0, 200_001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    dx = x[1] - x[0]
    target = percentile / 100.0

    def fraction_below(c):
        return float(np.sum(phi * -np.expm1(-c * phi)) * dx)

    low, high = 0.0, 1.0
    while fraction_below(high) < target:
        high *= 2.0
    for _ in range(100):
        mid = 0.5 * (low + high)
        if fraction_below(mid) < target:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def gap_counts_below(
    unit_points: jnp.ndarray, point_mask: jnp.ndarray, threshold_step, num_thresholds: int
) -> exact.Int:
    """C(y_g) for y_g = threshold_step * g, g = 1..num_thresholds (an arithmetic grid).

    C(y) is the number of neighbour gaps smaller than y, *summed* over the
    dimensions, exact (an integer below d 2**31, two limbs). Each gap is bucketed by
    one division (its first threshold above it): a fixed function of that gap, so
    the count changes exactly as the set of gaps does. One histogram per dimension
    gives all counts: no search over the thresholds.

    Args:
      unit_points: (n, d) points scaled to [0, 1] per dimension.
      point_mask: (n,) bool, False for padding points (ignored).
      threshold_step: y_1, in the same unit scale (may be traced).
      num_thresholds: G (static).
    Returns:
      (G,) exact counts (:class:`dpm_jax.exact.Int`).
    """
    n, d = unit_points.shape
    levels = sorted_levels(unit_points, point_mask)
    real_gaps = jnp.arange(n - 1) < jnp.sum(point_mask) - 1
    # The sort depends on the data only, so under vmap over keys it is shared; the
    # bucketing depends on the key (through n~) and runs as a loop over the batch.
    histogram = looped_under_vmap(gap_histogram, num_thresholds)(levels, real_gaps, threshold_step)
    return counts_from_gap_histogram(histogram)


def counts_from_gap_histogram(histogram: jax.Array) -> exact.Int:
    """C(y_g), g = 1..G, summed over the dimensions, from (d, G + 2) :func:`gap_histogram` counts."""
    per_dimension = exact.exact_cumsum(histogram)[:, 1:-1]  # (d, G), each below 2**31
    return exact.tree_total(per_dimension)


def sorted_levels(unit_points: jnp.ndarray, point_mask: jnp.ndarray) -> jnp.ndarray:
    """(d, n) int32: every dimension's quantised coordinates, sorted; padding points last.

    One sort per dimension, each written into one buffer: the peak memory of the
    sorts is that buffer plus a column or two (all columns as one sort operand, a copy
    per group of sorts and their concatenation had cost three times the data's size).
    Unrolled, not a loop: a loop's operand would be a materialised copy of the
    scaled points, which XLA otherwise computes inside each column's fusion.
    Its neighbour differences are the gaps of Algorithm 2, in quantisation levels
    (:func:`gap_histogram`).
    """
    n, d = unit_points.shape
    ordered = jnp.zeros((d, n), jnp.int32)
    after_previous = _SENTINEL
    for dim in range(d):
        levels = quantised(unit_points[:, dim])
        # min(levels, x | _SENTINEL) = levels for the sorted values x >= 0 of the previous
        # dimension: a data dependence only, so that XLA builds each column after the
        # previous sort instead of all columns at once (d columns alive at the peak).
        column = jnp.where(point_mask, jnp.minimum(levels, after_previous), _SENTINEL)
        ordered = ordered.at[dim].set(jnp.sort(column))
        after_previous = ordered[dim, -1] | _SENTINEL
    return ordered


def quantised(unit_coordinates: jax.Array) -> jax.Array:
    """int32 quantisation levels of coordinates in [0, 1]: 2**30 levels of the public range, the
    values Algorithm 2 sorts (:func:`sorted_levels`; streamed, a column at a time)."""
    return jnp.floor(unit_coordinates * _QUANTISATION_LEVELS).astype(jnp.int32)


def gap_histogram(num_thresholds: int, levels, real_gaps, threshold_step):
    """(d, G + 2) int32 counts of the gaps of every dimension by their first threshold above.

    One dimension at a time (the bucket indices of all n d gaps would cost twice the
    data's size); gap < y_g = g y_1  <=>  g > gap / y_1  <=>  g >= floor(gap / y_1) + 1, with
    gap / y_1 computed as gap * (1 / y_1) (:func:`dpm_jax._arrays.reciprocal`): a fixed function of the gap.
    """
    d = levels.shape[0]
    inverse_step = reciprocal(threshold_step * _QUANTISATION_LEVELS)  # not a division: see reciprocal

    def count_dimension(dim, histogram):
        row = jax.lax.dynamic_index_in_dim(levels, dim, axis=0, keepdims=False)
        gaps = (row[1:] - row[:-1]).astype(jnp.float32)
        first_threshold_above = jnp.floor(gaps * inverse_step) + 1.0
        bucket = jnp.where(
            real_gaps, jnp.minimum(first_threshold_above, num_thresholds + 1), num_thresholds + 1
        ).astype(jnp.int32)
        counts = jnp.zeros(num_thresholds + 2, jnp.int32).at[bucket].add(1)
        return jax.lax.dynamic_update_index_in_dim(histogram, counts, dim, axis=0)

    return jax.lax.fori_loop(0, d, count_dimension, jnp.zeros((d, num_thresholds + 2), jnp.int32))


def interval_dimensions(key: jax.Array, d: int, max_dims: int | None) -> jnp.ndarray | None:
    """The dimensions Algorithm 2 sorts: all, or ``max_dims`` drawn without replacement.

    The draw uses only the key, never the data, so the choice is public.
    """
    if num_interval_dimensions(d, max_dims) == d:
        return None
    return jax.random.choice(key, d, (max_dims,), replace=False)


def _integer_from_float32(value: jax.Array) -> exact.Int:
    """round(value) for a float32 0 <= value < 2**60, exactly, as a two-limb Int."""
    value = jnp.round(value)
    high = jnp.floor(value / np.float32(2.0**exact.LIMB_BITS))
    low = value - high * np.float32(2.0**exact.LIMB_BITS)  # exact: a multiple of value's ulp
    return exact.Int((low.astype(jnp.int32), high.astype(jnp.int32)))


def interval_utility(counts: exact.Int, noisy_count, percentile: float, num_dims: int) -> exact.Int:
    """-|C(y_g) - d' p (n~ - 1)| 2**10, exact; sensitivity 2 d' 2**10 (:func:`utility_sensitivity`).

    The target d' p (n~ - 1) is rounded to an integer: it is public (n~ is
    released), so its rounding changes nothing about the sensitivity.
    """
    target = _integer_from_float32(percentile / 100.0 * (jnp.maximum(noisy_count, 2.0) - 1.0) * num_dims)
    difference = exact.subtract(
        counts, exact.Int(tuple(jnp.broadcast_to(limb, counts.limbs[0].shape) for limb in target.limbs))
    )
    magnitude = exact.where(difference.limbs[-1] < 0, exact.negate(difference), difference)
    # In units of 2**-10 (|utility| < 2**46): keeps the exponential mechanism's scale
    # per unit small, where its exact sampler represents it (dpm_jax.mechanisms).
    return exact.negate(exact.narrow(exact.mul_small(magnitude, _UTILITY_UNITS), 2))


def num_interval_dimensions(d: int, max_dims: int | None) -> int:
    """d', the number of dimensions Algorithm 2 uses (public: it depends on d and the config)."""
    return d if max_dims is None else min(d, max_dims)


def utility_sensitivity(num_dims: int) -> int:
    """Lemma 1 per dimension (2), summed over the d' dimensions Algorithm 2 uses, in units of 2**-10."""
    return PERCENTILE_SENSITIVITY * num_dims * _UTILITY_UNITS


def estimate_split_interval_size(
    key: jax.Array,
    em_table,
    unit_points: jnp.ndarray,
    point_mask: jnp.ndarray,
    noisy_count,
    release: SelectionRelease,
    config: DPMConfig,
):
    """Algorithm 2: a DP choice of sigma* from the sigma grid; returns (beta, index).

    Privacy: one exponential mechanism (:func:`dpm_jax.mechanisms.exponential_mechanism`)
    with ``release``'s epsilon and sensitivity (the integer utility's, 2 d' gap counts,
    Lemma 1, see the module docstring): (epsilon, sampler delta)-DP, its ledger line
    ``release.entry()``. ``noisy_count`` is the released root count
    (post-processing, Lemma 2). The key is split into (dimension choice, selection).

    Returns:
      beta = max(interval_factor * sigma*, 1 / max_splits_per_dim) as a fraction of
      each dimension's range (scalar), and the chosen grid index.
    """
    dims_key, select_key = jax.random.split(key)
    dims = interval_dimensions(dims_key, unit_points.shape[1], config.interval_max_dims)
    if dims is not None:
        unit_points = unit_points[:, dims]
    counts = gap_counts_below(unit_points, point_mask, first_gap_threshold(noisy_count, config), config.num_sigmas)
    return select_interval_size(select_key, em_table, counts, noisy_count, release, unit_points.shape[1], config)


def first_gap_threshold(noisy_count, config: DPMConfig):
    """y_1 = c_p sigma_step / n~: the first gap threshold, in units of the range (public: n~ is released)."""
    return divide(gaussian_gap_constant(config.percentile) * config.sigma_step, jnp.maximum(noisy_count, 2.0))


def select_interval_size(
    key: jax.Array,
    em_table,
    counts: exact.Int,
    noisy_count,
    release: SelectionRelease,
    num_dims: int,
    config: DPMConfig,
):
    """The mechanism of Algorithm 2 on the exact gap counts C(y_g) of ``num_dims`` dimensions:
    (beta, index) (:func:`estimate_split_interval_size`)."""
    utility = interval_utility(counts, noisy_count, config.percentile, num_dims)
    index = exponential_mechanism(
        key,
        em_table,
        exact.Int(tuple(limb[None] for limb in utility.limbs)),
        jnp.ones((1, config.num_sigmas), bool),
        release.epsilon,
        release.sensitivity,
    )[0]
    sigma = config.sigma_step * (index + 1).astype(jnp.float32)
    # Post-processing: never more than max_splits_per_dim candidates per dimension.
    beta = jnp.maximum(config.interval_factor * sigma, 1.0 / config.max_splits_per_dim)
    return beta, index
