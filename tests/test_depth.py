"""DPMConfig(tau_r="auto"): the depth from one noisy count, inside the program (dpm_jax/depth.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from dpm_jax import exact, keys, mechanisms
from dpm_jax.api import plan_run
from dpm_jax.budget import allocate, heap_count_epsilons
from dpm_jax.depth import AUTO_DEPTH_SLACK, depth_of, depth_rule, noisy_size, plan_depth
from dpm_jax.diagnostics import recommended_tau_r
from dpm_jax.tree import level_schedule

AUTO = dpm_jax.DPMConfig(tau_r="auto")
BUDGET = dpm_jax.Budget(1.0, 1e-6)


def _released_depth_count(key, n: int, budget) -> int:
    """The depth's noisy count recomputed from its key path in the ledger."""
    plan = plan_depth(budget, AUTO, 3)
    return int(exact.to_float32(noisy_size(key, jnp.int32(n), plan)))


@pytest.mark.slow
def test_the_depth_is_the_rule_of_the_noisy_count_and_its_allocation_runs(small_blobs, key):
    # Long because: compiles the automatic-depth clustering (12 s in the fast loop, 2 cores at load 9).
    """The depth is depth_rule of the count drawn on the 'depth' stream; the tree's root count is
    row depth - 1 of the count stream's per-depth draw, and no level from the depth on splits."""
    X = small_blobs.points
    result = dpm_jax.cluster(key, X, BUDGET, bounds=small_blobs.bounds, config=AUTO)
    plan = plan_depth(BUDGET, AUTO, 3)
    released = _released_depth_count(key, len(X), BUDGET)
    depth = int(result.depth)
    assert depth == depth_rule(released, 3, plan.remaining, AUTO)
    run = plan_run(BUDGET, AUTO, 3)
    size = 2 ** (AUTO.max_depth + 1)
    rows = [list(heap_count_epsilons(a)) for a in run.by_depth]
    rows = [r + [r[-1]] * (size - len(r)) for r in rows]
    noise = mechanisms.count_noise(keys.derive_key(key, keys.COUNT), np.asarray(rows))
    root_noise = float(exact.to_float32(exact.Int(tuple(limb[depth - 1, 1] for limb in noise.limbs))))
    assert float(result.tree.noisy_count[1]) == len(X) + root_noise
    levels = np.floor(np.log2(np.maximum(np.arange(result.tree.is_split.shape[0]), 1)))
    assert not np.asarray(result.tree.is_split)[levels >= depth].any()
    assert (np.asarray(result.tree.split_dim)[(levels >= depth) & np.asarray(result.tree.reached)] == -1).all()
    assert int(result.k) <= 2**depth
    # tau_e = n~ / 2**min(depth + leaf_slack, max_depth): every applied split left both children at least it.
    min_child = math.ceil(float(result.tree.noisy_count[1]) / 2 ** min(depth + AUTO.leaf_slack, AUTO.max_depth))
    split = np.flatnonzero(np.asarray(result.tree.is_split))
    assert (
        split.size
        and np.asarray(result.tree.noisy_count)[np.concatenate([2 * split, 2 * split + 1])].min() >= min_child
    )


@pytest.mark.slow
def test_every_depth_has_a_ledger_that_adds_up_to_the_budget(small_blobs, key):
    # Long because: compiles the automatic-depth clustering (shared with the test above).
    result = dpm_jax.cluster(key, small_blobs.points, BUDGET, bounds=small_blobs.bounds, config=AUTO)
    depths = [depth for depth, _ in result.ledgers]
    assert depths == list(range(1, AUTO.max_depth + 1))
    remaining = plan_depth(BUDGET, AUTO, 3).remaining
    for depth, ledger in result.ledgers:
        assert ledger[0].name == "depth" and ledger[0].key_path == (keys.DEPTH,)
        assert math.isclose(ledger.total_epsilon, BUDGET.epsilon, rel_tol=1e-12)
        assert math.isclose(ledger.total_delta, BUDGET.delta, rel_tol=1e-12)
        splits = [e.epsilon for e in ledger if e.name.startswith("split/")]
        assert splits == list(allocate(remaining, AUTO.at_depth(depth), 3).split_epsilons)
        assert all(e.key_path[:2] == (keys.COUNT, f"row {depth - 1}") for e in ledger if e.name.startswith("count/"))
    assert result.ledger is result.ledger_at(int(result.depth))


@pytest.mark.slow
def test_the_ledgers_never_spend_more_than_the_budget_at_any_depth():
    # Long because: the ledgers of many budgets at every depth (8 s, 2 cores at load 10).
    """The count's part and the remaining budget add up to the budget exactly, and every depth's
    ledger, summed exactly, stays at or below it (within a few ulps)."""
    rng = np.random.default_rng(1)
    for epsilon, delta in zip(rng.uniform(0.05, 3.0, 40), 10.0 ** rng.uniform(-7, -3, 40)):
        budget = dpm_jax.Budget(float(epsilon), float(delta))
        plan = plan_depth(budget, AUTO, 2)
        assert plan.epsilon + plan.remaining.epsilon == budget.epsilon
        assert plan.delta + plan.remaining.delta == budget.delta and plan.delta >= plan.sampler_delta
        for _, ledger in plan_run(budget, AUTO, 2).ledgers:
            assert budget.epsilon * (1 - 1e-14) <= ledger.total_epsilon <= budget.epsilon
            assert budget.delta * (1 - 1e-14) <= ledger.total_delta <= budget.delta


