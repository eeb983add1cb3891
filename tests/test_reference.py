"""The JAX engine and the plain NumPy recursion (dpm_jax/eval/baselines/numpy_dpm.py) agree in distribution.

Both run 120 times on the same small data set; the two-sample statistics below use
a 4-standard-error threshold (two-sided false-failure probability about 6e-5 per
comparison if both implement the same distribution).
"""

import jax
import numpy as np
import pytest

import dpm_jax
from conftest import SMALL_CONFIG, majority_accuracy
from dpm_jax.eval.baselines.numpy_dpm import reference_dpm

RUNS = 120


def _assert_same_mean(a, b, name):
    a, b = np.asarray(a, float), np.asarray(b, float)
    standard_error = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert abs(a.mean() - b.mean()) <= 4 * standard_error + 1e-9, (name, a.mean(), b.mean(), standard_error)


def _labels(points, centers):
    return np.argmin(((points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)


def test_the_reference_finds_well_separated_blobs_at_a_large_budget(small_blobs):
    """The oracle itself, one fast run (the comparison below is slow): at epsilon = 20 the NumPy
    recursion finds the 6 blobs of the shared data set (measured: k = 6, accuracy 1 for seeds 0-9)."""
    result = reference_dpm(np.random.default_rng(0), small_blobs.points, 20.0, 1e-6, small_blobs.bounds, SMALL_CONFIG)
    assert result["k"] == 6 and result["centers"].shape == (6, 3)
    assert majority_accuracy(small_blobs.labels, _labels(small_blobs.points, result["centers"])) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [3.0, 10.0])
def test_jax_and_numpy_dpm_have_the_same_outcome_distribution(small_blobs, epsilon):
    # Long because: 120 runs of each implementation, per epsilon (27 s, 2 cores at load 10).
    X, bounds = small_blobs.points, small_blobs.bounds
    budget = dpm_jax.Budget(epsilon, 1e-6)
    results = jax.jit(jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds=bounds, config=SMALL_CONFIG)))(
        jax.random.split(jax.random.key(11), RUNS)
    )
    jax_k = np.asarray(results.k)
    jax_beta = np.asarray(results.split_interval_size[:, 0])
    jax_accuracy = [
        majority_accuracy(small_blobs.labels, _labels(X, np.asarray(results.centers[r])[np.asarray(results.valid[r])]))
        for r in range(RUNS)
    ]

    rng = np.random.default_rng(12)
    reference = [reference_dpm(rng, X, epsilon, 1e-6, bounds, SMALL_CONFIG) for _ in range(RUNS)]
    ref_k = [r["k"] for r in reference]
    ref_beta = [r["beta"] * 200.0 for r in reference]
    ref_accuracy = [majority_accuracy(small_blobs.labels, _labels(X, r["centers"])) for r in reference]

    _assert_same_mean(jax_k, ref_k, "number of clusters")
    _assert_same_mean(jax_accuracy, ref_accuracy, "accuracy")
    _assert_same_mean(jax_beta, ref_beta, "split interval size")
    # the support of k agrees: values seen often by one implementation are seen by the other
    for value in set(ref_k) | set(jax_k.tolist()):
        seen_ref, seen_jax = ref_k.count(value), int(np.sum(jax_k == value))
        if max(seen_ref, seen_jax) >= 20:
            assert min(seen_ref, seen_jax) >= 3, (value, seen_ref, seen_jax)
