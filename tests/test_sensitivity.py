"""Sensitivities, checked on real neighbours with the library's own functions.

For many random small data sets S and neighbours S' = S + {x} (x adversarial: at
the bounds, exactly on split positions and interval edges, duplicating a point,
or random), every quantity a mechanism releases with noise must change by at most
the sensitivity that mechanism is calibrated to:

* integer split scores (Lemma 5): |G(S) - G(S')| <= a1 + a3 for every candidate,
  computed from half-bin histograms exactly as the tree builds them;
* the interval-size utility (Lemma 1): gap counts change by at most 2 per dimension,
  the integer utility by at most its sensitivity, also at millions of points;
* leaf sums: see tests/test_averaging.py (exact fixed-point sums).

Each test also checks that its bound is (nearly) attained, so a bound that is too
loose in the test, or a mis-wired score, would be caught.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax.interval import PERCENTILE_SENSITIVITY, gap_counts_below, interval_utility, utility_sensitivity
from dpm_jax.scoring import score_coefficients, split_scores
from dpm_jax.histogram import half_bin_indices

BETAS = (0.5, 0.3, 1 / 7, 0.125, 0.1, 0.05)
MAX_HALF_BINS = 2 * math.ceil(1 / min(BETAS))
SCORE_PARAMS = [  # (t, q, alpha): defaults, the edge t = 2q, the widest t and q, tiny and big alpha
    (0.3, 1 / 12, 5.0),
    (0.2, 0.1, 5.0),
    (1.0, 0.49, 1.0),
    (0.3, 1 / 12, 0.01),
    (0.3, 1 / 12, 100.0),
]


def num_splits_for(beta: float) -> int:
    return math.ceil(1.0 / beta - 1e-6)  # as in tree.build_tree


def adversarial_points(rng, beta: float, existing: np.ndarray) -> list[np.ndarray]:
    """Neighbouring points x in [0, 1]^d that sit where off-by-one errors live."""
    d = existing.shape[1]
    j = rng.integers(0, num_splits_for(beta))
    choices = [
        np.zeros(d),
        np.ones(d),  # on the bounds
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
        grid = np.concatenate(
            [(np.arange(num_splits_for(beta)) + 0.5) * beta, np.arange(num_splits_for(beta) + 1) * beta, [0.0, 1.0]]
        )
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
    bins = np.asarray(
        _half_bins(jnp.asarray(padded), jnp.float32(beta), jnp.int32(num_splits_for(beta)), MAX_HALF_BINS // 2)
    )[:n, :d]
    return np.stack([np.bincount(b, minlength=MAX_HALF_BINS) for b in bins.T])


def neighbour_score_cases(seed: int, trials: int):
    """Histograms of (S, S') pairs, their candidate masks and noisy counts n~."""
    rng = np.random.default_rng(seed)
    hist_a, hist_b, valid, noisy_count, sizes = [], [], [], [], []
    for _ in range(trials):
        beta = float(rng.choice(BETAS))
        n, d = int(rng.integers(1, 60)), int(rng.integers(1, 4))
        points = random_unit_points(rng, n, d, beta)
        for x in adversarial_points(rng, beta, points):
            neighbour = np.concatenate([points, x[None]])
            noisy = [n + 1 + rng.integers(-30, 30), n, n + 1, 0.3, -12.0, 3 * n + 50, rng.uniform(1, 2 * n + 2)]
            for nt in noisy:
                hist_a.append(half_bin_histogram(points, beta))
                hist_b.append(half_bin_histogram(neighbour, beta))
                valid.append(
                    np.broadcast_to(np.arange(MAX_HALF_BINS // 2) < num_splits_for(beta), (d, MAX_HALF_BINS // 2))
                )
                noisy_count.append(np.full(d, nt, np.float32))
                sizes.append(n)
    pad = lambda arrays, fill: np.concatenate(
        [np.pad(a, [(0, 3 - a.shape[0])] + [(0, 0)] * (a.ndim - 1), constant_values=fill)[None] for a in arrays]
    )
    return (pad(hist_a, 0), pad(hist_b, 0), pad(valid, False), pad(noisy_count, 1.0), np.asarray(sizes))


@pytest.fixture(scope="module")
def score_cases():
    return neighbour_score_cases(seed=0, trials=150)


@pytest.mark.slow
@pytest.mark.parametrize("t,q,alpha", SCORE_PARAMS)
def test_split_scores_change_by_at_most_their_exact_sensitivity(score_cases, t, q, alpha):
    # Long because: scores of many neighbouring data sets (10 s in the fast loop, 2 cores at load 8, fixture included).
    """|G(S) - G(S')| <= a1 + a3 for every candidate and every public N, exactly.

    G is the integer score the tree's exponential mechanism uses; N is the node's
    released size (any value, also far from |S|). The bound is attained (so a
    sensitivity that is too small, e.g. halved, fails here)."""
    hist_a, hist_b, valid, noisy_count, sizes = score_cases
    coefficients = score_coefficients(t, q, alpha)
    size = jnp.asarray(np.clip(np.round(noisy_count[:, 0]), 1, 2**31 - 1).astype(np.int32))[:, None]
    scores_a = exact_values(split_scores(jnp.asarray(hist_a, jnp.int32), size, coefficients))
    scores_b = exact_values(split_scores(jnp.asarray(hist_b, jnp.int32), size, coefficients))
    change = np.where(valid, np.abs(scores_a - scores_b), 0).max(axis=(1, 2))
    assert np.all(change <= coefficients.sensitivity)
    assert change.max() == coefficients.sensitivity


def exact_values(value) -> np.ndarray:
    low, high = (np.asarray(limb).astype(object) for limb in value.limbs)
    return low + high * 2**30


@pytest.mark.slow
def test_gap_counts_and_utility_change_by_at_most_their_sensitivity():
    # Long because: gap counts of many neighbouring data sets (19 s, 2 cores at load 10).
    """Lemma 1: each dimension's gap counts change by at most 2, the summed counts by at
    most 2 d and the integer utility of Algorithm 2 by at most utility_sensitivity(d).

    Neighbours are a padded array with one more point unmasked (masking is checked
    to equal removal on the first cases); the threshold step is chosen so that
    thresholds fall exactly on (quantised) gaps of the data, where < versus <= matters."""
    rng = np.random.default_rng(1)
    count = jax.jit(gap_counts_below, static_argnames="num_thresholds")
    num_thresholds = 40
    largest = 0
    for trial in range(120):
        n, d = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        beta = float(rng.choice(BETAS))
        points = random_unit_points(rng, n, d, beta)
        levels = np.sort(np.floor(points.astype(np.float32) * 2**30), axis=0)
        gaps = np.diff(levels, axis=0).reshape(-1) / 2**30
        gaps = gaps[gaps > 0]
        step = (
            gaps[rng.integers(len(gaps))] / rng.integers(1, 6) if len(gaps) and trial % 2 else rng.uniform(1e-4, 0.05)
        )
        # fixed padded shapes (one compilation per d); padding rows are masked out
        padded = np.zeros((48, d), np.float32)
        padded[:n] = points
        base_counts = count(jnp.asarray(padded), jnp.arange(48) < n, step, num_thresholds)
        base = exact_values(base_counts)
        if trial < 2:  # masking is removal: the same counts as the unpadded array
            assert list(
                exact_values(gap_counts_below(jnp.asarray(points), jnp.ones(n, bool), step, num_thresholds))
            ) == list(base)
        noisy_count = jnp.float32(n + rng.integers(-3, 4))
        for x in adversarial_points(rng, beta, points):
            padded[n] = x
            added_counts = count(jnp.asarray(padded), jnp.arange(48) <= n, step, num_thresholds)
            change = np.abs(exact_values(added_counts) - base)
            assert np.all(change <= PERCENTILE_SENSITIVITY * d)
            largest = max(largest, int(change.max()))
            utility_change = np.abs(
                exact_values(interval_utility(added_counts, noisy_count, 65.0, d))
                - exact_values(interval_utility(base_counts, noisy_count, 65.0, d))
            )
            assert np.all(utility_change <= utility_sensitivity(d))
    assert largest >= PERCENTILE_SENSITIVITY  # attained: one gap split into two small ones


@pytest.mark.slow
def test_interval_utility_sensitivity_holds_at_four_million_points():
    # Long because: four million points (8 s, 2 cores at load 10).
    """At n = 2**22 the float32 average of gap counts drifted past its sensitivity
    (2.5 against 2); the exact integer utility changes by at most its sensitivity."""
    rng = np.random.default_rng(5)
    n, d = 2**22, 2
    points = np.concatenate([rng.normal(0.5, 0.1, (n, d)).clip(0, 1), rng.random((1, d))]).astype(np.float32)
    mask = np.arange(n + 1) < n
    step = 0.65 / n
    counts = jax.jit(gap_counts_below, static_argnames="num_thresholds")
    base = counts(jnp.asarray(points), jnp.asarray(mask), step, 59)
    added = counts(jnp.asarray(points), jnp.ones(n + 1, bool), step, 59)
    for noisy_count in (float(n), float(n) + 37.0):
        change = np.abs(
            exact_values(interval_utility(added, jnp.float32(noisy_count), 65.0, d))
            - exact_values(interval_utility(base, jnp.float32(noisy_count), 65.0, d))
        )
        assert change.max() <= utility_sensitivity(d)
    assert exact_values(base).max() > 2**22  # the counts are in the range where float32 failed


@pytest.mark.slow
def test_masked_points_do_not_influence_the_release():
    # Long because: compiles cluster with a point mask for two data sizes (~11 s).
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


@pytest.mark.parametrize("split_grid", ["paper", "cell"])
def test_the_runs_releases_state_the_sensitivities_their_inputs_have(split_grid):
    """The releases a run draws with (dpm_jax.api.plan_run) state the sensitivities measured above:
    the split choices the score's a1 + a3, Algorithm 2 the utility's 2 d' (2**-10 units), the node
    counts 1, and the leaf sums an L2 bound of every point's code vector in units of 2**s (the
    corners of the unit box are the longest; without the mid-shift they are twice as long)."""
    import itertools

    import dpm_jax
    from dpm_jax.api import plan_run

    d = 3
    config = dpm_jax.DPMConfig(split_grid=split_grid, tau_r=3)
    (releases,) = plan_run(dpm_jax.Budget(1.0, 1e-6), config, d).by_depth
    assert releases.split_sensitivity == score_coefficients(config.t, config.q, config.alpha).sensitivity
    assert all(count.sensitivity == 1 for count in releases.counts)
    if split_grid == "paper":
        assert releases.interval.sensitivity == utility_sensitivity(d) == PERCENTILE_SENSITIVITY * d * 2**10
    else:
        assert releases.interval is None
    leaf_sums = releases.leaf_sums
    corners = jnp.asarray(list(itertools.product([0.0, 1.0], repeat=d)), jnp.float32)
    codes = np.asarray(leaf_sums.codes(corners), np.float64)
    longest = np.sqrt((codes**2).sum(axis=1)).max() / 2.0**leaf_sums.coarse_shift
    assert longest <= leaf_sums.sensitivity and longest >= leaf_sums.sensitivity * (1 - 1e-6)
