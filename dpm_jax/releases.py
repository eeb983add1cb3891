"""Releases: a DP measurement and its privacy map, side by side.

Every differentially private output of dpm_jax is made by one *release*: a NamedTuple
that holds the mechanism's public parameters, draws its noise from its own key stream
(:func:`dpm_jax.keys.derive_key`), and states its ledger line from those same
parameters (:meth:`entry`). The epsilon a release draws with is, by construction, the
epsilon its line states -- the pattern of OpenDP's measurements, whose privacy map is
built with the measurement. An algorithm's allocation returns its releases; its
ledger is ``ledger_of(releases)``.

Generic releases, usable by every algorithm (neighbours differ by adding or removing
one record):

* :class:`CountRelease` -- discrete Laplace on integer counts of disjoint sets, or on
  a vector of counts with L1 sensitivity ``sensitivity`` (each record changes at most
  that many counts by one each).
* :class:`SelectionRelease` -- the exact exponential mechanism on integer scores of
  sensitivity ``sensitivity`` over at most ``num_candidates`` candidates per row.
* :class:`GaussianRelease` -- discrete Gaussian noise on an integer vector of L2
  sensitivity ``l2_sensitivity``, calibrated through zCDP.
* :class:`ComposedSelectionRelease` -- ``selections`` adaptive runs of the exact
  exponential mechanism, composed through zCDP (bounded range) into one ledger line.

An algorithm's own release types (e.g. :class:`dpm_jax.synth.threshold.ThresholdRelease`,
:class:`dpm_jax.averaging.LeafSumsRelease`) live with the algorithm and state their lines
with :func:`ledger_line`.

:func:`split_budget` divides a budget into parts that add up to no more than it in
float64 (exact sum, ``math.fsum``): the ledger never states more than the user gave.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple, Protocol, Sequence

import jax
import numpy as np

from dpm_jax.exact import Int
from dpm_jax.ledger import Ledger, LedgerEntry
from dpm_jax.mechanisms import (
    EM_EPSILON_MARGIN,
    count_noise,
    add_count_noise,
    count_sampler_tv,
    cdp_delta,
    discrete_gaussian_multiplier,
    discrete_gaussian_noise,
    discrete_gaussian_table,
    em_sampler_tv,
    exponential_mechanism,
    tv_delta,
)

__all__ = [
    "CountRelease",
    "SelectionRelease",
    "GaussianRelease",
    "ComposedSelectionRelease",
    "ledger_line",
    "ledger_of",
    "proportional_parts",
    "split_budget",
    "at_most",
]


class Release(Protocol):
    """What every release provides: a name, an epsilon, a key stream, a sampler delta, and its ledger line.

    A release that draws for some rows of its stream's draw, or at one level, also has
    ``rows`` and ``level`` fields (:func:`ledger_line` reads them when present).
    """

    name: str
    epsilon: float
    stream: str
    sampler_delta: float

    def entry(self) -> LedgerEntry: ...


def key_path(stream: str, rows: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """A release's key path: its stream, then which rows of the stream's draw it uses (if not all)."""
    if rows is None:
        return (stream,)
    return (stream, rows) if isinstance(rows, str) else (stream, *rows)


def ledger_line(
    release: Release,
    mechanism: str,
    delta: float,
    sensitivity: float,
    rule: str,
    noise_scale: float | None,
    sampler_epsilon: float = 0.0,
) -> LedgerEntry:
    """The ledger line of ``release``: its own name, level, epsilon, key path and sampler delta,
    with the terms of its mechanism (what ``entry()`` returns)."""
    return LedgerEntry(
        release.name,
        mechanism,
        getattr(release, "level", None),
        release.epsilon,
        delta,
        float(sensitivity),
        rule,
        noise_scale,
        key_path(release.stream, getattr(release, "rows", None)),
        sampler_epsilon=sampler_epsilon,
        sampler_delta=release.sampler_delta,
    )


def ledger_of(releases: Sequence[Release]) -> Ledger:
    """The ledger of a run: the lines of its releases, in the order they run."""
    return Ledger(r.entry() for r in releases)


_ROUNDING_SLACK = 64  # ulps of the total: more than float rounding of the parts can need


def at_most(total: float, parts: Sequence[float], last: float) -> float:
    """``last``, or the largest float below it whose *exact* sum with ``parts`` is at most ``total``.

    Exact (rational) sums, not rounded ones: ``math.fsum`` can round a sum a fraction of an
    ulp above ``total`` down onto it, and a line added later (the depth's count) would then
    lift the ledger one ulp above the budget. With the exact sum at most ``total``, every
    ledger that adds more lines whose exact sum is at most their own budget stays within it.
    Only rounding is absorbed: an excess above ``_ROUNDING_SLACK`` ulps of ``total`` is a bug
    in the caller's arithmetic (AssertionError). ValueError when ``last`` cannot absorb it
    (it would drop to 0 or below).
    """
    room = Fraction(total) - sum(map(Fraction, parts), Fraction(0))
    if Fraction(last) <= room:
        return last
    if Fraction(last) - room > _ROUNDING_SLACK * Fraction(math.ulp(total)):
        raise AssertionError(f"parts {parts} + {last} exceed the total {total} by more than rounding")
    lowered = float(room)  # the nearest float; lower it by one ulp if that is above the room
    lowered = lowered if Fraction(lowered) <= room else math.nextafter(lowered, -math.inf)
    if not lowered > 0:
        raise ValueError(
            f"the last part {last!r} of the total {total!r} is too small to absorb the rounding of the "
            "others: raise its share"
        )
    return lowered


def proportional_parts(total: float, shares: Sequence[float]) -> tuple[float, ...]:
    """``total`` split in proportion to ``shares`` (>= 0, not all 0), the last part taking the
    float remainder: the parts' *rounded* sum (``math.fsum``) is ``total``, their exact sum may
    exceed it by a fraction of an ulp (:func:`split_budget` when it must not)."""
    if not shares or any(not (s >= 0 and math.isfinite(s)) for s in shares) or math.fsum(shares) <= 0:
        raise ValueError(f"shares must be finite, >= 0 and not all 0, got {tuple(shares)}")
    weight = math.fsum(shares)
    parts = [total * (s / weight) for s in shares[:-1]]
    return (*parts, max(0.0, total - math.fsum(parts)))


def split_budget(total: float, shares: Sequence[float]) -> tuple[float, ...]:
    """:func:`proportional_parts`, the last part rounded down until the parts' exact sum is <= total."""
    *parts, last = proportional_parts(total, shares)
    return (*parts, at_most(total, parts, last))


class CountRelease(NamedTuple):
    """Discrete Laplace noise on integer counts: ``counts + Z``, P(Z = k) ∝ exp(-(epsilon / Δ) |k|).

    Privacy: a record changes the counts by at most ``sensitivity`` in L1 (Δ; 1 for the
    counts of disjoint sets, d for one histogram per dimension), so the release is
    (epsilon, 0)-DP (Ghosh, Roughgarden and Sundararajan 2009) for the ideal noise.
    The exact sampler is within total variation :func:`count_sampler_tv` per draw of
    it; over ``draws_per_record`` draws a record can influence (Δ for per-dimension
    histograms) the ledger charges ``sampler_delta`` = draws tv (1 + e^epsilon).
    ``offset_delta`` is any extra delta the caller spends through this release (e.g.
    the shifted count's P[n~ - lambda > |S|], Equation 1 of the DPM paper), ``offset``
    the lambda it pays for (a public number the consumer subtracts; 0: none).
    """

    name: str
    epsilon: float
    stream: str
    sensitivity: int = 1
    rows: str | tuple[str, ...] | None = None  # which part of the stream's draw (key path detail)
    level: int | None = None
    offset_delta: float = 0.0
    rule: str = "count of disjoint sets"
    offset: float = 0.0

    @property
    def noise_epsilon(self) -> float:
        """The discrete Laplace parameter: epsilon / Δ."""
        return self.epsilon / self.sensitivity

    @property
    def sampler_delta(self) -> float:
        draws = self.sensitivity
        return tv_delta(draws * count_sampler_tv(self.noise_epsilon), self.epsilon)

    def draw(self, key: jax.Array, true_counts: jax.Array) -> Int:
        """``true_counts + Z`` in exact integers (``key`` is this release's stream key)."""
        counts = jax.numpy.asarray(true_counts).astype(jax.numpy.int32)
        noise = count_noise(key, np.full(counts.shape, self.noise_epsilon))
        return add_count_noise(counts, noise)

    def noise(self, key: jax.Array, shape: tuple[int, ...]) -> Int:
        """The noise alone, ``shape`` draws (for counts that are known only later in the program)."""
        return count_noise(key, np.full(shape, self.noise_epsilon))

    def entry(self) -> LedgerEntry:
        delta = self.offset_delta + self.sampler_delta
        return ledger_line(
            self, "discrete_laplace", delta, self.sensitivity, f"L1: {self.rule}", self.sensitivity / self.epsilon
        )


class SelectionRelease(NamedTuple):
    """The exact exponential mechanism: one candidate per row, P(i) ∝ exp(epsilon G_i / (2 Δ)).

    Privacy: (epsilon, (1 + e^epsilon) em_sampler_tv(M))-DP per row when every integer
    score changes by at most ``sensitivity`` (Δ) between neighbours (McSherry and Talwar
    2007; the sampler's errors in :mod:`dpm_jax.mechanisms`); rows over disjoint sets
    compose in parallel, rows over the same records must be separate releases. The
    sampler spends EM_EPSILON_MARGIN of epsilon (:func:`dpm_jax.mechanisms.em_exponent_scale`
    subtracts it), stated as the line's ``sampler_epsilon``.
    """

    name: str
    epsilon: float
    stream: str
    sensitivity: int
    num_candidates: int
    rows: str | tuple[str, ...] | None = None
    level: int | None = None
    rule: str = "integer score"

    @property
    def sampler_delta(self) -> float:
        return tv_delta(em_sampler_tv(self.num_candidates), self.epsilon)

    def check(self) -> None:
        """A ValueError when epsilon is below the exact sampler's margin."""
        if not self.epsilon > 2 * EM_EPSILON_MARGIN:
            raise ValueError(
                f"{self.name}: epsilon {self.epsilon:.3g} is too small for the exact exponential "
                f"mechanism (margin {EM_EPSILON_MARGIN:.2g}); raise epsilon"
            )

    def select(self, key: jax.Array, table, scores: Int, valid: jax.Array) -> jax.Array:
        """Indices of the selected candidates, one per row of ``scores`` (``table``: the EM weight table)."""
        return exponential_mechanism(key, table, scores, valid, self.epsilon, self.sensitivity)

    def entry(self) -> LedgerEntry:
        rule = f"{self.rule}; {self.num_candidates} candidates"
        scale = 2.0 * self.sensitivity / self.epsilon
        return ledger_line(self, "exponential", self.sampler_delta, self.sensitivity, rule, scale, EM_EPSILON_MARGIN)


class GaussianRelease(NamedTuple):
    """Discrete Gaussian noise N_Z(0, sigma^2) on each coordinate of an integer vector.

    Privacy: L2 sensitivity Δ2 and sigma = multiplier Δ2 give (Δ2^2 / (2 sigma^2))-zCDP
    (Canonne, Kamath and Steinke 2020, Theorem 14), converted to (epsilon, delta - sampler)
    -DP; the sampler's total variation over the ``dimension`` coordinates a record moves
    is charged as ``sampler_delta``. Build it with :meth:`calibrated`.
    """

    name: str
    epsilon: float
    delta: float
    stream: str
    l2_sensitivity: float
    sigma: float
    sampler_delta: float
    rows: str | tuple[str, ...] | None = None
    level: int | None = None
    rule: str = "L2 of an integer vector"

    @classmethod
    def calibrated(
        cls, name: str, epsilon: float, delta: float, stream: str, l2_sensitivity: float, dimension: int, **kw
    ) -> "GaussianRelease":
        """The smallest sigma whose mechanism, sampler included, is (epsilon, delta)-DP."""
        sampler_delta = 0.0
        for _ in range(10):
            if sampler_delta > 0.1 * delta:
                raise ValueError(f"{name}: the sampler would need {sampler_delta:.3g} of delta {delta:.3g}")
            sigma = max(1.0, discrete_gaussian_multiplier(epsilon, delta - sampler_delta) * l2_sensitivity)
            needed = tv_delta(dimension * discrete_gaussian_table(sigma).tv, epsilon) * (1.0 + 1e-6)
            if needed <= sampler_delta:
                return cls(name, epsilon, delta, stream, float(l2_sensitivity), sigma, sampler_delta, **kw)
            sampler_delta = needed
        raise ValueError(f"{name}: delta {delta:.3g} cannot pay for its sampler")

    def draw(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """int32 noise of ``shape`` (add it to the exact integer values in exact arithmetic)."""
        table = discrete_gaussian_table(self.sigma)
        high, low = jax.numpy.asarray(table.thresholds_high), jax.numpy.asarray(table.thresholds_low)
        return discrete_gaussian_noise(key, high, low, table.support_min, shape)

    def entry(self) -> LedgerEntry:
        return ledger_line(self, "discrete_gaussian", self.delta, self.l2_sensitivity, self.rule, self.sigma)


class ComposedSelectionRelease(NamedTuple):
    """Adaptive runs of the exact exponential mechanism in groups: ``selections[g]`` runs at ``epsilon_each[g]``.

    Privacy: one run at epsilon_g on integer scores of sensitivity Δ is, for the ideal
    mechanism, epsilon_g-bounded-range (Durfee and Rogers 2019); the exact sampler's
    probabilities are within e^(+-gamma) of the ideal ones (:mod:`dpm_jax.mechanisms`,
    gamma = EM_EPSILON_MARGIN / 2), which widens the range of the privacy loss by at
    most 2 EM_EPSILON_MARGIN, so each run is b_g-bounded-range with b_g = epsilon_g +
    2 EM_EPSILON_MARGIN, hence (b_g^2 / 8)-zCDP (Cesar and Rogers 2021, Lemma 3.2). zCDP
    adds over adaptive runs: rho = sum_g selections_g b_g^2 / 8, which is (epsilon,
    cdp_delta(rho, epsilon))-DP (Canonne, Kamath and Steinke 2020). The sampler's total
    variation, per run em_sampler_tv(M), adds over the runs and costs
    sum selections tv (1 + e^epsilon) of delta. Build it with :meth:`calibrated`;
    ``selections`` are the most runs the algorithm may make (fewer runs spend less).
    """

    name: str
    epsilon: float
    delta: float
    stream: str
    sensitivity: int
    num_candidates: int
    selections: tuple[int, ...]
    epsilon_each: tuple[float, ...]
    sampler_delta: float
    rule: str = "integer score"

    @classmethod
    def calibrated(
        cls,
        name: str,
        epsilon: float,
        delta: float,
        stream: str,
        sensitivity: int,
        num_candidates: int,
        selections: tuple[int, ...],
        ratios: tuple[float, ...],
        **kw,
    ) -> "ComposedSelectionRelease":
        """The largest epsilons, in proportion to ``ratios``, whose composition is (epsilon, delta)-DP."""
        runs = sum(selections)
        sampler_delta = runs * em_sampler_tv(num_candidates) * (1.0 + math.exp(epsilon)) * (1.0 + 1e-9)
        if not sampler_delta < 0.1 * delta:
            raise ValueError(f"{name}: the sampler would need {sampler_delta:.3g} of delta {delta:.3g}")
        low, high = 0.0, 8.0 * epsilon / min(ratios)  # rho >= epsilon already exceeds any useful delta
        for _ in range(200):
            middle = 0.5 * (low + high)
            rho = _composed_rho(selections, tuple(middle * r for r in ratios))
            low, high = (middle, high) if cdp_delta(rho, epsilon) <= delta - sampler_delta else (low, middle)
        each = tuple(low * r for r in ratios)
        if not min(each) > 2 * EM_EPSILON_MARGIN:
            raise ValueError(
                f"{name}: ({epsilon:.3g}, {delta:.3g}) over {runs} selections leaves epsilon {min(each):.3g} "
                f"per selection, below the exact sampler's margin; raise the budget or lower k or the levels"
            )
        return cls(
            name, epsilon, delta, stream, sensitivity, num_candidates, tuple(selections), each, sampler_delta, **kw
        )

    @property
    def rho(self) -> float:
        """The zCDP parameter of the composition."""
        return _composed_rho(self.selections, self.epsilon_each)

    def select(self, group: int, key: jax.Array, table, scores: Int, valid: jax.Array) -> jax.Array:
        """One run of ``group``: indices of the selected candidates, one per row of ``scores``."""
        return exponential_mechanism(key, table, scores, valid, self.epsilon_each[group], self.sensitivity)

    def entry(self) -> LedgerEntry:
        runs = " + ".join(f"{s} at {e:.4g}" for s, e in zip(self.selections, self.epsilon_each))
        rule = f"{self.rule}; selections {runs}; <= {self.num_candidates} candidates"
        scale = 2.0 * self.sensitivity / min(self.epsilon_each)
        return ledger_line(self, "exponential_zcdp", self.delta, self.sensitivity, rule, scale)


def _composed_rho(selections: Sequence[int], epsilons: Sequence[float]) -> float:
    return math.fsum(s * (e + 2 * EM_EPSILON_MARGIN) ** 2 / 8.0 for s, e in zip(selections, epsilons))
