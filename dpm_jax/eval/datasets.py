"""Data sets of the DPM paper's evaluation (Section 6.1) and real ones that ship offline.

Synthetic (the DPM paper, "DPM: Clustering Sensitive Data through Separation", Section 6.1 and Table 1):
  ``synthetic_blobs`` reproduces the recipe of scikit-learn's ``make_blobs`` with
  ``center_box=(-100, 100)`` and ``cluster_std=1``: centres uniform in the box, equal
  blob sizes (the remainder spread over the first blobs), Gaussian points around
  them. It uses NumPy's ``default_rng``, so its numbers differ from scikit-learn's
  for the same seed; the distribution is the same. ``paper_blobs`` calls
  scikit-learn's ``make_blobs`` itself with the arguments of the authors' demo
  (100,000 points, 64 blobs, ``center_box=(-100, 100)``, ``random_state=42``):
  Synth-10d and Synth-100d exactly.

Real, shipped inside scikit-learn (no download at run time):
  ``digits``: the UCI optical handwritten digits, 1,797 x 64, 10 classes.
  ``china_pixels``: the RGB pixels of scikit-learn's sample photograph
  ``china.jpg``, 273,280 x 3, unlabelled (the colour quantisation example of
  scikit-learn's documentation clusters exactly these points with k-means).

Real, shipped with the repository's benchmarks (benchmarks/data/, provenance there):
  ``letters``: UCI Letter Recognition, 20,000 x 16 integer features in 0..15, 26
  classes: the data set of the DPM paper's Table 3.

Bounds are public knowledge about the *domain*, never read from the data; every
loader documents where its bounds come from.
``load_dataset(name)`` maps the names of ``DATASETS`` to the loaders.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["Dataset", "DATASETS", "synthetic_blobs", "paper_blobs", "digits", "china_pixels", "letters",
           "load_dataset"]


class Dataset(NamedTuple):
    """Points, ground-truth labels (None if unlabelled), the public bounds and the true centres (if known)."""

    points: np.ndarray
    labels: np.ndarray | None
    bounds: tuple[float, float]
    centers: np.ndarray | None
    name: str


def synthetic_blobs(n: int = 100_000, d: int = 10, num_blobs: int = 64, std: float = 1.0,
                    box: tuple[float, float] = (-100.0, 100.0), seed: int = 42) -> Dataset:
    """Synth-{d}d of the paper: ``num_blobs`` Gaussian blobs with centres uniform in ``box``^d."""
    if n < 1 or d < 1 or num_blobs < 1:
        raise ValueError(f"need n, d, num_blobs >= 1, got n={n}, d={d}, num_blobs={num_blobs}")
    rng = np.random.default_rng(seed)
    centers = rng.uniform(box[0], box[1], size=(num_blobs, d))
    sizes = np.full(num_blobs, n // num_blobs)
    sizes[: n % num_blobs] += 1
    labels = np.repeat(np.arange(num_blobs), sizes)
    points = centers[labels] + std * rng.standard_normal((n, d))
    order = rng.permutation(n)
    return Dataset(points[order].astype(np.float32), labels[order], box, centers,
                   f"synth-{d}d")


def paper_blobs(d: int, n: int = 100_000, num_blobs: int = 64, seed: int = 42) -> Dataset:
    """Synth-{d}d exactly as the authors generate it, with scikit-learn's ``make_blobs``.

    ``make_blobs(n, d, centers=num_blobs, cluster_std=1, center_box=(-100, 100),
    random_state=seed)`` (the authors' ``demo.py``). Bounds (-100, 100): the box the
    centres are drawn from, fixed before the data exist. With std 1 a point falls
    outside it only if it lies more than a few standard deviations beyond a centre
    near the edge; :func:`dpm_jax.cluster` clips such points. Needs scikit-learn.
    """
    from sklearn.datasets import make_blobs

    box = (-100.0, 100.0)
    points, labels, centers = make_blobs(n, d, centers=num_blobs, cluster_std=1.0, center_box=box,
                                         random_state=seed, return_centers=True)
    return Dataset(points.astype(np.float32), labels, box, centers, f"synth-{d}d")


def digits() -> Dataset:
    """scikit-learn's bundled copy of the UCI optical recognition of handwritten digits.

    1,797 points x 64 features, 10 classes. Bounds (0, 16): each feature counts the
    set pixels in one 4 x 4 block of a 32 x 32 bitmap (the data set's documentation),
    so it is an integer in [0, 16] by construction.
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    return Dataset(data.data.astype(np.float32), data.target, (0.0, 16.0), None, "digits")


def china_pixels() -> Dataset:
    """The 427 x 640 RGB pixels of scikit-learn's bundled sample image ``china.jpg``.

    273,280 points x 3 colour channels, unlabelled. Bounds (0, 255): 8-bit colour
    channels. Ships inside scikit-learn (reading it needs Pillow, a dependency of
    matplotlib).
    """
    from sklearn.datasets import load_sample_image

    image = load_sample_image("china.jpg")
    return Dataset(image.reshape(-1, 3).astype(np.float32), None, (0.0, 255.0), None, "china-pixels")


LETTERS_CSV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "uci_letters.csv"


def letters(path: str | os.PathLike | None = None) -> Dataset:
    """UCI Letter Recognition: 20,000 points x 16 features, 26 classes (the DPM paper's Table 3).

    Bounds (0, 15): every feature is an integer in 0..15 by the data set's
    construction (scaled statistics of the letter images). Read from ``path`` or, by
    default, the copy in the repository's benchmarks/data/ (``DPM_JAX_LETTERS``
    overrides it); a clear error names the file when it is missing.
    """
    path = Path(path or os.environ.get("DPM_JAX_LETTERS") or LETTERS_CSV)
    if not path.is_file():
        raise FileNotFoundError(f"UCI Letters not found at {path}: pass path=, set DPM_JAX_LETTERS, or "
                                "use a repository checkout (benchmarks/data/uci_letters.csv)")
    table = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=str)
    labels = np.array([ord(letter) - ord("A") for letter in table[:, 0]])
    return Dataset(table[:, 1:].astype(np.float32), labels, (0.0, 15.0), None, "letters")


def _synth(d: int) -> Callable[[], Dataset]:
    def load() -> Dataset:
        try:
            return paper_blobs(d)
        except ImportError:
            warnings.warn(f"scikit-learn is not installed: synth-{d}d falls back to synthetic_blobs, "
                          "the same distribution with different numbers", stacklevel=3)
            return synthetic_blobs(100_000, d)

    return load


DATASETS: dict[str, Callable[[], Dataset]] = {
    "synth-10d": _synth(10),
    "synth-100d": _synth(100),
    "digits": digits,
    "china-pixels": china_pixels,
    "letters": letters,
}


def load_dataset(name: str) -> Dataset:
    """The data set called ``name`` (a key of :data:`DATASETS`)."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]()
