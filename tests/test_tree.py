"""Invariants of the padded recursion tree (Algorithm 1, lines 13-28)."""

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax import tree
from dpm_jax.tree import children_histogram, level_histogram


def _loop_histogram(half_bins, node, active, nodes, max_splits):
    expected = np.zeros((nodes, half_bins.shape[1], 2 * max_splits), int)
    for p in np.flatnonzero(active):
        for i in range(half_bins.shape[1]):
            expected[node[p], i, half_bins[p, i]] += 1
    return expected


def test_level_histogram_counts_each_active_point_once_per_dimension():
    rng = np.random.default_rng(0)
    n, d, nodes, max_splits = 500, 3, 4, 5
    half_bins = rng.integers(0, 2 * max_splits, (n, d))
    node = rng.integers(0, nodes, n)
    active = rng.random(n) < 0.8
    got = np.asarray(level_histogram(jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32),
                                     jnp.asarray(active), nodes, max_splits))
    np.testing.assert_array_equal(got, _loop_histogram(half_bins, node, active, nodes, max_splits))


def test_level_histogram_under_vmap_equals_each_call():
    # vmap runs the histogram as a loop (shared bins, batched nodes): same counts per member,
    # also when the bins themselves are batched (vmap over data sets).
    rng = np.random.default_rng(1)
    n, d, nodes, max_splits, batch = 300, 2, 4, 6, 3
    half_bins = rng.integers(0, 2 * max_splits, (batch, n, d))
    node = rng.integers(0, nodes, (batch, n))
    active = rng.random((batch, n)) < 0.7
    shared = jax.vmap(level_histogram, in_axes=(None, 0, 0, None, None))(
        jnp.asarray(half_bins[0], jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active),
        nodes, max_splits)
    both = jax.vmap(level_histogram, in_axes=(0, 0, 0, None, None))(
        jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active),
        nodes, max_splits)
    for b in range(batch):
        np.testing.assert_array_equal(shared[b], _loop_histogram(half_bins[0], node[b], active[b],
                                                                 nodes, max_splits))
        np.testing.assert_array_equal(both[b], _loop_histogram(half_bins[b], node[b], active[b],
                                                               nodes, max_splits))


def test_chunked_histogram_equals_one_scatter(monkeypatch):
    # Few elements per chunk: 7 dims in chunks of 2 (the last chunk overlaps the one before).
    rng = np.random.default_rng(2)
    n, d, nodes, max_splits = 64, 7, 3, 4
    half_bins = rng.integers(0, 2 * max_splits, (n, d))
    node = rng.integers(0, nodes, n)
    active = rng.random(n) < 0.9
    args = (jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active),
            nodes, max_splits)
    monkeypatch.setattr(tree, "_CHUNK_ELEMENTS", 2 * n)
    chunked = np.asarray(level_histogram(*args))
    np.testing.assert_array_equal(chunked, _loop_histogram(half_bins, node, active, nodes, max_splits))


def _random_split(rng, n, width, parents):
    """Points of ``parents`` parent nodes, some of them split into two children."""
    parent = rng.integers(0, parents, n)
    active = rng.random(n) < 0.9
    split = rng.random(width) < 0.7
    go_right = rng.random(n) < rng.uniform(0.1, 0.9, width)[parent]
    child_active = active & split[parent]
    child_node = 2 * parent + (go_right & split[parent])
    child_true = np.bincount(np.where(active, 2 * parent + go_right, 2 * width), minlength=2 * width + 1)
    return parent, active, go_right, child_node, child_active, child_true[:2 * width]


def test_children_histogram_equals_histogram_of_the_children():
    rng = np.random.default_rng(3)
    n, d, width, max_splits = 400, 3, 8, 5
    half_bins = rng.integers(0, 2 * max_splits, (n, d))
    parent, active, go_right, child_node, child_active, child_true = _random_split(rng, n, width, 4)
    parent_counts = level_histogram(jnp.asarray(half_bins, jnp.uint8), jnp.asarray(parent, jnp.int32),
                                    jnp.asarray(active), width, max_splits)
    got = np.asarray(children_histogram(parent_counts, jnp.asarray(child_true, jnp.int32),
                                        jnp.asarray(half_bins, jnp.uint8), jnp.asarray(child_node, jnp.int32),
                                        jnp.asarray(child_active), jnp.asarray(go_right), max_splits))
    expected = _loop_histogram(half_bins, child_node, child_active, width, max_splits)
    split_children = np.unique(child_node[child_active])  # other slots are inactive: any value
    np.testing.assert_array_equal(got[split_children], expected[split_children])


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
