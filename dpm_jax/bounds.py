"""Private bounds: per-dimension (lo, hi) estimated under DP from the data alone.

Every dpm_jax algorithm needs public bounds; a user who does not know them can spend a
share of the budget on this release instead (``bounds="private"``). The mechanism is the
"extreme bins above a threshold" statistic (the approximate bounds of Google's DP
libraries), made exact:

1. Domain, fixed before any data is seen: the finite float32 line cut into buckets by
   sign, binary exponent and the top ``mantissa_bits`` bits of the significand
   (:func:`bucket_edges`); values below 2**-126 in magnitude share one bucket around 0.
   A value's bucket is read from its float32 bit pattern (:func:`bucket_index`): no
   logarithm, no rounding, nothing learnt from the data.
2. One histogram per dimension over these B buckets, exact int32 counts
   (:func:`histogram`). Adding or removing one record changes exactly one count by one
   in each of the d histograms: L1 sensitivity d, L2 sensitivity sqrt(d).
3. Noise on every count: discrete Laplace with parameter epsilon / d
   (:class:`dpm_jax.releases.CountRelease`, sensitivity d: (epsilon, 0)-DP) or the
   discrete Gaussian calibrated to L2 sensitivity sqrt(d)
   (:class:`dpm_jax.releases.GaussianRelease`, (epsilon, delta)-DP through zCDP),
   whichever needs the lower threshold (:func:`plan_bounds`; Laplace for small d,
   the Gaussian for larger d).
4. Post-processing of the noisy histogram only: a bucket is *occupied* when its noisy
   count reaches the threshold T, a public number computed from the noise distribution,
   B and the failure probability alone (never from the data or its size): the chance
   that any empty bucket of a dimension passes is at most ``failure_probability``. The
   bounds are the outer edges of the outermost occupied buckets, moved outward (away from 0)
   by the factor ``widen``, and a lower bound within a factor 2 of 0 (relative to the upper) is
   moved to 0 (likewise for all-negative data), which costs at most a factor 2 of width.

Pitfalls avoided (smartnoise's fixed bug class and its relatives): the threshold is
never a function of the true count; the bucket grid never depends on the data (no
min/max, no scale); every count is an exact integer and the noise is drawn by exact
samplers; the release's ledger line is the noise release's own. A dimension where no
bucket passes has no bounds: outside ``jax.jit`` that is a ValueError, under tracing its
bounds are NaN.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact, keys
from dpm_jax._arrays import fold_row_blocks
from dpm_jax.budget import Budget
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import discrete_gaussian_table, discrete_laplace_tail, count_sampler_tv
from dpm_jax.releases import CountRelease, GaussianRelease, at_most

__all__ = [
    "PRIVATE",
    "PrivateBounds",
    "is_private",
    "plan_bounds",
    "split_for_bounds",
    "histogram",
    "bounds_from_counts",
    "estimate_bounds",
    "check_found",
    "with_bounds_entry",
    "run_with_private_bounds",
    "SYNTHESIS_DEFAULT",
]

PRIVATE = "private"
# The default: what bounds="private" asks for in cluster, cluster_stream and kmeans. DPM and the
# greedy lose resolution (and DPM its splits) in a box wider than the data, and tolerate clipping
# a few extreme points, so the box is the outermost occupied binades' edges; COVERING widens it
# for a box that holds nearly every point (benchmarks/private_bounds.py measures both).
DEFAULT_SHARE = 0.1  # of epsilon and delta
WIDEN = 1.0
_MAGNITUDE_BINADES = 254  # float32 normal exponents -126 .. 127
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_MIN_HALF_WIDTH = 2.0**-64  # of a released range: well above the engine's smallest range, 2**-100
NOISE_KINDS = ("auto", "laplace", "gaussian")
_ROUNDING_MARGIN = 2.0**-40


class PrivateBounds(NamedTuple):
    """A request for private bounds: their share of the budget and the statistic's public parameters.

    ``share``: the fraction of epsilon (and of delta, for the Gaussian) spent on the bounds.
    ``mantissa_bits``: significand bits per bucket (0: one bucket per binade).
    ``widen``: the factor (>= 1) the outer edges are moved outward by, away from 0. The default
    1 gives the tightest box, for clustering, which clips the points of the sparse binades beyond
    the outermost occupied one (a bucket holding fewer than about T points is not seen);
    :data:`COVERING` (2**1.5) reaches them.
    ``failure_probability``: per dimension, the chance that an empty bucket passes T.
    ``noise``: "auto" (the lower threshold), "laplace" or "gaussian".
    """

    share: float = DEFAULT_SHARE
    mantissa_bits: int = 0
    widen: float = WIDEN
    failure_probability: float = 1e-4
    noise: str = "auto"

    def check(self) -> None:
        """A ValueError naming the first bad parameter."""
        if not (isinstance(self.share, (int, float)) and 0 < self.share < 1):
            raise ValueError(f"PrivateBounds.share must be in (0, 1), got {self.share!r}")
        if not (isinstance(self.mantissa_bits, int) and 0 <= self.mantissa_bits <= 8):
            raise ValueError(f"PrivateBounds.mantissa_bits must be an integer in [0, 8], got {self.mantissa_bits!r}")
        if not (isinstance(self.widen, (int, float)) and 1 <= self.widen <= 2**20):
            raise ValueError(f"PrivateBounds.widen must be a factor in [1, 2**20], got {self.widen!r}")
        if not (isinstance(self.failure_probability, float) and 0 < self.failure_probability < 1):
            raise ValueError(f"PrivateBounds.failure_probability must be in (0, 1), got {self.failure_probability!r}")
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"PrivateBounds.noise must be one of {NOISE_KINDS}, got {self.noise!r}")


def is_private(bounds) -> bool:
    """Whether ``bounds`` asks for private bounds: "private" or a :class:`PrivateBounds`."""
    return isinstance(bounds, PrivateBounds) or (isinstance(bounds, str) and bounds == PRIVATE)


def as_request(bounds, default: PrivateBounds = PrivateBounds()) -> PrivateBounds:
    """The :class:`PrivateBounds` of ``bounds`` ("private": the algorithm's ``default``), checked."""
    request = default if isinstance(bounds, str) else bounds
    request.check()
    return request


# A box for nearly all points: the outer edges moved out by 1.5 binades reach the sparse binades
# beyond the outermost occupied one; share 0.15 is the least at which that held on the benchmark's
# data sets, 0.2 leaves a margin (benchmarks/private_bounds.py). The default of the standalone
# dpm_jax.private_bounds, whose product is the box itself.
COVERING = PrivateBounds(share=0.2, widen=2**1.5)
# What bounds="private" means for the synthetic data: a density release, unlike clustering, loses
# the clipped tails and resolves a tight box into more cells under its threshold (RKHS distance
# 10x the public bounds' with the default, level with them with COVERING:
# benchmarks/results/private_bounds_entry_points.md).
SYNTHESIS_DEFAULT = COVERING


def _num_buckets(mantissa_bits: int) -> int:
    """B: 254 2**m magnitude buckets on each side of the zero bucket (:func:`bucket_edges`)."""
    return 2 * _MAGNITUDE_BINADES * 2**mantissa_bits + 1


class BoundsPlan(NamedTuple):
    """The public plan of one bounds release: its noise release, threshold and grid. Hashable.

    ``noise`` is the release that draws the noise and states the ledger line
    (:meth:`entry`): a CountRelease of sensitivity d or a GaussianRelease of L2
    sensitivity sqrt(d). ``threshold`` T: a bucket is occupied when its noisy count is >= T.
    """

    noise: CountRelease | GaussianRelease
    threshold: int
    d: int
    mantissa_bits: int
    widen: float

    @property
    def num_buckets(self) -> int:
        return _num_buckets(self.mantissa_bits)

    def entry(self) -> LedgerEntry:
        return self.noise.entry()


# ------------------------------------------------------------------ the public plan
def _laplace_threshold(release: CountRelease, num_buckets: int, failure: float) -> int:
    """Smallest T with B (P[Z >= T] + tv) <= failure for the discrete Laplace Z of ``release``."""
    eps = release.noise_epsilon
    budget = failure / num_buckets - count_sampler_tv(eps)
    threshold = max(1, math.ceil(math.log(1.0 / (budget * (1.0 + math.exp(-eps)))) / eps))
    while discrete_laplace_tail(eps, threshold - 1) + count_sampler_tv(eps) <= failure / num_buckets:
        threshold -= 1
    return threshold


def _gaussian_threshold(release: GaussianRelease, num_buckets: int, failure: float) -> int:
    """Smallest T with B (exp(-T^2 / (2 sigma^2)) + tv) <= failure (the discrete Gaussian is
    sigma^2-subgaussian: Canonne, Kamath and Steinke 2020, Corollary 9)."""
    budget = failure / num_buckets - discrete_gaussian_table(release.sigma).tv
    return max(1, math.ceil(release.sigma * math.sqrt(2.0 * math.log(1.0 / budget))))


@functools.lru_cache(maxsize=64)
def plan_bounds(budget: Budget, d: int, request: PrivateBounds = PrivateBounds()) -> BoundsPlan:
    """The plan of a bounds release spending at most ``budget`` on d dimensions (``request.share`` unused).

    Laplace: each of the d histograms gets epsilon / d (a record moves d counts by one:
    L1 sensitivity d; pure epsilon-DP, its delta is the sampler's). Gaussian: the d
    histograms as one integer vector of L2 sensitivity sqrt(d) under (epsilon, delta).
    "auto" takes the one with the lower threshold T, i.e. the one that finds sparser
    buckets at the same failure probability.
    """
    request.check()
    num_buckets = _num_buckets(request.mantissa_bits)
    if d * num_buckets > 2**31 - 1:  # the histogram's cell index d' B + bucket is int32
        raise ValueError(
            f"private bounds: {d} dimensions x {num_buckets} buckets exceed the int32 histogram "
            f"(at most {(2**31 - 1) // num_buckets} dimensions at mantissa_bits={request.mantissa_bits})"
        )
    candidates = []
    if request.noise in ("auto", "laplace"):
        laplace = CountRelease("bounds", budget.epsilon, keys.BOUNDS, sensitivity=d, rule="d histograms, 1 count each")
        candidates.append((_laplace_threshold(laplace, num_buckets, request.failure_probability), 0, laplace))
    if request.noise in ("auto", "gaussian"):
        try:
            gaussian = GaussianRelease.calibrated(
                "bounds", budget.epsilon, budget.delta, keys.BOUNDS, math.sqrt(d), d, rule="L2: d histograms"
            )
            candidates.append((_gaussian_threshold(gaussian, num_buckets, request.failure_probability), 1, gaussian))
        except ValueError:  # a delta too small for the Gaussian sampler: "auto" keeps the Laplace
            if request.noise == "gaussian":
                raise
    threshold, _, noise = min(candidates)
    if threshold >= 2**30:
        raise ValueError(f"private bounds: epsilon {budget.epsilon:g} is too small (threshold {threshold})")
    return BoundsPlan(noise, threshold, d, request.mantissa_bits, request.widen)


def split_for_bounds(budget: Budget, request: PrivateBounds, d: int) -> tuple[BoundsPlan, Budget]:
    """(the bounds plan, the rest of the budget): the two ledgers add up to at most ``budget``.

    The bounds get ``request.share`` of epsilon and of delta; the rest gets what they do
    not spend (the Laplace release spends only its sampler's delta), less a relative
    2**-40: the algorithm's ledger adds up to at most the rest as ``math.fsum`` rounds it,
    i.e. up to half an ulp above it in exact arithmetic, and that margin keeps the bounds
    line plus that ledger within ``budget`` (``with_bounds_entry`` checks it).
    """
    plan = plan_bounds(Budget(budget.epsilon * request.share, budget.delta * request.share), d, request)
    spent = plan.entry()
    rest = [
        at_most(total, [part], total - part) * (1.0 - _ROUNDING_MARGIN)
        for total, part in ((budget.epsilon, spent.epsilon), (budget.delta, spent.delta))
    ]
    return plan, Budget(*rest)


# ------------------------------------------------------------------ the fixed domain
@functools.lru_cache(maxsize=16)
def bucket_edges(mantissa_bits: int) -> np.ndarray:
    """(B + 1,) float32 increasing edges: bucket i holds the values between edges i and i + 1.

    Magnitude bucket k >= 1 starts at 2**((k - 1) // 2**m - 126) (1 + ((k - 1) mod 2**m) / 2**m);
    bucket K = 254 2**m is the zero bucket (|x| < 2**-126); buckets K + k and K - k hold
    +-magnitude bucket k. The outermost edges are +-float32 max.
    """
    per = 2**mantissa_bits
    k = np.arange(1, _MAGNITUDE_BINADES * per + 2, dtype=np.float64)
    magnitudes = np.ldexp(1.0 + ((k - 1) % per) / per, ((k - 1) // per - 126).astype(int))
    magnitudes = np.minimum(magnitudes, _FLOAT32_MAX)
    edges = np.concatenate([-magnitudes[::-1], magnitudes]).astype(np.float32)
    edges.setflags(write=False)  # cached: shared by every caller
    return edges


def bucket_index(points: jax.Array, mantissa_bits: int) -> jax.Array:
    """int32 bucket in [0, B) of every float32 bit pattern (exact; finite values in their bucket).

    The non-finite patterns (exponent 255: +-inf, NaN) go to the outermost bucket of their sign,
    as the engine clips a value to the bounds. They are refused where the data are concrete, not
    under jit or vmap; left past the outermost bucket, +inf fell into the *next dimension's* row of
    :func:`histogram` (NaN likewise, the last dimension's were dropped), so one record could move
    one count by two and the L2 sensitivity sqrt(d) of the Gaussian release no longer held.
    """
    bits = jax.lax.bitcast_convert_type(jnp.asarray(points, jnp.float32), jnp.int32)
    exponent = (bits >> 23) & 255
    top = (bits >> (23 - mantissa_bits)) & (2**mantissa_bits - 1)
    middle = _MAGNITUDE_BINADES * 2**mantissa_bits
    magnitude = jnp.where(exponent == 0, 0, (exponent - 1) * 2**mantissa_bits + top + 1)
    magnitude = jnp.minimum(magnitude, middle)  # exponent 255 (inf, NaN): the outermost bucket
    return jnp.where(bits < 0, middle - magnitude, middle + magnitude)


def _block_histogram(rows: jax.Array, mask: jax.Array, mantissa_bits: int) -> jax.Array:
    """(d B,) int32 counts of one block of rows, dimension-major."""
    d = rows.shape[1]
    num_buckets = _num_buckets(mantissa_bits)
    cells = bucket_index(rows, mantissa_bits) + jnp.arange(d, dtype=jnp.int32) * num_buckets
    weights = jnp.broadcast_to(jnp.asarray(mask, jnp.int32)[:, None], rows.shape)
    return jax.ops.segment_sum(weights.ravel(), cells.ravel(), num_segments=d * num_buckets)


# Cells (rows x d) per block of the histogram's pass: each block's bucket indices and weights
# (1 MiB each at this size) stay in cache between the index arithmetic and the scatter-add, where
# one pass over all rows at once writes and reads back two (n, d) int32 arrays (on CPU the memory
# traffic, not the arithmetic, was the histogram's cost: benchmarks/private_bounds.py, cost).
_BLOCK_CELLS = 2**18


def histogram(points: jax.Array, mask: jax.Array, mantissa_bits: int) -> jax.Array:
    """(d, B) exact int32 counts of the unmasked points per dimension and bucket.

    Sensitivity: adding or removing one record changes one count by one in each row.
    One pass over the rows in blocks (:func:`dpm_jax._arrays.fold_row_blocks`: exact integer
    additions, each row counted once, so the counts do not depend on the blocks).
    """
    n, d = points.shape
    num_buckets = _num_buckets(mantissa_bits)

    def add_block(counts, fresh, rows, rows_mask):
        return counts + _block_histogram(rows, rows_mask & fresh, mantissa_bits)

    initial = jnp.zeros(d * num_buckets, jnp.int32)
    counts = fold_row_blocks(add_block, initial, max(1, _BLOCK_CELLS // max(d, 1)), points, jnp.asarray(mask, bool))
    return counts.reshape(d, num_buckets)


# ------------------------------------------------------------------ release and post-processing
def occupied_buckets(key: jax.Array, counts: jax.Array, plan: BoundsPlan) -> jax.Array:
    """(d, B) bool: noisy count ``count + Z >= T``, in exact integers (``key``: the bounds stream's)."""
    if isinstance(plan.noise, CountRelease):
        noisy = plan.noise.draw(key, counts)
    else:
        noisy = exact.add(exact.from_int32(counts), exact.from_int32(plan.noise.draw(key, counts.shape)))
    return ~exact.less(noisy, exact.from_int32(jnp.full(counts.shape, plan.threshold, jnp.int32)))


def bounds_from_buckets(occupied: jax.Array, plan: BoundsPlan) -> tuple[jax.Array, jax.Array]:
    """(lower, upper) (d,) float32 from the occupied buckets (post-processing; NaN where none is)."""
    num_buckets = occupied.shape[-1]
    first = jnp.argmax(occupied, axis=-1)
    last = num_buckets - 1 - jnp.argmax(occupied[..., ::-1], axis=-1)
    edges = jnp.asarray(bucket_edges(plan.mantissa_bits))
    lower, upper = edges[first], edges[last + 1]
    widen = jnp.float32(plan.widen)
    lower = jnp.maximum(jnp.where(lower < 0, lower * widen, lower / widen), -_FLOAT32_MAX)
    upper = jnp.minimum(jnp.where(upper > 0, upper * widen, upper / widen), _FLOAT32_MAX)
    lower = jnp.where((lower > 0) & (lower <= upper / 2), 0.0, lower)
    upper = jnp.where((upper < 0) & (upper >= lower / 2), 0.0, upper)
    # Only the zero bucket occupied (a constant 0 column): a range the engine's float32 arithmetic
    # can scale by (dpm_jax.api refuses ranges below 2**-100), centred where it was.
    half = jnp.maximum((upper - lower) / 2, jnp.float32(_MIN_HALF_WIDTH))
    middle = (lower + upper) / 2
    lower, upper = jnp.minimum(lower, middle - half), jnp.maximum(upper, middle + half)
    found = jnp.any(occupied, axis=-1)
    return jnp.where(found, lower, jnp.nan), jnp.where(found, upper, jnp.nan)


@functools.partial(jax.jit, static_argnames=("plan",))
def bounds_from_counts(key: jax.Array, counts: jax.Array, plan: BoundsPlan) -> tuple[jax.Array, jax.Array]:
    """(lower, upper) from the exact (d, B) histogram: the release and its post-processing
    (``key``: the caller's; the noise comes from its "bounds" stream)."""
    return bounds_from_buckets(occupied_buckets(keys.derive_key(key, keys.BOUNDS), counts, plan), plan)


@functools.partial(jax.jit, static_argnames=("plan",))
def estimate_bounds(key: jax.Array, points: jax.Array, mask: jax.Array, plan: BoundsPlan):
    """(lower, upper) of ``plan`` for (n, d) float32 ``points``: one pass over the data; jit/vmap-able."""
    return bounds_from_counts(key, histogram(points, mask, plan.mantissa_bits), plan)


def check_found(lower, upper, plan: BoundsPlan) -> None:
    """A ValueError when a dimension found no bounds (concrete values only; traced ones pass)."""
    if isinstance(lower, jax.core.Tracer):
        return
    missing = np.flatnonzero(np.isnan(np.asarray(lower)))
    if missing.size:
        raise ValueError(
            f"private bounds: in dimension(s) {missing.tolist()} no bucket reached the noisy-count "
            f"threshold {plan.threshold}: too few points for this budget. Give public bounds, more "
            "points, or a larger share of epsilon (PrivateBounds(share=...))"
        )


def with_bounds_entry(result, plan: BoundsPlan, budget: Budget):
    """``result`` with the bounds release's line first in each of its ledgers.

    ``result`` is the result of any algorithm run on the rest of the budget: it states its own
    way of prepending the line (``with_bounds_release(plan)``: :class:`dpm_jax.ClusterResult`,
    :class:`dpm_jax.SynthResult`, :class:`dpm_jax.KMeansResult`) and its ``ledgers``
    (((depth, ledger), ...)). Raises an AssertionError if a ledger would then state more than
    ``budget`` (math.fsum).
    """
    result = result.with_bounds_release(plan)
    for _, ledger in result.ledgers:
        if ledger.total_epsilon > budget.epsilon or ledger.total_delta > budget.delta:
            raise AssertionError(f"the ledger {ledger!r} exceeds the budget {budget}")
    return result


def run_with_private_bounds(
    key: jax.Array,
    points: jax.Array,
    mask: jax.Array,
    budget: Budget,
    bounds,
    prepare: Callable[[Budget], Callable],
    default: PrivateBounds = PrivateBounds(),
):
    """``prepare(rest)((lower, upper))``: the algorithm on private bounds estimated with their share of ``budget``.

    The entry point of ``bounds="private"`` for every algorithm (:func:`dpm_jax.cluster`,
    :func:`dpm_jax.synthesize`, :func:`dpm_jax.kmeans`), called with the validated (n, d)
    float32 ``points`` and their (n,) ``mask``. ``prepare(rest)`` validates and plans the run
    on the rest of the budget, raising before any statistic of the data is computed, and
    returns the run as a function of the bounds (it must not charge the accountant: the
    caller's entry point has charged the whole budget once, :mod:`dpm_jax.entry`). Then the
    bounds are estimated with ``split_for_bounds``'s plan (stream "bounds" of ``key``;
    sensitivity and cost: :func:`plan_bounds`), the run sees them, and the bounds line comes
    first in its ledger. Basic composition: the bounds line plus the run's ledger add up to at
    most ``budget`` (``split_for_bounds``); the run reads the data only through its own
    releases and the released bounds, which are DP. ``default``: what the word "private" asks
    for in this algorithm (:data:`SYNTHESIS_DEFAULT` for the synthesis).
    """
    plan, rest = split_for_bounds(budget, as_request(bounds, default), points.shape[1])
    run = prepare(rest)
    lower, upper = estimate_bounds(key, points, mask, plan)
    check_found(lower, upper, plan)
    return with_bounds_entry(run((lower, upper)), plan, budget)
