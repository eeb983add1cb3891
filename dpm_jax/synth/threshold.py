"""The release of Algorithm 1 (lines 9-12) of "Differentially Private Synthetic Data Using
KD-Trees": thresholded discrete Laplace counts of all cells of a partition, the empty cells
drawn implicitly (Algorithm 5, :mod:`dpm_jax.synth.implicit`)."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from dpm_jax import exact
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import add_count_noise, count_noise, count_sampler_tv
from dpm_jax.releases import ledger_line
from dpm_jax.synth import implicit

__all__ = ["ThresholdRelease"]

MIN_TIER = 512  # the smallest capacity worth a branch of its own (drawing 512 gaps costs little)


class ThresholdDraw(NamedTuple):
    """One draw of a :class:`ThresholdRelease`: the non-empty cells' rows, then the empty cells'."""

    kept: jax.Array  # (cells,) bool: the non-empty cells whose noisy count reaches the threshold
    weights: jax.Array  # (cells,) int32: their noisy counts (clipped to [0, 2**31 - 1])
    positions: jax.Array  # (size,) uint32: ranks of passing empty cells among num_empty, public order
    passed: jax.Array  # (size,) bool: the real ones (rank below num_empty)
    ghost_weights: jax.Array  # (size,) int32: their noisy counts t + G


def _padded(capacity: int, draw: ThresholdDraw) -> ThresholdDraw:
    """The empty cells' rows padded to ``capacity`` with positions that never pass."""
    pad = capacity - draw.positions.shape[0]
    return draw._replace(
        positions=jax.numpy.concatenate([draw.positions, jax.numpy.full(pad, implicit.SATURATED)]),
        passed=jax.numpy.concatenate([draw.passed, jax.numpy.zeros(pad, bool)]),
        ghost_weights=jax.numpy.concatenate([draw.ghost_weights, jax.numpy.zeros(pad, draw.ghost_weights.dtype)]),
    )


