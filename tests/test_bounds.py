"""Private bounds (dpm_jax/bounds.py): the fixed domain, the sensitivity, the public threshold,
the release re-derived from its key stream, the ledger, the audit, the edge cases and the
integration into cluster, cluster_stream, the estimator and jit/vmap."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from dpm_jax import bounds as bounds_lib
from dpm_jax import keys
from dpm_jax.eval import audit as audit_lib
from dpm_jax.mechanisms import discrete_gaussian_multiplier, discrete_laplace_tail, count_sampler_tv
from conftest import USERS_COMPILER_OPTIONS

BUDGET = dpm_jax.Budget(1.0, 1e-6)
SMALL = dpm_jax.DPMConfig(tau_r=3, split_grid="cell")


def two_blobs(n: int = 4000, d: int = 2, centre: float = 10.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    half = rng.standard_normal((n, d)) * 2.0
    half[: n // 2] += centre
    half[n // 2 :] -= centre
    return half.astype(np.float32)


# ------------------------------------------------------------------ the fixed domain
@pytest.mark.parametrize("mantissa_bits", [0, 2])
def test_every_float32_lies_in_its_bucket_and_buckets_are_ordered(mantissa_bits):
    rng = np.random.default_rng(1)
    special = [0.0, -0.0, 1e-45, -1e-45, 1.1754944e-38, 1.0, -1.0, 1.5, 3.4028235e38, -3.4028235e38, 0.75]
    values = np.concatenate([special, rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500)])
    values = np.sort(values.astype(np.float32))
    index = np.asarray(bounds_lib.bucket_index(values[:, None], mantissa_bits))[:, 0]
    edges = bounds_lib.bucket_edges(mantissa_bits)
    assert len(edges) == 2 * 254 * 2**mantissa_bits + 2
    assert np.all(np.diff(edges) > 0) and np.all(np.diff(index) >= 0)
    assert np.all(edges[index] <= values) and np.all(values <= edges[index + 1])
    # a half-open bucket: the lower magnitude edge belongs to the bucket, the upper one to the next
    one = np.asarray(bounds_lib.bucket_index(np.float32([[1.0], [2.0]]), mantissa_bits))[:, 0]
    assert edges[one[0]] == 1.0 and edges[one[1]] == 2.0


def _numpy_bucket(values: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """The bucket of every float32 value from bucket_edges's formula, through np.frexp (not the bits)."""
    magnitude = np.abs(values.astype(np.float64))
    fraction, exponent = np.frexp(magnitude)  # magnitude = fraction 2**exponent, fraction in [0.5, 1)
    top = np.floor((2 * fraction - 1) * 2**mantissa_bits).astype(np.int64)
    k = np.where(magnitude < 2.0**-126, 0, (exponent - 1 + 126) * 2**mantissa_bits + top + 1)
    middle = 254 * 2**mantissa_bits
    return np.where(np.signbit(values), middle - k, middle + k)


