"""DP centres of the leaves (Algorithm 1, line 11): fixed-point codes, exact sums, discrete Gaussian."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import exact
from dpm_jax.averaging import (
    FIXED_POINT_BITS,
    blockwise_leaf_sums,
    fixed_point_codes,
    leaf_centers,
    leaf_sums,
    leaf_sums_release,
    release_leaf_sums,
)
from dpm_jax.mechanisms import cdp_delta, discrete_gaussian_table

_leaf_sums = jax.jit(leaf_sums, static_argnums=3)


def value(a: exact.Int) -> np.ndarray:
    """Python ints (object array) of a two-limb Int."""
    low, high = (np.asarray(limb).astype(object) for limb in a.limbs)
    return low + high * 2**30


def make(values) -> exact.Int:
    values = np.asarray(values, object)
    low = np.vectorize(lambda v: v & (2**30 - 1), otypes=[object])(values)
    high = np.vectorize(lambda v: v >> 30, otypes=[object])(values)
    return exact.Int((jnp.asarray(low.astype(np.int64), jnp.int32), jnp.asarray(high.astype(np.int64), jnp.int32)))


def table_arrays(plan):
    return jnp.asarray(plan.table.thresholds_high), jnp.asarray(plan.table.thresholds_low)


def unit_scale(points, lower, upper):
    """The engine's per-record map to [0, 1] (dpm_jax.api), in float32."""
    points = np.clip(np.asarray(points, np.float32), lower, upper)
    return np.clip((points - np.float32(lower)) / (np.float32(upper) - np.float32(lower)), 0, 1).astype(np.float32)


def expected_codes(unit):
    """round(u 2**20) - 2**19 in exact integer arithmetic (u 2**20 is exact in float64)."""
    return np.round(unit.astype(np.float64) * 2**FIXED_POINT_BITS).astype(np.int64) - 2 ** (FIXED_POINT_BITS - 1)


@pytest.mark.parametrize(
    "lower, upper",
    [
        (np.float32([0.0, 0.0]), np.float32([255.0, 255.0])),
        (np.float32([-3.0, 0.0, 10.0]), np.float32([50.0, 255.0, 11.0])),
    ],
)
def test_leaf_sums_are_exact_sums_of_mid_shifted_codes(lower, upper):
    """Bounds not centred at 0: a sum of raw (or unshifted) points would differ."""
    rng = np.random.default_rng(0)
    n, d, slots = 3000, lower.size, 5
    points = rng.uniform(lower, upper, (n, d)).astype(np.float32)
    points[:5] = lower
    points[5:10] = upper
    points[10:20] = (lower + upper) / 2
    unit = unit_scale(points, lower, upper)
    codes = np.asarray(fixed_point_codes(jnp.asarray(unit)))
    np.testing.assert_array_equal(codes, expected_codes(unit))
    assert codes.min() >= -(2**19) and codes.max() <= 2**19
    assert np.all(codes[:5] == -(2**19)) and np.all(codes[5:10] == 2**19)
    slot = rng.integers(0, slots, n)
    mask = rng.random(n) < 0.9
    sums = _leaf_sums(jnp.asarray(codes), jnp.asarray(mask), jnp.asarray(slot, jnp.int32), slots)
    expected = np.stack([expected_codes(unit)[mask & (slot == s)].sum(0) for s in range(slots)])
    assert value(sums).tolist() == expected.tolist()


