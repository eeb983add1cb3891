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

The structure zoo (generated, labelled, any size ``n``, deterministic given ``seed``):
data sets shaped like the clustering problems users bring, beyond the paper's
well-separated blobs (each generator's docstring says what makes it what it is):
  ``grid_clusters`` (``zoo-grid``): 100 Gaussian clusters on a 10 x 10 grid in
  [0, 10^6]^2, the layout of the BIRCH1 benchmark;
  ``sine_clusters`` (``zoo-sine``): 100 clusters along a sine curve, BIRCH2's layout;
  ``unbalanced_clusters`` (``zoo-unbalanced``): 8 clusters whose sizes alternate 10:1;
  ``elongated_clusters`` (``zoo-elongated``): 9 clusters ten times longer than wide,
  each turned by its own angle;
  ``two_clusters_high_dim`` (``zoo-two-64d``): two clusters in 64 dimensions, apart
  in the full space but only 2 to 4 standard deviations apart along each axis;
  ``one_gaussian`` (``zoo-one-gaussian``): a single Gaussian, where the right answer
  is few clusters;
  ``uniform_noise`` (``zoo-uniform``): no clusters at all (one label).
Every zoo generator fixes its domain (the public bounds) before drawing anything
and draws Gaussian points from the distribution truncated to that domain (a point
outside is drawn again), so every point lies inside the bounds.

Bounds are public knowledge about the *domain*, never read from the data; every
loader documents where its bounds come from.
``load_dataset(name)`` maps the names of ``DATASETS`` to the loaders;
``load_dataset(name, n=..., seed=...)`` sizes and seeds a zoo data set (``ZOO``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = [
    "Dataset",
    "DATASETS",
    "ZOO",
    "synthetic_blobs",
    "paper_blobs",
    "digits",
    "china_pixels",
    "letters",
    "grid_clusters",
    "sine_clusters",
    "unbalanced_clusters",
    "elongated_clusters",
    "two_clusters_high_dim",
    "one_gaussian",
    "uniform_noise",
    "load_dataset",
]


class Dataset(NamedTuple):
    """Points, ground-truth labels (None if unlabelled), the public bounds and the true centres (if known).

    ``lattice``: the public step of a lattice the domain's values lie on (1 for integer
    features, known from how the data are recorded, like the bounds), or None.
    """

    points: np.ndarray
    labels: np.ndarray | None
    bounds: tuple[float, float]
    centers: np.ndarray | None
    name: str
    lattice: float | None = None


def synthetic_blobs(
    n: int = 100_000,
    d: int = 10,
    num_blobs: int = 64,
    std: float = 1.0,
    box: tuple[float, float] = (-100.0, 100.0),
    seed: int = 42,
) -> Dataset:
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
    return Dataset(points[order].astype(np.float32), labels[order], box, centers, f"synth-{d}d")


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
    points, labels, centers = make_blobs(
        n, d, centers=num_blobs, cluster_std=1.0, center_box=box, random_state=seed, return_centers=True
    )
    return Dataset(points.astype(np.float32), labels, box, centers, f"synth-{d}d")


def digits() -> Dataset:
    """scikit-learn's bundled copy of the UCI optical recognition of handwritten digits.

    1,797 points x 64 features, 10 classes. Bounds (0, 16): each feature counts the
    set pixels in one 4 x 4 block of a 32 x 32 bitmap (the data set's documentation),
    so it is an integer in [0, 16] by construction.
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    return Dataset(data.data.astype(np.float32), data.target, (0.0, 16.0), None, "digits", lattice=1.0)


def china_pixels() -> Dataset:
    """The 427 x 640 RGB pixels of scikit-learn's bundled sample image ``china.jpg``.

    273,280 points x 3 colour channels, unlabelled. Bounds (0, 255): 8-bit colour
    channels. Ships inside scikit-learn (reading it needs Pillow, a dependency of
    matplotlib).
    """
    from sklearn.datasets import load_sample_image

    image = load_sample_image("china.jpg")
    return Dataset(image.reshape(-1, 3).astype(np.float32), None, (0.0, 255.0), None, "china-pixels", lattice=1.0)


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
        raise FileNotFoundError(
            f"UCI Letters not found at {path}: pass path=, set DPM_JAX_LETTERS, or "
            "use a repository checkout (benchmarks/data/uci_letters.csv)"
        )
    table = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=str)
    labels = np.array([ord(letter) - ord("A") for letter in table[:, 0]])
    return Dataset(table[:, 1:].astype(np.float32), labels, (0.0, 15.0), None, "letters", lattice=1.0)


# ------------------------------------------------------------------ structure zoo
def _check_zoo_size(n: int, num_clusters: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < num_clusters:
        raise ValueError(f"n must be an integer >= {num_clusters} (one point per cluster), got {n!r}")


def _proportional_sizes(n: int, weights: np.ndarray) -> np.ndarray:
    """Sizes proportional to ``weights`` that add up to ``n`` (the largest remainders get the extra points)."""
    exact = n * weights / np.sum(weights)
    sizes = np.floor(exact).astype(int)
    sizes[np.argsort(sizes - exact, kind="stable")[: n - np.sum(sizes)]] += 1
    return sizes


def _gaussian_clusters(
    rng: np.random.Generator,
    n: int,
    centers: np.ndarray,
    scales: np.ndarray,
    bounds: tuple[float, float],
    name: str,
    weights: np.ndarray | None = None,
) -> Dataset:
    """Gaussian clusters ``centre + scale @ z`` truncated to the box ``bounds``^d, in random order.

    ``scales`` (k, d, d) are square roots of the clusters' covariances; cluster sizes
    follow ``weights`` (default equal). A point outside the box is drawn again, so
    the clusters are Gaussians conditioned on the public domain.
    """
    num_clusters, d = centers.shape
    sizes = _proportional_sizes(n, np.ones(num_clusters) if weights is None else np.asarray(weights, float))
    labels = rng.permutation(np.repeat(np.arange(num_clusters), sizes))
    points = np.empty((n, d))
    outside = np.ones(n, bool)
    while np.any(outside):
        rows = np.flatnonzero(outside)
        noise = rng.standard_normal((len(rows), d))
        for cluster in range(num_clusters):
            members = labels[rows] == cluster
            noise[members] = noise[members] @ scales[cluster].T
        points[rows] = centers[labels[rows]] + noise
        outside[rows] = np.any((points[rows] < bounds[0]) | (points[rows] > bounds[1]), axis=1)
    # lo and hi are float32 numbers, so rounding to float32 keeps every point inside [lo, hi].
    return Dataset(points.astype(np.float32), labels, bounds, centers, name)


def _isotropic(std: float, num_clusters: int, d: int) -> np.ndarray:
    return np.broadcast_to(std * np.eye(d), (num_clusters, d, d))


def grid_clusters(n: int = 100_000, seed: int = 0) -> Dataset:
    """100 Gaussian clusters on a 10 x 10 grid in [0, 10^6]^2: the layout of the BIRCH1 benchmark.

    Centres at ((i + 1/2) 10^5, (j + 1/2) 10^5) for i, j = 0..9, standard deviation
    10^5 / 6 in every direction: neighbours are six standard deviations apart, so
    their 3-sigma discs touch, as BIRCH1's clusters nearly do. Bounds (0, 10^6): the
    domain of the layout.
    """
    _check_zoo_size(n, 100)
    spacing = 1e5
    ticks = (np.arange(10) + 0.5) * spacing
    centers = np.stack(np.meshgrid(ticks, ticks, indexing="ij"), axis=-1).reshape(100, 2)
    return _gaussian_clusters(
        np.random.default_rng(seed), n, centers, _isotropic(spacing / 6, 100, 2), (0.0, 1e6), "zoo-grid"
    )


SINE_AMPLITUDE = 3.5e5


def sine_clusters(n: int = 100_000, seed: int = 0) -> Dataset:
    """100 Gaussian clusters along one period of a sine curve in [0, 10^6]^2: BIRCH2's layout.

    Centre i at x = (i + 1/2) 10^4, y = 5 10^5 + 3.5 10^5 sin(2 pi x / 10^6). Consecutive
    centres are at least 10^4 apart (where the curve is flat), and the standard
    deviation is 10^4 / 6: neighbours are at least six standard deviations apart,
    while the curve as a whole spans the domain. Bounds (0, 10^6).
    """
    _check_zoo_size(n, 100)
    x = (np.arange(100) + 0.5) * 1e4
    centers = np.stack([x, 5e5 + SINE_AMPLITUDE * np.sin(2 * np.pi * x / 1e6)], axis=1)
    return _gaussian_clusters(
        np.random.default_rng(seed), n, centers, _isotropic(1e4 / 6, 100, 2), (0.0, 1e6), "zoo-sine"
    )


def _separated_centers(
    rng: np.random.Generator, num_clusters: int, d: int, low: float, high: float, min_distance: float
) -> np.ndarray:
    """Centres uniform in [low, high]^d, each drawn again until it is ``min_distance`` from the earlier ones."""
    centers = []
    while len(centers) < num_clusters:
        candidate = rng.uniform(low, high, d)
        if all(np.linalg.norm(candidate - c) >= min_distance for c in centers):
            centers.append(candidate)
    return np.array(centers)


def unbalanced_clusters(n: int = 100_000, seed: int = 0) -> Dataset:
    """8 Gaussian clusters in 2-D whose sizes alternate 10:1 (four large, four small).

    Standard deviation 5; centres uniform in [-70, 70]^2, at least 40 (eight standard
    deviations) apart, so even a small cluster is separated from every large one.
    Bounds (-100, 100): the box the centres and their 6-sigma neighbourhoods live in.
    """
    _check_zoo_size(n, 44)
    rng = np.random.default_rng(seed)
    centers = _separated_centers(rng, 8, 2, -70.0, 70.0, 40.0)
    return _gaussian_clusters(
        rng, n, centers, _isotropic(5.0, 8, 2), (-100.0, 100.0), "zoo-unbalanced", weights=np.tile([10.0, 1.0], 4)
    )


ELONGATION = 10.0


def elongated_clusters(n: int = 100_000, seed: int = 0) -> Dataset:
    """9 Gaussian clusters in 2-D, each ten times longer than wide and turned by its own random angle.

    Centres on a 3 x 3 grid at -60, 0, 60; standard deviation 6 along the long axis
    and 0.6 across it, the long axis at a uniform random angle, so the clusters are
    not aligned with the coordinate axes DPM splits along. Bounds (-100, 100).
    """
    _check_zoo_size(n, 9)
    rng = np.random.default_rng(seed)
    ticks = np.array([-60.0, 0.0, 60.0])
    centers = np.stack(np.meshgrid(ticks, ticks, indexing="ij"), axis=-1).reshape(9, 2)
    angles = rng.uniform(0.0, np.pi, 9)
    rotations = np.stack(
        [np.stack([np.cos(angles), -np.sin(angles)], -1), np.stack([np.sin(angles), np.cos(angles)], -1)], axis=1
    )
    scales = rotations * np.array([6.0, 6.0 / ELONGATION])  # columns: long axis, short axis
    return _gaussian_clusters(rng, n, centers, scales, (-100.0, 100.0), "zoo-elongated")


def two_clusters_high_dim(n: int = 100_000, d: int = 64, seed: int = 0) -> Dataset:
    """Two equal Gaussian clusters in ``d`` (64) dimensions, standard deviation 10.

    The centres are +-a/2 with every |a_j| uniform in [20, 40]: along each axis the
    clusters are only 2 to 4 standard deviations apart (no axis has an empty gap
    between them), while in the full space they are at least 20 sqrt(d) = 160 (16
    standard deviations) apart. Bounds (-100, 100).
    """
    _check_zoo_size(n, 2)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    rng = np.random.default_rng(seed)
    offset = rng.uniform(20.0, 40.0, d) * rng.choice([-1.0, 1.0], d)
    centers = np.stack([offset / 2, -offset / 2])
    return _gaussian_clusters(rng, n, centers, _isotropic(10.0, 2, d), (-100.0, 100.0), f"zoo-two-{d}d")


def one_gaussian(n: int = 100_000, d: int = 2, seed: int = 0) -> Dataset:
    """One Gaussian cluster at the origin with standard deviation 15: the right answer is few clusters.

    Bounds (-100, 100) (more than six standard deviations on each side).
    """
    _check_zoo_size(n, 1)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return _gaussian_clusters(
        np.random.default_rng(seed), n, np.zeros((1, d)), _isotropic(15.0, 1, d), (-100.0, 100.0), "zoo-one-gaussian"
    )


def uniform_noise(n: int = 100_000, d: int = 2, seed: int = 0) -> Dataset:
    """Points uniform in [-100, 100]^d: no cluster structure, one label. Bounds (-100, 100)."""
    _check_zoo_size(n, 1)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    points = np.random.default_rng(seed).uniform(-100.0, 100.0, (n, d)).astype(np.float32)
    return Dataset(points, np.zeros(n, int), (-100.0, 100.0), None, "zoo-uniform")


ZOO: dict[str, Callable[..., Dataset]] = {
    "zoo-grid": grid_clusters,
    "zoo-sine": sine_clusters,
    "zoo-unbalanced": unbalanced_clusters,
    "zoo-elongated": elongated_clusters,
    "zoo-two-64d": two_clusters_high_dim,
    "zoo-one-gaussian": one_gaussian,
    "zoo-uniform": uniform_noise,
}


def _synth(d: int) -> Callable[[], Dataset]:
    def load() -> Dataset:
        try:
            return paper_blobs(d)
        except ImportError:
            warnings.warn(
                f"scikit-learn is not installed: synth-{d}d falls back to synthetic_blobs, "
                "the same distribution with different numbers",
                stacklevel=3,
            )
            return synthetic_blobs(100_000, d)

    return load


DATASETS: dict[str, Callable[[], Dataset]] = {
    "synth-10d": _synth(10),
    "synth-100d": _synth(100),
    "digits": digits,
    "china-pixels": china_pixels,
    "letters": letters,
    **ZOO,
}


def load_dataset(name: str, n: int | None = None, seed: int | None = None) -> Dataset:
    """The data set called ``name`` (a key of :data:`DATASETS`); ``n`` and ``seed`` size and seed a zoo data set.

    Without them a zoo data set has 100,000 points and seed 0.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    options = {key: value for key, value in (("n", n), ("seed", seed)) if value is not None}
    if options and name not in ZOO:
        raise ValueError(f"{name!r} is a fixed data set: n and seed apply to the zoo only ({', '.join(ZOO)})")
    return DATASETS[name](**options)
