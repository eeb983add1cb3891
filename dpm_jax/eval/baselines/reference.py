"""The reference clusterings of the KMeans distance (DPM paper, Section 6.2).

"We first conduct a non-private hyper-parameter search with the KMeans clustering
algorithm to find multiple sets of clusters that maximise the silhouette score
[...] we pick the top 20 KMeans runs" (the DPM paper, Section 6.2).

:func:`kmeans_references` runs ``runs_per_k`` independent k-means++ / Lloyd runs
(scikit-learn's ``n_init=1``, as in the authors' evaluation) for every candidate
number of clusters, scores each run with the sampled silhouette score, and keeps
the ``num_references`` best runs, padded to the largest k. For a labelled data set
the candidates are just the number of classes; for an unlabelled one a grid of k
values makes it the paper's search ("we let the non-private KMeans [...] evaluate
multiple number of clusters and use those that maximises the silhouette score",
Section 6.1). Not differentially private: references are for evaluation only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax.eval.baselines.kmeans import kmeans_runs
from dpm_jax.eval.metrics import sampled_silhouette_score

__all__ = ["KMeansReferences", "kmeans_references"]


class KMeansReferences(NamedTuple):
    """The kept reference clusterings, best silhouette first.

    Attributes:
      centers: (r, k_max, d) centres, rows beyond a run's k are NaN.
      valid: (r, k_max) bool, the real rows of ``centers``.
      num_clusters: (r,) k of every reference.
      silhouette: (r,) sampled silhouette score of every reference.
    """

    centers: np.ndarray
    valid: np.ndarray
    num_clusters: np.ndarray
    silhouette: np.ndarray

    @property
    def best_num_clusters(self) -> int:
        """k of the reference with the highest silhouette score."""
        return int(self.num_clusters[0])


def kmeans_references(
    key: jax.Array,
    points,
    candidate_num_clusters: Sequence[int],
    runs_per_k: int,
    num_references: int = 20,
    silhouette_sample_size: int = 10_000,
) -> KMeansReferences:
    """Section 6.2's references: the ``num_references`` k-means runs with the best silhouette.

    Args:
      key: PRNG key. Candidate i splits ``fold_in(key, i)`` into a key for its
        runs (:func:`dpm_jax.eval.baselines.kmeans_runs`) and one whose ``fold_in(., r)``
        draws the silhouette sample of its run r.
      points: (n, d) data.
      candidate_num_clusters: the values of k searched.
      runs_per_k: k-means runs per candidate; ``len(candidates) * runs_per_k``
        must be at least ``num_references``.
      num_references: how many runs to keep (the paper: 20).
      silhouette_sample_size: points per silhouette evaluation (the authors: 10,000).
    """
    candidates = [int(k) for k in candidate_num_clusters]
    if not candidates or min(candidates) < 2:
        raise ValueError(f"candidate_num_clusters must be non-empty and >= 2, got {candidate_num_clusters!r}")
    if len(candidates) * runs_per_k < num_references:
        raise ValueError(f"{len(candidates)} candidates x {runs_per_k} runs cannot give {num_references} references")
    points = jnp.asarray(points)
    max_k = max(candidates)
    all_centers, all_k, all_scores = [], [], []
    for index, k in enumerate(candidates):
        runs_key, silhouette_key = jax.random.split(jax.random.fold_in(key, index))
        runs = kmeans_runs(runs_key, points, k, runs_per_k)
        for run in range(runs_per_k):
            score = sampled_silhouette_score(
                jax.random.fold_in(silhouette_key, run), points, runs.labels[run], k, silhouette_sample_size
            )
            padded = np.full((max_k, points.shape[1]), np.nan)
            padded[:k] = np.asarray(runs.centers[run])
            all_centers.append(padded)
            all_k.append(k)
            all_scores.append(float(score))
    order = np.argsort(-np.asarray(all_scores), kind="stable")[:num_references]
    centers = np.stack(all_centers)[order]
    num_clusters = np.asarray(all_k)[order]
    return KMeansReferences(
        centers, np.arange(max_k)[None, :] < num_clusters[:, None], num_clusters, np.asarray(all_scores)[order]
    )
