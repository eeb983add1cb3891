"""Midpoint cells of the public box as integer codes (KD-tree paper, Section 3.2).

Paper: "Differentially Private Synthetic Data Using KD-Trees" (Kreačić et al.).

Algorithm 3 halves a cell at its midpoint along axes 0, 1, ..., d - 1, 0, ... in turn.
Within the public box [lo, hi] (never the data's min and max, which Algorithm 2 lines
3-6 read without paying for them), the cell of a point at depth l is therefore given by
the first l bits of one integer: bit l of the code says on which side of the level-l
midpoint the point lies. Dimension j is halved at levels j, j + d, ..., so it owns
``bits_of(depth, j)`` bits; the code interleaves them (a Morton code). Data sorted by
code lists every cell's points contiguously at every depth, so the counts of all cells
of all levels come from one sort. The mapping from a point to its code is a per-record
function, so it costs no privacy.

Codes are uint32 of ``MAX_DEPTH`` = 31 bits at most (cells of edge range / 2**floor(31 / d)).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax._arrays import power_of_two, to_unit_range, unfused_multiply_add

__all__ = ["MAX_DEPTH", "cell_codes", "Level", "level_of", "cell_boxes"]

MAX_DEPTH = 31


def bits_of(depth, dim: int, d: int):
    """How many of the first ``depth`` halvings cut dimension ``dim`` (depth may be traced)."""
    return (depth - dim + d - 1) // d


def cell_codes(points: jax.Array, lower: jax.Array, upper: jax.Array, depth: int) -> jax.Array:
    """(n,) uint32 codes of depth ``depth`` (static) of points in the box [lower, upper] (clipped)."""
    d = points.shape[1]
    code = jnp.zeros(points.shape[0], jnp.uint32)
    for dim in range(min(d, depth)):
        bits = bits_of(depth, dim, d)
        unit = to_unit_range(points[:, dim], lower[dim], upper[dim])  # the scaling of every statistic
        index = jnp.clip(jnp.floor(unit * 2.0**bits), 0, 2.0**bits - 1).astype(jnp.uint32)
        for k in range(bits):  # bit k from the top of this dimension sits at level dim + k d
            bit = jnp.right_shift(index, bits - 1 - k) & 1
            code = code | jnp.left_shift(bit, depth - 1 - (dim + k * d))
    return code


class Level(NamedTuple):
    """The non-empty cells of one depth, from codes sorted with the valid points first.

    ``slot`` numbers the cells in code order; arrays indexed by slot have n entries,
    of which the first ``num_cells`` are cells.
    """

    slot: jax.Array  # (n,) int32 slot of each point's cell (n for padding points)
    count: jax.Array  # (n,) int32 points per slot
    prefix: jax.Array  # (n,) uint32 the cell's code prefix per slot (0xFFFFFFFF beyond num_cells)
    num_cells: jax.Array  # int32


def level_of(codes: jax.Array, valid: jax.Array, depth: int, level: int) -> Level:
    """The cells at ``level`` (may be traced, <= depth) of sorted ``codes`` of ``depth`` bits."""
    n = codes.shape[0]
    prefix = jnp.right_shift(codes, jnp.asarray(depth - level, jnp.uint32))
    changed = jnp.concatenate([jnp.ones(1, bool), prefix[1:] != prefix[:-1]])
    start = valid & changed
    slot = jnp.where(valid, jnp.cumsum(start) - 1, n)
    count = jax.ops.segment_sum(valid.astype(jnp.int32), slot, num_segments=n)
    cell_prefix = jnp.full(n, jnp.uint32(0xFFFFFFFF)).at[slot].set(prefix, mode="drop")
    return Level(slot.astype(jnp.int32), count, cell_prefix, jnp.sum(start, dtype=jnp.int32))


def cell_boxes(starts: jax.Array, depths: jax.Array, lower: jax.Array, upper: jax.Array, total: int):
    """(lo, hi) corners, (m, d) float32, of the cells with code ``starts`` (``total`` bits) and ``depths``.

    Dimension j's index is the cell's bits at levels j, j + d, ... below its depth.
    """
    d = lower.shape[0]
    los, his = [], []
    for dim in range(d):
        index = jnp.zeros(starts.shape, jnp.float32)
        bits = bits_of(depths, dim, d)
        for k in range(bits_of(total, dim, d)):
            level = dim + k * d
            bit = (jnp.right_shift(starts, total - 1 - level) & 1).astype(jnp.float32)
            index = jnp.where(level < depths, 2.0 * index + bit, index)
        width = (upper[dim] - lower[dim]) * power_of_two(-bits)  # exact: jnp.exp2 is not from 2**13 on
        los.append(unfused_multiply_add(index, width, lower[dim]))
        his.append(unfused_multiply_add(index + 1.0, width, lower[dim]))
    return jnp.stack(los, axis=1), jnp.stack(his, axis=1)
