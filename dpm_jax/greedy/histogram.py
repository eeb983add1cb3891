"""The greedy on a noisy histogram of every ball value ("Making Old Things New: A Unified
Algorithm for Differentially Private Clustering", Section 4: the values released once,
the greedy run as post-processing).

The values of every ball of levels 0 .. L (:func:`dpm_jax.greedy.nets.level_values`:
exact int32 sums of per-point integers in [0, 2**VALUE_BITS]) are released once with
discrete Gaussian noise; the greedy then reads its start and child scores from that
vector and chooses by arg max. Its cost does not grow with k, unlike the exponential
mechanism per choice (:mod:`dpm_jax.greedy.select`).

Privacy: one point adds to at most T = len(touch_offsets(m)) balls per level (the values
are scatter-adds over those offsets only), at most 2**VALUE_BITS to each, so the L2
sensitivity of the whole vector (L + 1 levels) is 2**VALUE_BITS sqrt(T (L + 1)) under
adding or removing a point; the discrete Gaussian with sigma calibrated to it is
(epsilon, delta)-DP through zCDP (:class:`dpm_jax.releases.GaussianRelease`; the
levels' rho add up, which is the same as the concatenated vector's L2). The sampler's
total variation is charged for the T (L + 1) coordinates a point moves. The noisy sum is
exact (two-limb integers) and clipped to int32 before the arg max: post-processing.

Memory: sum_i 2**(i m) balls (1.4 M int32 for m = 2, L = 10); refused above MAX_BALLS.
Only the balls of the public bounds' cube exist: the grid is the cube [0, 1]^m.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact, keys
from dpm_jax.greedy.nets import VALUE_BITS, NetPlan, level_values, start_candidates, touch_offsets
from dpm_jax.greedy.select import ChildScores
from dpm_jax.releases import GaussianRelease

__all__ = ["check_balls", "histogram_release", "noisy_values", "histogram_scores"]

MAX_BALLS = 2**23


def ball_count(plan: NetPlan) -> int:
    """The number of balls of levels 0 .. L."""
    return sum(2 ** (i * plan.dim) for i in range(plan.levels + 1))


def check_balls(plan: NetPlan) -> None:
    """A ValueError when the histogram would hold more than MAX_BALLS balls."""
    if ball_count(plan) > MAX_BALLS:
        raise ValueError(
            f"the histogram of levels 0..{plan.levels} in {plan.dim}-d has {ball_count(plan)} balls "
            f"(at most {MAX_BALLS}); lower levels or grid_dim"
        )


def touched(plan: NetPlan) -> int:
    """The most coordinates of the histogram that one point moves: T (L + 1)."""
    return int(touch_offsets(plan.dim).shape[0]) * (plan.levels + 1)


def histogram_release(epsilon: float, delta: float, plan: NetPlan) -> GaussianRelease:
    """The ledger line and sigma of the histogram (stream "greedy_select", rows "histogram")."""
    check_balls(plan)
    return GaussianRelease.calibrated(
        "greedy_histogram",
        epsilon,
        delta,
        keys.GREEDY_SELECT,
        2**VALUE_BITS * math.sqrt(touched(plan)),
        touched(plan),
        rows="histogram",
        rule=f"L2 of every ball value, levels 0..{plan.levels}: 2**{VALUE_BITS} sqrt({touched(plan)})",
    )


def noisy_values(key: jax.Array, points_t: jax.Array, point_mask: jax.Array, plan: NetPlan, release) -> jax.Array:
    """(ball_count,) int32: every ball value plus discrete Gaussian noise (exact sum, clipped to int32).

    ``key`` is the release's stream key; ``points_t`` the (m, n) working points.
    """
    values = level_values(points_t, point_mask, plan, plan.levels)
    noise = release.draw(key, values.shape)
    total = exact.add(exact.from_int32(values), exact.from_int32(noise))
    return exact.clip_to_int32(total, -(2**31) + 1, 2**31 - 1)


def histogram_scores(noisy: jax.Array, plan: NetPlan) -> tuple[jax.Array, ChildScores]:
    """The greedy's scores read from the released vector: the start candidates' and the children's."""
    starts = np.cumsum([0] + [2 ** (i * plan.dim) for i in range(plan.levels + 1)])
    num_start = int(start_candidates(plan)[0].shape[0])

    def child_scores(level, children):
        side = 2 ** (level + 1)
        flat = jnp.zeros(children.shape[0], jnp.int32)
        for j in range(plan.dim):
            flat = flat * side + jnp.clip(children[:, j], 0, side - 1)
        return noisy[jnp.asarray(starts, jnp.int32)[level + 1] + flat]

    return noisy[:num_start], child_scores
