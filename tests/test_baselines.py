"""dpm_jax.eval.baselines: k-means, DP-Lloyd and the Section 6.2 references."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import exact
from dpm_jax.eval import baselines, metrics
from dpm_jax.eval.baselines.dp_lloyd import count_noise_of_iterations
from dpm_jax.eval.datasets import synthetic_blobs

BOX = (-100.0, 100.0)


@pytest.fixture(scope="module")
def blobs():
    """8 well-separated unit-variance blobs, 1,600 points in 5 dimensions."""
    return synthetic_blobs(1600, 5, num_blobs=8, std=1.0, box=BOX, seed=4)


def _nearest_distances(found, true):
    return np.min(np.linalg.norm(np.asarray(true)[:, None, :] - np.asarray(found)[None, :, :], axis=-1), axis=1)


# ---------------------------------------------------------------------- k-means
@pytest.mark.slow
def test_kmeans_recovers_separated_blobs(blobs):
    # Long because: compiles k-means with restarts (5 s, 2 cores at load 12).
    result = baselines.kmeans(jax.random.key(0), blobs.points, 8, num_runs=4)
    assert np.all(_nearest_distances(result.centers, blobs.centers) < 0.3)
    assert float(metrics.clustering_accuracy(result.labels, jnp.asarray(blobs.labels), 8, 8)) == 1.0
    # Inertia of the true clustering: about n * d * std^2.
    assert float(result.inertia) == pytest.approx(1600 * 5, rel=0.1)


@pytest.mark.slow
def test_kmeans_keeps_the_run_with_lowest_inertia(blobs):
    # Long because: compiles k-means runs under vmap (4 s, 2 cores at load 12).
    runs = baselines.kmeans_runs(jax.random.key(1), blobs.points, 8, 4)
    assert runs.centers.shape == (4, 8, 5) and runs.labels.shape == (4, 1600)
    best = baselines.kmeans(jax.random.key(1), blobs.points, 8, num_runs=4)
    assert float(best.inertia) == pytest.approx(float(jnp.min(runs.inertia)))


def test_kmeans_plusplus_draws_distinct_data_points(blobs):
    seeds = np.asarray(baselines.kmeans_plusplus(jax.random.key(2), blobs.points, 8))
    rows = [np.flatnonzero(np.all(blobs.points == s, axis=1)) for s in seeds]
    assert all(len(r) == 1 for r in rows) and len({int(r[0]) for r in rows}) == 8
    # Squared-distance weighting spreads the seeds over the blobs: one per blob here.
    assert len(set(blobs.labels[[int(r[0]) for r in rows]])) == 8


@pytest.mark.slow
def test_lloyd_matches_sklearn_from_the_same_seeds():
    # Long because: Lloyd here and in scikit-learn (7 s, 2 cores at load 12).
    from sklearn.cluster import KMeans

    data = synthetic_blobs(600, 3, num_blobs=6, std=15.0, box=BOX, seed=8)  # overlapping: many iterations
    seeds = baselines.kmeans_plusplus(jax.random.key(3), data.points, 6)
    ours = baselines.lloyd(jnp.asarray(data.points), seeds, tolerance=0.0)
    reference = KMeans(6, init=np.asarray(seeds), n_init=1, algorithm="lloyd", tol=0.0).fit(data.points)
    np.testing.assert_allclose(ours.centers, reference.cluster_centers_, atol=1e-3)
    np.testing.assert_array_equal(ours.labels, reference.labels_)
    assert int(ours.num_iterations) > 1


# ------------------------------------------------------------- DP-Lloyd budget
def test_su_num_iterations_rule():
    # Synth-10d: epsilon_m = sqrt(500 * 64^3 / 1e10 * (10 + cbrt(2.025))^3) ~ 4.3 > epsilon: clamped to 2.
    assert baselines.su_num_iterations(1.0, 100_000, 10, 64) == 2
    # Plenty of data and few clusters: clamped to 7.
    assert baselines.su_num_iterations(1.0, 10**9, 2, 2) == 7
    epsilon_m = math.sqrt(500 * 4**3 / 20_000**2 * (3 + np.cbrt(4 * 3 * 0.225**2)) ** 3)
    assert baselines.su_num_iterations(1.0, 20_000, 3, 4) == int(min(max(1.0 / epsilon_m, 2), 7))


@pytest.mark.parametrize("dimensions", [1, 10, 100])
def test_dp_lloyd_budget_adds_up_with_su_ratio(dimensions):
    budget = baselines.dp_lloyd_budget(0.7, BOX, dimensions, 3)
    assert budget.total_epsilon == pytest.approx(0.7, abs=1e-15)
    assert budget.sum_epsilon / budget.count_epsilon == pytest.approx(np.cbrt(4 * dimensions * 0.225**2))
    assert budget.sum_l1_sensitivity == pytest.approx(100.0 * dimensions)  # mid-shifted: half the width
    assert budget.sum_noise_scale == pytest.approx(budget.sum_l1_sensitivity / budget.sum_epsilon)
    assert budget.count_noise_scale == pytest.approx(1.0 / budget.count_epsilon)


def test_dp_lloyd_budget_uses_per_dimension_bounds():
    budget = baselines.dp_lloyd_budget(1.0, ((0.0, -2.0), (4.0, 2.0)), 2, 2)
    assert budget.sum_l1_sensitivity == pytest.approx(2.0 + 2.0)


def test_dp_lloyd_rejects_missing_bounds_and_size(blobs):
    with pytest.raises(ValueError, match="bounds"):
        baselines.dp_lloyd(jax.random.key(0), blobs.points, 8, 1.0, None, num_iterations=2)
    with pytest.raises(ValueError, match="num_points_public"):
        baselines.dp_lloyd(jax.random.key(0), blobs.points, 8, 1.0, BOX)


# ------------------------------------------------------------- DP-Lloyd output
@pytest.mark.slow
def test_dp_lloyd_clips_points_to_the_bounds(blobs):
    # Long because: compiles DP-Lloyd again for its data (5 s, 2 cores at load 12).
    points = np.array(blobs.points)
    points[0] = 1e6  # far outside the box
    clipped = np.clip(points, *BOX)
    run = functools.partial(baselines.dp_lloyd, num_clusters=8, epsilon=1.0, bounds=BOX, num_iterations=2)
    outlier = run(jax.random.key(5), points)
    reference = run(jax.random.key(5), clipped)
    np.testing.assert_array_equal(outlier.centers, reference.centers)
    assert np.all((np.asarray(outlier.centers) >= BOX[0]) & (np.asarray(outlier.centers) <= BOX[1]))


def _lloyd_steps(points, start, iterations):
    """NumPy oracle: plain Lloyd steps; an empty cluster keeps its centre."""
    centers = np.array(start, np.float64)
    for _ in range(iterations):
        labels = np.argmin(((points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
        centers = np.array(
            [points[labels == c].mean(axis=0) if np.any(labels == c) else centers[c] for c in range(len(centers))]
        )
    return centers


@pytest.mark.slow
def test_dp_lloyd_with_negligible_noise_is_lloyd_from_the_separated_start(blobs):
    # Long because: compiles DP-Lloyd and Lloyd (6 s in the fast loop, 2 cores at load 9).
    key = jax.random.key(6)
    lower, upper = jnp.full(5, BOX[0]), jnp.full(5, BOX[1])
    result = baselines.dp_lloyd(key, blobs.points, 8, 1e9, BOX, num_iterations=2)
    start = baselines.separated_uniform_centers(jax.random.fold_in(key, 0), 8, lower, upper)
    expected = _lloyd_steps(blobs.points.astype(np.float64), start, 2)
    np.testing.assert_allclose(result.centers, expected, atol=1e-2)
    assert result.noisy_counts.shape == (2, 8) and np.any(result.noisy_counts[0] < 1)  # an empty cluster
    np.testing.assert_allclose(
        result.noisy_counts[-1],
        np.bincount(np.asarray(metrics.assign_to_centers(blobs.points, result.centers).labels), minlength=8),
        atol=0.5,
    )


@pytest.mark.slow
def test_dp_lloyd_noise_grows_with_the_bounds(blobs):
    # Same data, same key: a box 100 times wider means 100 times the Laplace scale of the sums.
    # Long because: compiles DP-Lloyd at two bounds (2 s in the fast loop, 2 cores at load 8).
    narrow = baselines.dp_lloyd(jax.random.key(7), blobs.points, 8, 1.0, BOX, num_iterations=2)
    wide = baselines.dp_lloyd(jax.random.key(7), blobs.points, 8, 1.0, (-1e4, 1e4), num_iterations=2)
    assert wide.budget.sum_noise_scale == pytest.approx(100 * narrow.budget.sum_noise_scale)
    error = lambda r: np.mean(_nearest_distances(r.centers, blobs.centers))  # noqa: E731
    assert error(wide) > error(narrow)


@pytest.mark.slow
def test_dp_lloyd_runs_under_jit_and_vmap(blobs):
    # Long because: compiles DP-Lloyd under jit and vmap (7 s, 2 cores at load 12).
    keys = jax.random.split(jax.random.key(9), 3)
    run = jax.jit(
        jax.vmap(
            lambda key, points: baselines.dp_lloyd(key, points, 8, 1.0, BOX, num_iterations=2).centers,
            in_axes=(0, None),
        )
    )
    batched = np.asarray(run(keys, jnp.asarray(blobs.points)))
    eager = baselines.dp_lloyd(keys[1], blobs.points, 8, 1.0, BOX, num_iterations=2).centers
    np.testing.assert_allclose(batched[1], eager, rtol=1e-5, atol=1e-3)
    assert batched.shape == (3, 8, 5) and not np.allclose(batched[0], batched[2])


@pytest.mark.slow
def test_dp_lloyd_counts_are_true_counts_plus_the_exact_noise_of_their_key_path(blobs):
    # Iteration 0 assigns to the data-independent start, so its true counts are known: the
    # released counts minus them must be exactly the discrete Laplace draw of iteration 0's
    # count key with the budget's count epsilon (a halved or re-keyed noise fails this).
    # Long because: compiles DP-Lloyd (4 s in the fast loop, 2 cores at load 8).
    key = jax.random.key(12)
    lower, upper = jnp.full(5, BOX[0]), jnp.full(5, BOX[1])
    result = baselines.dp_lloyd(key, blobs.points, 8, 1.0, BOX, num_iterations=3)
    start = baselines.separated_uniform_centers(jax.random.fold_in(key, 0), 8, lower, upper)
    true = np.bincount(np.asarray(metrics.assign_to_centers(jnp.clip(blobs.points, *BOX), start).labels), minlength=8)
    noise = np.asarray(exact.to_float32(count_noise_of_iterations(key, result.budget, 8)))
    np.testing.assert_array_equal(np.asarray(result.noisy_counts[0]), true + noise[0])
    assert np.any(noise != 0) and noise.shape == (3, 8)


def test_separated_uniform_centers_spread_inside_the_box():
    lower, upper = jnp.zeros(2), jnp.ones(2)
    centers = np.asarray(baselines.separated_uniform_centers(jax.random.key(11), 4, lower, upper))
    # Separation p = 1/2 and 1/4 cannot hold 4 centres, so p <= 1/8: check the guarantee for the
    # largest p whose conditions hold, which must be one of 1/8, 1/16, ...
    pairwise = np.linalg.norm(centers[:, None] - centers[None], axis=-1)[np.triu_indices(4, 1)]
    margin = np.min(np.minimum(centers, 1 - centers))
    p = 1 / 8
    while not (pairwise.min() >= 2 * p and margin >= p):
        p /= 2
    assert p >= 1 / 64  # 100 retries per centre make a deep fall very unlikely


# ------------------------------------------------------------------ references
@pytest.mark.slow
def test_kmeans_references_rank_by_silhouette_and_find_k():
    # Long because: k-means for many k and the silhouettes (11 s, 2 cores at load 12).
    data = synthetic_blobs(600, 2, num_blobs=3, std=1.0, box=BOX, seed=12)
    refs = baselines.kmeans_references(
        jax.random.key(13), data.points, (2, 3), runs_per_k=2, num_references=3, silhouette_sample_size=300
    )
    assert refs.centers.shape == (3, 3, 2) and refs.valid.shape == (3, 3)
    assert np.all(np.diff(refs.silhouette) <= 0)
    assert refs.best_num_clusters == 3
    np.testing.assert_array_equal(refs.valid.sum(axis=1), refs.num_clusters)
    assert np.all(np.isnan(refs.centers[~refs.valid])) and np.all(np.isfinite(refs.centers[refs.valid]))


def test_kmeans_references_reject_too_few_runs():
    with pytest.raises(ValueError, match="cannot give"):
        baselines.kmeans_references(jax.random.key(0), np.zeros((10, 2)), (2,), runs_per_k=3, num_references=5)
