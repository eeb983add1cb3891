"""Split scores of DPM: emptiness, centreness and their sum (Section 3.2), as exact integers.

A level of the recursion bins every coordinate into *half-intervals* of width
beta/2 starting at the lower bound ``a``. Candidate j of a dimension sits at
``s_j = a + (j + 1/2) beta`` and its split interval is ``[a + j beta, a + (j+1) beta)``,
so one histogram of half-bins per (node, dimension) gives both sub-scores:

* ``|s_j|`` (Definition 5) = half-bins 2j and 2j+1;
* the rank r(s_j) (Definition 6), the number of points strictly below s_j,
  = the half-bins 0..2j.

The score of Definition 7, f = c(r) + alpha (1 - |s| / n~), is computed as the
integer G = 2**k (n~ f - alpha n~) with the node's released size n~ rounded to an
integer N:

    G = min(a1 D, b N + a2 D) - a3 |s|,   D = min(r, N - r),

with a1 = 2**k t/q, a2 = 2**k (1 - t)/(1/2 - q), b = 2**k (t - 2q)/(1 - 2q) and
a3 = 2**k alpha rounded to integers (2**k as large as keeps them below 2**14). n~ c(r)
is the concave piecewise-linear function min(t/q D, n~ (t-2q)/(1-2q) + (1-t)/(1/2-q) D)
of D (the two pieces of Definition 6 meet at D = n~ q), and alpha n~ is the same for
every candidate of a node, so it does not change the exponential mechanism.

Sensitivity (Lemmas 3-5, exact): a rank and an interval count change by at most one
when a point is added or removed, D is 1-Lipschitz in r and min(a1 D, b N + a2 D) is
a1-Lipschitz in D (a1 >= a2 >= 0), so G changes by at most a1 + a3, an integer: no
rounding anywhere, for every n up to 2**31 - 1 (|G| < 2**46, exact in two 30-bit limbs).

The cell grid (``DPMConfig.split_grid="cell"``, :mod:`dpm_jax.histogram`) puts a
candidate at *every* inner boundary between half-bins, i = 1 .. 2B - 1, with the
split interval of the w = ``DPMConfig.split_window`` half-bins on each side of it,
clipped to the cell (:func:`boundary_statistics`): |s_i| = half-bins i - w .. i + w - 1,
r(s_i) = half-bins 0 .. i - 1. A point lies in one half-bin, so both statistics still
change by at most one per candidate and the sensitivity above holds unchanged.

Deviation from Definition 5, stated: the split interval is half-open, so every
point lies in exactly one interval per dimension (the closed intervals of the paper
share their end points). The sensitivity of Lemma 4 is unchanged.
"""

from __future__ import annotations

import functools

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpm_jax import exact
from dpm_jax._arrays import divide, materialized

__all__ = [
    "ScoreCoefficients",
    "score_coefficients",
    "candidate_statistics",
    "boundary_statistics",
    "window_counts",
    "split_scores",
    "exponent_ratio",
]

_COEFFICIENT_LIMIT = 2**14 - 1  # keeps every partial product below 2**30 (see split_scores)


class ScoreCoefficients(NamedTuple):
    """Integer coefficients of G (public: they depend on t, q and alpha only)."""

    outer_slope: int  # a1 = 2**k t / q
    inner_slope: int  # a2 = 2**k (1 - t) / (1/2 - q)
    inner_intercept: int  # b = 2**k (t - 2q) / (1 - 2q), per unit of N
    emptiness_weight: int  # a3 = 2**k alpha
    scale_bits: int  # k

    @property
    def sensitivity(self) -> int:
        """The exact sensitivity of G: a1 + a3 (the integer form of Lemma 5's t/q + alpha)."""
        return self.outer_slope + self.emptiness_weight


