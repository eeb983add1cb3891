"""Exact integer arithmetic on int32 arrays, for the quantities privacy rests on.

JAX runs with 64-bit types off by default, and float32 sums of data depend on the
order of the additions: one added point can move every later partial sum across a
binade, so its effect on a float32 sum is not bounded by its own size. Counts,
ranks, scores and sums of records are therefore computed here in exact integer
arithmetic, which is associative: the result does not depend on order, chunking or
sharding, and a neighbour's change is exactly the change of the mathematical
quantity, so the stated sensitivities hold in the machine's arithmetic.

An :class:`Int` is a non-negative-radix integer in int32 *limbs* of 30 bits,
little-endian: value = sum_i limbs[i] * 2**(30 i), every limb but the top one in
[0, 2**30), the top one signed. Two limbs hold |value| < 2**59, three < 2**89.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "MAX_POINTS",
    "LIMB_BITS",
    "Int",
    "from_int32",
    "normalize",
    "narrow",
    "where",
    "add",
    "negate",
    "subtract",
    "less",
    "maximum",
    "mul_small",
    "shift_right",
    "to_float32",
    "clip_to_int32",
    "exact_cumsum",
    "chunk_totals",
    "tree_total",
]

# The most points any run takes: every count is an exact int32 (the limit of every entry point).
MAX_POINTS = 2**31 - 1

LIMB_BITS = 30
LIMB_MASK = (1 << LIMB_BITS) - 1


class Int(NamedTuple):
    """An exact integer per array element: little-endian 30-bit int32 limbs."""

    limbs: tuple


def from_int32(x: jax.Array, num_limbs: int = 2) -> Int:
    """The int32 array ``x`` as an :class:`Int` of ``num_limbs`` limbs (>= 2)."""
    x = jnp.asarray(x, jnp.int32)
    two = Int((jnp.bitwise_and(x, LIMB_MASK), jnp.right_shift(x, LIMB_BITS)))
    return Int(widen(two, num_limbs))


def normalize(limbs) -> Int:
    """Carry-propagate limbs with |limb| < 2**31 - 2**30 into canonical form."""
    out, carry = [], 0
    for i, limb in enumerate(limbs):
        limb = limb + carry
        if i == len(limbs) - 1:
            out.append(limb)
        else:
            carry = jnp.right_shift(limb, LIMB_BITS)
            out.append(jnp.bitwise_and(limb, LIMB_MASK))
    return Int(tuple(out))


def widen(a: Int, num_limbs: int) -> tuple:
    """The limbs of ``a`` sign-extended to ``num_limbs`` limbs."""
    limbs = list(a.limbs)
    if len(limbs) >= num_limbs:
        return tuple(limbs)
    top = limbs[-1]
    sign_fill = jnp.where(top < 0, LIMB_MASK, 0).astype(jnp.int32)
    limbs[-1] = jnp.bitwise_and(top, LIMB_MASK)
    limbs += [sign_fill] * (num_limbs - len(limbs) - 1) + [jnp.right_shift(top, LIMB_BITS)]
    return tuple(limbs)


def narrow(a: Int, num_limbs: int) -> Int:
    """``a`` in ``num_limbs`` limbs; the caller guarantees |a| < 2**(30 num_limbs - 1)."""
    limbs = list(a.limbs)
    while len(limbs) > num_limbs:
        top = limbs.pop()
        limbs[-1] = limbs[-1] + jnp.left_shift(top, LIMB_BITS)
    return Int(tuple(limbs))


def where(condition: jax.Array, a: Int, b: Int) -> Int:
    """Element-wise ``a`` where ``condition`` else ``b``."""
    n = max(len(a.limbs), len(b.limbs))
    return Int(tuple(jnp.where(condition, x, y) for x, y in zip(widen(a, n), widen(b, n))))


def add(a: Int, b: Int) -> Int:
    """a + b (the result has as many limbs as the longer operand)."""
    n = max(len(a.limbs), len(b.limbs))
    return normalize([x + y for x, y in zip(widen(a, n), widen(b, n))])


def negate(a: Int) -> Int:
    """-a."""
    return normalize([-limb for limb in a.limbs])


def subtract(a: Int, b: Int) -> Int:
    """a - b."""
    return add(a, negate(b))


def less(a: Int, b: Int) -> jax.Array:
    """a < b, element-wise (canonical operands)."""
    n = max(len(a.limbs), len(b.limbs))
    a_limbs, b_limbs = widen(a, n), widen(b, n)
    result = a_limbs[0] < b_limbs[0]
    for x, y in zip(a_limbs[1:], b_limbs[1:]):
        result = (x < y) | ((x == y) & result)
    return result


def maximum(a: Int, axis: int) -> Int:
    """The largest value along ``axis`` (kept as a size-1 axis), lexicographically exact.

    One variadic reduction over all limbs, so that XLA computes the operand (often a
    long fused chain of integer arithmetic) once per element, not once per limb.
    """
    limbs = a.limbs
    smallest = jnp.iinfo(jnp.int32).min

    def larger(x, y):
        # canonical limbs: the top limb decides, then the next one down, and so on
        x_wins = jnp.zeros((), bool)
        decided = jnp.zeros((), bool)
        for xi, yi in zip(reversed(x), reversed(y)):
            x_wins = jnp.where(decided, x_wins, xi > yi)
            decided = decided | (xi != yi)
        return tuple(jnp.where(x_wins, xi, yi) for xi, yi in zip(x, y))

    out = jax.lax.reduce(limbs, (jnp.int32(smallest),) * len(limbs), larger, (axis % limbs[0].ndim,))
    return Int(tuple(jnp.expand_dims(limb, axis) for limb in out))


def mul_small(a: Int, factor) -> Int:
    """a * factor for a >= 0 and 0 <= factor < 2**15 (a Python int or an int32 array)."""
    factor = jnp.asarray(factor, jnp.int32)
    limbs = list(a.limbs) + [jnp.zeros_like(a.limbs[0])]
    out = [jnp.zeros_like(limbs[0]) for _ in limbs]
    for i, limb in enumerate(limbs[:-1]):
        low = jnp.bitwise_and(limb, 0x7FFF) * factor  # < 2**30
        high = jnp.right_shift(limb, 15) * factor  # < 2**30
        out[i] = out[i] + low + jnp.left_shift(jnp.bitwise_and(high, 0x7FFF), 15)
        out[i + 1] = out[i + 1] + jnp.right_shift(high, 15)
        out = list(normalize(out).limbs)
    return Int(tuple(out))


def shift_right(a: Int, shift) -> Int:
    """floor(a / 2**shift) for a >= 0 and an int32 ``shift`` >= 0 (broadcasts)."""
    shift = jnp.asarray(shift, jnp.int32)
    n = len(a.limbs)
    if n == 2:  # direct formula: no limb selection (the exponential mechanism's hot path)
        low, high = a.limbs
        beyond = jnp.right_shift(high, jnp.clip(shift - LIMB_BITS, 0, 31))
        within_low = jnp.right_shift(low, jnp.minimum(shift, LIMB_BITS - 1)) | jnp.bitwise_and(
            jnp.left_shift(high, jnp.clip(LIMB_BITS - shift, 1, LIMB_BITS)), LIMB_MASK
        )
        within_low = jnp.where(shift == 0, low, within_low)
        far = shift >= LIMB_BITS
        return Int(
            (
                jnp.where(far, jnp.bitwise_and(beyond, LIMB_MASK), within_low),
                jnp.where(far, jnp.right_shift(beyond, LIMB_BITS), jnp.right_shift(high, jnp.minimum(shift, 31))),
            )
        )
    whole = jnp.minimum(shift // LIMB_BITS, n)
    bits = shift % LIMB_BITS
    zero = jnp.zeros_like(a.limbs[0])
    padded = list(a.limbs) + [zero] * (n + 1)
    out = []
    for i in range(n):
        lower = _select(padded, i + whole, n + 1 + n)
        upper = _select(padded, i + whole + 1, n + 1 + n)
        limb = jnp.right_shift(lower, bits) | jnp.bitwise_and(jnp.left_shift(upper, LIMB_BITS - bits), LIMB_MASK)
        out.append(jnp.where(bits == 0, lower, limb))
    return Int(tuple(out))


def _select(limbs, index, count):
    result = limbs[0]
    for j in range(1, count):
        result = jnp.where(index == j, limbs[j], result)
    return result


def to_float32(a: Int) -> jax.Array:
    """float32 of a, a deterministic function of a (post-processing of a released a).

    Correctly rounded for two-limb values with |a| < 2**31 (one int32 conversion);
    otherwise the limbs are combined in float32.
    """
    magnitude = where(a.limbs[-1] < 0, negate(a), a)  # non-negative limbs: no cancellation
    value = jnp.zeros(a.limbs[0].shape, jnp.float32)
    for i in reversed(range(len(a.limbs))):
        value = value * np.float32(2.0**LIMB_BITS) + magnitude.limbs[i].astype(jnp.float32)
    value = jnp.where(a.limbs[-1] < 0, -value, value)
    if len(a.limbs) != 2:
        return value
    low, top = a.limbs
    small = (jnp.clip(top, -2, 1) * (1 << LIMB_BITS) + low).astype(jnp.float32)
    return jnp.where((top >= -2) & (top <= 1), small, value)


def clip_to_int32(a: Int, low: int, high: int) -> jax.Array:
    """A two-limb ``a`` clipped to [low, high] (a sub-range of int32), as int32."""
    low_limb, top = a.limbs
    value = jnp.clip(top, -2, 1) * (1 << LIMB_BITS) + low_limb  # in [-2**31, 2**31)
    value = jnp.where(top > 1, high, jnp.where(top < -2, low, jnp.clip(value, low, high)))
    return value.astype(jnp.int32)


def exact_cumsum(x: jax.Array) -> jax.Array:
    """Inclusive cumulative sum along the last axis of int32 ``x``; exact while partial sums stay in int32.

    Integer addition is associative, so the result does not depend on the order XLA
    adds in (unlike a float32 cumulative sum of counts above 2**24).
    """
    return jnp.cumsum(x, axis=-1, dtype=jnp.int32)


def chunk_totals(values: jax.Array, segment: jax.Array, num_segments: int, chunk: int) -> jax.Array:
    """Per-chunk segment sums: (ceil(n / chunk), num_segments) + values.shape[1:], int32.

    ``values`` (n, ...) int32; ``segment`` (n,) int32 in [0, num_segments], where
    num_segments drops the row. Rows are grouped in consecutive chunks of ``chunk``;
    the caller picks ``chunk`` so that no chunk's sum can leave int32. One scatter-add.
    """
    n = values.shape[0]
    num_chunks = max(1, -(-n // chunk))
    chunk_of_row = jnp.arange(n, dtype=jnp.int32) // chunk
    index = jnp.where(segment < num_segments, chunk_of_row * num_segments + segment, num_chunks * num_segments)
    sums = jax.ops.segment_sum(values, index, num_segments=num_chunks * num_segments + 1)
    return sums[:-1].reshape((num_chunks, num_segments) + values.shape[1:])


def tree_total(values: jax.Array) -> Int:
    """The exact sum over axis 0 of int32 values with |value| <= 2**30, as a 2-limb Int.

    Pairwise (a balanced tree of exact two-limb additions), so the result holds for
    up to 2**28 terms without overflow and is the same in any order.
    """
    total = from_int32(values)
    while total.limbs[0].shape[0] > 1:
        size = total.limbs[0].shape[0]
        if size % 2:
            total = Int(tuple(jnp.concatenate([limb, jnp.zeros_like(limb[:1])]) for limb in total.limbs))
        total = add(Int(tuple(limb[0::2] for limb in total.limbs)), Int(tuple(limb[1::2] for limb in total.limbs)))
    return Int(tuple(limb[0] for limb in total.limbs))
