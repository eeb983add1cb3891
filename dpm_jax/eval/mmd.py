"""RKHS distance (MMD) between a data set and a weighted synthetic set, exact and chunked.

For the exponentiated quadratic kernel k(x, y) = exp(-gamma ||x - y||^2) and a weighted
set (w_j, z_j) with sum_j w_j = 1, the distance between the kernel mean embeddings is

    ||mu_X - mu_Z|| = sqrt(w' K_zz w - 2 w' (K_zx 1 / n) + 1' K_xx 1 / n^2)

(Equation 1 of "Differentially Private Synthetic Data Using KD-Trees"; Balog, Tolstikhin
and Schölkopf 2018, whose experiments use gamma = 1 / (100 sqrt(D))^2). Every kernel
value is computed (no random features): blocks of pairs in float32 on the device, the
block totals summed in float64 on the host. Coordinates are centred on the data's mean
first, which changes no distance and keeps the float32 expansion
||x||^2 + ||y||^2 - 2 x.y accurate. An evaluation metric: it reads the data, it is not DP.

:func:`rkhs_distance_boxes` is the same distance for the synthetic *distribution* a
release describes: the mixture of uniform distributions on its boxes, weighted by the
released counts (what :meth:`dpm_jax.synth.result.SynthResult.sample` draws from). The
kernel factorises over coordinates, so every term is a product of one-dimensional
averages of exp(-(t - u)^2) (coordinates scaled by sqrt(gamma)) over intervals, each in
closed form (derivations at :func:`_point_interval_average` and
:func:`_interval_pair_average`), in float64.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["balog_gamma", "kernel_row_sums", "kernel_mean", "rkhs_distance", "rkhs_distance_boxes"]

_BLOCK = 4096
# An interval narrower than this (in units of 1 / sqrt(gamma)) is averaged by its Taylor
# series to fourth order. The pair closed form divides a sum of O(1) terms by w1 w2
# (rounding ~4e-16 / (2 w1 w2): 5e-13 at the threshold); the series' first omitted term
# is 120 E W^6 / 720 at most (|H_6(t)| exp(-t^2) <= 120), W the difference of two
# uniforms of widths <= w: E W^6 <= 0.036 w^6, 4e-13 at the threshold. Both absolute, on
# kernel averages in [0, 1]; the threshold balances them.
_NARROW = 2e-2
_SQRT_PI = math.sqrt(math.pi)


def balog_gamma(d: int) -> float:
    """Balog et al.'s kernel parameter: gamma = 1 / (100 sqrt(d))^2."""
    return 1.0 / (100.0 * math.sqrt(d)) ** 2


@jax.jit
def _block_sums(a: jax.Array, b: jax.Array, b_weight: jax.Array, gamma: jax.Array) -> jax.Array:
    """sum_j b_weight_j k(a_i, b_j) for every row a_i (float32)."""
    sq = jnp.sum(a * a, 1)[:, None] + jnp.sum(b * b, 1)[None, :] - 2.0 * a @ b.T
    return jnp.exp(-gamma * jnp.maximum(sq, 0.0)) @ b_weight


def _blocks(n: int, size: int):
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def kernel_row_sums(A: np.ndarray, B: np.ndarray, gamma: float, b_weight: np.ndarray | None = None) -> np.ndarray:
    """(len(A),) float64: sum_j b_weight_j k(a_i, b_j) (b_weight 1 by default), block by block."""
    A, B = np.asarray(A, np.float32), np.asarray(B, np.float32)
    b_weight = np.ones(len(B), np.float32) if b_weight is None else np.asarray(b_weight, np.float32)
    pad = (-len(B)) % _BLOCK if len(B) > _BLOCK else 0
    B = np.concatenate([B, np.zeros((pad, B.shape[1]), np.float32)])
    b_weight = np.concatenate([b_weight, np.zeros(pad, np.float32)])
    out = np.zeros(len(A))
    g = jnp.float32(gamma)
    for a0, a1 in _blocks(len(A), _BLOCK):
        for b0, b1 in _blocks(len(B), _BLOCK):
            out[a0:a1] += np.asarray(_block_sums(A[a0:a1], B[b0:b1], b_weight[b0:b1], g), np.float64)
    return out


def kernel_mean(X: np.ndarray, gamma: float) -> float:
    """1' K_xx 1 / n^2, every pair computed."""
    X = np.asarray(X, np.float64)
    X = X - X.mean(0)
    return math.fsum(kernel_row_sums(X, X, gamma)) / len(X) ** 2


