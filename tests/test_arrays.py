"""Array helpers of the engine (dpm_jax._arrays)."""

import jax
import jax.numpy as jnp
import numpy as np

import pytest

import dpm_jax._arrays
from conftest import USERS_COMPILER_OPTIONS

from dpm_jax._arrays import (
    bin_dtype,
    bit_length,
    divide,
    fold_row_blocks,
    looped_under_vmap,
    map_row_blocks,
    materialized,
    nearest_quotient,
    ordered_matmul,
    power_of_two,
    reciprocal,
    pairwise_sum,
    rounded_square,
    row_blocks,
    switch_taken,
    unfused_multiply_add,
)


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


def _branches(ran: list):
    """Four branches of different output values (a pytree), each noting when it runs."""

    def branch(i):
        def run(x, scale):
            jax.debug.callback(lambda: ran.append(i))
            return {"value": x * scale + i, "size": jnp.full(3, i, jnp.int32)}

        return run

    return tuple(branch(i) for i in range(4))


def test_switch_taken_is_the_switch_and_runs_only_the_branches_some_member_takes():
    ran = []
    branches = _branches(ran)
    index, x, scale = jnp.asarray([0, 2, 0, 2], jnp.int32), jnp.arange(4.0), jnp.float32(10.0)
    batched = jax.jit(jax.vmap(lambda i, v: switch_taken(i, branches, v, scale)))(index, x)
    jax.effects_barrier()
    for member in range(4):
        alone = jax.lax.switch(int(index[member]), branches, x[member], scale)
        for key in ("value", "size"):
            np.testing.assert_array_equal(np.asarray(batched[key][member]), np.asarray(alone[key]))
    assert set(ran) == {0, 2}, ran  # jax's own rule (a select) would run branches 1 and 3 too
    # an index shared by the batch (only the operands batched) takes one branch
    ran.clear()
    shared = jax.jit(jax.vmap(lambda v: switch_taken(jnp.int32(3), branches, v, scale)))(x)
    jax.effects_barrier()
    np.testing.assert_array_equal(np.asarray(shared["value"]), np.asarray(x * 10.0 + 3))
    assert set(ran) == {3}
    # an index out of range is clamped, as lax.switch clamps it
    clamped = jax.vmap(lambda i, v: switch_taken(i, branches, v, scale))(jnp.asarray([7, -2], jnp.int32), x[:2])
    np.testing.assert_array_equal(np.asarray(clamped["value"]), np.asarray([0.0 * 10 + 3, 1.0 * 10 + 0]))
    # nested vmap (keys within data sets): the values, and still only the branches some member takes,
    # with the index batched on both axes or on the outer one only
    ran.clear()
    nested = jax.jit(jax.vmap(jax.vmap(lambda i, v: switch_taken(i, branches, v, scale))))
    got = nested(index.reshape(2, 2), x.reshape(2, 2))
    jax.effects_barrier()
    np.testing.assert_array_equal(np.asarray(got["value"]).reshape(4), np.asarray(batched["value"]))
    assert set(ran) == {0, 2}, ran
    ran.clear()
    outer_only = jax.jit(jax.vmap(lambda i, v: jax.vmap(lambda w: switch_taken(i, branches, w, scale))(v)))
    got = outer_only(jnp.asarray([1, 1], jnp.int32), x.reshape(2, 2))
    jax.effects_barrier()
    np.testing.assert_array_equal(np.asarray(got["value"]), np.asarray(x.reshape(2, 2) * 10.0 + 1))
    assert set(ran) == {1}, ran


def test_reciprocal_of_a_python_number_is_the_float32_one():
    # The auditor and the scoring tests pass public Python scalars where the engine
    # passes traced float32 values: both must give the same bits (and not fail).
    for value in (16.0, 3, 0.1, np.float64(1.0 / 3.0)):
        expected = np.float32(1.0) / np.float32(value)
        assert np.asarray(reciprocal(value)).tobytes() == np.asarray(expected, np.float32).tobytes()
    np.testing.assert_array_equal(reciprocal(jnp.asarray([2.0, 4.0])), [0.5, 0.25])


