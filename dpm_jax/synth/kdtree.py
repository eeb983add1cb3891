"""Algorithms 2-3 of "Differentially Private Synthetic Data Using KD-Trees": adaptive midpoint binning.

The tree is grown level-synchronously on sorted cell codes (:mod:`dpm_jax.synth.cells`):
levels 0 .. h - 1 split every cell (data independent: the paper's "largest edge > s1"),
levels h .. h + D - 1 split a cell when its noisy count reaches tau (Algorithm 3, line 5),
and level h + D stops (the paper's "largest edge < s2", line 7). Algorithm 1's grid is the
case D = 0: the 2**h cells of level h are its bins.

Corrections to the paper, each stated where the code needs it:

* Root (Algorithm 2, lines 3-6): the public box, not the data's min and max.
* Decision noise (Algorithm 3, line 5): a record sits in one cell per level, so it
  changes D decision counts by one each: L1 sensitivity D, discrete Laplace with
  epsilon_tree / D per decision. With the paper's edges s1 > s2, decisions run at every
  level whose largest edge lies in [s2, s1]: D = d (log2(s1 / s2) + 1) levels, not the
  printed d log2(s1 / s2) (Theorem 7), which would spend d / D more than claimed. Here D is
  the parameter itself, so the count is the number of levels the loop decides at.
* Empty cells are never split and never given a decision draw (Lemma 10, Theorem 11):
  the output differs from the explicit tree's only on the event that an empty decision
  cell's noise reaches tau, so the tree is (epsilon_tree, delta_L10 (1 + e^epsilon_tree))-DP,
  delta_L10 = N P[Z >= tau], N = 2**h + n_max (D - 1) empty decision cells at most
  (Lemma 29). That delta is charged in the ledger (:func:`lemma10_delta`); n_max is
  ``SynthConfig.max_rows``, the stated public capacity, never the row count of X.
* Algorithm 2 calls Recursive-Binning without s1, s2: here h and D are explicit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact
from dpm_jax._arrays import switch_taken
from dpm_jax.exact import Int
from dpm_jax.synth.cells import Level, level_of
from dpm_jax.synth.implicit import pass_probability

__all__ = ["grow", "empty_cell_at", "lemma10_delta", "decision_threshold"]


class Partition(NamedTuple):
    """The leaves of a grown tree. NOT differentially private on its own (exact counts).

    Per leaf slot (n slots, the first ``num_leaves`` used): code of its first cell at full
    depth (``start``), ``depth`` and exact ``count``. The empty leaves are implicit:
    ``num_empty`` of them, ``level_h`` holds the non-empty cells of level h, and
    ``empty_child``/``child_start``/``child_depth`` (D rows) the empty children of split cells.
    """

    start: jax.Array
    depth: jax.Array
    count: jax.Array
    num_leaves: jax.Array
    level_h: Level
    empty_child: jax.Array
    child_start: jax.Array
    child_depth: jax.Array
    num_empty: jax.Array


def lemma10_delta(h_max: int, decisions: int, n_max: int, epsilon: float, tau: int) -> float:
    """N P[Z >= tau]: the chance that an empty decision cell would have split (Lemma 10, Lemma 29)."""
    if decisions == 0:
        return 0.0
    cells = 2**h_max + n_max * (decisions - 1)
    return cells * pass_probability(epsilon / decisions, tau)


def decision_threshold(h_max: int, decisions: int, n_max: int, epsilon: float, delta: float) -> int:
    """The smallest integer tau with lemma10_delta (1 + e^epsilon) <= delta."""
    noise_epsilon = epsilon / decisions
    cells = 2**h_max + n_max * (decisions - 1)
    tau = max(1, math.ceil(math.log(cells * (1.0 + math.exp(epsilon)) / delta) / noise_epsilon) - 2)
    while lemma10_delta(h_max, decisions, n_max, epsilon, tau) * (1.0 + math.exp(epsilon)) > delta:
        tau += 1
    return tau


def _segment_max(values, slot, n):
    return jax.ops.segment_max(values, slot, num_segments=n)


def _decide(level: Level, nxt: Level, codes, reached, noise: Int, tau: int, total: int, at: int, biased):
    """Split decisions of one decision level: which cells split, and their empty children.

    ``reached`` marks the slots whose cell holds points still alive; ``biased``: the count
    compared with tau, max(count - bias, floor) (KD-tree: bias 0, floor 0, the count itself;
    PrivTree: :mod:`dpm_jax.synth.privtree`).
    """
    n = codes.shape[0]
    slot = level.slot
    bias, floor = biased
    noisy = exact.add(exact.from_int32(jnp.maximum(level.count - bias, floor)), noise)
    split = reached & ~exact.less(noisy, exact.from_int32(jnp.full(n, tau, jnp.int32)))
    children = jax.ops.segment_sum(((nxt.slot < n) & _first_of_slot(nxt.slot)).astype(jnp.int32), slot, num_segments=n)
    side = _segment_max((jnp.right_shift(codes, total - at - 1) & 1).astype(jnp.int32), slot, n)
    child_prefix = jnp.left_shift(level.prefix, 1) | (1 - side).astype(jnp.uint32)
    empty_child = split & (children == 1)
    return split, empty_child, jnp.left_shift(child_prefix, total - at - 1)


def _first_of_slot(slot: jax.Array) -> jax.Array:
    return jnp.concatenate([jnp.ones(1, bool), slot[1:] != slot[:-1]])


def decision_capacities(n: int) -> tuple[int, ...]:
    """The static numbers of decision draws a level may make, ascending, the last n: a level
    draws the smallest that holds every cell it can reach (at least 256 unless n is smaller)."""
    return tuple(sorted({min(n, max(256, n // parts)) for parts in (64, 16, 4)} | {n}))


def _reached_noise(key: jax.Array, release, reached: jax.Array, most_reached: jax.Array) -> Int:
    """One independent noise draw per reached slot, in slot order (unreached slots: any value).

    Below the first decision level only the children of split cells are reached, usually far
    fewer than n: the level draws the smallest of :func:`decision_capacities` that is at least
    ``most_reached`` (the key folded with that size's index). Either way the reached cells get
    i.i.d. draws of the release's noise, so the tree's law is the same as with n draws per
    level; only the work differs (under vmap, the sizes some member of the batch draws:
    :func:`dpm_jax._arrays.switch_taken`).

    ``most_reached`` must bound the reached count and be a function of the *released* tree
    (:func:`grow`: 2**h at the first decision level, twice the previous level's splits below):
    the branch taken, hence the run time, then says nothing the release does not. Branching on
    the reached count itself would time the number of non-empty cells, which is not released.
    """
    n = reached.shape[0]
    sizes = decision_capacities(n)
    rank = jnp.cumsum(reached.astype(jnp.int32)) - 1

    def draw(fold: int, size: int):
        def run(key, rank):
            noise = release.noise(jax.random.fold_in(key, fold), (size,))
            return jax.tree.map(lambda limb: limb[jnp.clip(rank, 0, size - 1)], noise)

        return run

    tier = sum((most_reached > size).astype(jnp.int32) for size in sizes[:-1])
    return switch_taken(tier, tuple(draw(fold, size) for fold, size in enumerate(sizes)), key, rank)


def grow(
    codes, valid, h, decisions: int, total: int, key, release, tau: int, bias: int = 0, floor: int = 0
) -> Partition:
    """Grow the tree on sorted ``codes`` (valid points first) of ``total`` bits.

    ``h`` (may be traced, 0 <= h, h + decisions <= total): forced-split levels, which need
    no work (every point is still in a splitting cell at level h); ``key``, ``release``: the
    decision noise of row ``row`` is ``release.noise`` drawn from ``key`` folded with the row
    (:func:`_reached_noise`; None when decisions == 0); ``tau``: the split threshold,
    met by max(count - row ``bias``, ``floor``) + noise at decision row ``row`` (PrivTree's
    biased count; 0, 0 for the KD-tree). Empty cells never split.
    One scan step per decision level h .. h + decisions - 1; the points still alive after
    it stop at level h + decisions.
    """
    n = codes.shape[0]
    level_h = level_of(codes, valid, total, h)

    def step(carry, row):
        alive, leaf_depth, level, most_reached = carry
        at = h + row
        nxt = level_of(codes, valid, total, at + 1)
        reached = _segment_max(alive.astype(jnp.int32), level.slot, n) > 0
        row_noise = _reached_noise(jax.random.fold_in(key, row), release, reached, most_reached)
        biased = (row * bias, floor)
        split, empty, start = _decide(level, nxt, codes, reached, row_noise, tau, total, at, biased)
        stop = alive & ~split[jnp.minimum(level.slot, n - 1)]
        # the next level reaches at most the children of this level's splits (released cells)
        children = 2 * jnp.sum(split, dtype=jnp.int32)
        return (alive & ~stop, jnp.where(stop, at, leaf_depth), nxt, children), (empty, start)

    # the first decision level reaches at most its 2**h cells (capped: 2**30 exceeds any capacity)
    first_cells = jnp.left_shift(jnp.int32(1), jnp.minimum(jnp.asarray(h, jnp.int32), 30))
    carry = (valid, jnp.full(n, total, jnp.int32), level_h, first_cells)
    if decisions:
        carry, (empty_child, child_start) = jax.lax.scan(step, carry, jnp.arange(decisions))
    else:
        empty_child, child_start = jnp.zeros((1, n), bool), jnp.zeros((1, n), jnp.uint32)
    alive, leaf_depth, _, _ = carry
    leaf_depth = jnp.where(alive, h + decisions, leaf_depth)
    return _leaves(codes, valid, leaf_depth, total, level_h, h, empty_child, child_start, decisions)


def _leaves(codes, valid, leaf_depth, total, level_h, h, empty_child, child_start, decisions) -> Partition:
    n = codes.shape[0]
    shift = (total - leaf_depth).astype(jnp.uint32)
    start = jnp.left_shift(jnp.right_shift(codes, shift), shift)
    changed = jnp.concatenate([jnp.ones(1, bool), start[1:] != start[:-1]])
    slot = jnp.where(valid, jnp.cumsum(valid & changed) - 1, n)
    count = jax.ops.segment_sum(valid.astype(jnp.int32), slot, num_segments=n)
    leaf_start = jnp.zeros(n, jnp.uint32).at[slot].set(start, mode="drop")
    depth = jnp.zeros(n, jnp.int32).at[slot].set(leaf_depth, mode="drop")
    rows = jnp.arange(max(decisions, 1))[:, None]
    child_depth = jnp.broadcast_to(h + rows + 1, empty_child.shape).astype(jnp.int32)
    num_empty = (jnp.left_shift(1, h) - level_h.num_cells) + jnp.sum(empty_child, dtype=jnp.int32)
    return Partition(
        leaf_start,
        depth,
        count,
        jnp.sum(valid & changed, dtype=jnp.int32),
        level_h,
        empty_child,
        child_start,
        child_depth,
        num_empty.astype(jnp.int32),
    )


def empty_cell_at(position: jax.Array, partition: Partition, h, total: int):
    """(start, depth) of the empty leaf of rank ``position`` (< num_empty) in the public order.

    Ranks below E_h = 2**h - (non-empty cells of level h) are the empty cells of level h in
    code order (the k-th is k + #{non-empty cells whose code minus their rank is <= k});
    the rest are the empty children of split cells, by level and slot.
    """
    level = partition.level_h
    n = level.prefix.shape[0]
    ranks = jnp.arange(n, dtype=jnp.uint32)
    gaps = jnp.where(ranks < level.num_cells.astype(jnp.uint32), level.prefix - ranks, jnp.uint32(0xFFFFFFFF))
    position = position.astype(jnp.uint32)
    at_h = position + jnp.searchsorted(gaps, position, side="right").astype(jnp.uint32)
    shift_h = jnp.asarray(total - h, jnp.uint32)
    empty_h = (jnp.left_shift(1, h) - level.num_cells).astype(jnp.uint32)
    later = position - empty_h
    cumulative = jnp.cumsum(partition.empty_child.reshape(-1), dtype=jnp.int32).astype(jnp.uint32)
    flat = jnp.minimum(jnp.searchsorted(cumulative, later, side="right"), cumulative.shape[0] - 1)
    in_h = position < empty_h
    start = jnp.where(in_h, jnp.left_shift(at_h, shift_h), partition.child_start.reshape(-1)[flat])
    depth = jnp.where(in_h, h, partition.child_depth.reshape(-1)[flat])
    return start, depth.astype(jnp.int32)
