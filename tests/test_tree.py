"""Invariants of the padded recursion tree (Algorithm 1, lines 13-28)."""

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax import tree


def test_sibling_subtraction_gives_the_same_clustering(small_blobs, budget, monkeypatch):
    # Long because: three programs compiled after clearing JAX's caches: direct, siblings, vmapped (~25 s).
    # The tree with carried counts and sibling subtraction (used from _SIBLING_MIN_DIMS
    # dimensions on) must release exactly what one histogram per level releases.
    X = small_blobs.points
    run = lambda key: dpm_jax.cluster(key, X, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG)
    keys = jax.random.split(jax.random.key(4), 3)
    # The jitted cluster program is cached by its arguments, not by this module global:
    # clear the caches after each patch, and count the traces of the sibling path to
    # show that the two runs really are different programs.
    traced = []
    original = tree.children_histogram
    monkeypatch.setattr(tree, "children_histogram",
                        lambda *args: traced.append(1) or original(*args))
    monkeypatch.setattr(tree, "_SIBLING_MIN_DIMS", 10**9)
    jax.clear_caches()
    direct = [run(k) for k in keys]
    assert not traced
    monkeypatch.setattr(tree, "_SIBLING_MIN_DIMS", 1)
    jax.clear_caches()
    siblings = [run(k) for k in keys]
    assert traced
    batched = jax.vmap(run)(keys)
    jax.clear_caches()
    for r, (a, b) in enumerate(zip(direct, siblings)):
        for x, y in zip(jax.tree.leaves(a.tree), jax.tree.leaves(b.tree)):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.centers, b.centers)
        np.testing.assert_array_equal(a.labels_nonprivate, b.labels_nonprivate)
        np.testing.assert_array_equal(a.tree.split_position, batched.tree.split_position[r])


def test_tree_structure_is_consistent(small_blobs, budget):
    X = small_blobs.points
    results = jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds=small_blobs.bounds,
                                                 config=SMALL_CONFIG))(jax.random.split(jax.random.key(1), 8))
    tau_r = SMALL_CONFIG.tau_r
    for r in range(8):
        tree = jax.tree.map(lambda a: np.asarray(a[r]), results.tree)
        reached, is_split = tree.reached, tree.is_split
        assert reached[1] and not reached[0]
        for node in range(1, 2 ** tau_r):
            # children are reached exactly when the node was split
            assert reached[2 * node] == reached[2 * node + 1] == is_split[node]
            assert not is_split[node] or reached[node]
            if reached[node]:  # a split is drawn for every reached inner node
                assert 0 <= tree.split_dim[node] < X.shape[1]
                assert np.isfinite(tree.split_position[node])
        # the leaves are the reached nodes that were not split
        leaves = reached & ~is_split
        assert leaves.sum() == int(results.k[r])
        assert set(np.asarray(results.leaf_node[r])[np.asarray(results.valid[r])]) == set(np.flatnonzero(leaves))
        np.testing.assert_allclose(np.sort(np.asarray(results.counts[r])[np.asarray(results.valid[r])]),
                                   np.sort(tree.noisy_count[leaves]))


def test_points_follow_the_released_splits(small_blobs, budget):
    """Every point's (non-private) leaf is the one the released split tree routes it to."""
    X = small_blobs.points
    result = dpm_jax.cluster(jax.random.key(5), X, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG)
    tree = jax.tree.map(np.asarray, result.tree)
    leaf_of_slot = np.asarray(result.leaf_node)
    labels = np.asarray(result.labels_nonprivate)
    for p in range(0, len(X), 7):
        node = 1
        while tree.is_split[node]:
            node = 2 * node + int(X[p, tree.split_dim[node]] >= tree.split_position[node])
        assert leaf_of_slot[labels[p]] == node


def test_stopping_rule_tau_e(small_blobs, budget):
    """Split nodes have both children at or above tau_e = n~ / 2**tau_r (line 18)."""
    X = small_blobs.points
    results = jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds=small_blobs.bounds,
                                                 config=SMALL_CONFIG))(jax.random.split(jax.random.key(2), 8))
    for r in range(8):
        tree = jax.tree.map(lambda a: np.asarray(a[r]), results.tree)
        tau_e = tree.noisy_count[1] / 2 ** SMALL_CONFIG.tau_r
        split = np.flatnonzero(tree.is_split)
        assert np.all(tree.noisy_count[2 * split] >= tau_e - 1e-3)
        assert np.all(tree.noisy_count[2 * split + 1] >= tau_e - 1e-3)


def test_stopping_rule_splits_exactly_when_both_children_reach_ceil_tau_e():
    """Line 18 on exact integers: split iff both noisy children >= ceil(tau_e), active nodes only."""
    from dpm_jax import exact
    children = jnp.asarray([5, 5, 5, 4, -3, 9, 2**31 - 1, 6], jnp.int32)
    active = jnp.asarray([True, True, True, False])
    split = tree.stopping_rule(exact.from_int32(children), active, jnp.int32(5))
    np.testing.assert_array_equal(split, [True, False, False, False])


def test_route_points_sends_the_split_position_itself_right():
    """Lines 26-27 in half-bins: right iff half-bin >= 2 j* + 1 (the candidate s* = (j* + 1/2) beta)."""
    half_bins = jnp.asarray([[0, 5], [3, 2], [4, 4], [2, 9]], jnp.uint8)
    point_node = jnp.asarray([0, 0, 1, 1], jnp.int32)
    split_dim, split_index = jnp.asarray([0, 1], jnp.int32), jnp.asarray([1, 4], jnp.int32)
    go_right = tree.route_points(half_bins, point_node, split_dim, 2 * split_index + 1)
    np.testing.assert_array_equal(go_right, [False, True, False, True])

