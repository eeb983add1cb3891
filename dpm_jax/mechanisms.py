"""The DP mechanisms DPM is built from, each next to its privacy statement.

Every function takes its PRNG key first and draws nothing else; keys come from
:func:`derive_key`, so each draw of a run can be re-derived from the caller's key.

Neighbouring data sets differ by adding or removing one point (Definition 1 of the
DPM paper, 000_e63c772e1db0dbd8.txt).

How each mechanism is sampled, and what floating point leaves (docs/privacy.md):

* Counts: discrete Laplace (two-sided geometric) noise built from uniform 64-bit
  integers and integer arithmetic only (:func:`count_noise`); its distance from the
  ideal distribution is bounded (total variation <= 7e-18 per draw), so the
  low-order-bit attacks on floating-point Laplace samplers (Mironov 2012) do not apply.
* Exponential mechanism: inverse-CDF sampling of float32 weights
  exp(eps (f - max f) / (2 Delta)), one float32 uniform per row against their
  float32 cumulative sum (:func:`select_with_uniforms`). A float32 uniform takes
  2**23 values and the cumulative sums carry a relative rounding error of about
  1e-6, so each selection probability is realised only up to an absolute error of
  order 1e-6 of the row's total; a candidate whose ideal probability is below that
  can be selected with probability 0 under one data set and ~1e-6 under its
  neighbour. The sampler is therefore (eps, delta_fp)-DP rather than (eps, 0)-DP,
  with delta_fp bounded by (1 + e^eps) times the total-variation error, at most
  about #candidates * 2e-6 per row (typically far less: only rows whose mass is
  spread over many tiny candidates come near it). delta_fp is not in the ledger.
* Gaussian: JAX's float32 normal sampler, sqrt(2) erfinv(u) of a float32 uniform u
  on a 2**-22 grid of (-1, 1) (:func:`gaussian_noise`). Its support is a finite set
  of floats in [-5.42, 5.17] standard deviations: the ideal tail beyond it
  (P[|Z| > 5.17] ~ 2.4e-7 per coordinate) is cut, and outputs near the cut reveal
  the data set, which adds a delta of the order of that tail mass per coordinate;
  sums of x + noise also have the data-dependent low-order bits of Mironov (2012).
"""

from __future__ import annotations

import decimal
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax._arrays import cumsum_last

__all__ = [
    "STREAMS",
    "derive_key",
    "laplace_noise",
    "count_noise",
    "noisy_count",
    "select_with_uniforms",
    "count_offset",
    "discrete_laplace_tail",
    "exponential_mechanism",
    "analytic_gaussian_sigma",
    "gaussian_noise",
]

# Key derivation: derive_key(key, stream) = fold_in(key, STREAMS[stream]). Each
# mechanism draws all of its noise for the whole tree from its stream's key in one
# call, in heap layout (element i belongs to tree node i), so every draw of a run is
# re-derivable and the compiled program holds one PRNG invocation per stream.
STREAMS = {"count": 0, "interval": 1, "split": 2, "average": 3}


def derive_key(key: jax.Array, stream: str) -> jax.Array:
    """The key of mechanism ``stream`` (one of STREAMS), derived from the caller's key."""
    if stream not in STREAMS:
        raise ValueError(f"unknown key stream {stream!r}; expected one of {sorted(STREAMS)}")
    return jax.random.fold_in(key, STREAMS[stream])


