"""The recursion of DPM (Algorithm 1, BuildClustering and Split) as a padded tree.

Level-synchronous: level l handles all of its 2**l nodes at once with static
shapes, so the whole recursion is one jit-compiled program. Nodes use heap ids
(root 1, children 2i and 2i+1); level l holds ids 2**l .. 2**(l+1) - 1 and a
node's *local* index is its id minus 2**l. The levels run in one ``lax.scan``
whose body handles 2**(P - 1) node slots (P the padded depth, the deepest split level's
count; shallower levels leave the rest inactive): one compiled level instead of P
unrolled ones, which cuts the compile time by about the factor P. Scoring and
selection, the costliest per-node steps, run in a loop over chunks of 8 node slots
whose trip count follows the level (one chunk at the root, all of them at the
deepest), so they are compiled once and cost what the level's nodes need.

One level is :func:`split_level`, a :class:`LevelState` in and the next one out
with the level's :class:`LevelRelease`, in the order of the paper's lines:
  1. half-bin counts per (node, dimension), (nodes, d, 2B) (:mod:`dpm_jax.histogram`,
     :func:`level_counts`): one scatter-add of the active points' half-bin indices
     (on the cell grid binned and counted block by block) or, with many dimensions,
     the parent level's counts minus the histogram of each node's smaller sibling;
  2-3. :func:`choose_splits` (lines 22-25): scores for every (node, dimension,
     candidate) and the exponential mechanism per node (:func:`select_splits`) with
     epsilon_exp_l on the exact integer scores of :mod:`dpm_jax.scoring`
     (sensitivity a1 + a3), its exponent scaled by min(1, max(n~ - lambda_l, 1) / N)
     as Lemma 5's Delta_f = (t/q + alpha) / (n~ - lambda_l) prescribes;
  4. :func:`route_points` (lines 26-27): the points of each node go to child
     2i + (x[dim*] >= s*), from the half-bins of the split dimensions alone
     (:func:`route_on_split_dimensions`);
  5. :func:`count_children` and noisy child counts with epsilon_cnt_{l+1}, added in
     exact integer arithmetic (:func:`dpm_jax.mechanisms.add_count_noise`, lines
     16-17); :func:`stopping_rule` (line 18): a node whose two children both reach
     tau_e is split, otherwise it becomes a leaf. Points of a leaf keep following
     the left-most path so that, at the padded depth P, their local index is the leaf's
     *slot*: slots are unique and static (2**P of them).

With ``DPMConfig.split_grid="cell"`` step 1 bins every point relative to its node's
cell (the node's public box: the bounds cut by the released splits above it,
:mod:`dpm_jax.histogram`), which every level carries in :class:`LevelState` and cuts
at the drawn split for the children; the candidates are the inner half-bin
boundaries (:func:`dpm_jax.scoring.boundary_statistics`) and no half-bins are carried
from level to level (siblings' grids differ from their parent's).

Erratum fixed (Algorithm 1, lines 24-25): with the flat candidate index i* over
d * numSplits candidates, dim = i* // numSplits and s* = a + ((i* mod numSplits) +
1/2) beta. Here the exponential mechanism returns (dim, j) directly.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax._arrays import (
    bin_dtype,
    divide,
    fold_row_blocks,
    heap_slot,
    map_row_blocks,
    materialized,
    reciprocal,
    to_unit_range,
    unfused_multiply_add,
    unit_coordinates,
)
from dpm_jax.histogram import (
    CellGrid,
    cell_grid,
    cell_half_bin_indices,
    children_histogram,
    half_bin_indices,
    level_histogram,
    root_cell,
)
from dpm_jax import merge, structure
from dpm_jax.budget import heap_count_epsilons
from dpm_jax.config import DPMConfig
from dpm_jax.mechanisms import add_count_noise, count_noise, em_exponent_scale, select_with_bits
from dpm_jax.scoring import (
    ScoreCoefficients,
    window_counts,
    boundary_statistics,
    candidate_statistics,
    exponent_ratio,
    score_coefficients,
    split_scores,
)

_SIBLING_MIN_DIMS = 32
_SELECT_CHUNK = 8  # nodes scored per loop step (a power of two)
# Rows binned per loop step (dpm_jax._arrays.fold_row_blocks). Why blocks: binning a coordinate
# gathers its node's cell (lower end, scale, half-bins used) per point, and XLA's CPU backend
# materialises each gather as an (n, d) buffer, as it would the (n, d) unit coordinates read by
# every level of the scan: 4 bytes per coordinate each, several times the data. In blocks they
# stay block-sized. The bins of a row depend on that row alone, so they are the same whatever the blocks.
_BIN_BLOCK_ROWS = 2**16

__all__ = [
    "SplitTree",
    "Leaves",
    "LevelRelease",
    "build_tree",
    "choose_splits",
    "count_children",
    "root_interval_size",
    "release_level",
    "next_point_nodes",
    "PublicInputs",
    "LevelStart",
    "inputs_of",
    "root_node_counts",
    "padded_randomness",
    "level_randomness",
    "assemble_tree",
    "root_cells",
    "level_grid",
    "level_counts",
    "route_on_split_dimensions",
    "DrawnSplit",
    "level_schedule",
    "level_count_noise",
    "level_structure_noise",
    "level_merge_noise",
    "structure_halts",
    "drawn_split",
    "point_inputs",
]


class SplitTree(NamedTuple):
    """The released split tree in heap layout (index 0 unused). DP output.

    Attributes:
      (P = ``config.padded_depth``, the levels the compiled tree has)
      noisy_count: (2**(P+1),) noisy size n~ of every node of the tree
        (0 where ``reached`` is False).
      reached: (2**(P+1),) bool, the node is part of the tree.
      is_split: bool, the node was split into its two children.
      split_dim: int32, dimension of the drawn split (-1 where none was drawn).
      split_position: float32, position of the drawn split in data units (NaN
        where none was drawn). A split is drawn for every reached node above
        the run's depth; it is applied only where ``is_split``.
      valley: int32, the merge's noisy valley statistic of every split node (:mod:`dpm_jax.merge`;
        0 elsewhere and without the merge).
    """

    noisy_count: jax.Array
    reached: jax.Array
    is_split: jax.Array
    split_dim: jax.Array
    split_position: jax.Array
    valley: jax.Array | None = None


class Leaves(NamedTuple):
    """The leaves by slot (2**P slots, P the padded depth)."""

    noisy_count: jax.Array  # (2**P,) float32, 0 for empty slots
    valid: jax.Array  # (2**P,) bool
    node: jax.Array  # (2**P,) int32 heap id of the leaf, 0 for empty slots
    point_slot: jax.Array  # (n,) int32 slot of every point (NOT differentially private)


def select_splits(
    bits: jax.Array,
    em_table,
    counts: jax.Array,
    node_exact: exact.Int,
    node_active: jax.Array,
    candidate_valid: jax.Array,
    epsilon,
    offset,
    coefficients: ScoreCoefficients,
    statistics=candidate_statistics,
    sensitivity: int | None = None,
) -> tuple[jax.Array, jax.Array]:
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
      node_exact: (nodes,) the nodes' released n~ (exact integers).
      node_active: (nodes,) bool; inactive nodes have no valid candidate.
      candidate_valid: (C,) or (nodes, d, C) bool, the candidates inside the bounds (or cell).
      epsilon, offset: the level's epsilon_exp and count offset lambda.
      coefficients: :func:`dpm_jax.scoring.score_coefficients`.
      statistics: the candidates' statistics from the counts (:func:`dpm_jax.scoring.split_scores`).
      sensitivity: the split release's sensitivity Delta (None: the score's, ``coefficients.sensitivity``).
    Returns:
      (dimension, candidate index), (nodes,) int32 each.
    """
    nodes, d = counts.shape[0], counts.shape[1]
    size = exact.clip_to_int32(node_exact, 1, 2**31 - 1)  # N: the released n~ as an integer
    scores = split_scores(counts, size[:, None], coefficients, statistics)
    num_candidates = scores.limbs[0].shape[-1]
    flat = exact.Int(tuple(limb.reshape(nodes, d * num_candidates) for limb in scores.limbs))
    valid = jnp.broadcast_to(node_active[:, None, None] & candidate_valid, (nodes, d, num_candidates)).reshape(
        nodes, d * num_candidates
    )
    ratio = exponent_ratio(exact.to_float32(node_exact), offset, size)
    delta_f = coefficients.sensitivity if sensitivity is None else sensitivity
    scale = em_exponent_scale(epsilon, delta_f, ratio)
    index = select_with_bits(bits, em_table, flat, valid, scale)
    return index // num_candidates, index % num_candidates