@pytest.mark.parametrize("mantissa_bits, d, n", [(0, 3, None), (2, 1, None), (1, 7, None), (0, 2, 300)])
def test_histogram_is_the_numpy_histogram_of_the_buckets(mantissa_bits, d, n):
    """The blocked one-pass histogram equals per-dimension np.bincount of the buckets, re-derived
    in NumPy, of the unmasked values: random float32 bit patterns (every finite magnitude, both
    signs, subnormals), Gaussian values, +-0, the smallest subnormals, +-2**-126 and +-float32 max;
    more rows than two blocks, the last one partial (n None), and fewer rows than one block."""
    rng = np.random.default_rng(7)
    n = n or 2 * (bounds_lib._BLOCK_CELLS // d) + 12_345
    bits = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    bits = np.where((bits >> 23) & 255 == 255, bits & ~np.uint32(1 << 30), bits)  # no inf / nan
    values = bits.view(np.float32).copy()
    values[: n // 4] = rng.standard_normal((n // 4, d)).astype(np.float32)
    special = np.float32([0.0, -0.0, 1e-45, -1e-45, 2.0**-126, -(2.0**-126), 3.4028235e38, -3.4028235e38, 1.0, -1.0])
    values[n // 4 : n // 4 + len(special)] = special[:, None]
    mask = rng.random(n) < 0.9
    counts = np.asarray(bounds_lib.histogram(jnp.asarray(values), jnp.asarray(mask), mantissa_bits))
    buckets = _numpy_bucket(values[mask], mantissa_bits)
    num_buckets = 2 * 254 * 2**mantissa_bits + 1
    expected = np.stack([np.bincount(buckets[:, j], minlength=num_buckets) for j in range(d)])
    assert counts.dtype == np.int32 and counts.shape == (d, num_buckets)
    np.testing.assert_array_equal(counts, expected)
    index = np.asarray(bounds_lib.bucket_index(values, mantissa_bits))
    np.testing.assert_array_equal(index, _numpy_bucket(values, mantissa_bits))


@pytest.mark.parametrize("mantissa_bits", [0, 3])
def test_every_bit_pattern_counts_once_in_its_own_dimension(mantissa_bits):
    """+-inf and NaN of both signs (refused where concrete, not under jit, where the histogram runs):
    each record still moves exactly one count by one in each dimension's row (the L1 sensitivity d,
    the L2 sqrt(d)), in the outermost bucket of its sign. +inf beside -float32 max had put 2 in the
    second dimension's lowest bucket (L2 change 2 > sqrt(2))."""
    big, nan = np.float32(3.4028235e38), np.float32(np.nan)
    negative_nan = (np.float32(np.nan).view(np.uint32) | np.uint32(1 << 31)).view(np.float32)
    rows = np.float32([[np.inf, -big], [nan, -big], [-np.inf, 1.0], [1.0, np.inf], [negative_nan, nan], [0.0, 0.0]])
    histogram = jax.jit(bounds_lib.histogram, static_argnums=2)
    num_buckets = 2 * 254 * 2**mantissa_bits + 1
    for row in rows:
        counts = np.asarray(histogram(jnp.asarray(row[None]), jnp.ones(1, bool), mantissa_bits))
        assert counts.shape == (2, num_buckets) and np.array_equal(counts.sum(axis=1), [1, 1]), row
        assert counts.max() == 1, row
        index = np.asarray(bounds_lib.bucket_index(row, mantissa_bits))
        outermost = np.where(np.signbit(row), 0, num_buckets - 1)
        np.testing.assert_array_equal(np.where(np.isfinite(row), index, outermost), index)


def test_too_many_dimensions_for_the_int32_histogram_are_refused_before_any_work():
    """The histogram's cell index d' B + bucket is int32: at mantissa_bits = 8 (B = 130,049) from
    d = 16,513 on it wrapped (an 8 GiB histogram, within an H200's memory)."""
    request = bounds_lib.PrivateBounds(mantissa_bits=8)
    bounds_lib.plan_bounds(dpm_jax.Budget(1.0, 1e-6), 16_512, request)  # d B < 2**31
    with pytest.raises(ValueError, match="int32 histogram"):
        bounds_lib.plan_bounds(dpm_jax.Budget(1.0, 1e-6), 16_513, request)


@pytest.mark.slow
def test_one_record_moves_one_count_per_dimension():
    # Long because: histograms of neighbouring data sets (2 s in the fast loop, 2 cores at load 7).
    """The stated sensitivity: adding a record (here an extreme one) changes exactly one
    count by one in each of the d histograms, whatever the other points; the grid is
    fixed before the data (a grid scaled to the data would move many counts)."""
    X = two_blobs(500, d=3)
    extreme = np.float32([[3e38, -1e-30, 7.0]])
    B = np.concatenate([X, extreme])
    histogram = lambda points, mask: np.asarray(bounds_lib.histogram(jnp.asarray(points), jnp.asarray(mask), 0))
    counts_a = histogram(X, np.ones(len(X), bool))
    counts_b = histogram(B, np.ones(len(B), bool))
    difference = counts_b - counts_a
    assert np.all(difference.sum(axis=1) == 1) and np.all((difference == 0) | (difference == 1))
    assert counts_a.sum() == X.size and counts_a.dtype == np.int32
    # a masked record counts nowhere
    np.testing.assert_array_equal(histogram(B, np.arange(len(B)) < len(X)), counts_a)


# ------------------------------------------------------------------ the public plan
@pytest.mark.parametrize("d", [1, 3, 10, 50])
def test_threshold_is_the_smallest_with_the_stated_failure_probability(d):
    request = bounds_lib.PrivateBounds(noise="laplace")
    plan = bounds_lib.plan_bounds(dpm_jax.Budget(0.2, 1e-7), d, request)
    eps, buckets, beta = plan.noise.noise_epsilon, plan.num_buckets, request.failure_probability
    assert eps == 0.2 / d and plan.noise.sensitivity == d  # Laplace over d histograms
    tail = lambda t: buckets * (discrete_laplace_tail(eps, t) + count_sampler_tv(eps))
    assert tail(plan.threshold) <= beta < tail(plan.threshold - 1)


def test_auto_noise_takes_the_lower_threshold_laplace_for_small_d_gaussian_for_large():
    small = bounds_lib.plan_bounds(dpm_jax.Budget(0.1, 1e-7), 2)
    large = bounds_lib.plan_bounds(dpm_jax.Budget(0.1, 1e-7), 20)
    assert small.entry().mechanism == "discrete_laplace"
    assert large.entry().mechanism == "discrete_gaussian"
    for d, plan in ((2, small), (20, large)):
        for kind in ("laplace", "gaussian"):
            other = bounds_lib.plan_bounds(dpm_jax.Budget(0.1, 1e-7), d, bounds_lib.PrivateBounds(noise=kind))
            assert plan.threshold <= other.threshold
    assert large.noise.l2_sensitivity == pytest.approx(math.sqrt(20))


# ------------------------------------------------------------------ the release
def _numpy_bounds(X, key, plan):
    """The release re-derived independently: NumPy histogram on the public edges, the noise
    from the "bounds" stream of ``key``, the public threshold, the documented post-processing."""
    edges = bounds_lib.bucket_edges(plan.mantissa_bits).astype(np.float64)
    counts = np.stack([np.histogram(X[:, j], bins=edges)[0] for j in range(X.shape[1])]).astype(np.int64)
    stream = keys.derive_key(key, keys.BOUNDS)
    if isinstance(plan.noise, bounds_lib.CountRelease):
        noise = plan.noise.draw(stream, jnp.zeros(counts.shape, jnp.int32))
        noise = np.asarray(noise.limbs[0], np.int64) + np.asarray(noise.limbs[1], np.int64) * 2**30
    else:
        noise = np.asarray(plan.noise.draw(stream, counts.shape), np.int64)
    occupied = counts + noise >= plan.threshold
    lower, upper = [], []
    for row in occupied:
        first, last = np.flatnonzero(row)[[0, -1]]
        lo, hi = edges[first], edges[last + 1]
        lo = lo * plan.widen if lo < 0 else lo / plan.widen
        hi = hi * plan.widen if hi > 0 else hi / plan.widen
        lo, hi = (0.0 if 0 < lo <= hi / 2 else lo), (0.0 if lo / 2 <= hi < 0 else hi)
        lower.append(lo)
        upper.append(hi)
    return np.float32(lower), np.float32(upper)


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_released_bounds_are_the_keyed_noisy_histogram_post_processed(noise):
    # Long because: compiles the bounds release per noise (1.5-2 s in the fast loop, 2 cores at load 7, each).
    """Bounds = a public function of (exact counts + noise of the "bounds" stream) and the
    public threshold; a threshold read from the data (e.g. a fraction of the true n) fails.
    Data: in dimension 0, T + 30 points at 1000 (they pass T but not n / 100) and about
    100 (T + 60) points near 1; in dimension 1 all at -3."""
    plan = bounds_lib.plan_bounds(BUDGET, 2, bounds_lib.PrivateBounds(noise=noise))
    far, near = plan.threshold + 30, 100 * (plan.threshold + 60)
    X = np.zeros((near + far, 2), np.float32)
    X[:near, 0] = 1.0 + np.linspace(0, 0.5, near)
    X[near:, 0] = 1000.0
    X[:, 1] = -3.0
    for seed in range(3):
        key = jax.random.key(seed)
        lower, upper = map(np.asarray, bounds_lib.estimate_bounds(key, jnp.asarray(X), jnp.ones(len(X), bool), plan))
        expected = _numpy_bounds(X, key, plan)
        np.testing.assert_array_equal(lower, expected[0])
        np.testing.assert_array_equal(upper, expected[1])
        assert upper[0] >= 1000.0 and lower[1] <= -3.0 <= upper[1]


def test_gaussian_noise_has_the_scale_of_l2_sensitivity_sqrt_d():
    """The Gaussian release's noise has the sigma of L2 sensitivity sqrt(d) (a record moves one
    count by one in each of the d histograms), measured on the keyed release itself: a bucket whose
    exact count is T - s, s the expected sigma rounded (computed here from the multiplier, not the
    plan), passes T with probability P[Z >= s], about 0.16; noise calibrated to sensitivity 1
    (sigma / 4 at d = 16) passes it with probability about 3e-5. 16 x 500 draws: the bounds
    [0.12, 0.20] are 9 standard deviations wide on each side (the sampler's share of delta moves
    sigma by well under 1 %)."""
    d, budget = 16, dpm_jax.Budget(1.0, 1e-6)
    plan = bounds_lib.plan_bounds(budget, d, bounds_lib.PrivateBounds(noise="gaussian"))
    sigma = math.sqrt(d) * discrete_gaussian_multiplier(budget.epsilon, budget.delta)
    counts = jnp.zeros((d, plan.num_buckets), jnp.int32).at[:, 300].set(plan.threshold - round(sigma))
    draw = lambda key: bounds_lib.occupied_buckets(keys.derive_key(key, keys.BOUNDS), counts, plan)[:, 300]
    rate = float(jnp.mean(jax.vmap(draw)(jax.random.split(jax.random.key(5), 500))))
    assert 0.12 <= rate <= 0.20, (rate, sigma, plan.noise.sigma)


def _audit(key, mechanism, a, b, events, plan) -> audit_lib.AuditResult:
    """8,192 runs on each side, at confidence 0.999 (a correct release fails with probability <= 1e-3)."""
    return audit_lib.audit(
        key,
        mechanism,
        a,
        b,
        events,
        8192,
        delta=plan.entry().delta,
        confidence=0.999,
        compiler_options=USERS_COMPILER_OPTIONS,
    )


@pytest.mark.slow
def test_bounds_audit_stays_below_the_claim():
    # Long because: the auditor's many runs of the bounds release (25 s, 2 cores at load 10).
    """The auditor on this code path: an extreme point (2**20 in both dimensions) added to
    a set holding T - 1 such points beside 200 points at 1 (the tight case: the extreme
    bucket's noisy count then reaches T with probability 1/(1 + r) in B and r/(1 + r) in A
    per dimension, r = e^(-epsilon/d), a log-ratio of exactly epsilon over the d = 2
    histograms). Event: both upper bounds >= 2**20. Confidence 0.999: a correct mechanism
    fails with probability <= 1e-3; Laplace on the wrong scale (sensitivity 1, not d)
    would show about 2 epsilon."""
    plan = bounds_lib.plan_bounds(BUDGET, 2, bounds_lib.PrivateBounds(noise="laplace"))
    far = np.full((plan.threshold, 2), 2.0**20, np.float32)
    X = np.concatenate([np.ones((200, 2), np.float32), far])
    a = (X, np.arange(len(X)) < len(X) - 1)
    b = (X, np.ones(len(X), bool))
    mechanism = lambda key, data: bounds_lib.estimate_bounds(key, data[0], data[1], plan)
    events = {"both upper >= 2**20": lambda out: jnp.all(out[1] >= 2.0**20)}
    result = _audit(jax.random.key(11), mechanism, a, b, events, plan)
    claim = plan.entry().epsilon
    assert 0.7 * claim < result.epsilon_lower_bound <= claim, result.table()


@pytest.mark.slow
def test_gaussian_bounds_audit_stays_below_the_claim():
    # Long because: the auditor's 2 x 8192 runs of the bounds release at d = 16 (13 s, 2 cores at load 2.5).
    """The auditor on the Gaussian release's code path (what "auto" picks at d = 16): an extreme
    point (2**20 in all 16 dimensions) added to a set holding T - 1 such points beside 200 points
    at 1, as in the Laplace audit: each dimension's extreme bucket then has count T - 1 in A and T
    in B, and is occupied with probability p_A = P[Z >= 1] or p_B = P[Z >= 0] (about 0.46 and 0.54
    at this budget's sigma of about 4.6), independently over the 16 histograms. Events: at least
    j = 10, 12, 14 of the 16 upper bounds >= 2**20, Binomial(16, p) tails whose exact log-ratios
    are about 0.9, 1.5 and 2.1. Budget (3, 1e-3): a delta large enough that the claim, converted
    from zCDP, is within reach of 8192 runs (at (1, 1e-6) the bound stays near a tenth of the
    claim). Confidence 0.999: a correct mechanism fails with probability <= 1e-3. The correct
    release shows about a third of the claim (the rest is the zCDP conversion's slack and what the
    thresholds discard); noise calibrated to L2 sensitivity 1, not sqrt(d) (sigma / 4), shows
    about 1.6 claims. Half the sigma shows about 0.8 claims and is not caught here (the noise-scale
    test above catches it)."""
    d, budget = 16, dpm_jax.Budget(3.0, 1e-3)
    plan = bounds_lib.plan_bounds(budget, d, bounds_lib.PrivateBounds(noise="gaussian"))
    assert bounds_lib.plan_bounds(budget, d) == plan  # the path "auto" takes at this d
    far = np.full((plan.threshold, d), 2.0**20, np.float32)
    X = np.concatenate([np.ones((200, d), np.float32), far])
    a = (X, np.arange(len(X)) < len(X) - 1)
    b = (X, np.ones(len(X), bool))
    mechanism = lambda key, data: bounds_lib.estimate_bounds(key, data[0], data[1], plan)
    extreme = lambda out: jnp.sum(out[1] >= 2.0**20)
    events = {f">= {j} of 16 upper >= 2**20": lambda out, j=j: extreme(out) >= j for j in (10, 12, 14)}
    result = _audit(jax.random.key(12), mechanism, a, b, events, plan)
    claim = plan.entry().epsilon
    assert 0.25 * claim < result.epsilon_lower_bound <= claim, result.table()


# ------------------------------------------------------------------ integration and ledger
@pytest.mark.slow
@pytest.mark.parametrize("share, delta", [(None, 3e-7), (0.05, 3e-7), (0.3, 3e-7), (0.1, 3.5355339059327374e-07)])
def test_cluster_with_private_bounds_ledger_adds_up_and_bounds_come_first(share, delta):
    # Long because: a clustering with private bounds per budget split (13-43 s, 2 cores at load 10).
    """Within the budget in float64 (math.fsum), also for delta = 20000**-1.5, where the bounds
    line plus a ledger that adds up to the rest exceeded the total by an ulp before the margin."""
    X = two_blobs()
    bounds = "private" if share is None else bounds_lib.PrivateBounds(share=share)
    budget = dpm_jax.Budget(0.7, delta)
    result = dpm_jax.cluster(jax.random.key(0), X, budget, bounds=bounds, config=SMALL)
    for _, ledger in result.ledgers:
        assert ledger[0].name == "bounds" and ledger[0].key_path == (keys.BOUNDS,)
        assert ledger.total_epsilon <= budget.epsilon and ledger.total_delta <= budget.delta
        assert ledger.total_epsilon == pytest.approx(budget.epsilon, rel=1e-11)
        assert ledger.total_delta == pytest.approx(budget.delta, rel=1e-9)
        assert ledger[0].epsilon == pytest.approx((share or bounds_lib.DEFAULT_SHARE) * budget.epsilon)
    lower, upper = map(np.asarray, result.bounds)
    assert lower.shape == upper.shape == (2,)
    assert np.mean(np.all((lower <= X) & (X <= upper), axis=1)) >= 0.99
    centers = np.asarray(result.centers)[np.asarray(result.valid)]
    for truth in (10.0, -10.0):  # each blob has a released centre (the ledger is not all that holds)
        assert np.min(np.linalg.norm(centers - truth, axis=1)) < 3.0


@pytest.mark.slow
def test_known_bounds_are_in_the_result_and_the_ledger_is_unchanged():
    # Long because: compiles a clustering of its own (12 s, 2 cores at load 10).
    X = two_blobs()
    result = dpm_jax.cluster(jax.random.key(0), X, BUDGET, bounds=(-30.0, 30.0), config=SMALL)
    np.testing.assert_array_equal(np.asarray(result.bounds[0]), [-30.0, -30.0])
    assert all(entry.name != "bounds" for entry in result.ledger)


@pytest.mark.slow
def test_private_bounds_under_jit_and_vmap_match_single_runs():
    # Long because: compiles the bounds and the clustering under jit and vmap (24 s, 2 cores at load 10).
    X = jnp.asarray(two_blobs(2000))
    run = lambda key: dpm_jax.cluster(key, X, BUDGET, bounds="private", config=SMALL)
    keys_ = jax.random.split(jax.random.key(3), 2)
    batched = jax.jit(jax.vmap(run))(keys_)
    for i in range(2):
        single = run(keys_[i])
        np.testing.assert_array_equal(np.asarray(batched.bounds[1][i]), np.asarray(single.bounds[1]))
        np.testing.assert_array_equal(np.asarray(batched.centers[i]), np.asarray(single.centers))


def test_private_bounds_leave_the_caller_data_untouched():
    X = two_blobs(1000).astype(np.float64)
    copy = X.copy()
    dpm_jax.private_bounds(jax.random.key(0), X, dpm_jax.Budget(0.5, 1e-7))
    np.testing.assert_array_equal(X, copy)


# ------------------------------------------------------------------ edge cases
@pytest.mark.slow
@pytest.mark.parametrize(
    "name, column",
    [
        ("constant 5", np.full(3000, 5.0)),
        ("constant 0", np.zeros(3000)),
        ("constant -3", np.full(3000, -3.0)),
        ("all negative", -np.random.default_rng(0).exponential(7.0, 3000)),
        ("in [0, 1e-3]", np.random.default_rng(0).uniform(0, 1e-3, 3000)),
        ("range 1e6", np.random.default_rng(0).uniform(0, 1e6, 3000)),
        ("integers 0..15", np.random.default_rng(0).integers(0, 16, 3000)),
    ],
)
def test_edge_case_columns_get_bounds_that_hold_them_and_cluster_runs(name, column):
    # Long because: compiles a clustering of its own (12 s, 2 cores at load 10).
    """The default (widen 1) may clip a few extreme points of a column; COVERING (widen 2**1.5,
    dpm_jax.private_bounds's default) holds >= 99 %, within 6x the range (a binade edge and the widening)."""
    X = np.stack([column, np.random.default_rng(1).standard_normal(3000)], axis=1)
    if name.startswith("integers"):
        X = X.astype(np.int32)
    span = max(float(np.ptp(X[:, 0])), abs(float(X[0, 0])), 2**-64)  # constant: its size, or the least range
    for request, least, widest in ((bounds_lib.PrivateBounds(), 0.9, 2), (bounds_lib.COVERING, 0.99, 6)):
        budget = dpm_jax.Budget(0.3 * request.share / 0.1, 1e-7)
        lower, upper = map(np.asarray, dpm_jax.private_bounds(jax.random.key(0), X, budget, request))
        assert np.all(lower < upper) and np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))
        assert np.mean((X[:, 0] >= lower[0]) & (X[:, 0] <= upper[0])) >= least, (name, lower, upper)
        assert upper[0] - lower[0] <= widest * span, (name, lower, upper)
    result = dpm_jax.cluster(jax.random.key(0), X, BUDGET, bounds="private", config=SMALL)
    assert np.all(np.isfinite(np.asarray(result.centers)[np.asarray(result.valid)]))


def test_standalone_private_bounds_default_to_the_covering_box():
    """dpm_jax.private_bounds, whose product is the box, defaults to COVERING (widened to hold nearly
    every point); bounds="private" in an algorithm keeps its own default (the tight box in cluster)."""
    X = two_blobs(2000)
    budget = dpm_jax.Budget(0.5, 1e-7)
    default = dpm_jax.private_bounds(jax.random.key(3), X, budget)
    for want, got in zip(dpm_jax.private_bounds(jax.random.key(3), X, budget, bounds_lib.COVERING), default):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    tight = dpm_jax.private_bounds(jax.random.key(3), X, budget, bounds_lib.PrivateBounds())
    assert np.all(np.asarray(default[1]) > np.asarray(tight[1]))  # the same buckets, moved out


def test_tens_of_points_give_a_clear_error_not_a_crash():
    X = two_blobs(30)
    with pytest.raises(ValueError, match="no bucket reached the noisy-count threshold"):
        dpm_jax.cluster(jax.random.key(0), X, BUDGET, bounds="private")
    with pytest.raises(ValueError, match="no bucket reached"):
        dpm_jax.private_bounds(jax.random.key(0), X, dpm_jax.Budget(0.1, 1e-7))


@pytest.mark.parametrize(
    "request_, message",
    [
        (bounds_lib.PrivateBounds(share=1.5), "share"),
        (bounds_lib.PrivateBounds(share=0.0), "share"),
        (bounds_lib.PrivateBounds(widen=0.5), "widen"),
        (bounds_lib.PrivateBounds(noise="cauchy"), "noise"),
        (bounds_lib.PrivateBounds(mantissa_bits=12), "mantissa_bits"),
    ],
)
def test_bad_requests_are_named(request_, message):
    with pytest.raises(ValueError, match=message):
        dpm_jax.cluster(jax.random.key(0), two_blobs(100), BUDGET, bounds=request_)


@pytest.mark.slow
def test_cluster_stream_with_private_bounds_is_cluster_with_private_bounds():
    # Long because: compiles cluster_stream's passes (16 s, 2 cores at load 10).
    """One extra pass accumulates the same exact histograms: the same release for the same key."""
    X = two_blobs(3000)
    in_memory = dpm_jax.cluster(jax.random.key(4), X, BUDGET, bounds="private", config=SMALL)
    streamed = dpm_jax.cluster_stream(jax.random.key(4), X, BUDGET, bounds="private", config=SMALL, chunk_rows=700)
    for a, b in zip(in_memory.bounds, streamed.bounds):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(in_memory.centers), np.asarray(streamed.centers))
    assert streamed.ledgers == in_memory.ledgers


