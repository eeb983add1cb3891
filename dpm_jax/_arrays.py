"""Array helpers shared by the engine's modules."""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "heap_slot",
    "fold_row_blocks",
    "map_row_blocks",
    "looped_under_vmap",
    "switch_taken",
    "bin_dtype",
    "materialized",
    "to_unit_range",
    "unit_coordinates",
    "reciprocal",
    "rounded_product",
    "rounded_square",
    "pairwise_sum",
]


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


def switch_taken(index: jax.Array, branches: tuple[Callable, ...], *operands):
    """``jax.lax.switch(index, branches, *operands)``, which ``jax.vmap`` runs branch by branch.

    Batched by jax's rule, a switch on a batched index becomes a select that runs every
    branch for every member; where the branches differ in cost (draws sized by a released
    bound) the batch pays for the largest each time. Here only the branches some member takes
    run, each batched over the whole batch (one unbatched ``lax.cond`` per branch), and each
    member keeps its own branch's result: the same values as its call alone. Which branches
    run is a function of the members' indices only. The index is clamped as ``lax.switch``
    clamps it. Nested ``jax.vmap`` axes (keys within data sets) are served too: the rule calls
    itself and :func:`_when_any`, so an outer axis meets a batching rule again. Branches must
    take the batched values as ``operands``, not close over them.
    """
    index = jnp.clip(index, 0, len(branches) - 1)
    switch = jax.custom_batching.custom_vmap(lambda index, *operands: jax.lax.switch(index, branches, *operands))

    @switch.def_vmap
    def batched(axis_size, in_batched, index, *operands):
        index_batched, *batched_operands = in_batched
        each = [_over_the_batch(branch, batched_operands, axis_size) for branch in branches]
        if not index_batched:  # one branch for the whole batch (an outer axis may still batch the index)
            result = switch_taken(index, tuple(each), *operands)
        else:
            result = _zeros_of(jax.eval_shape(each[0], *operands))
            for i, branch in enumerate(each):
                out = _when_any(index == i, branch, *operands)
                result = jax.tree.map(lambda r, o: jnp.where(_along_batch(index == i, o), o, r), result, out)
        return result, jax.tree.map(lambda _: True, result)

    return switch(index, *operands)


def _when_any(taken: jax.Array, branch: Callable, *operands):
    """``branch(*operands)`` if any element of ``taken`` holds, else zeros of its shape (an unbatched
    ``lax.cond``); under ``jax.vmap`` the "any" runs over the batch as well, at every level."""
    run = jax.custom_batching.custom_vmap(
        lambda taken, *operands: jax.lax.cond(
            jnp.any(taken), branch, lambda *o: _zeros_of(jax.eval_shape(branch, *o)), *operands
        )
    )

    @run.def_vmap
    def batched(axis_size, in_batched, taken, *operands):
        _, *batched_operands = in_batched
        result = _when_any(taken, _over_the_batch(branch, batched_operands, axis_size), *operands)
        return result, jax.tree.map(lambda _: True, result)

    return run(taken, *operands)


def _over_the_batch(function: Callable, batched: list, axis_size: int) -> Callable:
    """``function`` mapped over the batch axis of the operands marked ``batched`` (inside a batching rule)."""
    return jax.vmap(function, in_axes=tuple(0 if b else None for b in batched), axis_size=axis_size)


