"""The order of the prefixes, as post-processing of the release ("Making Old Things New", Section
A.3: one run gives a solution for every k' <= k through its prefixes).

The greedy's own order (Mettu and Plaxton's incremental order, Algorithm 1) is good for every
prefix only up to a constant factor; on well-separated blobs it can leave an isolated blob for
late, and k-means' squared distances then make a prefix cost many times the best k'-solution's.
Here the k released centres are re-ordered by a weighted greedy on the release alone: the
released centres c_i with their released (noisy) sizes n~_i as weights, the next centre being the
one that most lowers sum_i max(n~_i, 0) min_{j chosen} |c_i - c_j|^z (the first: the weighted
1-medoid). The inputs are DP outputs, so the order is post-processing and costs no budget;
nothing here takes the data.

:func:`prefix_centers` is the solution for k' <= k that the release supports: the first k'
centres of the order, each moved to the weighted mean of the released centres nearest to it (for
z = 2 the mean of the union of their cells when the sizes and centres are exact: the lift of
Lemma 2.2 for the coarser partition, read from the release instead of the data).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpm_jax._arrays import divide, ordered_matmul, pairwise_sum, rounded_product
from dpm_jax.greedy.lift import nearest, squared_distances

__all__ = ["prefix_order", "prefix_centers"]


def _distances(centers: jax.Array, z: int) -> jax.Array:
    """(k, k) |c_i - c_j|^z between the released centres."""
    squared = squared_distances(centers, centers)
    return squared if z == 2 else jnp.sqrt(squared)


def prefix_order(centers: jax.Array, weights: jax.Array, z: int) -> jax.Array:
    """(k,) int32 permutation of the released centres: the weighted greedy's order of choice.

    Args:
      centers: (k, d) released centres (data units).
      weights: (k,) their released sizes; negative noisy sizes count as 0.
      z: 2 (k-means) or 1 (k-median): the power of the distance in the objective.
    Ties go to the lowest index (``argmin``), so equal inputs give equal orders.
    """
    distance = _distances(centers.astype(jnp.float32), z)
    weight = jnp.maximum(weights.astype(jnp.float32), 0.0)
    k = centers.shape[0]

    def choose(state, _):
        closest, chosen = state
        # the weighted cost of the chosen set plus candidate j, for every j; summed in a fixed order
        # (a backend's reduction order is its own, and a last-bit difference can flip the argmin)
        totals = pairwise_sum(rounded_product(weight[:, None], jnp.minimum(closest[:, None], distance)))
        best = jnp.argmin(jnp.where(chosen, jnp.inf, totals)).astype(jnp.int32)
        return (jnp.minimum(closest, distance[:, best]), chosen.at[best].set(True)), best

    # before the first choice every centre is "farther than any centre": min(max, d) = d
    start = (jnp.full(k, jnp.max(distance)), jnp.zeros(k, bool))
    return jax.lax.scan(choose, start, None, length=k)[1]


def prefix_centers(centers: jax.Array, weights: jax.Array, count: int) -> jax.Array:
    """(count, d): the first ``count`` released centres (in prefix order), each replaced by the
    weighted mean of the released centres whose nearest among the first ``count`` it is.

    Post-processing of the release (centres, noisy sizes; finite: a NaN or infinite one spreads
    to every group through the sums' one-hot products). A group of total weight <= 0 keeps
    its centre. For z = 1 the weighted mean is a proxy for the group's median.
    """
    if not 1 <= count <= centers.shape[0]:
        raise ValueError(f"count must be in 1 .. {centers.shape[0]}, got {count}")
    head = centers[:count]
    group = nearest(centers, head)
    weight = jnp.maximum(weights.astype(jnp.float32), 0.0)
    # Sums over the centres in index order (a float scatter-add's order is a GPU's atomics'):
    # the one-hot matrix adds each weighted centre to its group, and exact zeros to the others.
    members = (group[None, :] == jnp.arange(count)[:, None]).astype(jnp.float32)  # (count, k)
    total = ordered_matmul(members, weight[:, None])[:, 0]
    sums = ordered_matmul(members, weight[:, None] * centers)
    return jnp.where(total[:, None] > 0, divide(sums, jnp.where(total > 0, total, 1.0)[:, None]), head)
