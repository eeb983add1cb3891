"""The functional API as a new user meets it (issue 23): x64 mode, array-likes, bounds as arrays,
compact labels and ``assign``, tiny budgets, warnings that name the user's line, error texts,
the readable ledger table and the first-call message."""

import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import pytest

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax.entry import FIRST_CALL_MESSAGE

BOUNDS = (-100.0, 100.0)
pytestmark = pytest.mark.filterwarnings("ignore::dpm_jax.InsufficientBudgetWarning")


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, check=False
    )


def _same_release(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_x64_mode_gives_the_same_release_and_the_first_call_message_comes_once():
    # Long because: fresh processes with and without x64, each compiling (45 s, 2 cores at load 9).
    """With jax_enable_x64 on, cluster and cluster_stream release the same numbers (same key) as
    with it off; the compile message is on stderr exactly once in the process."""
    done = _run_python(
        """
        import jax, numpy as np, warnings, dpm_jax
        warnings.simplefilter("ignore")
        X = np.random.default_rng(0).normal(0, 10, (500, 2))
        run = lambda: dpm_jax.cluster(jax.random.key(1), X, dpm_jax.Budget(1.0, 1e-6), (-50.0, 50.0))
        stream = lambda: dpm_jax.cluster_stream(jax.random.key(1), X, dpm_jax.Budget(1.0, 1e-6), (-50.0, 50.0))
        before, before_stream = run(), stream()
        jax.config.update("jax_enable_x64", True)
        after, after_stream = run(), stream()
        for x, y in zip(jax.tree.leaves((before, before_stream)), jax.tree.leaves((after, after_stream))):
            assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True), (x, y)
        assert int(after.k) >= 1
        print("same")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "same"
    assert done.stderr.count(FIRST_CALL_MESSAGE) == 1


def _x64_on():
    """A context with ``jax_enable_x64`` on (JAX >= 0.7: jax.enable_x64; before: jax.experimental)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64

    return enable_x64()


@pytest.mark.slow
def test_the_callers_own_jit_and_vmap_under_x64_give_the_same_release(small_blobs, budget):
    """A caller who turned x64 on and jits or vmaps cluster themselves (the traced path, not the
    entry's own) gets the release of a plain call with x64 off."""
    # Long because: three compiles of the small configuration (x64 off, jitted and vmapped with x64 on).
    X, bounds = small_blobs.points, small_blobs.bounds
    plain = dpm_jax.cluster(jax.random.key(1), X, budget, bounds, config=SMALL_CONFIG)
    with _x64_on():
        jitted = jax.jit(dpm_jax.cluster, static_argnames=("budget", "bounds", "config"))(
            jax.random.key(1), X, budget, bounds=bounds, config=SMALL_CONFIG
        )
        batched = jax.vmap(lambda k: dpm_jax.cluster(k, X, budget, bounds, config=SMALL_CONFIG))(
            jax.vmap(jax.random.key)(np.array([1, 2]))
        )
    assert jitted.counts.dtype == plain.counts.dtype
    _same_release(plain, jitted)
    _same_release(plain, jax.tree.map(lambda leaf: leaf[0], batched))


@pytest.mark.slow
def test_pandas_dataframes_and_array_likes_give_the_release_of_the_array(small_blobs, budget, key):
    # Long because: compiles the clustering for its inputs (20 s, 2 cores at load 9).
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(small_blobs.points, columns=["a", "b", "c"])
    expected = dpm_jax.cluster(key, small_blobs.points, budget, small_blobs.bounds)
    _same_release(dpm_jax.cluster(key, frame, budget, small_blobs.bounds), expected)
    _same_release(dpm_jax.cluster(key, small_blobs.points.tolist(), budget, small_blobs.bounds), expected)
    frame["name"] = "x"
    with pytest.raises(TypeError, match=r"non-numeric columns 'name' \(object|non-numeric columns 'name' \(str"):
        dpm_jax.cluster(key, frame, budget, small_blobs.bounds)


@pytest.mark.slow
def test_bounds_as_numpy_arrays_of_shape_2_and_2_by_d(small_blobs, budget, key):
    # Long because: compiles the default clustering (shared with the tests around it).
    lo, hi = small_blobs.bounds
    d = small_blobs.points.shape[1]
    expected = dpm_jax.cluster(key, small_blobs.points, budget, (lo, hi))
    _same_release(dpm_jax.cluster(key, small_blobs.points, budget, np.array([lo, hi])), expected)
    per_feature = np.stack([np.full(d, lo), np.full(d, hi)])
    _same_release(dpm_jax.cluster(key, small_blobs.points, budget, per_feature), expected)
    with pytest.raises(ValueError, match=r"shape \(2,\) or \(2, 3\)"):
        dpm_jax.cluster(key, small_blobs.points, budget, np.zeros((3, d)))


@pytest.mark.slow
def test_compact_labels_and_assign_index_the_released_centres(small_blobs, key):
    # Long because: compiles a clustering and assign of its own (16 s, 2 cores at load 9).
    """training_labels maps slot ids to 0..k-1 in slot order; assign labels each point by its nearest
    released centre (checked against a brute-force argmin); both index released_clusters' rows."""
    result = dpm_jax.cluster(key, small_blobs.points, dpm_jax.Budget(15.0, 1e-6), small_blobs.bounds)
    centers, counts = dpm_jax.released_clusters(result)
    k = int(result.k)
    assert centers.shape == (k, 3) and counts.shape == (k,) and k >= 2
    slots = np.flatnonzero(np.asarray(result.valid))
    assert slots.max() >= k  # slot ids are not 0..k-1 here: the mapping matters
    labels = dpm_jax.training_labels(result)
    assert labels.min() >= 0 and labels.max() == k - 1
    np.testing.assert_array_equal(slots[labels], np.asarray(result.labels_nonprivate))
    assigned = np.asarray(dpm_jax.assign(result, small_blobs.points))
    brute = np.argmin(((small_blobs.points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(assigned, brute)
    np.testing.assert_array_equal(np.asarray(dpm_jax.assign(centers, small_blobs.points)), brute)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        dpm_jax.assign(result, small_blobs.points[:, :2])


@pytest.mark.slow
def test_tiny_budgets_release_no_cluster_of_size_below_one_and_warn_with_numbers(small_blobs):
    # Long because: tiny budgets compile the clustering again (12 s, 2 cores at load 9).
    """At epsilon = 0.01 on 600 points the count noise exceeds the data: before the fix keys 0, 4 and 7
    released valid clusters of negative size. Now every valid size is >= 1 and k counts them; the
    warning names the user's line and says why, with no 'inf'."""
    for seed in range(8):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = dpm_jax.cluster(jax.random.key(seed), small_blobs.points, dpm_jax.Budget(0.01, 1e-6), BOUNDS)
        counts, valid = np.asarray(result.counts), np.asarray(result.valid)
        assert np.all(counts[valid] >= 1) and int(result.k) == valid.sum()
        assert np.all(np.isnan(np.asarray(result.centers)[~valid]))
        starved = [w for w in caught if issubclass(w.category, dpm_jax.InsufficientBudgetWarning)]
        assert len(starved) == 1 and "inf" not in str(starved[0].message)
        assert "epsilon = 0.01," in str(starved[0].message)  # the caller's budget, not an internal share
        assert starved[0].filename == __file__


@pytest.mark.slow
def test_the_budget_warning_is_filterable_by_category_and_by_the_callers_module(small_blobs, budget, key):
    # Long because: compiles the default clustering (shared with the tests around it).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=dpm_jax.InsufficientBudgetWarning)
        dpm_jax.cluster(key, small_blobs.points, budget, small_blobs.bounds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", module=__name__)
        dpm_jax.cluster(key, small_blobs.points, budget, small_blobs.bounds)


@pytest.mark.slow
def test_delta_at_least_one_over_n_warns(small_blobs, key):
    # Long because: a large delta compiles the clustering again (11 s, 2 cores at load 9).
    with pytest.warns(dpm_jax.LargeDeltaWarning, match="permits releasing a whole record") as caught:
        dpm_jax.cluster(key, small_blobs.points, dpm_jax.Budget(15.0, 0.01), small_blobs.bounds)
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", dpm_jax.LargeDeltaWarning)
        dpm_jax.cluster(key, small_blobs.points, dpm_jax.Budget(15.0, 1e-6), small_blobs.bounds)


def test_a_too_large_epsilon_says_so_in_words(small_blobs, key):
    with pytest.raises(ValueError, match="epsilon is too large for the exact sampler") as error:
        dpm_jax.cluster(key, small_blobs.points, dpm_jax.Budget(50.0, 1e-6), small_blobs.bounds)
    assert "would use" not in str(error.value)


@pytest.mark.slow
def test_the_ledger_table_cuts_nothing_and_explains_its_columns(small_blobs, budget, key):
    # Long because: compiles the default clustering (12 s in the fast loop, 2 cores at load 9).
    ledger = dpm_jax.cluster(key, small_blobs.points, dpm_jax.Budget(15.0, 1e-6), small_blobs.bounds).ledger
    text = ledger.table()
    for entry in ledger:
        assert entry.sensitivity_rule in text and entry.name in text
    assert "sampler d " not in text and "delta (sampler)" in text and "2**s codes" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert f"{ledger.total_epsilon:.5g}" in total