def _zeros_of(shapes):
    """Zeros of the shapes and dtypes of ``jax.eval_shape``'s result (a pytree)."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _along_batch(mask: jax.Array, like: jax.Array) -> jax.Array:
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))


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
    return _materialized(x)


@jax.custom_batching.custom_vmap
def _materialized(x: jax.Array) -> jax.Array:
    flat = x.reshape(-1)
    out = jnp.zeros_like(flat).at[jnp.arange(flat.size)].set(flat, unique_indices=True, indices_are_sorted=True)
    return out.reshape(x.shape)


@_materialized.def_vmap
def _materialized_batched(axis_size, in_batched, x):
    # The whole batch in one buffer, copied in its own layout. Batched by jax.vmap's rule, the
    # scatter took the batch as its minor axis: XLA computed x transposed (every read strided),
    # several times slower for the long fused chains that are materialized.
    (batched,) = in_batched
    return _materialized(x), batched


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


def power_of_two(exponent: jax.Array) -> jax.Array:
    """2.0**exponent in float32, exact, for integer exponents in [-126, 127] (traced or not).

    ``jnp.exp2`` computes exp(x ln 2), which XLA's CPU backend rounds away from the power of two
    from 2**13 on (and a GPU's exp is another approximation); this writes the exponent bits.
    """
    biased = jnp.asarray(exponent).astype(jnp.int32) + 127
    return jax.lax.bitcast_convert_type(jnp.left_shift(biased, 23), jnp.float32)


def heap_slot(heap: jax.Array, padded: int) -> jax.Array:
    """The leaf slot of heap node ``heap`` in a tree of padded depth ``padded``: its local index j at
    level l, shifted to j << (padded - l) (the slot of its left-most descendant at depth ``padded``)."""
    level = jnp.maximum(bit_length(heap) - 1, 0)  # exact (a float log2 misplaced heap ids 8192, 32768)
    return (heap - jnp.left_shift(1, level)) << (padded - level)


def bit_length(x: jax.Array) -> jax.Array:
    """The number of bits of non-negative int32 ``x`` (0 for 0): floor(log2 x) + 1, exactly."""
    return 32 - jax.lax.clz(jnp.asarray(x).astype(jnp.int32))


def ordered_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w for float32 (r, K) @ (K, m): each product rounded on its own, added in the order of K.

    A matmul's summation order, blocking and fused multiply-adds are the backend's, and may follow
    the shapes (a GPU library picks its kernel by them): a row's result would depend on r, which
    is private where the rows are records, and differ between devices. Here every row's result is
    a fixed function of that row alone, the same bits everywhere. Loops over K: for small K.
    """

    def add(total, pair):
        column, weights = pair
        return total + materialized(column[:, None] * weights[None, :]), None

    total, _ = jax.lax.scan(add, jnp.zeros((x.shape[0], w.shape[1]), jnp.float32), (x.T, w))
    return total


def unfused_multiply_add(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
    """``a * b + c`` in float32 with the product rounded before the sum: the same bits on every backend.

    XLA contracts ``a * b + c`` into one fused multiply-add (one rounding) where its backend
    and the fusion around it allow, and rounds twice elsewhere, so released floats computed so
    (split positions, centres, cell boxes: post-processing of released integers) differed in
    the last bit between a GPU and the CPU. With the product :func:`materialized`, every backend
    rounds twice, as NumPy's float32 arithmetic does.
    """
    return materialized(a * b) + c


def rounded_product(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a * b`` in float32 for products known to be >= 0 (squares, weights times distances),
    rounded before any sum it feeds: the same bits on every backend.

    A sum of squares is a chain of ``a * a + s``, which XLA contracts into fused multiply-adds
    where its backend and fusion allow (on this CPU 28 % of a plain squared distance over six
    coordinates differ from NumPy's). The max with 0 (the product itself; NaN stays NaN) stands
    between the product and the sum, so no backend has a multiply-add to contract. Unlike
    :func:`materialized` it costs no buffer: for per-record arrays (n, k).
    """
    return jnp.maximum(a * b, 0.0)


def rounded_square(x: jax.Array) -> jax.Array:
    """``x * x``, rounded before any sum it feeds (:func:`rounded_product`)."""
    return rounded_product(x, x)


def pairwise_sum(x: jax.Array) -> jax.Array:
    """The sum over axis 0 in one fixed order on every backend: pairwise, by halving.

    A reduction's order (and a scatter-add's, with a GPU's atomics) is the backend's, and a
    last-bit difference can flip a comparison made on the sum. Here every addition is an
    elementwise one between fixed halves (zero-padded to a power of two), in log2 steps.
    Feed it :func:`rounded_product` or :func:`materialized` terms, never raw products.
    """
    size = 1 << max(x.shape[0] - 1, 0).bit_length()
    x = jnp.concatenate([x, jnp.zeros((size - x.shape[0],) + x.shape[1:], x.dtype)])
    while x.shape[0] > 1:
        x = x[0::2] + x[1::2]
    return x[0]


def divide(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a / b`` in float32, correctly rounded (IEEE 754's quotient) on every backend.

    XLA's GPU backend lowers a float32 division to PTX ``div.full`` (within 2 ulp, not the
    correctly rounded quotient: it passes ``-nvptx-prec-divf32=1`` to LLVM), so released
    floats computed by a division (centres: released sums over released sizes) differed
    between a GPU and the CPU. The backend's quotient is corrected by
    :func:`nearest_quotient`. For finite ``a`` and ``b`` with |a|, |b| and |a / b| in
    [2**-60, 2**100] (or a = 0; below, XLA's CPU flushes the exact product's subnormal parts).
    """
    a, b = jnp.broadcast_arrays(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    return nearest_quotient(a, b, a / b)


def nearest_quotient(a: jax.Array, b: jax.Array, approximate: jax.Array) -> jax.Array:
    """The float32 nearest to a / b, from ``approximate`` within four floats of it.

    Two exact residuals (a - q b = (a - p) - e, with q b = p + e by Dekker's exact product
    :func:`_exact_product`, and a - p exact by Sterbenz, p being within a few ulps of a):
    1. r0 of the approximation gives q1 = q0 + r0 / b, whose error is half an ulp plus a tiny
       fraction of one (r0 / b is the small correction, itself approximate): q1 is one of the
       two floats around a / b (a faithful quotient);
    2. r1 of q1 is then exact (a faithful quotient's remainder is a float), and a / b lies
       r1 / b from q1: q1's neighbour towards it is nearer exactly when 2 |r1| > |gap b|, the
       gap being that neighbour's distance from q1 (a power of two, so gap b is exact).
    A quotient of two floats is never exactly half-way between two floats, so there is no tie.
    """
    q0 = approximate
    q1 = q0 + _residual(a, b, q0) / b
    r1 = _residual(a, b, q1)
    towards = jnp.where((r1 < 0) != (b < 0), -1.0, 1.0).astype(jnp.float32)
    neighbour = _float_steps(q1, towards)
    nearer = 2.0 * jnp.abs(r1) > jnp.abs((neighbour - q1) * b)
    nearest = jnp.where(nearer & (r1 != 0), neighbour, q1)
    inside = (q0 != 0) & jnp.isfinite(q0) & jnp.isfinite(q1) & jnp.isfinite(r1)
    return jnp.where(inside, nearest, q0)


def _residual(a: jax.Array, b: jax.Array, q: jax.Array) -> jax.Array:
    """a - q b, exact when it is a float (q within an ulp of a / b), else rounded once."""
    p, e = _exact_product(q, b)
    return (a - p) - e


def _float_steps(x: jax.Array, steps: jax.Array) -> jax.Array:
    """x moved by ``steps`` (integers in float32) units in the last place."""
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    # float32 bit patterns order like sign-magnitude integers: a step away from zero adds one
    moved = bits + jnp.where(bits < 0, -steps, steps).astype(jnp.int32)
    return jax.lax.bitcast_convert_type(moved, jnp.float32)


def _exact_product(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(p, e) with p = fl(x y) and x y = p + e exactly (Dekker's TwoProduct).

    The halves' products have at most 24 significant bits, so they are exact and a fused
    multiply-add of one of them rounds as the product and the sum would; only p is rounded, and
    is :func:`materialized` so that no backend fuses it into the subtraction.
    """
    x_high, x_low = _split(x)
    y_high, y_low = _split(y)
    p = materialized(x * y)
    e = ((x_high * y_high - p) + x_high * y_low + x_low * y_high) + x_low * y_low
    return p, e


def _split(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """float32 x as high + low exactly, each of at most 12 significant bits: the mantissa's top
    12 bits (integer masking: no product a backend could fuse or round) and the rest."""
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    high = jax.lax.bitcast_convert_type(jnp.bitwise_and(bits, jnp.int32(-(2**12))), jnp.float32)
    return high, x - high


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
    return materialized(divide(1.0, jnp.asarray(x, jnp.float32)))  # a GPU's 1 / x is within 1 ulp only


class RowBlocks(NamedTuple):
    """How a loop visits the n rows of per-row arrays in blocks (:func:`row_blocks`)."""

    num_blocks: int
    size: int  # rows per block
    groups: int  # strided: the rows as (groups, num_blocks, size / groups); 0: contiguous blocks


_MAX_GROUPS = 64  # row groups of a strided layout: rows sharded over up to 64 devices stay put
_DEVICE_ROWS = 4  # strided blocks hold this many times max_rows rows (the devices share them)
_MIN_RUN = 256  # rows a block reads in one contiguous run (fewer: more cache lines than rows)


def row_blocks(n: int, max_rows: int, strided: bool = False) -> RowBlocks:
    """Blocks of at most ``max_rows`` rows that cover ``n`` rows, for a loop over row blocks.

    By default contiguous blocks of equal size, ceil(n / max_rows) of them, the last ending
    at row n and overlapping the one before it (fewer than num_blocks rows).

    With ``strided`` (rows sharded over devices), strided when n factors as groups x num_blocks x run:
    the rows are viewed as (groups, num_blocks, run) and block i is the groups' runs i,
    ``groups`` runs of ``run`` consecutive rows, so a loop indexes an axis that is never
    split over devices. Rows sharded over devices (:mod:`dpm_jax.sharding`) stay on their
    devices when their number divides ``groups`` (a power of two up to 64): each device
    reads its own rows of every block, where a dynamic slice along the rows makes XLA's
    partitioner gather the whole array onto every device. The most groups (runs of at least
    _MIN_RUN rows) and between ceil(n / (4 max_rows)) and twice that many blocks (max_rows
    rows per device on four devices); contiguous
    blocks when n does not factor so. On one device strided blocks are slower (the reads of a
    block are scattered over the array and its addresses take divisions), hence not the default.
    """
    # Strided blocks are split over the devices: blocks _DEVICE_ROWS times larger hold about
    # max_rows rows per device, and the partial reductions of a block are summed over the
    # devices once per block.
    least = max(1, -(-n // (max_rows * (_DEVICE_ROWS if strided else 1))))
    groups = _MAX_GROUPS if strided else 0
    while groups >= 1:
        if n % groups == 0:
            per_group = n // groups
            for count in range(least, 2 * least + 1):
                if per_group % count == 0 and (per_group // count >= _MIN_RUN or count == 1):
                    return RowBlocks(count, n // count, groups)
        groups //= 2
    return RowBlocks(least, -(-n // least), 0)


def _block_views(blocks: RowBlocks, per_row):
    if blocks.groups:  # (groups, num_blocks, run, ...): a reshape, no data moves
        run = blocks.size // blocks.groups
        return [a.reshape((blocks.groups, blocks.num_blocks, run) + a.shape[1:]) for a in per_row]
    return list(per_row)


def _block(blocks: RowBlocks, n: int, view: jax.Array, index) -> jax.Array:
    if blocks.groups:
        part = jax.lax.dynamic_index_in_dim(view, index, axis=1, keepdims=False)
        return part.reshape((blocks.size,) + view.shape[3:])
    return jax.lax.dynamic_slice_in_dim(view, jnp.minimum(index * blocks.size, n - blocks.size), blocks.size)


def _fresh(blocks: RowBlocks, n: int, index) -> jax.Array:
    """(size,) bool: the block's rows that no earlier block held (all of them when strided)."""
    if blocks.groups:
        return jnp.ones(blocks.size, bool)
    start = jnp.minimum(index * blocks.size, n - blocks.size)
    return start + jnp.arange(blocks.size) >= index * blocks.size


def fold_row_blocks(step: Callable, initial, max_rows: int, *per_row: jax.Array, strided: bool = False):
    """``step(carry, fresh, *blocks)`` over the row blocks of the per-row arrays (:func:`row_blocks`,
    strided for rows sharded over devices: the caller's choice, made once per program).

    ``fresh`` (size,) marks the block's rows that no earlier block held: a reduction that
    counts only those counts every row once, whatever the blocks. Per-row results depend on
    their row alone, so they are the same whatever the blocks.
    """
    n = per_row[0].shape[0]
    blocks = row_blocks(n, max_rows, strided)
    views = _block_views(blocks, per_row)

    def one_block(index, carry):
        return step(carry, _fresh(blocks, n, index), *(_block(blocks, n, v, index) for v in views))

    return jax.lax.fori_loop(0, blocks.num_blocks, one_block, initial)


def map_row_blocks(
    function: Callable, out_shape: tuple, dtype, max_rows: int, *per_row: jax.Array, strided: bool = False
) -> jax.Array:
    """(n, *out_shape) ``function(*blocks)`` (each (size, *out_shape), per row) over the row blocks
    (:func:`row_blocks`)."""
    n = per_row[0].shape[0]
    out_shape = tuple(out_shape)
    blocks = row_blocks(n, max_rows, strided)
    views = _block_views(blocks, per_row)

    if blocks.groups:
        run = blocks.size // blocks.groups

        def write(index, out):
            value = function(*(_block(blocks, n, v, index) for v in views))
            return jax.lax.dynamic_update_index_in_dim(out, value.reshape((blocks.groups, run) + out_shape), index, 1)

        out = jnp.zeros((blocks.groups, blocks.num_blocks, run) + out_shape, dtype)
        return jax.lax.fori_loop(0, blocks.num_blocks, write, out).reshape((n,) + out_shape)

    def write_slice(index, out):  # an overlap rewrites the same per-row values
        value = function(*(_block(blocks, n, v, index) for v in views))
        return jax.lax.dynamic_update_slice_in_dim(out, value, jnp.minimum(index * blocks.size, n - blocks.size), 0)

    return jax.lax.fori_loop(0, blocks.num_blocks, write_slice, jnp.zeros((n,) + out_shape, dtype))