@functools.lru_cache(maxsize=64)
def score_coefficients(t: float, q: float, alpha: float) -> ScoreCoefficients:
    """The integer coefficients of G for Definition 6's (t, q) and Definition 7's alpha."""
    if not (0 < q < 0.5 and 2 * q <= t <= 1 and alpha > 0):
        raise ValueError(
            f"need 0 < q < 1/2, 2q <= t <= 1 and alpha > 0 (Definitions 6-7), got t={t}, q={q}, alpha={alpha}"
        )
    reals = (t / q, (1.0 - t) / (0.5 - q), (t - 2.0 * q) / (1.0 - 2.0 * q), alpha)
    scale_bits = math.floor(math.log2(_COEFFICIENT_LIMIT / max(reals)))
    if scale_bits < 4:
        raise ValueError(
            f"score coefficients t/q={reals[0]:.4g}, alpha={alpha:.4g} are too large for "
            "the exact integer score (need t/q and alpha below 1024)"
        )
    a1, a2, b, a3 = (round(r * 2**scale_bits) for r in reals)
    return ScoreCoefficients(a1, min(a2, a1), b, a3, scale_bits)


def candidate_statistics(half_bin_counts: jax.Array) -> tuple[jax.Array, jax.Array]:
    """From (..., 2B) int32 half-bin counts to (interval counts |s_j|, ranks r_j), each (..., B), exact."""
    interval_counts = half_bin_counts[..., 0::2] + half_bin_counts[..., 1::2]
    ranks = exact.exact_cumsum(half_bin_counts)[..., 0::2]
    return interval_counts, ranks


def boundary_statistics(half_bin_counts: jax.Array, window: int = 1) -> tuple[jax.Array, jax.Array]:
    """The cell grid's candidates, one per half-bin boundary i = 1 .. 2B - 1, at index i - 1.

    (..., 2B) int32 half-bin counts -> (interval counts |s_i| = half-bins i - window .. i + window - 1
    that lie in the cell, ranks r_i = half-bins 0 .. i - 1), each (..., 2B), exact; the last
    entry (i = 2B, the cell's upper end) is no candidate (the caller masks it). ``window`` = 1:
    the two half-bins around the boundary. A node's points all lie in its cell, so the part of
    a window outside the cell holds none of them: the clipped count is the true one.
    """
    inclusive = exact.exact_cumsum(half_bin_counts)  # S[j] = half-bins 0 .. j
    return window_counts(inclusive, window), inclusive


def window_counts(inclusive: jax.Array, window: int) -> jax.Array:
    """The interval counts |s_i| of :func:`boundary_statistics` (at index i - 1) from its inclusive
    cumulative counts S (its second output), so that several windows share one cumulative sum."""
    size = inclusive.shape[-1]
    window = min(window, size)
    # Shifted copies (slices, not gathers: under jax.vmap a gather along the last axis put the
    # candidates first and every consumer read them transposed).
    edge = lambda a: jnp.broadcast_to(a, inclusive.shape[:-1] + (window,))
    # S[min(i + window, size - 1)]: S[i + window - 1] at index i - 1, the total past the end.
    upper = jnp.concatenate([inclusive[..., window:], edge(inclusive[..., -1:])], axis=-1)
    # S[i - window - 1] at index i - 1, 0 where the window starts at the cell's lower end.
    lower = jnp.concatenate([edge(jnp.zeros((), inclusive.dtype)), inclusive[..., : size - window]], axis=-1)
    return upper - lower


