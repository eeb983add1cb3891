"""DPM's own release as a generator: the leaf boxes and noisy counts of :func:`dpm_jax.cluster`.

DPM ("DPM: Clustering Sensitive Data through Separation", Algorithm 1) releases a split tree
(dimensions and positions, DP) and every leaf's noisy count and DP centre. The leaves' boxes
follow from the tree and the public bounds, so a weighted synthetic set (centres, noisy
counts) and a synthetic sample (a box drawn by its count, a uniform point inside it) are
post-processing of that release: no budget beyond the clustering's own ledger.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpm_jax.api import ClusterResult, cluster
from dpm_jax.budget import Budget
from dpm_jax.config import DPMConfig
from dpm_jax.synth.result import SynthResult

__all__ = ["leaf_boxes", "synthesize_from_cluster"]


def leaf_boxes(result: ClusterResult, lower: jax.Array, upper: jax.Array):
    """(lo, hi), each (slots, d): the box of every cluster's leaf, walking up its ancestors.

    Heap layout: node v's children are 2v (x <= split) and 2v + 1 (x > split).
    """
    node = result.leaf_node
    slots, d = node.shape[0], lower.shape[0]
    lo = jnp.broadcast_to(lower, (slots, d))
    hi = jnp.broadcast_to(upper, (slots, d))
    depth = result.tree.reached.shape[0].bit_length() - 2
    for up in range(1, depth + 1):
        parent, child = jnp.right_shift(node, up), jnp.right_shift(node, up - 1)
        on_path = parent >= 1
        dim = result.tree.split_dim[parent]
        position = result.tree.split_position[parent]
        column = jax.nn.one_hot(dim, d, dtype=bool) & on_path[:, None]
        right = (child & 1).astype(bool)[:, None]
        lo = jnp.where(column & right, jnp.maximum(lo, position[:, None]), lo)
        hi = jnp.where(column & ~right, jnp.minimum(hi, position[:, None]), hi)
    return lo, hi


def synthesize_from_cluster(key: jax.Array, X: Any, budget: Budget, bounds, config: DPMConfig, point_mask):
    """The "dpm" method of :func:`dpm_jax.synthesize`: cluster, then the leaves as cells.

    Calls the undecorated :func:`dpm_jax.cluster`: :func:`dpm_jax.synthesize` has charged the
    accountant already (:mod:`dpm_jax.entry`).
    """
    result = cluster.__wrapped__(key, X, budget, bounds, config=config, point_mask=point_mask)
    lower, upper = result.bounds
    lo, hi = leaf_boxes(result, lower, upper)
    valid = result.valid & (result.counts > 0)
    return SynthResult(
        centers=result.centers,
        weights=jnp.where(valid, result.counts, 0.0).astype(jnp.float32),
        lower=jnp.where(valid[:, None], lo, jnp.nan),  # as every method's: no box where not valid
        upper=jnp.where(valid[:, None], hi, jnp.nan),
        valid=valid,
        depth=result.depth,
        ledgers=result.ledgers,
        method="dpm",
        bounds=result.bounds,
    )
