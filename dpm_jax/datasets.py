"""Synthetic data sets of the DPM paper's evaluation (Section 6.1).

``synthetic_blobs`` reproduces the recipe of scikit-learn's ``make_blobs`` with
``center_box=(-100, 100)`` and ``cluster_std=1``: centres uniform in the box, equal
blob sizes (the remainder spread over the first blobs), Gaussian points around
them. It uses NumPy's ``default_rng``, so its numbers differ from scikit-learn's
for the same seed; the distribution is the same.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Dataset", "synthetic_blobs"]


class Dataset(NamedTuple):
    """Points, ground-truth labels, the public bounds and the true centres (if known)."""

    points: np.ndarray
    labels: np.ndarray
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
