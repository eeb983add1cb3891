"""Half-bin histograms of the nodes of a level (dpm_jax/histogram.py), against a plain loop."""

import pytest
import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import histogram
from dpm_jax.histogram import children_histogram, level_histogram


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
    got = np.asarray(
        level_histogram(
            jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active), nodes, max_splits
        )
    )
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
        jnp.asarray(half_bins[0], jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active), nodes, max_splits
    )
    both = jax.vmap(level_histogram, in_axes=(0, 0, 0, None, None))(
        jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active), nodes, max_splits
    )
    for b in range(batch):
        np.testing.assert_array_equal(shared[b], _loop_histogram(half_bins[0], node[b], active[b], nodes, max_splits))
        np.testing.assert_array_equal(both[b], _loop_histogram(half_bins[b], node[b], active[b], nodes, max_splits))


def test_chunked_histogram_equals_one_scatter(monkeypatch):
    # Few elements per chunk: 7 dims in chunks of 2 (the last chunk overlaps the one before).
    rng = np.random.default_rng(2)
    n, d, nodes, max_splits = 64, 7, 3, 4
    half_bins = rng.integers(0, 2 * max_splits, (n, d))
    node = rng.integers(0, nodes, n)
    active = rng.random(n) < 0.9
    args = (jnp.asarray(half_bins, jnp.uint8), jnp.asarray(node, jnp.int32), jnp.asarray(active), nodes, max_splits)
    monkeypatch.setattr(histogram, "_CHUNK_ELEMENTS", 2 * n)
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
    return parent, active, go_right, child_node, child_active, child_true[: 2 * width]


@pytest.mark.slow
def test_children_histogram_equals_histogram_of_the_children():
    # Long because: compiles both histograms (4 s in the fast loop, 2 cores at load 8).
    rng = np.random.default_rng(3)
    n, d, width, max_splits = 400, 3, 8, 5
    half_bins = rng.integers(0, 2 * max_splits, (n, d))
    parent, active, go_right, child_node, child_active, child_true = _random_split(rng, n, width, 4)
    parent_counts = level_histogram(
        jnp.asarray(half_bins, jnp.uint8), jnp.asarray(parent, jnp.int32), jnp.asarray(active), width, max_splits
    )
    got = np.asarray(
        children_histogram(
            parent_counts,
            jnp.asarray(child_true, jnp.int32),
            jnp.asarray(half_bins, jnp.uint8),
            jnp.asarray(child_node, jnp.int32),
            jnp.asarray(child_active),
            jnp.asarray(go_right),
            max_splits,
        )
    )
    expected = _loop_histogram(half_bins, child_node, child_active, width, max_splits)
    split_children = np.unique(child_node[child_active])  # other slots are inactive: any value
    np.testing.assert_array_equal(got[split_children], expected[split_children])


def test_cell_grid_divides_each_cell_into_equal_half_bins():
    lower = jnp.asarray([[0.0, 0.25], [0.5, -0.1]], jnp.float32)
    upper = jnp.asarray([[1.0, 0.75], [0.6, 0.3]], jnp.float32)
    grid = histogram.cell_grid(lower, upper, 4, None)
    np.testing.assert_allclose(np.asarray(grid.half_width), (np.asarray(upper) - np.asarray(lower)) / 8, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(grid.used), 8)


def test_lattice_cells_hold_whole_values_and_half_bins_end_between_values():
    # A lattice of step 1/15 (integers 0..15 scaled to [0, 1]): the root cell ends half a
    # step outside the bounds; each half-bin holds ceil(m / 2B) whole values, so every
    # lattice value lies strictly inside one half-bin, never on a boundary.
    step = 1.0 / 15.0
    lower, upper = histogram.root_cell(1, jnp.float32(step))
    for num_splits, per_bin, used in ((64, 1, 16), (4, 2, 8), (3, 3, 6)):
        grid = histogram.cell_grid(lower[None], upper[None], num_splits, jnp.float32(step))
        np.testing.assert_allclose(float(grid.half_width[0, 0]), per_bin * step, rtol=1e-6)
        assert int(grid.used[0, 0]) == used
        values = jnp.asarray(np.arange(16)[:, None] * step, jnp.float32)
        bins = np.asarray(histogram.cell_half_bin_indices(values, jnp.zeros(16, jnp.int32), grid, num_splits))
        np.testing.assert_array_equal(bins[:, 0], np.arange(16) // per_bin)
        position = np.asarray((values[:, 0] - grid.lower[0, 0]) / grid.half_width[0, 0])  # in half-bins
        assert np.all(np.abs(position - np.round(position)) * per_bin > 0.49)  # half a step from a boundary


def test_cell_half_bin_indices_are_relative_to_each_points_node():
    lower = jnp.asarray([[0.0], [0.5]], jnp.float32)
    upper = jnp.asarray([[0.5], [1.0]], jnp.float32)
    grid = histogram.cell_grid(lower, upper, 2, None)  # 4 half-bins of width 1/8 per cell
    points = jnp.asarray([[0.01], [0.49], [0.51], [0.99], [0.7], [-0.2], [1.3]], jnp.float32)
    node = jnp.asarray([0, 0, 1, 1, 1, 1, 0], jnp.int32)
    # the last two lie outside their cells (float rounding at a cut): nearest end half-bin
    np.testing.assert_array_equal(
        np.asarray(histogram.cell_half_bin_indices(points, node, grid, 2))[:, 0], [0, 3, 0, 3, 1, 0, 3]
    )
