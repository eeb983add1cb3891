"""DP centres of the leaves (Algorithm 1, line 11, DPAvg; Section 3.4).

Each leaf's points are shifted to the middle of the public bounds and summed; the
sum gets Gaussian noise and is divided by the leaf's noisy count, which was already
released by the tree (post-processing).

Privacy: adding or removing one point changes exactly one leaf sum, by the shifted
point itself, whose L2 norm is at most ||(hi - lo) / 2||_2 (the half-diagonal of the
bounds box: shifting to the middle halves the sensitivity compared with summing
raw coordinates in a box that contains 0). The leaves are disjoint, so noising every
leaf sum with the analytic Gaussian mechanism (Balle and Wang, 2018) calibrated to
that sensitivity is (epsilon_avg, delta_avg)-DP by parallel composition.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax._arrays import looped_under_vmap
from dpm_jax.mechanisms import gaussian_noise

__all__ = ["bounds_middle", "leaf_sum_sensitivity", "leaf_centers"]


def bounds_middle(lower, upper):
    """The point every coordinate is shifted by before summing: (lower + upper) / 2."""
    return (lower + upper) / 2.0


def leaf_sum_sensitivity(lower, upper):
    """L2 sensitivity of one leaf sum of mid-shifted points, ~ ||(upper - lower)/2||_2.

    Computed as ||max(upper - m, m - lower)||_2 with the same float32 middle m the
    sums use, times (1 + 2**-20): with m rounded, one side of the box can be a few
    ulps longer than half the range, and the margin absorbs the rounding of this
    formula itself. NumPy in, NumPy out (so concrete bounds give a number for the
    ledger); JAX arrays give a JAX scalar.
    """
    xp = np if isinstance(lower, np.ndarray) and isinstance(upper, np.ndarray) else jnp
    lower, upper = xp.asarray(lower, xp.float32), xp.asarray(upper, xp.float32)
    middle = bounds_middle(lower, upper)
    half_width = xp.maximum(upper - middle, middle - lower).astype(xp.float64 if xp is np else xp.float32)
    largest = xp.max(half_width)  # scaled norm: no overflow of the squares for huge ranges
    return largest * xp.sqrt(xp.sum((half_width / largest) ** 2)) * (1.0 + 2.0**-20)


def leaf_centers(key: jax.Array, points: jnp.ndarray, point_mask: jnp.ndarray,
                 point_slot: jnp.ndarray, leaf_count: jnp.ndarray, leaf_valid: jnp.ndarray,
                 lower: jnp.ndarray, upper: jnp.ndarray, sigma_per_unit_sensitivity: float):
    """Noisy centres of all leaf slots; padded slots are NaN.

    Args:
      key: derive_key(key, "average").
      points: (n, d) points already clipped to the bounds.
      point_mask: (n,) bool.
      point_slot: (n,) leaf slot of every point.
      leaf_count, leaf_valid: (slots,) noisy counts and the valid mask.
      lower, upper: (d,) public bounds.
      sigma_per_unit_sensitivity: analytic Gaussian sigma for sensitivity 1 at
        (epsilon_avg, delta_avg); the noise scale is this times the L2 sensitivity.
    Returns:
      (centers (slots, d), noise standard deviation).
    """
    num_slots = leaf_count.shape[0]
    middle = bounds_middle(lower, upper)
    shifted = jnp.where(point_mask[:, None], points - middle, 0.0)
    # A loop under vmap: over keys the points are shared and only the slots differ.
    sums = looped_under_vmap(_leaf_sums, num_slots)(shifted, point_slot)
    sigma = sigma_per_unit_sensitivity * leaf_sum_sensitivity(lower, upper)
    noisy_sums = sums + gaussian_noise(key, sums.shape, sigma)
    centers = middle + noisy_sums / jnp.maximum(leaf_count, 1.0)[:, None]
    centers = jnp.clip(centers, lower, upper)  # post-processing: centres lie in the public box
    return jnp.where(leaf_valid[:, None], centers, jnp.nan), sigma


def _leaf_sums(num_slots: int, shifted, point_slot):
    return jax.ops.segment_sum(shifted, point_slot, num_segments=num_slots)
