"""dpm_jax.cluster end to end: outputs, keys, jit/vmap, masks, errors, quality."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from conftest import SMALL_CONFIG, majority_accuracy, nearest_center_labels
from dpm_jax.budget import allocate, heap_count_epsilons
from dpm_jax.diagnostics import InsufficientBudgetWarning
from dpm_jax import exact
from dpm_jax.keys import derive_key
from dpm_jax.mechanisms import count_noise


def _cluster(key, X, budget, bounds, **kw):
    return dpm_jax.cluster(key, X, budget, bounds=bounds, config=kw.pop("config", SMALL_CONFIG), **kw)


def test_result_shapes_and_ledger(small_blobs, budget, key):
    # Long because: the first test to compile the shared small configuration pays its compile (~12 s).
    res = _cluster(key, small_blobs.points, budget, small_blobs.bounds)
    slots = SMALL_CONFIG.max_clusters
    d = small_blobs.points.shape[1]
    assert res.centers.shape == (slots, d) and res.counts.shape == (slots,) and res.valid.shape == (slots,)
    valid = np.asarray(res.valid)
    assert int(res.k) == valid.sum() >= 1
    centers = np.asarray(res.centers)
    assert np.all(np.isfinite(centers[valid])) and np.all(np.isnan(centers[~valid]))
    assert np.all(centers[valid] >= -100) and np.all(centers[valid] <= 100)
    assert np.all(np.asarray(res.counts)[~valid] == 0)
    assert math.isclose(res.ledger.total_epsilon, budget.epsilon, rel_tol=1e-12)
    assert math.isclose(res.ledger.total_delta, budget.delta, rel_tol=1e-12)
    assert res.labels_nonprivate.shape == (len(small_blobs.points),)
    assert np.all(valid[np.asarray(res.labels_nonprivate)])  # every point lands in a real cluster
    assert res.split_interval_size.shape == (d,)


def test_same_key_is_bit_identical_and_keys_differ(small_blobs, budget):
    a = _cluster(jax.random.key(7), small_blobs.points, budget, small_blobs.bounds)
    b = _cluster(jax.random.key(7), small_blobs.points, budget, small_blobs.bounds)
    c = _cluster(jax.random.key(8), small_blobs.points, budget, small_blobs.bounds)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.array_equal(np.asarray(a.tree.noisy_count), np.asarray(c.tree.noisy_count))


@pytest.mark.slow
def test_legacy_uint32_keys_work(small_blobs, budget):
    # Long because: a uint32 key compiles cluster again (19 s, 2 cores at load 9).
    res = _cluster(jax.random.PRNGKey(0), small_blobs.points, budget, small_blobs.bounds)
    assert int(res.k) >= 1


def test_recorded_noise_is_rederived_from_its_key_path(small_blobs, budget, key):
    """The root count's noise is element 1 of the 'count' stream (ledger key path)."""
    res = _cluster(key, small_blobs.points, budget, small_blobs.bounds)
    entry = res.ledger[0]
    assert entry.name == "count/level0" and entry.key_path == ("count", "heap[1]")
    d = small_blobs.points.shape[1]
    noise = count_noise(derive_key(key, "count"), heap_count_epsilons(allocate(budget, SMALL_CONFIG, d)))
    recorded = float(res.tree.noisy_count[1]) - len(small_blobs.points)
    assert recorded == float(exact.to_float32(noise)[1])


@pytest.mark.slow
def test_jit_vmap_over_keys_and_over_data_sets(small_blobs, budget):
    # Long because: compiles cluster under jit and under vmap over keys and over data sets (~20 s).
    X = small_blobs.points
    fn = lambda k: _cluster(k, X, budget, small_blobs.bounds)
    keys = jax.random.split(jax.random.key(3), 4)
    batched = jax.jit(jax.vmap(fn))(keys)
    single = fn(keys[2])
    np.testing.assert_allclose(np.asarray(batched.counts[2]), np.asarray(single.counts), rtol=1e-5)
    assert batched.ledger == single.ledger
    # a stack of equally shaped data sets
    stack = jnp.stack([X, X[::-1], X * 0.5])
    per_data = jax.vmap(lambda data: _cluster(keys[0], data, budget, small_blobs.bounds))(stack)
    assert per_data.centers.shape == (3,) + single.centers.shape
    # jit of cluster itself with static budget and config
    jitted = jax.jit(dpm_jax.cluster, static_argnames=("budget", "config"))
    res = jitted(keys[2], X, budget, small_blobs.bounds, config=SMALL_CONFIG)
    np.testing.assert_allclose(np.asarray(res.counts), np.asarray(single.counts), rtol=1e-5)


