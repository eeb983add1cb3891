"""Row buckets (dpm_jax.rows): a new n reuses a compiled program, and the release is the unpadded one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import jax
import jax._src.monitoring as monitoring
import jax.numpy as jnp
import numpy as np
import pytest

import dpm_jax
from dpm_jax import rows
from dpm_jax.api import validated_input
from conftest import users_environment

BUDGET = dpm_jax.Budget(1.0, 1e-6)
BOUNDS = (-100.0, 100.0)


def _significant_bits(m: int) -> int:
    return (m >> ((m & -m).bit_length() - 1)).bit_length()


def test_a_bucket_holds_the_rows_with_at_most_a_sixteenth_more():
    sizes = list(range(1, 5000)) + [
        int(v) for v in np.random.default_rng(0).integers(5000, rows.MAX_BUCKETED_ROWS, 2000)
    ]
    sizes += [rows.MAX_BUCKETED_ROWS, rows.MAX_BUCKETED_ROWS + 1, 2**31 - 1]
    buckets = [rows.bucket_size(n) for n in sizes]
    for n, m in zip(sizes, buckets):
        if n > rows.MAX_BUCKETED_ROWS:
            assert m == n
            continue
        assert m >= max(n, rows.MIN_BUCKET)
        assert m <= max(rows.MIN_BUCKET, n + n / 16)
        assert _significant_bits(m) <= rows.BUCKET_BITS
        assert rows.bucket_size(m) == m  # a bucket is its own bucket: padding twice pads nothing more
    small = [m for n, m in zip(sizes, buckets) if n < 5000]
    assert small == sorted(small)  # monotone
    # few programs: the sizes 1..4999 share 1 + 16 + 16 buckets (1024; 1024..2048 by 64; 2048..4096 by 128; ...)
    assert len(set(small)) <= 1 + 16 + 16 + 7


def test_validation_pads_host_data_once_and_leaves_the_callers_arrays_alone():
    X = np.arange(30, dtype=np.float64).reshape(10, 3)
    mask = np.arange(10) % 2 == 0
    kept = X.copy(), mask.copy()
    data = validated_input(jax.random.key(0), X, mask, bucket=True)
    assert data.rows == 10
    assert data.points.shape == (rows.MIN_BUCKET, 3) and data.points.dtype == jnp.float32
    assert data.mask.shape == (rows.MIN_BUCKET,) and data.mask.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(data.points)[:10], X)
    np.testing.assert_array_equal(np.asarray(data.mask)[:10], mask)
    assert not np.asarray(data.mask)[10:].any() and not np.asarray(data.points)[10:].any()
    X[:] = -1.0  # the caller writes to its arrays after the call: the validated copy does not see it
    mask[:] = False
    np.testing.assert_array_equal(np.asarray(data.points)[:10], kept[0])
    np.testing.assert_array_equal(np.asarray(data.mask)[:10], kept[1])
    unpadded = validated_input(jax.random.key(0), kept[0], kept[1])  # bucket=False: the caller's shapes
    assert unpadded.points.shape == (10, 3) and unpadded.mask.shape == (10,) and unpadded.rows == 10


def test_a_float64_beyond_float32_is_padded_silently_as_xla_casts_it():
    # a warning that only data holding such a record emit would tell them apart
    with jax.enable_x64(True):
        X = jnp.asarray(np.array([[1e39, 0.5], [-2.0, 3.0]]))  # float64 on the device
        with warnings.catch_warnings(record=True) as emitted:
            warnings.simplefilter("always")
            data = validated_input(jax.random.key(0), X, None, bucket=True)
        assert [str(w.message) for w in emitted] == []
        np.testing.assert_array_equal(np.asarray(data.points)[:2], np.asarray(jnp.asarray(X, jnp.float32)))


def test_concrete_jax_arrays_are_padded_on_their_device_and_traced_ones_keep_their_shapes():
    points, mask = jnp.ones((10, 2), jnp.int32), jnp.ones(10, bool)
    data = validated_input(jax.random.key(0), points, mask, bucket=True)
    assert data.points.shape == (rows.MIN_BUCKET, 2) and data.points.dtype == jnp.float32
    assert data.points.sharding == points.sharding and float(jnp.sum(data.points)) == 20.0

    def shapes(points, mask):
        data = validated_input(jax.random.key(0), points, mask, bucket=True)
        assert data.points.shape == points.shape and data.mask.shape == mask.shape
        return data.points

    jax.jit(shapes)(jnp.zeros((10, 2)), jnp.ones(10, bool))
    jax.vmap(shapes)(jnp.zeros((3, 10, 2)), jnp.ones((3, 10), bool))
    # a traced mask beside concrete data: neither is padded
    jax.jit(lambda m: shapes(np.zeros((10, 2), np.float32), m))(jnp.ones(10, bool))


def _equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def _same_release(concrete, traced) -> None:
    """Every array of the concrete (padded) call equals the traced (never padded) call's."""
    assert jax.tree.structure(concrete) == jax.tree.structure(traced)
    assert all(jax.tree.leaves(jax.tree.map(_equal, concrete, traced)))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    centres = rng.uniform(-60, 60, (4, 3))
    X = (centres[rng.integers(0, 4, 6000)] + rng.normal(0, 4, (6000, 3))).astype(np.float32)
    return X