@pytest.mark.parametrize("n", [1, 7, 600, 1000, 4099, 2**16])
@pytest.mark.parametrize("strided", [False, True])
def test_row_blocks_visit_every_row_once(n, strided, monkeypatch):
    # Small blocks (max_rows 64, runs of 4 rows), so that several blocks, strided or overlapping, are visited.
    monkeypatch.setattr(dpm_jax._arrays, "_MIN_RUN", 4)
    rng = np.random.default_rng(n)
    values = jnp.asarray(rng.integers(0, 1000, (n, 3)), jnp.int32)
    labels = jnp.asarray(rng.integers(0, 5, n), jnp.int32)

    def add(total, fresh, rows, label):
        return total.at[jnp.where(fresh, label, 5)].add(rows, mode="drop")

    blocks = row_blocks(n, 64, strided)
    fold = lambda v, b: fold_row_blocks(add, jnp.zeros((5, 3), jnp.int32), 64, v, b, strided=strided)  # noqa: E731
    total = jax.jit(fold)(values, labels)
    double = lambda x, y: x * 2 + y[:, None]  # noqa: E731
    mapped = jax.jit(lambda v, b: map_row_blocks(double, (3,), jnp.int32, 64, v, b, strided=strided))(values, labels)
    assert blocks.size * blocks.num_blocks >= n and (blocks.groups == 0 or blocks.size * blocks.num_blocks == n)
    assert blocks.groups == (0 if not strided else {1: 1, 7: 1, 600: 8, 1000: 8, 4099: 0, 2**16: 64}[n])
    expected = np.zeros((5, 3), np.int64)
    np.add.at(expected, np.asarray(labels), np.asarray(values))
    np.testing.assert_array_equal(np.asarray(total), expected)
    np.testing.assert_array_equal(np.asarray(mapped), 2 * np.asarray(values) + np.asarray(labels)[:, None])


def test_strided_row_blocks_are_the_default_off():
    assert row_blocks(10**6, 2**16).groups == 0
    assert row_blocks(10**6, 2**16, strided=True).groups == 64  # up to 64 devices keep their rows


def test_materialized_under_vmap_is_the_values():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    once = jax.jit(jax.vmap(jax.vmap(lambda a: materialized(a * 2)), in_axes=(1,)))(x)
    np.testing.assert_array_equal(np.asarray(once), np.moveaxis(np.asarray(x) * 2, 1, 0))
    closed = jax.jit(lambda a: jax.vmap(lambda b: materialized(b) + a.sum())(a))(x)
    np.testing.assert_array_equal(np.asarray(closed), np.asarray(x) + float(np.asarray(x).sum()))


def on_cpu(*arrays: np.ndarray) -> list[jax.Array]:
    """The arrays committed to the CPU, so a jitted call on them compiles for XLA's CPU backend."""
    return [jax.device_put(array, jax.devices("cpu")[0]) for array in arrays]


def test_unfused_multiply_add_rounds_the_product_first_as_numpy_does():
    # XLA's CPU backend contracts a plain jitted l + f * w into a fused multiply-add on most of
    # these inputs (measured: 28 % of them differ from NumPy); the helper must match NumPy's two
    # roundings on every one, under jit and under vmap, as a GPU must (benchmarks/accelerator.py).
    rng = np.random.default_rng(0)
    a, c = rng.uniform(0, 1, (2, 20_000)).astype(np.float32)
    b = rng.uniform(0.1, 7, 20_000).astype(np.float32)
    expected = a * b + c
    plain = jax.jit(lambda a, b, c: a * b + c, compiler_options=USERS_COMPILER_OPTIONS)  # conftest's are faster
    fused = np.asarray(plain(*on_cpu(a, b, c)))  # a GPU's XLA leaves this one unfused: the CPU shows the power
    assert np.any(fused != expected), "no contraction here: the test would not see a fused helper"
    jitted = jax.jit(unfused_multiply_add, compiler_options=USERS_COMPILER_OPTIONS)(a, b, c)
    batched = jax.jit(jax.vmap(unfused_multiply_add), compiler_options=USERS_COMPILER_OPTIONS)(
        a.reshape(100, 200), b.reshape(100, 200), c.reshape(100, 200)
    )
    assert np.asarray(jitted).tobytes() == expected.tobytes()
    assert np.asarray(batched).reshape(-1).tobytes() == expected.tobytes()


