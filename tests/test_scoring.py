"""Integer split scores G (Definitions 5-7 as exact integers) and their exact sensitivity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax.scoring import boundary_statistics, candidate_statistics, exponent_ratio, score_coefficients, split_scores
from dpm_jax.histogram import half_bin_indices, level_histogram
from dpm_jax.eval.baselines.numpy_dpm import reference_scores

T, Q, ALPHA = 0.3, 1 / 12, 5.0
PARAMETERS = [(T, Q, ALPHA), (0.5, 0.25, 1.0), (0.9, 0.05, 0.5), (0.2, 0.1, 20.0), (1.0, 0.01, 100.0)]

_scores = jax.jit(split_scores, static_argnums=2)


def as_int64(g) -> np.ndarray:
    """Value of a two-limb Int (|G| < 2**46) as int64."""
    low, high = (np.asarray(limb).astype(np.int64) for limb in g.limbs)
    assert np.all((low >= 0) & (low < 2**30))
    return low + (high << 30)


def big_int_scores(counts, size, c) -> np.ndarray:
    """G = min(a1 D, b N + a2 D) - a3 |s|, D = min(r, N - r), in Python ints (object arrays)."""
    counts = np.asarray(counts, np.int64).astype(object)
    ranks = np.cumsum(counts, axis=-1)[..., 0::2]
    interval = counts[..., 0::2] + counts[..., 1::2]
    size = np.asarray(size, np.int64).astype(object)[..., None]
    distance = np.minimum(ranks, size - ranks)
    outer = c.outer_slope * distance
    inner = c.inner_intercept * size + c.inner_slope * distance
    return (np.minimum(outer, inner) - c.emptiness_weight * interval).astype(np.int64)


def random_histograms(rng, shape, high):
    counts = rng.integers(0, high, shape)
    counts[..., :3] = 0  # empty borders
    counts[0, 0] = 0  # an empty dimension
    return counts


@pytest.mark.parametrize("t, q, alpha", PARAMETERS)
def test_split_scores_equal_the_big_int_formula(t, q, alpha):
    rng = np.random.default_rng(0)
    c = score_coefficients(t, q, alpha)
    for high in (5, 1000, 2**25):
        counts = random_histograms(rng, (6, 3, 32), high)
        totals = counts[:, 0].sum(-1)
        # N: the total, far below it (D < 0), far above it, 1, and the int32 maximum
        size = np.asarray(
            [
                max(totals[0], 1),
                max(totals[1] // 7, 1),
                totals[2] * 3 + 5,
                1,
                2**31 - 1,
                int(rng.integers(1, 2**31 - 1)),
            ]
        )
        got = as_int64(_scores(jnp.asarray(counts, jnp.int32), jnp.asarray(size[:, None], jnp.int32), c))
        np.testing.assert_array_equal(got, big_int_scores(counts, size[:, None], c))


def test_coefficients_are_the_scaled_reals():
    for t, q, alpha in PARAMETERS:
        c = score_coefficients(t, q, alpha)
        scale = 2.0**c.scale_bits
        assert 0 <= c.inner_slope <= c.outer_slope < 2**14 and c.emptiness_weight < 2**14
        assert 0 <= c.inner_intercept < 2**14
        assert abs(c.outer_slope - t / q * scale) <= 0.5
        assert abs(c.emptiness_weight - alpha * scale) <= 0.5
        assert abs(c.inner_intercept - (t - 2 * q) / (1 - 2 * q) * scale) <= 0.5
        assert c.inner_slope == min(round((1 - t) / (0.5 - q) * scale), c.outer_slope)
        assert c.sensitivity == c.outer_slope + c.emptiness_weight
        assert isinstance(c.sensitivity, int)
        # 2**k is as large as the 2**14 limit allows
        assert max(c.outer_slope, c.emptiness_weight, c.inner_slope) * 2 >= 2**14 - 2


def test_score_coefficients_reject_too_large_t_over_q_or_alpha():
    score_coefficients(0.3, 1 / 12, 1000.0)  # still fits
    with pytest.raises(ValueError):
        score_coefficients(0.3, 1 / 12, 1100.0)
    with pytest.raises(ValueError):
        score_coefficients(0.5, 1e-4, 5.0)  # t / q = 5000
    with pytest.raises(ValueError):
        score_coefficients(0.3, 1 / 12, 1e9)


def paper_scores(counts, n, t, q, alpha):
    """Definition 7 in float64: c(r) of Definition 6 plus alpha (1 - |s| / n)."""
    counts = np.asarray(counts, np.float64)
    ranks = np.cumsum(counts, axis=-1)[..., 0::2]
    interval = counts[..., 0::2] + counts[..., 1::2]
    distance = np.minimum(ranks, n - ranks)
    outer = (ranks <= n * q) | (ranks >= n - n * q)
    centreness = np.where(
        outer, distance * t / (n * q), (t - 2 * q) / (1 - 2 * q) + distance * (1 - t) / (n / 2 - n * q)
    )
    return centreness + alpha * (1 - interval / n)


def recovered_scores(g, size, c):
    return as_int64(g) / (2.0**c.scale_bits * np.asarray(size, np.float64)) + c.emptiness_weight / 2.0**c.scale_bits


@pytest.mark.parametrize("t, q, alpha", PARAMETERS)
def test_integer_score_recovers_the_paper_score(t, q, alpha):
    """G / (2**k N) + alpha = f of Definition 7 when N = n~: 1e-3 relative (or absolute below 1).

    The only error is the rounding of the coefficients to integers: <= 2**-k per unit of f.
    """
    rng = np.random.default_rng(1)
    c = score_coefficients(t, q, alpha)
    for high in (20, 2**20):
        counts = random_histograms(rng, (4, 3, 64), high)
        size = np.maximum(counts[:, 0].sum(-1), 1)  # N = n~ = the node's total
        size[1] = 2 * size[1] + 3  # n~ need not equal the data's count
        got = recovered_scores(
            _scores(jnp.asarray(counts, jnp.int32), jnp.asarray(size[:, None], jnp.int32), c), size[:, None, None], c
        )
        expected = paper_scores(counts, size[:, None, None].astype(np.float64), t, q, alpha)
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
        # where 0 <= r <= N and |s| <= N (a consistent node) the error is at most 1.5 2**-k
        ranks = np.cumsum(counts, -1)[..., 0::2]
        consistent = (ranks <= size[:, None, None]) & (counts.sum(-1, keepdims=True) <= size[:, None, None])
        assert consistent.mean() > 0.3
        assert np.abs(got - expected)[consistent].max() <= 2.0**-c.scale_bits * 1.5


@pytest.mark.parametrize("seed", range(3))
def test_histogram_scores_equal_reference_scores(seed):
    """Points -> half-bins -> one histogram -> G, against the per-point reference of the paper."""
    rng = np.random.default_rng(seed)
    n, d = rng.integers(1, 400), rng.integers(1, 5)
    lower, upper = np.full(d, -10.0), np.full(d, 30.0)
    # a mixture with empty regions, duplicates and points exactly on the bounds
    points = np.concatenate(
        [
            rng.normal(0, 2, (n, d)),
            rng.normal(20, 1, (n // 2, d)),
            np.repeat(rng.normal(5, 1, (1, d)), 7, axis=0),
            [lower, upper],
        ]
    )
    points = np.clip(points, lower, upper)
    beta = [0.37 / 8, 0.05, 0.11][seed % 3]  # interval edges that are not dyadic
    num_splits = int(np.ceil(1 / beta - 1e-6))
    size = max(int(round(len(points) + rng.normal(0, 5))), 1)
    expected = reference_scores(points, size, lower, upper, beta, num_splits, T, Q, ALPHA)
    unit = jnp.asarray((points - lower) / (upper - lower), jnp.float32)
    half_bins = half_bin_indices(unit, beta, num_splits, 32)
    counts = level_histogram(half_bins, jnp.zeros(len(points), jnp.int32), jnp.ones(len(points), bool), 1, 32)
    c = score_coefficients(T, Q, ALPHA)
    g = _scores(jnp.asarray(counts, jnp.int32), jnp.asarray([[size]], jnp.int32), c)
    np.testing.assert_array_equal(as_int64(g), big_int_scores(np.asarray(counts), np.asarray([[size]]), c))
    got = recovered_scores(g, size, c)[0, :, :num_splits]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def neighbour(rng, counts):
    """One point added: one half-bin of every (node, dimension) gains one."""
    added = counts.copy()
    bins = rng.integers(0, counts.shape[-1], counts.shape[:-1])
    np.put_along_axis(added, bins[..., None], np.take_along_axis(added, bins[..., None], -1) + 1, -1)
    return added


@pytest.mark.parametrize("t, q, alpha", PARAMETERS)
def test_sensitivity_is_exact_for_every_node_size(t, q, alpha):
    """|G(D) - G(D')| <= a1 + a3 exactly, N fixed (public), incl. N = 1.6e7 and 2**31 - 1."""
    rng = np.random.default_rng(2)
    c = score_coefficients(t, q, alpha)
    for high, sizes in (
        (3, [1, 2, 7, 40]),
        (2**14, [2**18, 2**19, 10**6, 16_000_000]),
        (2**19 + 3, [16_000_000, 16_777_217, 2**25, 2**31 - 1]),
        (2**25, [2**31 - 1, 2**30, 3, 2**31 - 2]),
    ):
        counts = random_histograms(rng, (4, 3, 64), high)
        counts = np.minimum(counts, (2**31 - 2) // 64)  # the neighbour's total stays in int32
        size = jnp.asarray(np.asarray(sizes)[:, None], jnp.int32)
        g = as_int64(_scores(jnp.asarray(counts, jnp.int32), size, c))
        for _ in range(3):
            g_added = as_int64(_scores(jnp.asarray(neighbour(rng, counts), jnp.int32), size, c))
            assert np.abs(g - g_added).max() <= c.sensitivity


def test_sensitivity_bound_is_attained():
    """Above the median a point added inside the interval below the candidate moves G by -(a1 + a3)."""
    c = score_coefficients(T, Q, ALPHA)
    counts = np.zeros((1, 1, 8), np.int64)
    counts[0, 0, 0] = 900
    counts[0, 0, 6] = 30  # candidate 3: rank 930 > N / 2 with N = 1000 (D = 70 < q N: outer piece)
    added = counts.copy()
    added[0, 0, 6] += 1
    size = jnp.asarray([[1000]], jnp.int32)
    g = as_int64(_scores(jnp.asarray(counts, jnp.int32), size, c))
    g_added = as_int64(_scores(jnp.asarray(added, jnp.int32), size, c))
    assert g[0, 0, 3] - g_added[0, 0, 3] == c.sensitivity


def test_candidate_statistics_exact_near_int32_max():
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 2**24, (2, 3, 64))
    counts[..., -1] += (2**31 - 1) - counts.sum(-1)  # every histogram sums to exactly 2**31 - 1
    counts[0, 0, :] = 0
    counts[0, 0, 10] = 2**31 - 1
    assert np.all(counts >= 0) and np.all(counts.sum(-1) == 2**31 - 1)
    interval, ranks = candidate_statistics(jnp.asarray(counts, jnp.int32))
    np.testing.assert_array_equal(np.asarray(interval), counts[..., 0::2] + counts[..., 1::2])
    np.testing.assert_array_equal(np.asarray(ranks), np.cumsum(counts, -1)[..., 0::2])
    c = score_coefficients(T, Q, ALPHA)
    size = jnp.asarray([[2**31 - 1], [2**31 - 1]], jnp.int32)
    g = as_int64(_scores(jnp.asarray(counts, jnp.int32), size, c))
    np.testing.assert_array_equal(g, big_int_scores(counts, np.asarray([[2**31 - 1]] * 2), c))


def test_exponent_ratio_is_in_unit_interval():
    rng = np.random.default_rng(5)
    noisy_count = np.concatenate([rng.normal(0, 1e4, 500), [-1e9, 0.0, 1.0, 2**31, 5.0]]).astype(np.float32)
    size = np.concatenate([rng.integers(1, 2**31 - 1, 500), [1, 1, 1, 2**31 - 1, 3]]).astype(np.int32)
    offset = 17.25
    got = np.asarray(exponent_ratio(jnp.asarray(noisy_count), offset, jnp.asarray(size)))
    assert np.all((got > 0) & (got <= 1))
    expected = np.minimum(np.maximum(noisy_count.astype(np.float64) - offset, 1.0) / size, 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # near the node size the ratio is (n~ - lambda) / N
    ratio = exponent_ratio(jnp.float32(1000.0), 20.0, jnp.int32(1000))
    assert float(ratio) == pytest.approx(0.98)


def test_scores_jit_and_eager_agree():
    c = score_coefficients(T, Q, ALPHA)
    counts = jnp.asarray(np.random.default_rng(6).integers(0, 9, (3, 2, 16)), jnp.int32)
    size = jnp.asarray([[40], [70], [1]], jnp.int32)
    eager, jitted = split_scores(counts, size, c), _scores(counts, size, c)
    for a, b in zip(eager.limbs, jitted.limbs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_boundary_statistics_count_the_two_half_bins_around_and_the_points_below_each_boundary():
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 50, (3, 2, 10))
    interval, ranks = (np.asarray(a) for a in boundary_statistics(jnp.asarray(counts, jnp.int32)))
    for i in range(1, 10):  # boundary i: candidate index i - 1
        np.testing.assert_array_equal(interval[..., i - 1], counts[..., i - 1] + counts[..., i])
        np.testing.assert_array_equal(ranks[..., i - 1], counts[..., :i].sum(-1))
    # one added point changes every candidate's statistics by at most one (Lemmas 3-4)
    added = counts.copy()
    added[1, 0, 4] += 1
    interval_b, ranks_b = (np.asarray(a) for a in boundary_statistics(jnp.asarray(added, jnp.int32)))
    assert np.abs(interval_b - interval).max() == 1 and np.abs(ranks_b - ranks).max() == 1


@pytest.mark.parametrize("window", [1, 2, 3, 9, 12])
def test_boundary_statistics_count_the_window_of_half_bins_inside_the_cell(window):
    rng = np.random.default_rng(window)
    counts = rng.integers(0, 50, (3, 2, 10))
    interval, ranks = (np.asarray(a) for a in boundary_statistics(jnp.asarray(counts, jnp.int32), window))
    for i in range(1, 10):  # boundary i: candidate index i - 1, window half-bins i - window .. i + window - 1
        inside = counts[..., max(i - window, 0) : min(i + window, 10)].sum(-1)
        np.testing.assert_array_equal(interval[..., i - 1], inside)
        np.testing.assert_array_equal(ranks[..., i - 1], counts[..., :i].sum(-1))
    # one added point changes every candidate's statistics by at most one: the EM's sensitivity is unchanged
    added = counts.copy()
    added[2, 1, 5] += 1
    interval_b, ranks_b = (np.asarray(a) for a in boundary_statistics(jnp.asarray(added, jnp.int32), window))
    assert np.abs(interval_b - interval).max() == 1 and np.abs(ranks_b - ranks).max() == 1
