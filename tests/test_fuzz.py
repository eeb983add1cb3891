"""Property-based fuzzing of ``dpm_jax.cluster`` with hypothesis.

Valid inputs (any shape, dtype, value pattern, bounds, config and budget) must give:
no crash, finite centres and counts where ``valid``, NaN centres elsewhere,
``valid.sum() == k``, centres inside the public bounds, a ledger that adds up to
the budget, a consistent split tree, and the caller's array unchanged. Invalid
inputs must raise a clear ValueError or TypeError before any work is done.

Compiling ``cluster`` costs seconds per (shape, budget, config), so the CI test
draws the *values* freely but the static part from a few fixed scenarios, with
derandomised examples (reproducible). The strategies and checks live in
:mod:`fuzzing` (tests/fuzzing.py, test tooling: not shipped in the package);
``benchmarks/fuzz_campaign.py`` uses them with free shapes, configs and budgets and many more examples.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpm_jax
from fuzzing import INVALID_INPUTS, Scenario, call, check_cluster_properties, points_for, public_bounds

CI_SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CI_SCENARIOS = (
    Scenario(1, 1, dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r=1)),
    Scenario(2, 3, dpm_jax.Budget(0.05, 1e-9), dpm_jax.DPMConfig(tau_r=2, alpha=0.1, t=0.2, q=0.1)),
    Scenario(50, 200, dpm_jax.Budget(5.0, 0.5), dpm_jax.DPMConfig(tau_r=1, num_sigmas=20)),
    Scenario(
        400,
        4,
        dpm_jax.Budget(1e-3, 1e-6),
        dpm_jax.DPMConfig(tau_r=3, tau_e=2.0, epsilon_shares=(0.1, 0.2, 0.3, 0.4), delta_shares=(0.5, 0.5)),
    ),
    Scenario(3000, 2, dpm_jax.Budget(20.0, 1e-3), dpm_jax.DPMConfig(tau_r=2, sigma_step=0.01, num_sigmas=5)),
)


def _ci_check(name: str):
    """The invalid-input check ``name`` of tests/fuzzing.py as a derandomised CI test."""
    strategies, check = INVALID_INPUTS[name]
    return CI_SETTINGS(given(**strategies)(check))


@pytest.mark.slow
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
test_non_finite_points_are_rejected = _ci_check("non-finite points")
test_non_positive_epsilon_is_rejected = _ci_check("epsilon <= 0")
test_delta_outside_the_unit_interval_is_rejected = _ci_check("delta outside (0, 1)")
test_bounds_with_lo_not_below_hi_are_rejected = _ci_check("lo >= hi")
test_centreness_needs_t_at_least_2q = _ci_check("t < 2q")


@pytest.mark.parametrize(
    "X,error",
    [
        (np.zeros(5, np.float32), ValueError),  # rank 1
        (np.zeros((2, 2, 2), np.float32), ValueError),  # rank 3
        (np.zeros((0, 2), np.float32), ValueError),  # no points
        (np.zeros((3, 0), np.float32), ValueError),  # no dimensions
        (np.array([["a", "b"]]), TypeError),
        (np.zeros((3, 2), bool), TypeError),
        (np.zeros((3, 2), np.complex64), TypeError),
        ("not an array", TypeError),
    ],
)
def test_malformed_points_are_rejected(X, error):
    with pytest.raises(error):
        call(X=X)


@pytest.mark.parametrize("epsilon,delta", [("1", 1e-6), (1.0, None), (True, 1e-6), ([1.0], 1e-6)])
def test_non_numeric_budget_is_rejected(epsilon, delta):
    with pytest.raises(TypeError):
        dpm_jax.Budget(epsilon, delta)


@pytest.mark.parametrize(
    "bounds",
    [None, (0.0,), (0.0, 1.0, 2.0), (np.zeros(3), np.ones(3)), (np.nan, 1.0), (0.0, np.inf), (np.zeros((2, 2)), 1.0)],
)
def test_malformed_bounds_are_rejected(bounds):
    with pytest.raises(ValueError):
        call(bounds=bounds)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(t=0.1, q=0.1),  # t < 2q
        dict(q=0.5, t=1.0),
        dict(q=0.7, t=1.0),
        dict(q=0.0),
        dict(q=-0.1),  # q outside (0, 1/2)
        dict(alpha=0.0),
        dict(alpha=-1.0),
        dict(tau_r=0),
        dict(tau_r=-3),
        dict(epsilon_shares=(0.25, 0.25, 0.25, 0.3)),
        dict(epsilon_shares=(0.5, 0.5, 0.0, 0.0)),
        dict(epsilon_shares=(1.0,)),
        dict(delta_shares=(0.5, 0.6)),
        dict(delta_shares=(1.0, 0.0)),
    ],
)
def test_invalid_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        dpm_jax.DPMConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(tau_r=2.5), dict(tau_r=True), dict(alpha="5"), dict(t=float("nan"))])
def test_mistyped_config_is_rejected(kwargs):
    with pytest.raises((TypeError, ValueError)):
        dpm_jax.DPMConfig(**kwargs)


@pytest.mark.parametrize(
    "key",
    [
        0,
        1.5,
        None,
        "key",
        np.zeros(2, np.float32),
        np.zeros(3, np.uint32),
        jax.random.split(jax.random.key(0), 2),  # a batch of keys: use jax.vmap
        np.zeros((2, 2), np.uint32),
    ],
)
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
