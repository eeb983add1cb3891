"""Exact multi-limb integers (dpm_jax.exact) against Python big-int arithmetic.

Every operation is checked element-wise on random int32 inputs that include the
extremes -2**31 and 2**31 - 1, and on two- and three-limb values up to 2**58 in
magnitude; the reductions against int64 NumPy sums.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import exact

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
BITS = exact.LIMB_BITS


def value(a: exact.Int) -> np.ndarray:
    """The Python ints of an Int (object array): sum_i limbs[i] 2**(30 i)."""
    limbs = [np.asarray(limb).astype(object) for limb in a.limbs]
    total = np.zeros(limbs[0].shape, object)
    for i, limb in enumerate(limbs):
        total = total + limb * (1 << (BITS * i))
    return total


def make(values, num_limbs=2) -> exact.Int:
    """Canonical Int of Python ints: lower limbs in [0, 2**30), the top one signed."""
    values = np.asarray(values, object)
    limbs, rest = [], values
    for _ in range(num_limbs - 1):
        limbs.append(np.vectorize(lambda v: v & ((1 << BITS) - 1), otypes=[object])(rest))
        rest = np.vectorize(lambda v: v >> BITS, otypes=[object])(rest)
    limbs.append(rest)
    for limb in limbs:
        assert all(INT32_MIN <= int(v) <= INT32_MAX for v in limb.ravel())
    return exact.Int(tuple(jnp.asarray(limb.astype(np.int64), jnp.int32) for limb in limbs))


def assert_canonical(a: exact.Int):
    for limb in a.limbs[:-1]:
        limb = np.asarray(limb)
        assert limb.dtype == np.int32
        assert np.all((limb >= 0) & (limb < 2**BITS))


def random_int32(rng, size):
    x = rng.integers(INT32_MIN, INT32_MAX, size, endpoint=True, dtype=np.int64)
    x[:8] = [INT32_MIN, INT32_MAX, 0, -1, 1, INT32_MIN + 1, INT32_MAX - 1, 2**30]
    return x


def random_wide(rng, size, bits=58):
    """Python ints of magnitude < 2**bits, with extremes and limb boundaries."""
    x = [int(v) for v in rng.integers(-(2**62), 2**62, size)]
    x = [v >> (62 - int(rng.integers(0, bits + 1))) for v in x]
    x[:10] = [2**bits - 1, -(2**bits) + 1, 0, -1, 2**30, 2**30 - 1, -(2**30), INT32_MIN, INT32_MAX, 2**60 >> 2]
    x[9] = min(x[9], 2**bits - 1)
    return np.asarray(x, object)


def test_from_int32_roundtrip_and_widen():
    rng = np.random.default_rng(0)
    x = random_int32(rng, 500)
    for num_limbs in (2, 3, 4):
        a = exact.from_int32(jnp.asarray(x, jnp.int32), num_limbs)
        assert len(a.limbs) == num_limbs
        assert_canonical(a)
        assert list(value(a)) == [int(v) for v in x]


def test_add_subtract_negate_on_int32_extremes():
    rng = np.random.default_rng(1)
    x, y = random_int32(rng, 600), random_int32(rng, 600)[::-1].copy()
    a, b = exact.from_int32(jnp.asarray(x, jnp.int32)), exact.from_int32(jnp.asarray(y, jnp.int32))
    for got, expected in (
        (exact.add(a, b), x.astype(object) + y.astype(object)),
        (exact.subtract(a, b), x.astype(object) - y.astype(object)),
        (exact.negate(a), -x.astype(object)),
    ):
        assert_canonical(got)
        assert list(value(got)) == list(expected)


@pytest.mark.parametrize("num_limbs", [2, 3])
def test_add_subtract_negate_less_where_on_wide_values(num_limbs):
    rng = np.random.default_rng(2 + num_limbs)
    x, y = random_wide(rng, 400), random_wide(rng, 400)[::-1].copy()
    y[-20:] = x[-20:]  # equal operands for less
    y[-40:-20] = x[-40:-20] + 1
    a, b = make(x, num_limbs), make(y, num_limbs)
    assert list(value(exact.add(a, b))) == list(x + y)
    assert list(value(exact.subtract(a, b))) == list(x - y)
    assert list(value(exact.negate(a))) == list(-x)
    assert_canonical(exact.subtract(a, b))
    np.testing.assert_array_equal(np.asarray(exact.less(a, b)), np.asarray([u < v for u, v in zip(x, y)]))
    np.testing.assert_array_equal(np.asarray(exact.less(b, a)), np.asarray([v < u for u, v in zip(x, y)]))
    condition = rng.random(400) < 0.5
    chosen = exact.where(jnp.asarray(condition), a, b)
    assert list(value(chosen)) == list(np.where(condition, x, y))


def test_mixed_width_add_and_less():
    rng = np.random.default_rng(5)
    x, y = random_wide(rng, 200, bits=50), random_int32(rng, 200).astype(object)
    a3, b2 = make(x, 3), exact.from_int32(jnp.asarray(y.astype(np.int64), jnp.int32))
    total = exact.add(a3, b2)
    assert len(total.limbs) == 3
    assert list(value(total)) == list(x + y)
    np.testing.assert_array_equal(np.asarray(exact.less(b2, a3)), np.asarray([v < u for u, v in zip(x, y)]))


def test_maximum_along_axis():
    rng = np.random.default_rng(6)
    x = random_wide(rng, 7 * 33).reshape(7, 33)
    x[3, :] = x[3, 0]  # ties
    x[4, :5] = 2**40 + np.arange(5)  # equal top limbs, the low limb decides
    x[5, :] = -(2**57) + np.arange(33)  # all negative
    for num_limbs in (2, 3):
        got = exact.maximum(make(x, num_limbs), axis=1)
        assert got.limbs[0].shape == (7, 1)
        assert [int(v) for v in value(got)[:, 0]] == [max(row) for row in x]
    got = exact.maximum(make(x.T, 2), axis=0)
    assert [int(v) for v in value(got)[0]] == [max(row) for row in x]


def test_mul_small_scalar_and_array_factor():
    rng = np.random.default_rng(7)
    x = np.abs(random_wide(rng, 300, bits=58))
    x[0], x[1] = 2**58 - 1, 2**31 - 1
    factors = [0, 1, 2, 3, 2**14 - 1, 2**15 - 1, 12345]
    for factor in factors:
        got = exact.mul_small(make(x), factor)
        assert_canonical(got)
        assert list(value(got)) == list(x * factor)
    array_factor = rng.integers(0, 2**15, 300)
    array_factor[:2] = 2**15 - 1
    got = exact.mul_small(make(x), jnp.asarray(array_factor, jnp.int32))
    assert list(value(got)) == [u * int(f) for u, f in zip(x, array_factor)]
    # int32 inputs with the largest factor
    y = np.abs(random_int32(rng, 100).astype(object))
    y = np.minimum(y, 2**31 - 1)
    got = exact.mul_small(exact.from_int32(jnp.asarray(y.astype(np.int64), jnp.int32)), 2**15 - 1)
    assert list(value(got)) == list(y * (2**15 - 1))


def test_shift_right_is_floor_division():
    rng = np.random.default_rng(8)
    x = np.abs(random_wide(rng, 300, bits=58))
    for shift in (0, 1, 13, 29, 30, 31, 45, 59, 60, 61):
        got = exact.shift_right(make(x), shift)
        assert list(value(got)) == [v >> shift for v in x], shift
    shifts = rng.integers(0, 62, 300)
    got = exact.shift_right(make(x), jnp.asarray(shifts, jnp.int32))
    assert list(value(got)) == [v >> int(s) for v, s in zip(x, shifts)]
    got = exact.shift_right(make(x, 3), jnp.asarray(shifts, jnp.int32))
    assert list(value(got)) == [v >> int(s) for v, s in zip(x, shifts)]


def test_narrow_keeps_the_value():
    rng = np.random.default_rng(9)
    x = random_wide(rng, 300, bits=58)
    for source in (3, 4):
        got = exact.narrow(make(x, source), 2)
        assert len(got.limbs) == 2
        assert list(value(got)) == list(x)
    assert list(value(exact.narrow(exact.add(make(x, 3), make(-x, 3)), 2))) == [0] * 300


def test_to_float32_correctly_rounded_below_2_31():
    rng = np.random.default_rng(10)
    x = random_int32(rng, 2000).astype(object)
    # ties and near-ties above 2**24 (round half to even)
    x[10:20] = [
        2**24 + 1,
        2**24 + 3,
        2**25 + 2,
        2**25 + 6,
        -(2**24) - 1,
        2**30 + 64,
        2**30 + 192,
        2**31 - 64,
        2**31 - 65,
        -(2**31) + 64,
    ]
    expected = np.asarray([np.float32(float(v)) for v in x])
    got = np.asarray(exact.to_float32(make(x)))
    np.testing.assert_array_equal(got, expected)
    got = np.asarray(exact.to_float32(exact.from_int32(jnp.asarray(x.astype(np.int64), jnp.int32))))
    np.testing.assert_array_equal(got, expected)


def test_to_float32_of_wide_values_is_close():
    rng = np.random.default_rng(11)
    x = random_wide(rng, 500, bits=58)
    got = np.asarray(exact.to_float32(make(x, 2)), np.float64)
    expected = np.asarray([float(v) for v in x])
    np.testing.assert_allclose(got, expected, rtol=2**-22, atol=1.0)
    # non-negative values in three limbs
    got = np.asarray(exact.to_float32(make(np.abs(x), 3)), np.float64)
    np.testing.assert_allclose(got, np.abs(expected), rtol=2**-22, atol=1.0)


def test_to_float32_of_negative_three_limb_values():
    x = np.asarray([-1, -68686, -(2**40) - 12345], object)
    got = np.asarray(exact.to_float32(make(x, 3)), np.float64)
    np.testing.assert_allclose(got, [float(v) for v in x], rtol=2**-22, atol=1.0)


def test_clip_to_int32():
    rng = np.random.default_rng(12)
    x = random_wide(rng, 500, bits=58)
    x[20:26] = [2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**33, -(2**33)]
    for low, high in ((INT32_MIN, INT32_MAX), (1, 2**31 - 1), (-5, 7), (0, 0)):
        got = np.asarray(exact.clip_to_int32(make(x), low, high))
        assert got.dtype == np.int32
        assert list(got.astype(object)) == [min(max(v, low), high) for v in x]


def test_exact_cumsum_equals_int64_cumsum():
    rng = np.random.default_rng(13)
    for length in (1, 7, 64, 301):
        x = rng.integers(0, (2**31 - 1) // length, (3, 2, length))
        got = np.asarray(exact.exact_cumsum(jnp.asarray(x, jnp.int32)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.cumsum(x, axis=-1))
    x = np.asarray([2**30, 2**29, 2**28, 2**27, 2**26, 2**26 - 1])  # partial sums up to 2**31 - 1
    np.testing.assert_array_equal(np.asarray(exact.exact_cumsum(jnp.asarray(x, jnp.int32))), np.cumsum(x))


def test_tree_total_equals_int64_sum_and_is_permutation_invariant():
    rng = np.random.default_rng(14)
    tree_total = jax.jit(exact.tree_total)
    for n in (1, 3, 1000, 4097):
        x = rng.integers(-(2**30), 2**30, (n, 3), endpoint=True)
        x[0] = [2**30, -(2**30), 2**30]
        total = tree_total(jnp.asarray(x, jnp.int32))
        assert total.limbs[0].shape == (3,)
        assert list(value(total)) == [int(v) for v in x.sum(0)]
        permuted = tree_total(jnp.asarray(x[rng.permutation(n)], jnp.int32))
        for limb, other in zip(total.limbs, permuted.limbs):
            np.testing.assert_array_equal(np.asarray(limb), np.asarray(other))
    x = np.full(5000, 2**30)  # 5000 * 2**30 > 2**42: far beyond int32
    assert int(value(tree_total(jnp.asarray(x, jnp.int32)))) == 5000 * 2**30


def _chunk_reference(values, segment, num_segments, chunk):
    n = values.shape[0]
    num_chunks = max(1, -(-n // chunk))
    out = np.zeros((num_chunks, num_segments) + values.shape[1:], np.int64)
    for row in range(n):
        if segment[row] < num_segments:
            out[row // chunk, segment[row]] += values[row]
    return out


def test_chunk_totals_equal_int64_sums_and_drop_the_extra_segment():
    rng = np.random.default_rng(15)
    for n, chunk in ((1, 4), (100, 16), (1000, 1024), (2500, 1024)):
        values = rng.integers(-(2**19), 2**19, (n, 2), endpoint=True)
        segment = rng.integers(0, 6, n)  # 5 means dropped
        got = exact.chunk_totals(jnp.asarray(values, jnp.int32), jnp.asarray(segment, jnp.int32), 5, chunk)
        np.testing.assert_array_equal(np.asarray(got), _chunk_reference(values, segment, 5, chunk))


def test_chunk_then_tree_total_is_order_independent():
    rng = np.random.default_rng(16)
    n = 5000
    values = rng.integers(-(2**19), 2**19, (n, 2), endpoint=True)
    segment = rng.integers(0, 4, n)

    @jax.jit
    def totals(v, s):
        return exact.tree_total(exact.chunk_totals(v, s, 3, 1024))

    first = totals(jnp.asarray(values, jnp.int32), jnp.asarray(segment, jnp.int32))
    order = rng.permutation(n)
    second = totals(jnp.asarray(values[order], jnp.int32), jnp.asarray(segment[order], jnp.int32))
    for limb, other in zip(first.limbs, second.limbs):
        np.testing.assert_array_equal(np.asarray(limb), np.asarray(other))
    expected = np.stack([values[segment == s].sum(0) for s in range(3)])
    assert value(first).tolist() == expected.tolist()


class ExactUnderJitAndEager(chex.TestCase):
    """The same exact results compiled and op by op: XLA's fusion of the integer chains
    (the engine's hot path, tree.select_splits) must not change a single bit."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_arithmetic_chain_matches_python_ints(self):
        rng = np.random.default_rng(11)
        x, y = random_wide(rng, 300), random_wide(rng, 300)[::-1].copy()
        shifts = rng.integers(0, 62, 300)

        @self.variant
        def chain(a, b, magnitude, shift):
            return (
                exact.add(a, exact.negate(b)),
                exact.shift_right(magnitude, shift),
                exact.maximum(a, axis=-1),
                exact.mul_small(exact.from_int32(b.limbs[0]), 12345),
            )

        magnitude = np.abs(x - y) >> 2  # below 2**58: two limbs
        total, shifted, largest, product = chain(make(x), make(y), make(magnitude), jnp.asarray(shifts, jnp.int32))
        assert list(value(total)) == list(x - y)
        assert list(value(shifted)) == [int(v) >> int(s) for v, s in zip(magnitude, shifts)]
        assert list(value(largest)) == [max(x)]
        low = np.asarray(make(y).limbs[0]).astype(object)
        assert list(value(product)) == list(low * 12345)
