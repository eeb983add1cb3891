"""Shared fixtures: small data sets and budgets that keep JIT compiles few.

Statistical tests in this suite fix their keys; each states its error rate.
"""

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax.eval.datasets import synthetic_blobs

# One small configuration reused across test modules so the JIT cache is shared.
SMALL_CONFIG = dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10, split_grid="paper")


@pytest.fixture(scope="session")
def small_blobs():
    """600 points, d = 3, 6 well-separated blobs in [-100, 100]^3."""
    return synthetic_blobs(n=600, d=3, num_blobs=6, std=1.0, seed=3)


@pytest.fixture(scope="session")
def budget():
    return dpm_jax.Budget(epsilon=1.0, delta=1e-6)


@pytest.fixture
def key():
    return jax.random.key(0)


def majority_accuracy(true_labels: np.ndarray, predicted: np.ndarray) -> float:
    """Definition 12: every cluster votes for its majority label."""
    total = 0
    for cluster in np.unique(predicted):
        total += np.bincount(true_labels[predicted == cluster]).max()
    return total / len(predicted)


def nearest_center_labels(points: np.ndarray, result) -> np.ndarray:
    centers = np.asarray(result.centers)[np.asarray(result.valid)]
    return np.argmin(((points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
