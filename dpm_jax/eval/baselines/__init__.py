"""Baselines of the DPM paper's evaluation (Section 6.1), in JAX.

* :func:`kmeans` / :func:`kmeans_runs`: non-private k-means++ and Lloyd, restarts
  under ``jax.vmap`` (the paper's "KMeans (non-private)" column).
* :func:`dp_lloyd`: DP-Lloyd of Su et al. (2016) on bounded data, the procedure of
  diffprivlib's ``KMeans`` with a budget that adds up exactly (the "DP-Lloyd" column).
* :func:`kmeans_references`: the Section 6.2 reference clusterings of the KMeans
  distance (the best k-means runs by silhouette score).
"""

from dpm_jax.eval.baselines.dp_lloyd import (
    SU_RHO,
    DPLloydBudget,
    DPLloydResult,
    dp_lloyd,
    dp_lloyd_budget,
    separated_uniform_centers,
    su_num_iterations,
)
from dpm_jax.eval.baselines.kmeans import KMeansResult, kmeans, kmeans_plusplus, kmeans_runs, lloyd
from dpm_jax.eval.baselines.reference import KMeansReferences, kmeans_references

__all__ = [
    "SU_RHO",
    "DPLloydBudget",
    "DPLloydResult",
    "KMeansReferences",
    "KMeansResult",
    "dp_lloyd",
    "dp_lloyd_budget",
    "kmeans",
    "kmeans_plusplus",
    "kmeans_references",
    "kmeans_runs",
    "lloyd",
    "separated_uniform_centers",
    "su_num_iterations",
]