def test_sums_of_rounded_squares_are_numpys_under_jit_and_vmap():
    # A squared distance over six coordinates: XLA's CPU contracts the plain sum of squares into
    # multiply-adds (about a quarter of these differ from NumPy); with rounded_square it must not.
    rng = np.random.default_rng(5)
    points, centers = rng.uniform(0, 1, (5_000, 6)).astype(np.float32), rng.uniform(0, 1, (16, 6)).astype(np.float32)
    expected = np.zeros((5_000, 16), np.float32)
    for j in range(6):
        difference = points[:, j][:, None] - centers[:, j][None, :]
        expected = expected + difference * difference  # float32: two roundings
    plain = lambda p, c: sum((p[:, j][:, None] - c[:, j][None, :]) ** 2 for j in range(6))  # noqa: E731
    rounded = lambda p, c: sum(rounded_square(p[:, j][:, None] - c[:, j][None, :]) for j in range(6))  # noqa: E731
    contracted = jax.jit(plain, compiler_options=USERS_COMPILER_OPTIONS)(*on_cpu(points, centers))  # as above
    assert np.any(np.asarray(contracted) != expected)
    got = jax.jit(rounded, compiler_options=USERS_COMPILER_OPTIONS)(points, centers)
    batched = jax.jit(jax.vmap(rounded, in_axes=(None, 0)), compiler_options=USERS_COMPILER_OPTIONS)(
        points, np.stack([centers, centers])
    )
    assert np.asarray(got).tobytes() == expected.tobytes()
    assert np.asarray(batched[1]).tobytes() == expected.tobytes()
    assert np.isnan(rounded_square(jnp.float32(np.nan)))  # the max does not hide a NaN


def test_pairwise_sum_adds_in_its_fixed_order_under_jit_and_vmap():
    # Terms of very different sizes, so that every order of addition gives other bits: the sum must
    # be the halving one (zero-padded to 64 rows), which a backend's own reduction is not.
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((37, 50)) * 10.0 ** rng.uniform(-6, 6, (37, 50))).astype(np.float32)
    expected = np.concatenate([x, np.zeros((27, 50), np.float32)])
    while len(expected) > 1:
        expected = expected[0::2] + expected[1::2]
    got = jax.jit(pairwise_sum, compiler_options=USERS_COMPILER_OPTIONS)(x)
    batched = jax.jit(jax.vmap(pairwise_sum, in_axes=1), compiler_options=USERS_COMPILER_OPTIONS)(x)
    assert np.asarray(got).tobytes() == expected[0].tobytes()
    assert np.asarray(batched).tobytes() == expected[0].tobytes()
    assert np.any(np.asarray(jnp.sum(x, axis=0)) != expected[0])  # another order: the test can tell
    assert np.asarray(pairwise_sum(x[:1])).tobytes() == x[0].tobytes()


def _quotient_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 a, b of every sign and magnitude with |a|, |a / b| in the domain [2**-60, 2**100]."""
    rng = np.random.default_rng(seed)
    a = (rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-20, 20, n)).astype(np.float32)
    counts, scales = rng.integers(1, 10**7, n), rng.uniform(0.5, 2, n) * 10.0 ** rng.uniform(-15, 15, n)
    b = np.where(rng.random(n) < 0.5, counts, scales).astype(np.float32)
    q = np.abs(a.astype(np.float64) / b)
    keep = (np.abs(a) >= 2.0**-60) & (q >= 2.0**-60) & (q <= 2.0**100)
    return a[keep], b[keep]


def test_divide_is_the_correctly_rounded_quotient_under_jit_and_vmap():
    a, b = _quotient_inputs(40_000, 0)
    a, b = a[:30_000], b[:30_000]
    expected = a / b  # NumPy divides as IEEE 754 prescribes
    assert np.asarray(jax.jit(divide, compiler_options=USERS_COMPILER_OPTIONS)(a, b)).tobytes() == expected.tobytes()
    batched = jax.jit(jax.vmap(divide), compiler_options=USERS_COMPILER_OPTIONS)(a.reshape(100, -1), b.reshape(100, -1))
    assert np.asarray(batched).reshape(-1).tobytes() == expected.tobytes()
    assert np.asarray(divide(np.float32(0.0), np.float32(3.0))) == 0.0


def _assert_corrected(a: np.ndarray, b: np.ndarray, ulps: int) -> None:
    """nearest_quotient turns NumPy's a / b moved ``ulps`` floats away back into a / b, bit for bit."""
    expected = a / b
    off = expected.copy()
    for _ in range(abs(ulps)):
        off = np.nextafter(off, np.float32(np.sign(ulps)) * np.inf).astype(np.float32)
    assert ulps == 0 or np.all(off != expected)
    corrected = jax.jit(nearest_quotient, compiler_options=USERS_COMPILER_OPTIONS)(a, b, off)
    assert np.asarray(corrected).tobytes() == expected.tobytes()


