"""DPMConfig(tau_r="auto"): the depth from one noisy count (dpm_jax/depth.py), paid for in the ledger."""

import dataclasses
import math

import jax
import numpy as np
import pytest

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax import diagnostics, exact, keys, mechanisms
from dpm_jax.budget import allocate
from dpm_jax.depth import AUTO_DEPTH_EPSILON_SHARE

AUTO = dpm_jax.DPMConfig(tau_r="auto", sigma_step=SMALL_CONFIG.sigma_step, num_sigmas=SMALL_CONFIG.num_sigmas)


def test_auto_depth_is_the_plain_engine_on_the_remaining_budget(small_blobs, budget, key):
    """The count is drawn from the 'depth' stream, the depth is recommended_tau_r of it and
    of the remaining budget, and the rest is bit for bit the run with that depth and budget."""
    X = small_blobs.points
    result = dpm_jax.cluster(key, X, budget, bounds=small_blobs.bounds, config=AUTO)
    epsilon = budget.epsilon * AUTO_DEPTH_EPSILON_SHARE
    noise = exact.to_float32(mechanisms.count_noise(keys.derive_key(key, keys.DEPTH), np.asarray(epsilon)))
    noisy_count = len(X) + float(noise)
    entry = result.ledger[0]
    assert entry.name == "depth" and entry.key_path == ("depth",) and entry.epsilon == epsilon
    remaining = dpm_jax.Budget(budget.epsilon - epsilon, budget.delta - entry.delta)
    tau_r = diagnostics.recommended_tau_r(
        max(noisy_count, 1.0), X.shape[1], remaining, dataclasses.replace(AUTO, tau_r=7)
    )
    tau_r = max(tau_r, 1)
    assert result.centers.shape[0] == 2**tau_r
    plain = dpm_jax.cluster(key, X, remaining, bounds=small_blobs.bounds, config=dataclasses.replace(AUTO, tau_r=tau_r))
    for got, expected in zip(
        jax.tree.leaves((result.centers, result.tree)), jax.tree.leaves((plain.centers, plain.tree))
    ):
        np.testing.assert_array_equal(got, expected)
    assert math.isclose(result.ledger.total_epsilon, budget.epsilon, rel_tol=1e-12)
    assert math.isclose(result.ledger.total_delta, budget.delta, rel_tol=1e-12)
    assert list(result.ledger[1:]) == list(plain.ledger)


def test_auto_depth_follows_n_times_epsilon():
    """Few points: a shallow tree; many: the paper's depth (diagnostics' rule)."""
    rng = np.random.default_rng(0)
    small = rng.uniform(-1, 1, (300, 2)).astype(np.float32)
    result = dpm_jax.cluster(jax.random.key(1), small, dpm_jax.Budget(1.0, 1e-6), bounds=(-1.0, 1.0), config=AUTO)
    assert result.centers.shape[0] <= 2**3
    assert diagnostics.recommended_tau_r(10**6, 2, dpm_jax.Budget(0.98, 1e-6)) >= 7


def test_auto_depth_refuses_to_run_under_jit(small_blobs, budget):
    run = jax.jit(
        lambda k: dpm_jax.cluster(k, small_blobs.points, budget, bounds=small_blobs.bounds, config=AUTO).centers
    )
    with pytest.raises(ValueError, match="cannot run under jax.jit"):
        run(jax.random.key(0))


def test_auto_is_the_only_word_tau_r_accepts_and_must_be_resolved_first():
    with pytest.raises(ValueError, match="integer or 'auto'"):
        dpm_jax.DPMConfig(tau_r="deep")
    with pytest.raises(ValueError, match="no fixed number of clusters"):
        AUTO.max_clusters
    with pytest.raises(ValueError, match="resolved"):
        allocate(dpm_jax.Budget(1.0, 1e-6), AUTO, 2)
