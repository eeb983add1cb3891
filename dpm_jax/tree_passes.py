"""Algorithm 1's levels (lines 10, 13-28) and leaf sums (line 11) as passes over the data in pieces.

For data that never sits in memory whole (:func:`dpm_jax.stream.cluster_stream`): every statistic
the levels read is a sum of exact integers over the rows (the half-bin counts of every node, the
sizes of its children, the leaf sums), so it is accumulated piece by piece by a caller's *pass*
and the totals are those of the whole array. No per-point state is kept between passes: each pass
routes every piece from the root through the splits released so far (lines 26-27), so memory is
bounded by the piece and the tree.

Every step is the in-memory tree's (:mod:`dpm_jax.tree`: :func:`~dpm_jax.tree.level_grid`,
:func:`~dpm_jax.tree.level_counts`, :func:`~dpm_jax.tree.choose_splits`,
:func:`~dpm_jax.tree.release_level`, ...), with the same arguments, so with the same
:class:`dpm_jax.tree.LevelStart` the release is bit-identical. On the cell grid every level bins a
piece relative to its nodes' cells, which are public (the bounds cut by the released splits) and
carried from level to level; a point is routed at each level by its half-bin on that level's
grid, the one its node's histogram counted it in.

A pass is the caller's ``accumulate(pass_name, function, public, routes, *args, **static)``: the
exact sum over all pieces of ``function(piece, valid, public, routes, *args, **static)`` (int32
arrays or exact Ints), ``piece`` (rows, d) float32 and ``valid`` (rows,) bool its real rows. One
pass for the root's histogram, one per level (its children's sizes and, counting every child as if
its parent were split, the next level's histogram on the children's cells, of which the rows of
children that are not nodes are then zeroed: the same counts), one for the leaf sums.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact
from dpm_jax.averaging import blockwise_leaf_sums
from dpm_jax.config import DPMConfig
from dpm_jax.merge import noisy_valleys
from dpm_jax.tree import (
    DrawnSplit,
    Leaves,
    LevelRelease,
    LevelStart,
    SplitTree,
    PublicInputs,
    assemble_tree,
    choose_splits,
    count_children,
    drawn_split,
    level_counts,
    level_grid,
    level_randomness,
    next_point_nodes,
    inputs_of,
    release_level,
    structure_halts,
    root_cells,
    root_node_counts,
    route_on_split_dimensions,
)

__all__ = ["levels_over_passes", "leaf_sums_over_passes"]

Accumulate = Callable[..., Any]  # accumulate(pass_name, function, public, routes, *args, **static): one pass


def levels_over_passes(
    start: LevelStart, config: DPMConfig, accumulate: Accumulate
) -> tuple[SplitTree, Leaves, "Routes"]:
    """Lines 13-28, level by level, one pass per level: the released tree, its leaves (without the
    points' slots) and the routes, which :func:`leaf_sums_over_passes` reads.

    The released splits of the levels so far are kept padded to the tree's levels (one compiled
    program per pass kind); every step is the in-memory tree's (:func:`dpm_jax.tree.split_level`).
    """
    width = 2 ** (config.padded_depth - 1)
    public, schedule = start.public, start.schedule
    cells = _root_cells(public, config=config)
    routes = Routes(
        *(jnp.zeros((config.padded_depth, width), dtype) for dtype in (jnp.int32, jnp.int32, bool)),
        *(jnp.zeros((config.padded_depth,) + end.shape, end.dtype) for end in cells),
    )
    releases = []
    node_exact, node_active = root_node_counts(public.root_exact, width), jnp.arange(width) == 0
    counts = accumulate(
        "level 0 histogram", _root_histogram_of_chunk, public, routes, cells, width=width, config=config
    )
    for level in range(config.padded_depth):
        level_bits, level_noise, level_tests, level_merges = _level_randomness(
            start.randomness, jnp.int32(level), width
        )
        split_dim, split, halted, valley = _choose_splits(
            public,
            jnp.int32(level),
            counts,
            node_exact,
            node_active,
            cells,
            level_bits,
            schedule.split_epsilons[level],
            schedule.count_offsets[level],
            level_tests,
            schedule.structure_epsilons[level],
            level_merges,
            config=config,
            split_sensitivity=schedule.split_sensitivity,
        )
        # One pass: this level's children sizes and, for every child as if its parent were
        # split, the next level's histogram (rows of children not split into are zeroed below).
        last = level == config.padded_depth - 1
        child_true, next_counts = accumulate(
            f"level {level} children" + ("" if last else f", level {level + 1} histogram"),
            _children_of_chunk,
            public,
            routes,
            jnp.int32(level),
            cells,
            split_dim,
            split,
            width=width,
            config=config,
            next_histogram=not last,
        )
        release, child_exact = _release_level(
            public,
            jnp.int32(level),
            node_exact,
            node_active,
            split_dim,
            split.position,
            child_true,
            level_noise,
            halted,
            valley,
            config=config,
        )
        releases.append(release)
        routes, node_exact, node_active, counts = _next_level(
            routes, jnp.int32(level), cells, split_dim, split, release, child_exact, next_counts, width=width
        )
        cells = (split.cell_lower, split.cell_upper)
    tree, leaves = _assemble_tree(releases, padded=config.padded_depth)
    return tree, leaves, routes


def leaf_sums_over_passes(public: PublicInputs, routes: "Routes", config: DPMConfig, leaf_sums, accumulate: Accumulate):
    """Line 11's statistic in one pass: every leaf's exact fixed-point sum of its points
    (:func:`dpm_jax.averaging.blockwise_leaf_sums` of the ``leaf_sums`` release), the points
    routed to their leaves by the released splits."""
    levels, width = jnp.int32(config.padded_depth), 2 ** (config.padded_depth - 1)
    return accumulate(
        "leaf sums", _leaf_sums_of_chunk, public, routes, levels, width=width, config=config, leaf_sums=leaf_sums
    )


class Routes(NamedTuple):
    """The released splits per level, (P, width) each (P the padded depth): what routes a point from the root."""

    split_dim: jax.Array
    first_right: jax.Array  # x >= s* iff the point's half-bin on its level's grid is >= this
    is_split: jax.Array
    cell_lower: jax.Array  # (P, width, d) every level's cells (cell grid), else (P, 0)
    cell_upper: jax.Array


# The node-level steps are compiled, as in the in-memory program: XLA's fused float32
# arithmetic (the released split positions, the centres) then rounds the same way.
@functools.partial(jax.jit, static_argnames=("config", "split_sensitivity"))
def _choose_splits(
    public,
    level,
    counts,
    node_exact,
    node_active,
    cells,
    level_bits,
    epsilon,
    offset,
    level_tests,
    structure_epsilon,
    level_merges,
    *,
    config,
    split_sensitivity,
) -> tuple[jax.Array, DrawnSplit, jax.Array | None, jax.Array | None]:
    """Lines 22-25 for a level's nodes: the drawn dimensions, what the splits determine, the
    nodes the "no structure" test halts (:func:`dpm_jax.tree.structure_halts`; None when off) and
    the noisy valley statistics (:func:`dpm_jax.merge.noisy_valleys`; None when off)."""
    inputs = inputs_of(public, config, split_sensitivity=split_sensitivity)
    grid, candidate_valid = level_grid(inputs, *cells)
    test_used = None if level_tests is None else grid.used
    merge_used = None if level_merges is None else grid.used
    choice = choose_splits(
        inputs,
        level,
        counts,
        node_exact,
        node_active,
        candidate_valid,
        level_bits,
        epsilon,
        offset,
        test_used,
        merge_used,
    )
    split = drawn_split(inputs, grid, *cells, choice.split_dim, choice.split_index)
    halted = structure_halts(
        inputs, grid, choice.excess, node_exact, node_active, level, level_tests, structure_epsilon
    )
    return choice.split_dim, split, halted, noisy_valleys(choice.valley, level_merges)


@functools.partial(jax.jit, static_argnames="config")
def _release_level(
    public, level, node_exact, node_active, split_dim, position, child_true, level_noise, halted, valley, *, config
):
    inputs = inputs_of(public, config)
    return release_level(
        inputs, level, node_exact, node_active, split_dim, position, child_true, level_noise, halted, valley
    )


@functools.partial(jax.jit, static_argnames="config")
def _root_cells(public, *, config):
    return root_cells(inputs_of(public, config))


_level_randomness = jax.jit(level_randomness, static_argnames="width")


@functools.partial(jax.jit, static_argnames="width")
def _next_level(
    routes: Routes,
    level,
    cells,
    split_dim,
    split: DrawnSplit,
    release: LevelRelease,
    child_exact: exact.Int,
    next_counts,
    *,
    width: int,
):
    """The routes with this level's splits; the next level's released counts, active slots and
    histogram (only the points of split nodes: the in-memory path's active points)."""
    routes = Routes(
        *(
            part.at[level].set(value)
            for part, value in zip(routes, (split_dim, split.first_right, release.is_split, *cells))
        )
    )
    node_active = release.child_active[:width]
    if next_counts is not None:
        next_counts = jnp.where(node_active[:, None, None], next_counts, 0)
    return routes, exact.Int(tuple(limb[:width] for limb in child_exact.limbs)), node_active, next_counts


@functools.partial(jax.jit, static_argnames="padded")
def _assemble_tree(releases: list[LevelRelease], *, padded: int):
    stacked = LevelRelease(*(jnp.stack(field) for field in zip(*releases)))
    return assemble_tree(stacked, jnp.zeros(0, jnp.int32), padded)


def _route(inputs, valid, routes: Routes, num_levels):
    """Every point's local index and activity after the first ``num_levels`` levels (lines 26-27), each
    level's split applied to the half-bins of that level's grid, as in the in-memory tree."""

    def one_level(level, state):
        node, active = state
        grid, _ = level_grid(inputs, routes.cell_lower[level], routes.cell_upper[level])
        go_right = route_on_split_dimensions(inputs, grid, node, routes.split_dim[level], routes.first_right[level])
        return next_point_nodes(node, active, go_right, routes.is_split[level])

    return jax.lax.fori_loop(0, num_levels, one_level, (jnp.zeros(valid.shape[0], jnp.int32), valid))


def _histogram(inputs, cells, point_node, point_active):
    """(width, d, 2B) half-bin counts of the active points on the grid of ``cells``."""
    grid, _ = level_grid(inputs, *cells)
    return level_counts(inputs, grid, point_node, point_active)


@functools.partial(jax.jit, static_argnames=("width", "config"))
def _root_histogram_of_chunk(piece, valid, public, routes, cells, *, width: int, config: DPMConfig):
    return _histogram(inputs_of(public, config, piece), cells, jnp.zeros(piece.shape[0], jnp.int32), valid)


@functools.partial(jax.jit, static_argnames=("width", "config", "next_histogram"))
def _children_of_chunk(
    piece,
    valid,
    public,
    routes,
    level,
    cells,
    split_dim,
    split: DrawnSplit,
    *,
    width: int,
    config: DPMConfig,
    next_histogram: bool,
):
    inputs = inputs_of(public, config, piece)
    node, active = _route(inputs, valid, routes, level)
    grid, _ = level_grid(inputs, *cells)
    go_right = route_on_split_dimensions(inputs, grid, node, split_dim, split.first_right)
    child_true = count_children(node, active, go_right, width)
    if not next_histogram:
        return child_true, None
    child = 2 * node + go_right.astype(jnp.int32)  # the local index on the next level, if split
    return child_true, _histogram(inputs, (split.cell_lower, split.cell_upper), child, active)


@functools.partial(jax.jit, static_argnames=("width", "config", "leaf_sums"))
def _leaf_sums_of_chunk(piece, valid, public, routes, levels, *, width: int, config: DPMConfig, leaf_sums):
    # At the padded depth a point's local index is its leaf's slot (dpm_jax.tree).
    slot, _ = _route(inputs_of(public, config, piece), valid, routes, levels)
    return blockwise_leaf_sums(piece, public.lower, public.upper, valid, slot, config.max_clusters, leaf_sums)
