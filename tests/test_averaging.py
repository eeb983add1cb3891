"""DP centres of the leaves (Algorithm 1, line 11)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax.averaging import leaf_centers, leaf_sum_sensitivity


def test_sensitivity_is_the_half_diagonal():
    lower, upper = jnp.asarray([-100.0, 0.0, 2.0]), jnp.asarray([100.0, 16.0, 3.0])
    assert float(leaf_sum_sensitivity(lower, upper)) == pytest.approx(np.sqrt(100**2 + 8**2 + 0.5**2))


def test_without_noise_centres_are_sums_over_noisy_counts():
    rng = np.random.default_rng(0)
    points = jnp.asarray(rng.uniform(-1, 1, (50, 2)), jnp.float32)
    slot = jnp.asarray(rng.integers(0, 3, 50), jnp.int32)
    counts = jnp.asarray([np.sum(np.asarray(slot) == s) + 0.5 for s in range(4)], jnp.float32)
    valid = jnp.asarray([True, True, True, False])
    centers, sigma = leaf_centers(jax.random.key(0), points, jnp.ones(50, bool), slot, counts, valid,
                                  -jnp.ones(2), jnp.ones(2), 0.0)
    assert float(sigma) == 0.0
    for s in range(3):
        expected = np.asarray(points)[np.asarray(slot) == s].sum(0) / float(counts[s])
        np.testing.assert_allclose(np.asarray(centers[s]), expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.isnan(np.asarray(centers[3])))  # padded slots are NaN


def test_noise_scale_and_masking():
    """Empty leaves get pure noise: its empirical std matches sigma (3% at 4k draws, > 5 sd)."""
    points = jnp.zeros((10, 1))
    mask = jnp.zeros(10, bool)  # all points are padding: every sum is pure noise
    counts = jnp.ones(4096)
    centers, sigma = leaf_centers(jax.random.key(1), points, mask, jnp.zeros(10, jnp.int32), counts,
                                  jnp.ones(4096, bool), -jnp.full(1, 1e6), jnp.full(1, 1e6), 0.05)
    assert float(sigma) == pytest.approx(0.05 * 1e6)  # bounds 20 sigma away: no clipping
    assert np.std(np.asarray(centers)) == pytest.approx(float(sigma), rel=0.03)
