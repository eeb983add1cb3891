"""dpm_jax.diagnostics: public per-level budget arithmetic, no data."""

import inspect
import math

import pytest

import dpm_jax
from dpm_jax import diagnostics
from dpm_jax.budget import allocate


def test_plan_reads_no_data():
    """Only public numbers go in: the signature has no data argument."""
    assert list(inspect.signature(diagnostics.plan).parameters) == ["n", "d", "budget", "config"]


def test_levels_follow_the_allocation_and_lemma_5():
    budget, config = dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r=5)
    plan = diagnostics.plan(50_000, 4, budget, config)
    allocation = allocate(budget, config, 4)
    assert len(plan.levels) == config.tau_r
    slope = config.t / config.q + config.alpha
    for level in plan.levels:
        n_l = 50_000 / 2**level.level
        assert level.nodes == 2**level.level and level.node_size == n_l
        assert level.split_epsilon == allocation.split_epsilons[level.level]
        assert level.count_offset == allocation.count_offsets[level.level]
        assert math.isclose(level.score_sensitivity, slope / max(n_l - level.count_offset, 1.0))
        assert math.isclose(level.exponent_scale, level.split_epsilon / (2 * level.score_sensitivity))


def test_signal_shrinks_with_depth_and_grows_with_n_and_epsilon():
    small = diagnostics.plan(20_000, 2, dpm_jax.Budget(1.0, 1e-6))
    large = diagnostics.plan(200_000, 2, dpm_jax.Budget(1.0, 1e-6))
    richer = diagnostics.plan(20_000, 2, dpm_jax.Budget(10.0, 1e-6))
    scales = [level.exponent_scale for level in small.levels]
    assert scales[0] > scales[3]  # deeper nodes are smaller: less signal
    assert large.useful_depth >= small.useful_depth and richer.useful_depth >= small.useful_depth
    assert small.useful_depth < small.config.tau_r <= large.useful_depth
    # near random means: even the largest score gap cannot beat the other candidates
    for level in small.levels:
        assert level.near_random == (level.exponent_scale * (small.config.t + small.config.alpha)
                                     < math.log(small.candidates))


def test_report_names_the_levels_and_recommends_a_depth():
    text = str(diagnostics.plan(20_000, 2, dpm_jax.Budget(1.0, 1e-6)))
    assert "near random" in text and "informative" in text and "tau_r = " in text
    assert "recommendation" in text


@pytest.mark.parametrize("n, d", [(0, 2), (-5, 2), (math.inf, 2), ("100", 2), (100, 0), (100, 2.5)])
def test_bad_public_sizes_are_rejected(n, d):
    with pytest.raises(ValueError):
        diagnostics.plan(n, d, dpm_jax.Budget(1.0, 1e-6))


def test_recommended_depth_is_the_deepest_fully_informative_one():
    budget = dpm_jax.Budget(1.0, 1e-6)
    best = diagnostics.recommended_tau_r(20_000, 2, budget)
    assert 1 <= best < 7  # the default depth starves this size (benchmarks/diagnostics.py)
    at_best = diagnostics.plan(20_000, 2, budget, dpm_jax.DPMConfig(tau_r=best))
    deeper = diagnostics.plan(20_000, 2, budget, dpm_jax.DPMConfig(tau_r=best + 1))
    assert at_best.useful_depth == best and deeper.useful_depth < best + 1
    assert diagnostics.recommended_tau_r(100, 2, dpm_jax.Budget(0.01, 1e-6)) == 0
    assert diagnostics.recommended_tau_r(10**7, 2, budget) >= 7