# --------------------------------------------------------------------------- Laplace
def laplace_noise(key: jax.Array, shape: tuple[int, ...], scale) -> jax.Array:
    """Continuous Lap(scale) noise of the given shape (float32); ``scale`` broadcasts against ``shape``.

    Not used for the released counts (they use the discrete Laplace mechanism
    below). Floating-point caveat: JAX's textbook sampler, sign(u) log1p(-|u|) of a
    float32 uniform u on a grid of 2**-23, has the irregular, data-shifted support
    that Mironov (2012) exploits and a tail truncated at about 16 * scale.
    """
    return scale * jax.random.laplace(key, shape, dtype=jnp.float32)


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
# (epsilon, 0)-DP; this extra delta is not charged to the ledger (it is below 1e-15
# for epsilon <= 5). The integers are exact: Z is carried as two 30-bit words and
# only the final integer is converted to float32 (exact below 2**24; above, the
# rounding is a deterministic function of the released integer, i.e. post-processing).
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
        raise TypeError("the count epsilons must be concrete numbers (they are public and fix the "
                        "sampler's integer thresholds); do not trace them under jit/vmap")
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
    rows = np.array([_geometric_bit_thresholds(float(e), num_bits) for e in distinct],
                    dtype=np.uint64).reshape(-1, num_bits)
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
    # drawn flat and reshaped: multi-axis PRNG shapes take seconds longer to compile
    words = jax.random.bits(key, (4 * num_bits * math.prod(shape),), dtype=jnp.uint32)
    words = words.reshape((2, num_bits, 2) + shape)
    u_hi, u_lo = words[:, :, 0], words[:, :, 1]
    digits = (u_hi < threshold_hi) | ((u_hi == threshold_hi) & (u_lo < threshold_lo))
    digits = digits.astype(jnp.int32)
    place = np.arange(num_bits)
    weights = jnp.asarray((1 << (place % _WORD_BITS)).astype(np.int32)).reshape(
        (1, num_bits) + (1,) * len(shape))
    low_digits = (place < _WORD_BITS).reshape((1, num_bits) + (1,) * len(shape))
    geometric_lo = jnp.sum(jnp.where(low_digits, digits * weights, 0), axis=1)
    geometric_hi = jnp.sum(jnp.where(low_digits, 0, digits * weights), axis=1)
    return _canonical_words(geometric_hi[0] - geometric_hi[1], geometric_lo[0] - geometric_lo[1])


