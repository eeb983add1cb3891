"""The synthesis's depth search (dpm_jax.synth.depth_search): its statistic, its law, its effect, its audit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import exact, keys
from dpm_jax.budget import Budget
from dpm_jax.mechanisms import count_noise
from dpm_jax.synth.api import synthesize
from dpm_jax.synth.cells import cell_codes
from dpm_jax.synth.depth_search import DepthSearch, excess_mass
from dpm_jax.synth.plan import SynthConfig, depth_choice, plan_synthesis
from conftest import USERS_COMPILER_OPTIONS


def _sorted_codes(rng, n, total, valid_share=0.8):
    """Codes as the engine sorts them: the valid points first, sorted; the masked ones after, in any order."""
    num_valid = int(n * valid_share)
    codes = rng.integers(0, 2**total, n, dtype=np.int64).astype(np.uint32)
    codes[:num_valid] = np.sort(codes[:num_valid])
    return codes, np.arange(n) < num_valid


def test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells():
    rng = np.random.default_rng(0)
    total, depths, thresholds = 12, (0, 2, 5, 8, 12), (3, 1, 4, 2, 1)
    for trial in range(4):
        codes, valid = _sorted_codes(rng, 300, total)
        got = np.asarray(excess_mass(jnp.asarray(codes), jnp.asarray(valid), total, depths, thresholds))
        for depth, threshold, value in zip(depths, thresholds, got):
            _, counts = np.unique(codes[valid] >> (total - depth), return_counts=True)
            assert value == np.maximum(counts - threshold, 0).sum(), (trial, depth)
        # the search reads the candidates up to the rule's index only: the loop stops there (traced)
        upto = jax.jit(excess_mass, static_argnums=(2, 3, 4))
        for last in range(len(depths)):
            part = np.asarray(upto(jnp.asarray(codes), jnp.asarray(valid), total, depths, thresholds, last))
            np.testing.assert_array_equal(part[: last + 1], got[: last + 1])
            assert not part[last + 1 :].any(), last
        # under jax.jit(jax.vmap(...)) the passes are shared up to the batch's largest index (keys: the data shared;
        # data sets: the data batched too): each member's rows are still its own call's, zero past its index
        lasts = jnp.asarray([0, 3, 1, 4], jnp.int32)
        over_keys = jax.jit(
            jax.vmap(lambda last: excess_mass(jnp.asarray(codes), jnp.asarray(valid), total, depths, thresholds, last))
        )
        for member, last in zip(np.asarray(over_keys(lasts)), np.asarray(lasts)):
            np.testing.assert_array_equal(member, np.where(np.arange(len(depths)) <= last, got, 0))
        # data sets of their own (each member's rows from its own data, not another's)
        over_data = jax.jit(jax.vmap(lambda c, v, last: excess_mass(c, v, total, depths, thresholds, last)))
        sets = [_sorted_codes(rng, 300, total, share) for share in (0.8, 0.5, 1.0, 0.3)]
        stacked = (jnp.asarray(np.stack([c for c, _ in sets])), jnp.asarray(np.stack([v for _, v in sets])))
        for member, (c, v), last in zip(np.asarray(over_data(*stacked, lasts)), sets, np.asarray(lasts)):
            alone = np.asarray(excess_mass(jnp.asarray(c), jnp.asarray(v), total, depths, thresholds))
            np.testing.assert_array_equal(member, np.where(np.arange(len(depths)) <= last, alone, 0))


def _noise(key, shape, epsilon):
    return np.asarray(exact.to_float32(count_noise(key, np.full(shape, epsilon))), np.int64)


def test_the_search_is_the_sparse_vector_technique_on_its_own_stream():
    """Re-derived from the stream (fold 0: the threshold's noise, fold 1: the queries'): upwards
    from the coarsest, stop at the first noisy excess below fraction n~ less the margin, plus the
    threshold's noise, and take the candidate before it; the rule's candidate if none stops or
    the target is not positive. Catches a wrong noise scale, another key, the target from
    anything but n~, and the search run from the other end."""
    search = DepthSearch("synth depth", 0.4, keys.SYNTH_TREE, 12)  # margin 6 / 0.2 = 30
    draw = jax.jit(search.draw)
    rng = np.random.default_rng(1)
    for trial in range(40):
        start, noisy_size = int(rng.integers(0, 12)), float(rng.integers(0, 9000))
        # shrinking with the depth, through T near a random candidate: the noise (scale 5) decides
        near = np.float32(noisy_size) * np.float32(0.6) - np.float32(30.0)
        steps = np.sort(rng.integers(0, 6, 12))[::-1].cumsum() - rng.integers(0, 40)
        excess = np.maximum(near - steps, 0).astype(np.int32) if trial % 4 else np.sort(rng.integers(0, 2000, 12))[::-1]
        excess = np.asarray(excess, np.int32)
        key = jax.random.key(trial)
        got = int(draw(key, jnp.asarray(excess), jnp.int32(start), jnp.float32(noisy_size)))
        rho = _noise(jax.random.fold_in(key, 0), (), search.part_epsilon)
        nu = _noise(jax.random.fold_in(key, 1), (12,), search.part_epsilon)
        size = np.float32(noisy_size) * np.float32(0.6) - np.float32(6.0 / search.part_epsilon)
        target = int(np.clip(np.floor(size), 0, 2**30))
        want = start
        for i in range(start + 1 if target > 0 else 0):
            if excess[i] + nu[i] < target + rho:
                want = max(i - 1, 0)
                break
        assert got == want, (trial, got, want)


def test_the_depth_is_lowered_where_the_data_fill_the_box_and_kept_where_they_do_not():
    """d = 5, 20,000 points: filling [0, 1]^5, the rule's cells hold about 1 point each and nothing
    would pass; the search's depth releases cells holding most of the data. One tight cluster in a
    large box: the rule's depth stands (its excess is nearly all of n)."""
    budget, d, n = Budget(1.0, 1e-6), 5, 20_000
    config = SynthConfig(max_rows=n)
    plan = plan_synthesis(budget, config, "grid", d)
    rule = plan.depths[int(depth_choice(plan, jnp.float32(n)))]
    rng = np.random.default_rng(2)
    filling = rng.uniform(size=(n, d)).astype(np.float32)
    assert n / 2**rule < 2  # the rule's cells: fewer than two points each
    result = synthesize(jax.random.key(0), filling, budget, (0.0, 1.0), method="grid", config=config)
    valid = np.asarray(result.valid)
    lower, upper = np.asarray(result.lower)[valid], np.asarray(result.upper)[valid]
    inside = np.zeros(n, bool)
    for lo, hi in zip(lower, upper):
        inside |= np.all((filling >= lo) & (filling <= hi), axis=1)
    assert inside.mean() >= 0.8
    tight = (0.5 + 1e-4 * rng.normal(size=(n, d))).astype(np.float32)
    result = synthesize(jax.random.key(0), tight, budget, (0.0, 1.0), method="grid", config=config)
    width = np.asarray(result.upper - result.lower)[np.asarray(result.valid)]
    depth = int(round(np.log2(np.prod(1.0 / width[0]))))
    assert depth == rule


