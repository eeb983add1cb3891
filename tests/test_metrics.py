"""dpm_jax.eval.metrics against scikit-learn and hand-computed examples."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import silhouette_score as sklearn_silhouette

from dpm_jax.eval import metrics
from dpm_jax.eval.datasets import synthetic_blobs


@pytest.fixture(scope="module")
def blobs():
    """300 points of 5 blobs in 4 dimensions, labels with a gap (value 3 unused)."""
    data = synthetic_blobs(300, 4, num_blobs=5, std=8.0, box=(-30.0, 30.0), seed=3)
    labels = np.where(data.labels == 3, 6, data.labels)
    return data.points.astype(np.float64), labels


def _silhouette64(points, labels, num_labels, **kwargs):
    with jax.enable_x64(True):
        return float(
            metrics.silhouette_score(jnp.asarray(points, jnp.float64), jnp.asarray(labels), num_labels, **kwargs)
        )


# ------------------------------------------------------------------ silhouette
def test_silhouette_matches_sklearn_float64(blobs):
    points, labels = blobs
    assert _silhouette64(points, labels, 8) == pytest.approx(sklearn_silhouette(points, labels), abs=1e-9)


def test_silhouette_matches_sklearn_on_overlapping_random_labels(blobs):
    points, _ = blobs
    labels = np.random.default_rng(0).integers(0, 4, len(points))
    # Near-zero silhouette: b and a almost equal, the hardest case for precision.
    assert _silhouette64(points, labels, 4) == pytest.approx(sklearn_silhouette(points, labels), abs=1e-9)


def test_silhouette_singletons_score_zero_like_sklearn():
    points = np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0], [9.0, 0.0], [9.0, 1.5]])
    labels = np.array([0, 0, 1, 2, 2])  # cluster 1 is a singleton
    assert _silhouette64(points, labels, 3) == pytest.approx(sklearn_silhouette(points, labels), abs=1e-12)


def test_silhouette_hand_computed_two_clusters():
    # a = 1 for every point; b = mean distance to the two points 10 and 11 (or 0 and 1) away.
    points = np.array([[0.0], [1.0], [10.0], [11.0]])
    labels = np.array([0, 0, 1, 1])
    s_outer = (10.5 - 1.0) / 10.5  # points 0 and 11: distances 10, 11 to the other cluster
    s_inner = (9.5 - 1.0) / 9.5  # points 1 and 10: distances 9, 10
    assert _silhouette64(points, labels, 2) == pytest.approx((s_outer + s_inner) / 2, abs=1e-12)


@pytest.mark.slow
def test_silhouette_chunked_equals_unchunked(blobs):
    # Long because: compiles the silhouette twice (3 s in the fast loop, 2 cores at load 8).
    points, labels = blobs
    whole = _silhouette64(points, labels, 8, chunk_size=512)
    for chunk_size in (7, 64, 299):
        assert _silhouette64(points, labels, 8, chunk_size=chunk_size) == pytest.approx(whole, abs=1e-10)


def test_silhouette_float32_close_to_sklearn(blobs):
    points, labels = blobs
    ours = float(metrics.silhouette_score(jnp.asarray(points, jnp.float32), jnp.asarray(labels), 8))
    assert ours == pytest.approx(sklearn_silhouette(points, labels), abs=1e-5)


def test_silhouette_mask_equals_subset(blobs):
    points, labels = blobs
    mask = np.arange(len(points)) % 3 != 0
    with jax.enable_x64(True):
        masked = float(
            metrics.silhouette_score(jnp.asarray(points), jnp.asarray(labels), 8, jnp.asarray(mask), chunk_size=64)
        )
    assert masked == pytest.approx(sklearn_silhouette(points[mask], labels[mask]), abs=1e-9)


def test_silhouette_single_cluster_is_minus_one():
    points = np.random.default_rng(1).normal(size=(20, 3))
    assert _silhouette64(points, np.full(20, 2), 4) == -1.0


@pytest.mark.slow
def test_sampled_silhouette_is_the_silhouette_of_the_documented_sample(blobs):
    # Long because: compiles the sampled silhouette (3 s in the fast loop, 2 cores at load 8).
    points, labels = blobs
    key = jax.random.key(7)
    indices = np.asarray(metrics.silhouette_sample_indices(key, len(points), 120))
    assert indices.shape == (120,) and len(np.unique(indices)) == 120
    assert indices.min() >= 0 and indices.max() < len(points)
    with jax.enable_x64(True):
        sampled = float(metrics.sampled_silhouette_score(key, jnp.asarray(points), jnp.asarray(labels), 8, 120))
    assert sampled == pytest.approx(sklearn_silhouette(points[indices], labels[indices]), abs=1e-9)


def test_sampled_silhouette_follows_sklearn_sampling_rule(blobs):
    # scikit-learn's sample_size=m, random_state=s scores rs.permutation(n)[:m]: the same
    # rule as silhouette_sample_indices, so equal indices give equal scores.
    points, labels = blobs
    indices = np.random.RandomState(11).permutation(len(points))[:100]
    expected = sklearn_silhouette(points, labels, sample_size=100, random_state=11)
    assert _silhouette64(points[indices], labels[indices], 8) == pytest.approx(expected, abs=1e-9)


def test_sampled_silhouette_with_large_sample_is_exact(blobs):
    points, labels = blobs
    with jax.enable_x64(True):
        sampled = float(
            metrics.sampled_silhouette_score(jax.random.key(0), jnp.asarray(points), jnp.asarray(labels), 8, 10_000)
        )
    assert sampled == pytest.approx(sklearn_silhouette(points, labels), abs=1e-9)


def test_sampled_silhouette_differs_between_keys(blobs):
    points, labels = blobs
    scores = {
        float(
            metrics.sampled_silhouette_score(
                jax.random.key(k), jnp.asarray(points, jnp.float32), jnp.asarray(labels), 8, 50
            )
        )
        for k in range(4)
    }
    assert len(scores) > 1


# ------------------------------------------------------- assignment, inertia
def test_assign_to_centers_ignores_invalid_rows():
    points = jnp.array([[0.0, 0.0], [10.0, 0.0], [4.0, 0.0]])
    centers = jnp.array([[1.0, 0.0], [jnp.nan, jnp.nan], [4.5, 0.0], [9.0, 0.0]])
    valid = jnp.array([True, False, True, True])
    result = metrics.assign_to_centers(points, centers, valid)
    np.testing.assert_array_equal(result.labels, [0, 3, 2])
    np.testing.assert_allclose(result.squared_distances, [1.0, 1.0, 0.25])
    assert float(metrics.inertia(points, centers, valid)) == pytest.approx(2.25)


def test_assign_to_centers_without_valid_centre():
    result = metrics.assign_to_centers(jnp.ones((3, 2)), jnp.zeros((2, 2)), jnp.zeros(2, bool))
    assert np.all(np.isinf(result.squared_distances))


def test_assign_to_centers_chunked_equals_unchunked(blobs):
    points, _ = blobs
    centers = jnp.asarray(points[:9], jnp.float32)
    whole = metrics.assign_to_centers(jnp.asarray(points, jnp.float32), centers, chunk_size=512)
    chunked = metrics.assign_to_centers(jnp.asarray(points, jnp.float32), centers, chunk_size=13)
    np.testing.assert_array_equal(whole.labels, chunked.labels)
    np.testing.assert_array_equal(whole.squared_distances, chunked.squared_distances)


def test_inertia_matches_sklearn_kmeans():
    from sklearn.cluster import KMeans

    data = synthetic_blobs(400, 3, num_blobs=4, seed=5)
    model = KMeans(4, n_init=1, random_state=0).fit(data.points.astype(np.float64))
    with jax.enable_x64(True):
        ours = float(metrics.inertia(jnp.asarray(data.points, jnp.float64), jnp.asarray(model.cluster_centers_)))
    assert ours == pytest.approx(model.inertia_, rel=1e-9)


# --------------------------------------------------------------------- accuracy
def test_accuracy_hand_computed():
    clusters = jnp.array([0, 0, 1, 1, 1, 2])
    truth = jnp.array([0, 1, 1, 1, 0, 0])
    # cluster 0: one of each (majority 1 point), cluster 1: class 1 twice, cluster 2: 1 point.
    assert float(metrics.clustering_accuracy(clusters, truth, 3, 2)) == pytest.approx(4 / 6)


def test_accuracy_against_brute_force_and_invariant_to_cluster_names():
    rng = np.random.default_rng(2)
    clusters, truth = rng.integers(0, 7, 500), rng.integers(0, 4, 500)
    expected = sum(np.bincount(truth[clusters == c], minlength=4).max() for c in np.unique(clusters)) / 500
    renamed = np.array([5, 3, 0, 6, 1, 2, 4])[clusters]
    for labels in (clusters, renamed):
        accuracy = metrics.clustering_accuracy(jnp.asarray(labels), jnp.asarray(truth), 7, 4)
        assert float(accuracy) == pytest.approx(expected)


def test_accuracy_of_perfect_clustering_is_one():
    truth = jnp.array([2, 2, 0, 1, 1])
    assert float(metrics.clustering_accuracy(jnp.array([1, 1, 4, 0, 0]), truth, 5, 3)) == 1.0


# ------------------------------------------------------------ adjusted Rand index
def _ari64(labels, truth, num_clusters, num_classes):
    with jax.enable_x64(True):
        return float(metrics.adjusted_rand_index(jnp.asarray(labels), jnp.asarray(truth), num_clusters, num_classes))


def test_adjusted_rand_index_matches_sklearn_on_random_and_structured_labels():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(5)
    for n, clusters, classes in [(50, 3, 4), (1_000, 12, 5), (20_000, 100, 100), (7, 7, 1)]:
        truth = rng.integers(0, classes, n)
        noisy = np.where(rng.random(n) < 0.3, rng.integers(0, clusters, n), truth % clusters)
        for labels in (noisy, rng.integers(0, clusters, n)):
            assert _ari64(labels, truth, clusters, classes) == pytest.approx(
                adjusted_rand_score(truth, labels), abs=1e-12
            )


def test_adjusted_rand_index_special_cases():
    truth = np.array([0, 0, 1, 1, 2, 2])
    # Identical partitions score 1 whatever the names; one cluster for 3 classes scores 0.
    assert _ari64(np.array([2, 2, 0, 0, 1, 1]), truth, 3, 3) == pytest.approx(1.0)
    assert _ari64(np.zeros(6, int), truth, 1, 3) == pytest.approx(0.0)
    # One true class (no structure): finding one cluster agrees (1), finding several scores 0.
    assert _ari64(np.zeros(6, int), np.zeros(6, int), 1, 1) == 1.0
    assert _ari64(np.array([0, 1, 0, 1, 2, 2]), np.zeros(6, int), 3, 1) == 0.0
    # Merging two of four 2-point classes: 4 pairs share cluster and class; cluster sizes 4, 2, 2 give
    # 6 + 1 + 1 pairs, the classes 4 * 1, all points C(8, 2) = 28.
    merged, four = np.array([0, 0, 0, 0, 1, 1, 2, 2]), np.array([0, 0, 1, 1, 2, 2, 3, 3])
    index, rows, columns, total = 4, 6 + 1 + 1, 4, 28
    expected = rows * columns / total
    assert _ari64(merged, four, 3, 4) == pytest.approx((index - expected) / ((rows + columns) / 2 - expected))


def test_adjusted_rand_index_is_symmetric_and_float32_close():
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 6, 5_000), rng.integers(0, 4, 5_000)
    b = np.where(rng.random(5_000) < 0.5, a % 4, b)
    assert _ari64(a, b, 6, 4) == pytest.approx(_ari64(b, a, 4, 6), abs=1e-12)
    assert float(metrics.adjusted_rand_index(jnp.asarray(a), jnp.asarray(b), 6, 4)) == pytest.approx(
        _ari64(a, b, 6, 4), abs=1e-5
    )


# ------------------------------------------------------------- KMeans distance
def test_kmeans_distance_hand_computed():
    centers = jnp.array([[0.0, 0.0], [3.0, 4.0], [jnp.nan, jnp.nan]])
    valid = jnp.array([True, True, False])
    references = jnp.array([[[0.0, 0.0], [jnp.nan, jnp.nan]], [[3.0, 4.0], [0.0, 1.0]]])
    reference_valid = jnp.array([[True, False], [True, True]])
    # Reference 0: distances 0 and 5 (mean 2.5); reference 1: 1 and 0 (mean 0.5).
    assert float(metrics.kmeans_distance(centers, valid, references, reference_valid)) == pytest.approx(1.5)
    normalised = metrics.normalised_kmeans_distance(centers, valid, references, reference_valid, (0.0, 10.0))
    assert float(normalised) == pytest.approx(1.5 / (10.0 * math.sqrt(2.0)))


def test_kmeans_distance_zero_for_a_reference_and_one_across_the_box():
    reference = jnp.array([[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    reference_valid = jnp.ones((1, 2), bool)
    assert float(metrics.kmeans_distance(reference[0], jnp.ones(2, bool), reference, reference_valid)) == 0.0
    corner = jnp.array([[2.0, 2.0, 2.0]])
    far = metrics.normalised_kmeans_distance(
        corner, jnp.ones(1, bool), reference[:, :1], reference_valid[:, :1], (0.0, 2.0)
    )
    assert float(far) == pytest.approx(1.0)


def test_bounds_diameter_per_dimension():
    assert metrics.bounds_diameter(((0.0, -1.0), (3.0, 3.0)), 2) == pytest.approx(5.0)
    assert metrics.bounds_diameter((-100.0, 100.0), 10) == pytest.approx(200.0 * math.sqrt(10.0))


def test_metrics_compose_under_jit_and_vmap(blobs):
    points, labels = blobs
    points, labels = jnp.asarray(points, jnp.float32), jnp.asarray(labels)
    scores = jax.jit(jax.vmap(lambda key: metrics.sampled_silhouette_score(key, points, labels, 8, 60)))(
        jax.random.split(jax.random.key(0), 3)
    )
    assert scores.shape == (3,) and bool(jnp.all((scores > -1) & (scores <= 1)))