@pytest.mark.slow
def test_point_mask_equals_dropping_the_points(small_blobs, budget, key):
    # Long because: two more data shapes compiled (18 s, 2 cores at load 9).
    X = small_blobs.points
    padded = np.concatenate([X, np.full((57, X.shape[1]), 99.0, np.float32)])
    mask = np.arange(len(padded)) < len(X)
    plain = _cluster(key, X, budget, small_blobs.bounds)
    masked = _cluster(key, padded, budget, small_blobs.bounds, point_mask=mask)
    np.testing.assert_array_equal(np.asarray(plain.valid), np.asarray(masked.valid))
    np.testing.assert_allclose(np.asarray(plain.counts), np.asarray(masked.counts), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(plain.centers), np.asarray(masked.centers), rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_callers_array_is_not_modified(budget, key):
    # Long because: its own data shape compiled (19 s, 2 cores at load 9).
    X = np.linspace(-300, 300, 200, dtype=np.float64).reshape(100, 2)  # outside the bounds: clipped
    before = X.copy()
    _cluster(key, X, budget, (-100.0, 100.0))
    np.testing.assert_array_equal(X, before)


@pytest.mark.slow
@pytest.mark.parametrize(
    "X",
    [
        np.zeros((1, 1)),
        np.ones((1, 5)),
        np.full((50, 3), 2.0),
        np.zeros((7, 1), np.float16),
        np.arange(12, dtype=np.int64).reshape(6, 2),
    ],
)
def test_tiny_and_degenerate_inputs_give_valid_results(X, budget, key):
    # Long because: one compilation per data shape (19-21 s, 2 cores at load 9, each).
    res = _cluster(key, X, budget, (-10.0, 10.0))
    valid = np.asarray(res.valid)
    assert int(res.k) == valid.sum() >= 1
    assert np.all(np.isfinite(np.asarray(res.centers)[valid]))


def test_per_dimension_bounds(small_blobs, budget, key):
    lo = np.array([-100.0, -50.0, -200.0])
    hi = np.array([100.0, 150.0, 0.0])
    res = _cluster(key, small_blobs.points, budget, (lo, hi))
    valid = np.asarray(res.valid)
    centers = np.asarray(res.centers)[valid]
    assert np.all(centers >= lo - 1e-4) and np.all(centers <= hi + 1e-4)
    np.testing.assert_allclose(
        np.asarray(res.split_interval_size) / (hi - lo), float(res.split_interval_size[0]) / 200.0, rtol=1e-5
    )


BAD_INPUTS = [
    (dict(X=np.array([[0.0, np.nan]])), ValueError, "NaN or inf"),
    (dict(X=np.array([[0.0, np.inf]])), ValueError, "NaN or inf"),
    (dict(X=np.zeros(5)), ValueError, "rank 2"),
    (dict(X=np.zeros((2, 2, 2))), ValueError, "rank 2"),
    (dict(X=np.zeros((0, 3))), ValueError, "empty"),
    (dict(X=np.zeros((3, 0))), ValueError, "empty"),
    (dict(X=np.array([["a", "b"]])), TypeError, "real numbers"),
    (dict(bounds=None), ValueError, "bounds are required"),
    (dict(bounds=(1.0, 1.0)), ValueError, "lo < hi"),
    (dict(bounds=(2.0, 1.0)), ValueError, "lo < hi"),
    (dict(bounds=(0.0, np.inf)), ValueError, "finite"),
    (dict(bounds=(np.zeros(3), np.ones(3))), ValueError, "shape"),
    (dict(bounds=(0.0,)), ValueError, "pair"),
    (dict(key=0), TypeError, "PRNG key"),
    (dict(key=np.zeros(3, np.uint32)), TypeError, "PRNG key"),
    (dict(budget=(1.0, 1e-6)), TypeError, "Budget"),
    (dict(config={"tau_r": 3}), TypeError, "DPMConfig"),
    (dict(point_mask=np.ones(3, bool)), ValueError, "point_mask"),
]


@pytest.mark.parametrize("override, error, message", BAD_INPUTS)
def test_bad_input_raises_before_any_work(override, error, message, budget):
    args = dict(
        key=jax.random.key(0),
        X=np.zeros((4, 2)),
        budget=budget,
        bounds=(-1.0, 1.0),
        config=SMALL_CONFIG,
        point_mask=None,
    )
    args.update(override)
    with pytest.raises(error, match=message):
        dpm_jax.cluster(args.pop("key"), args.pop("X"), args.pop("budget"), **args)


@pytest.mark.slow
@pytest.mark.parametrize("closed_over_by_jit", [False, True])
def test_nan_in_a_jax_array_is_found_also_when_jit_closes_over_it(closed_over_by_jit, budget):
    # JAX arrays are checked on the device; a concrete array closed over by the caller's
    # jit is still concrete, so the check must run (not fail on a tracer, not be skipped).
    # Long because: compiles cluster inside a caller's jit (20-22 s, 2 cores at load 9, each).
    X = jnp.zeros((6, 2), jnp.float32).at[4, 1].set(jnp.nan)
    run = lambda key: dpm_jax.cluster(key, X, budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG)
    with pytest.raises(ValueError, match="row 4, column 1"):
        (jax.jit(run) if closed_over_by_jit else run)(jax.random.key(0))
    clean = jnp.zeros((6, 2), jnp.float32)
    result = jax.jit(lambda key: dpm_jax.cluster(key, clean, budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG))(
        jax.random.key(0)
    )
    assert int(result.k) >= 1


@pytest.mark.slow
def test_quality_on_blobs_at_the_papers_signal_to_noise():
    # Long because: several keys at the paper's n * epsilon, the only signal-to-noise at which
    # quality is meaningful (~12 s).
    """Synth-10d-style data, n = 20,000, median over 3 keys: accuracy >= 0.95, silhouette >= 0.9.

    DPM's noise is a function of epsilon * n (Delta_f ~ 1/n, count noise ~ 1/epsilon,
    Gaussian noise / n), so n = 20,000 at epsilon = 5 has the signal-to-noise of the
    paper's n = 100,000 at epsilon = 1 (Table 2: accuracy 0.99, silhouette 0.96).
    At n = 20,000 and epsilon = 1 DPM as published does not separate 64 blobs
    (accuracy about 0.45 over 8 keys; see benchmarks/quality.py); the full-size run at
    epsilon = 1 is in benchmarks/quality.py.
    """
    from sklearn.metrics import silhouette_score

    from dpm_jax.eval.datasets import synthetic_blobs

    data = synthetic_blobs(n=20_000, d=10, seed=42)
    budget = dpm_jax.Budget(5.0, 1.0 / (20_000 * math.sqrt(20_000)))
    results = jax.vmap(lambda k: dpm_jax.cluster(k, data.points, budget, bounds=data.bounds))(
        jax.random.split(jax.random.key(0), 3)
    )
    accuracy, silhouette = [], []
    for r in range(3):
        labels = nearest_center_labels(data.points, jax.tree.map(lambda a: a[r], results))
        accuracy.append(majority_accuracy(data.labels, labels))
        silhouette.append(silhouette_score(data.points, labels, sample_size=5000, random_state=0))
    assert np.median(accuracy) >= 0.95, accuracy
    assert np.median(silhouette) >= 0.9, silhouette


# ------------------------------------------------ the noise actually added, re-derived
def _node_members(points: np.ndarray, tree, num_nodes: int) -> dict:
    """The points of every reached node and of the children its drawn split would make
    (also where the split was not applied), by replaying the released splits (NumPy)."""
    members = {1: np.arange(len(points))}
    for node in range(1, num_nodes // 2):
        if node not in members or not bool(tree.reached[node]):
            continue
        dim, position = int(tree.split_dim[node]), float(tree.split_position[node])
        inside = members[node]
        right = points[inside, dim] >= position  # the tree sends s* itself right
        members[2 * node], members[2 * node + 1] = inside[~right], inside[right]
    return members


@pytest.mark.slow
def test_every_released_count_is_its_true_count_plus_the_keyed_noise(budget, key):
    # Long because: its own data shape compiled (19 s, 2 cores at load 9).
    """tree.noisy_count[i] = |S_i| + Z_i exactly, with Z_i element i of the 'count'
    stream (ledger key path) for every reached node: catches any change to what the
    tree counts (e.g. + 1 before the noise), to the per-level epsilons or the stream."""
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(-50, 3, (1500, 2)), rng.normal(40, 3, (1500, 2))])
    points = points.astype(np.float32)
    config = dpm_jax.DPMConfig(tau_r=3)
    res = dpm_jax.cluster(key, points, budget, bounds=(-100.0, 100.0), config=config)
    tree = res.tree
    allocation = allocate(budget, config, 2)
    noise = exact.to_float32(count_noise(derive_key(key, "count"), heap_count_epsilons(allocation)))
    members = _node_members(points, tree, 2 ** (config.tau_r + 1))
    reached = np.nonzero(np.asarray(tree.reached))[0]
    assert len(reached) >= 3
    for node in reached:
        assert float(tree.noisy_count[node]) == len(members[node]) + float(noise[node]), node
    # Algorithm 1, lines 16-18: a node is split iff both noisy children reach tau_e;
    # the children of unsplit nodes were counted too (their noise is in the stream).
    tau_e = float(tree.noisy_count[1]) / 2**config.tau_r
    inner = reached[reached < 2**config.tau_r]
    for node in inner:
        children = [len(members[child]) + float(noise[child]) for child in (2 * node, 2 * node + 1)]
        assert bool(tree.is_split[node]) == (min(children) >= tau_e), node
    split = np.asarray(tree.is_split)[inner]
    assert split.any() and not split.all()  # both branches of the rule were exercised