class LevelState(NamedTuple):
    """What one level hands the next (the carry of the scan over levels).

    Node arrays have one entry per *slot* (``width`` = 2**(P - 1) of them, P the padded depth; level l
    uses the first 2**l, local index = heap id - 2**l).
    """

    point_node: jax.Array  # (n,) int32 local index of every point's node on this level
    point_active: jax.Array  # (n,) bool: the point's node is on this level (not a leaf above)
    node_exact: exact.Int  # (width,) released n~ of every node (exact integers)
    node_active: jax.Array  # (width,) bool: the slot holds a node of this level
    counts: jax.Array  # (width, d, 2B) half-bin counts carried by sibling subtraction, else (0,)
    cell_lower: jax.Array  # (width, d) every node's cell in unit coordinates (cell grid), else (0,)
    cell_upper: jax.Array


class LevelRelease(NamedTuple):
    """What one level releases per node slot (DP), stacked over the levels by the scan."""

    noisy_count: jax.Array  # (width,) float32 n~ of the node, 0 for inactive slots
    reached: jax.Array  # (width,) bool: the slot holds a node
    is_split: jax.Array  # (width,) bool: both noisy children reached tau_e (lines 16-18)
    split_dim: jax.Array  # (width,) int32 drawn dimension, -1 for inactive slots
    split_position: jax.Array  # (width,) float32 drawn position in data units, NaN if inactive
    is_leaf: jax.Array  # (width,) bool: reached and not split
    child_count: jax.Array  # (2 width,) float32 noisy sizes of the children (released)
    child_active: jax.Array  # (2 width,) bool: the child is a node of the next level
    valley: jax.Array  # (width,) int32 the merge's noisy valley statistic of split nodes (0 elsewhere, or off)


class _TreeInputs(NamedTuple):
    """The public per-run quantities every level reads (fixed before the scan)."""

    half_bins: jax.Array | None  # (n, d) half-bin index of every coordinate (paper grid)
    points: jax.Array | None  # (n, d) points in data units (cell grid), scaled to the unit range block by block
    lattice_unit: jax.Array | None  # (d,) lattice step in units of the range (cell grid), or None
    em_table: tuple  # the exponential mechanism's weight table on the device
    candidate_valid: jax.Array | None  # (B,) bool: candidates inside the bounds (paper grid)
    coefficients: ScoreCoefficients
    split_sensitivity: int  # the split releases' sensitivity (the exponent's Delta)
    min_child: jax.Array  # int32 ceil(tau_e): a noisy child count n~ >= tau_e iff n~ >= this
    depth: jax.Array  # int32 the run's depth: levels 0..depth-1 draw splits (traced under tau_r="auto")
    lower: jax.Array  # (d,) public bounds, for the released split positions
    upper: jax.Array
    beta: jax.Array  # split interval size as a fraction of the range
    max_splits: int
    width: int  # node slots per level: 2**(padded_depth - 1)
    num_levels: int  # padded_depth: levels the scan runs (those from ``depth`` on split nothing)
    use_siblings: bool  # counts carried by sibling subtraction (many dimensions)
    split_grid: "PaperGrid | CellSplitGrid"  # the run's split grid (DPMConfig.split_grid), a strategy
    strided_rows: bool = False  # rows sharded over devices: the loops over row blocks read strided blocks


class SplitChoice(NamedTuple):
    """A level's drawn splits (DP) and, with the "no structure" test and the merge, its nodes' window
    excess Q and valley statistic S (exact)."""

    split_dim: jax.Array  # (width,) int32
    split_index: jax.Array  # (width,) int32 the candidate in that dimension
    excess: jax.Array | None  # (width,) int32 Q of :func:`dpm_jax.structure.window_excess`, 2**30 past the level
    valley: jax.Array | None  # (width,) int32 S of :func:`dpm_jax.merge.valley_statistic` at the drawn split


