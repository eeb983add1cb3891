"""Array helpers of the engine (dpm_jax._arrays)."""

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax._arrays import bin_dtype, looped_under_vmap, reciprocal


def test_bin_dtype_is_the_smallest_that_holds_every_bin():
    assert bin_dtype(256) == jnp.uint8
    assert bin_dtype(257) == jnp.uint16
    assert bin_dtype(2**16) == jnp.uint16
    assert bin_dtype(2**16 + 1) == jnp.int32


def _scaled_counts(length, indices, weight):
    return jnp.zeros(length, jnp.float32).at[indices].add(weight)


def test_looped_under_vmap_equals_the_calls_one_by_one():
    rng = np.random.default_rng(1)
    indices = jnp.asarray(rng.integers(0, 5, (4, 30)), jnp.int32)
    weight = jnp.float32(2.5)
    function = looped_under_vmap(_scaled_counts, 5)
    batched = jax.vmap(function, in_axes=(0, None))(indices, weight)
    for row, idx in zip(np.asarray(batched), np.asarray(indices)):
        np.testing.assert_array_equal(row, 2.5 * np.bincount(idx, minlength=5))
    # nested vmap (e.g. over keys and over data sets) also loops
    nested = jax.vmap(jax.vmap(function, in_axes=(0, None)), in_axes=(0, None))(indices.reshape(2, 2, 30), weight)
    np.testing.assert_array_equal(nested.reshape(4, 5), batched)


def test_reciprocal_of_a_python_number_is_the_float32_one():
    # The auditor and the scoring tests pass public Python scalars where the engine
    # passes traced float32 values: both must give the same bits (and not fail).
    for value in (16.0, 3, 0.1, np.float64(1.0 / 3.0)):
        expected = np.float32(1.0) / np.float32(value)
        assert np.asarray(reciprocal(value)).tobytes() == np.asarray(expected, np.float32).tobytes()
    np.testing.assert_array_equal(reciprocal(jnp.asarray([2.0, 4.0])), [0.5, 0.25])
