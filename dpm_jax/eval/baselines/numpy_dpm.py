"""A deliberately plain NumPy DPM that follows the paper line by line.

The oracle for the JAX engine: Algorithm 1 (recursive BuildClustering / Split) and
Algorithm 2 of "DPM: Clustering Sensitive Data through Separation", with the errata fixed as in dpm_jax
(exp(eps f / (2 Delta_f)), split index decoding, pooled gap counts for the interval
size, half-open split intervals). No histograms, no padding, no heap layout: every
score is computed from the points of the node by direct comparisons, and the
recursion is Python recursion. It shares only the public conventions (the sigma
grid, the Gaussian gap constant, the averaging noise calibration) with the
library, never the array code.

Used by the tests (the oracle the engine must agree with in distribution) and by
the benchmarks (the sequential baseline of ``dpm-jax bench --baseline`` and the
``dpm-numpy`` column of benchmarks/table2.py). It computes in float64 and draws its
noise with NumPy's floating-point samplers: NOT a private release in the machine's
arithmetic (docs/privacy.md) -- use :func:`dpm_jax.cluster` for data that matter.
"""

from __future__ import annotations

import math

import numpy as np

from dpm_jax.eval.bounds import broadcast_bounds
from dpm_jax.interval import gaussian_gap_constant
from dpm_jax.mechanisms import discrete_gaussian_multiplier

__all__ = ["reference_scores", "reference_interval_size", "reference_dpm"]


def reference_scores(points, noisy_count, lower, upper, beta, num_splits, t, q, alpha):
    """Scores f = c + alpha e (Definitions 5-7) of every (dimension, candidate).

    Candidate j of dimension i sits at s = lo_i + (j + 1/2) beta (hi_i - lo_i); its
    split interval is [lo_i + j beta w_i, lo_i + (j+1) beta w_i), w_i = hi_i - lo_i.
    """
    points = np.asarray(points, dtype=np.float64)
    noisy_count = max(float(noisy_count), 1.0)
    d = points.shape[1]
    j = np.arange(num_splits)
    scores = np.zeros((d, num_splits))
    for i in range(d):
        width = (upper[i] - lower[i]) * beta
        left = lower[i] + j * width
        right = np.where(j == num_splits - 1, np.inf, left + width)  # the last interval holds hi
        candidate = left + 0.5 * width
        column = points[:, i][:, None]
        interval_count = np.sum((column >= left) & (column < right), axis=0)
        rank = np.sum(column < candidate, axis=0)
        emptiness = 1.0 - interval_count / noisy_count
        half = noisy_count / 2.0
        border_distance = half - np.abs(rank - half)
        outer = (rank <= noisy_count * q) | (rank >= noisy_count - noisy_count * q)
        centreness = np.where(
            outer,
            border_distance * t / (noisy_count * q),
            (t - 2 * q) / (1 - 2 * q) + border_distance * (1 - t) / (half - noisy_count * q),
        )
        scores[i] = centreness + alpha * emptiness
    return scores


def _exponential(rng, utilities, epsilon, sensitivity):
    """Index i with probability proportional to exp(eps u_i / (2 Delta))."""
    logits = epsilon * np.asarray(utilities, dtype=np.float64).ravel() / (2.0 * sensitivity)
    weights = np.exp(logits - logits.max())
    return rng.choice(weights.size, p=weights / weights.sum())


def _budget_parts(epsilon, delta, config):
    """Algorithm 1, lines 4-6, with the Section 6.1 shares."""
    share_int, share_cnt, share_exp, share_avg = config.epsilon_shares
    tau_r = config.tau_r
    count_weights = np.sqrt(2.0 ** np.arange(tau_r + 1))
    split_weights = np.sqrt(2.0 ** np.arange(tau_r))
    eps_cnt = epsilon * share_cnt * count_weights / count_weights.sum()
    eps_exp = epsilon * share_exp * split_weights / split_weights.sum()
    delta_cnt = delta * config.delta_shares[0] / (tau_r + 1)
    offsets = -np.log(2 * delta_cnt) / eps_cnt
    return (epsilon * share_int, eps_cnt, eps_exp, epsilon * share_avg, delta * config.delta_shares[1], offsets)