@pytest.mark.slow
def test_estimator_takes_private_bounds():
    # Long because: compiles the estimator's clustering (14 s, 2 cores at load 10).
    pytest.importorskip("sklearn")
    model = dpm_jax.DPMClustering(epsilon=1.0, delta=1e-6, bounds="private", seed=0, tau_r=3).fit(two_blobs(3000))
    assert model.n_clusters_ == 2 and model.ledger_[0].name == "bounds"
    assert np.all(model.bounds_[0] <= -10) and np.all(model.bounds_[1] >= 10)


@pytest.mark.slow
def test_cli_bounds_private_records_the_dp_bounds_and_their_ledger_line(tmp_path, capsys):
    # Long because: a CLI run with private bounds (13 s, 2 cores at load 10).
    from dpm_jax.cli import main

    source = tmp_path / "data.npy"
    np.save(source, two_blobs(3000))
    out = tmp_path / "release.json"
    argv = ["cluster", str(source), "--epsilon", "1", "--delta", "1e-6", "--bounds", "private"]
    status = main([*argv, "--bounds-share", "0.2", "--tau-r", "3", "--seed", "1", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    release = json.loads(out.read_text())
    assert release["ledger"][0]["name"] == "bounds" and release["ledger"][0]["epsilon"] == pytest.approx(0.2)
    assert math.fsum(e["epsilon"] for e in release["ledger"]) <= 1.0
    lower, upper = release["bounds"]["lower"], release["bounds"]["upper"]
    assert len(lower) == 2 and lower[0] < -10 < 10 < upper[0]
    for bad, message in ((["--bounds", "privat"], "LO HI"), (["--bounds", "1"], "LO HI or the word private")):
        assert main(["cluster", str(source), "--epsilon", "1", "--delta", "1e-6", *bad]) != 0
        assert message in capsys.readouterr().err
    assert main([*argv[:-2], "--bounds", "0", "1", "--bounds-share", "0.2"]) != 0
    assert "--bounds-share applies only" in capsys.readouterr().err


@pytest.mark.slow
def test_under_jit_a_dimension_without_bounds_is_nan_not_a_crash():
    # Long because: compiles the clustering under jit (13 s, 2 cores at load 10).
    """Traced bounds cannot raise: too few points give NaN bounds (documented), and the run completes."""
    X = jnp.asarray(two_blobs(30))
    result = jax.jit(lambda key: dpm_jax.cluster(key, X, BUDGET, bounds="private", config=SMALL))(jax.random.key(0))
    assert np.all(np.isnan(np.asarray(result.bounds[0]))) and np.all(np.isnan(np.asarray(result.bounds[1])))
    assert not np.any(np.isfinite(np.asarray(result.centers)[np.asarray(result.valid)]))
