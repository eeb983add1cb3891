"""The DP mechanisms DPM is built from, each next to its privacy statement.

Every function takes its PRNG key (or the random bits drawn from it) first; keys
come from :func:`dpm_jax.keys.derive_key`, so each draw of a run can be re-derived from the
caller's key. Neighbouring data sets differ by adding or removing one point
(Definition 1 of the DPM paper, "DPM: Clustering Sensitive Data through Separation").

Every mechanism here runs in exact integer arithmetic on the device: its input is
an integer (a count, an integer score, a fixed-point sum, see :mod:`dpm_jax.exact`),
its noise or selection is drawn by comparing uniform random *integers* against
integer thresholds computed on the host, and the released value is an integer. No
floating-point rounding touches the data before release, so the low-order-bit
attacks on floating-point samplers (Mironov 2012) do not apply. What is left of
the ideal distributions is bounded and charged (docs/privacy.md):

* :func:`noisy_count` -- discrete Laplace; total-variation error
  :func:`count_sampler_tv` per draw, charged as delta tv (1 + e^epsilon).
* :func:`select_with_bits` -- the exponential mechanism on integer scores; every
  selection probability is within a factor 2**(2**-18) of the ideal one (charged
  as :data:`EM_EPSILON_MARGIN` of its epsilon) plus a total-variation error
  :func:`em_sampler_tv` (charged as delta).
* :func:`discrete_gaussian_noise` -- the discrete Gaussian (Canonne, Kamath and
  Steinke 2020) from an inverse-CDF table of 62-bit integers; total-variation error
  ``table.tv`` per coordinate, charged as delta; calibrated through zero-concentrated
  DP (:func:`discrete_gaussian_multiplier`).
"""

from __future__ import annotations

import decimal
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax._arrays import materialized, power_of_two
from dpm_jax.exact import Int

__all__ = [
    "random_words",
    "count_noise",
    "add_count_noise",
    "count_sampler_tv",
    "tv_delta",
    "count_offset",
    "discrete_laplace_tail",
    "EM_EPSILON_MARGIN",
    "EM_TRIES",
    "EM_DIGITS",
    "em_sampler_tv",
    "em_exponent_scale",
    "select_with_bits",
    "exponential_mechanism",
    "DiscreteGaussianTable",
    "discrete_gaussian_table",
    "discrete_gaussian_noise",
    "discrete_gaussian_multiplier",
]