def reference_interval_size(rng, points, lower, upper, noisy_count, epsilon, config):
    """Algorithm 2 with pooled gap counts (see dpm_jax.interval): beta / range."""
    unit = (points - lower) / (upper - lower)
    sigmas = np.asarray(config.sigma_grid)
    n_ref = max(noisy_count, 2.0)
    thresholds = gaussian_gap_constant(config.percentile) * sigmas / n_ref
    if config.interval_max_dims is not None and unit.shape[1] > config.interval_max_dims:
        unit = unit[:, rng.choice(unit.shape[1], config.interval_max_dims, replace=False)]
    gaps = np.diff(np.sort(unit, axis=0), axis=0)
    counts = np.array([np.mean(np.sum(gaps < y, axis=0)) if gaps.size else 0.0 for y in thresholds])
    utility = -np.abs(counts - config.percentile / 100.0 * (n_ref - 1.0))
    beta = config.interval_factor * sigmas[_exponential(rng, utility, epsilon, 2.0)]
    return max(beta, 1.0 / config.max_splits_per_dim)


def reference_dpm(rng: np.random.Generator, X, epsilon, delta, bounds, config):
    """Algorithm 1. Returns dict(centers (k, d), counts (k,), k, beta)."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    lower, upper = broadcast_bounds(bounds, d)
    X = np.clip(X, lower, upper)
    eps_int, eps_cnt, eps_exp, eps_avg, delta_avg, offsets = _budget_parts(epsilon, delta, config)

    noisy_count = n + rng.laplace(0.0, 1.0 / eps_cnt[0])  # line 7
    beta = reference_interval_size(rng, X, lower, upper, noisy_count, eps_int, config)  # line 8
    num_splits = math.ceil(1.0 / beta - 1e-6)  # line 9
    tau_e = noisy_count / 2**config.tau_r if config.tau_e is None else config.tau_e
    clusters, weights = [], []

    def build_clustering(S, n_S, level):  # lines 13-20
        if level >= config.tau_r:
            clusters.append(S)
            weights.append(n_S)
            return
        S1, S2 = split(S, n_S, level)
        n_S1 = len(S1) + rng.laplace(0.0, 1.0 / eps_cnt[level + 1])
        n_S2 = len(S2) + rng.laplace(0.0, 1.0 / eps_cnt[level + 1])
        if n_S1 < tau_e or n_S2 < tau_e:
            clusters.append(S)
            weights.append(n_S)
            return
        build_clustering(S1, n_S1, level + 1)
        build_clustering(S2, n_S2, level + 1)

    def split(S, n_S, level):  # lines 21-28
        sensitivity = (config.t / config.q + config.alpha) / max(n_S - offsets[level], 1.0)
        scores = reference_scores(S, n_S, lower, upper, beta, num_splits, config.t, config.q, config.alpha)
        i_star = _exponential(rng, scores, eps_exp[level], sensitivity)
        dim = i_star // num_splits  # the fixed line 24
        position = lower[dim] + ((i_star % num_splits) + 0.5) * beta * (upper[dim] - lower[dim])
        left = S[:, dim] < position  # the point at s* itself has rank r and goes right
        return S[left], S[~left]

    build_clustering(X, noisy_count, 0)

    middle = (lower + upper) / 2.0
    # The library's noise level in real arithmetic: its L2 sensitivity is the half-diagonal
    # of the unit box, sqrt(d) / 2, so each coordinate gets multiplier sqrt(d) / 2 ranges.
    sigma = discrete_gaussian_multiplier(eps_avg, delta_avg) * math.sqrt(d) / 2.0 * (upper - lower)
    centers = np.array(
        [
            middle + (np.sum(C - middle, axis=0) + rng.normal(0.0, sigma, d)) / max(w, 1.0)
            for C, w in zip(clusters, weights)
        ]
    )
    return dict(centers=np.clip(centers, lower, upper), counts=np.array(weights), k=len(clusters), beta=beta)
