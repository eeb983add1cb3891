"""Using a release: its k clusters in compact form, and labels of points by the nearest DP centre.

A :class:`dpm_jax.ClusterResult` keeps its clusters in the tree's slots (``centers`` has
2**P rows, ``valid`` marks the k real ones), so ``labels_nonprivate`` holds slot ids (e.g.
0, 32, 64, 96), not 0..k-1. The functions here give the compact form: centres (k, d) in
slot order, and labels 0..k-1 that index them.

:func:`assign` is post-processing of the DP centres (Dwork & Roth, Proposition 2.1): labelling
*other* data with it costs no privacy. Its labels of the training data, like
:func:`training_labels`, are a function of every training point and are NOT differentially
private.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax.api import ClusterResult, as_numeric_array

__all__ = ["released_clusters", "assign", "training_labels"]


def released_clusters(result: ClusterResult) -> tuple[np.ndarray, np.ndarray]:
    """(centres (k, d), noisy sizes (k,)) of the valid clusters, in slot order; DP (the release)."""
    valid = np.asarray(result.valid)
    if valid.ndim != 1:
        raise ValueError(
            f"result holds {valid.shape[0]} runs (jax.vmap): take one first, e.g. jax.tree.map(lambda a: a[i], result)"
        )
    return np.asarray(result.centers)[valid], np.asarray(result.counts)[valid]


def assign(centers: ClusterResult | Any, X: Any) -> jax.Array:
    """int32 (n,) label in 0..k-1 of the nearest released centre (Euclidean) of every row of ``X``.

    ``centers``: a :class:`dpm_jax.ClusterResult` (its valid centres, :func:`released_clusters`)
    or a (k, d) array of centres. ``X``: (n, d) numeric array-like (a DataFrame too).
    Post-processing of the DP centres: free for data outside the training set; on the training
    data the labels are NOT differentially private (module docstring).
    """
    if isinstance(centers, ClusterResult):
        centers = released_clusters(centers)[0]
    centers = np.asarray(as_numeric_array(centers, "centers"), np.float32)
    points = as_numeric_array(X)
    if centers.ndim != 2 or centers.shape[0] == 0:
        raise ValueError(f"centers must have shape (k, d) with k >= 1, got {centers.shape}")
    if points.ndim != 2 or points.shape[1] != centers.shape[1]:
        raise ValueError(f"X must have shape (n, {centers.shape[1]}) like the centres, got {tuple(points.shape)}")
    return _nearest(jnp.asarray(points, jnp.float32), jnp.asarray(centers))


@jax.jit
def _nearest(points: jax.Array, centers: jax.Array) -> jax.Array:
    # ||x - c||**2 - ||x||**2 = ||c||**2 - 2 x.c: an (n, k) matrix, no (n, k, d) temporary
    cross = jnp.matmul(points, centers.T, precision=jax.lax.Precision.HIGHEST)
    return jnp.argmin(jnp.sum(jnp.square(centers), axis=1) - 2.0 * cross, axis=1).astype(jnp.int32)


def training_labels(result: ClusterResult) -> np.ndarray:
    """int32 (n,) compact label in 0..k-1 of every training point (its leaf), -1 for a point in a slot
    that is not a cluster (masked-out rows, or a leaf whose released size fell below 1). NOT DP."""
    if result.labels_nonprivate is None:
        raise ValueError("this result has no training labels (cluster_stream keeps none): use assign(result, X)")
    valid = np.asarray(result.valid)
    compact = np.where(valid, np.cumsum(valid) - 1, -1).astype(np.int32)
    return compact[np.asarray(result.labels_nonprivate)]