def random_words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Uniform uint32 words of ``shape``: exactly ``jax.random.bits(key, shape, uint32)``.

    Drawn flat and reshaped. JAX's threefry counts the words in row-major order, so the two
    are equal word for word (tests/test_mechanisms.py checks it); XLA's CPU compiler takes
    about five times longer for the hash over a multi-axis shape than over a flat one, and
    every sampler here draws its words through this function.
    """
    return jax.random.bits(key, (math.prod(shape),), dtype=jnp.uint32).reshape(shape)


# ---------------------------------------------------------- discrete Laplace (counts)
# Counts are released with the discrete Laplace (two-sided geometric) mechanism:
# Z on the integers with P(Z = k) = (1 - r) / (1 + r) * r**|k|, r = exp(-epsilon).
#
# Sampler (integer arithmetic only, no floating-point transcendental on the device):
# Z = G1 - G2 with G1, G2 i.i.d. geometric, P(G = k) = (1 - r) r**k. The binary digits
# of a geometric variable are independent: P(G = sum_i b_i 2**i) = (1 - r) prod_i
# (r**(2**i))**b_i and prod_i (1 + r**(2**i)) = 1 / (1 - r), so bit i is Bernoulli with
# p_i = 1 / (1 + exp(epsilon 2**i)). Each bit is drawn as [U < T_i] from a 64-bit
# uniform integer U (two uint32 words) with T_i = floor(p_i 2**64), computed on the
# host in 50-digit decimal arithmetic from the exact binary value of epsilon.
# Residual deviations from the ideal distribution, both bounded, neither floating
# point on the device:
#   * each bit's probability is T_i / 2**64, in (p_i - 2**-64, p_i];
#   * bits i >= K are 0, K = min(60, ceil(log2(64 ln 2 / epsilon))): the tail
#     P[G >= 2**K] = exp(-epsilon 2**K) <= 2**-64 is cut (for epsilon >= 3.9e-17).
# So the sampled Z is within total-variation distance tv = 2 (K + 1) 2**-64 <= 7e-18 of
# the ideal one, and the released count is (epsilon, tv (1 + e^epsilon))-DP instead of
# (epsilon, 0)-DP; the ledger charges that delta (below 1e-15 for epsilon <= 5, and
# the reason budgets with a large per-level count epsilon are refused: e^epsilon
# multiplies it). The integers are exact: Z is carried as two 30-bit limbs and added
# to the count in integer arithmetic (dpm_jax.exact); the released integer is never
# rounded before release.
_WORD_BITS = 30
_WORD_MASK = (1 << _WORD_BITS) - 1
_MAX_GEOMETRIC_BITS = 2 * _WORD_BITS
_TAIL_EXPONENT = 64 * math.log(2.0)  # epsilon 2**K >= this  <=>  cut tail <= 2**-64


def _geometric_num_bits(epsilon: float) -> int:
    """K: the number of binary digits drawn for a geometric variable with ratio e^-epsilon."""
    return min(_MAX_GEOMETRIC_BITS, max(1, math.ceil(math.log2(_TAIL_EXPONENT / epsilon))))


@functools.lru_cache(maxsize=1024)
def _geometric_bit_thresholds(epsilon: float, num_bits: int) -> tuple[int, ...]:
    """T_i = floor(2**64 / (1 + exp(epsilon 2**i))) for i < num_bits, exactly."""
    thresholds = []
    with decimal.localcontext() as context:
        context.prec = 50
        exact_epsilon = decimal.Decimal(epsilon)  # exact: a float is a dyadic rational
        for i in range(num_bits):
            x = exact_epsilon * (1 << i)
            if x >= 45:  # p_i < e^-45 < 2**-64
                thresholds.append(0)
                continue
            thresholds.append(int(decimal.Decimal(1 << 64) / (1 + x.exp())))
    return tuple(thresholds)


def _concrete_epsilons(epsilon) -> np.ndarray:
    """Per-entry count budgets as a float64 NumPy array; they must be known at trace time."""
    if isinstance(epsilon, jax.core.Tracer):
        raise TypeError(
            "the count epsilons must be concrete numbers (they are public and fix the "
            "sampler's integer thresholds); do not trace them under jit/vmap"
        )
    epsilon = np.asarray(epsilon, dtype=np.float64)
    if not np.all(np.isfinite(epsilon) & (epsilon > 0)):
        raise ValueError(f"count epsilons must be finite and > 0, got {epsilon}")
    return epsilon


def _discrete_laplace_words(key: jax.Array, epsilon: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Discrete Laplace Z of the shape of ``epsilon`` as canonical words: Z = hi 2**30 + lo.

    One call of ``jax.random.bits(key, (4 K prod(shape),), uint32)`` reshaped to
    (2, K, 2) + shape: axis 0 picks G1 or G2, axis 1 the binary digit, axis 2 the
    high/low word of the 64-bit uniform.
    """
    shape = epsilon.shape
    distinct, inverse = np.unique(epsilon.reshape(-1), return_inverse=True)
    num_bits = max((_geometric_num_bits(float(e)) for e in distinct), default=1)
    rows = np.array([_geometric_bit_thresholds(float(e), num_bits) for e in distinct], dtype=np.uint64).reshape(
        -1, num_bits
    )
    if distinct.size == 1:  # one budget for all entries: a broadcast (K, 1, ..., 1) table
        table = rows[0].reshape((num_bits,) + (1,) * len(shape))
    else:
        table = np.moveaxis(rows[inverse].reshape(shape + (num_bits,)), -1, 0)  # (K,) + shape
    threshold_hi = (table >> np.uint64(32)).astype(np.uint32)
    threshold_lo = (table & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return _sample_discrete_laplace_words(key, threshold_hi, threshold_lo, shape)


@functools.partial(jax.jit, static_argnames=("shape",))
def _sample_discrete_laplace_words(key, threshold_hi, threshold_lo, shape):
    """The device part of :func:`_discrete_laplace_words` (thresholds: (K,) + shape, uint32)."""
    num_bits = threshold_hi.shape[0]
    words = random_words(key, (2, num_bits, 2) + shape)
    u_hi, u_lo = words[:, :, 0], words[:, :, 1]
    digits = (u_hi < threshold_hi) | ((u_hi == threshold_hi) & (u_lo < threshold_lo))
    digits = digits.astype(jnp.int32)
    place = np.arange(num_bits)
    weights = jnp.asarray((1 << (place % _WORD_BITS)).astype(np.int32)).reshape((1, num_bits) + (1,) * len(shape))
    low_digits = (place < _WORD_BITS).reshape((1, num_bits) + (1,) * len(shape))
    geometric_lo = jnp.sum(jnp.where(low_digits, digits * weights, 0), axis=1)
    geometric_hi = jnp.sum(jnp.where(low_digits, 0, digits * weights), axis=1)
    return _canonical_words(geometric_hi[0] - geometric_hi[1], geometric_lo[0] - geometric_lo[1])


@jax.jit
def _canonical_words(hi: jax.Array, lo: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The unique (hi, lo) with the same hi 2**30 + lo and 0 <= lo < 2**30 (|lo| < 2**31)."""
    return hi + jnp.right_shift(lo, _WORD_BITS), jnp.bitwise_and(lo, _WORD_MASK)


def count_sampler_tv(epsilon: float) -> float:
    """Total-variation distance of one sampled discrete Laplace Z from the ideal one.

    2 (K + 1) 2**-64 (see the notes above): each of the K digits of G1 and G2 is off
    by at most 2**-64 in probability, and the cut tail of each is at most 2**-64.
    """
    return 2.0 * (_geometric_num_bits(epsilon) + 1) * 2.0**-64


def count_noise(key: jax.Array, epsilon) -> Int:
    """The noise of the count mechanism: discrete Laplace, one exact integer per entry.

    ``epsilon`` is an array of per-entry budgets (entries of different levels can
    be drawn in one call; element i always uses element i of the draw). It must be
    concrete (public numbers; the sampler's integer thresholds are built from it).
    Returns Z as an :class:`dpm_jax.exact.Int`, P(Z = k) proportional to
    exp(-epsilon |k|) up to :func:`count_sampler_tv`.
    """
    hi, lo = _discrete_laplace_words(key, _concrete_epsilons(epsilon))
    return Int((lo, hi))


def add_count_noise(true_counts: jax.Array, noise: Int) -> Int:
    """The released count |S| + Z, in exact integer arithmetic (never rounded)."""
    return exact.add(exact.from_int32(true_counts), noise)


def discrete_laplace_count(key: jax.Array, true_counts: jax.Array, epsilon) -> Int:
    """Discrete Laplace mechanism for counts: ``|S| + Z``, P(Z = k) ∝ exp(-epsilon |k|).

    Privacy: a count has sensitivity 1 under add/remove-one and the discrete Laplace
    mechanism with P(Z = k) ∝ exp(-epsilon |k|) is (epsilon, 0)-DP for sensitivity-1
    integer queries (Ghosh, Roughgarden and Sundararajan 2009; the discrete analogue
    of Corollary 1). The entries of one call count disjoint sets (the nodes of one
    level), so the whole call is (epsilon, 0)-DP by parallel composition. The sampler
    is within total variation tv = :func:`count_sampler_tv` of the ideal noise, so the
    implemented mechanism is (epsilon, tv (1 + e^epsilon))-DP; the ledger charges that
    delta. Noise scale 1/epsilon; variance 2 r / (1 - r)**2, r = e^-epsilon.

    Args:
      key: PRNG key (one ``jax.random.bits`` call, see ``_discrete_laplace_words``).
      true_counts: integer counts in [0, 2**31), any shape (may be traced).
      epsilon: concrete budget, a scalar or one per entry (broadcast to the counts).

    Returns:
      The exact integer ``|S| + Z`` (an :class:`dpm_jax.exact.Int`);
      :func:`dpm_jax.exact.to_float32` converts it for display (post-processing).
    """
    counts = jnp.asarray(true_counts).astype(jnp.int32)
    epsilon = np.broadcast_to(_concrete_epsilons(epsilon), counts.shape)
    return add_count_noise(counts, count_noise(key, epsilon))


def discrete_laplace_tail(epsilon: float, k: int) -> float:
    """P[Z >= k] for the discrete Laplace Z with ratio r = e^-epsilon, for integer k >= 0.

    P[Z >= k] = sum_{j >= k} (1 - r)/(1 + r) r**j = r**k / (1 + r) (also at k = 0,
    where it is P[Z > 0] + P[Z = 0] = r/(1 + r) + (1 - r)/(1 + r)).
    """
    if k < 0:
        raise ValueError("discrete_laplace_tail needs k >= 0")
    return math.exp(-epsilon * k) / (1.0 + math.exp(-epsilon))


def count_offset(epsilon: float, delta: float) -> float:
    """The offset lambda of the shifted noisy count (Equation 1, for the discrete Laplace).

    The paper's lambda = -ln(2 delta) / epsilon is the (1 - delta)-quantile of the
    continuous Lap(1/epsilon). For the integer noise Z of :func:`noisy_count`,
    P[n~ - lambda > |S|] = P[Z > lambda] = P[Z >= floor(lambda) + 1] and
    P[Z >= m] = e^{-epsilon m} / (1 + e^{-epsilon}) for integers m >= 0
    (:func:`discrete_laplace_tail`). With m the smallest integer >= 0 such that
    e^{-epsilon m} / (1 + e^{-epsilon}) <= delta, i.e.
    m = max(0, ceil(-ln(delta (1 + e^{-epsilon})) / epsilon)), we return
    lambda = m - 1, the smallest integer with P[n~ - lambda > |S|] <= delta (any
    lambda in [m - 1, m) gives the same probability). The inequality is checked in
    50-digit decimal arithmetic, so rounding can never make lambda too small. For
    small epsilon, lambda ~ -ln(2 delta)/epsilon - 1/2 + O(1).

    Returns lambda as a float (an integer value, >= -1).
    """
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"count_offset needs epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    with decimal.localcontext() as context:
        context.prec = 50
        exact_epsilon, exact_delta = decimal.Decimal(epsilon), decimal.Decimal(delta)
        ratio = (-exact_epsilon).exp()

        def tail_at_most_delta(m: int) -> bool:
            return (-exact_epsilon * m).exp() / (1 + ratio) <= exact_delta

        m = max(0, math.ceil(-math.log(delta * (1.0 + math.exp(-epsilon))) / epsilon))
        while not tail_at_most_delta(m):
            m += 1
        while m > 0 and tail_at_most_delta(m - 1):
            m -= 1
    return float(m - 1)


# ------------------------------------------------------------ exponential mechanism
# The exponential mechanism on exact integer scores G (Definition 4 with the factor 2
# of McSherry and Talwar 2007): P(i) ∝ 2**(c G_i), c = (epsilon - margin) /
# (2 Delta ln 2) per score unit (base 2 is e with the exponent scaled by log2 e).
#
# Arithmetic, all integer on the device:
#   1. x_i = G* - G_i >= 0 exactly, G* the row maximum (dpm_jax.exact).
#   2. c 2**F is rounded *down* to c_num 2**-c_shift with a 15-bit c_num (a smaller
#      exponent scale spends less privacy, so rounding down is always safe), and
#      j_i = floor(c_num x_i / 2**c_shift): the exponent in units of 2**-F, exact.
#   3. The weight is floor(P(j_i mod 2**F) / 2**(1 + j_i div 2**F)) with P(k) =
#      A[k div 2**9] B[k mod 2**9], two host tables of 30-bit integers A[i] =
#      round(2**30 2**(-i / 2**9)) and B[l] = round(2**30 2**(-l / 2**F)) (exact,
#      40-digit decimal): P is an exact 60-bit product (15-bit halves in int32), so the
#      best candidate weighs exactly 2**59. Two 512-entry tables stay in cache, where
#      one 2**18-entry table did not (a cache miss per candidate).
#   4. Exact cumulative sums of the weights (12-bit digits, int32 columns); V uniform
#      on [0, W) by rejection from 2**bitlength(W) (at most EM_TRIES tries, each
#      accepted with probability >= 1/2); the selected index is #{i : C_i <= V}.
# Against the ideal mechanism with scale c' = c_num 2**(-c_shift - F) <= c:
#   * multiplicative: step 2 computes j from floor(x_i / 2**h) (h = c_shift - 17 when
#     positive, so the dropped bits are worth less than 1/4 unit of j) and floors the
#     product: j_i is at most 1.25 units of 2**-F below c' x_i 2**F, so every weight is
#     larger than ideal by a factor in [1, 2**(1.25 2**-F)); P(k) / 2**60 is within a
#     relative 2**-29 of 2**(-k / 2**F) (A and B rounded to nearest, A >= 2**29,
#     B >= 2**30 2**(-1/512)). So every probability is within e^(+-gamma) of the ideal
#     one, gamma = 1.25 ln 2 2**-F + 2 2**-29, and the mechanism is
#     (epsilon' + 2 gamma)-DP for an ideal epsilon'; c is computed from
#     epsilon' = epsilon - EM_EPSILON_MARGIN.
#   * total variation: flooring the weights to integers moves each probability by
#     less than 1 / 2**59 (W >= 2**59), and all tries fail with probability <=
#     2**-EM_TRIES: tv <= M 2**-59 + 2**-64 for M candidates (em_sampler_tv), charged
#     as delta tv (1 + e^epsilon).
EM_FRACTION_BITS = 18
EM_WEIGHT_BITS = 59
EM_TRIES = 64
_DIGIT_BITS = 12
_DIGIT_MASK = (1 << _DIGIT_BITS) - 1
EM_DIGITS = 7  # cumulative weights < 2**(59 + 18) fit in 7 digits of 12 bits
EM_MAX_CANDIDATES = 2**18  # every digit column's cumulative sum stays below 2**31
_EM_TABLE_RELATIVE_ERROR = 2.0**-29
_COARSE_BITS = 9
_EXPONENT_FLOOR_UNITS = 1.25
EM_EPSILON_MARGIN = 2 * (_EXPONENT_FLOOR_UNITS * math.log(2.0) * 2.0**-EM_FRACTION_BITS + 2 * _EM_TABLE_RELATIVE_ERROR)
_SCALE_ROUNDING_GUARD = 1.0 - 2.0**-20  # covers the float32 rounding of the scale


def tv_delta(tv: float, epsilon: float) -> float:
    """The delta an epsilon-DP release pays for a sampler within total variation ``tv`` of its
    ideal law: tv (1 + e^epsilon) (Section 1 of docs/privacy.md); inf where e^epsilon overflows
    a float, so that the callers' checks on it refuse the budget with their ValueError."""
    if tv == 0:
        return 0.0
    return tv * (1.0 + math.exp(epsilon)) if epsilon < _MAX_EXP_ARGUMENT else math.inf


_MAX_EXP_ARGUMENT = 709.0  # math.exp overflows a float64 above about 709.78


_BLOCK = 32
_OUT_OF_RANGE = 60 * 2**EM_FRACTION_BITS  # exponents from here on give weight 0 (< 2**-1)
_GAP_BITS = 27  # floor(x / 2**h) is clamped below 2**27: any larger gap is out of range


def em_sampler_tv(num_candidates: int) -> float:
    """Total-variation distance of one selection from its multiplicative-error ideal."""
    return num_candidates * 2.0**-EM_WEIGHT_BITS + 2.0**-EM_TRIES


@functools.lru_cache(maxsize=1)
def em_weight_table() -> tuple[np.ndarray, np.ndarray]:
    """(A, B): A[i] = round(2**30 2**(-i / 2**9)), B[l] = round(2**30 2**(-l / 2**F)), 512 each (int32).

    Exact: 40-digit decimal arithmetic, then rounding to the nearest integer.
    A[k >> 9] B[k & 511] is 2**60 2**(-k / 2**F) up to a relative 2**-29.
    """

    def fixed_point(step_bits: int) -> np.ndarray:
        with decimal.localcontext() as context:
            context.prec = 40
            two = decimal.Decimal(2)
            values = [
                (two**30 * two ** (decimal.Decimal(-i) / two**step_bits)).to_integral_value(
                    rounding=decimal.ROUND_HALF_EVEN
                )
                for i in range(2**_COARSE_BITS)
            ]
        return np.array([int(v) for v in values], dtype=np.int64).astype(np.int32)

    return fixed_point(_COARSE_BITS), fixed_point(EM_FRACTION_BITS)


def em_exponent_scale(epsilon, sensitivity, ratio=1.0) -> jax.Array:
    """c: the base-2 exponent per score unit, (epsilon - margin) ratio / (2 Delta ln 2).

    ``ratio`` in (0, 1] scales the exponent down further (the paper's n~ - lambda).
    Any argument may be traced; float32 rounding (a few ulps) is covered by rounding
    the result down by 2**-20. The caller ensures epsilon > EM_EPSILON_MARGIN
    (:func:`dpm_jax.budget.allocate` refuses budgets where it is not).
    """
    usable = jnp.asarray(epsilon, jnp.float32) - np.float32(EM_EPSILON_MARGIN)
    return (
        usable
        / np.float32(2.0 * math.log(2.0))
        * jnp.asarray(ratio, jnp.float32)
        / jnp.asarray(sensitivity, jnp.float32)
        * np.float32(_SCALE_ROUNDING_GUARD)
    )


def _scale_as_dyadic(exponent_scale: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(c_num, c_shift) with c_num 2**-c_shift <= exponent_scale 2**F, c_num < 2**15."""
    scaled = exponent_scale * np.float32(2.0**EM_FRACTION_BITS)
    mantissa, exponent = jnp.frexp(scaled)  # scaled = mantissa 2**exponent, mantissa in [0.5, 1)
    numerator = jnp.floor(mantissa * 2**15).astype(jnp.int32)
    shift = 15 - exponent.astype(jnp.int32)
    # Scales of 2**-3 bits per score unit and more are rounded down to just below it
    # (never up: privacy holds, only utility is lost). Callers scale their integer
    # scores so that this is not reached (the engine's sensitivities are >= 2**10).
    too_large = shift < 0
    numerator = jnp.where(too_large, 2**15 - 1, numerator)
    return numerator, jnp.clip(shift, 0, 150)


def _exponents(gap: Int, exponent_scale: jax.Array) -> jax.Array:
    """j = floor(c' x / 2**-F) up to 1.25 units (see the notes above), int32 in [0, _OUT_OF_RANGE].

    ``gap`` (..., M) two-limb integers x >= 0; ``exponent_scale`` (...,) float32.
    Every step is an exact int32 operation; gaps whose exponent certainly exceeds
    _OUT_OF_RANGE are clamped (their weight is 0 either way).
    """
    # Per row, materialized: XLA would recompute them for every candidate.
    numerator, shift = (materialized(v)[..., None] for v in _scale_as_dyadic(exponent_scale))
    drop = jnp.maximum(shift - 17, 0)  # h
    rest = shift - drop  # s <= 17
    low, high = gap.limbs
    rough = (high.astype(jnp.float32) * np.float32(2.0**30) + low.astype(jnp.float32)) * power_of_two(-drop)
    clamp = rough >= np.float32(2.0**_GAP_BITS)  # float32 is within 2**-22 here: no doubt
    safe_high = jnp.where(clamp, 0, high)
    dropped = jnp.where(
        drop >= 30,
        jnp.right_shift(safe_high, jnp.clip(drop - 30, 0, 31)),
        jnp.right_shift(low, jnp.minimum(drop, 30)) | jnp.left_shift(safe_high, jnp.clip(30 - drop, 0, 30)),
    )
    x = jnp.where(clamp, 2**_GAP_BITS, jnp.minimum(dropped, 2**_GAP_BITS))  # < 2**27 + 1
    x_high, x_low = jnp.right_shift(x, 12), jnp.bitwise_and(x, 0xFFF)
    a = x_high * numerator  # < 2**30
    b = x_low * numerator  # < 2**27
    wide = jnp.right_shift(a + jnp.right_shift(b, 12), jnp.maximum(rest - 12, 0))
    cap = jnp.right_shift(_OUT_OF_RANGE, jnp.clip(12 - rest, 0, 12))
    narrow = jnp.left_shift(jnp.minimum(a, cap), jnp.clip(12 - rest, 0, 12)) + jnp.right_shift(b, jnp.minimum(rest, 12))
    j = jnp.where(rest >= 12, wide, narrow)
    return jnp.minimum(j, _OUT_OF_RANGE)


def _masked_scores(scores: Int, valid: jax.Array) -> Int:
    """Invalid candidates' scores replaced by one far below any score (|G| < 2**58)."""
    floor_limb = jnp.int32(-(2**29))
    return Int(
        tuple(
            jnp.where(valid, limb, floor_limb if i == len(scores.limbs) - 1 else 0)
            for i, limb in enumerate(scores.limbs)
        )
    )


def em_weights(table, scores: Int, valid: jax.Array, exponent_scale: jax.Array, best: Int | None = None) -> jax.Array:
    """Weights floor(P(j_i) / 2**(1 + j_i div 2**F)) ~ 2**59 2**(-j_i / 2**F): five (..., M) 12-bit digit arrays.

    ``scores`` (..., M) exact integers, ``valid`` (..., M), ``exponent_scale`` (...,)
    base-2 exponent per score unit, ``best`` (..., 1) the largest valid score of each
    row (computed here when not given). Invalid candidates weigh exactly 0.
    """
    masked = _masked_scores(scores, valid)
    if best is None:
        best = exact.maximum(masked, axis=-1)
    gap = exact.narrow(exact.subtract(best, masked), 2)  # >= 0 on valid candidates
    # Materialized: each table lookup below is a gather, and XLA fused the whole chain from the
    # scores into each of them (twice the work; under jax.vmap each copy also read the scores
    # transposed), and once more into the reduction of the digits.
    j = materialized(_exponents(gap, exponent_scale))
    coarse_table, fine_table = table
    k = jnp.bitwise_and(j, 2**EM_FRACTION_BITS - 1)
    a = coarse_table[jnp.right_shift(k, _COARSE_BITS)]  # <= 2**30
    b = fine_table[jnp.bitwise_and(k, 2**_COARSE_BITS - 1)]  # <= 2**30
    a1, a0 = jnp.right_shift(a, 15), jnp.bitwise_and(a, 0x7FFF)
    b1, b0 = jnp.right_shift(b, 15), jnp.bitwise_and(b, 0x7FFF)
    middle = a1 * b0 + a0 * b1  # < 2**31: P = a1 b1 2**30 + middle 2**15 + a0 b0
    p_low = a0 * b0 + jnp.left_shift(jnp.bitwise_and(middle, 0x7FFF), 15)
    p_high = a1 * b1 + jnp.right_shift(middle, 15) + jnp.right_shift(p_low, 30)
    p_low = jnp.bitwise_and(p_low, exact.LIMB_MASK)
    q = jnp.right_shift(j, EM_FRACTION_BITS) + 1  # weight = P / 2**q, 1 <= q <= 61
    low, high = exact.shift_right(Int((p_low, p_high)), q).limbs
    keep = valid & (j < _OUT_OF_RANGE)
    low, high = jnp.where(keep, low, 0), jnp.where(keep, high, 0)
    return (
        jnp.bitwise_and(low, _DIGIT_MASK),
        jnp.bitwise_and(jnp.right_shift(low, 12), _DIGIT_MASK),
        jnp.right_shift(low, 24) | jnp.left_shift(jnp.bitwise_and(high, 0x3F), 6),
        jnp.bitwise_and(jnp.right_shift(high, 6), _DIGIT_MASK),
        jnp.right_shift(high, 18),
    )


def _digits_less(a, b) -> jax.Array:
    """a < b for canonical numbers given as tuples of 12-bit digit arrays (little-endian)."""
    result = a[0] < b[0]
    for x, y in zip(a[1:], b[1:]):
        result = (x < y) | ((x == y) & result)
    return result


def _normalized_digits(columns, num_digits: int = EM_DIGITS) -> tuple:
    """Carry int32 digit columns (each below 2**30) into canonical 12-bit digits."""
    digits, carry = [], 0
    for i in range(num_digits):
        column = (columns[i] if i < len(columns) else 0) + carry
        digits.append(jnp.bitwise_and(column, _DIGIT_MASK))
        carry = jnp.right_shift(column, _DIGIT_BITS)
    return tuple(digits)


def _block_prefixes(weight_digits) -> tuple[tuple, int]:
    """Exact inclusive cumulative sums of the weights of blocks of _BLOCK candidates.

    Returns (digits of the prefix sums, (..., num_blocks) each; the block size). Every
    block's digit sums are below 2**17 and their prefix sums below 2**30 (at most 2**13
    blocks), so int32 holds them exactly in any order.
    """
    length = weight_digits[0].shape[-1]
    num_blocks = -(-length // _BLOCK)
    padding = [(0, 0)] * (weight_digits[0].ndim - 1) + [(0, num_blocks * _BLOCK - length)]
    blocked = tuple(jnp.pad(digit, padding).reshape(digit.shape[:-1] + (num_blocks, _BLOCK)) for digit in weight_digits)
    # One variadic reduction for all digits: XLA then computes the weights (a long
    # fused chain from the scores on) once per candidate instead of once per digit.
    sums = jax.lax.reduce(
        blocked, (jnp.int32(0),) * len(blocked), lambda x, y: tuple(a + b for a, b in zip(x, y)), (blocked[0].ndim - 1,)
    )
    return _normalized_digits([jnp.cumsum(column, axis=-1) for column in sums]), num_blocks


def select_with_bits(bits: jax.Array, table, scores: Int, valid: jax.Array, exponent_scale: jax.Array) -> jax.Array:
    """The exponential mechanism per row, driven by given random bits; the selected index.

    Inverse-CDF on exact integers: V uniform on [0, W) (W the total weight) selects the
    candidate i with C_(i-1) <= V < C_i (C the cumulative weights), found as the block
    of candidates containing V and then the candidate within that block.

    Args:
      bits: (rows, EM_TRIES, EM_DIGITS) uint32 random words (only 12 bits of each used).
      table: :func:`em_weight_table` as device arrays.
      scores: (rows, M) exact integer scores (:class:`dpm_jax.exact.Int`), M <= 2**18.
      valid: (rows, M) bool; invalid candidates are never selected.
      exponent_scale: (rows,) base-2 exponent per score unit (:func:`em_exponent_scale`).
    Returns:
      (rows,) int32 index into M; 0 for a row without valid candidates.
    """
    best = exact.maximum(_masked_scores(scores, valid), axis=-1)
    weights = em_weights(table, scores, valid, exponent_scale, best)
    length = weights[0].shape[-1]
    prefixes, num_blocks = _block_prefixes(weights)
    total = [digit[..., -1] for digit in prefixes]  # EM_DIGITS of (rows,)
    # bit length of the total: 12 * (index of its top non-zero digit) + that digit's length
    bit_length = jnp.zeros_like(total[0])
    for i, digit in enumerate(total):
        bit_length = jnp.where(digit > 0, _DIGIT_BITS * i + 32 - jax.lax.clz(jnp.maximum(digit, 1)), bit_length)
    tries = jnp.bitwise_and(bits.astype(jnp.int32), _DIGIT_MASK)  # (rows, EM_TRIES, EM_DIGITS)
    tries = [
        jnp.bitwise_and(
            tries[..., i], jnp.left_shift(1, jnp.clip(bit_length - _DIGIT_BITS * i, 0, _DIGIT_BITS))[..., None] - 1
        )
        for i in range(EM_DIGITS)
    ]
    accepted = _digits_less(tries, [t[..., None] for t in total])  # uniform < 2**L, below W?
    first = jnp.argmax(accepted, axis=-1)
    found = jnp.any(accepted, axis=-1)
    chosen = tuple(jnp.where(found, jnp.take_along_axis(t, first[..., None], axis=-1)[..., 0], 0) for t in tries)
    # The block holding V, then the candidate within it.
    block = jnp.minimum(_count_at_most(prefixes, chosen), num_blocks - 1)
    before = tuple(
        jnp.where(block > 0, jnp.take_along_axis(digit, jnp.maximum(block - 1, 0)[..., None], axis=-1)[..., 0], 0)
        for digit in prefixes
    )
    # The block's weights are recomputed from its scores: gathering them from the
    # weight arrays would make XLA compute every weight once more per digit.
    members = block[..., None] * _BLOCK + jnp.arange(_BLOCK)
    member_index = jnp.minimum(members, length - 1)
    in_block = em_weights(
        table,
        Int(tuple(jnp.take_along_axis(limb, member_index, axis=-1) for limb in scores.limbs)),
        jnp.take_along_axis(valid, member_index, axis=-1) & (members < length),
        exponent_scale,
        best,
    )
    within = _normalized_digits(
        [
            (jnp.cumsum(in_block[i], axis=-1) if i < len(in_block) else 0) + before[i][..., None]
            for i in range(EM_DIGITS)
        ]
    )
    index = block * _BLOCK + _count_at_most(within, chosen)
    return jnp.where(bit_length > 0, jnp.minimum(index, length - 1), 0).astype(jnp.int32)


def _count_at_most(cumulative, value) -> jax.Array:
    """#{i : cumulative[..., i] <= value}, exact (digit-wise comparisons of every entry).

    Called on at most M / 32 block sums and on the 32 sums of one block, so a plain
    count costs little and compiles much faster than a binary-search loop.
    """
    return jnp.sum(~_digits_less(tuple(v[..., None] for v in value), cumulative), axis=-1)


def exponential_mechanism(
    key: jax.Array, table, scores: Int, valid: jax.Array, epsilon: float, sensitivity
) -> jax.Array:
    """Exponential mechanism on integer scores, one selection per row (Definition 4, fixed).

    Selects i with probability proportional to exp(epsilon G_i / (2 Delta)) among
    the valid candidates of each row, up to the sampler's bounded errors (see the
    notes above :data:`EM_EPSILON_MARGIN`). The paper prints exp(eps f / Delta_f);
    because the score is not monotone in the data the factor 2 is needed (McSherry
    and Talwar 2007).

    Privacy: (epsilon, (1 + e^epsilon) em_sampler_tv(M))-DP per row when every
    score changes by at most ``sensitivity`` between neighbours; rows over disjoint
    sets compose in parallel.
    """
    if not isinstance(epsilon, jax.core.Tracer) and epsilon <= EM_EPSILON_MARGIN:
        raise ValueError(f"epsilon {epsilon:.3g} is below the sampler's margin {EM_EPSILON_MARGIN:.3g}")
    rows = scores.limbs[0].shape[0]
    bits = random_words(key, (rows, EM_TRIES, EM_DIGITS))
    scale = em_exponent_scale(epsilon, jnp.broadcast_to(jnp.asarray(sensitivity, jnp.float32), (rows,)))
    return select_with_bits(bits, table, scores, valid, scale)


# ------------------------------------------------------------------ discrete Gaussian
# N_Z(0, sigma^2): P(Z = k) ∝ exp(-k^2 / (2 sigma^2)) on the integers (Canonne, Kamath
# and Steinke 2020, "The Discrete Gaussian for Differential Privacy"). Sampler: an
# inverse-CDF table of 62-bit integers built on the host: W_k = floor(w_k 2**62 / S)
# for |k| <= K, k != 0, W_0 = 2**62 - sum of the others; a 62-bit uniform integer U
# selects #{k : C_k <= U} with C the cumulative sums. The weights w_k are integers
# (:func:`_gaussian_weights`): exp(-k^2 / (2 sigma^2)) 2**128 by the exact recurrence
# w_(k+1) = w_k r^(2k+1), r = exp(-1 / (2 sigma^2)) from 70-digit decimal arithmetic,
# truncated to integers after every product; S their exact sum. Distance from the ideal
# law, per draw: in units of 2**-128 (w_0 = 1), r is off by under 1, r^2 by 3, the factor
# r^(2k+1) by 4k + 1 and so w_k by at most 2k^2 (each product adds its factor's error and
# one truncation); the 2K + 1 weights together by under 4 K^3, against S >= K / 5
# (S ~ sigma sqrt(2 pi), K ~ 10.6 sigma): the normalised weights move by under
# 20 K^2 2**-128 < 2**-79 in all for K < 2**22 (_MAX_HALF_WIDTH). Each W_k (k != 0) is
# floored (under one unit of 2**-62 each, and W_0 gains what they lose); the tail beyond
# K = ceil(sigma sqrt(160 ln 2)) + 1 (ideal mass < 2**-64) is cut:
# tv <= (4 (2K + 1) + 4) / 2**62 + 2**-64. (Before: float64 weights, whose error bound
# rested on an assumed accuracy of the host's exp and added 4 2**17 units: ten times the
# whole bound at sigma = 2**8.)
_GAUSSIAN_TABLE_BITS = 62
_GAUSSIAN_TAIL_EXPONENT = 80 * math.log(2.0)


class DiscreteGaussianTable(NamedTuple):
    """Host-built inverse-CDF table of N_Z(0, sigma^2) (public: depends on sigma only)."""

    sigma: float
    support_min: int  # the value of index 0
    thresholds_high: np.ndarray  # int32, cumulative sums C_k = high 2**31 + low, k < 2K
    thresholds_low: np.ndarray
    tv: float  # total-variation distance of one draw from the ideal N_Z(0, sigma^2)


_WEIGHT_BITS = 128
_MAX_HALF_WIDTH = 2**22  # K: the truncation bound above holds below it (sigma below about 4e5)


def _gaussian_weights(sigma: float, half_width: int) -> list[int]:
    """[w_0, ..., w_K]: exp(-k^2 / (2 sigma^2)) 2**128 as integers, w_k within 2k^2 of it (see above)."""
    one = 1 << _WEIGHT_BITS
    with decimal.localcontext() as context:
        context.prec = 70  # 2**128 has 39 digits: the product below is exact to far below a unit
        ratio = (-1 / (2 * decimal.Decimal(sigma) ** 2)).exp()  # Decimal(sigma) is the float exactly
        r = int(ratio * one)  # floor: r and the products below only ever lose less than a unit
    r_squared = (r * r) >> _WEIGHT_BITS
    weights, weight, factor = [one], one, r  # factor = r^(2k + 1)
    for _ in range(half_width):
        weight = (weight * factor) >> _WEIGHT_BITS
        factor = (factor * r_squared) >> _WEIGHT_BITS
        weights.append(weight)
    return weights


@functools.lru_cache(maxsize=16)
def discrete_gaussian_table(sigma: float) -> DiscreteGaussianTable:
    """The sampler table for N_Z(0, sigma^2), sigma >= 1."""
    if not (math.isfinite(sigma) and sigma >= 1.0):
        raise ValueError(f"the discrete Gaussian table needs sigma >= 1, got {sigma}")
    half_width = math.ceil(sigma * math.sqrt(2.0 * _GAUSSIAN_TAIL_EXPONENT)) + 1
    if half_width >= _MAX_HALF_WIDTH:
        raise ValueError(f"the discrete Gaussian table is proven for sigma up to about 4e5, got {sigma:.3g}")
    weights = _gaussian_weights(sigma, half_width)
    total = weights[0] + 2 * sum(weights[1:])
    side = [(w << _GAUSSIAN_TABLE_BITS) // total for w in weights[1:]]  # floor(w_k 2**62 / S), exact
    centre = 2**_GAUSSIAN_TABLE_BITS - 2 * sum(side)
    scaled = np.array(side[::-1] + [centre] + side, dtype=np.uint64)
    # Trim values of weight 0 at both ends: then every stored cumulative sum is below 2**62.
    keep = np.nonzero(scaled)[0]
    scaled, first = scaled[keep[0] : keep[-1] + 1], keep[0]
    cumulative = np.cumsum(scaled, dtype=np.uint64)[:-1]  # the last one, 2**62, is never <= U
    high = (cumulative >> np.uint64(31)).astype(np.int32)
    low = (cumulative & np.uint64(2**31 - 1)).astype(np.int32)
    tv = (4 * (2 * half_width + 1) + 4) / 2.0**_GAUSSIAN_TABLE_BITS + 2.0**-64
    return DiscreteGaussianTable(float(sigma), int(first) - half_width, high, low, tv)


def discrete_gaussian_noise(
    key: jax.Array, thresholds_high: jax.Array, thresholds_low: jax.Array, support_min, shape: tuple[int, ...]
) -> jax.Array:
    """Exact-integer N_Z(0, sigma^2) draws of ``shape`` (int32) from a table's arrays.

    One 62-bit uniform integer per draw (two uint32 words, 31 bits of each), located
    among the table's cumulative sums by a binary search of exact integer comparisons.
    """
    size = math.prod(shape)
    words = random_words(key, (2, size))
    u_high = jnp.right_shift(words[0], 1).astype(jnp.int32)
    u_low = jnp.right_shift(words[1], 1).astype(jnp.int32)
    length = thresholds_high.shape[0]

    def step(_, bounds):
        low, high = bounds
        middle = jnp.minimum((low + high) // 2, length - 1)
        c_high, c_low = thresholds_high[middle], thresholds_low[middle]
        at_most = (c_high < u_high) | ((c_high == u_high) & (c_low <= u_low))
        open_ = low < high
        return (jnp.where(open_ & at_most, middle + 1, low), jnp.where(open_ & ~at_most, middle, high))

    start = (jnp.zeros(size, jnp.int32), jnp.full(size, length, jnp.int32))
    count, _ = jax.lax.fori_loop(0, max(1, length.bit_length()), step, start)
    return (count + jnp.asarray(support_min, jnp.int32)).reshape(shape)


def cdp_delta(rho: float, epsilon: float) -> float:
    """delta with which rho-zCDP implies (epsilon, delta)-DP (CKS 2020, Corollary 13).

    delta = inf_{alpha > 1} exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1)
    (1 - 1/alpha)**alpha. Every alpha gives a valid delta, so the minimum over a
    grid (refined around its best point) is a valid, near-tight bound; a relative
    1e-9 covers the float64 evaluation.
    """

    def log_delta(alpha):
        return (alpha - 1.0) * (alpha * rho - epsilon) + alpha * np.log1p(-1.0 / alpha) - np.log(alpha - 1.0)

    alphas = 1.0 + np.exp(np.linspace(math.log(1e-6), math.log(1e7), 4001))
    best = int(np.argmin(log_delta(alphas)))
    low, high = alphas[max(best - 1, 0)], alphas[min(best + 1, alphas.size - 1)]
    fine = np.linspace(low, high, 2001)
    value = min(float(np.min(log_delta(alphas))), float(np.min(log_delta(fine))))
    return min(1.0, math.exp(value) * (1.0 + 1e-9))


def discrete_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """The smallest sigma / Delta_2 (to 1e-9) at which N_Z(0, sigma^2) noise is (epsilon, delta)-DP.

    Privacy: for integer-valued queries whose L2 change is at most Delta_2, adding
    independent N_Z(0, sigma^2) noise to each coordinate is (Delta_2^2 / (2 sigma^2))-
    zCDP (CKS 2020, Theorem 14: the Renyi divergences of integer shifts are those of
    the continuous Gaussian at most, and add over coordinates), which implies
    (epsilon, cdp_delta(rho, epsilon))-DP. Bisection on the multiplier; the returned
    upper end satisfies the condition.
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"discrete_gaussian_multiplier needs epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    low, high = 1e-3, 1.0
    while cdp_delta(1.0 / (2.0 * high * high), epsilon) > delta:
        low, high = high, 2.0 * high
    while high - low > 1e-9 * high:
        middle = 0.5 * (low + high)
        if cdp_delta(1.0 / (2.0 * middle * middle), epsilon) > delta:
            low = middle
        else:
            high = middle
    return high
