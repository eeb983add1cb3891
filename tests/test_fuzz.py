"""Property-based fuzzing of ``dpm_jax.cluster`` with hypothesis.

Valid inputs (any shape, dtype, value pattern, bounds, config and budget) must give:
no crash, finite centres and counts where ``valid``, NaN centres elsewhere,
``valid.sum() == k``, centres inside the public bounds, a ledger that adds up to
the budget, a consistent split tree, and the caller's array unchanged. Invalid
inputs must raise a clear ValueError or TypeError before any work is done.

Compiling ``cluster`` costs seconds per (shape, budget, config), so the CI test
draws the *values* freely but the static part from a few fixed scenarios, with
derandomised examples (reproducible). ``benchmarks/fuzz_campaign.py`` reuses the
strategies below with free shapes, configs and budgets and many more examples.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpm_jax

CI_SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Scenario(NamedTuple):
    """The static part of a call: one compilation each."""

    n: int
    d: int
    budget: dpm_jax.Budget
    config: dpm_jax.DPMConfig


CI_SCENARIOS = (
    Scenario(1, 1, dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r=1)),
    Scenario(2, 3, dpm_jax.Budget(0.05, 1e-9), dpm_jax.DPMConfig(tau_r=2, alpha=0.1, t=0.2, q=0.1)),
    Scenario(50, 200, dpm_jax.Budget(5.0, 0.5), dpm_jax.DPMConfig(tau_r=1, num_sigmas=20)),
    Scenario(400, 4, dpm_jax.Budget(1e-3, 1e-6), dpm_jax.DPMConfig(
        tau_r=3, tau_e=2.0, epsilon_shares=(0.1, 0.2, 0.3, 0.4), delta_shares=(0.5, 0.5))),
    Scenario(3000, 2, dpm_jax.Budget(20.0, 1e-3), dpm_jax.DPMConfig(tau_r=2, sigma_step=0.01,
                                                                     num_sigmas=5)),
)

DTYPES = (np.float16, np.float32, np.float64, np.int32, np.int64)
VALUE_KINDS = ("uniform", "blobs", "constant columns", "duplicates", "on bounds",
               "on candidates", "outside bounds", "huge magnitudes")


# ----------------------------------------------------------------------- strategies
@st.composite
def public_bounds(draw, d: int):
    """(lo, hi): scalars or per-dimension arrays, ordinary, huge, tiny or offset ranges."""
    scale = draw(st.sampled_from([1.0, 255.0, 1e-6, 1e6, 1e30]))
    offset = draw(st.sampled_from([0.0, -0.5, 1.0, 1e3]))
    per_dimension = draw(st.booleans()) and d > 1
    if per_dimension:
        widths = np.asarray(draw(st.lists(st.floats(0.01, 10.0), min_size=d, max_size=d)))
        lo = (offset - widths / 2) * scale
        hi = (offset + widths / 2) * scale
        return lo, hi
    return (offset - 0.5) * scale, (offset + 0.5) * scale


@st.composite
def points_for(draw, n: int, d: int, bounds, config: dpm_jax.DPMConfig):
    """(n, d) data in a drawn dtype and value pattern (NumPy RNG seeded by hypothesis)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(VALUE_KINDS))
    dtype = draw(st.sampled_from(DTYPES))
    lo = np.broadcast_to(np.asarray(bounds[0], np.float64), (d,))
    hi = np.broadcast_to(np.asarray(bounds[1], np.float64), (d,))
    width = hi - lo
    if kind == "uniform":
        points = lo + rng.random((n, d)) * width
    elif kind == "blobs":
        centres = lo + rng.random((3, d)) * width
        points = centres[rng.integers(0, 3, n)] + rng.normal(0, 0.01, (n, d)) * width
    elif kind == "constant columns":
        points = lo + rng.random((n, d)) * width
        points[:, rng.random(d) < 0.5] = lo + 0.3 * width if d == 1 else points[0, 0]
    elif kind == "duplicates":
        points = np.repeat(lo + rng.random((1, d)) * width, n, axis=0)
    elif kind == "on bounds":
        points = np.where(rng.random((n, d)) < 0.5, lo, hi)
    elif kind == "on candidates":  # split positions and interval edges of the finest beta
        beta = config.interval_factor * config.sigma_step
        grid = np.arange(0, math.ceil(1 / beta) + 1) * beta / 2  # half-interval edges
        points = lo + rng.choice(np.clip(grid, 0, 1), (n, d)) * width
    elif kind == "outside bounds":
        points = lo + rng.normal(0.5, 3.0, (n, d)) * width
    else:  # huge magnitudes: far outside, still finite in the input dtype
        big = np.finfo(dtype).max / 4 if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).max // 4
        points = rng.choice([-1.0, 1.0], (n, d)) * float(big)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        points = np.clip(np.round(points), info.min, info.max)
    else:
        points = np.clip(points, -np.finfo(dtype).max, np.finfo(dtype).max)
    return points.astype(dtype)