def test_leaf_sums_are_bit_identical_under_row_permutation():
    rng = np.random.default_rng(1)
    n, slots = 7000, 6
    codes = rng.integers(-(2**19), 2**19, (n, 3), endpoint=True)
    slot, mask = rng.integers(0, slots, n), rng.random(n) < 0.8
    first = _leaf_sums(jnp.asarray(codes, jnp.int32), jnp.asarray(mask), jnp.asarray(slot, jnp.int32), slots)
    order = rng.permutation(n)
    second = _leaf_sums(
        jnp.asarray(codes[order], jnp.int32), jnp.asarray(mask[order]), jnp.asarray(slot[order], jnp.int32), slots
    )
    for a, b in zip(first.limbs, second.limbs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_float32_binade_attack_moves_the_exact_sum_by_the_added_code_only():
    # Long because: compiles the sums at extreme values (2 s in the fast loop, 2 cores at load 7).
    """d = 1, bounds (-1, 1): 16383 points at +1, then 40000 pairs (+1.2, -0.9) 2**-10.

    D' adds one point at 1.0 first. A sequential float32 sum crosses the binade at
    16384 only in D', where each pair then rounds to +2**-9 instead of 0: the float32
    sums differ by ~80 (>> the point's 1). The exact sums differ by its code, 2**19.
    """
    base = np.concatenate([np.ones(16383), np.tile([1.2 * 2**-10, -0.9 * 2**-10], 40000)]).astype(np.float32)
    added = np.concatenate([np.float32([1.0]), base])
    float_gap = float(np.cumsum(added, dtype=np.float32)[-1]) - float(np.cumsum(base, dtype=np.float32)[-1])
    assert abs(float_gap) > 10  # the attack on float32 summation is real

    def exact_sum(points):
        unit = unit_scale(points[:, None], np.float32(-1.0), np.float32(1.0))
        codes = fixed_point_codes(jnp.asarray(unit))
        n = points.size
        return value(_leaf_sums(codes, jnp.ones(n, bool), jnp.zeros(n, jnp.int32), 1))[0, 0]

    difference = exact_sum(added) - exact_sum(base)
    assert difference == 2**19  # exactly the code of the point at the upper bound
    assert abs(difference) <= 2**19


@pytest.mark.slow
@pytest.mark.parametrize("d", [1, 3, 10])
def test_released_floor_moves_by_at_most_the_sensitivity(d):
    # Long because: compiles the release per dimension (2-3 s in the fast loop, 2 cores at load 7, each).
    """floor(T / 2**s) (release minus the same key's noise) is exact and L2-moves <= plan.sensitivity."""
    rng = np.random.default_rng(2 + d)
    plan = leaf_sums_release(1.0, 1e-6, d)
    s = plan.coarse_shift
    arrays = table_arrays(plan)
    rows = 400
    totals = np.asarray(
        [int(v) >> int(rng.integers(0, 40)) for v in rng.integers(-(2**50), 2**50, rows * d)], object
    ).reshape(rows, d)
    # worst residues: T = 2**s - 1 (mod 2**s), and negative T
    totals[:50] = totals[:50] - (totals[:50] % 2**s) + (2**s - 1)
    totals[50:60] = -(2**50) + 2**s - 1
    change = rng.integers(-(2**19), 2**19, (rows, d), endpoint=True).astype(object)
    change[:100] = 2**19
    change[100:150] = -(2**19)
    change[150:200] = 2**19 - 1
    key = jax.random.key(d)
    zero = release_leaf_sums(key, make(np.zeros((rows, d), object)), arrays, plan)
    noise = value(zero)
    released, released_neighbour = (
        value(release_leaf_sums(key, make(t), arrays, plan)) - noise for t in (totals, totals + change)
    )
    floor = np.vectorize(lambda v: v >> s, otypes=[object])
    assert released.tolist() == floor(totals).tolist()  # floor(T / 2**s), negatives included
    assert released_neighbour.tolist() == floor(totals + change).tolist()
    difference = (released_neighbour - released).astype(np.float64)
    assert np.sqrt((difference**2).sum(1)).max() <= plan.sensitivity
    assert np.abs(difference).max() <= 2 ** (19 - s)


def test_a_small_delta_in_many_dimensions_gets_a_shorter_table_instead_of_a_refusal():
    # 10^6 rows at the paper's delta n^-1.5 in 100 dimensions: the averaging's share (0.588, 8e-10)
    # was refused at sigma 2**14 (sampler 9.6e-11 > 8e-11); a coarser shift serves it.
    default = leaf_sums_release(1.0, 1e-6, 10)
    assert 2.0**13 <= default.sigma <= 2.0**14  # unchanged where the first target fits
    plan = leaf_sums_release(0.588, 8e-10, 100)
    assert plan.sampler_delta <= 0.1 * 8e-10
    assert plan.sampler_delta >= 100 * discrete_gaussian_table(plan.sigma).tv * (1 + math.exp(0.588))
    assert plan.sigma < 2.0**13 and plan.coarse_shift > default.coarse_shift
    rho = 1.0 / (2.0 * plan.multiplier**2)
    assert cdp_delta(rho, 0.588) + plan.sampler_delta <= 8e-10


@pytest.mark.parametrize("epsilon, delta", [(0.05, 1e-9), (0.6, 1e-6), (1.0, 1e-6), (4.0, 1e-7), (10.0, 1e-3)])
def test_leaf_sums_release_pays_for_its_delta(epsilon, delta):
    for d in (1, 3, 10, 40):
        try:
            plan = leaf_sums_release(epsilon, delta, d)
        except ValueError:
            # refused only where the sampler's share is near 1% of delta even at the smallest tv
            tv_floor = 4 * 2**19 / 2.0**62
            assert d * tv_floor * (1 + math.exp(epsilon)) > 0.005 * delta
            continue
        rho = 1.0 / (2.0 * plan.multiplier**2)
        assert cdp_delta(rho, epsilon) + plan.sampler_delta <= delta
        assert plan.sampler_delta <= 0.1 * delta  # leaf_sums_release refuses more (documented)
        table = discrete_gaussian_table(plan.sigma)
        assert plan.sampler_delta >= d * table.tv * (1 + math.exp(epsilon))  # the sampler is paid for
        ratio = 2 ** (FIXED_POINT_BITS - 1 - plan.coarse_shift)
        assert 0 <= plan.coarse_shift <= FIXED_POINT_BITS - 1
        assert plan.sensitivity >= ratio * math.sqrt(d)  # an upper bound of 2**(19-s) sqrt(d)
        assert plan.sensitivity == pytest.approx(ratio * math.sqrt(d), rel=1e-12)
        assert plan.sigma >= 1.0
        assert plan.sigma == pytest.approx(max(1.0, plan.multiplier * plan.sensitivity), rel=1e-12)
        assert plan.sigma >= plan.multiplier * plan.sensitivity
        assert plan.noise_std_unit_range == pytest.approx(plan.sigma * 2.0**plan.coarse_shift / 2**20)


@pytest.mark.slow
def test_centres_equal_leaf_means_when_the_noise_is_tiny():
    # Long because: compiles a whole clustering (10 s, 2 cores at load 12).
    """epsilon 20: the sum's std is ~0.15 range, i.e. ~6e-5 of the range per centre of 2500 points."""
    rng = np.random.default_rng(3)
    lower, upper = np.float32([0.0, -3.0]), np.float32([255.0, 50.0])
    plan = leaf_sums_release(20.0, 0.1, 2)
    n, slots = 10000, 6
    points = rng.uniform(lower, upper, (n, 2)).astype(np.float32)
    points = np.where(rng.random((n, 1)) < 0.5, points, lower + 0.1 * (upper - lower)).astype(np.float32)
    slot = rng.integers(0, 4, n)
    mask = rng.random(n) < 0.95
    counts = np.asarray([np.sum(mask & (slot == s)) for s in range(slots)], np.float32)
    valid = np.asarray([True] * 4 + [False] * 2)
    centers = np.asarray(
        leaf_centers(
            jax.random.key(0),
            jnp.asarray(points),
            jnp.asarray(mask),
            jnp.asarray(slot, jnp.int32),
            jnp.asarray(counts),
            jnp.asarray(valid),
            jnp.asarray(lower),
            jnp.asarray(upper),
            table_arrays(plan),
            plan,
        )
    )
    for s in range(4):
        expected = points[mask & (slot == s)].astype(np.float64).mean(0)
        np.testing.assert_allclose(centers[s], expected, atol=1e-3 * float((upper - lower).max()), rtol=0)
        assert np.all(np.abs(centers[s] - expected) <= 1e-3 * (upper - lower))
    assert np.all(np.isnan(centers[4:]))  # padded slots


@pytest.mark.slow
def test_noise_scale_over_many_keys():
    # Long because: many keys of the leaf-sum noise (3 s in the fast loop, 2 cores at load 7).
    """2000 keys x 8 slots x 3 dims of pure noise: std = plan.sigma 2**s (codes), to 3%.

    The sample std of 48000 draws has relative sd ~0.33%: 3% is ~9 sd (error rate < 1e-18);
    a halved (or 2**s-times smaller) noise scale fails by far.
    """
    d, slots, count = 3, 8, 1e4
    plan = leaf_sums_release(1.0, 1e-6, d)
    arrays = table_arrays(plan)
    keys = jax.random.split(jax.random.key(7), 2000)
    n = 10
    unit = jnp.full((n, d), 0.5)
    mask = jnp.zeros(n, bool)  # every leaf is empty: the release is pure noise
    lower, upper = -jnp.ones(d), jnp.ones(d)

    def release(key):
        sums = leaf_sums(fixed_point_codes(unit), mask, jnp.zeros(n, jnp.int32), slots)
        return release_leaf_sums(key, sums, arrays, plan)

    released = jax.jit(jax.vmap(release))(keys)
    codes = (value(released).astype(np.float64)) * 2.0**plan.coarse_shift
    scale = plan.sigma * 2.0**plan.coarse_shift
    assert np.std(codes) == pytest.approx(scale, rel=0.03)
    assert abs(np.mean(codes)) < 0.05 * scale  # unbiased: the mean's sd is 0.005 scale

    def centre(key):
        return leaf_centers(
            key,
            jnp.zeros((n, d)),
            mask,
            jnp.zeros(n, jnp.int32),
            jnp.full(slots, count),
            jnp.ones(slots, bool),
            lower,
            upper,
            arrays,
            plan,
        )

    centres = np.asarray(jax.jit(jax.vmap(centre))(keys), np.float64)
    # centre = lower + (0.5 + (Q + 1/2) 2**s / 2**20 / n~) (upper - lower): no clipping at this n~
    expected_std = plan.noise_std_unit_range / count * 2.0
    assert np.std(centres) == pytest.approx(expected_std, rel=0.03)
    assert np.all(np.abs(centres) < 1.0)


@pytest.mark.slow
def test_centres_never_leave_the_bounds_in_float32():
    # Long because: compiles the centres at extreme bounds (5 s, 2 cores at load 12).
    """lower + 1 * (upper - lower) rounds one float32 step past ``upper`` for these bounds
    (found by benchmarks/fuzz_campaign.py); the released centre must still be inside."""
    lower, upper = jnp.asarray([-1.09320804], jnp.float32), jnp.asarray([0.09320804], jnp.float32)
    assert float(lower[0] + (upper[0] - lower[0])) > float(upper[0])
    plan = leaf_sums_release(1.0, 1e-6, 1)
    table = plan.table
    n = 50  # every point at the upper bound, a released count of 1: the unit centre clips to 1
    centres = leaf_centers(
        jax.random.key(0),
        jnp.broadcast_to(upper, (n, 1)),
        jnp.ones(n, bool),
        jnp.zeros(n, jnp.int32),
        jnp.asarray([1.0, 0.0]),
        jnp.asarray([True, False]),
        lower,
        upper,
        (jnp.asarray(table.thresholds_high), jnp.asarray(table.thresholds_low)),
        plan,
    )
    assert float(centres[0, 0]) <= float(upper[0]) and float(centres[0, 0]) >= float(lower[0])


@pytest.mark.slow
def test_blockwise_leaf_sums_equal_the_sums_of_all_codes_at_once():
    # Long because: compiles the blockwise sums over many rows (3 s in the fast loop, 2 cores at load 7).
    """Two full blocks of 2**16 rows and a partial one, points outside the bounds included:
    the blockwise sums (codes of one block at a time) are the same integers."""
    rng = np.random.default_rng(11)
    n, d, slots = 2 * 2**16 + 1234, 3, 5
    lower, upper = np.float32([-2.0, 0.0, 10.0]), np.float32([2.0, 1.0, 30.0])
    points = rng.uniform(lower - 1, upper + 1, (n, d)).astype(np.float32)
    mask, slot = rng.random(n) < 0.9, rng.integers(0, slots, n).astype(np.int32)
    release = leaf_sums_release(1.0, 1e-6, d)
    blockwise = jax.jit(blockwise_leaf_sums, static_argnums=(5, 6))(points, lower, upper, mask, slot, slots, release)
    at_once = _leaf_sums(fixed_point_codes(jnp.asarray(unit_scale(points, lower, upper))), mask, slot, slots)
    np.testing.assert_array_equal(value(blockwise), value(at_once))
