"""Non-private k-means: greedy k-means++ seeding and Lloyd iterations, restarts under vmap.

The non-private baseline of the DPM paper (Section 6.1:
"The KMeans++ clustering algorithm serves as a non-private baseline"; the authors
run scikit-learn's ``KMeans``). This is the same algorithm as scikit-learn's
``KMeans(init="k-means++", algorithm="lloyd")``:

* seeding: greedy k-means++ (Arthur and Vassilvitskii, 2007): the first centre is
  a uniformly drawn point; every further centre is the best, by the resulting
  potential, of ``2 + floor(ln k)`` candidates drawn with probability proportional
  to the squared distance to the nearest centre chosen so far;
* Lloyd iterations until the squared centre shift sums to at most
  ``tolerance * mean(var(X, axis=0))`` or ``max_iterations`` is reached; a
  cluster that loses all its points keeps its previous centre (scikit-learn
  moves it to a far point instead);
* restarts: independent seeds under ``jax.vmap``; :func:`kmeans` keeps the
  run with the lowest inertia.

Not differentially private: the centres are functions of individual points.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax.eval.metrics import DEFAULT_CHUNK_SIZE, assign_to_centers, squared_distances

__all__ = ["KMeansResult", "kmeans_plusplus", "lloyd", "kmeans_runs", "kmeans"]


class KMeansResult(NamedTuple):
    """One k-means run (or, from :func:`kmeans_runs`, a batch with a leading run axis).

    Attributes:
      centers: (k, d) final centres.
      labels: (n,) int32 nearest centre of every point (consistent with ``centers``).
      inertia: sum of squared distances to the nearest centre.
      num_iterations: Lloyd iterations run.
    """

    centers: jax.Array
    labels: jax.Array
    inertia: jax.Array
    num_iterations: jax.Array


@functools.partial(jax.jit, static_argnames=("num_clusters", "num_local_trials"))
def kmeans_plusplus(
    key: jax.Array, points: jax.Array, num_clusters: int, num_local_trials: int | None = None
) -> jax.Array:
    """Greedy k-means++ seeding: (num_clusters, d) initial centres drawn from ``points``.

    Args:
      key: PRNG key.
      points: (n, d).
      num_clusters: k (static).
      num_local_trials: candidates per centre; default ``2 + floor(ln k)``
        (scikit-learn's default).
    """
    if num_local_trials is None:
        num_local_trials = 2 + int(math.log(num_clusters))
    n = points.shape[0]
    first_key, rest_key = jax.random.split(key)
    first = jax.random.randint(first_key, (), 0, n)
    centers = jnp.zeros((num_clusters, points.shape[1]), points.dtype).at[0].set(points[first])
    closest = squared_distances(points, points[first][None, :])[:, 0]

    def add_center(index, state):
        centers, closest = state
        cumulative = jnp.cumsum(closest)
        targets = (
            jax.random.uniform(jax.random.fold_in(rest_key, index), (num_local_trials,), closest.dtype) * cumulative[-1]
        )
        candidates = jnp.minimum(jnp.searchsorted(cumulative, targets), n - 1)
        to_candidates = squared_distances(points[candidates], points)  # (trials, n)
        updated = jnp.minimum(closest[None, :], to_candidates)
        best = jnp.argmin(jnp.sum(updated, axis=1))
        return centers.at[index].set(points[candidates[best]]), updated[best]

    centers, _ = jax.lax.fori_loop(1, num_clusters, add_center, (centers, closest))
    return centers


@functools.partial(jax.jit, static_argnames=("max_iterations", "chunk_size"))
def lloyd(
    points: jax.Array,
    initial_centers: jax.Array,
    *,
    max_iterations: int = 300,
    tolerance: float = 1e-4,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> KMeansResult:
    """Lloyd's algorithm from ``initial_centers`` (see the module docstring for the stopping rule)."""
    num_clusters = initial_centers.shape[0]
    threshold = tolerance * jnp.mean(jnp.var(points, axis=0))

    def update(centers):
        labels = assign_to_centers(points, centers, chunk_size=chunk_size).labels
        sums = jax.ops.segment_sum(points, labels, num_segments=num_clusters)
        counts = jax.ops.segment_sum(jnp.ones(points.shape[0], points.dtype), labels, num_segments=num_clusters)
        return jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], centers)

    def not_converged(state):
        _, shift, iteration = state
        return (shift > threshold) & (iteration < max_iterations)

    def step(state):
        centers, _, iteration = state
        new_centers = update(centers)
        return new_centers, jnp.sum((new_centers - centers) ** 2), iteration + 1

    initial = (initial_centers.astype(points.dtype), jnp.asarray(jnp.inf, points.dtype), jnp.int32(0))
    centers, _, iterations = jax.lax.while_loop(not_converged, step, initial)
    assignment = assign_to_centers(points, centers, chunk_size=chunk_size)
    return KMeansResult(centers, assignment.labels, jnp.sum(assignment.squared_distances), iterations)


@functools.partial(jax.jit, static_argnames=("num_clusters", "num_runs", "max_iterations", "chunk_size"))
def kmeans_runs(
    key: jax.Array,
    points: jax.Array,
    num_clusters: int,
    num_runs: int,
    *,
    max_iterations: int = 300,
    tolerance: float = 1e-4,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> KMeansResult:
    """``num_runs`` independent k-means++ / Lloyd runs under ``jax.vmap``.

    Run r uses ``jax.random.fold_in(key, r)``. Every field of the result has a
    leading axis of length ``num_runs``. Memory grows with ``num_runs`` times
    ``chunk_size * num_clusters`` for the distance blocks, plus n labels per run.
    """

    def one_run(run):
        seeds = kmeans_plusplus(jax.random.fold_in(key, run), points, num_clusters)
        return lloyd(points, seeds, max_iterations=max_iterations, tolerance=tolerance, chunk_size=chunk_size)

    return jax.vmap(one_run)(jnp.arange(num_runs))


def kmeans(
    key: jax.Array,
    points: jax.Array,
    num_clusters: int,
    num_runs: int = 1,
    *,
    max_iterations: int = 300,
    tolerance: float = 1e-4,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> KMeansResult:
    """k-means with ``num_runs`` restarts (scikit-learn's ``n_init``); the lowest inertia wins."""
    runs = kmeans_runs(
        key, points, num_clusters, num_runs, max_iterations=max_iterations, tolerance=tolerance, chunk_size=chunk_size
    )
    best = jnp.argmin(runs.inertia)
    return jax.tree_util.tree_map(lambda field: field[best], runs)
