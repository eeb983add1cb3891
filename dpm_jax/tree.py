"""The recursion of DPM (Algorithm 1, BuildClustering and Split) as a padded tree.

Level-synchronous: level l handles all of its 2**l nodes at once with static
shapes, so the whole recursion is one jit-compiled program. Nodes use heap ids
(root 1, children 2i and 2i+1); level l holds ids 2**l .. 2**(l+1) - 1 and a
node's *local* index is its id minus 2**l.

One level:
  1. one scatter-add of the active points' half-bin indices into
     (d, nodes, 2B) counts (see :mod:`dpm_jax.scoring`);
  2. scores for every (node, dimension, candidate), invalid ones masked;
  3. the exponential mechanism per node with epsilon_exp_l and
     Delta_f = (t/q + alpha) / max(n~ - lambda_l, 1) (Lemma 5);
  4. the points of each node go to child 2i + (x[dim*] > s*) (lines 26-27);
  5. noisy child counts with epsilon_cnt_{l+1}; a node whose two children both
     reach tau_e is split, otherwise it becomes a leaf (lines 16-18). Points of a
     leaf keep following the left-most path so that, at depth tau_r, their local
     index is the leaf's *slot*: slots are unique and static (2**tau_r of them).

Erratum fixed (Algorithm 1, lines 24-25): with the flat candidate index i* over
d * numSplits candidates, dim = i* // numSplits and s* = a + ((i* mod numSplits) +
1/2) beta. Here the exponential mechanism returns (dim, j) directly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax.budget import Allocation
from dpm_jax.config import DPMConfig
from dpm_jax.mechanisms import derive_key, exponential_mechanism, noisy_count
from dpm_jax.scoring import score_sensitivity, split_scores

__all__ = ["SplitTree", "Leaves", "build_tree"]


class SplitTree(NamedTuple):
    """The released split tree in heap layout (index 0 unused). DP output.

    Attributes:
      noisy_count: (2**(tau_r+1),) noisy size n~ of every node of the tree
        (0 where ``reached`` is False).
      reached: (2**(tau_r+1),) bool, the node is part of the tree.
      is_split: bool, the node was split into its two children.
      split_dim: int32, dimension of the drawn split (-1 where none was drawn).
      split_position: float32, position of the drawn split in data units (NaN
        where none was drawn). A split is drawn for every reached node above
        depth tau_r; it is applied only where ``is_split``.
    """

    noisy_count: jax.Array
    reached: jax.Array
    is_split: jax.Array
    split_dim: jax.Array
    split_position: jax.Array


class Leaves(NamedTuple):
    """The leaves by slot (2**tau_r slots)."""

    noisy_count: jax.Array  # (2**tau_r,) float32, 0 for empty slots
    valid: jax.Array  # (2**tau_r,) bool
    node: jax.Array  # (2**tau_r,) int32 heap id of the leaf, 0 for empty slots
    point_slot: jax.Array  # (n,) int32 slot of every point (NOT differentially private)


def half_bin_indices(unit_points: jnp.ndarray, beta, num_splits) -> jnp.ndarray:
    """(d, n) int32 half-interval index of every coordinate, in [0, 2 numSplits)."""
    index = jnp.floor(unit_points.T / (0.5 * beta)).astype(jnp.int32)
    return jnp.clip(index, 0, 2 * num_splits - 1)


def build_tree(key: jax.Array, unit_points: jnp.ndarray, point_mask: jnp.ndarray,
               lower: jnp.ndarray, upper: jnp.ndarray, root_count, beta,
               allocation: Allocation, config: DPMConfig) -> tuple[SplitTree, Leaves]:
    """Run BuildClustering on all levels (Algorithm 1, lines 13-28).

    Args:
      key: the caller's key; per-level keys are derive_key(key, "split", l) and
        derive_key(key, "count", l + 1).
      unit_points: (n, d) points scaled to [0, 1] by the public bounds.
      point_mask: (n,) bool, padding points are False.
      lower, upper: (d,) public bounds (to report split positions in data units).
      root_count: n~ of the whole data set (released, level 0 count).
      beta: split interval size as a fraction of the range (released).
      allocation: the per-level budgets and offsets.
      config: hyper-parameters.
    """
    n, d = unit_points.shape
    tau_r = config.tau_r
    max_splits = config.max_splits_per_dim
    num_splits = jnp.minimum(jnp.ceil(1.0 / beta - 1e-6).astype(jnp.int32), max_splits)
    half_bins = half_bin_indices(unit_points, beta, num_splits)
    tau_e = root_count / 2**tau_r if config.tau_e is None else jnp.float32(config.tau_e)
    candidate_valid = jnp.arange(max_splits) < num_splits
    num_heap = 2 ** (tau_r + 1)

    tree_count = jnp.zeros(num_heap, jnp.float32).at[1].set(root_count)
    tree_reached = jnp.zeros(num_heap, bool).at[1].set(True)
    tree_is_split = jnp.zeros(num_heap, bool)
    tree_dim = jnp.full(num_heap, -1, jnp.int32)
    tree_position = jnp.full(num_heap, jnp.nan, jnp.float32)
    leaf_count = jnp.zeros(2**tau_r, jnp.float32)
    leaf_valid = jnp.zeros(2**tau_r, bool)
    leaf_node = jnp.zeros(2**tau_r, jnp.int32)

    point_node = jnp.zeros(n, jnp.int32)  # local index at the current level
    point_active = point_mask
    node_count = jnp.reshape(root_count, (1,)).astype(jnp.float32)
    node_active = jnp.ones(1, bool)
    dims = jnp.arange(d, dtype=jnp.int32)[:, None]

    for level in range(tau_r + 1):
        num_nodes = 2**level
        heap_ids = num_nodes + jnp.arange(num_nodes)
        if level == tau_r:  # Algorithm 1, line 14: maximal depth, every active node is a leaf
            leaf_count, leaf_valid, leaf_node = _record_leaves(
                leaf_count, leaf_valid, leaf_node, node_active, node_count, heap_ids, level, tau_r)
            break

        # 1. half-bin counts per (dim, node): one scatter-add, dim-major for locality.
        flat = (dims * num_nodes + point_node[None, :]) * (2 * max_splits) + half_bins
        flat = jnp.where(point_active[None, :], flat, -1)
        counts = jnp.zeros(d * num_nodes * 2 * max_splits, jnp.int32).at[flat.reshape(-1)].add(
            1, mode="drop")
        counts = counts.reshape(d, num_nodes, 2 * max_splits).transpose(1, 0, 2)

        # 2-3. scores and the exponential mechanism (Definition 7, Lemma 5, line 23).
        scores = split_scores(counts.astype(jnp.float32), node_count[:, None], config.t, config.q,
                              config.alpha)
        valid = node_active[:, None, None] & candidate_valid[None, None, :]
        valid = jnp.broadcast_to(valid, scores.shape)
        sensitivity = score_sensitivity(node_count, allocation.count_offsets[level], config.t,
                                        config.q, config.alpha)
        split_dim, split_index = exponential_mechanism(
            derive_key(key, "split", level), scores, valid, allocation.split_epsilons[level],
            sensitivity)

        # 4. route: right child iff the coordinate lies above s*, i.e. half-bin >= 2j* + 1.
        point_bins = half_bins[split_dim[point_node], jnp.arange(n)]
        go_right = point_bins >= 2 * split_index[point_node] + 1
        child = 2 * point_node + go_right.astype(jnp.int32)

        # 5. noisy child counts and the stopping rule (lines 16-18).
        child_true = jnp.zeros(2 * num_nodes, jnp.int32).at[jnp.where(point_active, child, -1)].add(
            1, mode="drop")
        child_count = noisy_count(derive_key(key, "count", level + 1), child_true,
                                  allocation.count_epsilons[level + 1])
        children_large = (child_count[0::2] >= tau_e) & (child_count[1::2] >= tau_e)
        applied = node_active & children_large

        position_unit = (split_index.astype(jnp.float32) + 0.5) * beta
        position = lower[split_dim] + position_unit * (upper - lower)[split_dim]
        tree_dim = tree_dim.at[heap_ids].set(jnp.where(node_active, split_dim, -1))
        tree_position = tree_position.at[heap_ids].set(jnp.where(node_active, position, jnp.nan))
        tree_is_split = tree_is_split.at[heap_ids].set(applied)
        child_ids = 2 * num_nodes + jnp.arange(2 * num_nodes)
        child_reached = jnp.repeat(applied, 2)
        tree_reached = tree_reached.at[child_ids].set(child_reached)
        tree_count = tree_count.at[child_ids].set(jnp.where(child_reached, child_count, 0.0))

        leaf_count, leaf_valid, leaf_node = _record_leaves(
            leaf_count, leaf_valid, leaf_node, node_active & ~applied, node_count, heap_ids, level,
            tau_r)

        point_split = applied[point_node]
        point_node = 2 * point_node + (go_right & point_split).astype(jnp.int32)
        point_active = point_active & point_split
        node_count = child_count
        node_active = child_reached

    tree = SplitTree(tree_count, tree_reached, tree_is_split, tree_dim, tree_position)
    leaves = Leaves(leaf_count, leaf_valid, leaf_node, point_node)
    return tree, leaves


def _record_leaves(leaf_count, leaf_valid, leaf_node, becomes_leaf, node_count, heap_ids, level,
                   tau_r):
    """A leaf at local index j of ``level`` takes slot j << (tau_r - level)."""
    slots = jnp.arange(2**level) << (tau_r - level)
    leaf_count = leaf_count.at[slots].set(jnp.where(becomes_leaf, node_count, leaf_count[slots]))
    leaf_valid = leaf_valid.at[slots].set(becomes_leaf | leaf_valid[slots])
    leaf_node = leaf_node.at[slots].set(jnp.where(becomes_leaf, heap_ids, leaf_node[slots]))
    return leaf_count, leaf_valid, leaf_node
