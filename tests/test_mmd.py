"""dpm_jax.eval.mmd: the chunked RKHS distance against a direct float64 computation."""

import math

import numpy as np
import pytest

from dpm_jax.eval import mmd


def _direct(X, Z, w, gamma):
    k = lambda a, b: np.exp(-gamma * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))  # noqa: E731
    w = w / w.sum()
    return math.sqrt(w @ k(Z, Z) @ w - 2 * w @ k(Z, X).mean(1) + k(X, X).mean())


# the second crosses the 4096-row blocks; long because: 8 s, 2 cores at load 10
@pytest.mark.parametrize("n, m, d", [(50, 7, 3), pytest.param(5000, 300, 2, marks=pytest.mark.slow)])
def test_rkhs_distance_matches_the_direct_formula(n, m, d):
    rng = np.random.default_rng(n)
    X = rng.normal(100.0, 80.0, (n, d))
    Z = rng.normal(110.0, 60.0, (m, d))
    w = rng.uniform(0.1, 5.0, m)
    gamma = mmd.balog_gamma(d)
    expected = _direct(X, Z, w, gamma)
    assert mmd.rkhs_distance(X, Z, w, gamma) == pytest.approx(expected, rel=1e-4)
    assert mmd.kernel_mean(X, gamma) == pytest.approx(
        np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1)).mean(), rel=1e-5
    )


def test_rkhs_distance_is_zero_for_the_data_itself_and_refuses_bad_weights():
    X = np.random.default_rng(0).normal(0.0, 1.0, (40, 2))
    assert mmd.rkhs_distance(X, X, np.ones(40), 0.5) < 1e-3
    with pytest.raises(ValueError):
        mmd.rkhs_distance(X, X[:3], np.array([1.0, -1.0, 1.0]), 0.5)


# ---- the box-uniform measure (rkhs_distance_boxes) ----


_LEGENDRE = np.polynomial.legendre.leggauss(400)


def _gauss_legendre_pair(l1, h1, l2, h2):
    """E exp(-(X - Y)^2) for X, Y uniform on [l1, h1], [l2, h2] by 400-node Gauss-Legendre (a
    point where an interval has width 0): converged to ~1e-15 on these widths (<= 10)."""
    t, wt = _LEGENDRE

    def rule(lo, hi):
        return (np.array([lo]), np.ones(1)) if hi == lo else (lo + (hi - lo) * (t + 1) / 2, wt / 2)

    (x, wx), (y, wy) = rule(l1, h1), rule(l2, h2)
    return wx @ np.exp(-((x[:, None] - y[None]) ** 2)) @ wy


def test_interval_pair_average_matches_quadrature_in_every_regime():
    """Widths across the narrow threshold (series on one side, erfc closed forms on the
    other), zero widths, overlapping and disjoint intervals, far tails, both argument orders:
    within 1e-12 (the rounding/truncation budget stated at _NARROW is 5e-13)."""
    import jax

    narrow = mmd._NARROW
    widths1 = [0.0, 1e-7, 1e-3, narrow * (1 - 1e-6), narrow, narrow * (1 + 1e-6), 0.3, 2.0, 10.0]
    widths2 = [0.0, 1e-5, narrow * (1 - 1e-6), narrow, 0.05, 1.0, 8.0]
    cases = [(w1, w2, offset) for w1 in widths1 for w2 in widths2 for offset in (0.0, 0.003, 0.5, 2.0, 5.0, 9.0, 20.0)]
    lo1 = np.full(len(cases), -0.3)
    hi1 = lo1 + [w1 for w1, _, _ in cases]
    lo2 = lo1 + [offset for _, _, offset in cases]
    hi2 = lo2 + [w2 for _, w2, _ in cases]
    expected = np.array([_gauss_legendre_pair(*args) for args in zip(lo1, hi1, lo2, hi2)])
    with jax.enable_x64(True):
        for args in ((lo1, hi1, lo2, hi2), (lo2, hi2, lo1, hi1)):
            got = np.asarray(mmd._interval_pair_average(*(jax.numpy.asarray(a) for a in args)))
            bad = np.abs(got - expected) > 1e-12
            assert not bad.any(), [cases[i] for i in np.flatnonzero(bad)]


def test_boxes_shrunk_to_points_give_the_point_set_distance():
    rng = np.random.default_rng(3)
    X = rng.normal(100.0, 80.0, (60, 3))
    Z = rng.normal(110.0, 60.0, (9, 3))
    w = rng.uniform(0.1, 5.0, 9)
    gamma = mmd.balog_gamma(3)
    expected = _direct(X, Z, w, gamma)  # float64
    kxx = np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1)).mean()  # float64 (kernel_mean: float32)
    assert mmd.rkhs_distance_boxes(X, Z, Z, w, gamma, kxx) == pytest.approx(expected, rel=1e-10)
    # boxes narrower than the series threshold (width 1e-3 of the length scale 1 / sqrt(gamma)):
    # the distance moves by O(width^2) only
    half = 0.5e-3 / math.sqrt(gamma)
    assert mmd.rkhs_distance_boxes(X, Z - half, Z + half, w, gamma, kxx) == pytest.approx(expected, rel=1e-5)
    assert mmd.rkhs_distance_boxes(X, Z, Z, w, gamma) == pytest.approx(mmd.rkhs_distance(X, Z, w, gamma), rel=1e-4)


