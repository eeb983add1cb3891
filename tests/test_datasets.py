"""dpm_jax.eval.datasets: the paper's synthetic data, the real data sets that ship offline, the structure zoo."""

import numpy as np
import pytest

from dpm_jax.eval import datasets


def test_paper_blobs_is_sklearn_make_blobs_with_the_authors_arguments():
    from sklearn.datasets import make_blobs

    data = datasets.paper_blobs(10)
    points, labels = make_blobs(100_000, 10, centers=64, center_box=(-100, 100), random_state=42)
    np.testing.assert_array_equal(data.points, points.astype(np.float32))
    np.testing.assert_array_equal(data.labels, labels)
    assert data.bounds == (-100.0, 100.0) and data.name == "synth-10d"


@pytest.mark.parametrize("name, d", [("synth-10d", 10), ("synth-100d", 100)])
def test_synth_data_sets_match_table_1(name, d):
    data = datasets.load_dataset(name)
    assert data.points.shape == (100_000, d) and data.points.dtype == np.float32
    assert np.array_equal(np.unique(np.bincount(data.labels)), [1562, 1563])  # 64 equal blobs
    assert data.centers.shape == (64, d)
    assert np.all((data.centers >= -100) & (data.centers <= 100))
    # Unit standard deviation around the blob centres.
    assert np.std(data.points - data.centers[data.labels]) == pytest.approx(1.0, abs=0.01)


def test_digits_bounds_hold_by_construction():
    data = datasets.load_dataset("digits")
    assert data.points.shape == (1797, 64) and data.bounds == (0.0, 16.0) and data.lattice == 1.0
    assert np.all((data.points >= 0) & (data.points <= 16)) and np.all(data.points == np.round(data.points))
    assert np.array_equal(np.unique(data.labels), np.arange(10))


def test_china_pixels_are_unlabelled_8_bit_colours():
    data = datasets.load_dataset("china-pixels")
    assert data.points.shape == (427 * 640, 3) and data.labels is None and data.bounds == (0.0, 255.0)
    assert np.all((data.points >= 0) & (data.points <= 255)) and np.all(data.points == np.round(data.points))
    assert data.lattice == 1.0
    assert len(data.points) >= 10_000  # the "larger real data set" of the evaluation


def test_load_dataset_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown data set"):
        datasets.load_dataset("mnist")
    assert set(datasets.DATASETS) == {"synth-10d", "synth-100d", "digits", "china-pixels", "letters", *datasets.ZOO}


def test_letters_is_the_uci_file_with_public_integer_bounds(tmp_path):
    data = datasets.letters()
    assert data.points.shape == (20_000, 16) and data.bounds == (0.0, 15.0)
    assert data.points.min() == 0 and data.points.max() == 15
    assert data.lattice == 1.0 and np.all(data.points == np.round(data.points))
    assert np.array_equal(np.unique(data.labels), np.arange(26))
    with pytest.raises(FileNotFoundError, match="UCI Letters not found"):
        datasets.letters(tmp_path / "missing.csv")


def test_synthetic_blobs_numpy_recipe():
    data = datasets.synthetic_blobs(1000, 3, num_blobs=7, seed=1)
    assert np.array_equal(np.unique(np.bincount(data.labels)), [142, 143])
    again = datasets.synthetic_blobs(1000, 3, num_blobs=7, seed=1)
    np.testing.assert_array_equal(data.points, again.points)


# ------------------------------------------------------------------ structure zoo
ZOO_SHAPES = {
    "zoo-grid": (2, 100),
    "zoo-sine": (2, 100),
    "zoo-unbalanced": (2, 8),
    "zoo-elongated": (2, 9),
    "zoo-two-64d": (64, 2),
    "zoo-one-gaussian": (2, 1),
    "zoo-uniform": (2, 1),
}


def _zoo(name, n=5_000, seed=0):
    return datasets.load_dataset(name, n=n, seed=seed)


@pytest.mark.parametrize("name", list(datasets.ZOO))
def test_zoo_shapes_labels_and_points_inside_the_public_bounds(name):
    d, k = ZOO_SHAPES[name]
    data = _zoo(name, n=3_001)
    assert data.name == name and data.points.shape == (3_001, d) and data.points.dtype == np.float32
    assert data.lattice is None  # continuous values
    assert np.array_equal(np.unique(data.labels), np.arange(k))
    lower, upper = data.bounds
    assert np.all((data.points >= lower) & (data.points <= upper))
    if data.centers is not None:
        assert data.centers.shape == (k, d)
        # Every point is nearer its own centre than the bounds' diameter (labels belong to the points).
        assert np.all(np.linalg.norm(data.points - data.centers[data.labels], axis=1) < (upper - lower) * np.sqrt(d))


@pytest.mark.parametrize("name", list(datasets.ZOO))
def test_zoo_is_deterministic_given_the_seed(name):
    first, again, other = _zoo(name, seed=3), _zoo(name, seed=3), _zoo(name, seed=4)
    np.testing.assert_array_equal(first.points, again.points)
    np.testing.assert_array_equal(first.labels, again.labels)
    assert not np.array_equal(first.points, other.points)


@pytest.mark.parametrize("name", list(datasets.ZOO))
def test_zoo_rejects_bad_sizes_before_any_work(name):
    for n in (0, 2.5, True):
        with pytest.raises(ValueError, match="n must be an integer"):
            datasets.load_dataset(name, n=n)


