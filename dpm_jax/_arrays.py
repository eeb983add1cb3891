"""Array helpers shared by the engine's modules."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

__all__ = ["looped_under_vmap", "bin_dtype", "materialized", "to_unit_range", "unit_coordinates", "reciprocal"]


def looped_under_vmap(function: Callable, *static_args) -> Callable:
    """``function(*static_args, *arrays)``, which ``jax.vmap`` runs as a loop over the batch.

    For the scatter-adds of the engine (histograms, leaf sums). Batched naively,
    a scatter whose indices vary over a vmap axis but whose updates do not (vmap
    over keys) materialises the updates and (batch, index) pairs for the whole
    batch: several times the memory and run time of the scatters themselves. In a
    loop each iteration scatters into its own output, unbatched arguments are
    shared, not copied, and the total work is that of the unbatched calls.
    """
    return _looped(function, static_args)


@functools.lru_cache(maxsize=None)
def _looped(function: Callable, static_args: tuple) -> Callable:
    # Cached so that repeated calls hand jit the same function object.
    return jax.custom_batching.sequential_vmap(functools.partial(function, *static_args))


def bin_dtype(num_bins: int):
    """The smallest unsigned integer dtype that holds bin indices 0 .. num_bins - 1.

    Bin indices of every coordinate are kept for the whole recursion; uint8 keeps
    that array at a quarter of the data's size.
    """
    for dtype in (jnp.uint8, jnp.uint16):
        if num_bins <= jnp.iinfo(dtype).max + 1:
            return dtype
    return jnp.int32


def materialized(x: jax.Array) -> jax.Array:
    """``x``, computed once into its own buffer.

    XLA fuses a cheap elementwise producer into each of its consumers, so a per-node
    quantity read through a per-point gather (``x[point_node]``) is recomputed for
    every point, and an integer chain read by several reductions once per reduction.
    A scatter is never fused into its consumers: writing ``x`` through one (unique,
    sorted indices: a plain copy) stops the recomputation, under ``jax.vmap`` too.
    ``jax.lax.optimization_barrier`` does not: XLA's CPU backend removes it before
    fusion.
    """
    flat = x.reshape(-1)
    out = jnp.zeros_like(flat).at[jnp.arange(flat.size)].set(flat, unique_indices=True, indices_are_sorted=True)
    return out.reshape(x.shape)


def to_unit_range(points: jax.Array, lower: jax.Array, upper: jax.Array) -> jax.Array:
    """Points clipped to the public bounds and scaled to [0, 1] per dimension (a per-record map).

    The one definition of the scaling every statistic reads: the engine applies it
    where each statistic is computed (fused by XLA, never an n x d copy), the
    streamed path to each chunk.
    """
    return unit_coordinates(points, lower, upper, reciprocal(upper - lower))


def unit_coordinates(points: jax.Array, lower: jax.Array, upper: jax.Array, scale: jax.Array) -> jax.Array:
    """:func:`to_unit_range` with the reciprocal ``scale`` of the range given: the same arithmetic for
    coordinates gathered with their own dimension's bounds and scale (a point's split dimension)."""
    points = jnp.clip(points, lower, upper)
    return jnp.clip((points - lower) * scale, 0.0, 1.0)


def reciprocal(x: jax.Array) -> jax.Array:
    """1 / x, computed once into its own buffer, for per-point quantities to *multiply* by.

    XLA on CPU does not divide float32 exactly as IEEE prescribes, and how it divides
    depends on the program around the division (fusion, the partitioning of sharded
    rows): a per-point quotient could differ by an ulp between one device and four, or
    between the whole array and a chunk of it, and land in another bin. A product is
    correctly rounded everywhere, so with the divisor's reciprocal computed once, the
    per-point results are the same in every program. ``x`` may also be a Python or
    NumPy number (the auditor and the tests pass public scalars): it is divided as a
    float32 on the device, as the engine's traced values are.
    """
    return materialized(1.0 / jnp.asarray(x, jnp.float32))
