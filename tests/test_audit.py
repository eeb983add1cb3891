"""The empirical privacy audit (dpm_jax/eval/audit.py): its statistics, and that it passes
the real library and catches deliberately broken variants.

The audits below run at confidence 0.999: a *correct* mechanism exceeds its claimed
epsilon in the audit with probability <= 1e-3 (over the randomness, at these fixed
keys the outcome is deterministic). Each broken variant was checked to be caught
with the fixed key and run count used here, with a wide margin (the expected bound
of the broken variant is about twice the claim).

Every audit of the library here is paired with a planted violation of the size it is
meant to catch, caught by the same measurement: an audit without that power would
pass almost any bug. The default-configuration audit (several events, bound near 0:
its events carry a small share of epsilon each) runs in benchmarks/audit.py, whose
results are committed in benchmarks/results/audit.json.

Broken variants are injected without changing the library:
``dpm_jax.testing.substituted`` replaces a function object in every dpm_jax module
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
from dpm_jax.eval import audit as audit_lib
from dpm_jax.testing import substituted
from dpm_jax import averaging, exact, mechanisms
from dpm_jax import budget as budget_lib
from conftest import USERS_COMPILER_OPTIONS

CONFIDENCE = 0.999
CLAIMED = dpm_jax.Budget(1.0, 1e-6)
BOUNDS = (-1.0, 1.0)
# Count-heavy configuration: 97% of epsilon on the counts, one split level, one
# fixed interval size (8 candidates), every split applied (tau_e below any count),
# so the released root and right-child counts carry almost the whole budget.
COUNT_CONFIG = dpm_jax.DPMConfig(
    tau_r=1, tau_e=-1e6, sigma_step=0.25, num_sigmas=1, epsilon_shares=(0.01, 0.97, 0.01, 0.01), split_grid="paper"
)
N_POINTS = 20


def count_audit() -> audit_lib.AuditResult:
    """The full ``cluster`` on a cluster at the lower corner +- one point at the upper
    corner; the event: root count >= n + 1 and right-child count >= 1 (the extra
    point always goes right). Its log-ratio is exactly eps_cnt_0 + eps_cnt_1 = 0.97."""
    a, b = audit_lib.far_point_neighbours(np.full((N_POINTS, 1), -1.0), BOUNDS, masked=True)
    events = {
        "root >= n+1 and right >= 1": audit_lib.both(
            audit_lib.noisy_count_at_least(1, N_POINTS + 1), audit_lib.noisy_count_at_least(3, 1)
        ),
        "k == 2": audit_lib.num_clusters_equals(2),
    }
    mechanism = audit_lib.cluster_mechanism(CLAIMED, BOUNDS, COUNT_CONFIG)
    return audit_lib.audit(
        jax.random.key(0),
        mechanism,
        a,
        b,
        events,
        20_000,
        delta=CLAIMED.delta,
        confidence=CONFIDENCE,
        compiler_options=USERS_COMPILER_OPTIONS,
    )


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


@pytest.mark.slow
def test_audit_counts_events_exactly():
    # Long because: the auditor's runs (2 s in the fast loop, 2 cores at load 7).
    """A Bernoulli 'mechanism' with public p: counts equal a direct simulation, also
    when num_runs is not a multiple of the batch size."""
    mechanism = lambda key, p: jax.random.uniform(key) < p
    events = {"one": lambda out: out, "zero": lambda out: ~out}
    result = audit_lib.audit(
        jax.random.key(5), mechanism, jnp.float32(0.3), jnp.float32(0.6), events, 1001, batch_size=300
    )
    key_a, key_b = jax.random.split(jax.random.key(5))
    keys_a = jax.random.split(key_a, 4 * 300)[:1001]
    direct = int(jnp.sum(jax.vmap(lambda k: mechanism(k, jnp.float32(0.3)))(keys_a)))
    one, zero = result.per_event
    assert one.count_a == direct and one.count_a + zero.count_a == 1001
    assert one.count_b + zero.count_b == 1001
    # ln(0.6/0.3) = 0.69 is the true privacy loss of this "mechanism"
    assert 0 < result.epsilon_lower_bound < math.log(0.6 / 0.3) + 0.1
    assert "epsilon lower bound" in result.table() and result.to_dict()["num_runs"] == 1001


def test_audit_compiles_its_batch_with_the_given_compiler_options():
    """compiler_options reach the batch's jax.jit (an unknown option is refused by XLA) and change
    only how it is compiled: the counts are the default compilation's."""
    mechanism = lambda key, p: jax.random.uniform(key) < p
    events = {"one": lambda out: out}
    arguments = (jax.random.key(5), mechanism, jnp.float32(0.3), jnp.float32(0.6), events, 500)
    with pytest.raises(RuntimeError, match="xla_no_such_option"):
        audit_lib.audit(*arguments, compiler_options={"xla_no_such_option": 1})
    options = {"xla_backend_optimization_level": 1}
    assert audit_lib.audit(*arguments, compiler_options=options).per_event == audit_lib.audit(*arguments).per_event


