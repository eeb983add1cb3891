"""Statistical and exact tests of the DP mechanisms (dpm_jax/mechanisms.py).

Every statistical test uses a fixed key and a key-independent threshold, and states
the probability with which a *correct* implementation would fail it (over the
choice of key). A failure at these thresholds is therefore strong evidence of a
wrong distribution, not bad luck.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

from dpm_jax import Budget, DPMConfig
from dpm_jax.budget import allocate
from dpm_jax import exact, mechanisms
from dpm_jax.mechanisms import (
    EM_DIGITS,
    EM_EPSILON_MARGIN,
    EM_FRACTION_BITS,
    EM_TRIES,
    _geometric_bit_thresholds,
    _geometric_num_bits,
    _scale_as_dyadic,
    cdp_delta,
    count_noise,
    count_offset,
    discrete_gaussian_multiplier,
    discrete_gaussian_noise,
    discrete_gaussian_table,
    discrete_laplace_tail,
    em_exponent_scale,
    em_sampler_tv,
    em_weight_table,
    em_weights,
    exponential_mechanism,
    discrete_laplace_count,
    select_with_bits,
)
from conftest import USERS_COMPILER_OPTIONS

P_FAIL = 1e-3  # per-test false-failure probability of every statistical test below


def int_values(x: exact.Int) -> np.ndarray:
    """The exact values of a two-limb Int as an int64 array (low + high 2**30)."""
    low, high = (np.asarray(limb).astype(np.int64) for limb in x.limbs)
    assert np.all((low >= 0) & (low < 2**30)), "the low limb must be canonical"
    return low + high * 2**30


def discrete_laplace_pmf(epsilon: float, k: np.ndarray) -> np.ndarray:
    r = math.exp(-epsilon)
    return (1 - r) / (1 + r) * r ** np.abs(k)


def chi_square_pvalue(observed: np.ndarray, expected_probability: np.ndarray) -> float:
    """Pearson chi-square p-value; bins with expected count < 5 are pooled into one."""
    expected = expected_probability * observed.sum()
    small = expected < 5
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    expected = expected * observed.sum() / expected.sum()
    return stats.chisquare(observed, expected).pvalue


def integer_histogram(values: np.ndarray, epsilon: float, mass: float = 1e-9):
    """Observed counts on [-m, m] plus the two tails, with the ideal probabilities."""
    r = math.exp(-epsilon)
    m = max(1, math.ceil(math.log(1.0 / mass) / epsilon))
    ks = np.arange(-m, m + 1)
    observed = np.array([np.sum(values < -m)] + [np.sum(values == k) for k in ks] + [np.sum(values > m)])
    tail = r ** (m + 1) / (1 + r)
    probability = np.concatenate([[tail], discrete_laplace_pmf(epsilon, ks), [tail]])
    return observed, probability


# ----------------------------------------------------------------- discrete Laplace
@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 4.0])
def test_discrete_laplace_matches_its_pmf(epsilon):
    """Chi-square over 200k draws: false-failure probability <= 1e-3 at p < 1e-3."""
    noise = count_noise(jax.random.key(11), np.full(200_000, epsilon))
    assert isinstance(noise, exact.Int) and noise.limbs[0].dtype == jnp.int32
    z = int_values(noise)
    observed, probability = integer_histogram(z, epsilon)
    assert chi_square_pvalue(observed, probability) > P_FAIL
    # The scale, checked directly: Var Z = 2r/(1-r)^2. 200k draws put the sample
    # variance within 5% of it with probability > 1 - 1e-3 for these epsilons.
    r = math.exp(-epsilon)
    assert abs(z.var() / (2 * r / (1 - r) ** 2) - 1) < 0.05


@pytest.mark.parametrize("partitionable", [True, False])
def test_random_words_are_jax_random_bits_of_the_same_shape(partitionable):
    # The samplers draw flat and reshape (a faster compile); the words, hence every release,
    # must be those of jax.random.bits over the multi-axis shape, under either threefry mode.
    shapes = [(7,), (3, 5), (4, 64, 7), (2, 3, 2, 5)]
    with jax.threefry_partitionable(partitionable):
        for i, shape in enumerate(shapes):
            key = jax.random.key(i)
            expected = jax.random.bits(key, shape, dtype=jnp.uint32)
            np.testing.assert_array_equal(mechanisms.random_words(key, shape), expected)
            batched = jax.vmap(lambda k: mechanisms.random_words(k, shape))(jax.random.split(key, 3))
            np.testing.assert_array_equal(batched[1], jax.random.bits(jax.random.split(key, 3)[1], shape, jnp.uint32))


def test_count_noise_uses_each_entrys_epsilon():
    """One call, two budgets interleaved: each half matches its own pmf (p < 1e-3 fails)."""
    epsilons = np.tile([0.2, 2.0], 100_000)
    z = int_values(count_noise(jax.random.key(12), epsilons))
    for epsilon in (0.2, 2.0):
        observed, probability = integer_histogram(z[epsilons == epsilon], epsilon)
        assert chi_square_pvalue(observed, probability) > P_FAIL / 2


def test_geometric_digit_probabilities_are_exact_to_2_pow_minus_64():
    """Each binary digit of G is Bernoulli(T_i / 2**64) with |T_i/2**64 - p_i| < 2**-64."""
    mpmath.mp.dps = 60
    for epsilon in (1e-6, 0.013, 0.5, 1.0, 7.0, 40.0):
        num_bits = _geometric_num_bits(epsilon)
        # the cut tail P[G >= 2**K] = exp(-epsilon 2**K) is at most 2**-64
        assert epsilon * 2.0**num_bits >= 64 * math.log(2)
        thresholds = _geometric_bit_thresholds(epsilon, num_bits)
        for i, threshold in enumerate(thresholds):
            p = 1 / (1 + mpmath.exp(mpmath.mpf(epsilon) * 2**i))
            error = mpmath.mpf(threshold) / mpmath.mpf(2) ** 64 - p
            assert -(mpmath.mpf(2) ** -64) < error <= 0


def test_digit_decomposition_reproduces_the_geometric_pmf():
    """prod_i Bernoulli(p_i) over the binary digits of k equals (1 - r) r**k (exactly)."""
    mpmath.mp.dps = 40
    epsilon = 0.37
    num_bits = _geometric_num_bits(epsilon)
    r = mpmath.exp(-mpmath.mpf(epsilon))
    p = [1 / (1 + mpmath.exp(mpmath.mpf(epsilon) * 2**i)) for i in range(num_bits)]
    for k in (0, 1, 2, 5, 17, 100, 2**num_bits - 1):
        mass = mpmath.mpf(1)
        for i in range(num_bits):
            mass *= p[i] if (k >> i) & 1 else 1 - p[i]
        ideal = (1 - r) * r**k / (1 - r ** (2**num_bits))  # the geometric conditioned on G < 2**K
        assert abs(mass / ideal - 1) < mpmath.mpf(10) ** -30


def test_noisy_count_is_count_plus_integer_noise():
    counts = jnp.array([0, 1, 7, 1000, 2**20], jnp.int32)
    key = jax.random.key(3)
    released = discrete_laplace_count(key, counts, 0.5)
    noise = count_noise(key, np.full(counts.shape, 0.5))
    assert isinstance(released, exact.Int)
    np.testing.assert_array_equal(int_values(released), np.asarray(counts) + int_values(noise))
    # the noise is not identically zero (200k draws above show its law; here: it is added)
    assert np.any(int_values(noise) != 0)


def test_noisy_count_is_exact_integer_arithmetic_for_large_counts():
    """Near 2**31 the released integer is still exactly |S| + Z (no int32 wrap, no rounding)."""
    counts = jnp.array([2**24 + 1, 2**30 + 3, 2**31 - 2, 2**31 - 1], jnp.int32)
    key = jax.random.key(4)
    released = int_values(discrete_laplace_count(key, counts, 0.01))
    noise = int_values(count_noise(key, np.full(counts.shape, 0.01)))
    assert np.any(noise > 2)  # some released values exceed int32: the second limb is needed
    np.testing.assert_array_equal(released, np.asarray(counts).astype(np.int64) + noise)
    # to_float32 is the correctly rounded float of the exact integer (display only)
    as_float = np.asarray(exact.to_float32(discrete_laplace_count(key, counts, 0.01)))
    np.testing.assert_array_equal(as_float, released.astype(np.float32))


def test_tiny_epsilon_noise_is_exact_and_large():
    """Scale 1/epsilon: at epsilon = 1e-12 the noise needs both limbs; 3.0 stays small."""
    z = int_values(count_noise(jax.random.key(5), np.array([1e-12, 1e-16, 3.0])))
    # |Z| < 2**60 always (K <= 60 digits); for 1e-12, P[|Z| < 2**20] < 2**20 * 1e-12 ~ 1e-6
    assert np.all(np.abs(z) < 2**61)
    assert abs(z[0]) > 2**20 and abs(z[1]) > 2**20
    assert abs(z[2]) < 40  # P[|Z| >= 40] = 2 e^-120 / (1 + e^-3): never


def test_noisy_count_under_jit_and_vmap():
    f = jax.jit(jax.vmap(lambda k, c: discrete_laplace_count(k, c, 1.0)))
    keys = jax.random.split(jax.random.key(6), 4)
    out = f(keys, jnp.arange(4, dtype=jnp.int32))
    assert isinstance(out, exact.Int) and out.limbs[0].shape == (4,)
    # each lane equals the un-vmapped call with its own key
    expected = [
        int(int_values(discrete_laplace_count(k, jnp.array([c], jnp.int32), 1.0))[0]) for k, c in zip(keys, range(4))
    ]
    np.testing.assert_array_equal(int_values(out), expected)


def test_count_epsilon_must_be_concrete_and_positive():
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(lambda e: count_noise(jax.random.key(0), e))(jnp.ones(3))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            count_noise(jax.random.key(0), np.array([1.0, bad]))


# ------------------------------------------------------------------- count offset
@pytest.mark.parametrize(
    "epsilon,delta", [(1.0, 1e-6), (0.04, 6.7e-8), (0.3, 0.01), (2.5, 0.2), (1e-3, 1e-9), (7.0, 1e-12)]
)
def test_count_offset_is_the_smallest_valid_integer(epsilon, delta):
    """P[Z > lambda] <= delta exactly, and lambda - 1 would not do (checked in 50 digits)."""
    mpmath.mp.dps = 50
    lam = count_offset(epsilon, delta)
    assert lam == int(lam)
    r = mpmath.exp(-mpmath.mpf(epsilon))

    def exceed(offset):  # P[Z > offset] = P[Z >= offset + 1] = r**(offset+1)/(1+r)
        return r ** (int(offset) + 1) / (1 + r)

    assert exceed(lam) <= delta
    if lam > -1:
        assert exceed(lam - 1) > delta
    paper = -math.log(2 * delta) / epsilon  # Equation 1, for the continuous Laplace
    assert paper - 1 <= lam <= paper + 1
    assert discrete_laplace_tail(epsilon, int(lam) + 1) <= delta * (1 + 1e-12)


@pytest.mark.parametrize("epsilon,delta", [(0.5, 0.02), (2.0, 0.05), (0.1, 0.003)])
def test_shifted_noisy_count_underestimates_with_probability_one_minus_delta(epsilon, delta):
    """Empirically P[n~ - lambda > |S|] <= delta_cnt (Definition 8, Corollary 2).

    200k draws; fails only if the Clopper-Pearson 1 - 1e-3 lower bound of the
    frequency exceeds delta (false-failure probability <= 1e-3). It also must be
    close to the exact value r**(lambda+1)/(1+r) (two-sided 1 - 1e-3 interval).
    """
    size = 37
    lam = count_offset(epsilon, delta)
    released = int_values(discrete_laplace_count(jax.random.key(21), jnp.full(200_000, size), epsilon))
    exceed = int(np.sum(released - lam > size))
    lower = stats.beta.ppf(P_FAIL, exceed, 200_000 - exceed + 1) if exceed else 0.0
    assert lower <= delta
    exact = discrete_laplace_tail(epsilon, int(lam) + 1)
    interval = stats.binomtest(exceed, 200_000).proportion_ci(1 - P_FAIL)
    assert interval.low <= exact <= interval.high


def test_allocation_uses_the_count_offset_of_the_count_mechanism():
    for budget, config in [(Budget(1.0, 1e-6), DPMConfig(tau_r=7)), (Budget(0.3, 1e-3), DPMConfig(tau_r=3))]:
        allocation = allocate(budget, config, 2)
        expected = tuple(count_offset(e, d) for e, d in zip(allocation.count_epsilons, allocation.count_deltas))
        assert allocation.count_offsets == expected


# ---------------------------------------------------------- exponential mechanism
# The realized law of a selection is computed exactly from the integer weights the
# device computes: P(i) = w_i / W (Python ints), up to the all-tries-rejected event
# (probability <= 2**-EM_TRIES, included in em_sampler_tv).
TABLE = tuple(jnp.asarray(t) for t in em_weight_table())
GAMMA = EM_EPSILON_MARGIN / 2  # the documented multiplicative error of each probability
_em_weights = jax.jit(em_weights)


def make_int(values) -> exact.Int:
    """Python integers (|v| < 2**58) as a two-limb Int."""
    values = np.array(values, dtype=object)
    low = np.vectorize(lambda v: int(v) & exact.LIMB_MASK, otypes=[np.int64])(values)
    high = np.vectorize(lambda v: int(v) >> exact.LIMB_BITS, otypes=[np.int64])(values)
    return exact.Int((jnp.asarray(low, jnp.int32), jnp.asarray(high, jnp.int32)))


def integer_weights(scores, valid, epsilon, sensitivity):
    """(weights as Python ints (rows, M), the float32 exponent scale per row)."""
    sensitivity = jnp.broadcast_to(jnp.asarray(sensitivity, jnp.float32), (len(scores),))
    scale = em_exponent_scale(epsilon, sensitivity)
    digits = _em_weights(TABLE, make_int(scores), jnp.asarray(valid), scale)
    assert len(digits) == 5
    weights = np.zeros(np.shape(valid), dtype=object)
    for i, digit in enumerate(digits):
        digit = np.asarray(digit)
        assert np.all((digit >= 0) & (digit < 2**12)), "digits must be canonical 12-bit"
        weights = weights + digit.astype(np.int64).astype(object) * (1 << (12 * i))
    return weights, np.asarray(scale)


def dyadic_scale(scale) -> list:
    """c' = c_num 2**-(c_shift + F) per row, the base-2 exponent scale the weights realize."""
    numerator, shift = (np.asarray(a) for a in _scale_as_dyadic(jnp.asarray(scale)))
    return [mpmath.mpf(int(n)) / mpmath.mpf(2) ** (int(s) + EM_FRACTION_BITS) for n, s in zip(numerator, shift)]


