"""dpm_jax.eval.mmd: the chunked RKHS distance against a direct float64 computation."""

import math

import numpy as np
import pytest

from dpm_jax.eval import mmd


def _direct(X, Z, w, gamma):
    k = lambda a, b: np.exp(-gamma * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))  # noqa: E731
    w = w / w.sum()
    return math.sqrt(w @ k(Z, Z) @ w - 2 * w @ k(Z, X).mean(1) + k(X, X).mean())


# the second crosses the 4096-row blocks; long because: 8 s, 2 cores at load 10
@pytest.mark.parametrize("n, m, d", [(50, 7, 3), pytest.param(5000, 300, 2, marks=pytest.mark.slow)])
def test_rkhs_distance_matches_the_direct_formula(n, m, d):
    rng = np.random.default_rng(n)
    X = rng.normal(100.0, 80.0, (n, d))
    Z = rng.normal(110.0, 60.0, (m, d))
    w = rng.uniform(0.1, 5.0, m)
    gamma = mmd.balog_gamma(d)
    expected = _direct(X, Z, w, gamma)
    assert mmd.rkhs_distance(X, Z, w, gamma) == pytest.approx(expected, rel=1e-4)
    assert mmd.kernel_mean(X, gamma) == pytest.approx(
        np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1)).mean(), rel=1e-5
    )


def test_rkhs_distance_is_zero_for_the_data_itself_and_refuses_bad_weights():
    X = np.random.default_rng(0).normal(0.0, 1.0, (40, 2))
    assert mmd.rkhs_distance(X, X, np.ones(40), 0.5) < 1e-3
    with pytest.raises(ValueError):
        mmd.rkhs_distance(X, X[:3], np.array([1.0, -1.0, 1.0]), 0.5)