def test_audit_rejects_bad_arguments():
    mechanism = lambda key, p: jax.random.uniform(key) < p
    for kwargs in (dict(events={}), dict(num_runs=0), dict(confidence=1.0), dict(delta=-0.1)):
        arguments = dict(events={"e": lambda o: o}, num_runs=10) | kwargs
        with pytest.raises(ValueError):
            audit_lib.audit(jax.random.key(0), mechanism, 0.1, 0.2, **arguments)


# --------------------------------------------------------- the real library passes
@pytest.mark.slow
def test_full_cluster_count_audit_stays_below_the_claim():
    # Long because: 8,192 vmapped keys of the full cluster, so that the audit is nearly tight (~10 s).
    result = count_audit()
    assert result.epsilon_lower_bound <= CLAIMED.epsilon
    # ... and the audit is nearly tight (true log-ratio of the event: 0.97), so the
    # broken variants below are caught by the same measurement.
    assert result.epsilon_lower_bound > 0.75


# ------------------------------------------------------------ broken variants fail
@pytest.mark.slow
def test_audit_catches_halved_count_noise():
    # Long because: the same 8,192-key audit on a recompiled broken engine (~10 s).
    """Noise scale 1/(2 eps) instead of 1/eps: the counts spend 2 x 0.97 epsilon."""
    original = mechanisms.count_noise
    halved = lambda key, epsilon: original(key, 2.0 * np.asarray(epsilon, np.float64))
    with substituted(original, halved):
        assert count_audit().epsilon_lower_bound > CLAIMED.epsilon


@pytest.mark.slow
def test_audit_catches_count_budget_reused_across_levels():
    # Long because: the auditor's many runs of a whole clustering (47 s, 2 cores at load 12).
    """Every count level spends the whole count budget instead of its share."""
    original = budget_lib.allocate

    def reused(budget, config, d):
        allocation = original(budget, config, d)
        total = math.fsum(allocation.count_epsilons)
        return allocation._replace(count_epsilons=(total,) * len(allocation.count_epsilons))

    with substituted(original, reused):
        assert count_audit().epsilon_lower_bound > CLAIMED.epsilon


def test_substituted_restores_the_library():
    original = mechanisms.count_noise
    with substituted(original, lambda key, epsilon: None):
        assert dpm_jax.tree.count_noise is not original
    assert dpm_jax.tree.count_noise is original and mechanisms.count_noise is original
    with pytest.raises(ValueError):
        with substituted(lambda: None, lambda: None):
            pass


# The split-step construction: public n~ = 72, alpha = 0.01 so that the centreness carries
# the score. A: 66 points at 0.5 and 6 at the upper bound; B adds one at the lower bound,
# which raises every rank by one: the candidates below 0.5 (rank 0 -> 1) gain a1 ~ Delta_G,
# those above (distance 6 -> 5 from the top) lose as much. The event "a candidate below 0.5"
# then has log-ratio ~ eps (correct) or 2 eps (the exponent doubled: Delta_f halved, or the
# factor 2 dropped). Per grid: the config and the last candidate index below 0.5.
SPLIT_STEP_GRIDS = {
    "paper": (dpm_jax.DPMConfig(alpha=0.01, split_grid="paper"), 3),  # 8 candidates of beta = 1/8: 0..3 below
    "cell": (dpm_jax.DPMConfig(alpha=0.01), 126),  # the default: boundaries 1..255 of the root cell, 1..127 below
}


