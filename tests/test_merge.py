"""The merge of leaves no valley separates (dpm_jax/merge.py, issue 27): the valley statistic's
arithmetic and sensitivity on the engine's path, the rule, the merged clusters, the budget lines,
the effect on one large cluster cut into pieces, and the audit of the release.

Error rates: every run uses a fixed key (deterministic); the audits run at confidence 0.999, so a
correct mechanism fails them with probability <= 1e-3 over the randomness (at the fixed keys here,
not at all).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from dpm_jax import exact, mechanisms, merge, tree
from dpm_jax.diagnostics import explain
from dpm_jax.eval import audit as audit_lib
from dpm_jax.eval.datasets import load_dataset
from dpm_jax.eval.zoo import labelled_scores, paper_delta
from dpm_jax.testing import substituted
from conftest import USERS_COMPILER_OPTIONS

W = merge.MERGE_WINDOW
MERGE_CONFIG = dpm_jax.DPMConfig(merge_share=1 / 12)  # the default
NO_MERGE = dpm_jax.DPMConfig(merge_share=0.0)


def brute_valley(column: np.ndarray, used: int, split_index: int) -> int:
    """S = 2 W_{i*} - min(L, R) by the module docstring's definition (one node's split dimension)."""
    window = lambda i: int(column[max(i - W, 0) : min(i + W, used)].sum())
    split = split_index + 1
    full = [i for i in range(1, len(column) + 1) if i >= W and i + W <= used]
    left = [window(i) for i in full if i + W <= split]
    right = [window(i) for i in full if i >= split + W]
    if not left or not right:
        return merge.UNSEEN
    return 2 * window(split) - min(max(left), max(right))


def engine_inputs(d: int, depth: int, rng):
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())
    points = rng.uniform(size=(20, d)).astype(np.float32)
    count = exact.from_int32(jnp.int32(20))
    config = dataclasses.replace(MERGE_CONFIG, tau_r=depth)
    return tree.point_inputs(points, table, jnp.zeros(d), jnp.ones(d), count, jnp.float32(0.5), config, depth)


# ------------------------------------------------------------------ the statistic
def test_the_engines_valley_statistic_is_the_definition_at_its_drawn_splits():
    """tree.choose_splits (chunk by chunk, 16 nodes: two chunks) computes S at the split it draws,
    from the split scores' cumulative sum: node by node the definition's value at that split, on
    cells of fewer half-bins (a lattice) and with valleys in every other node (S < 0 there)."""
    rng = np.random.default_rng(7)
    d, level = 2, 4
    inputs = engine_inputs(d, 5, rng)
    width, half_bins = inputs.width, 2 * inputs.max_splits
    used = np.where(rng.random((width, d)) < 0.5, rng.integers(60, half_bins + 1, (width, d)), half_bins)
    used[::2] = half_bins
    counts = rng.integers(20, 40, size=(width, d, half_bins))
    counts[::2, :, 110:150] = 0  # a valley in the middle of every other node, where its split falls
    counts[np.arange(half_bins) >= used[..., None]] = 0
    sizes = exact.from_int32(jnp.asarray(counts.sum(axis=(1, 2)) // d, jnp.int32))
    active = jnp.arange(width) < 2**level
    valid = jnp.arange(half_bins) + 1 < jnp.asarray(used)[..., None]
    bits = mechanisms.random_words(jax.random.key(1), (width, mechanisms.EM_TRIES, mechanisms.EM_DIGITS))
    choice = tree.choose_splits(
        inputs, jnp.int32(level), jnp.asarray(counts, jnp.int32), sizes, active, valid, bits, 20.0, 0.0, None, used
    )
    assert choice.excess is None
    dims, indices, valleys = (np.asarray(a)[: 2**level] for a in (choice.split_dim, choice.split_index, choice.valley))
    expected = [brute_valley(counts[v, dims[v]], used[v, dims[v]], indices[v]) for v in range(2**level)]
    np.testing.assert_array_equal(valleys, expected)
    assert valleys.min() < 0 < valleys.max()


def test_one_point_moves_the_valley_statistic_by_minus_one_to_two():
    """Sensitivity 2: a point adds one to one half-bin of its node's column; over every half-bin and
    splits at the edges and the middle, S moves by -1, 0, 1 or 2, and all four occur."""
    rng = np.random.default_rng(0)
    half_bins = 256
    moves = set()
    for _ in range(6):
        counts = rng.integers(0, 6, size=(1, 1, half_bins))
        counts[0, 0, rng.integers(0, 200) :][:30] = 0
        used = jnp.full((1, 1), half_bins, jnp.int32)
        for split_index in (0, 11, 40, 127, 230, 254):
            value = lambda c: int(
                merge.valley_statistic(
                    exact.exact_cumsum(jnp.asarray(c, jnp.int32)),
                    used,
                    jnp.zeros(1, jnp.int32),
                    jnp.int32([split_index]),
                )[0]
            )
            base = value(counts)
            assert base == brute_valley(counts[0, 0], half_bins, split_index)
            for half_bin in range(0, half_bins, 3):
                neighbour = counts.copy()
                neighbour[0, 0, half_bin] += 1
                moves.add(value(neighbour) - base)
    assert moves == {-1, 0, 1, 2}


def test_a_split_without_a_full_window_on_both_sides_reads_as_a_valley():
    """Two clusters of 500 points on a 30-value lattice (a cell of 30 half-bins: no full window of
    12 on both sides of any split) split between them: S is the public "valley" constant, not
    2 W >= 0 (which had merged them); the same two clusters in a cell of 256 half-bins give S < 0."""

    def valley(used: int, first: int, second: int, split_index: int) -> int:
        counts = np.zeros((1, 1, 256), np.int64)
        counts[0, 0, [first, second]] = 500
        cumulative = exact.exact_cumsum(jnp.asarray(counts, jnp.int32))
        cells = jnp.full((1, 1), used, jnp.int32)
        return int(merge.valley_statistic(cumulative, cells, jnp.zeros(1, jnp.int32), jnp.int32([split_index]))[0])

    assert valley(30, 2, 27, 13) == merge.UNSEEN
    assert valley(256, 17, 230, 118) == -500


# ------------------------------------------------------------------ the rule and the merged clusters
def heap_tree(is_split: dict, valley: dict, size: int = 16):
    """Heap arrays of a tree with padded depth 3 (16 entries): split nodes, their noisy S."""
    split = np.zeros(size, bool)
    noisy = np.zeros(size, np.int32)
    for node in is_split:
        split[node] = True
        noisy[node] = valley.get(node, 0)
    return jnp.asarray(split), jnp.asarray(noisy)


def test_the_highest_clear_node_without_a_valley_below_roots_the_merge():
    epsilons = jnp.asarray([0.2, 0.2, 0.2], jnp.float32)  # b = 2 / 0.2 = 10 at every level
    counts = jnp.full(16, 10_000.0)
    roots = lambda split, noisy, c=counts: np.asarray(merge.merge_roots(split, noisy, c, epsilons, 128))
    # Root and node 2 clear (S >= 40), node 3 and 5 unclear: the root merges everything.
    split, noisy = heap_tree({1: 0, 2: 0, 3: 0, 5: 0}, {1: 41, 2: 50, 3: 0, 5: -19})
    assert roots(split, noisy)[[1, 2, 3, 4, 5, 10, 11, 6, 7]].tolist() == [1] * 9
    # A clear valley at node 5 (S < -20) blocks its ancestors 2 and 1; node 3's subtree still merges.
    split, noisy = heap_tree({1: 0, 2: 0, 3: 0, 5: 0}, {1: 41, 2: 50, 3: 40, 5: -21})
    got = roots(split, noisy)
    assert got[[1, 2, 4, 5, 10, 11]].tolist() == [0] * 6 and got[[3, 6, 7]].tolist() == [3] * 3
    # Just under the strict bar: nothing merges.
    split, noisy = heap_tree({1: 0}, {1: 39})
    assert not roots(split, noisy).any()
    # The gate: n~ 12 / 128 >= 2.5 b = 25 needs n~ >= 267 (public, the released counts).
    split, noisy = heap_tree({1: 0}, {1: 100})
    assert roots(split, noisy, jnp.full(16, 266.0))[1] == 0 and roots(split, noisy, jnp.full(16, 267.0))[1] == 1


def test_merged_clusters_sum_counts_and_weight_centres():
    """Slots 0..7 of padded depth 3; leaves 4 (slot 0), 10 (slot 2), 11 (slot 3), 3 (slot 4); node 2
    merges 4, 10, 11 into slot 0: count the sum, centre weighted by max(n~, 1), labels follow."""
    roots = np.zeros(16, np.int32)
    roots[[2, 4, 5, 10, 11]] = 2
    node = jnp.asarray([4, 0, 10, 11, 3, 0, 0, 0], jnp.int32)
    valid = node > 0
    count = jnp.asarray([10.0, 0, 30.0, 0.5, 7.0, 0, 0, 0])
    centers = jnp.asarray([[0.0], [jnp.nan], [4.0], [2.0], [9.0], [jnp.nan], [jnp.nan], [jnp.nan]])
    point_slot = jnp.asarray([0, 2, 3, 4, 4], jnp.int32)
    got = merge.merged_slots(jnp.asarray(roots), count, valid, node, point_slot, centers)
    assert np.asarray(got.valid).tolist() == [True, False, False, False, True, False, False, False]
    np.testing.assert_allclose(np.asarray(got.noisy_count)[[0, 4]], [40.5, 7.0])
    np.testing.assert_allclose(np.asarray(got.centers)[[0, 4], 0], [(0 * 10 + 4 * 30 + 2 * 1) / 41, 9.0], rtol=1e-6)
    assert np.asarray(got.node).tolist() == [2, 0, 0, 0, 3, 0, 0, 0]
    assert np.asarray(got.point_slot).tolist() == [0, 0, 0, 4, 4]
    assert np.isnan(np.asarray(got.centers)[1:4]).all()


# ------------------------------------------------------------------ the budget and its lines
def test_the_ledger_states_one_merge_line_per_level_and_adds_up_to_the_budget():
    budget = dpm_jax.Budget(1.0, 1e-6)
    on = dpm_jax.api.plan_run(budget, dataclasses.replace(MERGE_CONFIG, tau_r=4), 2)
    off = dpm_jax.api.plan_run(budget, dpm_jax.DPMConfig(tau_r=4, merge_share=0.0), 2)
    ((_, releases_on),), ((_, releases_off),) = on.releases, off.releases
    lines = [line for line in releases_on.ledger() if line.name.startswith("merge/")]
    assert [line.level for line in lines] == [0, 1, 2, 3]
    assert all(line.sensitivity == merge.SENSITIVITY == 2 and line.mechanism == "discrete_laplace" for line in lines)
    assert math.isclose(math.fsum(line.epsilon for line in lines), 0.05, rel_tol=1e-12)
    np.testing.assert_allclose([line.epsilon / lines[0].epsilon for line in lines], [1, 2, 3, 4], rtol=1e-12)
    for releases in (releases_on, releases_off):
        total = math.fsum(line.epsilon for line in releases.ledger())
        assert total <= budget.epsilon and math.isclose(total, budget.epsilon, rel_tol=1e-12)
    assert releases_off.merges == () and not any(line.name.startswith("merge/") for line in releases_off.ledger())
    assert releases_on.splits == releases_off.splits and releases_on.structures == releases_off.structures
    assert releases_on.count_epsilons == releases_off.count_epsilons
    assert math.isclose(releases_off.leaf_sums.epsilon - releases_on.leaf_sums.epsilon, 0.05, rel_tol=1e-9)


def test_the_paper_grid_has_no_merge_and_bad_shares_are_refused():
    config = dpm_jax.DPMConfig(split_grid="paper", tau_r=3, merge_share=0.5)
    ((_, releases),) = dpm_jax.api.plan_run(dpm_jax.Budget(1.0, 1e-6), config, 2).releases
    assert releases.merges == () and not config.merges_leaves
    for share in (-0.1, 1.0, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="merge_share"):
            dpm_jax.DPMConfig(merge_share=share)
    with pytest.raises(ValueError, match="structure_share \\+ merge_share"):
        dpm_jax.DPMConfig(structure_share=0.5, merge_share=0.5)


# ------------------------------------------------------------------ its effect
@pytest.mark.parametrize("seed", [1, 2])
def test_large_clusters_cut_into_pieces_merge_and_the_splits_stay(seed):
    # Long because: two runs at n = 100,000 and their compilations (about 15 s, 2 cores).
    """zoo-unbalanced (8 clusters, 10:1) at n = 100,000, epsilon 1, same key with and without the
    merge: the split tree (every release but the averaging and the valley statistics) is the same;
    the leaves of the large clusters merge, to at most 9 clusters and ARI >= 0.9 (without: about 30
    and below 0.7); every point's label is a valid cluster."""
    data = load_dataset("zoo-unbalanced", n=100_000)
    budget, key = dpm_jax.Budget(1.0, paper_delta(100_000)), jax.random.key(seed)
    plain = dpm_jax.cluster(key, data.points, budget, bounds=data.bounds, config=NO_MERGE)
    merged = dpm_jax.cluster(key, data.points, budget, bounds=data.bounds, config=MERGE_CONFIG)
    for name in ("noisy_count", "is_split", "split_dim", "split_position"):
        assert np.asarray(getattr(plain.tree, name)).tobytes() == np.asarray(getattr(merged.tree, name)).tobytes()
    ari = lambda r: labelled_scores(data.points, data.labels, np.asarray(r.centers), np.asarray(r.valid), 8)["ari"]
    assert int(plain.k) > 20 and ari(plain) < 0.7
    assert int(merged.k) <= 9 and ari(merged) >= 0.9
    assert np.asarray(merged.valid)[np.asarray(merged.labels_nonprivate)].all()
    # explain reads the groups back from the release: every cluster is a leaf or a merge root.
    report = explain(merged, MERGE_CONFIG, bounds=data.bounds)
    nodes = set(np.asarray(merged.leaf_node)[np.asarray(merged.valid)].tolist())
    groups = {leaf.merged_into for leaf in report.leaves} - {None}
    alone = {leaf.node for leaf in report.leaves if leaf.merged_into is None}
    assert groups and groups | alone == nodes and len(nodes) == int(merged.k)
    for leaf in report.leaves:  # a leaf's group root is the leaf or one of its ancestors
        root = leaf.merged_into
        assert root is None or leaf.node >> (leaf.node.bit_length() - root.bit_length()) == root
    assert "merged:" in str(report)


