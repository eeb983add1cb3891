"""Two resolutions: Algorithm 1's thresholded grid, then the children of its released cells.

Paper: "Differentially Private Synthetic Data Using KD-Trees" (Kreačić et al.), Algorithm 1
(thresholded noisy counts, the empty cells drawn implicitly by Algorithm 5), applied twice.
One fine resolution with one threshold drops every cell whose count is below it: the
threshold grows with log(cells) / epsilon, and at small n epsilon the dropped cells hold a
large share of the data (docs/synthetic.md, "Where the epsilon-0.1 distance goes"). Here

1. the coarse cells (depth h, 2**h of them) get thresholded noisy counts (``plan.coarse``,
   epsilon_c): a record is in one cell, L1 sensitivity 1, (epsilon_c, 0)-DP plus the
   sampler's delta;
2. every released coarse cell is split into its 2**k children of depth h + k (k halvings,
   cycling through the axes as :mod:`dpm_jax.synth.cells`), and all of those children get
   thresholded noisy counts (``plan.leaves``, epsilon_f): the candidate set is a function of
   step 1's release only (public), a record is in at most one candidate, L1 sensitivity 1,
   (epsilon_f, 0)-DP plus the sampler's delta by adaptive composition. The threshold counts
   J = R 2**k candidates (R released coarse cells): log J instead of log 2**(h + k), lower
   than the threshold of all cells of the fine depth at the same epsilon. J is released (through R), so
   choosing the threshold from it is post-processing; ``plan.leaves`` lists one candidate
   per power of two 2**j >= J;
3. post-processing: a coarse cell keeps the weight its children's released counts leave of
   its own, max(0, w_coarse - sum of its released children), on its own box: the mass of the
   children below the threshold is placed on the coarse cell instead of being dropped.

The empty children of released coarse cells are never enumerated: their passing ones are
drawn by Algorithm 5 among them in a public order (coarse cells by code, then the child's
k bits), exactly as the grid's empty cells (:class:`dpm_jax.synth.threshold.ThresholdRelease`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpm_jax.synth.cells import level_of
from dpm_jax.synth.threshold import ThresholdRelease

__all__ = ["refine"]

_NONE = 0xFFFFFFFF


def _child_threshold_choice(num_children: jax.Array, k: int, num_candidates: int) -> jax.Array:
    """The index j - k of the smallest power of two 2**j >= ``num_children`` (the candidates of
    ``plan.leaves`` are j = k, k + 1, ...): a function of the released coarse cells only."""
    powers = [2 ** (k + j) for j in range(num_candidates - 1)]
    return sum((num_children > p).astype(jnp.int32) for p in powers) if powers else jnp.int32(0)


def refine(
    codes,
    valid,
    parent_start,
    parent_weight,
    parent_valid,
    h,
    k: int,
    total: int,
    key: jax.Array,
    release: ThresholdRelease,
):
    """Step 2 and 3 above: the released children of the released coarse cells, and the
    coarse cells' remaining weights.

    ``codes`` (n,) sorted cell codes of ``total`` bits, valid points first; ``parent_*``: the
    coarse release (codes of their first cell at ``total`` bits, int32 noisy counts, released
    mask), any order; ``h`` (may be traced): the coarse depth. Returns (start, depth, weight,
    valid) of the coarse cells followed by the children's slots (non-empty, then implicit).
    """
    n = codes.shape[0]
    order = jnp.lexsort((parent_start, ~parent_valid))
    p_start, p_weight, p_valid = parent_start[order], parent_weight[order], parent_valid[order]
    # the plan's candidates reach J = 2**(k + len - 1): past that many parents (in code order) the
    # children are not counted and the coarse cell keeps its whole weight (a public cap: the plan's)
    num_parents = jnp.minimum(jnp.sum(p_valid, dtype=jnp.int32), 2 ** (len(release.thresholds) - 1))
    p_prefix = jnp.where(p_valid, jnp.right_shift(p_start, jnp.asarray(total - h, jnp.uint32)), jnp.uint32(_NONE))
    slots = p_prefix.shape[0]

    fine = level_of(codes, valid, total, h + k)  # the non-empty children, in code order
    parent_of = jnp.right_shift(fine.prefix, k)
    index = jnp.minimum(jnp.searchsorted(p_prefix, parent_of), slots - 1)
    candidate = (jnp.arange(n) < fine.num_cells) & (p_prefix[index] == parent_of) & (index < num_parents)
    num_children = num_parents * 2**k  # J: < 2**31 (plan_synthesis checks the largest)
    num_empty = num_children - jnp.sum(candidate, dtype=jnp.int32)
    choice = _child_threshold_choice(num_children, k, len(release.thresholds))
    counts = jnp.where(candidate, fine.count, 0)
    kept, weights, positions, passed, ghost_weights = release.draw(key, counts, num_empty, choice)
    kept = kept & candidate

    # The empty children in the public order: position parent_rank * 2**k + the child's k bits;
    # the r-th empty one is r + #{non-empty candidates whose position minus rank is <= r}.
    position = index.astype(jnp.uint32) * jnp.uint32(2**k) + (fine.prefix & jnp.uint32(2**k - 1))
    rank = jnp.cumsum(candidate, dtype=jnp.int32) - 1
    gaps = (
        jnp.full(n, jnp.uint32(_NONE))
        .at[jnp.where(candidate, rank, n)]
        .set(position - rank.astype(jnp.uint32), mode="drop")
    )
    at = positions + jnp.searchsorted(gaps, positions, side="right").astype(jnp.uint32)
    ghost_parent = jnp.minimum(jnp.right_shift(at, k), slots - 1).astype(jnp.int32)
    ghost_prefix = jnp.left_shift(p_prefix[ghost_parent], k) | (at & jnp.uint32(2**k - 1))

    # Post-processing: the coarse weight its released children leave (float32, like the output).
    child_weight = jnp.where(kept, weights, 0).astype(jnp.float32)
    ghost_weight = jnp.where(passed, ghost_weights, 0).astype(jnp.float32)
    placed = jax.ops.segment_sum(child_weight, jnp.where(kept, index, slots), num_segments=slots)
    placed = placed + jax.ops.segment_sum(ghost_weight, jnp.where(passed, ghost_parent, slots), num_segments=slots)
    remaining = jnp.maximum(p_weight.astype(jnp.float32) - placed, 0.0)

    shift = jnp.asarray(total - h - k, jnp.uint32)
    fine_depth = jnp.asarray(h + k, jnp.int32)
    start = jnp.concatenate([p_start, jnp.left_shift(fine.prefix, shift), jnp.left_shift(ghost_prefix, shift)])
    depth = jnp.concatenate(
        [jnp.full(slots, h, jnp.int32), jnp.full(n, fine_depth), jnp.full(positions.shape, fine_depth)]
    )
    weight = jnp.concatenate([remaining, weights.astype(jnp.float32), ghost_weights.astype(jnp.float32)])
    released = jnp.concatenate([p_valid & (remaining > 0), kept, passed])
    return start, depth, weight, released
