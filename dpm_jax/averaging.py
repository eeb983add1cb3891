"""DP centres of the leaves (Algorithm 1, line 11, DPAvg; Section 3.4), in exact arithmetic.

Each coordinate is mapped to the unit range of its public bounds, shifted to the
middle and rounded to a fixed-point *code* c in [-2**19, 2**19] (a per-record map,
so DP is unaffected; resolution 2**-20 of the range). A leaf's codes are summed in
exact integer arithmetic (:mod:`dpm_jax.exact`): the sum T does not depend on the
order of the points, on chunking or on sharding, and one added or removed point
changes it by exactly that point's code vector, whose L2 norm is at most
2**19 sqrt(d) (the half-diagonal of the unit box: shifting to the middle halves
the sensitivity compared with summing raw coordinates).

Release: Q = floor(T / 2**s) + Z with Z ~ N_Z(0, sigma^2) per coordinate (the
discrete Gaussian, :func:`dpm_jax.mechanisms.discrete_gaussian_noise`); integer
plus integer, nothing rounded. A coordinate's change |v| <= 2**19 moves floor(T / 2**s)
by at most r = 2**(19 - s) (floor(a) - floor(b) < a - b + 1 and is an integer), so
the released vector's L2 sensitivity is r sqrt(d), exactly the sensitivity of T in
units of 2**s: the coarse step costs no privacy. s is public (it depends on epsilon,
delta and d only) and chosen so that sigma = multiplier * r sqrt(d) stays near 2**10
(or a smaller power of 2 where a small delta needs it, :func:`leaf_sums_release`),
which keeps the sampler's table small; the released sum's resolution 2**s is then
about 1/sigma of its noise. The centre (Q + 1/2) 2**s / 2**20 / n~ of the
leaf's noisy count n~ (already released by the tree) is post-processing.

Privacy: the leaves are disjoint, so one point changes one leaf's vector; the
discrete Gaussian with sigma = multiplier * sensitivity is rho-zCDP with
rho = 1 / (2 multiplier^2) and hence (epsilon_avg, delta_cdp)-DP
(:func:`dpm_jax.mechanisms.discrete_gaussian_multiplier`); the sampler's table is
within total variation ``table.tv`` of N_Z per coordinate, which adds
delta_sampler = d tv (1 + e^epsilon_avg). delta_cdp + delta_sampler = delta_avg.
Maximum n: 2**31 - 1 points (int32 counts; the sums hold up to 2**50).
"""

from __future__ import annotations

import functools

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact, keys
from dpm_jax._arrays import divide, fold_row_blocks, looped_under_vmap, to_unit_range, unfused_multiply_add
from dpm_jax.ledger import LedgerEntry
from dpm_jax.releases import ledger_line
from dpm_jax.mechanisms import (
    DiscreteGaussianTable,
    discrete_gaussian_multiplier,
    discrete_gaussian_noise,
    discrete_gaussian_table,
    tv_delta,
)

__all__ = ["LeafSumsRelease", "leaf_sums_release", "leaf_centers", "blockwise_leaf_sums", "centers_from_sums"]

FIXED_POINT_BITS = 20
_CODE_HALF_RANGE = 2 ** (FIXED_POINT_BITS - 1)
_CHUNK = 2**10  # a chunk's sum of codes stays within 2**29 in magnitude
# sigma of the leaf sums' noise in units of 2**s codes, tried in order (leaf_sums_release).
_TARGET_SIGMAS = (2.0**10, 2.0**8, 2.0**6)
_BLOCK_ROWS = 2**16  # rows whose codes exist at once (a multiple of _CHUNK)


class LeafSumsRelease(NamedTuple):
    """The leaf sums' release: its public parameters (they depend on epsilon, delta, d only),
    its draw (:func:`release_leaf_sums`) and its ledger line (:meth:`entry`), side by side.

    Privacy (module docstring): codes shifted to the middle by ``code_offset`` have L2 norm
    at most code_offset sqrt(d), so floor(T / 2**s) moves by at most ``sensitivity`` =
    2**(19 - s) sqrt(d) in L2 when ``code_offset`` = 2**19; N_Z(0, sigma^2) with sigma =
    multiplier sensitivity is (epsilon, delta - sampler_delta)-DP through zCDP.
    """

    epsilon: float
    delta: float  # includes the sampler's delta
    coarse_shift: int  # s: the released integer is floor(T / 2**s) + Z
    sensitivity: float  # L2 sensitivity of floor(T / 2**s): 2**(19 - s) sqrt(d)
    multiplier: float  # sigma / sensitivity (zCDP calibration)
    sigma: float  # of the discrete Gaussian, in units of 2**s codes
    sampler_delta: float  # d tv (1 + e^epsilon): the sampler's share of delta
    code_offset: int = _CODE_HALF_RANGE  # the mid-shift: codes are round(u 2**20) - code_offset
    name: str = "leaf_sums"
    stream: str = keys.AVERAGE

    @property
    def table(self) -> DiscreteGaussianTable:
        return discrete_gaussian_table(self.sigma)

    @property
    def noise_std_unit_range(self) -> float:
        """Standard deviation of a noisy leaf sum in units of the bounds' range."""
        return self.sigma * 2.0**self.coarse_shift / 2.0**FIXED_POINT_BITS

    def codes(self, unit_points: jax.Array) -> jax.Array:
        """(n, d) int32 codes of points u in [0, 1]: round(u 2**20) clipped, minus the mid-shift."""
        return fixed_point_codes(unit_points, self.code_offset)

    def entry(self) -> LedgerEntry:
        """The ledger line of :func:`release_leaf_sums` with this release's parameters."""
        rule = f"L2 of fixed-point sums / 2**{self.coarse_shift}"
        return ledger_line(self, "discrete_gaussian", self.delta, self.sensitivity, rule, self.sigma)