def choose_splits(
    inputs: _TreeInputs,
    level: jax.Array,
    counts: jax.Array,
    node_exact: exact.Int,
    node_active: jax.Array,
    candidate_valid: jax.Array,
    level_bits: jax.Array,
    epsilon,
    offset,
    test_used: jax.Array | None = None,
    merge_used: jax.Array | None = None,
) -> SplitChoice:
    """Lines 22-25 for the first 2**level of the ``width`` slots: (dim, j), (width,) int32 each.

    Only nodes above the run's depth draw (``level < inputs.depth``; below it every node
    is a leaf). Runs :func:`select_splits` on chunks of _SELECT_CHUNK slots in a loop whose trip
    count follows the level (one chunk at the root, width / chunk at the deepest), so
    a level costs what its nodes need and the scoring and sampler are compiled once
    (about 1 s each on CPU), not once per width. ``level`` is not batched under
    ``jax.vmap``, so the trip count stays unbatched.

    ``test_used`` (the level's ``CellGrid.used``, cell grid only): also the "no structure" test's
    Q per node (:func:`dpm_jax.structure.excess_of_windows`), from the same cumulative sum of the
    counts as the split scores; a statistic of the data, released only through
    :func:`structure_halts`' noise. ``merge_used`` (the same, with the merge): also the valley
    statistic S of every drawn split (:func:`dpm_jax.merge.valley_statistic`), from that cumulative
    sum too, released only with :func:`noisy_valleys`' noise.
    """
    width = inputs.width
    chunk, num_chunks = level_chunks(width, level)
    node_active = node_active & (level < inputs.depth)

    def choose_chunk(index, chosen):
        start = index * chunk
        part = lambda a: jax.lax.dynamic_slice_in_dim(a, start, chunk)
        valid = part(candidate_valid) if candidate_valid.ndim == 3 else candidate_valid
        chunk_exact = exact.Int(tuple(part(limb) for limb in node_exact.limbs))
        used = None if test_used is None else part(test_used)
        merges = merge_used is not None
        statistics, found, inclusive = _shared_statistics(inputs, part(counts), used, chunk_exact, merges)
        picked = select_splits(
            part(level_bits),
            inputs.em_table,
            part(counts),
            chunk_exact,
            part(node_active),
            valid,
            epsilon,
            offset,
            inputs.coefficients,
            statistics,
            inputs.split_sensitivity,
        )
        valley = jnp.zeros(chunk, jnp.int32)
        if merges:
            valley = merge.valley_statistic(inclusive, part(merge_used), *picked)
        update = lambda c, p: jax.lax.dynamic_update_slice_in_dim(c, p, start, axis=0)
        return tuple(update(c, p) for c, p in zip(chosen, (*picked, found, valley)))

    start = (jnp.zeros(width, jnp.int32), jnp.zeros(width, jnp.int32), jnp.full(width, 2**30, jnp.int32))
    start += (jnp.zeros(width, jnp.int32),)
    split_dim, split_index, excess, valley = jax.lax.fori_loop(0, num_chunks, choose_chunk, start)
    return SplitChoice(
        split_dim, split_index, None if test_used is None else excess, None if merge_used is None else valley
    )


def _shared_statistics(
    inputs: _TreeInputs, counts: jax.Array, used: jax.Array | None, node_exact: exact.Int, merges: bool
):
    """(the split scores' statistics, the test's Q for these nodes, the cumulative counts or None):
    one cumulative sum of the counts for the scores, the test (``used``: the nodes'
    ``CellGrid.used``) and the merge's valley statistic (``merges``) on the cell grid; without
    either the grid's statistics, Q = 2**30 and None."""
    statistics = inputs.split_grid.statistics()
    no_test = jnp.full(counts.shape[0], 2**30, jnp.int32)
    if used is None and not merges:
        return statistics, no_test, None
    intervals, inclusive = statistics(counts)
    excess = no_test
    if used is not None:
        same = inputs.split_grid.window == structure.TEST_WINDOW
        test_intervals = intervals if same else window_counts(inclusive, structure.TEST_WINDOW)
        node_size = exact.to_float32(node_exact)
        excess = structure.excess_of_windows(test_intervals, used, node_size, structure.TEST_WINDOW)
    return (lambda _: (intervals, inclusive)), excess, inclusive


def level_chunks(width: int, level) -> tuple[int, jax.Array]:
    """(chunk, number of chunks): the level's 2**level slots in chunks of _SELECT_CHUNK (at least one).

    ``level`` is not batched under ``jax.vmap``, so a loop over these chunks keeps an unbatched
    trip count and a level costs what its nodes need, under vmap too.
    """
    chunk = min(_SELECT_CHUNK, width)
    return chunk, jnp.maximum(jnp.right_shift(jnp.left_shift(1, level), chunk.bit_length() - 1), 1)


def route_points(
    half_bins: jax.Array, point_node: jax.Array, split_dim: jax.Array, first_right: jax.Array
) -> jax.Array:
    """Lines 26-27: (n,) bool, the point goes right, i.e. x[dim*] >= s*: its half-bin is at least
    the first one above s* (2 j* + 1 on the paper's grid, i* + 1 on the cell grid)."""
    point_bins = half_bins[jnp.arange(half_bins.shape[0]), split_dim[point_node]].astype(jnp.int32)
    return point_bins >= first_right[point_node]


def count_children(point_node: jax.Array, point_active: jax.Array, go_right: jax.Array, width: int) -> jax.Array:
    """(2 width,) int32 exact sizes of every slot's two children (local 2p, 2p + 1)."""
    child = 2 * point_node + go_right.astype(jnp.int32)
    return jnp.zeros(2 * width, jnp.int32).at[jnp.where(point_active, child, 2 * width)].add(1, mode="drop")


def stopping_rule(child_count: exact.Int, node_active: jax.Array, min_child: jax.Array) -> jax.Array:
    """Lines 16-18: (width,) bool, the node is split: both noisy children reach tau_e.

    n~ >= tau_e for integers n~ <=> n~ >= ceil(tau_e): int32 comparisons, once per
    node (materialized: XLA would repeat the rule for every point it gathers it for).
    """
    size = exact.clip_to_int32(child_count, -(2**31) + 1, 2**31 - 1)
    return materialized(node_active & (size[0::2] >= min_child) & (size[1::2] >= min_child))


