"""dpm_jax.eval.datasets: the paper's synthetic data and the real data sets that ship offline."""

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
    assert data.points.shape == (1797, 64) and data.bounds == (0.0, 16.0)
    assert np.all((data.points >= 0) & (data.points <= 16)) and np.all(data.points == np.round(data.points))
    assert np.array_equal(np.unique(data.labels), np.arange(10))


def test_china_pixels_are_unlabelled_8_bit_colours():
    data = datasets.load_dataset("china-pixels")
    assert data.points.shape == (427 * 640, 3) and data.labels is None and data.bounds == (0.0, 255.0)
    assert np.all((data.points >= 0) & (data.points <= 255))
    assert len(data.points) >= 10_000  # the "larger real data set" of the evaluation


def test_load_dataset_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown data set"):
        datasets.load_dataset("mnist")
    assert set(datasets.DATASETS) == {"synth-10d", "synth-100d", "digits", "china-pixels", "letters"}


def test_letters_is_the_uci_file_with_public_integer_bounds(tmp_path):
    data = datasets.letters()
    assert data.points.shape == (20_000, 16) and data.bounds == (0.0, 15.0)
    assert data.points.min() == 0 and data.points.max() == 15
    assert np.array_equal(np.unique(data.labels), np.arange(26))
    with pytest.raises(FileNotFoundError, match="UCI Letters not found"):
        datasets.letters(tmp_path / "missing.csv")


def test_synthetic_blobs_numpy_recipe():
    data = datasets.synthetic_blobs(1000, 3, num_blobs=7, seed=1)
    assert np.array_equal(np.unique(np.bincount(data.labels)), [142, 143])
    again = datasets.synthetic_blobs(1000, 3, num_blobs=7, seed=1)
    np.testing.assert_array_equal(data.points, again.points)