@pytest.mark.parametrize(
    "n, bounds",
    # 5,001 rows in a bucket of 5,120 (with a caller's mask), one row, the edges of the buckets 1,024 and 1,088
    [(5001, BOUNDS), (5001, "private"), (1, BOUNDS), (1024, BOUNDS), (1025, BOUNDS), (1088, BOUNDS)],
)
def test_cluster_releases_what_the_unpadded_run_releases(data, n, bounds):
    key = jax.random.key(5)
    X, mask = data[:n], np.arange(n) % 7 != 1
    concrete = dpm_jax.cluster(key, X, BUDGET, bounds, point_mask=mask)
    traced = jax.jit(lambda k, x, m: dpm_jax.cluster(k, x, BUDGET, bounds, point_mask=m))(key, X, mask)
    assert concrete.labels_nonprivate.shape == (n,)
    _same_release(concrete, traced)


@pytest.mark.parametrize("n, bounds, budget", [(5001, BOUNDS, BUDGET), (5001, "private", BUDGET), (1000, BOUNDS, None)])
def test_kmeans_releases_what_the_unpadded_run_releases(data, n, bounds, budget):
    # budget=None (the non-private greedy) keeps its shape: its cost curve sums floats over the rows
    key = jax.random.key(6)
    X = data[:n]
    concrete = dpm_jax.kmeans(key, X, 4, budget, bounds=bounds)
    traced = jax.jit(lambda k, x: dpm_jax.kmeans(k, x, 4, budget, bounds=bounds))(key, X)
    _same_release(concrete, traced)


def test_private_bounds_release_what_the_unpadded_run_releases(data):
    key = jax.random.key(7)
    X = data[:5001]
    _same_release(
        dpm_jax.private_bounds(key, X, BUDGET), jax.jit(lambda k, x: dpm_jax.private_bounds(k, x, BUDGET))(key, X)
    )


def test_a_batch_of_keys_over_concrete_data_is_padded_and_equals_its_single_calls(data):
    keys = jax.random.split(jax.random.key(9), 2)
    X = data[:5001]  # concrete inside the caller's vmap: padded there too
    batch = jax.vmap(lambda k: dpm_jax.cluster(k, X, BUDGET, BOUNDS))(keys)
    assert batch.labels_nonprivate.shape == (2, 5001)
    for i, key in enumerate(keys):
        _same_release(jax.tree.map(lambda leaf: leaf[i], batch), dpm_jax.cluster(key, X, BUDGET, BOUNDS))


def test_a_new_row_count_in_the_bucket_compiles_nothing(data):
    key = jax.random.key(8)
    dpm_jax.cluster(key, data[:5001], BUDGET, BOUNDS)
    dpm_jax.kmeans(key, data[:5001], 4, BUDGET, bounds=BOUNDS)
    dpm_jax.private_bounds(key, data[:5001], BUDGET)
    sizes = (4900, 5050, 5120)  # the bucket of 5,001 is 4,864 < n <= 5,120
    jax_arrays = [jnp.asarray(data[:n]) for n in sizes]  # made (an XLA op each) before listening
    compiled, listening = [], [True]  # the listener stays registered (not every jax can remove it), inert after

    def listener(event, seconds, **_):
        if listening[0] and event.endswith("backend_compile_duration"):
            compiled.append(event)

    monitoring.register_event_duration_secs_listener(listener)
    try:
        for n, on_device in zip(sizes, jax_arrays):
            for X in (data[:n], on_device):
                result = dpm_jax.cluster(key, X, BUDGET, BOUNDS)
                jax.block_until_ready(result.labels_nonprivate)
                assert result.labels_nonprivate.shape == (n,)
            jax.block_until_ready(dpm_jax.kmeans(key, data[:n], 4, BUDGET, bounds=BOUNDS).centers)
            jax.block_until_ready(dpm_jax.private_bounds(key, data[:n], BUDGET))
        assert compiled == []  # no program at all: neither the engines' nor an op on the n-row data
        jax.block_until_ready(dpm_jax.cluster(key, data[:5121], BUDGET, BOUNDS).centers)
        assert compiled  # the next bucket is a new program (the listener does hear compiles)
    finally:
        listening[0] = False


@pytest.mark.slow
def test_data_on_a_chosen_device_stay_there():
    # Long because: a fresh process with two forced CPU devices compiles cluster once.
    script = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        import jax, numpy as np, dpm_jax
        second = jax.devices()[1]
        X = jax.device_put(np.random.default_rng(0).normal(size=(1500, 3)).astype(np.float32), second)
        budget = dpm_jax.Budget(1.0, 1e-6)
        result = dpm_jax.cluster(jax.random.key(1), X, budget, (-5.0, 5.0))
        assert result.labels_nonprivate.shape == (1500,)
        for leaf in (result.centers, result.counts, result.labels_nonprivate, result.k):  # the data's outputs
            assert leaf.devices() == {second}, (leaf.shape, leaf.devices())
        print("STAYED")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=users_environment(), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STAYED" in done.stdout
