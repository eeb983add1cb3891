"""The prefix order of the unified greedy (dpm_jax.greedy.order): post-processing of the release.

The re-ordering is a permutation of the released centres, read from the release alone (centres and
noisy sizes), the cost curve is that of the returned prefixes, and the merged prefix centres are
weighted means of released centres.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from conftest import USERS_COMPILER_OPTIONS
from dpm_jax import keys
from dpm_jax._arrays import to_unit_range
from dpm_jax.api import gaussian_thresholds_on_device
from dpm_jax.eval import datasets
from dpm_jax.greedy import api, lift
from dpm_jax.greedy.order import prefix_centers, prefix_order

BUDGET = dpm_jax.Budget(1.0, 1e-6)


def _reference_order(centers, weights, z):
    """The weighted greedy in float64, written independently: at each step the candidate whose addition
    gives the lowest sum_i max(w_i, 0) min_{j chosen} |c_i - c_j|^z (the first: the weighted 1-medoid)."""
    c, w = np.asarray(centers, np.float64), np.maximum(np.asarray(weights, np.float64), 0.0)
    distance = np.linalg.norm(c[:, None] - c[None], axis=-1) ** z
    chosen = []
    for _ in range(len(c)):
        best = min(
            (j for j in range(len(c)) if j not in chosen),
            key=lambda j: np.sum(w * np.min(distance[:, chosen + [j]], axis=1)),
        )
        chosen.append(best)
    return chosen


@pytest.mark.parametrize("z", [1, 2])
def test_prefix_order_is_a_permutation_and_the_weighted_greedy(z):
    rng = np.random.default_rng(11)
    for _ in range(5):
        centers = rng.uniform(-100, 100, size=(7, 3)).astype(np.float32)
        weights = rng.uniform(0, 1000, size=7).astype(np.float32)
        weights[2] = -40.0  # a negative noisy size counts as 0
        order = np.asarray(prefix_order(jnp.asarray(centers), jnp.asarray(weights), z))
        assert sorted(order.tolist()) == list(range(7))
        assert order.tolist() == _reference_order(centers, weights, z)


@pytest.mark.parametrize("z", [1, 2])
def test_order_weighs_the_centres_by_their_sizes(z):
    """Designed for the mutation that drops the weights: a heavy isolated centre must come first (unweighted,
    the medoid of the three light ones would), and a negative noisy size must count as 0, not below it."""
    centers = jnp.asarray([[0.0], [1.0], [2.0], [50.0]])
    order = prefix_order(centers, jnp.asarray([1.0, 1.0, 1.0, 1000.0]), z)
    assert np.asarray(order).tolist() == [3, 1, 0, 2]
    # clipped: centres 1 and 2 tie (cost 1^z) and the lowest index wins; weight -5 taken as is would pick 2
    order = prefix_order(jnp.asarray([[0.0], [10.0], [11.0]]), jnp.asarray([-5.0, 1.0, 1.0]), z)
    assert int(order[0]) == 1


def test_prefix_centers_are_weighted_means_of_the_nearest_released_centres():
    centers = jnp.asarray([[0.0, 0.0], [10.0, 0.0], [1.0, 0.0], [11.0, 0.0], [30.0, 0.0]])
    sizes = jnp.asarray([1.0, 1.0, 3.0, 1.0, -2.0])  # the last: a negative noisy size, weight 0
    merged = np.asarray(prefix_centers(centers, sizes, 2))
    # groups {0, 2} and {1, 3, 4}: (0 + 3) / 4 and (10 + 11 + 0) / 2
    np.testing.assert_allclose(merged, [[0.75, 0.0], [10.5, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(prefix_centers(centers, sizes, 5)), np.asarray(centers))
    with pytest.raises(ValueError, match="count must be in 1 .. 5"):
        prefix_centers(centers, sizes, 0)


def _pairwise_sum(x: np.ndarray) -> np.ndarray:
    """NumPy's float32 sum over axis 0 by halving (zero-padded to a power of two)."""
    x = np.concatenate([x, np.zeros((2 ** int(np.ceil(np.log2(len(x)))) - len(x),) + x.shape[1:], x.dtype)])
    while len(x) > 1:
        x = x[0::2] + x[1::2]
    return x[0]


