"""Statistical and exact tests of the DP mechanisms (dpm_jax/mechanisms.py).

Every statistical test uses a fixed key and a key-independent threshold, and states
the probability with which a *correct* implementation would fail it (over the
choice of key). A failure at these thresholds is therefore strong evidence of a
wrong distribution, not bad luck.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

from dpm_jax import Budget, DPMConfig
from dpm_jax.budget import allocate
from dpm_jax.mechanisms import (
    _geometric_bit_thresholds,
    _geometric_num_bits,
    analytic_gaussian_sigma,
    count_noise,
    count_offset,
    discrete_laplace_tail,
    exponential_mechanism,
    gaussian_noise,
    laplace_noise,
    noisy_count,
)

P_FAIL = 1e-3  # per-test false-failure probability of every statistical test below


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
    observed = np.array([np.sum(values < -m)] + [np.sum(values == k) for k in ks]
                        + [np.sum(values > m)])
    tail = r ** (m + 1) / (1 + r)
    probability = np.concatenate([[tail], discrete_laplace_pmf(epsilon, ks), [tail]])
    return observed, probability


# ----------------------------------------------------------------- discrete Laplace
@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 4.0])
def test_discrete_laplace_matches_its_pmf(epsilon):
    """Chi-square over 200k draws: false-failure probability <= 1e-3 at p < 1e-3."""
    z = np.asarray(count_noise(jax.random.key(11), np.full(200_000, epsilon)))
    assert np.all(z == np.round(z)), "count noise must be integer-valued"
    observed, probability = integer_histogram(z, epsilon)
    assert chi_square_pvalue(observed, probability) > P_FAIL
    # The scale, checked directly: Var Z = 2r/(1-r)^2. 200k draws put the sample
    # variance within 5% of it with probability > 1 - 1e-3 for these epsilons.
    r = math.exp(-epsilon)
    assert abs(z.var() / (2 * r / (1 - r) ** 2) - 1) < 0.05


def test_count_noise_uses_each_entrys_epsilon():
    """One call, two budgets interleaved: each half matches its own pmf (p < 1e-3 fails)."""
    epsilons = np.tile([0.2, 2.0], 100_000)
    z = np.asarray(count_noise(jax.random.key(12), epsilons))
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
            assert -mpmath.mpf(2) ** -64 < error <= 0


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
    released = noisy_count(key, counts, 0.5)
    noise = count_noise(key, np.full(counts.shape, 0.5))
    assert released.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(released), np.asarray(counts) + np.asarray(noise))


def test_noisy_count_is_exact_integer_arithmetic_for_large_counts():
    """Above 2**24 the float32 result is the rounding of the exact integer |S| + Z."""
    counts = jnp.array([2**24 + 1, 2**30 + 3, 2**31 - 2, 2**31 - 1], jnp.int32)
    key = jax.random.key(4)
    released = np.asarray(noisy_count(key, counts, 0.01))
    noise = np.asarray(count_noise(key, np.full(counts.shape, 0.01))).astype(np.int64)
    exact = np.asarray(counts).astype(np.int64) + noise  # noise is exact (|Z| << 2**24)
    np.testing.assert_array_equal(released, exact.astype(np.float32))


def test_tiny_epsilon_noise_stays_finite_and_integral():
    z = np.asarray(count_noise(jax.random.key(5), np.array([1e-12, 1e-16, 3.0])))
    assert np.all(np.isfinite(z)) and np.all(z == np.round(z))


def test_noisy_count_under_jit_and_vmap():
    f = jax.jit(jax.vmap(lambda k, c: noisy_count(k, c, 1.0)))
    keys = jax.random.split(jax.random.key(6), 4)
    out = f(keys, jnp.arange(4, dtype=jnp.int32))
    assert out.shape == (4,) and np.all(np.asarray(out) == np.round(np.asarray(out)))


def test_count_epsilon_must_be_concrete_and_positive():
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(lambda e: count_noise(jax.random.key(0), e))(jnp.ones(3))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            count_noise(jax.random.key(0), np.array([1.0, bad]))


# ------------------------------------------------------------------- count offset
@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-6), (0.04, 6.7e-8), (0.3, 0.01), (2.5, 0.2),
                                           (1e-3, 1e-9), (7.0, 1e-12)])
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
    released = np.asarray(noisy_count(jax.random.key(21), jnp.full(200_000, size), epsilon))
    exceed = int(np.sum(released - lam > size))
    lower = stats.beta.ppf(P_FAIL, exceed, 200_000 - exceed + 1) if exceed else 0.0
    assert lower <= delta
    exact = discrete_laplace_tail(epsilon, int(lam) + 1)
    interval = stats.binomtest(exceed, 200_000).proportion_ci(1 - P_FAIL)
    assert interval.low <= exact <= interval.high


def test_allocation_uses_the_count_offset_of_the_count_mechanism():
    for budget, config in [(Budget(1.0, 1e-6), DPMConfig()), (Budget(0.3, 1e-3), DPMConfig(tau_r=3))]:
        allocation = allocate(budget, config)
        expected = tuple(count_offset(e, d) for e, d in
                         zip(allocation.count_epsilons, allocation.count_deltas))
        assert allocation.count_offsets == expected


# ------------------------------------------------------------ continuous Laplace
def test_laplace_noise_scale_ks():
    """KS against Lap(scale) on 100k draws: false-failure probability 1e-3."""
    scale = 2.5
    x = np.asarray(laplace_noise(jax.random.key(7), (100_000,), scale))
    assert stats.kstest(x, stats.laplace(scale=scale).cdf).pvalue > P_FAIL
    # and the test has power: the wrong scale is rejected
    assert stats.kstest(x, stats.laplace(scale=scale * 1.05).cdf).pvalue < P_FAIL


# ------------------------------------------------------------------------ Gaussian
@pytest.mark.parametrize("sigma", [0.01, 1.0, 48.6])
def test_gaussian_noise_scale_ks(sigma):
    """KS against N(0, sigma^2) on 100k draws: false-failure probability 1e-3."""
    x = np.asarray(gaussian_noise(jax.random.key(8), (100_000,), sigma))
    assert stats.kstest(x, stats.norm(scale=sigma).cdf).pvalue > P_FAIL
    assert stats.kstest(x, stats.norm(scale=sigma * 1.05).cdf).pvalue < P_FAIL


def balle_wang_delta(epsilon: float, sigma: float, sensitivity: float) -> mpmath.mpf:
    """The exact delta of the Gaussian mechanism (Balle and Wang 2018, Theorem 8), 50 digits."""
    mpmath.mp.dps = 50
    a = mpmath.mpf(sensitivity) / (2 * mpmath.mpf(sigma))
    b = mpmath.mpf(epsilon) * mpmath.mpf(sigma) / mpmath.mpf(sensitivity)
    return mpmath.ncdf(a - b) - mpmath.exp(epsilon) * mpmath.ncdf(-a - b)


BALLE_WANG_CASES = [(0.6, 8e-7, 1.0), (0.6, 8e-7, 7.07), (0.05, 1e-5, 1.0), (1.0, 1e-10, 3.0),
                    (5.0, 1e-3, 1.0), (0.01, 0.5, 2.0)]


@pytest.mark.parametrize("epsilon,delta,sensitivity", BALLE_WANG_CASES)
def test_analytic_gaussian_sigma_satisfies_balle_wang_and_is_near_minimal(epsilon, delta,
                                                                          sensitivity):
    """The condition holds up to float64 evaluation (relative 1e-12) and 0.999999 sigma fails it."""
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    assert balle_wang_delta(epsilon, sigma, sensitivity) <= delta * (1 + 1e-12)
    assert balle_wang_delta(epsilon, sigma * (1 - 1e-6), sensitivity) > delta
    # the analytic sigma never exceeds the classical sqrt(2 ln(1.25/delta)) Delta / epsilon
    if epsilon < 1:
        assert sigma <= math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / epsilon


@pytest.mark.parametrize("epsilon,delta,sensitivity", BALLE_WANG_CASES)
def test_analytic_gaussian_sigma_satisfies_balle_wang_exactly(epsilon, delta, sensitivity):
    """The documented claim, checked in 50-digit arithmetic without tolerance."""
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    assert balle_wang_delta(epsilon, sigma, sensitivity) <= delta


# ---------------------------------------------------------- exponential mechanism
def exponential_frequencies(key, scores, valid, epsilon, sensitivity, draws):
    """Selection counts of every (row, group, candidate) over ``draws`` keys."""
    keys = jax.random.split(key, draws)
    select = jax.jit(jax.vmap(lambda k: exponential_mechanism(k, scores, valid, epsilon,
                                                              sensitivity)))
    group, candidate = (np.asarray(a) for a in select(keys))
    batch, groups, candidates = scores.shape
    flat = group * candidates + candidate  # (draws, batch)
    return np.stack([np.bincount(flat[:, b], minlength=groups * candidates)
                     for b in range(batch)]).reshape(scores.shape)


def exponential_probabilities(scores, valid, epsilon, sensitivity):
    logits = epsilon * np.asarray(scores, np.float64) / (2 * np.asarray(sensitivity)[:, None, None])
    logits = np.where(valid, logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=(1, 2), keepdims=True))
    return weights / weights.sum(axis=(1, 2), keepdims=True)


def test_exponential_mechanism_selects_proportionally_to_exp_eps_f_over_2_delta():
    """Chi-square per batch row over 100k draws, three rows of different shapes of
    scores, sensitivities and masks: false-failure probability <= 3 x 1e-3 / 3."""
    rng = np.random.default_rng(0)
    scores = np.zeros((3, 3, 5), np.float32)
    scores[0] = rng.uniform(0, 1, (3, 5))  # mild differences
    scores[1] = np.arange(15).reshape(3, 5) * 0.05  # a ramp over groups and candidates
    scores[2] = rng.normal(0, 0.3, (3, 5))
    valid = np.ones(scores.shape, bool)
    valid[1, 2, :] = False  # a whole group masked
    valid[2, :, 4] = False  # a column masked in every group
    valid[2, 0, 0] = False
    sensitivity = np.array([0.5, 0.1, 0.25], np.float32)
    epsilon = 1.3
    observed = exponential_frequencies(jax.random.key(31), jnp.asarray(scores), jnp.asarray(valid),
                                       epsilon, jnp.asarray(sensitivity), 100_000)
    assert observed[~valid].sum() == 0, "a masked candidate was selected"
    expected = exponential_probabilities(scores, valid, epsilon, sensitivity)
    for b in range(3):
        assert chi_square_pvalue(observed[b][valid[b]], expected[b][valid[b]]) > P_FAIL / 3
    # Power: the same draws reject the paper's exp(eps f / Delta) (no factor 2).
    wrong = exponential_probabilities(scores, valid, 2 * epsilon, sensitivity)
    assert chi_square_pvalue(observed[1][valid[1]], wrong[1][valid[1]]) < 1e-12


def test_exponential_mechanism_extreme_scores_and_empty_rows():
    scores = jnp.array([[[0.0, 1e4, -1e4]], [[1.0, 2.0, 3.0]], [[5.0, 5.0, 5.0]]], jnp.float32)
    valid = jnp.array([[[True, True, True]], [[False, False, False]], [[True, False, True]]])
    keys = jax.random.split(jax.random.key(32), 2000)
    group, candidate = jax.jit(jax.vmap(lambda k: exponential_mechanism(
        k, scores, valid, 1.0, jnp.array([1.0, 1.0, 1.0]))))(keys)
    candidate = np.asarray(candidate)
    assert np.all(candidate[:, 0] == 1)  # overwhelmingly best candidate, no NaN from exp
    assert np.all(np.asarray(group)[:, 1] == 0) and np.all(candidate[:, 1] == 0)  # no valid: (0, 0)
    assert set(np.unique(candidate[:, 2])) == {0, 2}  # never the masked middle one
