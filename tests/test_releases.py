"""The generic releases: each draws with the parameters its ledger line states."""

import math

import jax
import numpy as np
import pytest

from dpm_jax import keys
from dpm_jax.mechanisms import count_sampler_tv, em_sampler_tv, discrete_laplace_count
from dpm_jax.releases import CountRelease, GaussianRelease, SelectionRelease, ledger_of, split_budget


def test_count_release_draws_what_its_line_states():
    release = CountRelease("count/test", 0.5, keys.COUNT, sensitivity=1)
    key = jax.random.key(3)
    counts = np.array([0, 5, 100], np.int32)

    direct = discrete_laplace_count(key, counts, 0.5)
    got = release.draw(key, counts)
    assert all(np.array_equal(a, b) for a, b in zip(got.limbs, direct.limbs))
    line = release.entry()
    assert line.epsilon == 0.5 and line.noise_scale == 2.0
    assert line.sampler_delta == count_sampler_tv(0.5) * (1 + math.exp(0.5))


def test_count_release_with_sensitivity_d_uses_epsilon_over_d():
    release = CountRelease("bounds", 1.0, keys.COUNT, sensitivity=4)
    key = jax.random.key(0)
    counts = np.zeros(8, np.int32)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(release.draw(key, counts).limbs, discrete_laplace_count(key, counts, 0.25).limbs)
    )
    assert release.entry().noise_scale == 4.0
    assert release.sampler_delta == 4 * count_sampler_tv(0.25) * (1 + math.exp(1.0))


def test_selection_release_line_and_margin():
    release = SelectionRelease("split", 0.3, keys.SPLIT, sensitivity=2, num_candidates=100)
    assert release.entry().sampler_delta == em_sampler_tv(100) * (1 + math.exp(0.3))
    with pytest.raises(ValueError, match="too small"):
        SelectionRelease("split", 1e-9, keys.SPLIT, 1, 10).check()


def test_gaussian_release_is_calibrated_within_its_delta():
    release = GaussianRelease.calibrated("sums", 1.0, 1e-6, keys.AVERAGE, 3.0, dimension=5)
    assert release.sigma >= 3.0 and 0 < release.sampler_delta < 1e-7
    assert release.draw(jax.random.key(1), (4, 5)).shape == (4, 5)
    ledger = ledger_of([release, CountRelease("c", 0.5, keys.COUNT)])
    assert math.isclose(ledger.total_epsilon, 1.5) and ledger[0].delta == 1e-6


@pytest.mark.parametrize("seed", range(3))
def test_split_budget_never_exceeds_the_total(seed):
    rng = np.random.default_rng(seed)
    for _ in range(2000):
        total = float(rng.uniform(1e-3, 10) * 10.0 ** rng.integers(-6, 2))
        shares = list(rng.uniform(0, 1, rng.integers(1, 9)))
        parts = split_budget(total, shares)
        assert math.fsum(parts) <= total and math.isclose(math.fsum(parts), total, rel_tol=1e-12)


def test_split_budget_refuses_bad_shares():
    with pytest.raises(ValueError, match="shares"):
        split_budget(1.0, [0.0, 0.0])