class ThresholdRelease(NamedTuple):
    """Thresholded discrete Laplace counts of all cells of a partition, empty cells implicit.

    Ideal mechanism (Algorithm 1 of "Differentially Private Synthetic Data Using KD-Trees",
    lines 9-12, with Algorithm 4 for the empty cells): every cell gets count + Z, Z discrete
    Laplace with P(Z = k) ∝ e^(-epsilon |k|), and the cells with count + Z >= t are released
    with their noisy counts. A record is in one cell (disjoint cells, add/remove-one): L1
    sensitivity 1, (epsilon, 0)-DP; thresholding is post-processing. The non-empty cells
    are drawn explicitly; the empty ones by :mod:`dpm_jax.synth.implicit` (Lemma 9),
    whose distance from the explicit draw is charged with the non-empty cells' sampler
    error as delta = tv (1 + e^epsilon).

    ``thresholds`` and ``max_empty`` list public candidates (the run picks one, ``choice``,
    from an earlier release); the ledger line holds for the worst of them. ``max_empty``
    bounds the number of empty cells for any data set of at most the stated n.
    """

    name: str
    epsilon: float
    stream: str
    thresholds: tuple[int, ...]
    max_empty: tuple[int, ...]
    rows: str | None = None
    level: int | None = None
    rule: str = "one count per cell of a partition"

    @property
    def capacity(self) -> int:
        """Static number of implicit draws: enough for every candidate (truncation <= 2**-64)."""
        return max(implicit.ghost_capacity(k, implicit.pass_probability(self.epsilon, t)) for t, k in self._pairs())

    @property
    def tiers(self) -> tuple[tuple[int, ...], np.ndarray]:
        """Smaller static capacities for runs that can have fewer empty cells, and what each serves.

        Returns (capacities, limits): capacities ascending, ``capacity`` last, each an eighth of
        the next while at least :data:`MIN_TIER`; limits (tiers, candidates) int64, the largest
        number of empty cells K <= max_empty for which tier i's part of the sampler error,
        capacity_i draws' :func:`~dpm_jax.synth.implicit.geometric_tv` plus its truncation bound
        P[Binomial(K, p) > capacity_i], is at most the full capacity's at max_empty
        (:func:`~dpm_jax.synth.implicit.ghost_tv`), which the ledger charges (:attr:`sampler_delta`):
        so every tier is covered by the same line. (A smaller tier truncates more often than the
        full capacity would on the same data; the draws it does not make pay for that.) Limits
        never shrink from one tier to the next; the last tier serves max_empty itself.
        """
        return _tiers(self.epsilon, self.thresholds, self.max_empty, self.capacity)

    def _pairs(self):
        return zip(self.thresholds, self.max_empty)

    @property
    def sampler_delta(self) -> float:
        capacity = self.capacity
        weight_cut = math.exp(-self.epsilon * 2.0**implicit.WEIGHT_BITS)  # G >= 2**30, clamped
        ghost = max(
            implicit.ghost_tv(k, implicit.pass_probability(self.epsilon, t), capacity) for t, k in self._pairs()
        )
        tv = count_sampler_tv(self.epsilon) + ghost + capacity * weight_cut
        return tv * (1.0 + math.exp(self.epsilon))

    def check(self) -> None:
        """A ValueError for thresholds or an epsilon the exact samplers cannot serve."""
        if not self.epsilon >= 1e-7:
            raise ValueError(f"{self.name}: epsilon {self.epsilon:.3g} is below 1e-7, the conditioned counts' range")
        if any(not 1 <= t < 2**30 for t in self.thresholds):
            raise ValueError(f"{self.name}: thresholds must be in [1, 2**30), got {self.thresholds}")

    def tables(self):
        """Device tables: skip thresholds per candidate (c, 32) and the conditioned count's (31,)."""
        skips = [implicit.geometric_table(self.epsilon, t, implicit.SKIP_BITS) for t in self.thresholds]
        weight = implicit.geometric_table(self.epsilon, None, implicit.WEIGHT_BITS)
        return (
            np.stack([s.high for s in skips]),
            np.stack([s.low for s in skips]),
            weight.high,
            weight.low,
        )

    def draw(
        self,
        key: jax.Array,
        counts: jax.Array,
        num_empty: jax.Array,
        choice: jax.Array,
        empty_bound: jax.Array | None = None,
        finish: Callable[[ThresholdDraw], Any] | None = None,
    ):
        """Noisy counts of the non-empty cells and the implicit empty ones: a :class:`ThresholdDraw`
        (``finish`` applied to it when given).

        ``empty_bound`` (optional, int32): a bound on ``num_empty`` that is a function of
        *released* values (the KD-tree's: 2**h plus its number of splits). The empty cells are
        then drawn into the smallest of :attr:`tiers` that serves it (a ``lax.switch``: the run
        time follows released values only). Each tier draws the same law (i.i.d. gaps and
        counts), and its sampler error (fewer draws, more truncation) stays within the full
        capacity's, so the ledger line is unchanged; only the bits a key gives differ between
        tiers. A saturated bound takes the last tier. Under ``jax.vmap`` every tier runs.

        ``finish`` (post-processing of the draw into arrays of one static shape) runs inside the
        tier's branch, on the tier's ``capacity_i`` empty-cell rows, so the work after the draw is
        sized by the tier too. Without it the draw is padded to :attr:`capacity` with positions
        that never pass.
        """
        skip_high, skip_low, weight_high, weight_low = (jax.numpy.asarray(a) for a in self.tables())
        threshold = jax.numpy.asarray(np.asarray(self.thresholds, np.int32))[choice]
        noisy = add_count_noise(counts, count_noise(jax.random.fold_in(key, 0), np.full(counts.shape, self.epsilon)))
        kept = ~exact.less(noisy, exact.from_int32(jax.numpy.full(counts.shape, threshold)))
        weights = exact.clip_to_int32(noisy, 0, 2**31 - 1)
        finish = finish or functools.partial(_padded, self.capacity)
        capacities, limits = self.tiers if empty_bound is not None else ((self.capacity,), None)

        def tier_draw(size: int):
            def run():
                positions = implicit.skip_positions(
                    jax.random.fold_in(key, 1), skip_high[choice], skip_low[choice], size
                )
                extra, _ = implicit.draw_geometric(jax.random.fold_in(key, 2), weight_high, weight_low, (size,))
                passed = (positions < num_empty.astype(jax.numpy.uint32)) & (positions < implicit.SATURATED)
                return finish(ThresholdDraw(kept, weights, positions, passed, threshold + extra))

            return run

        if len(capacities) == 1:
            return tier_draw(self.capacity)()
        # the first tier whose limit holds the (released) bound; limits grow with the tier
        table = jax.numpy.asarray(np.minimum(limits[:-1], 2**31 - 1).astype(np.int32))
        tier = jax.numpy.sum(table[:, choice] < empty_bound, dtype=jax.numpy.int32)
        tier = jax.numpy.where(empty_bound >= 2**31 - 1, len(capacities) - 1, tier)  # saturated: unknown
        return jax.lax.switch(tier, [tier_draw(size) for size in capacities])

    def entry(self) -> LedgerEntry:
        rule = f"L1: {self.rule}; thresholds {self.thresholds}"
        return ledger_line(self, "discrete_laplace_threshold", self.sampler_delta, 1, rule, 1.0 / self.epsilon)


def _largest_served(max_empty: int, p: float, size: int, allowed: float) -> int:
    """The largest K <= max_empty with truncation_bound(K, p, size) <= allowed (it grows with K)."""
    low, high = 0, max_empty
    while low < high:
        middle = (low + high + 1) // 2
        if implicit.truncation_bound(middle, p, size) <= allowed:
            low = middle
        else:
            high = middle - 1
    return low


def _tiers(epsilon: float, thresholds, max_empty, capacity: int) -> tuple[tuple[int, ...], np.ndarray]:
    """:attr:`ThresholdRelease.tiers` (public arithmetic on the plan's numbers)."""
    sizes = [capacity]
    while sizes[-1] // 8 >= MIN_TIER:
        sizes.append(sizes[-1] // 8)
    sizes.reverse()
    pairs = [(implicit.pass_probability(epsilon, t), k) for t, k in zip(thresholds, max_empty)]
    per_draw = implicit.geometric_tv(implicit.SKIP_BITS) + implicit.geometric_tv(implicit.WEIGHT_BITS)

    def allowed(k: int, p: float, size: int) -> float:
        # ghost_tv(k, p, capacity) - size * per_draw, a hair lower so that rounding cannot exceed it
        return (implicit.truncation_bound(k, p, capacity) + (capacity - size) * per_draw) * (1.0 - 1e-9)

    limits = np.array(
        [[_largest_served(k, p, size, allowed(k, p, size)) for p, k in pairs] for size in sizes], np.int64
    )
    limits[-1] = [k for _, k in pairs]
    limits = np.minimum.accumulate(limits[::-1], axis=0)[::-1]  # never shrinking (it only lowers limits)
    return tuple(sizes), limits