def split_level(
    inputs: _TreeInputs,
    state: LevelState,
    level: jax.Array,
    epsilon,
    offset,
    level_bits: jax.Array,
    level_noise: exact.Int,
    level_structure: exact.Int | None = None,
    structure_epsilon=None,
    level_merge: exact.Int | None = None,
) -> tuple[LevelState, LevelRelease]:
    """One level of BuildClustering (lines 15-18 and Split, 21-28) for all its nodes at once.

    ``level_bits`` (width, EM_TRIES, EM_DIGITS) and ``level_noise`` (2 width,) are the
    level's rows of the split bits and of the children's count noise; ``level_structure``
    (width,) its nodes' "no structure" test noise and ``structure_epsilon`` its epsilon
    (None without the test, :func:`structure_halts`); ``level_merge`` (width,) its nodes' valley
    statistics' noise (None without the merge, :mod:`dpm_jax.merge`).
    """
    width = inputs.width
    # 1. half-bin counts per (node, dim): carried from the previous level (and the
    # root's built before the scan) with sibling subtraction, else one histogram here;
    # on the cell grid, of every point's half-bin in its own node's cell.
    grid, candidate_valid = level_grid(inputs, state.cell_lower, state.cell_upper)
    counts = state.counts if inputs.use_siblings else level_counts(inputs, grid, state.point_node, state.point_active)
    # 2-3. scores and the exponential mechanism (Definition 7, Lemma 5, line 23).
    used = lambda noise: None if noise is None else grid.used  # the test's and the merge's cells
    node_exact, node_active = state.node_exact, state.node_active
    level_parameters = (level_bits, epsilon, offset, used(level_structure), used(level_merge))
    choice = choose_splits(inputs, level, counts, node_exact, node_active, candidate_valid, *level_parameters)
    split_dim, split_index = choice.split_dim, choice.split_index
    # 4. route the points (lines 26-27).
    split = drawn_split(inputs, grid, state.cell_lower, state.cell_upper, split_dim, split_index)
    go_right = route_on_split_dimensions(inputs, grid, state.point_node, split_dim, split.first_right)
    test = (level_structure, structure_epsilon)
    halted = structure_halts(inputs, grid, choice.excess, node_exact, node_active, level, *test)
    # 5. noisy child counts in exact integers (lines 16-17) and the stopping rule (line 18).
    child_true = count_children(state.point_node, state.point_active, go_right, width)
    valley = merge.noisy_valleys(choice.valley, level_merge)
    release, child_exact = release_level(
        inputs, level, node_exact, node_active, split_dim, split.position, child_true, level_noise, halted, valley
    )
    applied = release.is_split
    next_node, next_active = next_point_nodes(state.point_node, state.point_active, go_right, applied)
    next_counts = state.counts  # empty without sibling subtraction
    if inputs.use_siblings:
        # The deepest level has no next level (and its children need not fit in
        # ``width``); ``level`` is not batched under vmap, so this stays a real branch.
        next_counts = jax.lax.cond(
            level < inputs.num_levels - 1,
            lambda: children_histogram(
                counts, child_true, inputs.half_bins, next_node, next_active, go_right, inputs.max_splits
            ),
            lambda: counts,
        )
    next_state = LevelState(
        next_node,
        next_active,
        exact.Int(tuple(limb[:width] for limb in child_exact.limbs)),
        release.child_active[:width],
        next_counts,
        split.cell_lower,
        split.cell_upper,
    )
    return next_state, release


def root_cells(inputs: _TreeInputs) -> tuple[jax.Array, jax.Array]:
    """The root level's cells, (width, d) each (every slot the root's cell); (0,) on the paper grid."""
    return inputs.split_grid.root_cells(inputs)


def level_grid(inputs: _TreeInputs, cell_lower: jax.Array, cell_upper: jax.Array) -> tuple[CellGrid | None, jax.Array]:
    """A level's half-bins and which candidates lie inside the bounds or cells (public; the run's
    split grid's, :class:`PaperGrid` or :class:`CellSplitGrid`)."""
    return inputs.split_grid.level_grid(inputs, cell_lower, cell_upper)


def level_counts(inputs: _TreeInputs, grid: CellGrid | None, point_node: jax.Array, point_active: jax.Array):
    """(width, d, 2B) half-bin counts of the active points of every node on the level's grid.

    The one histogram of a level: the in-memory tree and the streamed passes both call it, so
    their counts agree bit for bit.
    """
    return inputs.split_grid.level_counts(inputs, grid, point_node, point_active)


def route_on_split_dimensions(
    inputs: _TreeInputs, grid: CellGrid | None, point_node: jax.Array, split_dim: jax.Array, first_right: jax.Array
) -> jax.Array:
    """Lines 26-27 (:func:`route_points`) on the half-bins of each point's split dimension alone
    (:func:`split_dimension_half_bins`): a tenth of a level's binning at d = 10."""
    bins = split_dimension_half_bins(inputs, grid, point_node, split_dim)
    # route_points with dimension 0, as a column: no gather over the rows (which made XLA's
    # partitioner gather every row's bins onto every device, and one device store an (n,) copy).
    return bins[:, 0].astype(jnp.int32) >= first_right[point_node]


def split_dimension_half_bins(
    inputs: _TreeInputs, grid: CellGrid | None, point_node: jax.Array, split_dim: jax.Array
) -> jax.Array:
    """(n, 1) every point's half-bin in its node's split dimension, the one :func:`level_counts`
    counted it in, binned alone (the same arithmetic per coordinate, so the same bin); all that
    routing reads (:func:`route_points` with dimension 0)."""
    return inputs.split_grid.split_dimension_half_bins(inputs, grid, point_node, split_dim)


class DrawnSplit(NamedTuple):
    """What a level's drawn splits (dim, j) determine, per slot (public)."""

    first_right: jax.Array  # (width,) int32 the first half-bin right of the split: x >= s* iff half-bin >= it
    position: jax.Array  # (width,) float32 the split's position in data units (released)
    cell_lower: jax.Array  # (width, d) the children's cells if split (local 2p, 2p + 1; cell grid), else (0,)
    cell_upper: jax.Array


def drawn_split(
    inputs: _TreeInputs,
    grid: CellGrid | None,
    cell_lower: jax.Array,
    cell_upper: jax.Array,
    split_dim: jax.Array,
    split_index: jax.Array,
) -> DrawnSplit:
    """Line 24-25 (with the erratum fixed, module docstring): the split at (dim, j) of every slot."""
    return inputs.split_grid.drawn_split(inputs, grid, cell_lower, cell_upper, split_dim, split_index)


def paper_split_position(inputs: _TreeInputs, split_dim: jax.Array, split_index: jax.Array) -> jax.Array:
    """The drawn split's position in data units on the paper grid: lower + (j + 1/2) beta (range)."""
    fraction = (split_index + 0.5) * inputs.beta
    return unfused_multiply_add(fraction, (inputs.upper - inputs.lower)[split_dim], inputs.lower[split_dim])


def release_level(
    inputs: _TreeInputs,
    level: jax.Array,
    node_exact: exact.Int,
    node_active: jax.Array,
    split_dim: jax.Array,
    position: jax.Array,
    child_true: jax.Array,
    level_noise: exact.Int,
    halted: jax.Array | None = None,
    valley: jax.Array | None = None,
) -> tuple[LevelRelease, exact.Int]:
    """Lines 16-18 of a level from its exact child sizes: the noisy child counts, the stopping
    rule and the level's :class:`LevelRelease`; also the children's noisy counts, exact.

    From the run's depth on (``level >= inputs.depth``) no node draws a split: every reached
    node is a leaf (line 14, maximal depth). ``halted`` (width,) bool: the nodes the "no
    structure" test stops (:func:`structure_halts`; None: none), leaves whatever their children;
    ``valley`` (width,) int32 the nodes' noisy valley statistics (:func:`dpm_jax.merge.noisy_valleys`;
    None without the merge), released where the node is split."""
    child_exact = add_count_noise(child_true, level_noise)
    drawn = node_active & (level < inputs.depth)
    applied = stopping_rule(child_exact, drawn, inputs.min_child)
    if halted is not None:
        applied = applied & ~halted
    release = LevelRelease(
        noisy_count=jnp.where(node_active, exact.to_float32(node_exact), 0.0),
        reached=node_active,
        is_split=applied,
        split_dim=jnp.where(drawn, split_dim, -1),
        split_position=jnp.where(drawn, position, jnp.nan),
        is_leaf=node_active & ~applied,
        child_count=exact.to_float32(child_exact),  # post-processing of released integers
        child_active=jnp.repeat(applied, 2),
        valley=jnp.zeros(applied.shape, jnp.int32) if valley is None else jnp.where(applied, valley, 0),
    )
    return release, child_exact