def _box_mixture_draws(rng, lower, upper, w, m):
    rows = rng.choice(len(w), size=m, p=w / w.sum())
    return lower[rows] + rng.uniform(size=(m, lower.shape[1])) * (upper[rows] - lower[rows])


def _monte_carlo_terms(X, draws, gamma):
    """Unbiased estimates of w' K_bb w (independent pairs of draws) and w' K_bx 1 / n, each
    with its standard error."""
    half = len(draws) // 2
    pair = np.exp(-gamma * ((draws[:half] - draws[half : 2 * half]) ** 2).sum(1))
    cross = np.exp(-gamma * ((draws[:, None, :] - X[None]) ** 2).sum(-1)).mean(1)
    return (pair.mean(), pair.std() / math.sqrt(half)), (cross.mean(), cross.std() / math.sqrt(len(cross)))


def test_box_distance_matches_monte_carlo_on_uniform_draws():
    """d = 2, four boxes 0.3 to 3 length scales wide, 400,000 draws (numpy seed 0): each
    exact term within 5 standard errors of its unbiased Monte Carlo estimate (a false
    failure ~6e-7 per term at a fixed seed: deterministic here)."""
    rng = np.random.default_rng(0)
    gamma = 1.0
    X = rng.normal(0.0, 1.5, (40, 2))
    lower = np.array([[-2.0, -1.0], [0.0, 0.0], [1.0, -3.0], [-0.5, 1.5]])
    upper = lower + np.array([[0.3, 3.0], [1.0, 1.0], [2.5, 0.4], [0.6, 0.6]])
    w = np.array([3.0, 1.0, 2.0, 0.5])
    kzz, kzx = mmd._box_terms(X, lower, upper, w, gamma)
    (mc_zz, se_zz), (mc_zx, se_zx) = _monte_carlo_terms(X, _box_mixture_draws(rng, lower, upper, w, 400_000), gamma)
    assert abs(kzz - mc_zz) <= 5 * se_zz and abs(kzx - mc_zx) <= 5 * se_zx
    # the boxes' centres as point masses are far off on this case: the test can tell them apart
    centres = 0.5 * (lower + upper)
    assert abs(mmd._box_terms(X, centres, centres, w, gamma)[0] - mc_zz) > 50 * se_zz


@pytest.mark.slow
def test_sample_draws_the_box_mixture_that_rkhs_distance_boxes_measures():
    """Long because: compiles a grid synthesis (21 s, 2 cores at load 3).

    SynthResult.sample: a box by its released weight, uniform inside. 200,000 rows of a
    grid release (d = 2, fixed keys): their Monte Carlo terms within 5 standard errors of
    the exact box-mixture terms, and far from the centres' (a point mass at each centre)."""
    import jax

    from dpm_jax.budget import Budget
    from dpm_jax.synth.api import synthesize

    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(c, 0.6, (400, 2)) for c in ((3.0, 3.0), (12.0, 11.0))]).astype(np.float32)
    result = synthesize(jax.random.key(0), X, Budget(1.0, 1e-6), bounds=(0.0, 16.0), method="grid")
    live = np.asarray(result.valid) & (np.asarray(result.weights) > 0)
    lower, upper, w = (np.asarray(a, np.float64)[live] for a in (result.lower, result.upper, result.weights))
    gamma = 1.0 / float(np.median(upper - lower)) ** 2  # boxes about one length scale wide
    draws = np.asarray(result.sample(jax.random.key(1), 200_000), np.float64)
    kzz, kzx = mmd._box_terms(X.astype(np.float64), lower, upper, w, gamma)
    (mc_zz, se_zz), (mc_zx, se_zx) = _monte_carlo_terms(X.astype(np.float64), draws, gamma)
    assert abs(kzz - mc_zz) <= 5 * se_zz and abs(kzx - mc_zx) <= 5 * se_zx
    centres = 0.5 * (lower + upper)
    assert abs(mmd._box_terms(X.astype(np.float64), centres, centres, w, gamma)[0] - mc_zz) > 5 * se_zz


def test_rkhs_distance_boxes_refuses_bad_boxes_and_weights():
    X = np.zeros((5, 2))
    lo, hi = np.zeros((2, 2)), np.ones((2, 2))
    with pytest.raises(ValueError, match="lower <= upper"):
        mmd.rkhs_distance_boxes(X, hi, lo, np.ones(2), 1.0)
    with pytest.raises(ValueError, match="lower <= upper"):
        mmd.rkhs_distance_boxes(X, lo, np.full((2, 2), np.inf), np.ones(2), 1.0)
    with pytest.raises(ValueError, match="weights >= 0"):
        mmd.rkhs_distance_boxes(X, lo, hi, np.array([1.0, -1.0]), 1.0)
    with pytest.raises(ValueError, match="must be"):
        mmd.rkhs_distance_boxes(X, lo[:, :1], hi[:, :1], np.ones(2), 1.0)