@pytest.mark.parametrize("ulps", [-4, -3, -2, -1, 1, 2, 3, 4])
def test_nearest_quotient_corrects_a_quotient_four_floats_off(ulps):
    # A GPU's division (PTX div.full) is within 2 ulp, which is up to 3 floats just above a power of
    # two (a = 1.2500001, b = 1.25): every approximation up to 4 floats off must be corrected.
    _assert_corrected(*_quotient_inputs(20_000, 1), ulps)


@pytest.mark.parametrize("ulps", [-4, -1, 0, 2, 4])
def test_nearest_quotient_next_to_powers_of_two(ulps):
    # Quotients at, just below and just above powers of two, where the floats below are twice as
    # dense as those above (the neighbour's gap is not q1's ulp).
    rng = np.random.default_rng(2)
    n = 20_000
    power = np.ldexp(np.float32(1), rng.integers(-40, 40, n)).astype(np.float32)
    around = [power, np.nextafter(power, np.float32(0)), np.nextafter(power, np.float32(np.inf))]
    base = np.choose(rng.integers(0, 3, n), around).astype(np.float64)
    target = base + rng.choice([-0.5, -0.25, 0.0, 0.25, 0.5], n) * np.spacing(base.astype(np.float32))
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-20, 20, n) * rng.choice([-1, 1], n)).astype(np.float32)
    _assert_corrected((b * target).astype(np.float32), b, ulps)


def _half_way_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 a, b with a / b within 2**-24 ulp of half-way between two floats (the closest there
    are): odd 24-bit B and A = +-1 / 2**25 mod B give A 2**25 = B (2 Q + 1) -+ 1."""
    rng = np.random.default_rng(seed)
    pairs = []
    while len(pairs) < n:
        b = int(rng.integers(2**23, 2**24)) | 1
        inverse = pow(2**25, -1, b)
        pairs += [(a, b) for a in (inverse, b - inverse) if 2**23 <= a < 2**24]
    a, b = np.asarray(pairs[:n], np.float64).T
    a = a * rng.choice([-1.0, 1.0], n) * 2.0 ** rng.integers(-20, 20, n)
    return a.astype(np.float32), (b * 2.0 ** rng.integers(-20, 20, n)).astype(np.float32)


@pytest.mark.parametrize("ulps", [-4, -2, 0, 3])
def test_nearest_quotient_a_hair_from_half_way(ulps):
    # A quotient so close to half-way that the first correction q0 + r0 / b may round to the wrong
    # side of it: the second, exact residual must decide (returning q1 fails here).
    _assert_corrected(*_half_way_inputs(5_000, 3), ulps)


def test_power_of_two_is_exact_for_every_float32_exponent():
    exponents = np.arange(-126, 128)
    got = np.asarray(jax.jit(power_of_two)(exponents))
    assert got.tobytes() == np.ldexp(np.float32(1), exponents).astype(np.float32).tobytes()
    # jnp.exp2 is not (the reason for the helper): 2**13 and most exponents above it on this CPU
    assert np.any(np.asarray(jax.jit(jnp.exp2)(exponents.astype(np.float32))) != got)


def test_bit_length_is_pythons_for_every_power_of_two_and_its_neighbours():
    values = sorted({v for k in range(31) for v in (2**k - 1, 2**k, 2**k + 1) if 0 <= v < 2**31})
    got = np.asarray(jax.jit(bit_length)(np.asarray(values, np.int32)))
    assert got.tolist() == [v.bit_length() for v in values]


def test_ordered_matmul_is_numpys_sum_in_order_and_a_row_does_not_depend_on_the_others():
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(3000, 37)).astype(np.float32), rng.normal(size=(37, 2)).astype(np.float32)
    expected = np.zeros((3000, 2), np.float32)
    for k in range(37):  # float32 products and sums, one rounding each, in the order of K
        expected = expected + x[:, k : k + 1] * w[k]
    compiled = jax.jit(ordered_matmul, compiler_options=USERS_COMPILER_OPTIONS)
    got = np.asarray(compiled(x, w))
    assert got.tobytes() == expected.tobytes()
    fewer = np.asarray(compiled(x[:1234], w))  # another (private) row count
    assert fewer.tobytes() == got[:1234].tobytes()