@pytest.mark.slow
def test_a_small_budget_runs_at_the_depths_it_can_afford(small_blobs, key):
    # Long because: a small budget compiles the clustering again (14 s, 2 cores at load 10).
    """At epsilon = 2e-4 only shallow depths have a usable split epsilon: the tree is still padded to
    max_depth levels and the run takes a depth it can afford."""
    budget = dpm_jax.Budget(2e-4, 1e-6)
    deepest = plan_depth(budget, AUTO, 3).deepest
    assert 1 <= deepest < AUTO.max_depth
    result = dpm_jax.cluster(key, small_blobs.points, budget, bounds=small_blobs.bounds, config=AUTO)
    assert 1 <= int(result.depth) <= deepest and result.centers.shape[0] == AUTO.max_clusters
    assert result.ledger.total_epsilon <= budget.epsilon


def test_depth_of_is_the_rule_at_every_threshold():
    """The thresholds reproduce depth_rule exactly on both sides of each one (and the rule is
    recommended_tau_r + AUTO_DEPTH_SLACK, clipped to [1, max_depth])."""
    plan = plan_depth(BUDGET, AUTO, 2)
    remaining = plan.remaining
    probes = [1, 50, 20_000, 10**6]
    for threshold in plan.thresholds:
        if threshold is not None:
            probes += [threshold - 1, threshold]
    for count in probes:
        got = int(depth_of(exact.from_int32(jnp.int32(count)), plan))
        assert got == depth_rule(count, 2, remaining, AUTO), count
        expected = recommended_tau_r(float(count), 2, remaining, AUTO.at_depth(7)) + AUTO_DEPTH_SLACK
        assert got == min(max(expected, 1), AUTO.max_depth)
    assert int(depth_of(exact.from_int32(jnp.int32(-5)), plan)) == 1
    # A budget so large that the rule picks depth 2 even at a count of 1 (which it reads every
    # count below 1 as): negative noisy counts get it too.
    large = plan_depth(dpm_jax.Budget(100.0, 1e-3), AUTO, 1)
    for count in (-(2**31) + 1, -5, 0, 1):
        got = int(depth_of(exact.from_int32(jnp.int32(count)), large))
        assert got == depth_rule(count, 1, large.remaining, AUTO) >= 2


@pytest.mark.slow
def test_auto_depth_runs_under_jit_and_vmap_with_each_data_sets_own_depth(small_blobs, key):
    # Long because: compiles the automatic depth under jit and vmap (32 s, 2 cores at load 10).
    """Under vmap over data sets (masks) every run takes its own depth, and each equals its eager run."""
    X = np.concatenate([small_blobs.points] * 20)  # 12,000 points
    masks = np.stack([np.arange(len(X)) < 300, np.ones(len(X), bool)])
    run = jax.jit(
        jax.vmap(lambda mask: dpm_jax.cluster(key, X, BUDGET, bounds=small_blobs.bounds, config=AUTO, point_mask=mask))
    )
    batched = run(jnp.asarray(masks))
    assert int(batched.depth[0]) < int(batched.depth[1])
    with pytest.raises(ValueError, match="different depths"):
        batched.ledger
    for i, mask in enumerate(masks):
        alone = dpm_jax.cluster(key, X, BUDGET, bounds=small_blobs.bounds, config=AUTO, point_mask=mask)
        assert int(alone.depth) == int(batched.depth[i])
        np.testing.assert_array_equal(np.asarray(alone.centers), np.asarray(batched.centers[i]))
        assert batched.ledger_at(int(batched.depth[i])) == alone.ledger


def test_the_schedule_is_the_chosen_depths_allocation():
    run = plan_run(BUDGET, AUTO, 2)
    for depth in (1, 4, 7):
        schedule = level_schedule(run.by_depth, jnp.int32(depth), 7)
        allocation = allocate(run.depth_rule.plan.remaining, AUTO.at_depth(depth), 2)
        np.testing.assert_array_equal(
            np.asarray(schedule.split_epsilons)[:depth], np.float32(allocation.split_epsilons)
        )
        np.testing.assert_array_equal(
            np.asarray(schedule.count_offsets)[:depth], np.float32(allocation.count_offsets[:depth])
        )


def test_max_depth_is_validated_and_fixes_the_shapes():
    assert AUTO.max_clusters == 2**7 and AUTO.padded_depth == 7
    assert dpm_jax.DPMConfig(tau_r="auto", max_depth=5).max_clusters == 32
    with pytest.raises(ValueError, match="integer or 'auto'"):
        dpm_jax.DPMConfig(tau_r="deep")
    with pytest.raises(ValueError, match="max_depth must be in"):
        dpm_jax.DPMConfig(tau_r="auto", max_depth=0)
    with pytest.raises(ValueError, match="max_depth bounds"):
        dpm_jax.DPMConfig(tau_r=5, max_depth=6)
    with pytest.raises(ValueError, match="resolved"):
        allocate(BUDGET, AUTO, 2)


def test_a_budget_too_small_for_deep_trees_caps_the_depth():
    """At a tiny epsilon the deep levels' split epsilons fall under the sampler's margin: those depths
    are never chosen (their allocation is refused), the shallow ones still run."""
    budget = dpm_jax.Budget(2e-4, 1e-6)
    run = plan_run(budget, AUTO, 2)
    assert 1 <= len(run.by_depth) < AUTO.max_depth
    assert all(t is None for t in run.depth_rule.plan.thresholds[len(run.by_depth) - 1 :])