@pytest.mark.slow
def test_auditor_on_the_depth_search_stays_at_or_below_the_claim():
    # Long because: the empirical auditor's 20,000 runs per side.
    """The auditor (dpm_jax.eval.audit) drives excess_mass and the search on constructed
    neighbours: 40 points in one spot, B with one more (every excess rises by one). Index 0 means
    "stopped at candidate 0 or 1"; candidate 0 (threshold 0: E_0 - T = 7) rarely stops, so it is
    mostly noisy E_1 below T + rho, in the tail (E_1 - T = 3 on A, 4 on B). The bound must not
    exceed the claim and must see a good part of it."""
    from dpm_jax.eval.audit import audit

    search = DepthSearch("synth depth", 2.0, keys.SYNTH_TREE, 7, margin=0.0)  # epsilon_1 = epsilon_2 = 1
    total, thresholds = 12, (0,) + (4,) * 6  # E_0 = 40; E_i = 40 - 4 = 36 on A; T = floor(0.6 * 55) = 33

    def mechanism(key, data):
        codes = cell_codes(data[0], jnp.zeros(2), jnp.ones(2), total)
        order = jnp.lexsort((codes, ~data[1]))
        excess = excess_mass(codes[order], data[1][order], total, tuple(range(7)), thresholds)
        return search.draw(key, excess, jnp.int32(6), jnp.float32(55.0))

    points = jnp.full((41, 2), 0.25, jnp.float32)
    a, b = (points, jnp.arange(41) < 40), (points, jnp.ones(41, bool))
    events = {"stopped at candidate 1": lambda index: index == 0}
    found = audit(jax.random.key(3), mechanism, a, b, events, 20000, compiler_options=USERS_COMPILER_OPTIONS)
    assert found.epsilon_lower_bound <= search.entry().epsilon
    assert found.epsilon_lower_bound >= 0.4


def test_synthesize_takes_the_depth_the_search_draws_from_its_stream():
    """End to end: the grid's released cells have the depth that n~ (synth_tree fold 0), the rule
    and the search (synth_tree fold 2) give on the valid rows' excess with the leaves' thresholds.
    The rule's cells are too thin for these data, so a search that did nothing would be seen."""
    budget, n = Budget(1.0, 1e-6), 3000  # the search's noise (scale 200) decides near T = 600
    config = SynthConfig(max_rows=2 * n, max_cells=2**12)
    plan = plan_synthesis(budget, config, "grid", 2)
    X = np.random.default_rng(5).uniform(size=(n, 2)).astype(np.float32)
    codes = jnp.sort(cell_codes(jnp.asarray(X), jnp.zeros(2), jnp.ones(2), plan.total_depth))
    # masked rows (removed records) in one spot: counted, they would hold the rule's depth
    padded, mask = np.concatenate([X, np.full((n, 2), 0.3, np.float32)]), np.arange(2 * n) < n
    excess = excess_mass(codes, jnp.ones(n, bool), plan.total_depth, plan.depths, plan.leaves.thresholds)
    moved = set()  # whether the search moved the rule's depth, per key
    for seed in range(6):
        key = jax.random.key(seed)
        tree_key = keys.derive_key(key, keys.SYNTH_TREE)
        noisy = exact.to_float32(plan.size.draw(jax.random.fold_in(tree_key, 0), jnp.int32(n)))
        rule = depth_choice(plan, noisy)
        want = plan.depths[int(plan.search.draw(jax.random.fold_in(tree_key, 2), excess, rule, noisy))]
        moved.add(want != plan.depths[int(rule)])
        result = synthesize(key, padded, budget, (0.0, 1.0), method="grid", config=config, point_mask=mask)
        width = np.asarray(result.upper - result.lower)[np.asarray(result.valid)]
        assert len(width) and np.all(np.round(np.log2(1.0 / width).sum(axis=1)) == want), seed
    assert moved == {True}