def ideal_law(scores, valid, base2_scale):
    """P(i) ∝ 2**(c G_i) over the valid candidates, 40 digits."""
    best = max(int(s) for s, v in zip(scores, valid) if v)
    weights = [mpmath.power(2, -base2_scale * (best - int(s))) if v else mpmath.mpf(0) for s, v in zip(scores, valid)]
    total = mpmath.fsum(weights)
    return [w / total for w in weights]


def realized_law(weights):
    total = sum(weights)
    return [mpmath.mpf(w) / total for w in weights]


EM_EPSILON, EM_SENSITIVITY = 0.7, 5  # c = 0.0505 per score unit: below the 2**-3 cap
EM_ROWS = [  # (scores, valid); rows of M = 8
    ([0, 1, 2, 3, 10, -5, 7, 9], [True] * 8),
    ([5] * 8, [True, True, False, True, True, True, True, True]),  # ties and an invalid one
    ([0, 100, 200, 300, 400, 600, 800, 1000], [True] * 8),  # tiny probabilities, zero weights
    (
        [2**50, 2**50 - 3, 2**50 - 40, -(2**50), 0, 2**50 - 300, 2**50 - 1, -3],
        [True, True, True, True, False, True, True, True],
    ),  # gaps of 2**51: weight exactly 0
    (
        [-(2**40), -(2**40) + 7, -(2**40) - 11, 17, -(2**40), 3, 4, 5],
        [True, True, True, False, True, False, False, False],
    ),  # best candidate masked out
    ([0, -(2**29), 2**29, 2**30 - 1, -(2**30) + 1, 12, 2**30 + 5, 2**30 - 60], [True] * 8),
]
EM_SCORES = [row for row, _ in EM_ROWS]
EM_VALID = np.array([valid for _, valid in EM_ROWS])


