"""Sensitivities, checked on real neighbours with the library's own functions.

For many random small data sets S and neighbours S' = S + {x} (x adversarial: at
the bounds, exactly on split positions and interval edges, duplicating a point,
or random), every quantity a mechanism releases with noise must change by at most
the sensitivity that mechanism is calibrated to:

* split scores (Lemma 5): |f(S) - f(S')| <= Delta_f for every candidate, computed
  from half-bin histograms exactly as the tree builds them;
* the interval-size utility (Lemma 1): gap counts change by at most 2;
* leaf sums: the L2 change is at most ``leaf_sum_sensitivity``.

Each test also checks that its bound is (nearly) attained, so a bound that is too
loose in the test, or a mis-wired score, would be caught.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax.averaging import leaf_sum_sensitivity
from dpm_jax.interval import PERCENTILE_SENSITIVITY, gap_counts_below
from dpm_jax.mechanisms import count_offset
from dpm_jax.scoring import score_sensitivity, split_scores
from dpm_jax.tree import half_bin_indices

BETAS = (0.5, 0.3, 1 / 7, 0.125, 0.1, 0.05)
MAX_HALF_BINS = 2 * math.ceil(1 / min(BETAS))
SCORE_PARAMS = [  # (t, q, alpha): defaults, the edge t = 2q, the widest t and q, tiny and big alpha
    (0.3, 1 / 12, 5.0), (0.2, 0.1, 5.0), (1.0, 0.49, 1.0), (0.3, 1 / 12, 0.01), (0.3, 1 / 12, 100.0)]


def num_splits_for(beta: float) -> int:
    return math.ceil(1.0 / beta - 1e-6)  # as in tree.build_tree


def adversarial_points(rng, beta: float, existing: np.ndarray) -> list[np.ndarray]:
    """Neighbouring points x in [0, 1]^d that sit where off-by-one errors live."""
    d = existing.shape[1]
    j = rng.integers(0, num_splits_for(beta))
    choices = [
        np.zeros(d), np.ones(d),  # on the bounds
        np.full(d, min((j + 0.5) * beta, 1.0)),  # exactly on a split position s_j
        np.full(d, min(j * beta, 1.0)),  # exactly on an interval edge
        np.full(d, min((j + 1) * beta, 1.0)),
        existing[rng.integers(len(existing))] if len(existing) else rng.random(d),  # duplicate
        rng.random(d),
    ]
    return [np.asarray(c, np.float32) for c in choices]


def random_unit_points(rng, n: int, d: int, beta: float) -> np.ndarray:
    kind = rng.integers(4)
    if kind == 0:
        points = rng.random((n, d))
    elif kind == 1:  # two tight clusters
        points = np.clip(rng.choice([0.2, 0.8], (n, 1)) + rng.normal(0, 0.02, (n, d)), 0, 1)
    elif kind == 2:  # on candidate positions and edges
        grid = np.concatenate([(np.arange(num_splits_for(beta)) + 0.5) * beta,
                               np.arange(num_splits_for(beta) + 1) * beta, [0.0, 1.0]])
        points = rng.choice(np.clip(grid, 0, 1), (n, d))
    else:  # heavy duplicates
        points = np.repeat(rng.random((1, d)), n, axis=0)
    return points.astype(np.float32)


_half_bins = jax.jit(half_bin_indices, static_argnums=3)  # fixed padded shape: one compilation


def half_bin_histogram(unit_points: np.ndarray, beta: float) -> np.ndarray:
    """(d, MAX_HALF_BINS) counts, as the tree's scatter-add builds them for one node."""
    n, d = unit_points.shape
    padded = np.zeros((64, 3), np.float32)
    padded[:n, :d] = unit_points
    bins = np.asarray(_half_bins(jnp.asarray(padded), jnp.float32(beta),
                                 jnp.int32(num_splits_for(beta)), MAX_HALF_BINS // 2))[:n, :d]
    return np.stack([np.bincount(b, minlength=MAX_HALF_BINS) for b in bins.T])


def neighbour_score_cases(seed: int, trials: int):
    """Histograms of (S, S') pairs, their candidate masks and noisy counts n~."""
    rng = np.random.default_rng(seed)
    hist_a, hist_b, valid, n_tilde, sizes = [], [], [], [], []
    for _ in range(trials):
        beta = float(rng.choice(BETAS))
        n, d = int(rng.integers(1, 60)), int(rng.integers(1, 4))
        points = random_unit_points(rng, n, d, beta)
        for x in adversarial_points(rng, beta, points):
            neighbour = np.concatenate([points, x[None]])
            noisy = [n + 1 + rng.integers(-30, 30), n, n + 1, 0.3, -12.0, 3 * n + 50,
                     rng.uniform(1, 2 * n + 2)]
            for nt in noisy:
                hist_a.append(half_bin_histogram(points, beta))
                hist_b.append(half_bin_histogram(neighbour, beta))
                valid.append(np.broadcast_to(np.arange(MAX_HALF_BINS // 2) < num_splits_for(beta),
                                             (d, MAX_HALF_BINS // 2)))
                n_tilde.append(np.full(d, nt, np.float32))
                sizes.append(n)
    pad = lambda arrays, fill: np.concatenate(
        [np.pad(a, [(0, 3 - a.shape[0])] + [(0, 0)] * (a.ndim - 1), constant_values=fill)[None]
         for a in arrays])
    return (pad(hist_a, 0), pad(hist_b, 0), pad(valid, False), pad(n_tilde, 1.0),
            np.asarray(sizes))


@pytest.fixture(scope="module")
def score_cases():
    return neighbour_score_cases(seed=0, trials=150)


@pytest.mark.parametrize("t,q,alpha", SCORE_PARAMS)
def test_split_scores_change_by_at_most_lemma5_sensitivity(score_cases, t, q, alpha):
    """|f(S) - f(S')| <= Delta_f = (t/q + alpha) / max(n~ - lambda, 1) for every candidate.

    Checked (a) under the paper's condition n~ - lambda <= |S| and (b) for every n~,
    which is what the implementation claims (the scores divide by n~ itself)."""
    hist_a, hist_b, valid, n_tilde, sizes = score_cases
    scores_a = np.asarray(split_scores(jnp.asarray(hist_a, jnp.float32), jnp.asarray(n_tilde), t, q,
                                       alpha), np.float64)
    scores_b = np.asarray(split_scores(jnp.asarray(hist_b, jnp.float32), jnp.asarray(n_tilde), t, q,
                                       alpha), np.float64)
    change = np.where(valid, np.abs(scores_a - scores_b), 0.0).max(axis=(1, 2))
    # float32 rounding: a few ulps of the largest score of the case (scores reach
    # hundreds in magnitude when n~ is clamped to 1 and the ranks are large)
    magnitude = np.where(valid, np.maximum(np.abs(scores_a), np.abs(scores_b)), 0.0).max(axis=(1, 2))
    tolerance = 1e-6 * (1 + magnitude)
    for epsilon, delta in [(0.5, 1e-6), (0.05, 1e-8), (3.0, 0.01)]:
        lam = count_offset(epsilon, delta)
        bound = np.asarray(score_sensitivity(jnp.asarray(n_tilde[:, 0]), lam, t, q, alpha))
        condition = n_tilde[:, 0] - lam <= sizes
        assert np.all((change <= bound + tolerance)[condition])  # (a) Lemma 5
        assert np.all(change <= bound + tolerance)  # (b) the implementation's claim
    # The bound is attained up to the clamp: the sharpest case reaches >= 99% of
    # (t/q + alpha)/max(n~, 1), so halving Delta_f would be caught here.
    sharp = np.asarray(score_sensitivity(jnp.asarray(n_tilde[:, 0]), 0.0, t, q, alpha))
    assert np.max(change / sharp) >= 0.99


def test_gap_counts_change_by_at_most_two():
    """Lemma 1: the utility of Algorithm 2 (average gap counts) has sensitivity 2.

    Neighbours are a padded array with one more point unmasked (masking is checked
    to equal removal on the first cases); the threshold step is chosen so that thresholds fall exactly on (quantised) gaps of
    the data, where < versus <= matters."""
    rng = np.random.default_rng(1)
    count = jax.jit(gap_counts_below, static_argnames="num_thresholds")
    num_thresholds = 40
    largest = 0.0
    for trial in range(120):
        n, d = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        beta = float(rng.choice(BETAS))
        points = random_unit_points(rng, n, d, beta)
        levels = np.sort(np.floor(points.astype(np.float32) * 2**30), axis=0)
        gaps = np.diff(levels, axis=0).reshape(-1) / 2**30
        gaps = gaps[gaps > 0]
        step = (gaps[rng.integers(len(gaps))] / rng.integers(1, 6) if len(gaps) and trial % 2
                else rng.uniform(1e-4, 0.05))
        # fixed padded shapes (one compilation per d); padding rows are masked out
        padded = np.zeros((48, d), np.float32)
        padded[:n] = points
        base = np.asarray(count(jnp.asarray(padded), jnp.arange(48) < n, step, num_thresholds))
        if trial < 2:  # masking is removal: the same counts as the unpadded array
            np.testing.assert_array_equal(
                np.asarray(gap_counts_below(jnp.asarray(points), jnp.ones(n, bool), step,
                                            num_thresholds)), base)
        for x in adversarial_points(rng, beta, points):
            padded[n] = x
            added = np.asarray(count(jnp.asarray(padded), jnp.arange(48) <= n, step,
                                     num_thresholds))
            change = np.abs(added - base)
            assert np.all(change <= PERCENTILE_SENSITIVITY)
            largest = max(largest, change.max())
            # the utility -|C(y) - p (n~ - 1)| with n~ public changes by at most as much
            target = 0.65 * (n + rng.integers(-3, 4) - 1)
            assert np.all(np.abs(np.abs(added - target) - np.abs(base - target))
                          <= PERCENTILE_SENSITIVITY)
    assert largest == PERCENTILE_SENSITIVITY  # attained: one gap split into two small ones


BOUNDS_CASES = [((-100.0, 100.0), 3), ((0.0, 255.0), 2), ((-1e-3, 1e7), 4), ((5.0, 5.5), 1),
                ((-1e18, 1e18), 2), ((1e-6, 2e-6), 3)]


@pytest.mark.parametrize("bounds,d", BOUNDS_CASES)
def test_leaf_sum_changes_by_at_most_its_sensitivity(bounds, d):
    """Adding a point changes one leaf sum by the mid-shifted, clipped point; its L2 norm
    is at most leaf_sum_sensitivity (exact arithmetic; the float32 rounding of the
    shift is a separate, documented caveat) and corner points attain it."""
    rng = np.random.default_rng(2)
    lo = np.full(d, bounds[0], np.float64)
    hi = np.full(d, bounds[1], np.float64) * (1 + rng.uniform(0, 0.1, d) * (bounds[1] > 0))
    sensitivity = float(leaf_sum_sensitivity(jnp.asarray(lo, jnp.float32), jnp.asarray(hi, jnp.float32)))
    lo32, hi32 = lo.astype(np.float32).astype(np.float64), hi.astype(np.float32).astype(np.float64)
    middle = (lo32 + hi32) / 2
    points = np.concatenate([
        np.where(rng.random((64, d)) < 0.5, lo32, hi32),  # corners
        lo32 + rng.random((64, d)) * (hi32 - lo32),
        middle + (hi32 - lo32) * rng.normal(0, 3, (64, d)),  # far outside: clipped
    ])
    shifted = np.clip(points, lo32, hi32) - middle  # exact shift of a float32-clipped point
    norms = np.linalg.norm(shifted, axis=1)
    assert np.all(norms <= sensitivity * (1 + 1e-6))
    assert norms.max() >= sensitivity * (1 - 1e-5)  # tight up to the 2**-20 safety margin
    # the leaf sums themselves: S' = S + {x} changes the sum by exactly the shifted x
    base = shifted[:40].sum(axis=0)
    for x in shifted[40:]:
        assert np.linalg.norm((base + x) - base) <= sensitivity * (1 + 1e-6)


def test_float32_shifted_corner_within_sensitivity():
    """Ranges a few float32 ulps wide: the rounded middle must not push a corner past
    the sensitivity (a random search once found 2.4% excess before the fix)."""
    lo = jnp.asarray([-0.15091176], jnp.float32)
    hi = jnp.asarray([-0.15091085], jnp.float32)
    middle = (lo + hi) / 2.0  # as leaf_centers computes it
    corners = jnp.stack([lo, hi])
    norm = jnp.max(jnp.abs(jnp.clip(corners, lo, hi) - middle))
    assert float(norm) <= float(leaf_sum_sensitivity(lo, hi))


def test_masked_points_do_not_influence_the_release():
    """cluster(X padded, mask) must equal cluster(X) draw for draw (masking is removal).

    Regression: inactive points were once scattered to index -1, which JAX wraps to
    the last element even with mode="drop", so padding inflated the right-most
    child's count and all d coordinates of an inactive point landed in one bin."""
    import dpm_jax

    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(-3, 0.3, (60, 2)), rng.normal(3, 0.3, (60, 2))]).astype(np.float32)
    padded = np.concatenate([X, np.zeros((8, 2), np.float32)])
    mask = np.arange(len(padded)) < len(X)
    budget, config = dpm_jax.Budget(5.0, 1e-6), dpm_jax.DPMConfig(tau_r=2)
    key = jax.random.key(0)
    plain = dpm_jax.cluster(key, X, budget, bounds=(-5.0, 5.0), config=config)
    masked = dpm_jax.cluster(key, padded, budget, bounds=(-5.0, 5.0), config=config, point_mask=mask)
    np.testing.assert_array_equal(np.asarray(plain.tree.noisy_count), np.asarray(masked.tree.noisy_count))
    np.testing.assert_array_equal(np.asarray(plain.counts), np.asarray(masked.counts))
