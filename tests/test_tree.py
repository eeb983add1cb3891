"""Invariants of the padded recursion tree (Algorithm 1, lines 13-28)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
import pytest
from conftest import SMALL_CONFIG
from dpm_jax import histogram, tree
from dpm_jax._arrays import to_unit_range
from dpm_jax.eval import datasets


@pytest.mark.slow
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
    monkeypatch.setattr(tree, "children_histogram", lambda *args: traced.append(1) or original(*args))
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


@pytest.mark.slow
def test_tree_structure_is_consistent(small_blobs, budget):
    # Long because: compiles the clustering under vmap over 8 keys (30 s, 2 cores at load 10).
    X = small_blobs.points
    results = jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG))(
        jax.random.split(jax.random.key(1), 8)
    )
    tau_r = SMALL_CONFIG.tau_r
    for r in range(8):
        tree = jax.tree.map(lambda a: np.asarray(a[r]), results.tree)
        reached, is_split = tree.reached, tree.is_split
        assert reached[1] and not reached[0]
        for node in range(1, 2**tau_r):
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
        np.testing.assert_allclose(
            np.sort(np.asarray(results.counts[r])[np.asarray(results.valid[r])]), np.sort(tree.noisy_count[leaves])
        )


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


@pytest.mark.slow
def test_stopping_rule_tau_e(small_blobs, budget):
    # Long because: compiles the clustering under vmap over 8 keys (shared with the test above).
    """Split nodes have both children at or above tau_e = n~ / 2**tau_r (line 18)."""
    X = small_blobs.points
    results = jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG))(
        jax.random.split(jax.random.key(2), 8)
    )
    for r in range(8):
        tree = jax.tree.map(lambda a: np.asarray(a[r]), results.tree)
        tau_e = tree.noisy_count[1] / 2**SMALL_CONFIG.tau_r
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


@pytest.mark.parametrize(
    "config, depth, halvings",
    [
        (dpm_jax.DPMConfig(), 5, 1 + 5),  # "auto": n~ / 2**min(depth + leaf_slack, max_depth), issue 27
        (dpm_jax.DPMConfig(), 6, 7),
        (dpm_jax.DPMConfig(), 7, 7),  # at max_depth the paper's n~ / 2**max_depth
        (dpm_jax.DPMConfig(leaf_slack=0), 5, 5),  # "auto" with the paper's rule
        (dpm_jax.DPMConfig(leaf_slack=2), 4, 2 + 4),
        (dpm_jax.DPMConfig(leaf_slack=2), 6, 7),
        (dpm_jax.DPMConfig(tau_r=5), 5, 5),  # a fixed tau_r: the paper's n~ / 2**tau_r, whatever leaf_slack's default
    ],
)
def test_the_default_tau_e_halves_the_root_count_depth_plus_leaf_slack_times(config, depth, halvings):
    """min_child = ceil(n~ / 2**min(depth + tau_e_halvings, padded depth)), from the released n~ and depth."""
    from dpm_jax import exact

    root = exact.from_int32(jnp.asarray(10_001, jnp.int32))
    lower, upper = jnp.zeros(2), jnp.ones(2)
    inputs = tree.tree_inputs(None, None, (), lower, upper, root, jnp.float32(0.1), config, jnp.int32(depth))
    assert int(inputs.min_child) == math.ceil(10_001 / 2**halvings)


def test_route_points_sends_the_split_position_itself_right():
    """Lines 26-27 in half-bins: right iff half-bin >= 2 j* + 1 (the candidate s* = (j* + 1/2) beta)."""
    half_bins = jnp.asarray([[0, 5], [3, 2], [4, 4], [2, 9]], jnp.uint8)
    point_node = jnp.asarray([0, 0, 1, 1], jnp.int32)
    split_dim, split_index = jnp.asarray([0, 1], jnp.int32), jnp.asarray([1, 4], jnp.int32)
    go_right = tree.route_points(half_bins, point_node, split_dim, 2 * split_index + 1)
    np.testing.assert_array_equal(go_right, [False, True, False, True])


def _grid_of_blobs(side: int, n: int, seed: int):
    """side x side Gaussian blobs tiling [0, 1]^2 (spacing 1/side, std spacing / (4 sqrt 2))."""
    rng = np.random.default_rng(seed)
    centres = (np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2) + 0.5) / side
    labels = rng.integers(0, side * side, n)
    points = centres[labels] + rng.normal(0.0, 1.0 / (side * 4 * np.sqrt(2)), (n, 2))
    return points.astype(np.float32), labels


@pytest.mark.slow
def test_cell_grid_separates_a_grid_of_blobs_where_the_papers_interval_size_fails():
    # Long because: two programs (both grids) compiled under vmap over 8 keys (~15 s of CPU).
    # 36 blobs on a 6 x 6 grid: every marginal holds 6 blobs, so Algorithm 2's single
    # Gaussian model inflates sigma and the paper's global grid is too coarse to split
    # between neighbours at depth; the cell grid refines with every cell. Observed over
    # these 8 fixed keys: paper ARI 0.20..0.34, k 6..13; cell ARI 0.67..0.91, k 28..35
    # (0.60..0.78, k 26..37 with split_window=1).
    # The outcome is deterministic for these keys; for other keys the medians would cross
    # the thresholds only if half of the 8 runs fell beyond the extremes observed here.
    from sklearn.metrics import adjusted_rand_score

    points, labels = _grid_of_blobs(6, 3600, seed=1)
    budget, keys = dpm_jax.Budget(8.0, 3600**-1.5), jax.random.split(jax.random.key(0), 8)
    medians = {}
    for grid in ("paper", "cell"):
        config = dpm_jax.DPMConfig(tau_r=6, split_grid=grid)
        results = jax.vmap(lambda k: dpm_jax.cluster(k, points, budget, bounds=(-0.1, 1.1), config=config))(keys)
        aris, ks = [], []
        for r in range(len(keys)):
            centres = np.asarray(results.centers[r])[np.asarray(results.valid[r])]
            nearest = np.argmin(((points[:, None] - centres[None]) ** 2).sum(-1), axis=1)
            aris.append(adjusted_rand_score(labels, nearest))
            ks.append(int(results.k[r]))
        medians[grid] = (np.median(aris), np.median(ks))
    assert medians["paper"][0] < 0.45 and medians["paper"][1] <= 18, medians
    assert medians["cell"][0] > 0.55 and medians["cell"][1] >= 24, medians  # most of the 36 blobs


@pytest.mark.slow
def test_cell_grid_window_stops_on_one_gaussian_where_a_narrow_window_splits_it():
    # Long because: two programs compiled under vmap over 8 keys (~10 s of CPU).
    # One Gaussian (n = 20,000, epsilon = 1): the right answer is one cluster. With the
    # default split_window the central windows hold more than 1/alpha of the node's points,
    # so the emptiest candidates lie in the tails and the root's split leaves an empty child
    # (the stopping rule). With one half-bin per side (1/128 of the cell) a central window
    # holds ~1% of the points, the centre wins and the tree splits the Gaussian down to tau_e.
    # Observed over these 8 fixed keys: default k = 1 in all runs; split_window=1 k 13..20.
    # Deterministic for these keys. At tau_r = 7 the same keys give k = 1 in 6 runs and 2 in
    # 2, so a run with k > 2 at tau_r = 5 would take a far rarer draw than any observed.
    data = datasets.one_gaussian(20_000)
    budget, keys = dpm_jax.Budget(1.0, 20_000**-1.5), jax.random.split(jax.random.key(0), 8)
    found = {}
    for window in (dpm_jax.DPMConfig().split_window, 1):  # the tree alone: the merge would join the pieces
        config = dpm_jax.DPMConfig(tau_r=5, split_window=window, merge_share=0.0)
        results = jax.vmap(lambda k: dpm_jax.cluster(k, data.points, budget, bounds=data.bounds, config=config))(keys)
        found[window] = np.asarray(results.k)
    assert np.all(found[dpm_jax.DPMConfig().split_window] <= 2), found
    assert np.median(found[1]) >= 8, found  # the narrow window over-splits: the test can tell them apart


@pytest.mark.slow
def test_cell_grid_splits_lie_inside_their_nodes_cells(small_blobs, budget):
    # Every drawn split cuts its node's cell (the bounds cut by the released splits above
    # it) strictly inside, at a boundary of its 2B equal half-bins: the grid is relative
    # to the cell, not to the bounds.
    # Long because: compiles a cell-grid clustering of its own (13 s, 2 cores at load 10).
    config = dpm_jax.DPMConfig(tau_r=4, split_grid="cell", max_splits_per_dim=8)
    result = dpm_jax.cluster(jax.random.key(2), small_blobs.points, budget, bounds=small_blobs.bounds, config=config)
    tree = jax.tree.map(np.asarray, result.tree)
    d = small_blobs.points.shape[1]
    cells = {1: (np.full(d, -100.0), np.full(d, 100.0))}
    checked = 0
    for node in range(1, 2**config.tau_r):
        if not tree.reached[node]:
            continue
        lower, upper = cells[node]
        dim, cut = tree.split_dim[node], float(tree.split_position[node])
        assert lower[dim] < cut < upper[dim]
        boundary = (cut - lower[dim]) / (upper[dim] - lower[dim]) * 2 * config.max_splits_per_dim
        assert abs(boundary - round(boundary)) < 1e-3 and 1 <= round(boundary) <= 15
        checked += 1
        left_upper, right_lower = upper.copy(), lower.copy()
        left_upper[dim] = right_lower[dim] = cut
        cells[2 * node], cells[2 * node + 1] = (lower, left_upper), (right_lower, upper)
    assert checked >= 3


@pytest.mark.slow
def test_level_counts_and_split_dimension_bins_are_those_of_the_whole_arrays_bins(monkeypatch):
    # The level's histogram and the routing both bin in blocks of rows (here 4000 rows in
    # 3 blocks of 1334 rows: the last overlaps the one before by 2 rows, which it must not count again).
    # They must give the histogram of the whole array's bins, and routing the bin its
    # node's counts counted each point in, or a point would go to a child other than the
    # one its node's counts assumed.
    # Long because: compiles the clustering with the per-level histograms forced (14 s, 2 cores at load 10).
    monkeypatch.setattr(tree, "_BIN_BLOCK_ROWS", 1500)
    rng = np.random.default_rng(5)
    n, d, width = 4000, 5, 4
    points = jnp.asarray(rng.uniform(-3.4, 5.4, (n, d)), jnp.float32)  # some outside the bounds and cells: end bins
    lower = jnp.asarray(rng.uniform(0, 0.5, (width, d)), jnp.float32)
    cells = (lower, lower + jnp.asarray(rng.uniform(0.01, 0.5, (width, d)), jnp.float32))
    node = jnp.asarray(rng.integers(0, width, n), jnp.int32)
    active = jnp.asarray(rng.uniform(size=n) < 0.9)
    split_dim = jnp.asarray(rng.integers(0, d, width), jnp.int32)
    bounds = (jnp.full(d, -3.0, jnp.float32), jnp.full(d, 5.0, jnp.float32))
    configs = [
        dpm_jax.DPMConfig(tau_r=3, max_splits_per_dim=100),
        dpm_jax.DPMConfig(tau_r=3, lattice_step=0.25),
        dpm_jax.DPMConfig(tau_r=3, split_grid="paper"),
    ]
    for config in configs:
        inputs = tree.point_inputs(
            points, None, *bounds, dpm_jax.exact.from_int32(jnp.int32(n)), jnp.float32(0.07), config, jnp.int32(3)
        )
        grid, _ = tree.level_grid(inputs, *cells)
        whole = (
            inputs.half_bins
            if grid is None
            else histogram.cell_half_bin_indices(to_unit_range(points, *bounds), node, grid, config.max_splits_per_dim)
        )
        counts = tree.level_counts(inputs, grid, node, active)
        expected = histogram.level_histogram(whole, node, active, width, config.max_splits_per_dim)
        assert int(counts.sum()) == d * int(active.sum()), config  # every active point once per dimension
        np.testing.assert_array_equal(counts, expected)
        column = np.asarray(tree.split_dimension_half_bins(inputs, grid, node, split_dim))
        assert column.shape == (n, 1) and len(np.unique(column)) > 10, config  # many distinct bins compared
        np.testing.assert_array_equal(column[:, 0], np.asarray(whole)[np.arange(n), np.asarray(split_dim)[node]])


@pytest.mark.parametrize("padded", [13, 14, 15])
def test_leaves_deep_on_the_left_most_path_get_slot_zero(padded):
    # A float log2 put heap ids 8192 and 32768 (left-most nodes of levels 13 and 15) at the level
    # below, so their slot fell outside the table and the leaf was dropped.
    size = 2 ** (padded + 1)
    for node in [2**level for level in range(padded + 1)]:
        is_leaf = jnp.zeros(size, bool).at[node].set(True)
        counts = jnp.arange(size, dtype=jnp.float32)
        split_tree = tree.SplitTree(counts, None, None, None, None)
        leaves = tree._leaves_by_slot(split_tree, is_leaf, jnp.zeros(1, jnp.int32), padded)
        assert bool(leaves.valid[0]) and int(leaves.node[0]) == node and float(leaves.noisy_count[0]) == node
        assert int(leaves.valid.sum()) == 1