@functools.lru_cache(maxsize=None)
def em_case(epsilon, sensitivity):
    return integer_weights(EM_SCORES, EM_VALID, epsilon, sensitivity)


def test_em_weights_realize_2_pow_minus_dyadic_scale_times_gap():
    """Each weight is 2**59 2**(-c' x_i) up to the documented errors, exactly checked.

    With x_i = G* - G_i and c' the dyadic scale: 2**59 2**(-c' x)(1 - 2**-29) - 2 < w
    <= 2**59 2**(-c' x) 2**(1.25 2**-F)(1 + 2**-29) (exponent floored by at most 1.25
    units of 2**-F, table relative error 2**-29, two floors); the best weighs 2**59.
    """
    mpmath.mp.dps = 40
    weights, scale = em_case(EM_EPSILON, EM_SENSITIVITY)
    for row, (scores, valid) in enumerate(EM_ROWS):
        c = dyadic_scale(scale)[row]
        best = max(s for s, v in zip(scores, valid) if v)
        assert max(weights[row]) == 2**59
        for w, s, v in zip(weights[row], scores, valid):
            if not v:
                assert w == 0, "an invalid candidate must weigh exactly 0"
                continue
            u = mpmath.mpf(2) ** 59 * mpmath.power(2, -c * (best - s))
            assert u * (1 - mpmath.mpf(2) ** -29) - 2 < w
            assert w <= u * mpmath.power(2, 1.25 * 2.0**-EM_FRACTION_BITS) * (1 + mpmath.mpf(2) ** -29)


