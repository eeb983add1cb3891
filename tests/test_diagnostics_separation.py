"""dpm_jax.diagnostics.separation: the expected number of balanced clusters a budget separates."""

import pytest

import dpm_jax
from dpm_jax.budget import allocate
from dpm_jax.diagnostics import separation

CONFIG = dpm_jax.DPMConfig(tau_r=7)


def expected(k, n, epsilon, d=10):
    return separation.expected_clusters(k, n, allocate(dpm_jax.Budget(epsilon, n**-1.5), CONFIG, d), CONFIG)


def test_limits_of_the_model():
    assert expected(1, 20_000, 1.0) == 1.0
    # no signal (B ~ 0): the one gap against the two empty ends, drawn uniformly: 1 + 1/3 clusters
    assert abs(expected(2, 1_000, 0.01) - 4 / 3) < 0.01
    assert expected(64, 100_000, 20.0) > 0.99 * 64  # ample signal: every cluster is found
    for k in (2, 16, 64):
        assert 1 <= expected(k, 20_000, 1.0) <= k


def test_more_epsilon_separates_more():
    values = [expected(64, 20_000, epsilon) for epsilon in (0.5, 1.0, 2.0, 5.0)]
    assert all(a < b for a, b in zip(values, values[1:]))


def test_depends_on_n_times_epsilon_mostly():
    """Lemma 5: B ~ epsilon (n - lambda) and lambda ~ 1 / epsilon, so n * epsilon is what counts."""
    assert abs(expected(64, 20_000, 2.5) - expected(64, 100_000, 0.5)) < 0.1 * 64


def test_rejects_bad_k():
    for k in (0, 2.5, separation.MAX_MODEL_CLUSTERS + 1):
        with pytest.raises(ValueError):
            expected(k, 20_000, 1.0)
