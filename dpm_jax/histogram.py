"""Half-bin histograms of the points of every node: the statistics a tree level scores.

A level of the recursion (Algorithm 1, lines 22-23 of the DPM paper, "DPM: Clustering
Sensitive Data through Separation") scores every candidate split of every node from
the counts of its points in the *half-intervals* of width beta / 2 of every dimension
(:mod:`dpm_jax.scoring`). This module computes those counts: the half-bin index of
every coordinate (once per run), one scatter-add per level
(:func:`level_histogram`), or, with many dimensions, the children's counts from their
parent's minus each node's smaller child (:func:`children_histogram`). All counts are
exact int32, so the result does not depend on the order of the points. Under
``jax.vmap`` the scatters run as loops over the batch
(:func:`dpm_jax._arrays.looped_under_vmap`).

Two designs of the half-bins (``DPMConfig.split_grid``):

* ``"paper"``: one global grid of half-bins of width beta / 2 from the lower bound,
  beta chosen once by Algorithm 2; the half-bin index of every coordinate is
  computed once per run (:func:`half_bin_indices`).
* ``"cell"``: every node has a *cell*, the box its points lie in: the public bounds
  cut by the released splits of its ancestors, hence itself public. Each level
  divides every node's cell, per dimension, into 2 B equal half-bins
  (:func:`cell_grid`, B = ``max_splits_per_dim``) and bins every point relative to
  its own node's cell (:func:`cell_half_bin_indices`). The grid therefore refines as
  the tree descends: a node 1/1000 of the range wide is split as finely, relative
  to its own width, as the root. On a public lattice of step h (integer features,
  ``DPMConfig.lattice_step``) the cells end half-way between lattice values and a
  half-bin holds u >= 1 whole lattice values (u = ceil(m / 2B) for m values in the
  cell), so every boundary between half-bins lies between two lattice values.

The half-bin of a point is a function of that point and of public quantities only
(the bounds, the released splits, the config), so the counts are exact integers of
a per-record map: one point changes one half-bin count per (node, dimension) by one.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax._arrays import bin_dtype, divide, looped_under_vmap, reciprocal

__all__ = [
    "half_bin_indices",
    "CellGrid",
    "root_cell",
    "cell_grid",
    "cell_half_bin_indices",
    "level_histogram",
    "children_histogram",
]

_CHUNK_ELEMENTS = 2**20


def half_bin_indices(unit_points: jnp.ndarray, beta, num_splits, max_splits: int) -> jnp.ndarray:
    """(n, d) half-interval index of every coordinate, in [0, 2 numSplits).

    Kept in the layout of the data (no transpose: a 100k x 100 int32 transpose
    costs more than a tree level) and in the smallest dtype for 2 max_splits bins.
    """
    index = jnp.floor(unit_points * reciprocal(0.5 * beta)).astype(jnp.int32)  # not a division: see reciprocal
    return jnp.clip(index, 0, 2 * num_splits - 1).astype(bin_dtype(2 * max_splits))


class CellGrid(NamedTuple):
    """The half-bins of every node's cell, per (node, dimension), in unit coordinates (public)."""

    lower: jax.Array  # (nodes, d) lower end of the cell
    half_width: jax.Array  # (nodes, d) width of one half-bin
    used: jax.Array  # (nodes, d) int32 half-bins inside the cell, <= 2B (2B without a lattice)


def root_cell(d: int, lattice_unit) -> tuple[jax.Array, jax.Array]:
    """(lower, upper), (d,) each: the root's cell in unit coordinates, [0, 1] or, on a lattice of
    step h' (units of the range), [-h'/2, 1 + h'/2]: the bounds are lattice values, and a cell
    ends half-way between two of them."""
    margin = 0.0 if lattice_unit is None else 0.5 * lattice_unit
    return jnp.full(d, -margin, jnp.float32), jnp.full(d, 1.0 + margin, jnp.float32)


def cell_grid(lower: jax.Array, upper: jax.Array, max_splits: int, lattice_unit) -> CellGrid:
    """The half-bins of cells [lower, upper): 2 max_splits equal ones, or whole lattice values.

    On a lattice of step h' (``lattice_unit``, units of the range; None: no lattice) a
    cell holds m = (upper - lower) / h' values (cells end half-way between values, so m
    is an integer up to float rounding); a half-bin holds u = ceil(m / 2B) of them and
    ceil(m / u) <= 2B half-bins are used.
    """
    width = upper - lower
    if lattice_unit is None:
        return CellGrid(lower, divide(width, 2 * max_splits), jnp.full(width.shape, 2 * max_splits, jnp.int32))
    values = jnp.maximum(jnp.round(divide(width, lattice_unit)), 1.0)
    per_bin = jnp.ceil(divide(values, 2 * max_splits))
    return CellGrid(lower, per_bin * lattice_unit, jnp.ceil(divide(values, per_bin)).astype(jnp.int32))