@jax.jit
def _canonical_words(hi: jax.Array, lo: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The unique (hi, lo) with the same hi 2**30 + lo and 0 <= lo < 2**30 (|lo| < 2**31)."""
    return hi + jnp.right_shift(lo, _WORD_BITS), jnp.bitwise_and(lo, _WORD_MASK)


@jax.jit
def _words_to_float32(hi: jax.Array, lo: jax.Array) -> jax.Array:
    """float32 of v = hi 2**30 + lo (canonical words): exact for |v| <= 2**24.

    For -2 <= hi <= 1, v fits int32 and is converted with one correct rounding;
    otherwise (|v| >= 2**31) the two words are combined in float32. Either way the
    result is a fixed function of v (post-processing of the released integer).
    """
    fits = (hi >= -2) & (hi <= 1)
    small = jnp.clip(hi, -2, 1) * (1 << _WORD_BITS) + lo  # in [-2**31, 2**31): no overflow
    large = hi.astype(jnp.float32) * jnp.float32(1 << _WORD_BITS) + lo.astype(jnp.float32)
    return jnp.where(fits, small.astype(jnp.float32), large)


def count_noise(key: jax.Array, epsilon) -> jax.Array:
    """The noise of the count mechanism: discrete Laplace, one draw per entry of ``epsilon``.

    ``epsilon`` is an array of per-entry budgets (entries of different levels can
    be drawn in one call; element i always uses element i of the draw). It must be
    concrete (public numbers; the sampler's integer thresholds are built from it).

    Returns integer-valued float32 noise Z with P(Z = k) proportional to
    exp(-epsilon |k|), exact for |Z| < 2**24 (P[|Z| >= 2**24] < 2 exp(-epsilon 2**24),
    below 2**-64 for epsilon >= 2.7e-6). Adding it to an integer count below 2**24 in
    float32 yields the correctly rounded ``count + Z``; :func:`noisy_count` adds in
    integer arithmetic and is exact for every count.
    """
    hi, lo = _discrete_laplace_words(key, _concrete_epsilons(epsilon))
    return _words_to_float32(hi, lo)


def noisy_count(key: jax.Array, true_counts: jax.Array, epsilon) -> jax.Array:
    """Discrete Laplace mechanism for counts: ``|S| + Z``, P(Z = k) ∝ exp(-epsilon |k|).

    Privacy: a count has sensitivity 1 under add/remove-one and the discrete Laplace
    mechanism with P(Z = k) ∝ exp(-epsilon |k|) is (epsilon, 0)-DP for sensitivity-1
    integer queries (the ratio of neighbouring probabilities is at most e^epsilon at
    every integer; Ghosh, Roughgarden and Sundararajan 2009; the discrete analogue of
    Corollary 1). The entries of one call count disjoint sets (the nodes of one
    level), so the whole call is (epsilon, 0)-DP by parallel composition, up to the
    sampler's total-variation error of at most 7e-18 per entry (see the notes above
    :func:`count_noise`). Noise scale 1/epsilon; variance 2 r / (1 - r)**2, r = e^-epsilon.

    Args:
      key: PRNG key (one ``jax.random.bits`` call, see ``_discrete_laplace_words``).
      true_counts: integer counts in [0, 2**31), any shape (may be traced).
      epsilon: concrete budget, a scalar or one per entry (broadcast to the counts).

    Returns:
      float32 noisy counts: the exact integer ``|S| + Z`` converted to float32 once.
    """
    counts = jnp.asarray(true_counts).astype(jnp.int32)
    epsilon = np.broadcast_to(_concrete_epsilons(epsilon), counts.shape)
    noise_hi, noise_lo = _discrete_laplace_words(key, epsilon)
    hi, lo = _canonical_words(jnp.right_shift(counts, _WORD_BITS) + noise_hi,
                              jnp.bitwise_and(counts, _WORD_MASK) + noise_lo)
    return _words_to_float32(hi, lo)


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


# --------------------------------------------------------------------- exponential
def exponential_mechanism(key: jax.Array, scores: jax.Array, valid: jax.Array,
                          epsilon, sensitivity) -> jax.Array:
    """Exponential mechanism over a batch of candidate sets (Definition 4, fixed).

    Selects index i of ``scores[b, ..., i]`` (flattened over the trailing axes
    after the batch axis) with probability proportional to
    ``exp(epsilon * score_i / (2 * sensitivity_b))`` among the ``valid`` candidates.
    The paper prints exp(eps f / Delta_f); because the score is not monotone in the
    data the factor 2 is needed for epsilon-DP (McSherry and Talwar, 2007).

    Privacy: (epsilon, 0)-DP per batch row when every score of that row changes by
    at most ``sensitivity[b]`` between neighbours; rows over disjoint sets compose
    in parallel. Invalid candidates have probability exactly 0.

    Sampling: exact inverse-CDF sampling: one uniform per row against the
    cumulative weights, instead of one Gumbel draw per candidate. Floating-point
    caveat: probabilities are computed in float32 after subtracting the row
    maximum; a candidate whose probability is below about 1e-38 relative to the
    best is never selected, and the cumulative sums (blocked, see
    :func:`dpm_jax._arrays.cumsum_last`) carry a relative rounding error of about
    1e-6, by which the selection probabilities may deviate.

    Args:
      key: PRNG key.
      scores: (batch, groups, candidates) array.
      valid: boolean mask with the same shape.
      epsilon: privacy parameter (scalar).
      sensitivity: (batch,) positive sensitivities.

    Returns:
      (group_index, candidate_index), two int32 arrays of shape (batch,). Rows
      with no valid candidate return (0, 0).
    """
    uniforms = jax.random.uniform(key, (scores.shape[0],), dtype=jnp.float32)
    return select_with_uniforms(uniforms, scores, valid, epsilon, sensitivity)


def select_with_uniforms(uniforms: jax.Array, scores: jax.Array, valid: jax.Array, epsilon,
                         sensitivity) -> tuple[jax.Array, jax.Array]:
    """The sampler of :func:`exponential_mechanism` driven by given uniforms.

    ``uniforms`` is (batch,), i.i.d. U[0, 1), one per row. Lets a caller draw the
    uniforms of many mechanism runs in one call (one PRNG invocation instead of
    one per run).
    """
    batch, groups, candidates = scores.shape
    logits = epsilon * scores / (2.0 * jnp.reshape(sensitivity, (batch, 1, 1)))
    logits = jnp.where(valid, logits, -jnp.inf).reshape(batch, groups * candidates)
    row_max = jnp.max(logits, axis=1, keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    weights = jnp.exp(logits - row_max)  # exactly 0 where invalid
    cumulative = cumsum_last(weights)
    index = jnp.sum(cumulative <= uniforms[:, None] * cumulative[:, -1:], axis=-1)
    # uniform * total can round up to total; never step past the last positive weight.
    last_positive = jnp.max(jnp.where(weights > 0, jnp.arange(groups * candidates), 0), axis=-1)
    index = jnp.minimum(index, last_positive).astype(jnp.int32)
    return index // candidates, index % candidates


# ------------------------------------------------------------------------- Gaussian
def _std_normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP.

    Analytic Gaussian mechanism (Balle and Wang, ICML 2018, Theorem 8): the
    Gaussian mechanism with L2 sensitivity Delta is (epsilon, delta)-DP iff
        Phi(Delta/(2 sigma) - epsilon sigma/Delta)
          - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta.
    The left side decreases in sigma; we bisect on it (in float64, on the host:
    the result only depends on public numbers) and return an upper end of the
    final bracket, so the returned sigma always satisfies the condition.
    """
    if epsilon <= 0 or not 0 < delta < 1 or sensitivity <= 0:
        raise ValueError("analytic_gaussian_sigma needs epsilon > 0, 0 < delta < 1, sensitivity > 0")

    def privacy_loss_delta(sigma):
        a = sensitivity / (2.0 * sigma)
        b = epsilon * sigma / sensitivity
        tail = _std_normal_cdf(-a - b)
        # e^epsilon * tail in log space: no overflow for large epsilon.
        scaled_tail = 0.0 if tail == 0.0 else math.exp(min(epsilon + math.log(tail), 700.0))
        return _std_normal_cdf(a - b) - scaled_tail

    # Aim slightly below delta: near the root the float64 evaluation of the
    # difference above cancels, and the margin keeps the true delta below target.
    target = delta * (1.0 - 1e-9)
    low, high = 1e-12 * sensitivity, sensitivity
    while privacy_loss_delta(high) > target:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if privacy_loss_delta(mid) > target:
            low = mid
        else:
            high = mid
    return high


def gaussian_noise(key: jax.Array, shape: tuple[int, ...], sigma) -> jax.Array:
    """N(0, sigma^2) noise of the given shape (float32), by the Box-Muller transform.

    z = sqrt(-2 ln u1) cos(2 pi u2) with u1 in (0, 1], u2 in [0, 1) float32
    uniforms: exactly standard normal in real arithmetic. Floating-point caveat:
    u1 lives on a grid of 2**-24, so |z| <= sqrt(2 ln 2**24) ~ 5.8 (the tail beyond,
    probability ~1e-8, is cut), and like any textbook floating-point sampler it is
    not hardened against the attacks on low-order bits of Mironov (2012).
    (Box-Muller rather than JAX's erfinv-based sampler: the same distribution at a
    fraction of the compile time.)
    """
    size = math.prod(shape)
    # one flat draw (compiles faster than a multi-axis one), reshaped
    uniforms = jax.random.uniform(key, (2 * size,), dtype=jnp.float32).reshape((2,) + tuple(shape))
    radius = jnp.sqrt(-2.0 * jnp.log1p(-uniforms[0]))  # 1 - u1 in (0, 1]
    return sigma * radius * jnp.cos(2.0 * jnp.pi * uniforms[1])
