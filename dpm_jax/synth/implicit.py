"""Algorithm 5 and Lemma 9 of "Differentially Private Synthetic Data Using KD-Trees": the empty cells.

Algorithm 4 adds noise to the count of every empty cell and keeps those whose noisy
count reaches the threshold t; Algorithm 5 draws the same output without enumerating
them: how many pass (Binomial(K, p), p = P[Z >= t]), which ones (uniform without
replacement), and their noisy counts (Z conditioned on Z >= t). Lemma 9: both give
the same output law, because the cells' noises are independent.

Here the count noise Z is the discrete Laplace, P(Z = k) ∝ r**|k|, r = e^-epsilon, so
for an integer t >= 0 (:func:`dpm_jax.mechanisms.discrete_laplace_tail`)

    p = P[Z >= t] = r**t / (1 + r),   and   Z - t | Z >= t  ~  Geometric(r),

P(G = k) = (1 - r) r**k: the conditioned count is t + G. The passing cells are drawn
by *geometric skipping*: among the K empty cells in a fixed order, the gaps between
consecutive passing ones are i.i.d. Geometric(1 - p) (failures before a success), so
the positions G_1, G_1 + 1 + G_2, ... below K are exactly the passing cells of
independent Bernoulli(p) trials -- Binomial(K, p) many, a uniform subset given their
number. No floating point touches the draws:

* a geometric variable is drawn by its binary digits, which are independent:
  digit i is Bernoulli(q**(2**i) / (1 + q**(2**i))) for ratio q, drawn as [U < T_i]
  with U a uniform 64-bit integer and T_i = floor(2**64 q**(2**i) / (1 + q**(2**i)))
  computed on the host in 60-digit decimal arithmetic from the exact binary value of
  epsilon; the digits above ``num_bits`` are replaced by one exact Bernoulli
  "overflow" of probability q**(2**num_bits) = P[G >= 2**num_bits] (for the skips,
  an overflowing gap ends the sequence, as any gap >= 2**31 > K does);
* each comparison is off by at most 2**-64 + 10**-55 <= 2**-63 in probability, so a
  draw of ``num_bits`` digits and the overflow is within total variation
  (num_bits + 1) 2**-63 of the ideal geometric (:func:`geometric_tv`);
* at most ``capacity`` passing empty cells are drawn (static shapes); the chance that
  more pass, P[Binomial(K_max, p) > capacity], is bounded by the Chernoff bound
  (:func:`truncation_bound`) with K_max a public bound on the number of empty cells.

:func:`ghost_tv` adds these up; :class:`dpm_jax.synth.threshold.ThresholdRelease` charges
them as delta = tv (1 + e^epsilon). The cells' order is fixed by the public partition
(never by which cells hold data), and the caller sorts its output canonically.
"""

from __future__ import annotations

import decimal
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax.mechanisms import random_words

__all__ = ["geometric_table", "pass_probability", "draw_geometric", "ghost_capacity", "ghost_tv", "skip_positions"]

_PRECISION = 60
SKIP_BITS = 31  # gaps of the skipping sampler: 31 digits, positions saturate at 2**31 - 1
WEIGHT_BITS = 30  # conditioned counts t + G with G < 2**30: int32 for t < 2**30
SATURATED = np.uint32(2**31 - 1)  # a position no cell has: it never passes


class GeometricTable(NamedTuple):
    """Integer thresholds of a geometric sampler: digit i is 1 iff U_i < T_i (64-bit)."""

    high: np.ndarray  # (num_bits + 1,) uint32: the upper words of T_0..T_{num_bits-1}, T_overflow
    low: np.ndarray  # (num_bits + 1,) uint32: the lower words


def _exact_ratio(epsilon: float, threshold: int | None) -> decimal.Decimal:
    """r = e^-epsilon, or q = 1 - p = 1 - r**t / (1 + r) for ``threshold`` t (60 digits)."""
    ratio = (-decimal.Decimal(epsilon)).exp()
    if threshold is None:
        return ratio
    return 1 - ratio**threshold / (1 + ratio)


