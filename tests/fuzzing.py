"""Hypothesis strategies and property checks for fuzzing :func:`dpm_jax.cluster`.

Shared by the CI fuzz tests (tests/test_fuzz.py: a few fixed scenarios, derandomised)
and the longer campaign (benchmarks/fuzz_campaign.py: free scenarios, many examples).
Valid inputs must give: no crash, finite centres and counts where ``valid``, NaN
centres elsewhere, ``valid.sum() == k``, centres inside the public bounds, a ledger
that adds up to the budget, a consistent split tree, and the caller's array
unchanged (:func:`check_cluster_properties`). Invalid inputs must raise a clear
ValueError or TypeError before any work (:data:`INVALID_INPUTS`). Needs hypothesis
and pytest (test dependencies).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np
import pytest
from hypothesis import strategies as st

import dpm_jax

__all__ = [
    "Scenario",
    "DTYPES",
    "VALUE_KINDS",
    "public_bounds",
    "points_for",
    "check_cluster_properties",
    "call",
    "INVALID_INPUTS",
]


class Scenario(NamedTuple):
    """The static part of a call: one compilation each."""

    n: int
    d: int
    budget: dpm_jax.Budget
    config: dpm_jax.DPMConfig


DTYPES = (np.float16, np.float32, np.float64, np.int32, np.int64)
VALUE_KINDS = (
    "uniform",
    "blobs",
    "constant columns",
    "duplicates",
    "on bounds",
    "on candidates",
    "outside bounds",
    "huge magnitudes",
)


# ----------------------------------------------------------------------- strategies
@st.composite
def public_bounds(draw, d: int):
    """(lo, hi): scalars or per-dimension arrays, ordinary, huge, tiny or offset ranges."""
    scale = draw(st.sampled_from([1.0, 255.0, 1e-6, 1e6, 1e28]))  # widths within 2**-100 .. 2**100
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
        centers = lo + rng.random((3, d)) * width
        points = centers[rng.integers(0, 3, n)] + rng.normal(0, 0.01, (n, d)) * width
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
    assert points.dtype == before.dtype and np.array_equal(points, before, equal_nan=True), (
        "the caller's array was modified"
    )
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
    # a leaf of released size < 1 is dropped (dpm_jax.api.released_arrays): its points keep their slot
    assert labels.shape == (points.shape[0],) and np.all((labels >= 0) & (labels < config.max_clusters))
    assert np.all(counts[valid] >= 1)
    return result


# --------------------------------------------------------------------- invalid inputs
GOOD_X = np.zeros((5, 2), np.float32)
GOOD_BUDGET = dpm_jax.Budget(1.0, 1e-6)
GOOD_BOUNDS = (-1.0, 1.0)


_DEFAULT = object()


def call(key=_DEFAULT, X=_DEFAULT, budget=_DEFAULT, bounds=_DEFAULT, **kwargs):
    """``cluster`` with valid arguments except the ones given."""
    pick = lambda value, default: default if value is _DEFAULT else value
    return dpm_jax.cluster(
        pick(key, jax.random.key(0)),
        pick(X, GOOD_X),
        pick(budget, GOOD_BUDGET),
        bounds=pick(bounds, GOOD_BOUNDS),
        **kwargs,
    )


def _non_finite_points(bad, row, col, dtype):
    X = np.zeros((5, 2), dtype)
    X[row, col] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        call(X=X)


def _non_positive_epsilon(epsilon):
    with pytest.raises(ValueError):
        dpm_jax.Budget(epsilon, 1e-6)


def _delta_outside_the_unit_interval(delta):
    with pytest.raises(ValueError):
        dpm_jax.Budget(1.0, delta)


def _bounds_with_lo_not_below_hi(lo, gap, per_dim):
    bounds = (lo, lo - gap)
    if per_dim:
        bounds = (np.array([lo - 1.0, lo]), np.array([lo + 1.0, lo - gap]))  # one bad dimension
    with pytest.raises(ValueError, match="lo < hi"):
        call(bounds=bounds)


def _centreness_below_2q(q, slack):
    with pytest.raises(ValueError):
        dpm_jax.DPMConfig(q=q, t=2 * q - slack * 2 * q)


# name: (hypothesis strategies by argument, the check); wrap with ``given(**strategies)``.
INVALID_INPUTS = {
    "non-finite points": (
        dict(
            bad=st.sampled_from([np.nan, np.inf, -np.inf]),
            row=st.integers(0, 4),
            col=st.integers(0, 1),
            dtype=st.sampled_from([np.float16, np.float32, np.float64]),
        ),
        _non_finite_points,
    ),
    "epsilon <= 0": (
        dict(epsilon=st.one_of(st.floats(max_value=0.0), st.just(math.inf), st.just(math.nan))),
        _non_positive_epsilon,
    ),
    "delta outside (0, 1)": (
        dict(delta=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(math.nan))),
        _delta_outside_the_unit_interval,
    ),
    "lo >= hi": (
        dict(lo=st.floats(-1e6, 1e6), gap=st.floats(0.0, 1e6), per_dim=st.booleans()),
        _bounds_with_lo_not_below_hi,
    ),
    "t < 2q": (dict(q=st.floats(1e-3, 0.499), slack=st.floats(1e-6, 0.5)), _centreness_below_2q),
}