def test_order_and_prefix_centres_sum_in_a_fixed_order():
    # Their sums must not be a backend's (a reduction's or a scatter-add's order is its own, and a
    # last-bit difference flips a near-tie of the order): the prefix centres' are NumPy's float32
    # sums in index order, the order's totals NumPy's pairwise float32 sums.
    rng = np.random.default_rng(12)
    centers = (rng.uniform(-1, 1, (40, 3)) * 10.0 ** rng.uniform(-3, 3, (40, 1))).astype(np.float32)
    weights = rng.uniform(0, 1e4, 40).astype(np.float32)
    compiled = jax.jit(prefix_centers, static_argnums=2, compiler_options=USERS_COMPILER_OPTIONS)
    merged = np.asarray(compiled(centers, weights, 6))
    head = centers[:6]
    group = np.argmin(((centers[:, None, :] - head[None]) ** 2).sum(-1), axis=1)
    for c in range(6):
        total, sums = np.float32(0), np.zeros(3, np.float32)
        for i in np.flatnonzero(group == c):
            total, sums = total + weights[i], sums + weights[i] * centers[i]
        assert merged[c].tobytes() == (sums / total).astype(np.float32).tobytes()
    distance = np.zeros((40, 40), np.float32)
    for j in range(3):
        difference = centers[:, j][:, None] - centers[:, j][None, :]
        distance = distance + difference * difference
    closest, chosen, order = np.full(40, distance.max()), np.zeros(40, bool), []
    for _ in range(40):
        totals = _pairwise_sum(weights[:, None] * np.minimum(closest[:, None], distance))
        best = int(np.argmin(np.where(chosen, np.inf, totals)))
        closest, chosen[best] = np.minimum(closest, distance[:, best]), True
        order.append(best)
    ordered = jax.jit(prefix_order, static_argnums=2, compiler_options=USERS_COMPILER_OPTIONS)
    assert np.asarray(ordered(centers, weights, 2)).tolist() == order


def _two_blobs():
    """Two blobs of near-equal size: the count noise (epsilon 0.05, scale ~20) often flips which is heavier."""
    rng = np.random.default_rng(3)
    left = rng.normal((-50.0, 0.0), 1.0, size=(1010, 2))
    right = rng.normal((50.0, 10.0), 1.0, size=(1000, 2))
    return np.concatenate([left, right]).astype(np.float32)


@pytest.mark.slow  # compiles two kmeans programs
def test_weighted_order_permutes_the_release_and_reads_only_the_release():
    """Same key, both orders: the weighted run's centres, sizes and greedy centres are the greedy-order run's,
    permuted by prefix_order of that run's released centres and noisy sizes. An order computed from the exact
    cell sizes (private data) differs on some key here, so an implementation reading them fails."""
    X, bounds = _two_blobs(), (-100.0, 100.0)
    run = {
        order: jax.jit(jax.vmap(lambda key, o=order: dpm_jax.kmeans(key, X, 2, BUDGET, bounds=bounds, order=o)))
        for order in api.ORDERS
    }
    batch = jax.random.split(jax.random.key(5), 8)
    greedy, weighted = run["greedy"](batch), run["weighted"](batch)
    unit = to_unit_range(jnp.asarray(X), *(jnp.full(2, b, jnp.float32) for b in bounds))
    differs = []
    for i in range(len(batch)):
        order = prefix_order(greedy.centers[i], greedy.sizes[i], 2)
        for field in ("centers", "sizes", "greedy_centers", "start_level"):
            expected = np.asarray(getattr(greedy, field)[i])[np.asarray(order)]
            np.testing.assert_array_equal(np.asarray(getattr(weighted, field)[i]), expected)
        exact = lift.cell_counts(lift.nearest(unit, greedy.greedy_centers[i]), jnp.ones(len(X), bool), 2)
        differs.append(bool(np.any(np.asarray(prefix_order(greedy.centers[i], exact, 2)) != np.asarray(order))))
    assert any(differs), "no key where the exact sizes give another order: the test could not see that bug"


