"""Scores (Definitions 5-7) from histograms equal the plain per-point computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax.scoring import centreness, score_sensitivity, split_scores
from dpm_jax.tree import half_bin_indices, level_histogram
from reference_dpm import reference_scores

T, Q, ALPHA = 0.3, 1 / 12, 5.0


def _jax_scores(points, n_tilde, lower, upper, beta, num_splits, max_splits):
    """Scores the way the tree computes them: half-bins -> one histogram -> scores."""
    unit = jnp.asarray((points - lower) / (upper - lower), jnp.float32)
    half_bins = half_bin_indices(unit, beta, num_splits, max_splits)
    counts = level_histogram(half_bins, jnp.zeros(len(points), jnp.int32), jnp.ones(len(points), bool),
                             1, max_splits)
    scores = split_scores(counts.astype(jnp.float32), jnp.asarray([[n_tilde]], jnp.float32), T, Q, ALPHA)
    return np.asarray(scores[0, :, :num_splits])


@pytest.mark.parametrize("seed", range(6))
def test_histogram_scores_equal_reference_scores(seed):
    rng = np.random.default_rng(seed)
    n, d = rng.integers(1, 400), rng.integers(1, 5)
    lower, upper = np.full(d, -10.0), np.full(d, 30.0)
    # a mixture with empty regions, duplicates and points exactly on the bounds
    points = np.concatenate([rng.normal(0, 2, (n, d)), rng.normal(20, 1, (n // 2, d)),
                             np.repeat(rng.normal(5, 1, (1, d)), 7, axis=0), [lower, upper]])
    points = np.clip(points, lower, upper)
    beta = [0.37 / 8, 0.05, 0.11][seed % 3]  # interval edges that are not dyadic
    num_splits = int(np.ceil(1 / beta - 1e-6))
    n_tilde = len(points) + rng.normal(0, 5)
    expected = reference_scores(points, n_tilde, lower, upper, beta, num_splits, T, Q, ALPHA)
    got = _jax_scores(points, n_tilde, lower, upper, beta, num_splits, max_splits=32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_centreness_shape_of_definition_6():
    n = 1200.0
    ranks = jnp.arange(0, 1201, dtype=jnp.float32)
    c = np.asarray(centreness(ranks, n, T, Q))
    assert c[600] == pytest.approx(1.0)  # the median
    assert c[0] == pytest.approx(0.0) and c[1200] == pytest.approx(0.0)  # the borders
    assert c[100] == pytest.approx(T, abs=1e-6)  # rank n q: outer meets inner at t
    # continuous and piecewise linear: steps are t/(n q) outside, (1-t)/(n/2 - n q) inside
    steps = np.abs(np.diff(c))
    assert steps.max() == pytest.approx(T / (n * Q), rel=1e-4)
    assert steps[200:1000].max() == pytest.approx((1 - T) / (n / 2 - n * Q), rel=1e-3)
    assert np.all(c <= 1.0 + 1e-6)


def test_score_sensitivity_lemma_5_and_clamp():
    n_tilde = jnp.asarray([1000.0, 50.0, 5.0])
    got = np.asarray(score_sensitivity(n_tilde, 20.0, T, Q, ALPHA))
    np.testing.assert_allclose(got[:2], (T / Q + ALPHA) / (np.array([1000.0, 50.0]) - 20.0), rtol=1e-6)
    assert got[2] == pytest.approx(T / Q + ALPHA)  # n~ - lambda < 1: denominator clamped at 1


def test_scores_are_finite_for_tiny_or_negative_noisy_counts():
    counts = jnp.asarray(np.random.default_rng(0).integers(0, 3, (2, 1, 8)), jnp.float32)
    scores = split_scores(counts, jnp.asarray([[-4.0], [0.3]]), T, Q, ALPHA)
    assert np.all(np.isfinite(np.asarray(scores)))


def test_scores_jit_and_eager_agree():
    counts = jnp.asarray(np.random.default_rng(1).integers(0, 9, (3, 2, 16)), jnp.float32)
    n_tilde = jnp.asarray([[40.0], [70.0], [10.0]])
    eager = split_scores(counts, n_tilde, T, Q, ALPHA)
    jitted = jax.jit(split_scores, static_argnums=(2, 3, 4))(counts, n_tilde, T, Q, ALPHA)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-6)