def _replayed_splits(key, points, result, config, allocation, offsets):
    """(node, released (dim, j), replayed (dim, j)) for every reached inner node: the
    node's true half-bin histogram (from its members) through tree.select_splits with
    its released n~, its row of the 'split' stream and its level's epsilon and offset."""
    from dpm_jax import histogram
    from dpm_jax import tree as tree_lib
    from dpm_jax.mechanisms import EM_DIGITS, EM_TRIES
    from dpm_jax.scoring import score_coefficients

    tree = result.tree
    beta = jnp.float32(np.asarray(result.split_interval_size)[0])  # bounds (0, 1): exact
    max_splits = config.max_splits_per_dim
    num_splits = jnp.minimum(jnp.ceil(1.0 / beta - 1e-6).astype(jnp.int32), max_splits)
    half_bins = histogram.half_bin_indices(jnp.asarray(points), beta, num_splits, max_splits)
    bits = jax.random.bits(derive_key(key, "split"), (config.max_clusters, EM_TRIES, EM_DIGITS), dtype=jnp.uint32)
    coefficients = score_coefficients(config.t, config.q, config.alpha)
    members = _node_members(points, tree, 2 ** (config.tau_r + 1))

    @jax.jit
    def replay(node_bits, member_mask, count, epsilon, offset):
        counts = histogram.level_histogram(half_bins, jnp.zeros(len(points), jnp.int32), member_mask, 1, max_splits)
        return tree_lib.select_splits(
            node_bits,
            dpm_jax.api.em_table_on_device(),
            counts,
            exact.from_int32(count),
            jnp.ones(1, bool),
            jnp.arange(max_splits) < num_splits,
            epsilon,
            offset,
            coefficients,
        )

    out = []
    for node in np.nonzero(np.asarray(tree.reached)[: 2**config.tau_r])[0]:
        level = int(node).bit_length() - 1
        member_mask = np.zeros(len(points), bool)
        member_mask[members[node]] = True
        dim, j = replay(
            bits[node : node + 1],
            member_mask,
            jnp.asarray([int(tree.noisy_count[node])], jnp.int32),
            allocation.split_epsilons[level],
            offsets[level],
        )
        released_j = round(float(tree.split_position[node]) / float(beta) - 0.5)
        out.append((int(node), (int(tree.split_dim[node]), released_j), (int(dim[0]), int(j[0]))))
    return out