def rkhs_distance(X, Z, weights, gamma: float, kxx_mean: float | None = None) -> float:
    """||mu_X - mu_(Z, w)|| for data X (n, d), synthetic rows Z (m, d) and weights (m,) >= 0.

    ``kxx_mean`` (the data's own term, :func:`kernel_mean`) may be passed when known.
    """
    X, Z = np.asarray(X, np.float64), np.asarray(Z, np.float64)
    w = np.asarray(weights, np.float64)
    if Z.ndim != 2 or Z.shape[1] != X.shape[1] or w.shape != (len(Z),):
        raise ValueError(f"Z must be (m, {X.shape[1]}) with m weights, got {Z.shape} and {w.shape}")
    if len(Z) == 0 or not np.all(w >= 0) or w.sum() <= 0:
        raise ValueError("the synthetic set needs at least one row and weights >= 0 with a positive sum")
    w = w / w.sum()
    centre = X.mean(0)
    X, Z = X - centre, Z - centre
    kxx = kernel_mean(X, gamma) if kxx_mean is None else kxx_mean
    kzz = math.fsum(w * kernel_row_sums(Z, Z, gamma, w))
    kzx = math.fsum(w * kernel_row_sums(Z, X, gamma)) / len(X)
    return math.sqrt(max(kzz - 2.0 * kzx + kxx, 0.0))


def _derivatives(t: jax.Array):
    """f, f', f'', f''', f'''' of f(t) = exp(-t^2) (Hermite polynomials times f)."""
    f = jnp.exp(-t * t)
    t2 = t * t
    return f, -2 * t * f, (4 * t2 - 2) * f, (12 * t - 8 * t * t2) * f, (16 * t2 * t2 - 48 * t2 + 12) * f


def _gauss_mass(lo: jax.Array, hi: jax.Array) -> jax.Array:
    """integral_lo^hi exp(-t^2) dt for lo <= hi, from erfc of |lo| and |hi|: no cancellation
    between two erf values near +-1 when both ends lie in the same tail."""
    a, b = jax.scipy.special.erfc(jnp.abs(lo)), jax.scipy.special.erfc(jnp.abs(hi))
    return 0.5 * _SQRT_PI * jnp.where(lo >= 0, a - b, jnp.where(hi >= 0, 2.0 - a - b, b - a))


def _point_interval_average(x: jax.Array, lo: jax.Array, hi: jax.Array, spread: jax.Array) -> jax.Array:
    """E exp(-(x + V - U)^2), U ~ uniform[lo, hi], V ~ uniform[-spread/2, spread/2] with
    spread < _NARROW (0 for a point x); scaled coordinates, broadcasting.

    Wide [lo, hi] (w = hi - lo >= _NARROW): with t = x - u, E_V f(t + V) = f + f'' s^2/24 +
    f'''' s^4/1920 + O(s^6) (E V^2 = s^2/12, E V^4 = s^4/80), integrated over t in
    [x - hi, x - lo]: (integral of f (erfc) + s^2/24 [f'] + s^4/1920 [f''']) / w.
    Narrow: W = V - (U - mid) about t0 = x - mid: E f(t0 + W) = f + f'' E W^2/2 +
    f'''' E W^4/24 + O(w^6), E W^2 = (w^2 + s^2)/12, E W^4 = (w^4 + s^4)/80 + w^2 s^2/24.
    """
    w = hi - lo
    wide = w >= _NARROW
    s2 = spread * spread
    _, d1_top, _, d3_top, _ = _derivatives(x - lo)
    _, d1_bottom, _, d3_bottom, _ = _derivatives(x - hi)
    integral = _gauss_mass(x - hi, x - lo) + s2 / 24 * (d1_top - d1_bottom) + s2 * s2 / 1920 * (d3_top - d3_bottom)
    f, _, d2, _, d4 = _derivatives(x - 0.5 * (lo + hi))
    w2 = w * w
    series = f + d2 * (w2 + s2) / 24 + d4 * ((w2 * w2 + s2 * s2) / 80 + w2 * s2 / 24) / 24
    return jnp.where(wide, integral / jnp.where(wide, w, 1.0), series)


def _psi(t: jax.Array) -> jax.Array:
    """psi(t) - sqrt(pi) |t| for psi(t) = sqrt(pi) t erf(t) + exp(-t^2) (psi'' = 2 exp(-t^2));
    it decays like exp(-t^2) / (2 t^2)."""
    a = jnp.abs(t)
    return jnp.exp(-a * a) - _SQRT_PI * a * jax.scipy.special.erfc(a)


def _interval_pair_average(lo1, hi1, lo2, hi2) -> jax.Array:
    """E exp(-(X - Y)^2), X ~ uniform[lo1, hi1], Y ~ uniform[lo2, hi2] independent (scaled).

    With Phi = psi / 2 (Phi'' = exp(-t^2)), the double integral of exp(-(x - y)^2) over the
    two intervals is Phi(hi1 - lo2) - Phi(lo1 - lo2) - Phi(hi1 - hi2) + Phi(lo1 - hi2);
    divided by w1 w2. The sqrt(pi) |t| parts of psi cancel exactly when the intervals are
    disjoint (the four differences share a sign), so they are dropped there rather than left
    to round. When either interval is narrower than _NARROW, it is the spread of
    :func:`_point_interval_average` about its centre (the kernel is even in x - y).
    """
    w1, w2 = hi1 - lo1, hi2 - lo2
    both = (w1 >= _NARROW) & (w2 >= _NARROW)
    ts = (hi1 - lo2, lo1 - lo2, hi1 - hi2, lo1 - hi2)
    signs = (1.0, -1.0, -1.0, 1.0)
    disjoint = (lo1 >= hi2) | (lo2 >= hi1)
    linear = jnp.where(disjoint, 0.0, _SQRT_PI * sum(c * jnp.abs(t) for c, t in zip(signs, ts)))
    closed = (linear + sum(c * _psi(t) for c, t in zip(signs, ts))) / (2.0 * jnp.where(both, w1 * w2, 1.0))
    first_narrow = w1 < _NARROW
    x = jnp.where(first_narrow, 0.5 * (lo1 + hi1), 0.5 * (lo2 + hi2))
    lo, hi = jnp.where(first_narrow, lo2, lo1), jnp.where(first_narrow, hi2, hi1)
    spread = jnp.where(both, 0.0, jnp.where(first_narrow, w1, w2))
    return jnp.where(both, closed, _point_interval_average(x, lo, hi, spread))