def structure_halts(
    inputs: _TreeInputs,
    grid: CellGrid | None,
    excess: jax.Array | None,
    node_exact: exact.Int,
    node_active: jax.Array,
    level: jax.Array,
    noise: exact.Int | None,
    epsilon,
) -> jax.Array | None:
    """(width,) bool: the nodes that the "no structure" test (:mod:`dpm_jax.structure`) makes
    leaves, from their window excess Q (:attr:`SplitChoice.excess`); None where the test is off.

    Q comes from the counts the exponential mechanism scores (the same on every path: in memory,
    streamed), so the in-memory and streamed runs halt the same nodes. The thresholds come from
    the nodes' *released* sizes n~ (public), never their true counts.
    """
    if noise is None:  # the releases hold no test (DPMConfig.tests_structure off)
        return None
    node_size = exact.to_float32(node_exact)
    drawn = node_active & (level < inputs.depth)
    full_theta = structure.full_window_theta(grid.used, node_size, structure.TEST_WINDOW)
    return structure.halts(excess, noise, full_theta, epsilon, drawn)


def next_point_nodes(
    point_node: jax.Array, point_active: jax.Array, go_right: jax.Array, is_split: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Every point's local index and activity on the next level (lines 26-27).

    Points of a leaf stay inactive and follow the left-most path (2 i), so that at
    the padded depth their local index is their leaf's slot.
    """
    point_split = is_split[point_node]
    return 2 * point_node + (go_right & point_split).astype(jnp.int32), point_active & point_split


def _cell_cut(grid: CellGrid, split_dim: jax.Array, boundary: jax.Array) -> jax.Array:
    """(width,) the drawn split in unit coordinates: the cell's lower end plus ``boundary`` half-bins."""
    pick = lambda a: jnp.take_along_axis(a, split_dim[:, None], axis=1)[:, 0]
    return unfused_multiply_add(boundary.astype(jnp.float32), pick(grid.half_width), pick(grid.lower))


def _children_cells(
    lower: jax.Array, upper: jax.Array, split_dim: jax.Array, cut: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The cells of the children (local 2p left, 2p + 1 right) of the first width / 2 slots.

    Public: a function of the parent's cell and its released split.
    """
    width, d = lower.shape
    cut_here = jnp.arange(d) == split_dim[:, None]
    left_upper = jnp.where(cut_here, cut[:, None], upper)
    right_lower = jnp.where(cut_here, cut[:, None], lower)
    interleave = lambda left, right: jnp.stack([left, right], axis=1).reshape(2 * width, d)[:width]
    return interleave(lower, right_lower), interleave(left_upper, upper)


def root_interval_size(lower: jax.Array, upper: jax.Array, config: DPMConfig) -> jax.Array:
    """(d,) the cell grid's interval size at the root, two half-bins, a fraction of the range.

    Reported as the run's ``split_interval_size`` so that range / it is the number of candidates
    per dimension at the root, as for the paper's beta; a candidate's emptiness window spans
    2 ``split_window`` half-bins (:func:`dpm_jax.scoring.boundary_statistics`). Public: a function
    of the bounds and the config.
    """
    lattice_unit = _lattice_unit(lower, upper, config)
    root_lower, root_upper = root_cell(lower.shape[0], lattice_unit)
    return 2.0 * cell_grid(root_lower, root_upper, config.max_splits_per_dim, lattice_unit).half_width


def _lattice_unit(lower: jax.Array, upper: jax.Array, config: DPMConfig) -> jax.Array | None:
    """(d,) the public lattice step in units of each dimension's range, or None without a lattice."""
    return None if config.lattice_step is None else divide(config.lattice_step, upper - lower)


class LevelSchedule(NamedTuple):
    """The run's depth and each padded level's release parameters: what the scan reads (traced under "auto")."""

    depth: jax.Array  # int32 the run's depth
    split_epsilons: jax.Array  # (padded_depth,) float32 epsilon_exp per level; from depth on a placeholder
    count_offsets: jax.Array  # (padded_depth,) float32 lambda of every level's node counts (Equation 1)
    split_sensitivity: int  # the integer score's sensitivity the split releases state
    structure_epsilons: jax.Array  # (padded_depth,) float32 the "no structure" tests' epsilon per level (0: off)
    merge_epsilons: jax.Array  # (padded_depth,) float32 the merge's valley statistics' epsilon per level (0: off)


def level_schedule(releases: tuple, depth, padded: int) -> LevelSchedule:
    """The schedule of the releases for ``depth`` among ``releases`` (one
    :class:`dpm_jax.dpm_releases.DPMReleases` per consecutive depth), padded to the tree's
    ``padded`` levels (``DPMConfig.padded_depth``).

    ``releases`` holds one run's (a fixed tau_r) or one per depth 1..F (``tau_r="auto"``,
    :mod:`dpm_jax.depth`; F <= max_depth is the deepest depth the budget allows); ``depth`` may be
    traced. Levels from the depth on draw no split, so their epsilon is only a positive
    placeholder (the last level's).
    """
    first = releases[0].depth
    pad = lambda values, size: list(values) + [values[-1]] * (size - len(values))
    splits = np.asarray([pad(r.split_epsilons, padded) for r in releases], np.float32)
    offsets = np.asarray([pad(r.count_offsets[:-1], padded) for r in releases], np.float32)
    tests = np.asarray([pad(r.structure_epsilons or (0.0,), padded) for r in releases], np.float32)
    merges = np.asarray([pad(r.merge_epsilons or (0.0,), padded) for r in releases], np.float32)
    (sensitivity,) = {r.split_sensitivity for r in releases}
    row = jnp.asarray(depth, jnp.int32) - first
    return LevelSchedule(
        jnp.asarray(depth, jnp.int32),
        jnp.asarray(splits)[row],
        jnp.asarray(offsets)[row],
        sensitivity,
        jnp.asarray(tests)[row],
        jnp.asarray(merges)[row],
    )


def level_count_noise(key: jax.Array, releases: tuple, depth, padded: int) -> exact.Int:
    """The count noise of every node in heap layout (2**(padded + 1),), for the run's depth.

    One run's releases: one draw with their per-node epsilons (:func:`dpm_jax.budget.heap_count_epsilons`).
    Several (``tau_r="auto"``, one per depth): one draw per depth, each padded with its deepest
    level's epsilon (those entries are never released), as rows of one call; the run's depth picks
    its row. Only that row is added to counts, and which row is post-processing of the released depth.
    """
    return _heap_noise(key, [heap_count_epsilons(r) for r in releases], 2 ** (padded + 1), depth, releases[0].depth)


def level_structure_noise(key: jax.Array, releases: tuple, depth, padded: int) -> exact.Int | None:
    """The "no structure" tests' noise of every inner node in heap layout (2**padded,), for the
    run's depth (as :func:`level_count_noise`, rows per depth under ``tau_r="auto"``); None when
    the releases hold no test (:mod:`dpm_jax.structure`)."""
    if not releases[0].structures:
        return None
    rows = [
        (r.structure_epsilons[0],) + sum(((e,) * 2**level for level, e in enumerate(r.structure_epsilons)), ())
        for r in releases
    ]
    return _heap_noise(key, rows, 2**padded, depth, releases[0].depth)


def level_merge_noise(key: jax.Array, releases: tuple, depth, padded: int) -> exact.Int | None:
    """The merge's valley statistics' noise of every inner node in heap layout (2**padded,), for the
    run's depth (as :func:`level_structure_noise`); None when the releases hold no merge
    (:mod:`dpm_jax.merge`). Each draw has its release's noise parameter epsilon / 2."""
    if not releases[0].merges:
        return None
    rows = [
        (r.merges[0].noise_epsilon,) + sum(((m.noise_epsilon,) * 2**m.level for m in r.merges), ()) for r in releases
    ]
    return _heap_noise(key, rows, 2**padded, depth, releases[0].depth)


def _heap_noise(key: jax.Array, rows: list, size: int, depth, first_depth: int) -> exact.Int:
    """Discrete Laplace noise of ``size`` heap entries for each row of per-node epsilons (each
    padded with its last value: those entries are never used), the run's depth picking its row."""
    epsilons = np.asarray([list(r) + [r[-1]] * (size - len(r)) for r in rows])
    if len(rows) == 1:
        return count_noise(key, epsilons[0])
    noise = count_noise(key, epsilons)
    row = jnp.asarray(depth, jnp.int32) - first_depth
    return exact.Int(tuple(limb[row] for limb in noise.limbs))


def build_tree(
    start: "LevelStart", points: jnp.ndarray, point_mask: jnp.ndarray, config: DPMConfig, strided_rows: bool = False
) -> tuple[SplitTree, Leaves]:
    """Run BuildClustering on all levels (Algorithm 1, lines 13-28).

    Args:
      start: the steps before the levels (:class:`LevelStart`): the public values every level
        reads, the run's schedule and the randomness, pre-drawn in heap layout (row/element i
        belongs to tree node i, index 0 unused), so that each draw has a documented place.
      points: (n, d) points in data units (scaled to [0, 1] by the public bounds where read).
      point_mask: (n,) bool, padding points are False.
      config: hyper-parameters.
      strided_rows: the points' rows are sharded over devices: the loops over row blocks read
        strided blocks, which stay on the rows' devices (:func:`dpm_jax._arrays.row_blocks`).
    """
    n = points.shape[0]
    padded = config.padded_depth
    inputs = inputs_of(start.public, config, points, start.schedule.split_sensitivity, strided_rows)
    width, max_splits = inputs.width, inputs.max_splits

    def scan_step(state: LevelState, level_inputs):
        level, epsilon, offset, structure_epsilon = level_inputs
        bits, noise, tests, merges = level_randomness(start.randomness, level, width)
        return split_level(inputs, state, level, epsilon, offset, bits, noise, tests, structure_epsilon, merges)

    root_histogram = (
        level_histogram(inputs.half_bins, jnp.zeros(n, jnp.int32), point_mask, width, max_splits)
        if inputs.use_siblings
        else jnp.zeros(0, jnp.int32)
    )
    initial = LevelState(
        jnp.zeros(n, jnp.int32),
        point_mask,
        root_node_counts(start.public.root_exact, width),
        jnp.arange(width) == 0,
        root_histogram,
        *root_cells(inputs),
    )
    level_inputs = (
        jnp.arange(padded),
        start.schedule.split_epsilons,
        start.schedule.count_offsets,
        start.schedule.structure_epsilons,
    )
    last, released = jax.lax.scan(scan_step, initial, level_inputs)  # LevelRelease, stacked by level
    # At depth padded a point's local index is its leaf's slot (module docstring).
    return assemble_tree(released, last.point_node, padded)


def num_splits_at(beta, max_splits: int) -> jax.Array:
    """numSplits on the paper grid: candidates per dimension for the split interval size beta."""
    return jnp.minimum(jnp.ceil(divide(1.0, beta) - 1e-6).astype(jnp.int32), max_splits)


class PaperGrid(NamedTuple):
    """``split_grid="paper"``: Algorithm 1's global grid, interval size beta from Algorithm 2, the
    candidates at the middles of pairs of half-bins; every point is binned once per run."""

    max_splits: int  # max_splits_per_dim
    carries_counts: bool = True  # its levels share one grid: counts can pass by sibling subtraction

    def statistics(self):
        return candidate_statistics

    def point_inputs(self, points, lower, upper, beta):
        """(every point's half-bins, None): binned once per run."""
        unit_points = to_unit_range(points, lower, upper)
        return half_bin_indices(unit_points, beta, num_splits_at(beta, self.max_splits), self.max_splits), None

    def candidate_valid(self, beta):
        """(B,) bool: the candidates inside the bounds for the interval size beta."""
        return jnp.arange(self.max_splits) < num_splits_at(beta, self.max_splits)

    def root_cells(self, inputs):
        return jnp.zeros(0, jnp.float32), jnp.zeros(0, jnp.float32)

    def level_grid(self, inputs, cell_lower, cell_upper):
        """(None, (B,) bool): the same grid at every level."""
        return None, inputs.candidate_valid

    def level_counts(self, inputs, grid, point_node, point_active):
        return level_histogram(inputs.half_bins, point_node, point_active, inputs.width, inputs.max_splits)

    def split_dimension_half_bins(self, inputs, grid, point_node, split_dim):
        return inputs.half_bins[jnp.arange(point_node.shape[0]), split_dim[point_node]][:, None]

    def drawn_split(self, inputs, grid, cell_lower, cell_upper, split_dim, split_index):
        position = paper_split_position(inputs, split_dim, split_index)
        return DrawnSplit(2 * split_index + 1, position, cell_lower, cell_upper)


class CellSplitGrid(NamedTuple):
    """``split_grid="cell"``: every node's own grid, its cell (the bounds cut by the released splits
    above it) in 2 max_splits half-bins; the candidates are the inner half-bin boundaries, each
    scored on ``window`` half-bins per side (:func:`dpm_jax.scoring.boundary_statistics`)."""

    max_splits: int
    window: int  # DPMConfig.split_window
    carries_counts: bool = False  # siblings' grids differ from their parent's

    def statistics(self):
        return functools.partial(boundary_statistics, window=self.window)

    def point_inputs(self, points, lower, upper, beta):
        """(None, the points in data units): binned per level, block by block."""
        return None, points

    def candidate_valid(self, beta):
        return None

    def root_cells(self, inputs):
        """(width, d) each: every slot the root's cell."""
        d = inputs.lower.shape[0]
        lower, upper = root_cell(d, inputs.lattice_unit)
        return jnp.broadcast_to(lower, (inputs.width, d)), jnp.broadcast_to(upper, (inputs.width, d))

    def level_grid(self, inputs, cell_lower, cell_upper):
        """The :class:`dpm_jax.histogram.CellGrid` of the level's cells and (width, d, 2B) bool:
        candidate i - 1 sits at boundary i, inside the cell for i < used."""
        grid = cell_grid(cell_lower, cell_upper, inputs.max_splits, inputs.lattice_unit)
        return grid, jnp.arange(2 * inputs.max_splits) + 1 < grid.used[..., None]

    def level_counts(self, inputs, grid, point_node, point_active):
        """Every point's half-bin in its node's cell, binned and counted block by block
        (:func:`dpm_jax._arrays.fold_row_blocks`): the (n, d) bins are never stored; exact, whatever the blocks."""
        width, max_splits = inputs.width, inputs.max_splits

        def add_block(counts, fresh, points, node, active):
            bins = cell_half_bin_indices(to_unit_range(points, inputs.lower, inputs.upper), node, grid, max_splits)
            return counts + level_histogram(bins, node, active & fresh, width, max_splits)

        initial = jnp.zeros((width, inputs.points.shape[1], 2 * max_splits), jnp.int32)
        per_row = (inputs.points, point_node, point_active)
        return fold_row_blocks(add_block, initial, _BIN_BLOCK_ROWS, *per_row, strided=inputs.strided_rows)

    def split_dimension_half_bins(self, inputs, grid, point_node, split_dim):
        pick = lambda a: jnp.take_along_axis(a, split_dim[:, None], axis=1)  # (width, 1)
        split_grid = CellGrid(pick(grid.lower), pick(grid.half_width), pick(grid.used))
        scale = reciprocal(inputs.upper - inputs.lower)  # to_unit_range's, once

        def bin_block(points, node):
            point_dim = split_dim[node]
            per_point = lambda a: a[point_dim][:, None]  # (block, 1): the point's split dimension's
            coordinate = jnp.take_along_axis(points, point_dim[:, None], axis=1)  # stays on the rows' devices
            column = unit_coordinates(coordinate, per_point(inputs.lower), per_point(inputs.upper), per_point(scale))
            return cell_half_bin_indices(column, node, split_grid, inputs.max_splits)

        dtype = bin_dtype(2 * inputs.max_splits)
        per_row = (inputs.points, point_node)
        return map_row_blocks(bin_block, (1,), dtype, _BIN_BLOCK_ROWS, *per_row, strided=inputs.strided_rows)

    def drawn_split(self, inputs, grid, cell_lower, cell_upper, split_dim, split_index):
        first_right = split_index + 1  # candidate j sits at boundary j + 1
        cut = _cell_cut(grid, split_dim, first_right)
        position = unfused_multiply_add(cut, (inputs.upper - inputs.lower)[split_dim], inputs.lower[split_dim])
        return DrawnSplit(first_right, position, *_children_cells(cell_lower, cell_upper, split_dim, cut))


def split_grid_of(config: DPMConfig) -> PaperGrid | CellSplitGrid:
    """The array code of ``config``'s split grid (:attr:`dpm_jax.DPMConfig.grid_shape`)."""
    shape = config.grid_shape
    if shape.estimates_interval:
        return PaperGrid(shape.max_splits)
    return CellSplitGrid(shape.max_splits, shape.window)


def point_inputs(
    points: jax.Array,
    em_table,
    lower: jax.Array,
    upper: jax.Array,
    root_exact: exact.Int,
    beta,
    config: DPMConfig,
    depth: jax.Array,
) -> _TreeInputs:
    """:func:`tree_inputs` for these points (data units): every point's half-bins on the paper grid
    (once per run), the points themselves on the cell grid (binned per level)."""
    half_bins, kept = split_grid_of(config).point_inputs(points, lower, upper, beta)
    return tree_inputs(half_bins, kept, em_table, lower, upper, root_exact, beta, config, depth)


def tree_inputs(
    half_bins,
    points,
    em_table,
    lower: jax.Array,
    upper: jax.Array,
    root_exact: exact.Int,
    beta,
    config: DPMConfig,
    depth: jax.Array,
) -> _TreeInputs:
    """The public per-run quantities every level reads (``half_bins`` None for streamed data).

    ``depth``: the run's depth (int32; chosen by its depth rule, :mod:`dpm_jax.depth`, traced under
    ``tau_r="auto"``).
    """
    padded, max_splits = config.padded_depth, config.max_splits_per_dim
    depth = jnp.asarray(depth, jnp.int32)
    grid = split_grid_of(config)
    root_noisy_size = exact.to_float32(root_exact)
    coefficients = score_coefficients(config.t, config.q, config.alpha)
    # The default tau_e, n~ / 2**min(depth + DPMConfig.tau_e_halvings, padded) (halvings 0 for a fixed
    # tau_r: the paper's n~ / 2**tau_r; leaf_slack under "auto", never below a leaf of the full padded
    # tree): public, a function of the released n~ and depth; exact (powers of two).
    slack = jnp.minimum(depth + config.tau_e_halvings, padded) - depth
    default_tau_e = jnp.ldexp(jnp.ldexp(root_noisy_size, -depth), -slack)
    tau_e = default_tau_e if config.tau_e is None else jnp.float32(config.tau_e)
    return _TreeInputs(
        half_bins=half_bins,
        points=points,
        lattice_unit=_lattice_unit(lower, upper, config),
        em_table=em_table,
        candidate_valid=grid.candidate_valid(beta),
        coefficients=coefficients,
        split_sensitivity=coefficients.sensitivity,  # the releases': build_tree sets their schedule's
        min_child=jnp.clip(jnp.ceil(tau_e), -(2.0**31) + 128, 2.0**31 - 128).astype(jnp.int32),  # float32-exact ends
        depth=depth,
        lower=lower,
        upper=upper,
        beta=beta,
        max_splits=max_splits,
        width=2 ** (padded - 1),  # nodes of the deepest split level; every level is padded to it
        num_levels=padded,
        # Sibling subtraction pays when the scatter dominates a level (many dimensions); with
        # few, carrying the counts from level to level costs more than it saves under vmap
        # (measured at 10 and 100 dimensions, benchmarks/speed.py).
        use_siblings=lower.shape[0] >= _SIBLING_MIN_DIMS and grid.carries_counts,
        split_grid=grid,
    )


class PublicInputs(NamedTuple):
    """The public values every level reads, fixed before the first (the public bounds and the releases
    of the depth, n~ and beta): arrays only, so it is an argument of compiled programs (the streamed
    passes'); the tree's inputs follow from it and the config (:func:`inputs_of`)."""

    em_table: tuple  # the exponential mechanism's weight table on the device
    lower: jax.Array  # (d,) float32 public bounds
    upper: jax.Array
    root_exact: exact.Int  # the root's noisy count n~ (Algorithm 1, line 7), exact
    beta: jax.Array  # the split interval size as a fraction of the range (line 8; the cell grid: its root's)
    depth: jax.Array  # int32 the run's depth (its depth rule's choice, :mod:`dpm_jax.depth`)


class LevelStart(NamedTuple):
    """The steps before the levels, as every kind of run (in memory, streamed, sharded) takes them
    (:func:`dpm_jax.api.start_levels`): what the levels read, their schedule and their randomness."""

    public: PublicInputs
    schedule: "LevelSchedule"  # the run's depth and its per-level epsilons and offsets
    randomness: tuple  # split bits, count noise and test noise in heap layout, padded (:func:`padded_randomness`)


def inputs_of(
    public: PublicInputs,
    config: DPMConfig,
    points=None,
    split_sensitivity: int | None = None,
    strided_rows: bool = False,
) -> _TreeInputs:
    """The tree's inputs of ``public`` (no points), or those of ``points`` (data units: binned as
    :func:`point_inputs` bins them); ``split_sensitivity``: the split releases' (None: the score's);
    ``strided_rows``: the points' rows are sharded over devices (:func:`dpm_jax._arrays.row_blocks`)."""
    em_table, lower, upper, root_exact, beta, depth = public
    if points is None:
        inputs = tree_inputs(None, None, em_table, lower, upper, root_exact, beta, config, depth)
    else:
        inputs = point_inputs(points, em_table, lower, upper, root_exact, beta, config, depth)
    if split_sensitivity is not None:
        inputs = inputs._replace(split_sensitivity=split_sensitivity)
    return inputs._replace(strided_rows=strided_rows)


def root_node_counts(root_exact: exact.Int, width: int) -> exact.Int:
    """(width,) released n~ of the root level's slots: the root's in slot 0."""
    return exact.Int(tuple(jnp.zeros(width, jnp.int32).at[0].set(limb) for limb in root_exact.limbs))


def padded_randomness(
    split_bits: jax.Array,
    count_noise: exact.Int,
    width: int,
    structure_noise: exact.Int | None = None,
    merge_noise: exact.Int | None = None,
):
    """The heap-layout split bits, count noise, "no structure" test noise and the merge's noise (each
    None when off), padded so that every level can slice ``width`` slots."""
    bits = jnp.concatenate([split_bits, jnp.zeros((width,) + split_bits.shape[1:], split_bits.dtype)])
    noise = tuple(jnp.concatenate([limb, jnp.zeros(2 * width, limb.dtype)]) for limb in count_noise.limbs)
    pad = lambda heap: (
        None if heap is None else tuple(jnp.concatenate([h, jnp.zeros(width, h.dtype)]) for h in heap.limbs)
    )
    return bits, noise, pad(structure_noise), pad(merge_noise)


def level_randomness(randomness, level, width: int) -> tuple:
    """A level's rows: split bits of its nodes (width,), count noise of their children (2 width,),
    the test noise and the merge's noise of its nodes (width,; None when off)."""
    bits, noise, tests, merges = randomness
    first = jnp.left_shift(1, level)  # heap id of the level's first node
    level_noise = exact.Int(tuple(jax.lax.dynamic_slice_in_dim(limb, 2 * first, 2 * width) for limb in noise))
    per_node = lambda heap: (
        None if heap is None else exact.Int(tuple(jax.lax.dynamic_slice_in_dim(limb, first, width) for limb in heap))
    )
    return jax.lax.dynamic_slice_in_dim(bits, first, width), level_noise, per_node(tests), per_node(merges)


def assemble_tree(released: LevelRelease, point_slot: jax.Array, padded: int) -> tuple[SplitTree, Leaves]:
    """The released tree in heap layout and its leaves from the levels' releases (stacked by level)."""

    # Heap arrays: level l holds ids 2**l .. 2**(l+1) - 1 (the first 2**l padded slots);
    # level padded (line 14: maximal depth, every reached node is a leaf) comes from the
    # last level's children. Index 0 is padding.
    def heap(per_level_values, padding, last_level):
        parts = [jnp.asarray([padding], per_level_values.dtype)]
        parts += [per_level_values[level, : 2**level] for level in range(padded)]
        return jnp.concatenate(parts + [last_level.astype(per_level_values.dtype)])

    deepest_active = released.child_active[padded - 1]
    deepest_count = jnp.where(deepest_active, released.child_count[padded - 1], 0.0)
    no_split = jnp.zeros(2**padded)
    tree = SplitTree(
        heap(released.noisy_count, 0.0, deepest_count),
        heap(released.reached, False, deepest_active),
        heap(released.is_split, False, no_split),
        heap(released.split_dim, -1, no_split - 1),
        heap(released.split_position, jnp.nan, no_split + jnp.nan),
        heap(released.valley, 0, no_split),
    )
    return tree, _leaves_by_slot(tree, heap(released.is_leaf, False, deepest_active), point_slot, padded)


def _leaves_by_slot(tree: SplitTree, is_leaf: jax.Array, point_slot: jax.Array, padded: int) -> Leaves:
    """Gather the leaves into their slots: local index j at level l -> slot j << (padded - l).

    Slots of different levels coincide only for nodes on one left-most path, of
    which exactly one is a leaf, so a masked scatter-add places every leaf alone.
    """
    heap = jnp.arange(2 ** (padded + 1))
    slot = jnp.where(is_leaf, heap_slot(heap, padded), 2**padded)  # non-leaves are dropped
    num_slots = 2**padded
    count = jnp.zeros(num_slots, jnp.float32).at[slot].add(tree.noisy_count, mode="drop")
    valid = jnp.zeros(num_slots, bool).at[slot].set(True, mode="drop")
    node = jnp.zeros(num_slots, jnp.int32).at[slot].add(heap.astype(jnp.int32), mode="drop")
    return Leaves(count, valid, node, point_slot)
