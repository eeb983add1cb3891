"""The empirical privacy audit (dpm_jax/audit.py): its statistics, and that it passes
the real library and catches deliberately broken variants.

The audits below run at confidence 0.999: a *correct* mechanism exceeds its claimed
epsilon in the audit with probability <= 1e-3 (over the randomness, at these fixed
keys the outcome is deterministic). Each broken variant was checked to be caught
with the fixed key and run count used here, with a wide margin (the expected bound
of the broken variant is about twice the claim).

Broken variants are injected without changing the library:
``dpm_jax.audit.substituted`` replaces a function object in every dpm_jax module
that imported it for the duration of a ``with`` block and clears JAX's caches, so
the compiled ``cluster`` is rebuilt with the broken piece and discarded after.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import dpm_jax
from dpm_jax import audit as audit_lib
from dpm_jax import budget as budget_lib
from dpm_jax import mechanisms

CONFIDENCE = 0.999
CLAIMED = dpm_jax.Budget(1.0, 1e-6)
BOUNDS = (-1.0, 1.0)
# Count-heavy configuration: 97% of epsilon on the counts, one split level, one
# fixed interval size (8 candidates), every split applied (tau_e below any count),
# so the released root and right-child counts carry almost the whole budget.
COUNT_CONFIG = dpm_jax.DPMConfig(tau_r=1, tau_e=-1e6, sigma_step=0.25, num_sigmas=1,
                                 epsilon_shares=(0.01, 0.97, 0.01, 0.01))
N_POINTS = 20


def count_audit() -> audit_lib.AuditResult:
    """The full ``cluster`` on a cluster at the lower corner +- one point at the upper
    corner; the event: root count >= n + 1 and right-child count >= 1 (the extra
    point always goes right). Its log-ratio is exactly eps_cnt_0 + eps_cnt_1 = 0.97."""
    a, b = audit_lib.far_point_neighbours(np.full((N_POINTS, 1), -1.0), BOUNDS, masked=True)
    events = {
        "root >= n+1 and right >= 1": audit_lib.both(
            audit_lib.node_count_at_least(1, N_POINTS + 1), audit_lib.node_count_at_least(3, 1)),
        "k == 2": audit_lib.num_clusters_equals(2),
    }
    mechanism = audit_lib.cluster_mechanism(CLAIMED, BOUNDS, COUNT_CONFIG)
    return audit_lib.audit(jax.random.key(0), mechanism, a, b, events, 20_000,
                           delta=CLAIMED.delta, confidence=CONFIDENCE)


# --------------------------------------------------------------------- statistics
@pytest.mark.parametrize("num_runs,p", [(50, 0.1), (400, 0.5), (1000, 0.02)])
def test_clopper_pearson_bounds_have_their_coverage(num_runs, p):
    """Exact coverage: P[lower > p] <= level and P[upper < p] <= level (binomial sums)."""
    level = 0.01
    ks = np.arange(num_runs + 1)
    bounds = np.array([audit_lib.clopper_pearson_bounds(int(k), num_runs, level) for k in ks])
    pmf = stats.binom.pmf(ks, num_runs, p)
    assert pmf[bounds[:, 0] > p].sum() <= level
    assert pmf[bounds[:, 1] < p].sum() <= level
    assert bounds[0, 0] == 0.0 and bounds[-1, 1] == 1.0
    assert np.all(bounds[:, 0] <= ks / num_runs) and np.all(ks / num_runs <= bounds[:, 1])


def test_epsilon_lower_bound_properties():
    bound, direction, _, _ = audit_lib.epsilon_lower_bound(500, 500, 1000)
    assert bound == 0.0  # equal frequencies prove nothing
    bound, direction, _, _ = audit_lib.epsilon_lower_bound(100, 800, 1000, level=0.01)
    swapped, other, _, _ = audit_lib.epsilon_lower_bound(800, 100, 1000, level=0.01)
    assert bound == swapped > 0 and direction == "P_b(E) / P_a(E)" and other == "P_a(E) / P_b(E)"
    assert bound < math.log(8.0)  # a lower bound stays below the point estimate
    # the complement direction: 990 vs 900 occurrences are 10 vs 100 non-occurrences
    bound_c, direction_c, _, _ = audit_lib.epsilon_lower_bound(990, 900, 1000, level=0.01)
    assert direction_c == "P_b(not E) / P_a(not E)" and bound_c > 1.0
    with_delta, _, _, _ = audit_lib.epsilon_lower_bound(100, 800, 1000, delta=0.05, level=0.01)
    assert with_delta < bound  # delta absorbs part of the difference
    more_runs, _, _, _ = audit_lib.epsilon_lower_bound(1000, 8000, 10000, level=0.01)
    assert bound < more_runs < math.log(8.0)


def test_audit_counts_events_exactly():
    """A Bernoulli 'mechanism' with public p: counts equal a direct simulation, also
    when num_runs is not a multiple of the batch size."""
    mechanism = lambda key, p: jax.random.uniform(key) < p
    events = {"one": lambda out: out, "zero": lambda out: ~out}
    result = audit_lib.audit(jax.random.key(5), mechanism, jnp.float32(0.3), jnp.float32(0.6),
                             events, 1001, batch_size=300)
    key_a, key_b = jax.random.split(jax.random.key(5))
    keys_a = jax.random.split(key_a, 4 * 300)[:1001]
    direct = int(jnp.sum(jax.vmap(lambda k: mechanism(k, jnp.float32(0.3)))(keys_a)))
    one, zero = result.per_event
    assert one.count_a == direct and one.count_a + zero.count_a == 1001
    assert one.count_b + zero.count_b == 1001
    # ln(0.6/0.3) = 0.69 is the true privacy loss of this "mechanism"
    assert 0 < result.epsilon_lower_bound < math.log(0.6 / 0.3) + 0.1
    assert "epsilon lower bound" in result.table() and result.to_dict()["num_runs"] == 1001


def test_audit_rejects_bad_arguments():
    mechanism = lambda key, p: jax.random.uniform(key) < p
    for kwargs in (dict(events={}), dict(num_runs=0), dict(confidence=1.0), dict(delta=-0.1)):
        arguments = dict(events={"e": lambda o: o}, num_runs=10) | kwargs
        with pytest.raises(ValueError):
            audit_lib.audit(jax.random.key(0), mechanism, 0.1, 0.2, **arguments)


# --------------------------------------------------------- the real library passes
def test_full_cluster_count_audit_stays_below_the_claim():
    result = count_audit()
    assert result.epsilon_lower_bound <= CLAIMED.epsilon
    # ... and the audit is nearly tight (true log-ratio of the event: 0.97), so the
    # broken variants below are caught by the same measurement.
    assert result.epsilon_lower_bound > 0.75


def test_full_cluster_default_config_audit_stays_below_the_claim():
    """Default shares and depth 2 on two blobs +- a far point, several events."""
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(-50, 2, (30, 2)), rng.normal(-20, 2, (30, 2))])
    bounds = (-100.0, 100.0)
    a, b = audit_lib.far_point_neighbours(points, bounds, masked=True)
    events = {
        "root >= n+1": audit_lib.node_count_at_least(1, len(points) + 1),
        "k == 1": audit_lib.num_clusters_equals(1),
        "first split in dim 0": audit_lib.first_split_dim_equals(0),
        "first split above 0": audit_lib.first_split_above(0.0),
        "a centre near the far point": audit_lib.center_in_box([50.0, 50.0], [100.0, 100.0]),
    }
    mechanism = audit_lib.cluster_mechanism(CLAIMED, bounds, dpm_jax.DPMConfig(tau_r=2))
    result = audit_lib.audit(jax.random.key(1), mechanism, a, b, events, 8192,
                             delta=CLAIMED.delta, confidence=CONFIDENCE)
    assert result.epsilon_lower_bound <= CLAIMED.epsilon


# ------------------------------------------------------------ broken variants fail
def test_audit_catches_halved_count_noise():
    """Noise scale 1/(2 eps) instead of 1/eps: the counts spend 2 x 0.97 epsilon."""
    original = mechanisms.count_noise
    halved = lambda key, epsilon: original(key, 2.0 * np.asarray(epsilon, np.float64))
    with audit_lib.substituted(original, halved):
        assert count_audit().epsilon_lower_bound > CLAIMED.epsilon


def test_audit_catches_count_budget_reused_across_levels():
    """Every count level spends the whole count budget instead of its share."""
    original = budget_lib.allocate

    def reused(budget, config):
        allocation = original(budget, config)
        total = math.fsum(allocation.count_epsilons)
        return allocation._replace(count_epsilons=(total,) * len(allocation.count_epsilons))

    with audit_lib.substituted(original, reused):
        assert count_audit().epsilon_lower_bound > CLAIMED.epsilon


def test_substituted_restores_the_library():
    original = mechanisms.count_noise
    with audit_lib.substituted(original, lambda key, epsilon: None):
        assert dpm_jax.api.count_noise is not original
    assert dpm_jax.api.count_noise is original and mechanisms.count_noise is original
    with pytest.raises(ValueError):
        with audit_lib.substituted(lambda: None, lambda: None):
            pass


def split_step_audit() -> audit_lib.AuditResult:
    """One split choice of the tree (library pieces, public n~ = 72, 8 candidates,
    alpha = 0.01 so that the centreness carries the score). A: 66 points at 0.5 and 6
    at the upper bound; B adds one at the lower bound, which raises every rank by
    one: the 4 lower candidates (rank 0 -> 1) gain t/(q n~) ~ Delta_f, the 4 upper
    ones (distance 6 -> 5 from the top) lose as much. The event "a lower candidate"
    then has log-ratio ~ 2 x eps Delta_f / (2 Delta_f) = eps (correct) or 2 eps
    (without the factor 2)."""
    points = np.concatenate([np.full(66, 0.5), np.full(6, 1.0)]).astype(np.float32)[:, None]
    a, b = points, np.concatenate([points, np.zeros((1, 1), np.float32)])
    mechanism = audit_lib.split_step_mechanism(72.0, CLAIMED.epsilon, 0.125,
                                               dpm_jax.DPMConfig(alpha=0.01))
    events = {"a lower candidate": lambda out: out[1] < 4}
    return audit_lib.audit(jax.random.key(2), mechanism, a, b, events, 100_000,
                           confidence=CONFIDENCE)


def test_split_step_audit_stays_below_the_claim():
    result = split_step_audit()
    assert 0.7 < result.epsilon_lower_bound <= CLAIMED.epsilon


def test_audit_catches_exponential_mechanism_without_the_factor_2():
    """exp(eps f / Delta) as printed in Definition 4 (the paper's erratum)."""
    original = mechanisms.exponential_mechanism
    without_factor_2 = lambda key, scores, valid, epsilon, sensitivity: original(
        key, scores, valid, 2.0 * epsilon, sensitivity)
    with audit_lib.substituted(original, without_factor_2):
        assert split_step_audit().epsilon_lower_bound > CLAIMED.epsilon


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_worst_case_scores_audit_of_the_exponential_mechanism(factor):
    """Scores that move by exactly +-Delta between neighbours, the worst case the
    mechanism's claim covers: the correct sampler stays below eps, the one without the
    factor 2 (logits doubled) exceeds it."""
    epsilon, sensitivity = 1.0, 0.5
    scores_a = jnp.array([0.0, 3.0], jnp.float32)  # A: candidate 0 far behind
    scores_b = scores_a + jnp.array([sensitivity, -sensitivity])  # B: 0 up, 1 down by Delta

    def mechanism(key, scores):
        _, candidate = mechanisms.exponential_mechanism(
            key, scores[None, None, :], jnp.ones((1, 1, 2), bool), factor * epsilon,
            jnp.array([sensitivity]))
        return candidate[0]

    result = audit_lib.audit(jax.random.key(3), mechanism, scores_a, scores_b,
                             {"candidate 0": lambda c: c == 0}, 100_000, confidence=CONFIDENCE)
    if factor == 1.0:
        assert 0.7 < result.epsilon_lower_bound <= epsilon
    else:
        assert result.epsilon_lower_bound > epsilon