def test_em_dyadic_scale_is_the_requested_scale_rounded_down_to_15_bits():
    """c' <= c always (privacy); c' >= c (1 - 2**-14) (utility) while c 2**F < 2**15."""
    epsilons = np.array([0.011, 0.1, 0.7, 1.0, 3.0, 9.0])
    for sensitivity in (1e-3, 0.37, 5.0, 1000.0, 2.0**20):
        scale = np.asarray(em_exponent_scale(epsilons, np.full(epsilons.shape, sensitivity, np.float32)))
        for c, c_prime in zip(scale, dyadic_scale(scale)):
            assert c_prime <= mpmath.mpf(float(c))
            if c * 2**EM_FRACTION_BITS < 2**15:
                assert c_prime >= mpmath.mpf(float(c)) * (1 - 2.0**-14)


def test_em_large_exponent_scales_are_rounded_down_never_up():
    """The documented cap: scales of 2**-3 bits per score unit and more become just below
    2**-3 (never larger, so privacy holds); the engine's integer scores are scaled so
    that their scales stay far below it (interval utility in units of 2**-10, split
    score sensitivity >= 2**10)."""
    scale = np.asarray(em_exponent_scale(1.0, jnp.ones((1,), jnp.float32)))  # c = 0.72
    realized = dyadic_scale(scale)[0]
    assert realized <= mpmath.mpf(float(scale[0]))
    assert realized == mpmath.mpf(2**15 - 1) / 2**EM_FRACTION_BITS


@pytest.mark.parametrize("epsilon,sensitivity", [(EM_EPSILON, EM_SENSITIVITY), (0.05, 1), (2.0, 3000)])
def test_em_realized_law_is_the_ideal_law_at_epsilon_minus_margin(epsilon, sensitivity):
    """(a) Realized law vs ideal P(i) ∝ exp(eps' G_i / (2 Delta)), eps' = eps - EM_EPSILON_MARGIN.

    Ratios realized/ideal lie in exp(+-(GAMMA + max(r_i, R) + 2 / w_i)) for ideal
    P > 1e-12, where r_i = 2**-14 ln2 c x_i is the documented 15-bit rounding-down of
    the scale (0 for the best candidates; R = ln sum_j q_j e^(r_j) its effect through
    the normalizer) and 2 / w_i the flooring of the weight to an integer (a TV term).
    Total variation to the ideal is <= em_sampler_tv(M) + sum_i q_i (e^(slack_i) - 1).
    And against the ideal at the dyadic scale itself (no rounding term), the ratios
    are within exp(+-GAMMA) up to the same flooring term.
    """
    mpmath.mp.dps = 40
    weights, scale = em_case(epsilon, sensitivity)
    c_prime = dyadic_scale(scale)
    c = (mpmath.mpf(epsilon) - EM_EPSILON_MARGIN) / (2 * sensitivity * mpmath.log(2))
    m = len(EM_SCORES[0])
    for row, (scores, valid) in enumerate(EM_ROWS):
        p = realized_law(weights[row])
        for base2_scale, rounding in ((c, 2.0**-14), (c_prime[row], 0.0)):
            q = ideal_law(scores, valid, base2_scale)
            best = max(s for s, v in zip(scores, valid) if v)
            # r_i: the scale's rounding moves candidate i by a factor in [1, e^r_i] before
            # normalization; R = ln sum_j q_j e^(r_j) bounds the normalizer's share
            r = [rounding * math.log(2) * float(c) * (best - s) if v else 0.0 for s, v in zip(scores, valid)]
            big_r = mpmath.log(mpmath.fsum(q_j * mpmath.exp(r_j) for q_j, r_j in zip(q, r)))
            tv_bound = mpmath.mpf(em_sampler_tv(m))
            for i, (p_i, q_i, w) in enumerate(zip(p, q, weights[row])):
                if not valid[i]:
                    assert p_i == 0
                    continue
                slack = GAMMA + max(mpmath.mpf(r[i]), big_r)
                tv_bound += q_i * (mpmath.exp(slack) - 1)
                if q_i > 1e-12:
                    assert abs(mpmath.log(p_i / q_i)) <= slack + 2 / mpmath.mpf(w), (row, i)
            tv = mpmath.fsum(abs(a - b) for a, b in zip(p, q)) / 2
            assert tv <= tv_bound, (row, tv, tv_bound)