def split_step_audit(grid: str) -> audit_lib.AuditResult:
    """One split choice of the tree on the engine's path (``tree.choose_splits`` on the level's
    own grid and histogram), the construction above."""
    config, last_lower = SPLIT_STEP_GRIDS[grid]
    points = np.concatenate([np.full(66, 0.5), np.full(6, 1.0)]).astype(np.float32)[:, None]
    a, b = points, np.concatenate([points, np.zeros((1, 1), np.float32)])
    mechanism = audit_lib.split_step_mechanism(72, CLAIMED.epsilon, 0.125, config)
    events = {"a candidate below 0.5": lambda out: out[1] <= last_lower}
    return audit_lib.audit(
        jax.random.key(2),
        mechanism,
        a,
        b,
        events,
        100_000,
        delta=mechanisms.em_sampler_tv(config.candidates_per_dim) * (1 + math.e),
        confidence=CONFIDENCE,
        compiler_options=USERS_COMPILER_OPTIONS,
    )


@pytest.mark.slow
@pytest.mark.parametrize("grid", SPLIT_STEP_GRIDS)
def test_split_step_audit_stays_below_the_claim(grid):
    # Long because: the auditor's many runs of the split step, per grid (20 s, 2 cores at load 12).
    result = split_step_audit(grid)
    assert 0.7 < result.epsilon_lower_bound <= CLAIMED.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("grid", SPLIT_STEP_GRIDS)
def test_audit_catches_halved_split_sensitivity(grid):
    # Long because: the auditor's many runs of the split step, per grid (21-22 s, 2 cores at load 12).
    """Delta_f halved, i.e. the exponent per score unit doubled (which is also what
    dropping the factor 2 of Definition 4, the paper's erratum, does)."""
    original = mechanisms.em_exponent_scale
    doubled = lambda epsilon, sensitivity, ratio=1.0: 2.0 * original(epsilon, sensitivity, ratio)
    with substituted(original, doubled):
        assert split_step_audit(grid).epsilon_lower_bound > CLAIMED.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_worst_case_scores_audit_of_the_exponential_mechanism(factor):
    # Long because: the auditor's many runs, per epsilon (11-13 s, 2 cores at load 12).
    """Integer scores that move by exactly +-Delta between neighbours, the worst case the
    mechanism's claim covers: the exact sampler stays below eps, the one without the
    factor 2 (exponent doubled) exceeds it."""
    epsilon, sensitivity = 1.0, 1024
    scores_a = jnp.array([0, 6 * 1024], jnp.int32)  # A: candidate 0 far behind
    scores_b = scores_a + jnp.array([sensitivity, -sensitivity], jnp.int32)  # B: 0 up, 1 down
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def mechanism(key, scores):
        return mechanisms.exponential_mechanism(
            key, table, exact.from_int32(scores[None, :]), jnp.ones((1, 2), bool), factor * epsilon, sensitivity
        )[0]

    result = audit_lib.audit(
        jax.random.key(3),
        mechanism,
        scores_a,
        scores_b,
        {"candidate 0": lambda c: c == 0},
        100_000,
        confidence=CONFIDENCE,
        compiler_options=USERS_COMPILER_OPTIONS,
    )
    if factor == 1.0:
        assert 0.7 < result.epsilon_lower_bound <= epsilon
    else:
        assert result.epsilon_lower_bound > epsilon


# ------------------------------------------- regression suite: the float32 constructions
# Each construction once broke the claimed guarantee in float32 arithmetic (see
# docs/privacy.md). It runs on the engine's own path (cluster with point_mask, or the
# function cluster calls), >= 1,000 keys vmapped, at confidence 0.999; the planted
# float32 variant of the same step must be caught by the same audit.


