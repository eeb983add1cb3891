"""The release of Algorithm 1 (lines 9-12) of "Differentially Private Synthetic Data Using
KD-Trees": thresholded discrete Laplace counts of all cells of a partition, the empty cells
drawn implicitly (Algorithm 5, :mod:`dpm_jax.synth.implicit`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np

from dpm_jax import exact
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import add_count_noise, count_noise, count_sampler_tv
from dpm_jax.releases import ledger_line
from dpm_jax.synth import implicit

__all__ = ["ThresholdRelease"]


class ThresholdDraw(NamedTuple):
    """One draw of a :class:`ThresholdRelease`: the non-empty cells' rows, then the empty cells'."""

    kept: jax.Array  # (cells,) bool: the non-empty cells whose noisy count reaches the threshold
    weights: jax.Array  # (cells,) int32: their noisy counts (clipped to [0, 2**31 - 1])
    positions: jax.Array  # (capacity,) uint32: ranks of passing empty cells among num_empty, public order
    passed: jax.Array  # (capacity,) bool: the real ones (rank below num_empty)
    ghost_weights: jax.Array  # (capacity,) int32: their noisy counts t + G


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
        # the implicit draw's positions are 31-bit (implicit.SATURATED): more empty cells than that
        # could not all be drawn, and the draw would no longer be the explicit one's law
        if max(self.max_empty) >= int(implicit.SATURATED):
            raise ValueError(
                f"{self.name}: up to {max(self.max_empty):.3g} empty cells (2**h + max_rows x decisions), more "
                "than the implicit draw's 2**31 - 1 positions: state a smaller SynthConfig.max_rows or fewer decisions"
            )

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

    def draw(self, key: jax.Array, counts: jax.Array, num_empty: jax.Array, choice: jax.Array) -> ThresholdDraw:
        """Noisy counts of the non-empty cells and :attr:`capacity` implicit empty ones (the
        positions past ``num_empty`` never pass), for the ``choice``-th candidate threshold."""
        skip_high, skip_low, weight_high, weight_low = (jax.numpy.asarray(a) for a in self.tables())
        threshold = jax.numpy.asarray(np.asarray(self.thresholds, np.int32))[choice]
        noisy = add_count_noise(counts, count_noise(jax.random.fold_in(key, 0), np.full(counts.shape, self.epsilon)))
        kept = ~exact.less(noisy, exact.from_int32(jax.numpy.full(counts.shape, threshold)))
        weights = exact.clip_to_int32(noisy, 0, 2**31 - 1)
        positions = implicit.skip_positions(
            jax.random.fold_in(key, 1), skip_high[choice], skip_low[choice], self.capacity
        )
        extra, _ = implicit.draw_geometric(jax.random.fold_in(key, 2), weight_high, weight_low, (self.capacity,))
        passed = (positions < num_empty.astype(jax.numpy.uint32)) & (positions < implicit.SATURATED)
        return ThresholdDraw(kept, weights, positions, passed, threshold + extra)

    def entry(self) -> LedgerEntry:
        rule = f"L1: {self.rule}; thresholds {self.thresholds}"
        return ledger_line(self, "discrete_laplace_threshold", self.sampler_delta, 1, rule, 1.0 / self.epsilon)
