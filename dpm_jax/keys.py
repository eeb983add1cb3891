"""PRNG keys: one per DP release, one stream per mechanism.

Every random draw of :func:`dpm_jax.cluster` comes from the caller's key through
:func:`derive_key`: ``derive_key(key, stream) = fold_in(key, STREAMS[stream])``. Each
mechanism draws all of its noise for the whole tree from its stream's key in one
call, in heap layout (element i belongs to tree node i), so every draw of a run is
re-derivable along the ledger's key paths and the compiled program holds one PRNG
invocation per stream. :func:`key_from_seed` makes the key of a release for the
command line and the scikit-learn estimator.
"""

from __future__ import annotations

import secrets

import jax
import numpy as np

__all__ = [
    "COUNT",
    "INTERVAL",
    "SPLIT",
    "AVERAGE",
    "DEPTH",
    "SYNTH_TREE",
    "SYNTH_LEAF",
    "BOUNDS",
    "STRUCTURE",
    "MERGE",
    "derive_key",
    "MAX_SEED",
    "key_from_seed",
]

# One stream per mechanism; the ledger's key paths use the same names.
COUNT, INTERVAL, SPLIT, AVERAGE, DEPTH = "count", "interval", "split", "average", "depth"
SYNTH_TREE, SYNTH_LEAF = "synth_tree", "synth_leaf"  # dpm_jax.synth: the partition, the leaf counts
BOUNDS = "bounds"  # private bounds (dpm_jax.bounds)
STREAMS = {COUNT: 0, INTERVAL: 1, SPLIT: 2, AVERAGE: 3, DEPTH: 4, BOUNDS: 5, SYNTH_TREE: 6, SYNTH_LEAF: 7}
# The greedy k-means (dpm_jax.greedy, issue 26).
GREEDY_SELECT, GREEDY_COUNT, GREEDY_SUM = "greedy_select", "greedy_count", "greedy_sum"
STREAMS.update({GREEDY_SELECT: 8, GREEDY_COUNT: 9, GREEDY_SUM: 10})
STRUCTURE = "structure"  # DPM's per-node "no structure" test (dpm_jax.structure, issue 27)
STREAMS[STRUCTURE] = 11
MERGE = "merge"  # DPM's valley statistic of every drawn split, for the merge of leaves (dpm_jax.merge, issue 27)
STREAMS[MERGE] = 12
MAX_SEED = 2**32


def derive_key(key: jax.Array, stream: str) -> jax.Array:
    """The key of mechanism ``stream`` (one of STREAMS), derived from the caller's key."""
    if stream not in STREAMS:
        raise ValueError(f"unknown key stream {stream!r}; expected one of {sorted(STREAMS)}")
    return jax.random.fold_in(key, STREAMS[stream])


def key_from_seed(seed: int | None) -> jax.Array:
    """The PRNG key of one DP release.

    ``seed=None`` draws 64 bits from the operating system (:mod:`secrets`): the right
    choice for a real release, as anyone who knows the seed can recompute the noise
    and subtract it. An integer in ``[0, 2**32)`` gives ``jax.random.key(seed)``, so a
    run can be reproduced with :func:`dpm_jax.cluster` and audited along the key paths
    of the ledger; keep such a seed as secret as the data.
    """
    if seed is None:
        words = np.array([secrets.randbits(32), secrets.randbits(32)], dtype=np.uint32)
        return jax.random.wrap_key_data(words, impl="threefry2x32")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be None or an integer, got {type(seed).__name__}")
    if not 0 <= seed < MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return jax.random.key(int(seed))