# ------------------------------------------------------------------------ properties
def check_cluster_properties(key, points, budget, bounds, config) -> dpm_jax.ClusterResult:
    """Run ``cluster`` and assert every property a valid call must have."""
    before = points.copy()
    result = dpm_jax.cluster(key, points, budget, bounds=bounds, config=config)
    assert points.dtype == before.dtype and np.array_equal(points, before, equal_nan=True), \
        "the caller's array was modified"
    d = points.shape[1]
    centers, counts = np.asarray(result.centers), np.asarray(result.counts)
    valid, k = np.asarray(result.valid), int(result.k)
    assert centers.shape == (config.max_clusters, d) and valid.shape == (config.max_clusters,)
    assert valid.sum() == k and 1 <= k <= config.max_clusters
    assert np.all(np.isfinite(centers[valid])) and np.all(np.isnan(centers[~valid]))
    assert np.all(np.isfinite(counts)) and np.all(counts[~valid] == 0)
    lo32 = np.broadcast_to(np.asarray(bounds[0], np.float32), (d,))
    hi32 = np.broadcast_to(np.asarray(bounds[1], np.float32), (d,))
    assert np.all((centers[valid] >= lo32) & (centers[valid] <= hi32)), "centre outside the bounds"
    assert math.isclose(result.ledger.total_epsilon, budget.epsilon, rel_tol=1e-12)
    assert math.isclose(result.ledger.total_delta, budget.delta, rel_tol=1e-12)
    tree = result.tree
    reached, is_split = np.asarray(tree.reached), np.asarray(tree.is_split)
    split_dim = np.asarray(tree.split_dim)
    assert reached[1] and not reached[0]
    inner = np.flatnonzero(is_split)
    assert np.all(reached[inner]) and np.all(reached[2 * inner]) and np.all(reached[2 * inner + 1])
    assert np.all((split_dim >= -1) & (split_dim < d))
    assert np.all(np.isfinite(np.asarray(tree.noisy_count)))
    labels = np.asarray(result.labels_nonprivate)
    assert labels.shape == (points.shape[0],) and np.all(valid[labels])
    return result


@CI_SETTINGS
@given(data=st.data())
def test_cluster_on_fuzzed_valid_inputs(data):
    # Long because: 30 fuzzed scenarios, each a new (n, d, config) and so a new compile (~30 s).
    scenario = data.draw(st.sampled_from(CI_SCENARIOS), label="scenario")
    bounds = data.draw(public_bounds(scenario.d), label="bounds")
    points = data.draw(points_for(scenario.n, scenario.d, bounds, scenario.config), label="points")
    key = jax.random.key(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    check_cluster_properties(key, points, scenario.budget, bounds, scenario.config)


# --------------------------------------------------------------------- invalid inputs
GOOD_X = np.zeros((5, 2), np.float32)
GOOD_BUDGET = dpm_jax.Budget(1.0, 1e-6)
GOOD_BOUNDS = (-1.0, 1.0)


_DEFAULT = object()


def call(key=_DEFAULT, X=_DEFAULT, budget=_DEFAULT, bounds=_DEFAULT, **kwargs):
    """``cluster`` with valid arguments except the ones given."""
    pick = lambda value, default: default if value is _DEFAULT else value
    return dpm_jax.cluster(pick(key, jax.random.key(0)), pick(X, GOOD_X), pick(budget, GOOD_BUDGET),
                           bounds=pick(bounds, GOOD_BOUNDS), **kwargs)


@CI_SETTINGS
@given(bad=st.sampled_from([np.nan, np.inf, -np.inf]), row=st.integers(0, 4), col=st.integers(0, 1),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]))
def test_non_finite_points_are_rejected(bad, row, col, dtype):
    X = np.zeros((5, 2), dtype)
    X[row, col] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        call(X=X)


@pytest.mark.parametrize("X,error", [
    (np.zeros(5, np.float32), ValueError),  # rank 1
    (np.zeros((2, 2, 2), np.float32), ValueError),  # rank 3
    (np.zeros((0, 2), np.float32), ValueError),  # no points
    (np.zeros((3, 0), np.float32), ValueError),  # no dimensions
    (np.array([["a", "b"]]), TypeError),
    (np.zeros((3, 2), bool), TypeError),
    (np.zeros((3, 2), np.complex64), TypeError),
    ("not an array", TypeError),
])
def test_malformed_points_are_rejected(X, error):
    with pytest.raises(error):
        call(X=X)