@pytest.mark.slow
def test_every_split_is_select_splits_with_the_levels_parameters_and_keyed_bits(key):
    # Long because: n = 2,400 for the unclamped regime, and two replays of every node (~11 s).
    """Every drawn split equals tree.select_splits replayed on the node's true histogram
    with its released n~, row `node` of the 'split' stream and its level's epsilon and
    offset lambda: catches a change to which bits, epsilon or offset a level uses. The
    data are large enough that n~ - lambda > 0 at every level (the unclamped regime of
    Lemma 5, where the offset changes the exponent), and the replay with lambda = 0
    disagrees somewhere: the check has the power to see the offset."""
    rng = np.random.default_rng(4)
    centres = np.array([[0.2, 0.2], [0.2, 0.8], [0.8, 0.3], [0.7, 0.8]])
    points = np.clip(centres[rng.integers(0, 4, 2400)] + rng.normal(0, 0.04, (2400, 2)), 0, 1)
    points = points.astype(np.float32)
    config, budget = dpm_jax.DPMConfig(tau_r=3, split_grid="paper"), dpm_jax.Budget(1.0, 1e-6)
    allocation = allocate(budget, config, 2)
    result = dpm_jax.cluster(key, points, budget, bounds=(0.0, 1.0), config=config)
    tree = result.tree
    for node in np.nonzero(np.asarray(tree.reached)[: 2**config.tau_r])[0]:
        level = int(node).bit_length() - 1
        assert float(tree.noisy_count[node]) > allocation.count_offsets[level] > 0, node
    replayed = _replayed_splits(key, points, result, config, allocation, allocation.count_offsets)
    assert len(replayed) >= 5
    for node, released, replay in replayed:
        assert released == replay, node
    unshifted = _replayed_splits(key, points, result, config, allocation, (0.0,) * config.tau_r)
    assert sum(released != replay for _, released, replay in unshifted) >= 3


