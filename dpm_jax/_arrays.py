"""Array helpers shared by the mechanisms and the scores."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["cumsum_last"]

_BLOCK = 32


def cumsum_last(x: jnp.ndarray) -> jnp.ndarray:
    """Inclusive cumulative sum along the last axis, as two small triangular matmuls.

    XLA's CPU cumsum is several times slower than this blocked form for the
    (nodes, d, 2B) histograms of a tree level. Sums of float32 counts are exact
    below 2**24. HIGHEST precision: TPUs (bfloat16) and GPUs (TF32) would otherwise
    round the operands of the matmuls.
    """
    *lead, length = x.shape
    num_blocks = -(-length // _BLOCK)
    padded = jnp.pad(x, [(0, 0)] * len(lead) + [(0, num_blocks * _BLOCK - length)])
    blocks = padded.reshape(*lead, num_blocks, _BLOCK)
    upper = jnp.triu(jnp.ones((_BLOCK, _BLOCK), x.dtype))
    within = jnp.matmul(blocks, upper, precision=jax.lax.Precision.HIGHEST)
    strictly_upper = jnp.triu(jnp.ones((num_blocks, num_blocks), x.dtype), 1)
    offsets = jnp.matmul(within[..., -1], strictly_upper, precision=jax.lax.Precision.HIGHEST)
    return (within + offsets[..., None]).reshape(*lead, num_blocks * _BLOCK)[..., :length]
