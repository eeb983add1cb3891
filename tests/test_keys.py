"""dpm_jax.keys: the key of a release and the per-mechanism streams."""

import jax
import numpy as np
import pytest

from dpm_jax.keys import STREAMS, derive_key, key_from_seed


def test_key_from_seed():
    np.testing.assert_array_equal(jax.random.key_data(key_from_seed(123)), jax.random.key_data(jax.random.key(123)))
    fresh = [jax.random.key_data(key_from_seed(None)) for _ in range(2)]
    assert not np.array_equal(*fresh)
    for seed, error in ((-1, ValueError), (2**32, ValueError), (True, TypeError), ("1", TypeError)):
        with pytest.raises(error):
            key_from_seed(seed)


def test_streams_are_distinct_fold_ins_and_unknown_ones_are_refused():
    key = jax.random.key(5)
    derived = {stream: jax.random.key_data(derive_key(key, stream)).tobytes() for stream in STREAMS}
    assert len(set(derived.values())) == len(STREAMS)
    for stream, index in STREAMS.items():
        assert derived[stream] == jax.random.key_data(jax.random.fold_in(key, index)).tobytes()
    with pytest.raises(ValueError, match="unknown key stream"):
        derive_key(key, "counts")
