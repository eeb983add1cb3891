"""The greedy on a noisy histogram of every ball value ("Making Old Things New: A Unified
Algorithm for Differentially Private Clustering", Section 4: the values released once,
the greedy run as post-processing).

The values of every ball of levels 0 .. L (:func:`dpm_jax.greedy.nets.level_values`:
exact int32 sums of per-point integers in [0, 2**VALUE_BITS]) are released once with
discrete Gaussian noise; the greedy then reads its start and child scores from that
vector and chooses by arg max. Its cost does not grow with k, unlike the exponential
mechanism per choice (:mod:`dpm_jax.greedy.select`).

Privacy (neighbours add or remove one point; n <= MAX_POINTS = 2**23 - 1, so every exact
int32 value, a sum of n integers in [0, 2**VALUE_BITS], is exact). The released vector is
the generalized summation of Section 4 (Definition 4.1; Lemma B.2's frequency f, here
weighted by the values): one point x adds the code c_p(x) = floor(2**VALUE_BITS (1 -
|x - p| / r_i)_+^z) to each ball p of each level i. Its L2 sensitivity is
2**VALUE_BITS sqrt(S_m (L + 1)), with S_m the bound below on sum_p c_p(x)**2 / 4**VALUE_BITS
over one level (:func:`l2_sensitivity`). The proof, per level (spacing s = 2**-i,
r = sqrt(m) s / 2):
  (a) a non-zero code needs the computed (1 - |x - p| / r)**z >= 2**-VALUE_BITS, so
      a = |x - p| / r <= 1 - 2**(-VALUE_BITS / z) + 1e-6 < 0.9962 (float32 evaluates a to a
      relative 2**-21: a few correctly rounded operations on exact cell centres);
  (b) two balls p, q with non-zero codes have |p - q| <= (a_p + a_q) r < 2 r = sqrt(m) s, so
      for m <= 4 their cells differ by at most 1 in every coordinate (a difference of 2 is
      already 2 s >= sqrt(m) s) and not in all m (that is exactly sqrt(m) s): the non-zero
      balls lie in one 2**m block of cells with no two opposite corners, at most
      N_m = 2**(m - 1) of them (:func:`nonzero_per_level`);
  (c) m = 1: N_1 = 1, so S_1 = 1. m = 2: N_2 = 2 adjacent balls, |p - q| = s = sqrt(2) r,
      so a_p + a_q >= sqrt(2) and each a >= sqrt(2) - 0.9962 > 0.418: each code is at most
      2**VALUE_BITS 0.582**z (149 of 256), two of them square-sum to < 4**VALUE_BITS; one
      alone is at most 2**VALUE_BITS: S_2 = 1. m = 3, 4: S_m = N_m (each code <= 2**VALUE_BITS;
      a tighter bound was not proven here).
S_m is attained at every single level (a point at a level-i centre adds 2**VALUE_BITS
there); across levels it is not (a level-i centre is a cell corner at level i + 1), so the
sum over levels is an upper bound: tests/test_greedy.py measures how close it is. This is
3x below the count bound 2**VALUE_BITS sqrt(T (L + 1)) (T = 9 balls scatter-added per level
in 2-d) used before. The discrete Gaussian with sigma calibrated to it is (epsilon,
delta)-DP through zCDP (:class:`dpm_jax.releases.GaussianRelease`; the levels' rho add up,
which is the same as the concatenated vector's L2). The sampler's total variation is
charged for the N_m (L + 1) coordinates a point moves (:func:`touched`). The noisy sum is
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
from dpm_jax.greedy.nets import VALUE_BITS, NetPlan, level_values, start_candidates
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


def nonzero_per_level(dim: int) -> int:
    """N_m = 2**(m - 1): the most balls of one level a point gives a non-zero code (proof (b) above)."""
    _check_dim(dim)
    return 2 ** (dim - 1)


def level_square_bound(dim: int) -> int:
    """S_m: sum_p c_p(x)**2 over one level is at most S_m 4**VALUE_BITS (proof (c) above)."""
    return 1 if dim <= 2 else nonzero_per_level(dim)


def l2_sensitivity(plan: NetPlan) -> float:
    """2**VALUE_BITS sqrt(S_m (L + 1)): the L2 change of the whole vector when one point is added or removed."""
    return 2**VALUE_BITS * math.sqrt(level_square_bound(plan.dim) * (plan.levels + 1))


def touched(plan: NetPlan) -> int:
    """The most coordinates of the histogram that one point moves: N_m (L + 1)."""
    return nonzero_per_level(plan.dim) * (plan.levels + 1)


def _check_dim(dim: int) -> None:
    if not 1 <= dim <= 4:
        raise ValueError(f"the histogram's sensitivity is proven for working dimensions 1..4, got {dim}")


def histogram_release(epsilon: float, delta: float, plan: NetPlan) -> GaussianRelease:
    """The ledger line and sigma of the histogram (stream "greedy_select", rows "histogram")."""
    check_balls(plan)
    squares = level_square_bound(plan.dim)
    return GaussianRelease.calibrated(
        "greedy_histogram",
        epsilon,
        delta,
        keys.GREEDY_SELECT,
        l2_sensitivity(plan),
        touched(plan),
        rows="histogram",
        rule=f"L2 of every ball value, levels 0..{plan.levels}: 2**{VALUE_BITS} sqrt({squares} x {plan.levels + 1})",
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