@functools.lru_cache(maxsize=64)
def leaf_sums_release(epsilon: float, delta: float, d: int) -> LeafSumsRelease:
    """Calibrate the leaf-sum release to (epsilon, delta) for d dimensions (host side).

    The first of :data:`_TARGET_SIGMAS` whose sampler costs at most a tenth of delta: a
    smaller sigma (a coarser shift s) means a shorter table and a smaller total variation
    (:func:`dpm_jax.mechanisms.discrete_gaussian_table`), so a small delta in many dimensions
    (e.g. 10^7 rows at delta = n^-1.5 in 100 dimensions) is served instead of refused; the
    noise in units of the range is the same, and the rounding of floor(T / 2**s), under one
    unit, adds at most 1 / (12 sigma^2) to the noise's variance (relative).
    """
    costs = []
    for target in _TARGET_SIGMAS:
        release, sampler_delta = _calibrated(epsilon, delta, d, target)
        if release is not None:
            return release
        costs.append(sampler_delta)
    raise ValueError(
        f"epsilon is too large for the exact sampler of the leaf sums: its proven error, charged to "
        f"delta and growing like e^epsilon, would be {min(costs):.3g} at the averaging mechanism's "
        f"epsilon = {epsilon:.3g}, more than 10% of its delta share {delta:.3g}; use a smaller "
        "epsilon or a larger delta"
    )


def _calibrated(epsilon: float, delta: float, d: int, target_sigma: float) -> tuple[LeafSumsRelease | None, float]:
    """(the release with sigma near ``target_sigma``, its sampler's delta), or (None, that delta)
    where the sampler would cost more than a tenth of delta."""
    root_d = math.sqrt(d) * (1.0 + 2.0**-50)  # rounded up: the sensitivity is an upper bound
    sampler_delta = 0.0
    for _ in range(10):  # the sampler's delta depends (weakly) on the table it needs
        if sampler_delta > 0.1 * delta:
            return None, sampler_delta
        multiplier = discrete_gaussian_multiplier(epsilon, delta - sampler_delta)
        ratio = 2 ** int(np.clip(math.floor(math.log2(target_sigma / (multiplier * root_d))), 0, FIXED_POINT_BITS - 1))
        sensitivity = ratio * root_d
        table = discrete_gaussian_table(max(1.0, multiplier * sensitivity))
        needed = tv_delta(d * table.tv, epsilon) * (1.0 + 1e-6)
        if needed <= sampler_delta:
            break
        sampler_delta = needed
    else:
        raise ValueError(f"the averaging delta {delta:.3g} cannot pay for its sampler at d = {d}")
    shift = FIXED_POINT_BITS - 1 - int(math.log2(ratio))
    return LeafSumsRelease(epsilon, delta, shift, sensitivity, multiplier, table.sigma, sampler_delta), sampler_delta


def fixed_point_codes(unit_points: jax.Array, code_offset: int = _CODE_HALF_RANGE) -> jax.Array:
    """(n, d) int32 codes round(u 2**20) - code_offset of points u in [0, 1] (in [-2**19, 2**19]
    for the mid-shift 2**19)."""
    codes = jnp.round(unit_points * np.float32(2**FIXED_POINT_BITS)).astype(jnp.int32)
    return jnp.clip(codes, 0, 2**FIXED_POINT_BITS) - code_offset


def leaf_sums(codes: jax.Array, point_mask: jax.Array, point_slot: jax.Array, num_slots: int) -> exact.Int:
    """Exact sums of the codes of every leaf slot, (num_slots, d) two-limb integers.

    Chunks of 2**10 points are summed by one int32 scatter-add (no chunk sum can
    leave int32), the chunk sums by an exact pairwise tree; under ``jax.vmap`` a loop
    over the batch (the points are shared across keys, only the slots differ).
    """
    return looped_under_vmap(_leaf_sums, num_slots)(codes, point_mask, point_slot)


def _leaf_sums(num_slots: int, codes, point_mask, point_slot):
    segment = jnp.where(point_mask, point_slot, num_slots)
    return exact.tree_total(exact.chunk_totals(codes, segment, num_slots, _CHUNK))