def split_scores(
    half_bin_counts: jax.Array, node_size: jax.Array, coefficients: ScoreCoefficients, statistics=candidate_statistics
) -> exact.Int:
    """G for every candidate: (..., 2B) int32 counts, int32 N >= 1 broadcastable to (...) -> (..., C) Int.

    ``statistics`` maps the counts to the candidates' (interval counts, ranks):
    :func:`candidate_statistics` (the paper's grid, C = B) or :func:`boundary_statistics`
    (the cell grid, C = 2B).

    Arithmetic: the two pieces of min(a1 D, b N + a2 D) cross at the public point
    D* = b N / (a1 - a2), so each candidate takes one piece by an int32 comparison
    with floor(D*) (computed exactly per node). Products of a coefficient (< 2**14)
    with a 16-bit half of D or |s| stay below 2**30; the halves are summed in int32
    and carried once: G = high 2**16 + low exactly (|G| < 2**46).
    """
    interval_counts, ranks = statistics(half_bin_counts)
    size = materialized(jnp.asarray(node_size, jnp.int32))[..., None]
    distance = jnp.minimum(ranks, size - ranks)  # D; negative only when r > N (N is noisy)
    a1, a2, b, a3 = (
        coefficients.outer_slope,
        coefficients.inner_slope,
        coefficients.inner_intercept,
        coefficients.emptiness_weight,
    )
    # Per-node quantities are materialized: XLA would recompute them for every candidate.
    intercept = exact.narrow(exact.mul_small(exact.from_int32(size), b), 2)  # b N per node, < 2**45
    intercept = exact.Int(tuple(materialized(limb) for limb in intercept.limbs))
    if a1 > a2:  # D <= floor(b N / (a1 - a2))  <=>  a1 D <= b N + a2 D  (integers)
        crossing = materialized(exact.clip_to_int32(_floor_divide(intercept, a1 - a2), 0, 2**31 - 1))
        outer = distance <= crossing
    else:
        outer = jnp.ones(distance.shape, bool)
    slope = jnp.where(outer, a1, a2)
    magnitude = jnp.abs(distance)
    sign = jnp.where(distance < 0, -1, 1)
    high = sign * slope * jnp.right_shift(magnitude, 16)  # |.| < 2**29
    low = sign * slope * jnp.bitwise_and(magnitude, 0xFFFF)  # |.| < 2**30
    high = high - a3 * jnp.right_shift(interval_counts, 16)
    low = low - a3 * jnp.bitwise_and(interval_counts, 0xFFFF)
    icpt_low, icpt_high = intercept.limbs[0], intercept.limbs[1]  # b N = icpt_high 2**30 + icpt_low
    low = low + jnp.where(outer, 0, jnp.bitwise_and(icpt_low, 0xFFFF))
    high = high + jnp.where(outer, 0, jnp.right_shift(icpt_low, 16) + jnp.left_shift(icpt_high, 14))
    high = high + jnp.right_shift(low, 16)  # carry: low in [0, 2**16) from here on
    low = jnp.bitwise_and(low, 0xFFFF)
    return exact.Int((jnp.left_shift(jnp.bitwise_and(high, 0x3FFF), 16) | low, jnp.right_shift(high, 14)))


def _floor_divide(value: exact.Int, divisor: int) -> exact.Int:
    """floor(value / divisor) for value >= 0 (two limbs) and 0 < divisor < 2**15."""
    low, high = value.limbs
    quotient_high = high // divisor
    remainder = high - quotient_high * divisor  # < 2**15
    # remainder 2**30 + low = divisor q + r: split low in 15-bit halves to stay in int32
    middle = jnp.left_shift(remainder, 15) + jnp.right_shift(low, 15)  # < 2**30
    quotient_middle = middle // divisor
    rest = jnp.left_shift(middle - quotient_middle * divisor, 15) + jnp.bitwise_and(low, 0x7FFF)
    quotient_low = jnp.left_shift(quotient_middle, 15) + rest // divisor
    return exact.normalize([quotient_low, quotient_high])


def exponent_ratio(noisy_count: jax.Array, offset, node_size: jax.Array) -> jax.Array:
    """min(1, max(n~ - lambda, 1) / N): Lemma 5's Delta_f = (t/q + alpha) / (n~ - lambda) as a factor.

    The paper's exponent eps f / (2 Delta_f) equals eps G ratio / (2 Delta_G) with
    this ratio (G ~ 2**k N f). Capping it at 1 keeps the exponent at most
    eps / (2 Delta_G) per unit of G, which is what privacy needs; n~ and lambda are
    public, so the ratio is too.
    """
    ratio = divide(jnp.maximum(noisy_count - offset, 1.0), jnp.maximum(node_size.astype(jnp.float32), 1.0))
    return jnp.minimum(ratio, 1.0)
