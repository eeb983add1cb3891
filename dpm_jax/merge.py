"""Merge DPM's leaves back where no split cut a valley: a private "these leaves are one cluster".

Not in the DPM paper ("DPM: Clustering Sensitive Data through Separation"). Algorithm 1 stops a
node only when a child of its drawn split falls below tau_e (line 18). A large cluster beside
small ones (10:1) has a cell only a few standard deviations wide once the gaps around it are cut,
so its central window holds too little of the node for the centre to lose, and DPM cuts it into
a dozen leaves (issue 27). Every *halting* rule tried for it (stops 31-34, docs/evaluation.md)
also halted the sine or the 64-d pair near the root, whose one-axis marginals show no valley at
the window's scale. A merge runs the other way: DPM splits as the paper does, and afterwards the
leaves under an inner node v become one cluster when v's split cut through no valley and none of
the splits below it clearly did. The sine keeps its leaves (its deep splits cut the valleys
between neighbouring clusters); a large Gaussian cut into pieces has a valley at none of its splits.

The statistic, per split node, on the drawn split's dimension, from the node's half-bin counts the
level's scores are computed from (the cell grid, :mod:`dpm_jax.histogram`; u = the cell's
half-bins, boundary i between half-bins i - 1 and i):

    W_i = the node's points in the window of MERGE_WINDOW half-bins on each side of boundary i
          (clipped to the cell; :func:`dpm_jax.scoring.window_counts`), each capped at 2**29;
    L   = max W_i over the full windows entirely left of the split i*  (i >= w, i + w <= i*);
    R   = max W_i over the full windows entirely right of it           (i >= i* + w, i + w <= u);
    S   = 2 W_{i*} - min(L, R), or -2**29 where a side has no full window (public: u and i*).

S > 0: the split's window holds more than half of the smaller peak beside it, i.e. no valley. A
split without a full window on both sides (a cell of fewer than 48 half-bins, e.g. on a coarse
lattice, or a split within 24 half-bins of its cell's edge) cannot show a valley: it counts as one,
so no merge crosses it (a review found that S = 2 W >= 0 there had merged clusters separated on a
30-value lattice).

Privacy: the cells, the drawn split and the set of windows are public (released). Adding one point
to a node adds one to every window W_i holding its half-bin (several windows, one each) and takes
nothing from any, so W_{i*} grows by 0 or 1 and so does min(L, R) (a maximum or minimum of such
values, and the cap, are monotone and 1-Lipschitz): S = 2 W_{i*} - min(L, R) moves by -1 .. +2, and
removing a point by the opposite (where a side has no full window S is a constant: it moves by 0).
Sensitivity 2 per level (add/remove-one neighbours; in the point's node only: the nodes of a level
are disjoint; maximum n: 2**31 - 1, the int32 counts, |S| <= 2**30 after the caps). Discrete
Laplace noise with parameter epsilon_merge_l / 2 (:func:`dpm_jax.mechanisms.count_noise`, exact)
makes the level's release (epsilon_merge_l, sampler delta)-DP, composed sequentially with the
level's other releases (ledger line ``merge/level{l}``, :mod:`dpm_jax.dpm_releases`). The noisy S
of every split node is released (:attr:`dpm_jax.tree.SplitTree.valley`); the merge itself is
post-processing of it, of the tree and of the released leaf counts and centres.

The rule (:func:`merge_roots`), with b_l = 2 / epsilon_merge_l the noise's scale at v's level l:
v roots a merged group iff
  * its noisy S >= STRICT_SCALES b_l (clearly no valley at v's split);
  * no split node of v's subtree has noisy S < -VALLEY_SCALES b (clearly a valley below);
  * a public gate: n~_v 2 w / (2 B) >= GATE_SCALES b_l (the window's expected share of the node
    under uniformity resolves against the noise; n~_v is v's released count, 2 B the cell's
    half-bins): below it, small nodes at small epsilon merged whole trees to k = 1 in the probe;
and the highest such v wins. A merged group's centre is the count-weighted mean of its leaves'
released centres (their released sums over the sum of their released counts), its count the sum.

Budget: ``DPMConfig.merge_share`` of the averaging's epsilon (:mod:`dpm_jax.budget`), over the
split levels in proportion to l + 1 (:func:`dpm_jax.budget.merge_weights`): a merge is decided by
the deeper splits as much as by its root's, and a deeper node holds fewer points. The window, the
bars and the gate were chosen on ``benchmarks/merge_probe.py`` (stop 43) and the mechanism measured
in ``benchmarks/merge_engine.py`` (docs/evaluation.md).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact
from dpm_jax._arrays import bit_length, heap_slot
from dpm_jax.budget import MERGE_SENSITIVITY as SENSITIVITY
from dpm_jax.mechanisms import add_count_noise
from dpm_jax.scoring import window_counts

__all__ = ["valley_statistic", "noisy_valleys", "merge_roots", "merged_slots"]

MERGE_WINDOW = 12  # half-bins on each side: twice the default split window, the scale of a large cluster's core
STRICT_SCALES = 4.0  # a merge root's noisy S is at least this many noise scales
VALLEY_SCALES = 2.0  # a split below it with noisy S under minus this many scales cut a valley: no merge
GATE_SCALES = 2.5  # a merge root's expected full window under uniformity, in noise scales
_CAP = 2**29  # W_i capped (1-Lipschitz) so that |S| <= 2**30 stays in int32
UNSEEN = -_CAP  # S of a split with no full window on one side: a valley whatever the data (blocks every merge above)


def valley_statistic(inclusive: jax.Array, used: jax.Array, split_dim: jax.Array, split_index: jax.Array) -> jax.Array:
    """(nodes,) int32 S of the module docstring (exact; a statistic of the data, released only with noise).

    ``inclusive`` (nodes, d, 2B) the nodes' cumulative half-bin counts (the split scores',
    :func:`dpm_jax.scoring.boundary_statistics`), ``used`` (nodes, d) their cells' half-bins,
    ``split_dim`` and ``split_index`` (nodes,) the drawn splits (candidate j at boundary j + 1).
    """
    column = jnp.take_along_axis(inclusive, split_dim[:, None, None], axis=1)[:, 0]  # (nodes, 2B)
    windows = jnp.minimum(window_counts(column, MERGE_WINDOW), _CAP)  # boundary i at index i - 1
    cells = jnp.take_along_axis(used, split_dim[:, None], axis=1)  # (nodes, 1)
    boundary = jnp.arange(1, windows.shape[-1] + 1)
    split = split_index[:, None] + 1
    full = (boundary >= MERGE_WINDOW) & (boundary + MERGE_WINDOW <= cells)
    left, right = full & (boundary + MERGE_WINDOW <= split), full & (boundary >= split + MERGE_WINDOW)
    side_peak = lambda side: jnp.max(jnp.where(side, windows, 0), axis=-1)
    peak = jnp.minimum(side_peak(left), side_peak(right))
    at_split = jnp.take_along_axis(windows, split_index[:, None], axis=1)[:, 0]
    # A split without a full window on both sides cannot show a valley (a cell of fewer than 48
    # half-bins, e.g. on a coarse lattice, or a split near the cell's edge): it reads as one (public).
    return jnp.where(jnp.any(left, axis=-1) & jnp.any(right, axis=-1), 2 * at_split - peak, UNSEEN)


def noisy_valleys(valley: jax.Array | None, noise: exact.Int | None) -> jax.Array | None:
    """(nodes,) int32 S + Z in exact integers (Z the level's discrete Laplace noise with parameter
    epsilon_merge_l / 2, drawn by :func:`dpm_jax.tree.level_merge_noise`); None without the merge."""
    if noise is None:
        return None
    return exact.clip_to_int32(add_count_noise(valley, noise), -(2**31) + 1, 2**31 - 1)


def merge_roots(
    is_split: jax.Array, valley: jax.Array, noisy_count: jax.Array, level_epsilons: jax.Array, max_splits: int
) -> jax.Array:
    """(2**(P+1),) int32 in heap layout: the root of the merged group each node lies in, 0 where none.

    Post-processing of released values (the module docstring's rule): the tree's ``is_split``,
    ``valley`` (noisy S) and ``noisy_count`` (heap layout, :class:`dpm_jax.tree.SplitTree`) and
    ``level_epsilons`` (padded depth,) the merge releases' epsilon per level (positive where a
    level splits).
    """
    size = is_split.shape[0]
    heap = jnp.arange(size)
    level = jnp.maximum(bit_length(heap) - 1, 0)
    scale = SENSITIVITY / jnp.maximum(level_epsilons, 1e-30)[jnp.minimum(level, level_epsilons.shape[0] - 1)]
    noisy = valley.astype(jnp.float32)
    gate = noisy_count * (MERGE_WINDOW / max_splits) >= GATE_SCALES * scale
    candidate = is_split & (noisy >= STRICT_SCALES * scale) & gate
    cut_valley = is_split & (noisy < -VALLEY_SCALES * scale)
    padded = size.bit_length() - 2  # the deepest level P (size 2**(P+1))
    blocked = cut_valley
    for _ in range(padded):  # bottom-up: a node is blocked by a valley anywhere in its subtree
        children = jnp.concatenate([blocked, jnp.zeros(size, bool)])
        blocked = cut_valley | children[2 * heap] | children[2 * heap + 1]
    merges = candidate & ~blocked
    root = jnp.where(merges, heap, 0)
    for _ in range(padded):  # top-down: the highest merging ancestor wins
        parent_root = root[heap // 2]
        root = jnp.where((heap > 1) & (parent_root > 0), parent_root, root)
    return root.astype(jnp.int32)


class MergedLeaves(NamedTuple):
    """The leaves after the merge, by slot (as :class:`dpm_jax.tree.Leaves`), with their centres."""

    noisy_count: jax.Array  # (2**P,) float32: a group's count in its first slot, 0 elsewhere
    valid: jax.Array  # (2**P,) bool: the slot holds a group
    node: jax.Array  # (2**P,) int32 heap id of the group (the merge root or the leaf), 0 elsewhere
    point_slot: jax.Array  # (n,) int32 every point's group slot (NOT differentially private)
    centers: jax.Array  # (2**P, d) float32, NaN where not valid


def merged_slots(
    roots: jax.Array,
    noisy_count: jax.Array,
    valid: jax.Array,
    node: jax.Array,
    point_slot: jax.Array,
    centers: jax.Array,
) -> MergedLeaves:
    """The leaves (slot layout: ``noisy_count``, ``valid``, ``node``, ``point_slot`` of
    :class:`dpm_jax.tree.Leaves`, ``centers`` (2**P, d)) merged into the groups of ``roots``
    (:func:`merge_roots`). Post-processing of released values: a group sits in the slot of its
    root (the slot of the root's left-most leaf), its count the sum of its leaves' released counts
    and its centre their centres' mean weighted by max(n~, 1) (the released sums over the counts,
    as :func:`dpm_jax.averaging.centers_from_sums` divides them)."""
    num_slots = noisy_count.shape[0]
    padded = num_slots.bit_length() - 1
    slot = jnp.arange(num_slots)
    group = jnp.where(roots[node] > 0, roots[node], node)  # heap id of every slot's group
    home = jnp.where(valid, heap_slot(group, padded), slot)  # the group's slot
    into = jnp.where(valid, home, num_slots)  # invalid slots add nothing (dropped)
    weight = jnp.maximum(noisy_count, 1.0)
    total_weight = jnp.zeros(num_slots).at[into].add(weight, mode="drop")
    weighted = (
        jnp.zeros_like(centers).at[into].add(weight[:, None] * jnp.where(valid[:, None], centers, 0.0), mode="drop")
    )
    kept = valid & (home == slot)
    merged_centers = jnp.where(kept[:, None], weighted / jnp.maximum(total_weight, 1.0)[:, None], jnp.nan)
    count = jnp.zeros(num_slots, jnp.float32).at[into].add(noisy_count, mode="drop")
    return MergedLeaves(
        noisy_count=jnp.where(kept, count, 0.0),
        valid=kept,
        node=jnp.where(kept, group, 0).astype(jnp.int32),
        point_slot=home[point_slot],
        centers=merged_centers,
    )