@pytest.mark.slow
def test_leaf_noise_is_rederived_from_the_average_stream(budget, key):
    # Long because: its own data shape compiled (14 s, 2 cores at load 9).
    """The released leaf sums minus the exact floor(T / 2**s) are the discrete Gaussian
    draws of derive_key(key, 'average'): catches a different stream or scale."""
    from dpm_jax import averaging, mechanisms

    rng = np.random.default_rng(1)
    points = rng.uniform(-1, 1, (400, 2)).astype(np.float32)
    config = dpm_jax.DPMConfig(tau_r=1, tau_e=1e9)  # one leaf holding every point
    res = dpm_jax.cluster(key, points, budget, bounds=(-1.0, 1.0), config=config)
    allocation = allocate(budget, config, 2)
    plan = averaging.leaf_sums_release(allocation.average_epsilon, allocation.average_delta, 2)
    table = mechanisms.discrete_gaussian_table(plan.sigma)
    noise = np.asarray(
        mechanisms.discrete_gaussian_noise(
            derive_key(key, "average"),
            jnp.asarray(table.thresholds_high),
            jnp.asarray(table.thresholds_low),
            table.support_min,
            (config.max_clusters, 2),
        )
    )
    codes = np.clip(np.round((points + 1.0) / 2.0 * 2**20), 0, 2**20).astype(np.int64) - 2**19
    floor_sum = np.floor_divide(codes.sum(axis=0), 2**plan.coarse_shift)
    slot = int(np.nonzero(np.asarray(res.valid))[0][0])
    released = (floor_sum + noise[slot] + 0.5) * 2.0**plan.coarse_shift / 2**20
    centre = 0.0 + released / float(res.counts[slot]) * 2.0  # middle 0, range 2
    np.testing.assert_allclose(np.asarray(res.centers)[slot], np.clip(centre, -1, 1), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_points_outside_the_bounds_are_clipped_before_every_statistic(budget, key):
    # Long because: its own data shape compiled (25 s, 2 cores at load 9).
    """A far outlier and the same point clipped to the bounds give the identical release."""
    rng = np.random.default_rng(2)
    points = rng.normal(0, 10, (300, 2)).astype(np.float32)
    outlier, clipped = points.copy(), points.copy()
    outlier[0] = [1e6, -1e6]
    clipped[0] = [100.0, -100.0]
    a = _cluster(key, outlier, budget, (-100.0, 100.0))
    b = _cluster(key, clipped, budget, (-100.0, 100.0))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_a_starved_budget_warns_from_the_released_size(small_blobs, budget, key):
    # Long because: a starved budget compiles cluster again (24 s, 2 cores at load 9).
    """n~ * epsilon ~ 600 is below the ~2,500 two clusters need here (dpm_jax.diagnostics.plan): a warning,
    computed from the released n~; an ample budget on the same data gives none."""
    with pytest.warns(InsufficientBudgetWarning, match="the released size n~"):
        _cluster(key, small_blobs.points, budget, small_blobs.bounds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsufficientBudgetWarning)
        _cluster(key, small_blobs.points, dpm_jax.Budget(15.0, 1e-6), small_blobs.bounds)


def test_star_import_works_without_scikit_learn():
    """``from dpm_jax import *`` needs no scikit-learn (the estimator stays a lazy attribute)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sklearn'] = None\n"  # an import of sklearn now fails
        "from dpm_jax import *\n"
        "print(cluster.__name__, Budget.__name__)\n"
        "import dpm_jax\n"
        "try:\n    dpm_jax.DPMClustering\nexcept ImportError:\n    print('estimator needs sklearn')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["cluster Budget", "estimator needs sklearn"]