@CI_SETTINGS
@given(epsilon=st.one_of(st.floats(max_value=0.0), st.just(math.inf), st.just(math.nan)))
def test_non_positive_epsilon_is_rejected(epsilon):
    with pytest.raises(ValueError):
        dpm_jax.Budget(epsilon, 1e-6)


@CI_SETTINGS
@given(delta=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(math.nan)))
def test_delta_outside_the_unit_interval_is_rejected(delta):
    with pytest.raises(ValueError):
        dpm_jax.Budget(1.0, delta)


@pytest.mark.parametrize("epsilon,delta", [("1", 1e-6), (1.0, None), (True, 1e-6), ([1.0], 1e-6)])
def test_non_numeric_budget_is_rejected(epsilon, delta):
    with pytest.raises(TypeError):
        dpm_jax.Budget(epsilon, delta)


@CI_SETTINGS
@given(lo=st.floats(-1e6, 1e6), gap=st.floats(0.0, 1e6), per_dim=st.booleans())
def test_bounds_with_lo_not_below_hi_are_rejected(lo, gap, per_dim):
    bounds = (lo, lo - gap)
    if per_dim:
        bounds = (np.array([lo - 1.0, lo]), np.array([lo + 1.0, lo - gap]))  # one bad dimension
    with pytest.raises(ValueError, match="lo < hi"):
        call(bounds=bounds)


@pytest.mark.parametrize("bounds", [None, (0.0,), (0.0, 1.0, 2.0), (np.zeros(3), np.ones(3)),
                                    (np.nan, 1.0), (0.0, np.inf), (np.zeros((2, 2)), 1.0)])
def test_malformed_bounds_are_rejected(bounds):
    with pytest.raises(ValueError):
        call(bounds=bounds)


@pytest.mark.parametrize("kwargs", [
    dict(t=0.1, q=0.1),  # t < 2q
    dict(q=0.5, t=1.0), dict(q=0.7, t=1.0), dict(q=0.0), dict(q=-0.1),  # q outside (0, 1/2)
    dict(alpha=0.0), dict(alpha=-1.0),
    dict(tau_r=0), dict(tau_r=-3),
    dict(epsilon_shares=(0.25, 0.25, 0.25, 0.3)), dict(epsilon_shares=(0.5, 0.5, 0.0, 0.0)),
    dict(epsilon_shares=(1.0,)), dict(delta_shares=(0.5, 0.6)), dict(delta_shares=(1.0, 0.0)),
])
def test_invalid_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        dpm_jax.DPMConfig(**kwargs)


@CI_SETTINGS
@given(q=st.floats(1e-3, 0.499), slack=st.floats(1e-6, 0.5))
def test_centreness_needs_t_at_least_2q(q, slack):
    with pytest.raises(ValueError):
        dpm_jax.DPMConfig(q=q, t=2 * q - slack * 2 * q)


@pytest.mark.parametrize("kwargs", [dict(tau_r=2.5), dict(tau_r=True), dict(alpha="5"),
                                    dict(t=float("nan"))])
def test_mistyped_config_is_rejected(kwargs):
    with pytest.raises((TypeError, ValueError)):
        dpm_jax.DPMConfig(**kwargs)


@pytest.mark.parametrize("key", [
    0, 1.5, None, "key", np.zeros(2, np.float32), np.zeros(3, np.uint32),
    jax.random.split(jax.random.key(0), 2),  # a batch of keys: use jax.vmap
    np.zeros((2, 2), np.uint32),
])
def test_non_key_is_rejected(key):
    with pytest.raises(TypeError, match="PRNG key"):
        call(key=key)


def test_wrong_budget_config_and_mask_are_rejected():
    with pytest.raises(TypeError):
        call(budget=(1.0, 1e-6))
    with pytest.raises(TypeError):
        call(config={"tau_r": 3})
    with pytest.raises(ValueError):
        call(point_mask=np.ones(4, bool))


@pytest.mark.parametrize("budget", [dpm_jax.Budget(100.0, 1e-3), dpm_jax.Budget(1000.0, 1e-6)])
def test_budgets_no_exact_sampler_can_certify_are_rejected(budget):
    """At epsilon_avg = 60 (or per-level count epsilons near 45) e^epsilon times a
    sampler's proven deviation exceeds delta: refused before any work, not released
    with an uncharged delta (a count sampler at epsilon > 45 once added no noise)."""
    with pytest.raises(ValueError, match="delta|degenerate"):
        call(budget=budget)