@jax.jit
def _point_box_sums(x, lo, hi, weight) -> jax.Array:
    """sum_j weight_j prod_k E exp(-(x_ik - U_jk)^2), U_j uniform on box j (float64)."""
    inside = _point_interval_average(x[:, None, :], lo[None], hi[None], jnp.zeros(()))
    return jnp.prod(inside, axis=-1) @ weight


@jax.jit
def _box_box_sums(lo1, hi1, lo2, hi2, weight) -> jax.Array:
    """sum_j weight_j prod_k E exp(-(X_ik - Y_jk)^2), X_i, Y_j uniform on their boxes."""
    inside = _interval_pair_average(lo1[:, None, :], hi1[:, None, :], lo2[None], hi2[None])
    return jnp.prod(inside, axis=-1) @ weight


def _pad(a: np.ndarray, rows: int) -> np.ndarray:
    return np.concatenate([a, np.zeros((rows - len(a), *a.shape[1:]))])


def _weighted_total(fn, rows: tuple, row_weight: np.ndarray, boxes: tuple, weight: np.ndarray) -> float:
    """sum_i row_weight_i fn(rows_i, boxes, weight), chunked over rows: the boxes are
    zero-padded to a power of two with weight 0 and the rows to the chunk (cut after), so
    a few shapes compile; chunk x boxes stays near 2**22 values."""
    size = max(8, 1 << (len(weight) - 1).bit_length())
    boxes = tuple(jnp.asarray(_pad(b, size)) for b in boxes)
    weight = jnp.asarray(_pad(weight, size))
    chunk = max(64, min(_BLOCK, (1 << 22) // size))
    parts = []
    for r0, r1 in _blocks(len(row_weight), chunk):
        sums = np.asarray(fn(*(jnp.asarray(_pad(r[r0:r1], chunk)) for r in rows), *boxes, weight))
        parts.append(math.fsum(row_weight[r0:r1] * sums[: r1 - r0]))
    return math.fsum(parts)


def _box_terms(X, lower, upper, weights, gamma: float) -> tuple[float, float]:
    """(w' K_bb w, w' K_bx 1 / n) of the box mixture (weights normalised to sum 1), float64."""
    scale = math.sqrt(gamma)
    centre = X.mean(0)
    x = (X - centre) * scale
    lo, hi = (lower - centre) * scale, (upper - centre) * scale
    w = weights / weights.sum()
    with jax.enable_x64(True):
        kzz = _weighted_total(_box_box_sums, (lo, hi), w, (lo, hi), w)
        kzx = _weighted_total(_point_box_sums, (x,), np.full(len(x), 1.0 / len(x)), (lo, hi), w)
    return kzz, kzx


def rkhs_distance_boxes(X, lower, upper, weights, gamma: float, kxx_mean: float | None = None) -> float:
    """||mu_X - mu_P|| for data X (n, d) and P the mixture of uniform distributions on the
    boxes [lower_j, upper_j] (each (m, d)) with weights (m,) >= 0 (normalised to sum 1).

    Exact for the kernel exp(-gamma ||x - y||^2) up to float64 rounding (module docstring);
    a box with lower == upper is a point mass, so on such boxes this is :func:`rkhs_distance`.
    ``kxx_mean`` as for :func:`rkhs_distance`.
    """
    X = np.asarray(X, np.float64)
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    w = np.asarray(weights, np.float64)
    if lower.ndim != 2 or lower.shape != upper.shape or lower.shape[1] != X.shape[1] or w.shape != (len(lower),):
        raise ValueError(
            f"lower and upper must be (m, {X.shape[1]}) with m weights, got {lower.shape}, {upper.shape}, {w.shape}"
        )
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower <= upper)):
        raise ValueError("every box needs finite lower <= upper")
    if len(w) == 0 or not np.all(w >= 0) or w.sum() <= 0:
        raise ValueError("the mixture needs at least one box and weights >= 0 with a positive sum")
    kxx = kernel_mean(X, gamma) if kxx_mean is None else kxx_mean
    kzz, kzx = _box_terms(X, lower, upper, w, gamma)
    return math.sqrt(max(kzz - 2.0 * kzx + kxx, 0.0))