@functools.lru_cache(maxsize=256)
def geometric_table(epsilon: float, threshold: int | None, num_bits: int) -> GeometricTable:
    """The thresholds of Geometric(q): q = e^-epsilon, or q = 1 - P[Z >= threshold] (skips).

    P(G = k) = (1 - q) q**k. Digit i < num_bits has probability q**(2**i) / (1 + q**(2**i));
    the last entry is the overflow, probability q**(2**num_bits) = P[G >= 2**num_bits].
    """
    with decimal.localcontext() as context:
        context.prec = _PRECISION
        q = _exact_ratio(epsilon, threshold)
        scale = decimal.Decimal(2**64)
        power, values = q, []
        for _ in range(num_bits):
            values.append(int(scale * power / (1 + power)))
            power = power * power
        values.append(int(scale * power))
    values = np.array([min(v, 2**64 - 1) for v in values], dtype=np.uint64)
    return GeometricTable(
        (values >> np.uint64(32)).astype(np.uint32), (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    )


def geometric_tv(num_bits: int) -> float:
    """Total variation of one drawn geometric (digits and overflow) from the ideal one."""
    return (num_bits + 1) * 2.0**-63


def pass_probability(epsilon: float, threshold: int) -> float:
    """p = P[Z >= t] = r**t / (1 + r) for the discrete Laplace with r = e^-epsilon (float, for planning)."""
    return math.exp(-epsilon * threshold) / (1.0 + math.exp(-epsilon))


def draw_geometric(key: jax.Array, high: jax.Array, low: jax.Array, shape: tuple[int, ...]):
    """Geometric draws of ``shape`` from a table's words (``high``, ``low``: (..., num_bits + 1)).

    Returns (value, overflow): value = sum of the digits d_i 2**i (int32, < 2**num_bits),
    overflow = the draw is >= 2**num_bits. Extra leading axes of the table broadcast.
    """
    num_words = high.shape[-1]
    words = random_words(key, shape + (num_words, 2))
    u_hi, u_lo = words[..., 0], words[..., 1]
    digits = (u_hi < high) | ((u_hi == high) & (u_lo < low))
    place = jnp.asarray(np.left_shift(1, np.arange(num_words - 1)).astype(np.int32))
    value = jnp.sum(jnp.where(digits[..., :-1], place, 0), axis=-1, dtype=jnp.int32)
    return value, digits[..., -1]


def _saturating_add(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.minimum(a + b, SATURATED)  # a, b <= 2**31 - 1: the uint32 sum cannot wrap


def skip_positions(key: jax.Array, high: jax.Array, low: jax.Array, capacity: int) -> jax.Array:
    """Positions of the passing cells among 0, 1, 2, ... (uint32, increasing, saturated at 2**31 - 1).

    Gap j is G_j + 1 (G_j + 0 for the first), G_j ~ Geometric(1 - p) from the skip table;
    the caller keeps the positions below its number of empty cells K.
    """
    gaps, overflow = draw_geometric(key, high, low, (capacity,))
    steps = jnp.where(overflow, SATURATED, gaps.astype(jnp.uint32) + jnp.uint32(1))
    positions = jax.lax.associative_scan(_saturating_add, steps)
    return jnp.where(positions >= SATURATED, SATURATED, positions - jnp.uint32(1))


def truncation_bound(max_cells: int, p: float, capacity: int) -> float:
    """Chernoff: P[Binomial(max_cells, p) > capacity] <= exp(-mu h(a / mu)), a = capacity + 1, mu = max_cells p."""
    mu, a = max_cells * p, capacity + 1
    if a <= mu:
        return 1.0
    if mu <= 0:
        return 0.0
    u = a / mu
    return math.exp(-mu * (u * math.log(u) - u + 1.0))


def ghost_capacity(max_cells: int, p: float, target: float = 2.0**-64) -> int:
    """The smallest capacity whose truncation bound is <= ``target`` (at least 8)."""
    capacity = max(8, int(max_cells * p) + 8)
    while truncation_bound(max_cells, p, capacity) > target:
        capacity = int(capacity * 1.25) + 1
    return capacity


def ghost_tv(max_cells: int, p: float, capacity: int) -> float:
    """Total variation of the implicit empty-cell draw from Algorithm 4's explicit one.

    ``capacity`` skips and ``capacity`` conditioned counts, each within
    :func:`geometric_tv`, plus the truncation bound.
    """
    return capacity * (geometric_tv(SKIP_BITS) + geometric_tv(WEIGHT_BITS)) + truncation_bound(max_cells, p, capacity)
