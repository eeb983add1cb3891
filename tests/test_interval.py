"""Split interval size estimation (Algorithm 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import DPMConfig, exact, keys
from dpm_jax.mechanisms import em_weight_table
from dpm_jax.interval import (
    estimate_split_interval_size,
    gap_counts_below,
    gaussian_gap_constant,
    interval_dimensions,
    utility_sensitivity,
)
from dpm_jax.releases import SelectionRelease


@pytest.mark.parametrize("n", [2_000, 50_000])
def test_gaussian_gap_constant_matches_simulation(n):
    """The 65th percentile of neighbour gaps of n N(0, s^2) points is c s / n.

    Monte Carlo over 20 samples: the relative standard error of the mean percentile
    is below 0.3% here; the 3% tolerance also absorbs the O(1/n) bias.
    """
    rng = np.random.default_rng(0)
    sigma = 3.0
    percentiles = [np.percentile(np.diff(np.sort(rng.normal(0, sigma, n))), 65) for _ in range(20)]
    predicted = gaussian_gap_constant(65.0) * sigma / n
    assert np.mean(percentiles) == pytest.approx(predicted, rel=0.03)


def exact_values(value: exact.Int) -> list[int]:
    low, high = (np.asarray(limb).astype(object) for limb in value.limbs)
    return [int(x) for x in low + high * 2**30]


def test_gap_counts_below_equals_brute_force():
    rng = np.random.default_rng(1)
    points = rng.uniform(0, 1, (300, 4)) ** 2  # uneven spacing
    points[:5] = points[5]  # duplicates: zero gaps
    mask = np.ones(300, bool)
    mask[-40:] = False  # padding points are ignored
    step, count = 0.0013, 12
    got = exact_values(gap_counts_below(jnp.asarray(points, jnp.float32), jnp.asarray(mask), step, count))
    real = points[mask]
    quantised = np.floor(real.astype(np.float32) * 2**30).astype(np.int64)
    gaps = np.diff(np.sort(quantised, axis=0), axis=0) / 2**30
    expected = [int(np.sum(gaps < step * g)) for g in range(1, count + 1)]  # summed over dims
    assert got == expected


@pytest.mark.slow
def test_gap_counts_below_with_grouped_sorts_and_under_vmap():
    # 20 dimensions: more than the 16 sort groups, so groups hold several rows; under
    # vmap over the threshold step (as over keys: n~ differs) each member is exact.
    # Long because: compiles the grouped sorts under vmap (5 s in the fast loop, 2 cores at load 8).
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 1, (150, 20)) ** 3
    mask = np.ones(150, bool)
    steps, count = np.asarray([0.0004, 0.001, 0.003], np.float32), 9
    batched = jax.vmap(lambda step: gap_counts_below(jnp.asarray(points, jnp.float32), jnp.asarray(mask), step, count))(
        jnp.asarray(steps)
    )
    quantised = np.floor(points.astype(np.float32) * 2**30).astype(np.int64)
    gaps = np.diff(np.sort(quantised, axis=0), axis=0) / 2**30
    for member, step in enumerate(steps):
        row = exact_values(exact.Int(tuple(limb[member] for limb in batched.limbs)))
        assert row == [int(np.sum(gaps < step * g)) for g in range(1, count + 1)]


@pytest.mark.slow
def test_estimate_finds_the_sigma_of_gaussian_data():
    # Long because: Algorithm 2 on several sigmas at a sample size where the percentile is stable (~11 s).
    """Data from N(0.5, 0.04^2): sigma* should be the grid value 0.04 (relative).

    With epsilon = 50 the exponential mechanism concentrates on the best grid
    value; the assertion allows the two neighbours (probability of a larger error
    < 1e-6 by the utility gap of several hundred ranks).
    """
    rng = np.random.default_rng(2)
    points = jnp.asarray(rng.normal(0.5, 0.04, (20_000, 3)), jnp.float32)
    config = DPMConfig(sigma_step=0.005, num_sigmas=20)
    table = tuple(jnp.asarray(part) for part in em_weight_table())
    beta, index = estimate_split_interval_size(
        jax.random.key(0), table, points, jnp.ones(20_000, bool), 20_000.0, _interval_release(50.0, 3, config), config
    )
    assert abs(int(index) - 7) <= 1  # sigma = 0.005 * (index + 1) = 0.04
    assert float(beta) == pytest.approx(0.5 * 0.005 * (int(index) + 1))


def _interval_release(epsilon, num_dims, config):
    return SelectionRelease("interval_size", epsilon, keys.INTERVAL, utility_sensitivity(num_dims), config.num_sigmas)


def test_interval_dimensions_subset_is_data_independent():
    assert interval_dimensions(jax.random.key(0), 10, 16) is None
    assert interval_dimensions(jax.random.key(0), 10, None) is None
    dims = np.asarray(interval_dimensions(jax.random.key(3), 100, 16))
    assert dims.shape == (16,) and len(set(dims.tolist())) == 16 and dims.max() < 100
