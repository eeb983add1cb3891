"""Lifting the greedy's centres to cluster centres, and the private cost curve
("Making Old Things New", Section 2, Lemma 2.2; Section A.3, the elbow).

The greedy's centres (public once selected) split the data by their Voronoi cells in the
working coordinates. Each cell's size is released with discrete Laplace noise
(:class:`dpm_jax.releases.CountRelease`; the cells are disjoint: L1 sensitivity 1) and
the sum of its points in the original coordinates with the discrete Gaussian on exact
fixed-point sums (:mod:`dpm_jax.averaging`: the same codes, exact sums, coarse shift and
sampler as DPM's leaf centres); the lifted centre is noisy sum / noisy size
(post-processing). The lifting reads the original data, so a projection used for the
selection costs nothing here.

The cost curve: for k' = 1 .. k the clipped cost of the first k' greedy centres in the
working coordinates, sum over points of min(min_c |y - c|, tau)^z with the public clip
tau = COST_RADIUS sqrt(m) (a fraction of the working cube's diameter: a point farther
than tau from every centre counts as uncovered, which is what the elbow looks for, and
the clip bounds the sensitivity). Each point adds the fixed-point code
floor(2**19 min(|y - c| / tau, 1)^z) in [0, 2**19] to each of the k prefix costs: the
k-vector of exact sums has L2 sensitivity 2**19 sqrt(k), the averaging mechanism's with
k coordinates, and is released by it (discrete Gaussian after the coarse shift; privacy
in :mod:`dpm_jax.averaging`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax._arrays import rounded_square
from dpm_jax.averaging import (
    FIXED_POINT_BITS,
    LeafSumsRelease,
    blockwise_leaf_sums,
    centers_from_sums,
    leaf_sums,
    release_leaf_sums,
)
from dpm_jax.releases import CountRelease

__all__ = ["nearest", "squared_distances", "lift_private", "lift_exact", "private_costs", "exact_costs"]

_COST_CODE_MAX = 2 ** (FIXED_POINT_BITS - 1)  # codes in [0, 2**19]: within the averaging's |code| bound
COST_RADIUS = 1.0 / 16.0  # the cost curve's clip, a fraction of the working cube's diameter


def nearest(points: jax.Array, centers: jax.Array) -> jax.Array:
    """(n,) int32 index of every point's nearest centre (the first on ties)."""
    return jnp.argmin(squared_distances(points, centers), axis=1).astype(jnp.int32)


def squared_distances(points: jax.Array, centers: jax.Array) -> jax.Array:
    """(n, k) by a sum over the coordinates (no (n, k, m) intermediate)."""
    return sum(rounded_square(points[:, j][:, None] - centers[:, j][None, :]) for j in range(points.shape[1]))


def cell_counts(slot: jax.Array, point_mask: jax.Array, k: int) -> jax.Array:
    """(k,) exact int32 sizes of the cells."""
    return jnp.zeros(k, jnp.int32).at[slot].add(point_mask.astype(jnp.int32))


def lift_private(
    keys_: tuple[jax.Array, jax.Array],
    X: jax.Array,
    bounds: tuple[jax.Array, jax.Array],
    point_mask: jax.Array,
    slot: jax.Array,
    fallback: jax.Array,
    releases: tuple[CountRelease, LeafSumsRelease, tuple],
) -> tuple[jax.Array, jax.Array]:
    """(centres (k, d) in data units, noisy sizes (k,)): Lemma 2.2 with exact counts and sums.

    ``keys_``: the count release's and the sum release's stream keys. A cell whose
    noisy size is below 1 keeps its ``fallback`` centre (the greedy's, in data units).
    """
    count_release, plan, table_arrays = releases
    lower, upper = bounds
    k = fallback.shape[0]
    sizes = exact.to_float32(count_release.draw(keys_[0], cell_counts(slot, point_mask, k)))
    sums = blockwise_leaf_sums(X, lower, upper, point_mask, slot, k, plan)
    centers = centers_from_sums(keys_[1], sums, sizes, sizes >= 1.0, lower, upper, table_arrays, plan)
    return jnp.where(jnp.isnan(centers), fallback, centers), sizes


def lift_exact(X, point_mask, slot, fallback) -> tuple[jax.Array, jax.Array]:
    """NOT differentially private: the exact means and sizes of the cells (one Lloyd step)."""
    k = fallback.shape[0]
    sizes = cell_counts(slot, point_mask, k)
    sums = jnp.zeros((k, X.shape[1]), jnp.float32).at[slot].add(jnp.where(point_mask[:, None], X, 0.0))
    centers = sums / jnp.maximum(sizes, 1)[:, None]
    return jnp.where(sizes[:, None] > 0, centers, fallback), sizes.astype(jnp.float32)


def cost_codes(points: jax.Array, centers: jax.Array, z: int) -> jax.Array:
    """(n, k) int32 codes of every point's clipped distance^z to the first k' centres, k' = 1 .. k."""
    clip = np.float32(COST_RADIUS * np.sqrt(points.shape[1]))
    prefix = jax.lax.cummin(jnp.sqrt(squared_distances(points, centers)), axis=1)
    scaled = jnp.clip(prefix / clip, 0.0, 1.0) ** z
    return jnp.clip(jnp.floor(scaled * _COST_CODE_MAX), 0, _COST_CODE_MAX).astype(jnp.int32)


def cost_unit(dim: int, z: int) -> float:
    """Working units of one code: tau^z / 2**19."""
    return float((COST_RADIUS * np.sqrt(dim)) ** z) / _COST_CODE_MAX


def private_costs(key, points, point_mask, centers, z: int, plan: LeafSumsRelease, table_arrays) -> jax.Array:
    """(k,) the released prefix costs in working units (the mechanism: averaging's, on k coordinates)."""
    codes = cost_codes(points, centers, z)
    sums = leaf_sums(codes, point_mask, jnp.zeros(points.shape[0], jnp.int32), 1)
    released = release_leaf_sums(key, sums, table_arrays, plan)
    return (exact.to_float32(released)[0] + 0.5) * np.float32(2.0**plan.coarse_shift * cost_unit(points.shape[1], z))


def exact_costs(points, point_mask, centers, z: int) -> jax.Array:
    """NOT differentially private: the exact prefix costs in working units, from the same codes."""
    codes = cost_codes(points, centers, z)
    return jnp.sum(jnp.where(point_mask[:, None], codes, 0).astype(jnp.float32), axis=0) * np.float32(
        cost_unit(points.shape[1], z)
    )