def test_fixed_data_sets_refuse_a_size():
    with pytest.raises(ValueError, match="fixed data set"):
        datasets.load_dataset("letters", n=100)


def _nearest_center_labels(data):
    distances = np.linalg.norm(data.points[:, None, :] - data.centers[None, :, :], axis=2)
    return np.argmin(distances, axis=1)


def _std_along(points, direction):
    return np.std((points - points.mean(axis=0)) @ direction)


def test_grid_is_ten_by_ten_separated_clusters_tiling_the_domain():
    data = _zoo("zoo-grid", n=20_000)
    for axis in range(2):
        np.testing.assert_allclose(np.unique(data.centers[:, axis]), (np.arange(10) + 0.5) * 1e5)
    assert data.bounds == (0.0, 1e6)
    # Six standard deviations apart: a point lands nearer a neighbour only beyond 3 sigma towards one of
    # its (up to) four neighbours, expected 4 * 0.00135 = 0.54% of the points.
    assert np.mean(_nearest_center_labels(data) == data.labels) > 0.99
    inner = data.points[np.isin(data.labels, [44, 45, 54, 55])]  # clusters far from the truncating edges
    assert np.std(inner - data.centers[data.labels[np.isin(data.labels, [44, 45, 54, 55])]]) == pytest.approx(
        1e5 / 6, rel=0.05
    )


def test_sine_centres_follow_one_period_and_stay_six_standard_deviations_apart():
    data = _zoo("zoo-sine", n=20_000)
    x, y = data.centers.T
    np.testing.assert_allclose(y, 5e5 + datasets.SINE_AMPLITUDE * np.sin(2 * np.pi * x / 1e6))
    assert np.ptp(x) > 0.95e6 and np.ptp(y) > 0.65e6  # the curve spans the domain
    gaps = np.linalg.norm(np.diff(data.centers, axis=0), axis=1)
    std = np.std(data.points - data.centers[data.labels])
    assert gaps.min() >= 6 * std * 0.95
    # At most 2 * 0.135% of the points cross the midpoint towards a neighbour (two neighbours, >= 3 sigma).
    assert np.mean(_nearest_center_labels(data) == data.labels) > 0.99


def test_unbalanced_sizes_alternate_ten_to_one_and_small_clusters_are_separated():
    data = _zoo("zoo-unbalanced", n=44_000)
    np.testing.assert_array_equal(np.bincount(data.labels), np.tile([10_000, 1_000], 4))
    assert np.bincount(datasets.unbalanced_clusters(5_000).labels).max() / np.bincount(
        datasets.unbalanced_clusters(5_000).labels
    ).min() == pytest.approx(10, rel=0.01)
    pairwise = np.linalg.norm(data.centers[:, None] - data.centers[None], axis=2)
    assert pairwise[~np.eye(8, dtype=bool)].min() >= 40
    assert np.mean(_nearest_center_labels(data) == data.labels) > 0.999


def test_elongated_clusters_are_ten_times_longer_than_wide_and_not_axis_aligned():
    data = _zoo("zoo-elongated", n=45_000)
    angles = []
    for cluster in range(9):
        points = data.points[data.labels == cluster].astype(np.float64)
        variances, axes = np.linalg.eigh(np.cov(points.T))
        assert np.sqrt(variances[1] / variances[0]) == pytest.approx(datasets.ELONGATION, rel=0.1)
        angles.append(np.arctan2(axes[1, 1], axes[0, 1]) % np.pi)
    # Long axes point in different directions, and most are far from both coordinate axes.
    assert np.ptp(angles) > np.pi / 2
    off_axis = np.minimum(np.abs(np.array(angles) - np.pi / 2), np.minimum(angles, np.pi - np.array(angles)))
    assert np.sum(off_axis > np.pi / 16) >= 6


def test_two_clusters_in_64_dimensions_are_apart_in_space_but_not_along_any_axis():
    data = _zoo("zoo-two-64d", n=10_000)
    assert np.array_equal(np.bincount(data.labels), [5_000, 5_000])
    separation = np.abs(data.centers[0] - data.centers[1])
    std = np.std(data.points - data.centers[data.labels])
    assert std == pytest.approx(10.0, rel=0.02)
    assert np.all((separation >= 2 * std * 0.98) & (separation <= 4 * std * 1.02))
    assert np.linalg.norm(separation) >= 16 * std * 0.98
    assert np.all(_nearest_center_labels(data) == data.labels)
    # Along every single axis the two clusters' ranges overlap: no empty gap between them.
    for axis in range(64):
        first, second = (data.points[data.labels == c, axis] for c in (0, 1))
        assert max(first.min(), second.min()) < min(first.max(), second.max())


def test_one_gaussian_has_the_stated_centre_and_spread():
    data = _zoo("zoo-one-gaussian", n=20_000)
    np.testing.assert_allclose(data.points.mean(axis=0), [0.0, 0.0], atol=0.5)  # 5 standard errors
    np.testing.assert_allclose(np.cov(data.points.T.astype(np.float64)), 225 * np.eye(2), atol=10)


def test_uniform_noise_fills_the_box_evenly():
    data = _zoo("zoo-uniform", n=20_000)
    counts, _, _ = np.histogram2d(*data.points.T, bins=10, range=[(-100, 100)] * 2)
    chi_square = np.sum((counts - 200.0) ** 2 / 200.0)
    # 99 degrees of freedom: P(chi^2 > 150) is about 0.0007 for uniform points (fixed seed, so the test is fixed).
    assert chi_square < 150 and data.centers is None