def _floor_shift(value: exact.Int, shift: int) -> exact.Int:
    """floor(value / 2**shift) for signed two-limb values, exactly."""
    positive = exact.shift_right(value, shift)
    magnitude = exact.add(exact.negate(value), exact.from_int32(jnp.int32(2**shift - 1)))
    negative = exact.negate(exact.shift_right(magnitude, shift))
    is_negative = value.limbs[-1] < 0
    return exact.Int(tuple(jnp.where(is_negative, n, p) for p, n in zip(positive.limbs, negative.limbs)))


def release_leaf_sums(key: jax.Array, sums: exact.Int, table_arrays, plan: LeafSumsRelease) -> exact.Int:
    """The mechanism: floor(T / 2**s) + Z, Z ~ N_Z(0, sigma^2) i.i.d. per entry (exact integers).

    Sensitivity (L2, per leaf): ``plan.sensitivity``; privacy: see the module docstring.
    """
    thresholds_high, thresholds_low = table_arrays
    noise = discrete_gaussian_noise(key, thresholds_high, thresholds_low, plan.table.support_min, sums.limbs[0].shape)
    return exact.add(_floor_shift(sums, plan.coarse_shift), exact.from_int32(noise))


def leaf_centers(
    key: jax.Array,
    points: jax.Array,
    point_mask: jax.Array,
    point_slot: jax.Array,
    leaf_count: jax.Array,
    leaf_valid: jax.Array,
    lower: jax.Array,
    upper: jax.Array,
    table_arrays,
    plan: LeafSumsRelease,
    strided_rows: bool = False,
) -> jax.Array:
    """Noisy centres of all leaf slots in data units; padded slots are NaN.

    Args:
      key: derive_key(key, "average").
      points: (n, d) points in data units (clipped to the bounds here).
      point_mask: (n,) bool.
      point_slot: (n,) leaf slot of every point.
      leaf_count, leaf_valid: (slots,) released noisy counts and the valid mask.
      lower, upper: (d,) public bounds.
      table_arrays: (thresholds_high, thresholds_low) of ``plan.table`` on the device.
      plan: :func:`leaf_sums_release`.
      strided_rows: the rows are sharded over devices (:func:`blockwise_leaf_sums`).
    """
    num_slots = leaf_count.shape[0]
    sums = blockwise_leaf_sums(points, lower, upper, point_mask, point_slot, num_slots, plan, strided_rows)
    return centers_from_sums(key, sums, leaf_count, leaf_valid, lower, upper, table_arrays, plan)


def blockwise_leaf_sums(
    points: jax.Array,
    lower: jax.Array,
    upper: jax.Array,
    point_mask: jax.Array,
    point_slot: jax.Array,
    num_slots: int,
    release: LeafSumsRelease,
    strided_rows: bool = False,
) -> exact.Int:
    """:func:`leaf_sums` of the release's codes of ``points`` (data units), _BLOCK_ROWS rows at a time.

    The codes of only one block exist at once (those of all n points would be a
    copy of the data); exact sums of the blocks' exact sums equal the sum at once, whatever
    the blocks (:func:`dpm_jax._arrays.fold_row_blocks`; with ``strided_rows``, strided, so rows
    sharded over devices stay on their devices).
    """

    def add_block(total, fresh, points, mask, slot):
        codes = release.codes(to_unit_range(points, lower, upper))
        return exact.add(total, leaf_sums(codes, mask & fresh, slot, num_slots))

    total = exact.from_int32(jnp.zeros((num_slots, points.shape[1]), jnp.int32))
    per_row = (points, point_mask, point_slot)
    return fold_row_blocks(add_block, total, _BLOCK_ROWS, *per_row, strided=strided_rows)


def centers_from_sums(
    key: jax.Array,
    sums: exact.Int,
    leaf_count: jax.Array,
    leaf_valid: jax.Array,
    lower: jax.Array,
    upper: jax.Array,
    table_arrays,
    plan: LeafSumsRelease,
) -> jax.Array:
    """The mechanism on exact leaf sums (:func:`release_leaf_sums`), then centres in data units."""
    released = release_leaf_sums(key, sums, table_arrays, plan)
    # Post-processing of released integers from here on.
    noisy_sum = (exact.to_float32(released) + 0.5) * np.float32(2.0**plan.coarse_shift)
    unit_centers = np.float32(plan.code_offset / 2**FIXED_POINT_BITS) + divide(
        noisy_sum / np.float32(2**FIXED_POINT_BITS), jnp.maximum(leaf_count, 1.0)[:, None]
    )
    # The second clip: lower + u (upper - lower) can round one float32 step past upper.
    centers = jnp.clip(unfused_multiply_add(jnp.clip(unit_centers, 0.0, 1.0), upper - lower, lower), lower, upper)
    return jnp.where(leaf_valid[:, None], centers, jnp.nan)
