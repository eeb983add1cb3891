"""Invariants of the padded recursion tree (Algorithm 1, lines 13-28)."""

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax.tree import level_histogram


def test_level_histogram_counts_each_active_point_once_per_dimension():
    rng = np.random.default_rng(0)
    n, d, nodes, max_splits = 500, 3, 4, 5
    half_bins = rng.integers(0, 2 * max_splits, (d, n))
    node = rng.integers(0, nodes, n)
    active = rng.random(n) < 0.8
    dim_bin = jnp.asarray(np.arange(d)[:, None] * 2 * max_splits + half_bins, jnp.int32)
    got = np.asarray(level_histogram(dim_bin, jnp.asarray(node, jnp.int32), jnp.asarray(active),
                                     nodes, d, max_splits))
    expected = np.zeros((nodes, d, 2 * max_splits), int)
    for p in np.flatnonzero(active):
        for i in range(d):
            expected[node[p], i, half_bins[i, p]] += 1
    np.testing.assert_array_equal(got, expected)


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