def neighbours(scores, valid, sensitivity, rng):
    """Neighbour score vectors: every score moved by at most ``sensitivity``."""
    scores = np.array(scores, dtype=object)
    out = [scores + sensitivity, scores - sensitivity]
    for j in range(len(scores)):  # push one candidate up and all others down, and back
        push = np.full(len(scores), -sensitivity, dtype=object)
        push[j] = sensitivity
        out += [scores + push, scores - push]
    out += [scores + rng.integers(-sensitivity, sensitivity + 1, len(scores)).astype(object) for _ in range(4)]
    return out


@pytest.mark.parametrize("epsilon,sensitivity", [(EM_EPSILON, EM_SENSITIVITY), (0.05, 1), (1.0, 1), (0.2, 2**20)])
def test_em_neighbouring_scores_are_epsilon_delta_indistinguishable(epsilon, sensitivity):
    """(b) For every score vector and neighbour pair, the realized laws P, P' satisfy:

    * the exact hockey-stick divergence sum_i max(0, P_i - e^eps P'_i) -- the smallest
      delta for which the pair is (eps, delta)-indistinguishable -- is at most the
      documented delta (1 + e^eps) em_sampler_tv(M), both ways;
    * no candidate has P_i > 0 = P'_i unless P_i < em_sampler_tv(M);
    * |ln(P_i / P'_i)| <= eps wherever both exceed em_sampler_tv(M), up to the
      flooring of the weights (2 / w_i + 2 / w'_i, a TV term; zero for w >= 2**40).
    (1.0, 1) exercises the clamped scale (see the xfail above): private, just smaller.
    """
    mpmath.mp.dps = 40
    rng = np.random.default_rng(17)
    m = len(EM_SCORES[0])
    tv = mpmath.mpf(em_sampler_tv(m))
    delta = (1 + mpmath.exp(epsilon)) * tv
    pairs = [(s, n) for s in EM_SCORES for n in neighbours(s, None, sensitivity, rng)]
    rows = [s for s, _ in pairs] + [n for _, n in pairs]
    valid = np.concatenate([np.repeat(EM_VALID, len(pairs) // len(EM_SCORES), axis=0)] * 2)
    weights, _ = integer_weights([[int(v) for v in r] for r in rows], valid, epsilon, sensitivity)
    half = len(pairs)
    for k in range(half):
        w, w2 = weights[k], weights[half + k]
        p, p2 = realized_law(w), realized_law(w2)
        for a, b in ((p, p2), (p2, p)):
            assert mpmath.fsum(max(0, x - mpmath.exp(epsilon) * y) for x, y in zip(a, b)) <= delta
        for i in range(m):
            if (p[i] > 0) != (p2[i] > 0):
                assert max(p[i], p2[i]) < tv
            if p[i] > tv and p2[i] > tv:
                floor_slack = 2 / mpmath.mpf(w[i]) + 2 / mpmath.mpf(w2[i])
                assert abs(mpmath.log(p[i] / p2[i])) <= epsilon + floor_slack, (k, i)


# Inverse-CDF selection, driven by constructed random words.
SELECT_M = 100  # four blocks of 32 candidates, the third one entirely invalid
_select = jax.jit(select_with_bits)


def select_case():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 40, SELECT_M)
    valid = rng.random(SELECT_M) < 0.7
    valid[64:96] = False
    valid[0] = False
    return scores, valid


def words_for(values, bit_length, rng, tries_values=None):
    """(rows, EM_TRIES, EM_DIGITS) uint32 words whose masked 12-bit digits spell ``values``.

    Garbage is put in the 20 unused high bits of every word and above ``bit_length``
    in the top digit: both must be ignored.
    """
    rows = len(values)
    words = rng.integers(0, 2**32, (rows, EM_TRIES, EM_DIGITS), dtype=np.uint64)
    words &= np.uint64(~np.uint64(0xFFF) & np.uint64(0xFFFFFFFF))
    columns = tries_values if tries_values is not None else [values]
    for t, column in enumerate(columns):
        for r, value in enumerate(column):
            value = int(value) + (int(rng.integers(0, 2**10)) << bit_length)  # high garbage
            for d in range(EM_DIGITS):
                words[r, t, d] |= np.uint64((value >> (12 * d)) & 0xFFF)
    return jnp.asarray(words.astype(np.uint32))


def test_select_with_bits_is_the_exact_inverse_cdf():
    """V in [C_(i-1), C_i) selects i: checked at both ends of every interval and inside.

    Also: V >= W in a try is rejected and the next try used; all tries rejected gives
    V = 0 (the first candidate of positive weight); invalid candidates (weight 0,
    empty intervals) are never selected; a row without valid candidates gives 0.
    """
    scores, valid = select_case()
    epsilon, sensitivity = 0.6, 2
    weights, scale = integer_weights([scores], valid[None], epsilon, sensitivity)
    weights = [int(w) for w in weights[0]]
    total = sum(weights)
    bit_length = total.bit_length()
    cumulative = np.cumsum(np.array(weights, dtype=object))
    rng = np.random.default_rng(6)
    targets, expected = [], []
    for i, w in enumerate(weights):
        if w == 0:
            continue
        start = int(cumulative[i]) - w
        for v in (start, start + w - 1, start + int(rng.integers(0, w))):
            targets.append(v)
            expected.append(i)
    first_positive = next(i for i, w in enumerate(weights) if w > 0)
    # rejection: try 0 at or above W (but below 2**L), try 1 the target
    rejected = [total + int(rng.integers(0, 2**bit_length - total)) for _ in targets]
    rejected[0] = total  # the boundary itself is rejected
    rows = len(targets)
    scores_rows = make_int(np.tile(scores, (2 * rows + 2, 1)))
    valid_rows = np.tile(valid, (2 * rows + 2, 1))
    valid_rows[-1] = False  # no valid candidate at all
    bits_direct = words_for(targets, bit_length, rng)
    bits_rejected = words_for(targets, bit_length, rng, tries_values=[rejected, targets])
    never = words_for(
        [total],
        bit_length,
        rng,
        tries_values=[[total + int(rng.integers(0, 2**bit_length - total))] for _ in range(EM_TRIES)],
    )
    bits = jnp.concatenate([bits_direct, bits_rejected, never, never])
    chosen = np.asarray(_select(bits, TABLE, scores_rows, jnp.asarray(valid_rows), jnp.full((2 * rows + 2,), scale[0])))
    np.testing.assert_array_equal(chosen[:rows], expected)
    np.testing.assert_array_equal(chosen[rows : 2 * rows], expected)
    assert chosen[2 * rows] == first_positive
    assert chosen[2 * rows + 1] == 0
    assert np.all(valid[chosen[: 2 * rows + 1]])
    assert {w > 0 for w in weights} == {True, False}  # the case does have empty intervals


@pytest.mark.slow
def test_exponential_mechanism_frequencies_match_the_integer_weights():
    # Long because: many draws of the exponential mechanism (11 s, 2 cores at load 10).
    """Chi-square of 200k selections (120k, 40k, 40k) against w_i / W (exact), per row.

    False-failure probability <= 1e-3 (p < 1e-3 / 3 per row). Invalid candidates are
    never selected (their probability is exactly 0). Power: the same draws reject the
    law with twice the exponent (the paper's exp(eps f / Delta), no factor 2).
    """
    scores = np.array([[0, 3, 5, 6, 9], [2, 2, 2, 2, 2], [10, 0, 7, 8, 4]])
    valid = np.array([[True] * 5, [True, False, True, True, True], [False, True, True, True, True]])
    epsilon, sensitivity = 1.0, 8
    draws = np.array([120_000, 40_000, 40_000])  # 200k in all
    batch = np.repeat(np.arange(3), draws)
    key = jax.random.key(31)
    chosen = np.asarray(
        jax.jit(exponential_mechanism, static_argnums=(4, 5), compiler_options=USERS_COMPILER_OPTIONS)(
            key, TABLE, make_int(scores[batch]), jnp.asarray(valid[batch]), epsilon, sensitivity
        )
    )
    weights, scale = integer_weights(scores, valid, epsilon, sensitivity)
    for row in range(3):
        observed = np.bincount(chosen[batch == row], minlength=5)
        assert observed[~valid[row]].sum() == 0, "a masked candidate was selected"
        probability = np.array([float(w) for w in realized_law(weights[row])])
        assert chi_square_pvalue(observed[valid[row]], probability[valid[row]]) > P_FAIL / 3
    c = float(dyadic_scale(scale)[0])
    wrong = 2.0 ** (2 * c * scores[0])
    observed = np.bincount(chosen[batch == 0], minlength=5)
    assert chi_square_pvalue(observed, wrong / wrong.sum()) < 1e-12


def test_exponential_mechanism_refuses_epsilon_below_margin():
    scores = make_int(np.zeros((1, 3), int))
    with pytest.raises(ValueError, match="margin"):
        exponential_mechanism(jax.random.key(0), TABLE, scores, jnp.ones((1, 3), bool), EM_EPSILON_MARGIN / 2, 1.0)


def test_em_weight_tables_are_exact_and_their_products_within_2_pow_minus_29():
    """A[i] = round(2**30 2**(-i/2**9)), B[l] = round(2**30 2**(-l/2**18)) exactly (80-digit
    arithmetic), and every product A[k >> 9] B[k & 511] (all 2**18 of them) is within a
    relative 2**-29 of 2**60 2**(-k/2**18); P(0) = 2**60, so the best weighs 2**59."""
    mpmath.mp.dps = 80
    coarse, fine = (np.asarray(t).astype(np.int64) for t in em_weight_table())
    assert coarse.shape == fine.shape == (512,)
    for table, step in ((coarse, 2**9), (fine, 2**EM_FRACTION_BITS)):
        for i in range(512):
            exact_value = mpmath.mpf(2) ** 30 * mpmath.power(2, -mpmath.mpf(i) / step)
            assert abs(table[i] - exact_value) <= 0.5
    assert coarse[0] * fine[0] == 2**60
    # products: exact ideal values from 256-bit fixed point, ratio multiplied in step by step
    bits = 256
    ratio = int(mpmath.floor(mpmath.power(2, -mpmath.mpf(1) / 2**EM_FRACTION_BITS) * 2**bits))
    value = 2**60 << bits
    for k in range(2**EM_FRACTION_BITS):
        product = int(coarse[k >> 9]) * int(fine[k & 511])
        assert abs((product << bits) - value) * 2**29 <= value, k
        value = value * ratio >> bits


# ----------------------------------------------------------------- exponent scale
def test_em_exponent_scale_never_exceeds_epsilon_minus_margin():
    """scale * sensitivity * 2 ln 2 * ratio^-1 <= epsilon - margin, in exact arithmetic,
    for float64 inputs cast to float32 (the guard must cover the casts)."""
    mpmath.mp.dps = 50
    rng = np.random.default_rng(9)
    epsilons = np.concatenate([[1e-5, 0.1, 0.3, 1 / 3, 0.7, 1.0, 2.0 / 3.0, 10.0], rng.uniform(1e-4, 10, 40)])
    sensitivities = np.concatenate([[1e-3, 0.1, 1.0, 3.0, 7.0, 1e6], np.exp(rng.uniform(-8, 15, 40))])
    ratios = np.concatenate([[1.0, 0.1, 1 / 3], rng.uniform(1e-3, 1, 40)])
    e, s, r = (a.ravel() for a in np.meshgrid(epsilons, sensitivities, ratios[:5], indexing="ij"))
    e2, s2, r2 = rng.choice(epsilons, 2000), rng.choice(sensitivities, 2000), rng.choice(ratios, 2000)
    e, s, r = np.concatenate([e, e2]), np.concatenate([s, s2]), np.concatenate([r, r2])
    e, s, r = e[e > EM_EPSILON_MARGIN * 2], s[e > EM_EPSILON_MARGIN * 2], r[e > EM_EPSILON_MARGIN * 2]
    scale = np.asarray(em_exponent_scale(e, s, r)).astype(np.float64)
    two_ln2 = 2 * mpmath.log(2)
    margin = mpmath.mpf(EM_EPSILON_MARGIN)
    for c, eps, sens, ratio in zip(scale, e, s, r):
        spent = mpmath.mpf(c) * mpmath.mpf(sens) * two_ln2 / mpmath.mpf(ratio)
        assert spent <= mpmath.mpf(eps) - margin
        assert spent >= (mpmath.mpf(eps) - margin) * (1 - 2.0**-18)  # and not needlessly small


# ------------------------------------------------------------------ discrete Gaussian
def discrete_gaussian_pmf(sigma: float, half_width: int) -> tuple[np.ndarray, list]:
    """(k, exact pmf of N_Z(0, sigma^2) on |k| <= half_width), normalized over all integers."""
    mpmath.mp.dps = 50
    s2 = 2 * mpmath.mpf(sigma) ** 2
    total = mpmath.nsum(lambda k: mpmath.exp(-k * k / s2), [-mpmath.inf, mpmath.inf])
    ks = np.arange(-half_width, half_width + 1)
    return ks, [mpmath.exp(-(mpmath.mpf(int(k)) ** 2) / s2) / total for k in ks]


@pytest.mark.parametrize("sigma", [1.0, 3.5, 40.0])
def test_discrete_gaussian_matches_its_pmf(sigma):
    """Chi-square of 200k draws vs exp(-k^2 / (2 sigma^2)) / Z: false failure 1e-3.

    Also: integer draws within the table's support; symmetric (a two-sided binomial
    test of #positive vs #negative, false failure 1e-3); the variance within 3% of the
    pmf's (200k draws: relative sd of the sample variance <= 0.4%, so 3% is > 7 sd).
    Power: the same draws reject sigma * 1.05.
    """
    table = discrete_gaussian_table(sigma)
    draws = np.asarray(
        discrete_gaussian_noise(
            jax.random.key(41),
            jnp.asarray(table.thresholds_high),
            jnp.asarray(table.thresholds_low),
            table.support_min,
            (200_000,),
        )
    )
    assert draws.dtype == np.int32
    assert draws.min() >= table.support_min and draws.max() <= -table.support_min
    half = math.ceil(12 * sigma) + 2
    ks, pmf = discrete_gaussian_pmf(sigma, half)
    pmf = np.array([float(p) for p in pmf])
    observed = np.array([np.sum(draws == k) for k in ks])
    assert observed.sum() == draws.size  # nothing beyond 12 sigma (probability < 1e-30)
    assert chi_square_pvalue(observed, pmf) > P_FAIL
    wrong = np.exp(-(ks.astype(float) ** 2) / (2 * (1.05 * sigma) ** 2))
    assert chi_square_pvalue(observed, wrong / wrong.sum()) < P_FAIL
    positive, negative = int(np.sum(draws > 0)), int(np.sum(draws < 0))
    assert stats.binomtest(positive, positive + negative).pvalue > P_FAIL
    variance = float(np.sum(pmf * ks.astype(float) ** 2))
    assert abs(np.mean(draws.astype(float) ** 2) / variance - 1) < 0.03


def test_discrete_gaussian_table_is_within_its_tv_of_the_exact_pmf():
    """The table's implied pmf ((C_k - C_(k-1)) / 2**62) is within table.tv of the
    50-digit pmf (full support plus the cut tails), is symmetric, and tv < 1e-10.

    The high limb is read as an unsigned 32-bit word here (the intended C_k); the
    device reads it as int32, see the xfail test below.
    """
    for sigma in (3.5, 1.0, 300.0):  # 300: a long table, where the bound is mostly its 2K floors
        table = discrete_gaussian_table(sigma)
        assert table.tv < 1e-10
        high = table.thresholds_high.astype(np.int64) % 2**32
        low = table.thresholds_low.astype(np.int64)
        assert np.all((low >= 0) & (low < 2**31))
        cumulative = [0] + [int(hi) * 2**31 + int(lo) for hi, lo in zip(high, low)] + [2**62]
        mass = [b - a for a, b in zip(cumulative[:-1], cumulative[1:])]
        assert all(m >= 0 for m in mass)
        half = -table.support_min
        assert len(mass) == 2 * half + 1
        assert mass == mass[::-1], "the table must be symmetric"
        _, pmf = discrete_gaussian_pmf(sigma, half)
        inside = mpmath.fsum(abs(mpmath.mpf(m) / mpmath.mpf(2) ** 62 - p) for m, p in zip(mass, pmf))
        outside = 1 - mpmath.fsum(pmf)
        assert (inside + outside) / 2 <= table.tv


@pytest.mark.parametrize("sigma", [1.0, 300.0, 16384.0])
def test_gaussian_weights_are_within_their_stated_error(sigma):
    """w_k = exp(-k^2 / (2 sigma^2)) 2**128 to within 2k^2 (mechanisms.py's table notes), by 60 digits."""
    mpmath.mp.dps = 60
    half_width = math.ceil(sigma * math.sqrt(160 * math.log(2))) + 1
    weights = mechanisms._gaussian_weights(sigma, half_width)
    assert len(weights) == half_width + 1 and weights[0] == 2**128
    for k in range(0, half_width + 1, max(1, half_width // 300)):
        ideal = mpmath.exp(-(mpmath.mpf(k) ** 2) / (2 * mpmath.mpf(sigma) ** 2)) * mpmath.mpf(2) ** 128
        assert abs(weights[k] - ideal) <= max(1, 2 * k * k), k


@pytest.mark.parametrize("sigma", [1.0, 3.5, 40.0])
def test_discrete_gaussian_thresholds_as_stored_are_monotone(sigma):
    """What the device compares: C_k = high 2**31 + low with int32 high, non-decreasing, < 2**62."""
    table = discrete_gaussian_table(sigma)
    stored = table.thresholds_high.astype(np.int64) * 2**31 + table.thresholds_low.astype(np.int64)
    assert np.all(stored >= 0) and np.all(stored < 2**62) and np.all(np.diff(stored) >= 0)


# ------------------------------------------------------------ zCDP calibration
def cks_delta(rho: float, epsilon: float) -> mpmath.mpf:
    """inf_alpha of CKS 2020 Corollary 13, 50 digits: the root of d/dalpha of the log,
    2 alpha rho - rho - epsilon + ln(1 - 1/alpha) = 0 (increasing in alpha)."""
    mpmath.mp.dps = 50
    rho, epsilon = mpmath.mpf(rho), mpmath.mpf(epsilon)

    def slope(a):
        return 2 * a * rho - rho - epsilon + mpmath.log(1 - 1 / a)

    low, high = 1 + mpmath.mpf(10) ** -40, mpmath.mpf(2)
    while slope(high) < 0:
        high *= 2
    for _ in range(300):
        middle = (low + high) / 2
        low, high = (middle, high) if slope(middle) < 0 else (low, middle)
    a = (low + high) / 2
    log_delta = (a - 1) * (a * rho - epsilon) + a * mpmath.log(1 - 1 / a) - mpmath.log(a - 1)
    return min(mpmath.mpf(1), mpmath.exp(log_delta))


CDP_GRID = [(s, e) for s in (0.5, 1.0, 2.0, 5.0, 20.0, 100.0) for e in (0.01, 0.1, 0.5, 1.0, 3.0)]


@pytest.mark.parametrize("sigma,epsilon", CDP_GRID)
def test_cdp_delta_is_a_valid_and_tight_conversion(sigma, epsilon):
    """The continuous Gaussian (L2 sensitivity 1, std sigma) is exactly 1/(2 sigma^2)-zCDP,
    so its exact delta (Balle and Wang 2018) must not exceed cdp_delta; cdp_delta is
    >= the 50-digit infimum of Corollary 13 (never optimistic) and within 1e-6 of it;
    and it is below the Bun-Steinke bound exp(-(eps - rho)^2 / (4 rho)) for eps > rho.
    Where the true delta is below 1e-300, cdp_delta may underflow to 0."""
    rho = 1 / (2 * sigma**2)
    delta = cdp_delta(rho, epsilon)
    exact_delta = cks_delta(rho, epsilon)
    if exact_delta < 1e-300:  # below float64: cdp_delta's exp underflows to 0 (harmless)
        assert delta <= 1e-300 and balle_wang_delta(epsilon, sigma, 1.0) <= exact_delta
        return
    assert balle_wang_delta(epsilon, sigma, 1.0) <= delta
    assert exact_delta <= delta <= exact_delta * (1 + 1e-6)
    if epsilon > rho:
        assert delta <= mpmath.exp(-((mpmath.mpf(epsilon) - rho) ** 2) / (4 * mpmath.mpf(rho)))


def balle_wang_delta(epsilon: float, sigma: float, sensitivity: float) -> mpmath.mpf:
    """The exact delta of the Gaussian mechanism (Balle and Wang 2018, Theorem 8), 50 digits."""
    mpmath.mp.dps = 50
    a = mpmath.mpf(sensitivity) / (2 * mpmath.mpf(sigma))
    b = mpmath.mpf(epsilon) * mpmath.mpf(sigma) / mpmath.mpf(sensitivity)
    return mpmath.ncdf(a - b) - mpmath.exp(epsilon) * mpmath.ncdf(-a - b)


@pytest.mark.parametrize("epsilon,delta", [(0.6, 8e-7), (0.05, 1e-5), (1.0, 1e-10), (5.0, 1e-3), (0.01, 0.5)])
def test_discrete_gaussian_multiplier_is_valid_and_minimal(epsilon, delta):
    """cdp_delta(1/(2 m^2), eps) <= delta at m, and > delta at m (1 - 1e-6); the exact
    (50-digit) Corollary 13 delta also holds at m; and m exceeds the analytic Gaussian's
    exact requirement (zCDP conversion is never tighter than Balle-Wang)."""
    m = discrete_gaussian_multiplier(epsilon, delta)
    assert cdp_delta(1 / (2 * m * m), epsilon) <= delta
    assert cks_delta(1 / (2 * m * m), epsilon) <= delta
    smaller = m * (1 - 1e-6)
    assert cdp_delta(1 / (2 * smaller**2), epsilon) > delta
    assert balle_wang_delta(epsilon, m, 1.0) <= delta
