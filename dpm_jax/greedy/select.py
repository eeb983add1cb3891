"""The greedy selection of centres ("Making Old Things New", Section 3, Algorithm 1; Section 5.1).

For each of the k centres: choose a ball of approximately maximum value among the
available balls of the start levels 0 .. S (:mod:`dpm_jax.greedy.nets`), then descend
level by level to a child of approximately maximum value until the last level L; the
centre of the last ball is the next centre, and every start ball within C_FORBID r_i of
it becomes forbidden. Children of an available ball are available (Lemma D.5, nets), so
the descent needs no availability test. The choice is a :data:`Chooser`: the exact
exponential mechanism for the private run (Section 5.1, Lemma F.1), the arg max without
privacy.

Deviation from the paper (documented in docs/greedy.md): the paper starts from the
available balls of every level; the start candidates here are the balls of levels 0 .. S
(at most 2**17), and the descent goes on to level L. The scores of the start selection
are the balls' values in units of r_i^z (the per-point integers of nets), so one point
moves every score by at most 2**VALUE_BITS at every level.

Privacy: at most k (1 + L) selections, each an exponential mechanism on integer scores
of sensitivity 2**VALUE_BITS (one point adds at most that to any ball's value); composed
adaptively (:class:`dpm_jax.releases.ComposedSelectionRelease`). Everything else here is
a function of the selections and of public parameters.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax.greedy.nets import (
    C_FORBID,
    NetPlan,
    cell_centers,
    child_offsets,
    contributions,
    radius,
    start_candidates,
    start_values,
)

__all__ = ["ChildScores", "greedy_centers", "point_scores", "argmax_chooser"]

# (group, key, scores (C,) int32, valid (C,) bool) -> the index of the chosen candidate;
# group 0: a start selection, 1: a descent step.
Chooser = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
# (level i, children (C, m) level-(i+1) cells) -> their scores (C,) int32 (any value for invalid cells)
ChildScores = Callable[[jax.Array, jax.Array], jax.Array]


class Greedy(NamedTuple):
    """The greedy's output (DP when its chooser is): centres in working units and their start balls."""

    centers: jax.Array  # (k, m) float32 in [0, 1]^m
    start_level: jax.Array  # (k,) int32
    start_cell: jax.Array  # (k, m) int32


def argmax_chooser(group: int, key: jax.Array, scores: jax.Array, valid: jax.Array) -> jax.Array:
    """The non-private choice: the valid candidate of largest value (the first on ties)."""
    del group, key
    return jnp.argmax(jnp.where(valid, scores, -1))


def point_scores(points: jax.Array, point_mask: jax.Array, plan: NetPlan) -> tuple[jax.Array, ChildScores]:
    """The exact ball values read from the points (n, m): start candidates' values and the children's."""
    points_t = points.T  # (m, n): the values' arithmetic runs along n

    def child_scores(level, children):
        codes = contributions(points_t, cell_centers(children, level + 1), radius(level + 1, plan.dim), plan.z)
        return jnp.sum(jnp.where(point_mask[None, :], codes, 0), axis=1)

    return start_values(points_t, point_mask, plan), child_scores


def greedy_centers(key: jax.Array, scores: tuple, plan: NetPlan, k: int, choose: Chooser) -> Greedy:
    """k centres of the greedy in working units, from ``scores`` = (start candidates' (M,), ChildScores)."""
    levels, cells = (jnp.asarray(a) for a in start_candidates(plan))
    centers_of_start = cell_centers(cells, levels)
    forbid_radius = C_FORBID * radius(levels, plan.dim)
    values, child_scores = scores

    def one_center(c, state):
        greedy, forbidden = state
        key_c = jax.random.fold_in(key, c)
        valid = ~forbidden | jnp.all(forbidden)  # all forbidden (k beyond the nets' room): all allowed
        chosen = choose(0, jax.random.fold_in(key_c, 0), values, valid)
        cell = jax.lax.fori_loop(
            levels[chosen],
            plan.levels,
            lambda i, j: _descend(key_c, child_scores, choose, i, j),
            cells[chosen],
        )
        center = cell_centers(cell, plan.levels)
        forbidden = forbidden | (jnp.linalg.norm(centers_of_start - center, axis=1) <= forbid_radius)
        greedy = Greedy(
            greedy.centers.at[c].set(center),
            greedy.start_level.at[c].set(levels[chosen]),
            greedy.start_cell.at[c].set(cells[chosen]),
        )
        return greedy, forbidden

    start = Greedy(jnp.zeros((k, plan.dim), jnp.float32), jnp.zeros(k, jnp.int32), jnp.zeros((k, plan.dim), jnp.int32))
    greedy, _ = jax.lax.fori_loop(0, k, one_center, (start, jnp.zeros(levels.shape[0], bool)))
    return greedy


def _descend(key_c, child_scores: ChildScores, choose: Chooser, level, cell):
    """One step: the chosen child (a level + 1 cell) of the level-``level`` ball of ``cell``."""
    children = 2 * cell + 1 + jnp.asarray(child_offsets(cell.shape[0]))
    valid = jnp.all((children >= 0) & (children < 2 ** (level + 1)), axis=1)
    scores = child_scores(level, children)
    return children[choose(1, jax.random.fold_in(key_c, level + 1), scores, valid)]