# ------------------------------------------------------------------ audit on the engine's path
# Constructed neighbours in 1-D: A holds 4 points in every half-bin of the root cell but a gap
# (half-bins 100..139); with all-zero random words the root draws the split at boundary 32 on both.
# There W = 96 and every full window left or right of it holds 96 (S_A = 96); B adds one point in
# half-bin 31, inside the split's window and the left windows but in no right one: W = 97,
# min(L, R) = 96, S_B = 98: a move of 2, the sensitivity. The event "S~ >= t" then has
# P_B / P_A = e^(epsilon / 2 * 2) = e^epsilon for t >= 98: the claim's worst case. The release's
# epsilon is 1 (2/3 of the averaging's 0.6 of epsilon 2.5, tau_r = 1).
MERGE_BUDGET = dpm_jax.Budget(2.5, 1e-6)
AUDIT_CONFIG = dpm_jax.DPMConfig(merge_share=2 / 3, structure_share=0.0)


def merge_audit() -> tuple[audit_lib.AuditResult, float]:
    bins = np.concatenate([np.arange(100), np.arange(140, 256)])
    a = ((np.repeat(bins, 4) + 0.5) / 256).astype(np.float32)[:, None]
    b = np.concatenate([a, np.float32([[31.5 / 256]])])
    mechanism = audit_lib.merge_step_mechanism(len(a), MERGE_BUDGET, AUDIT_CONFIG)
    (releases,) = dpm_jax.api.plan_run(MERGE_BUDGET, dataclasses.replace(AUDIT_CONFIG, tau_r=1), 1).by_depth
    (line,) = [line for line in releases.ledger() if line.name == "merge/level0"]
    assert line.epsilon == pytest.approx(1.0)
    events = {f"S >= {t}": (lambda out, t=t: (out[0] == 31) & (out[1] >= t)) for t in (99, 101, 103)}
    events["split at 32"] = lambda out: out[0] == 31
    result = audit_lib.audit(
        jax.random.key(5),
        mechanism,
        a,
        b,
        events,
        100_000,
        delta=line.delta,
        confidence=0.999,
        compiler_options=USERS_COMPILER_OPTIONS,
    )
    return result, line.epsilon


@pytest.mark.slow
def test_merge_audit_stays_below_the_claim():
    # Long because: the auditor's 200,000 runs of the root's statistic (about 10 s, 2 cores).
    result, claimed = merge_audit()
    assert 0.7 < result.epsilon_lower_bound <= claimed


@pytest.mark.slow
def test_audit_catches_the_merge_noise_at_twice_its_epsilon():
    # Long because: the auditor's 200,000 runs of the root's statistic (about 10 s, 2 cores).
    """The statistic's noise drawn with twice the epsilon its line states: the pair's log-ratio doubles."""
    original = mechanisms.count_noise
    with substituted(original, lambda key, epsilon: original(key, 2 * np.asarray(epsilon))):
        result, claimed = merge_audit()
    assert result.epsilon_lower_bound > claimed