def cell_half_bin_indices(
    unit_points: jnp.ndarray, point_node: jax.Array, grid: CellGrid, max_splits: int
) -> jnp.ndarray:
    """(n, d) half-bin index of every coordinate in its node's cell, in [0, used).

    A coordinate outside its cell (float rounding at a released split position) goes to
    the nearest end half-bin; in a degenerate cell (no width) a point at its lower end goes to
    half-bin 0. A product with the half-width's reciprocal, not a quotient (see
    :func:`dpm_jax._arrays.reciprocal`): the bins are the same in every program that calls
    this function (the whole array in memory, a streamed chunk).
    """
    scale = reciprocal(grid.half_width)  # per (node, dimension), once
    index = jnp.floor((unit_points - grid.lower[point_node]) * scale[point_node])
    index = jnp.minimum(index, (grid.used[point_node] - 1).astype(jnp.float32))
    index = jnp.where(index >= 0, index, 0.0)  # also NaN (0 / 0) -> 0
    return index.astype(bin_dtype(2 * max_splits))


def level_histogram(
    half_bins: jax.Array, point_node: jax.Array, point_active: jax.Array, num_nodes: int, max_splits: int
) -> jax.Array:
    """(num_nodes, d, 2 max_splits) half-bin counts of the active points of every node.

    One scatter-add of n * d indices. Under ``jax.vmap`` it runs as a loop over the
    batch (:func:`dpm_jax._arrays.looped_under_vmap`), so no batch-sized index
    array is ever built and the shared ``half_bins`` are not copied.
    """
    return looped_under_vmap(_level_histogram, num_nodes, max_splits)(half_bins, point_node, point_active)


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
        part = _histogram_of_dims(
            num_nodes,
            max_splits,
            jax.lax.dynamic_slice_in_dim(half_bins, start, chunk, axis=1),
            point_node,
            point_active,
        )
        return jax.lax.dynamic_update_slice_in_dim(counts, part, start, axis=1)

    return jax.lax.fori_loop(0, -(-d // chunk), add_chunk, jnp.zeros((num_nodes, d, 2 * max_splits), jnp.int32))


def _histogram_of_dims(num_nodes: int, max_splits: int, half_bins, point_node, point_active):
    d = half_bins.shape[1]
    block = d * 2 * max_splits
    # Inactive points get an index past the end, which mode="drop" discards (a
    # negative index would wrap around to the last bin).
    flat = jnp.where(
        point_active[:, None],
        point_node[:, None] * block + jnp.arange(d, dtype=jnp.int32) * (2 * max_splits) + half_bins.astype(jnp.int32),
        num_nodes * block,
    )
    counts = jnp.zeros(num_nodes * block, jnp.int32).at[flat.reshape(-1)].add(1, mode="drop")
    return counts.reshape(num_nodes, d, 2 * max_splits)


def children_histogram(
    parent_counts: jax.Array,
    child_true: jax.Array,
    half_bins: jax.Array,
    child_node: jax.Array,
    child_active: jax.Array,
    go_right: jax.Array,
    max_splits: int,
) -> jax.Array:
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
        parent_counts, child_true, half_bins, child_node, child_active, go_right
    )


def _children_histogram(max_splits: int, parent_counts, child_true, half_bins, child_node, child_active, go_right):
    width = parent_counts.shape[0]
    n = half_bins.shape[0]
    smaller_is_right = child_true[1::2] < child_true[0::2]  # per parent, (width,)
    # child_node // 2 is the point's node on this level (a local index < width).
    in_smaller = child_active & (go_right == smaller_is_right[child_node // 2])
    # Sum over parents of min(left, right) <= n // 2: the buffer always suffices.
    capacity = max(n // 2, 1)
    (point_index,) = jnp.nonzero(in_smaller, size=capacity, fill_value=0)
    gathered_active = jnp.arange(capacity) < jnp.sum(in_smaller)
    smaller_counts = _level_histogram(
        width, max_splits, half_bins[point_index], child_node[point_index], gathered_active
    )
    local = jnp.arange(width)
    is_smaller = smaller_is_right[local // 2] == (local % 2 == 1)
    sibling_counts = parent_counts[local // 2] - smaller_counts[local ^ 1]
    return jnp.where(is_smaller[:, None, None], smaller_counts, sibling_counts)