class FiveBlobRuns(NamedTuple):
    """One key's private kmeans runs on five blobs in both orders (shared: each compiles its own program)."""

    data: datasets.Dataset
    key: jax.Array
    k: int
    selection: api.KMeansResult  # order="greedy"
    weighted: api.KMeansResult  # order="weighted"


@pytest.fixture(scope="module")
def five_blob_runs() -> FiveBlobRuns:
    data = datasets.synthetic_blobs(n=4000, d=2, num_blobs=5, std=1.0, seed=5)
    key, k, X = jax.random.key(0), 5, jnp.asarray(data.points)
    selection = dpm_jax.kmeans(key, X, k, BUDGET, bounds=data.bounds, order="greedy")
    weighted = dpm_jax.kmeans(key, X, k, BUDGET, bounds=data.bounds, order="weighted")
    return FiveBlobRuns(data, key, k, selection, weighted)


@pytest.mark.slow  # compiles three kmeans programs (two shared with the next test)
def test_cost_curve_is_that_of_the_returned_prefixes(five_blob_runs):
    """cost_curve[k' - 1] is the cost of the first k' returned greedy centres: exactly without noise, and with
    noise re-derived from its key stream for the returned order (which differs from the selection order)."""
    data, key, k, selection, weighted = five_blob_runs
    X = jnp.asarray(data.points)
    unit = to_unit_range(X, *(jnp.full(2, b, jnp.float32) for b in data.bounds))  # the working coordinates
    mask = jnp.ones(len(X), bool)

    exact = dpm_jax.kmeans(key, X, k, None, bounds=data.bounds, order="weighted")
    for j in range(1, k + 1):
        prefix_cost = lift.exact_costs(unit, mask, exact.greedy_centers[:j], 2)[-1]
        assert float(exact.cost_curve[j - 1]) == float(prefix_cost)

    assert np.any(np.asarray(weighted.greedy_centers) != np.asarray(selection.greedy_centers))  # the orders differ
    plan = api.plan_greedy(BUDGET, k, 2, 2, api.DEFAULT_LEVELS, api.MAX_GRID_DIM, 0)
    costs = lift.private_costs(
        jax.random.fold_in(keys.derive_key(key, keys.GREEDY_SUM), 1),
        unit,
        mask,
        weighted.greedy_centers,
        2,
        plan.costs,
        gaussian_thresholds_on_device(plan.costs.sigma),
    )
    np.testing.assert_array_equal(np.asarray(weighted.cost_curve), np.asarray(costs))
    assert int(weighted.elbow_k) == int(api.elbow(weighted.cost_curve, api.cost_noise_std(plan)))


@pytest.mark.slow  # shares the previous test's two kmeans programs
def test_prefix_is_the_weighted_orders_whatever_the_returned_order(five_blob_runs):
    """KMeansResult.prefix(k') reads the release in the weighted order under either ``order``: the same key
    gives the same k'-solutions from a run in the selection order and from one in the weighted order
    (whose returned orders differ here), and they are prefix_centers of the weighted order's centres."""
    k, selection, weighted = five_blob_runs.k, five_blob_runs.selection, five_blob_runs.weighted
    assert np.any(np.asarray(selection.centers) != np.asarray(weighted.centers))  # the returned orders differ
    for count in range(1, k + 1):
        expected = np.asarray(prefix_centers(weighted.centers, weighted.sizes, count))
        np.testing.assert_array_equal(np.asarray(selection.prefix(count)), expected)
        np.testing.assert_array_equal(np.asarray(weighted.prefix(count)), expected)
