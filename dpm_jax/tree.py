"""The recursion of DPM (Algorithm 1, BuildClustering and Split) as a padded tree.

Level-synchronous: level l handles all of its 2**l nodes at once with static
shapes, so the whole recursion is one jit-compiled program. Nodes use heap ids
(root 1, children 2i and 2i+1); level l holds ids 2**l .. 2**(l+1) - 1 and a
node's *local* index is its id minus 2**l. The levels run in one ``lax.scan``
whose body handles 2**(tau_r - 1) node slots (the deepest split level's count;
shallower levels leave the rest inactive): one compiled level instead of tau_r
unrolled ones, which cuts the compile time by about the factor tau_r. Scoring and
selection, the costliest per-node steps, run in a loop over chunks of 8 node slots
whose trip count follows the level (one chunk at the root, all of them at the
deepest), so they are compiled once and cost what the level's nodes need.

One level:
  1. half-bin counts per (node, dimension), (nodes, d, 2B) (see
     :mod:`dpm_jax.scoring`): one scatter-add of the active points' half-bin
     indices or, with many dimensions, the parent level's counts minus the
     histogram of each node's smaller sibling (:func:`children_histogram`);
  2. scores for every (node, dimension, candidate), invalid ones masked;
  3. the exponential mechanism per node with epsilon_exp_l on the exact integer
     scores of :mod:`dpm_jax.scoring` (sensitivity a1 + a3), its exponent scaled by
     min(1, max(n~ - lambda_l, 1) / N) as Lemma 5's Delta_f = (t/q + alpha) /
     (n~ - lambda_l) prescribes;
  4. the points of each node go to child 2i + (x[dim*] > s*) (lines 26-27);
  5. noisy child counts with epsilon_cnt_{l+1}, added in exact integer arithmetic
     (:func:`dpm_jax.mechanisms.add_count_noise`); a node whose two children both
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

from dpm_jax import exact
from dpm_jax._arrays import bin_dtype, looped_under_vmap, materialized
from dpm_jax.budget import Allocation
from dpm_jax.config import DPMConfig
from dpm_jax.mechanisms import add_count_noise, em_exponent_scale, select_with_bits
from dpm_jax.scoring import ScoreCoefficients, exponent_ratio, score_coefficients, split_scores

_CHUNK_ELEMENTS = 2**20
_SIBLING_MIN_DIMS = 32
_SELECT_CHUNK = 8  # nodes scored per loop step (a power of two)

__all__ = ["SplitTree", "Leaves", "build_tree", "select_splits", "half_bin_indices", "level_histogram",
           "children_histogram"]


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


def half_bin_indices(unit_points: jnp.ndarray, beta, num_splits, max_splits: int) -> jnp.ndarray:
    """(n, d) half-interval index of every coordinate, in [0, 2 numSplits).

    Kept in the layout of the data (no transpose: a 100k x 100 int32 transpose
    costs more than a tree level) and in the smallest dtype for 2 max_splits bins.
    """
    index = jnp.floor(unit_points / (0.5 * beta)).astype(jnp.int32)
    return jnp.clip(index, 0, 2 * num_splits - 1).astype(bin_dtype(2 * max_splits))


def level_histogram(half_bins: jax.Array, point_node: jax.Array, point_active: jax.Array,
                    num_nodes: int, max_splits: int) -> jax.Array:
    """(num_nodes, d, 2 max_splits) half-bin counts of the active points of every node.

    One scatter-add of n * d indices. Under ``jax.vmap`` it runs as a loop over the
    batch (:func:`dpm_jax._arrays.looped_under_vmap`), so no batch-sized index
    array is ever built and the shared ``half_bins`` are not copied.
    """
    return looped_under_vmap(_level_histogram, num_nodes, max_splits)(half_bins, point_node,
                                                                      point_active)


def _level_histogram(num_nodes: int, max_splits: int, half_bins, point_node, point_active):
    n, d = half_bins.shape
    # Dimensions in chunks of about _CHUNK_ELEMENTS updates: the index buffer and the
    # counts being written stay cache-sized (about twice as fast at 100k x 100 on CPU
    # as one scatter over all n * d). The last chunk may overlap the one before; it
    # rewrites the same counts.
    chunk = max(1, min(d, _CHUNK_ELEMENTS // max(n, 1)))
    if chunk == d:
        return _histogram_of_dims(num_nodes, max_splits, half_bins, point_node, point_active)

    def add_chunk(index, counts):
        start = jnp.minimum(index * chunk, d - chunk)
        part = _histogram_of_dims(num_nodes, max_splits,
                                  jax.lax.dynamic_slice_in_dim(half_bins, start, chunk, axis=1),
                                  point_node, point_active)
        return jax.lax.dynamic_update_slice_in_dim(counts, part, start, axis=1)

    return jax.lax.fori_loop(0, -(-d // chunk), add_chunk,
                             jnp.zeros((num_nodes, d, 2 * max_splits), jnp.int32))


def _histogram_of_dims(num_nodes: int, max_splits: int, half_bins, point_node, point_active):
    d = half_bins.shape[1]
    block = d * 2 * max_splits
    # Inactive points get an index past the end, which mode="drop" discards (a
    # negative index would wrap around to the last bin).
    flat = jnp.where(point_active[:, None],
                     point_node[:, None] * block + jnp.arange(d, dtype=jnp.int32) * (2 * max_splits)
                     + half_bins.astype(jnp.int32),
                     num_nodes * block)
    counts = jnp.zeros(num_nodes * block, jnp.int32).at[flat.reshape(-1)].add(1, mode="drop")
    return counts.reshape(num_nodes, d, 2 * max_splits)


def children_histogram(parent_counts: jax.Array, child_true: jax.Array, half_bins: jax.Array,
                       child_node: jax.Array, child_active: jax.Array, go_right: jax.Array,
                       max_splits: int) -> jax.Array:
    """The next level's half-bin counts from this level's, with half of the scatter work.

    Every split node's points are partitioned by its two children, so a child's
    counts are its parent's minus its sibling's: only the smaller child of every
    node is histogrammed (at most n/2 points in all, gathered into a static n/2
    buffer) and its sibling follows by subtraction. The counts are exact integers,
    so the result equals :func:`level_histogram` of the children.

    Args:
      parent_counts: (width, d, 2B) this level's counts.
      child_true: (2 width,) exact sizes of the children (local index 2p, 2p + 1).
      half_bins: (n, d) half-bin indices.
      child_node: (n,) local index of every point's child; child_active: (n,) bool,
        the point's node was split.
      go_right: (n,) bool, the point went to the right child.
    Returns:
      (width, d, 2B) counts of the children, by local index; slots of children of
      unsplit nodes hold arbitrary values (they are inactive).

    Under ``jax.vmap`` the whole computation runs as a loop over the batch: the
    compaction (a cumulative sum and a scatter of n indices) batched would cost
    more than the histogram it saves.
    """
    return looped_under_vmap(_children_histogram, max_splits)(
        parent_counts, child_true, half_bins, child_node, child_active, go_right)


def _children_histogram(max_splits: int, parent_counts, child_true, half_bins, child_node,
                        child_active, go_right):
    width = parent_counts.shape[0]
    n = half_bins.shape[0]
    smaller_is_right = child_true[1::2] < child_true[0::2]  # per parent, (width,)
    # child_node // 2 is the point's node on this level (a local index < width).
    in_smaller = child_active & (go_right == smaller_is_right[child_node // 2])
    # Sum over parents of min(left, right) <= n // 2: the buffer always suffices.
    capacity = max(n // 2, 1)
    (point_index,) = jnp.nonzero(in_smaller, size=capacity, fill_value=0)
    gathered_active = jnp.arange(capacity) < jnp.sum(in_smaller)
    smaller_counts = _level_histogram(width, max_splits, half_bins[point_index],
                                      child_node[point_index], gathered_active)
    local = jnp.arange(width)
    is_smaller = smaller_is_right[local // 2] == (local % 2 == 1)
    sibling_counts = parent_counts[local // 2] - smaller_counts[local ^ 1]
    return jnp.where(is_smaller[:, None, None], smaller_counts, sibling_counts)


def select_splits(bits: jax.Array, em_table, counts: jax.Array, node_count: exact.Int,
                  node_active: jax.Array, candidate_valid: jax.Array, epsilon, offset,
                  coefficients: ScoreCoefficients) -> tuple[jax.Array, jax.Array]:
    """Algorithm 1, lines 22-25 for a batch of nodes: the exponential mechanism over all splits.

    Scores every candidate (:func:`dpm_jax.scoring.split_scores`, exact integers with
    sensitivity ``coefficients.sensitivity``) with the node's released size n~ as the
    integer N, and selects one per node with
    :func:`dpm_jax.mechanisms.select_with_bits` at epsilon_exp, the exponent scaled by
    :func:`dpm_jax.scoring.exponent_ratio` (Lemma 5's n~ - lambda).

    Privacy: (epsilon, sampler delta)-DP per node given the released n~; the nodes of
    a level are disjoint (parallel composition).

    Args:
      bits: (nodes, EM_TRIES, EM_DIGITS) uint32 random words.
      em_table: the exponential mechanism's weight table on the device.
      counts: (nodes, d, 2B) int32 half-bin counts.
      node_count: (nodes,) released n~ (exact integers).
      node_active: (nodes,) bool; inactive nodes have no valid candidate.
      candidate_valid: (B,) bool, the candidates inside the bounds.
      epsilon, offset: the level's epsilon_exp and count offset lambda.
      coefficients: :func:`dpm_jax.scoring.score_coefficients`.
    Returns:
      (dimension, candidate index), (nodes,) int32 each.
    """
    nodes, d, num_candidates = counts.shape[0], counts.shape[1], counts.shape[2] // 2
    size = exact.clip_to_int32(node_count, 1, 2**31 - 1)  # N: the released n~ as an integer
    scores = split_scores(counts, size[:, None], coefficients)
    flat = exact.Int(tuple(limb.reshape(nodes, d * num_candidates) for limb in scores.limbs))
    valid = jnp.broadcast_to(node_active[:, None, None] & candidate_valid,
                             (nodes, d, num_candidates)).reshape(nodes, d * num_candidates)
    ratio = exponent_ratio(exact.to_float32(node_count), offset, size)
    scale = em_exponent_scale(epsilon, coefficients.sensitivity, ratio)
    index = select_with_bits(bits, em_table, flat, valid, scale)
    return index // num_candidates, index % num_candidates


def build_tree(split_bits: jax.Array, count_noise: exact.Int, em_table, unit_points: jnp.ndarray,
               point_mask: jnp.ndarray, lower: jnp.ndarray, upper: jnp.ndarray, root_count: exact.Int,
               beta, allocation: Allocation, config: DPMConfig) -> tuple[SplitTree, Leaves]:
    """Run BuildClustering on all levels (Algorithm 1, lines 13-28).

    The randomness comes in pre-drawn, in heap layout (row/element i belongs to
    tree node i, index 0 unused), so that each draw has a documented place:

    Args:
      split_bits: (2**tau_r, EM_TRIES, EM_DIGITS) uint32 random words driving the
        exponential mechanism of each inner node (:func:`dpm_jax.mechanisms.select_with_bits`).
      count_noise: (2**(tau_r+1),) exact integer noise of the count mechanism of every
        node, each drawn with its level's epsilon_cnt; node 1's is the root count's.
      em_table: the exponential mechanism's weight table on the device.
      unit_points: (n, d) points scaled to [0, 1] by the public bounds.
      point_mask: (n,) bool, padding points are False.
      lower, upper: (d,) public bounds (to report split positions in data units).
      root_count: n~ of the whole data set, exact (|D| + count_noise[1], Algorithm 1 line 7).
      beta: split interval size as a fraction of the range (released).
      allocation: the per-level budgets and offsets.
      config: hyper-parameters.
    """
    n, d = unit_points.shape
    tau_r = config.tau_r
    max_splits = config.max_splits_per_dim
    coefficients = score_coefficients(config.t, config.q, config.alpha)
    num_splits = jnp.minimum(jnp.ceil(1.0 / beta - 1e-6).astype(jnp.int32), max_splits)
    half_bins = half_bin_indices(unit_points, beta, num_splits, max_splits)
    root_size = exact.to_float32(root_count)
    tau_e = root_size / 2**tau_r if config.tau_e is None else jnp.float32(config.tau_e)
    min_child = jnp.clip(jnp.ceil(tau_e), -(2.0**31) + 128, 2.0**31 - 128).astype(jnp.int32)  # float32-exact ends
    candidate_valid = jnp.arange(max_splits) < num_splits
    width = 2 ** (tau_r - 1)  # nodes of the deepest split level; every level is padded to it
    bits = jnp.concatenate([split_bits, jnp.zeros((width,) + split_bits.shape[1:], split_bits.dtype)])
    noise = tuple(jnp.concatenate([limb, jnp.zeros(2 * width, limb.dtype)]) for limb in count_noise.limbs)

    # Lines 22-25 run on the slots a level can use, in chunks of _SELECT_CHUNK nodes in
    # a loop whose trip count follows the level (1 chunk at the root, width / chunk at
    # the deepest): the level's work is proportional to its node count, and the
    # scoring and sampler are compiled once (about 1 s each on CPU), not per width.
    chunk = min(_SELECT_CHUNK, width)

    def choose_splits(level, counts, node_count, node_active, level_bits, epsilon, offset):
        """(dim, j) for the first 2**level of the ``width`` slots, chunk by chunk."""
        def choose_chunk(index, chosen):
            start = index * chunk
            part = lambda a: jax.lax.dynamic_slice_in_dim(a, start, chunk)
            picked = select_splits(part(level_bits), em_table, part(counts),
                                   exact.Int(tuple(part(limb) for limb in node_count)),
                                   part(node_active), candidate_valid, epsilon, offset, coefficients)
            return tuple(jax.lax.dynamic_update_slice_in_dim(c, p, start, axis=0)
                         for c, p in zip(chosen, picked))

        num_chunks = jnp.maximum(jnp.right_shift(jnp.left_shift(1, level), chunk.bit_length() - 1), 1)
        return jax.lax.fori_loop(0, num_chunks, choose_chunk,
                                 (jnp.zeros(width, jnp.int32), jnp.zeros(width, jnp.int32)))

    def split_level(state, level_inputs):
        """Lines 15-18 for the (at most ``width``) nodes of one level; heap id = 2**level + local."""
        point_node, point_active, node_count, node_active, carried_counts = state
        level, epsilon, offset = level_inputs
        first = jnp.left_shift(1, level)
        # 1. half-bin counts per (node, dim): carried from the previous level (and the
        # root's built before the scan) with sibling subtraction, else one histogram here.
        counts = (carried_counts if use_siblings
                  else level_histogram(half_bins, point_node, point_active, width, max_splits))
        # 2-3. scores and the exponential mechanism (Definition 7, Lemma 5, line 23);
        # ``level`` is not batched under vmap, so the loop's trip count stays unbatched.
        split_dim, split_index = choose_splits(level, counts, node_count, node_active,
                                               jax.lax.dynamic_slice_in_dim(bits, first, width),
                                               epsilon, offset)
        # 4. route: right child iff the coordinate lies above s*, i.e. half-bin >= 2j* + 1.
        point_bins = half_bins[jnp.arange(n), split_dim[point_node]].astype(jnp.int32)
        go_right = point_bins >= 2 * split_index[point_node] + 1
        child = 2 * point_node + go_right.astype(jnp.int32)
        # 5. noisy child counts (exact integers) and the stopping rule (lines 16-18).
        child_true = jnp.zeros(2 * width, jnp.int32).at[
            jnp.where(point_active, child, 2 * width)].add(1, mode="drop")
        child_exact = add_count_noise(child_true, exact.Int(tuple(
            jax.lax.dynamic_slice_in_dim(limb, 2 * first, 2 * width) for limb in noise)))
        child_count = exact.to_float32(child_exact)  # post-processing of released integers
        # n~ >= tau_e for integers n~ <=> n~ >= ceil(tau_e): int32 comparisons, once per
        # node (materialized: XLA would repeat the rule for every point it gathers it for).
        child_size = exact.clip_to_int32(child_exact, -(2**31) + 1, 2**31 - 1)
        applied = materialized(node_active & (child_size[0::2] >= min_child)
                               & (child_size[1::2] >= min_child))
        child_active = jnp.repeat(applied, 2)

        position = lower[split_dim] + (split_index + 0.5) * beta * (upper - lower)[split_dim]
        node_size = exact.to_float32(exact.Int(node_count))
        released = (jnp.where(node_active, node_size, 0.0), node_active, applied,
                    jnp.where(node_active, split_dim, -1), jnp.where(node_active, position, jnp.nan),
                    node_active & ~applied, child_count, child_active)
        point_split = applied[point_node]
        next_node = 2 * point_node + (go_right & point_split).astype(jnp.int32)
        next_active = point_active & point_split
        # The deepest level has no next level (and its children need not fit in ``width``);
        # level is not batched under vmap, so this stays a real branch.
        next_counts = carried_counts  # empty without sibling subtraction
        if use_siblings:
            next_counts = jax.lax.cond(
                level < tau_r - 1,
                lambda: children_histogram(counts, child_true, half_bins, next_node, next_active,
                                           go_right, max_splits),
                lambda: counts)
        state = (next_node, next_active, tuple(limb[:width] for limb in child_exact.limbs),
                 child_active[:width], next_counts)
        return state, released

    # Sibling subtraction pays when the scatter dominates a level (many dimensions); with
    # few, carrying the counts from level to level costs more than it saves under vmap
    # (measured at 10 and 100 dimensions, benchmarks/speed.py).
    use_siblings = d >= _SIBLING_MIN_DIMS
    root_counts = (level_histogram(half_bins, jnp.zeros(n, jnp.int32), point_mask, width, max_splits)
                   if use_siblings else jnp.zeros(0, jnp.int32))
    initial = (jnp.zeros(n, jnp.int32), point_mask,
               tuple(jnp.zeros(width, jnp.int32).at[0].set(limb) for limb in root_count.limbs),
               jnp.arange(width) == 0, root_counts)
    level_inputs = (jnp.arange(tau_r), jnp.asarray(allocation.split_epsilons, jnp.float32),
                    jnp.asarray(allocation.count_offsets[:tau_r], jnp.float32))
    (point_slot, *_), per_level = jax.lax.scan(split_level, initial, level_inputs)
    count, reached, split, dim, position, leaf, child_count, child_active = per_level

    # Heap arrays: level l holds ids 2**l .. 2**(l+1) - 1 (the first 2**l padded slots);
    # level tau_r (line 14: maximal depth, every reached node is a leaf) comes from the
    # last level's children. Index 0 is padding.
    def heap(per_level_values, padding, last_level):
        parts = [jnp.asarray([padding], per_level_values.dtype)]
        parts += [per_level_values[level, :2**level] for level in range(tau_r)]
        return jnp.concatenate(parts + [last_level.astype(per_level_values.dtype)])

    deepest_active = child_active[tau_r - 1]
    deepest_count = jnp.where(deepest_active, child_count[tau_r - 1], 0.0)
    no_split = jnp.zeros(2**tau_r)
    tree = SplitTree(heap(count, 0.0, deepest_count), heap(reached, False, deepest_active),
                     heap(split, False, no_split), heap(dim, -1, no_split - 1),
                     heap(position, jnp.nan, no_split + jnp.nan))
    return tree, _leaves_by_slot(tree, heap(leaf, False, deepest_active), point_slot, tau_r)


def _leaves_by_slot(tree: SplitTree, is_leaf: jax.Array, point_slot: jax.Array, tau_r: int) -> Leaves:
    """Gather the leaves into their slots: local index j at level l -> slot j << (tau_r - l).

    Slots of different levels coincide only for nodes on one left-most path, of
    which exactly one is a leaf, so a masked scatter-add places every leaf alone.
    """
    heap = jnp.arange(2 ** (tau_r + 1))
    level = jnp.floor(jnp.log2(jnp.maximum(heap, 1))).astype(jnp.int32)
    slot = (heap - 2**level) << (tau_r - level)
    slot = jnp.where(is_leaf, slot, 2**tau_r)  # non-leaves are dropped
    num_slots = 2**tau_r
    count = jnp.zeros(num_slots, jnp.float32).at[slot].add(tree.noisy_count, mode="drop")
    valid = jnp.zeros(num_slots, bool).at[slot].set(True, mode="drop")
    node = jnp.zeros(num_slots, jnp.int32).at[slot].add(heap.astype(jnp.int32), mode="drop")
    return Leaves(count, valid, node, point_slot)