def centre_audit(num_runs: int) -> audit_lib.AuditResult:
    """cluster (one leaf: tau_e above any count) on the float32-sum neighbours; events:
    the released centre above thresholds around the exact centres."""
    config = dpm_jax.DPMConfig(tau_r=1, tau_e=1e9)
    a, b = audit_lib.float32_sum_neighbours()
    exact_centre = (16_383 + 40_000 * 0.3 * 2.0**-10) / (len(a[0]) - 1)
    # the centre's noise is ~1e-4 here; the float32 error moves it by ~8e-4
    events = {
        f"centre > exact + {shift:g}": (lambda s: lambda result: result.centers[0, 0] > exact_centre + s)(shift)
        for shift in (-2e-4, 0.0, 2e-4, 4e-4, 8e-4)
    }
    mechanism = audit_lib.cluster_mechanism(CLAIMED, (-1.0, 1.0), config)
    return audit_lib.audit(
        jax.random.key(4),
        mechanism,
        a,
        b,
        events,
        num_runs,
        delta=CLAIMED.delta,
        confidence=CONFIDENCE,
        batch_size=256,
        compiler_options=USERS_COMPILER_OPTIONS,
    )


@pytest.mark.slow
def test_float32_sum_construction_audit_stays_below_the_claim():
    # Long because: the regression audit needs >= 1,000 vmapped keys of the full cluster (~12 s).
    assert centre_audit(1024).epsilon_lower_bound <= CLAIMED.epsilon


@pytest.mark.slow
def test_audit_catches_float32_leaf_sums():
    # Long because: the regression audit needs >= 1,000 vmapped keys of the full cluster (~13 s).
    def float32_leaf_sums(codes, point_mask, point_slot, num_slots):
        sums = jax.ops.segment_sum(
            jnp.where(point_mask[:, None], codes.astype(jnp.float32), 0.0), point_slot, num_segments=num_slots
        )
        high = jnp.floor(sums / 2.0**30)
        return exact.Int(((sums - high * 2.0**30).astype(jnp.int32), high.astype(jnp.int32)))

    with substituted(averaging.leaf_sums, float32_leaf_sums):
        assert centre_audit(1024).epsilon_lower_bound > CLAIMED.epsilon


def count_addition_audit() -> audit_lib.AuditResult:
    """The count release as the tree performs it (mechanisms.add_count_noise) at counts
    2**24 + 1 and 2**24 + 2, where float32 cannot hold every integer: adding there in
    float32 rounds to even and doubled the privacy loss."""
    epsilon = 1.0

    def mechanism(key, count):
        noise = mechanisms.count_noise(key, np.full((1,), epsilon))
        return exact.to_float32(mechanisms.add_count_noise(count[None], noise))[0]

    events = {f"release <= 2**24 + {k}": (lambda k: lambda v: v <= 2.0**24 + k)(k) for k in (0, 1, 2, 3)}
    return audit_lib.audit(
        jax.random.key(5),
        mechanism,
        jnp.int32(2**24 + 1),
        jnp.int32(2**24 + 2),
        events,
        20_000,
        delta=mechanisms.count_sampler_tv(epsilon) * (1 + math.e),
        confidence=CONFIDENCE,
        compiler_options=USERS_COMPILER_OPTIONS,
    )


@pytest.mark.slow
def test_count_addition_audit_stays_below_the_claim():
    # Long because: the auditor's runs (1.5 s in the fast loop, 2 cores at load 7).
    assert count_addition_audit().epsilon_lower_bound <= 1.0


@pytest.mark.slow
def test_audit_catches_float32_count_addition():
    # Long because: the auditor's runs (2 s in the fast loop, 2 cores at load 7).
    original = mechanisms.add_count_noise

    def float32_addition(true_counts, noise):
        value = jnp.asarray(true_counts).astype(jnp.float32) + exact.to_float32(noise)
        high = jnp.floor(value / 2.0**30)
        return exact.Int(((value - high * 2.0**30).astype(jnp.int32), high.astype(jnp.int32)))

    with substituted(original, float32_addition):
        assert count_addition_audit().epsilon_lower_bound > 1.0
