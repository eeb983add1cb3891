"""PrivTree's split decisions on integer counts with discrete Laplace noise.

Paper: Zhang, Xiao, Xie, "PrivTree: A Differentially Private Algorithm for Hierarchical
Decompositions" (SIGMOD 2016), Algorithm 2 and Theorem 1 (their Section 3.2): a node v of
depth i is split when its *biased* count

    b(v) = max(c(v) - i delta_b, theta - kappa)

plus noise reaches theta. The bias makes the counts of a root-to-leaf path fall by at least
delta_b per level, so the privacy loss of the path's decisions is a geometric series: no
per-depth split of epsilon, no depth limit beyond a public maximum. PrivTree clamps at
theta - delta_b (kappa = delta_b) and splits empty nodes too, with the clamped count.

What this module does differently (proof: docs/privacy.md, "PrivTree with discrete Laplace"):

* Arithmetic: integer counts, integer delta_b, kappa, theta, and discrete Laplace noise
  P(Z = k) ∝ r**|k|, r = e^-alpha (the exact sampler of :mod:`dpm_jax.mechanisms`); a node
  splits iff b(v) + Z >= theta. The continuous-Laplace constant (2 beta - 1) / (beta - 1)
  of Theorem 1 does not carry over as is; :func:`privacy_loss` is the discrete bound itself,
  the sum over k >= 0 of L(theta - kappa + k delta_b), L(x) = ln P[x + 1 + Z >= theta] /
  P[x + Z >= theta], computed in 50-digit decimals and rounded up.
* Empty nodes never split (the grid machinery of :mod:`dpm_jax.synth.kdtree` never
  enumerates them). That is not PrivTree's law; the mechanism is analysed as it is: a record
  alone in a cell changes that cell's split probability from 0 to at most P[Z >= kappa] =
  r**kappa / (1 + r) (theta = kappa + 1 makes a one-point cell's biased count theta - kappa at
  every depth), which is the delta of the tree. kappa is the smallest integer with that
  tail within the delta given to the tree, so kappa ~ ln(1 / delta) / alpha, far larger than
  PrivTree's delta_b = ln(beta) / alpha; the bias delta_b = ceil(kappa / m) crosses the
  clamp gap in m = ``gap_levels`` levels, and each of those m nodes costs alpha.
* The sampler: each draw is within total variation ``count_sampler_tv(alpha)`` of the ideal
  noise, and a record's path meets at most ``levels`` draws: delta += levels tv (1 + e^eps).
"""

from __future__ import annotations

import decimal
import math
from typing import NamedTuple

import jax
import numpy as np

from dpm_jax.exact import Int
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import count_noise, count_sampler_tv, tv_delta
from dpm_jax.releases import at_most, ledger_line

__all__ = ["PrivTreeRelease", "calibrate"]

_DIGITS = 50
_ROUND_UP = 1e-12  # relative: covers the float conversion of the decimal sum


def _loss_terms(alpha: float, kappa: int, bias: int):
    """The bound's terms L(theta - kappa + k bias), k = 0, 1, ..., and the tail after them (decimal)."""
    r = (-decimal.Decimal(alpha)).exp()
    terms = []
    k = 0
    while True:
        j = -kappa + k * bias  # x - theta
        if j <= -1:
            terms.append(decimal.Decimal(alpha))  # P[Z >= s] = r**s / (1 + r) for s >= 0: ratio 1 / r
        else:
            value = ((1 + r - r ** (j + 2)) / (1 + r - r ** (j + 1))).ln()
            terms.append(value)
            if r ** (j + 1) < decimal.Decimal(10) ** -40:
                # L(j') <= (1 - r) r**(j' + 1) (the denominator is >= 1): a geometric tail in k
                tail = (1 - r) * r ** (j + bias + 1) / (1 - r**bias)
                return terms, tail
        k += 1


def privacy_loss(alpha: float, kappa: int, bias: int) -> float:
    """An upper bound on the privacy loss of a path's split decisions (docs/privacy.md).

    The changed nodes of a path (those whose biased count moves when a record is added)
    have x = c(v) - i bias >= theta - kappa, falling by at least ``bias`` per level, and the
    log-ratio L(x) of their split probabilities is non-increasing in x; so the worst path
    puts them at theta - kappa + k bias, k = 0, 1, .... Rounded up.
    """
    if not (alpha > 0 and kappa >= 1 and bias >= 1):
        raise ValueError(f"need alpha > 0, kappa >= 1, bias >= 1; got {alpha}, {kappa}, {bias}")
    with decimal.localcontext() as context:
        context.prec = _DIGITS
        terms, tail = _loss_terms(alpha, kappa, bias)
        total = sum(terms, decimal.Decimal(0)) + tail
    return math.nextafter(float(total) * (1.0 + _ROUND_UP), math.inf)


def clamp_gap(alpha: float, delta: float) -> int:
    """kappa: the smallest integer >= 1 with P[Z >= kappa] = r**kappa / (1 + r) <= delta."""
    r = math.exp(-alpha)
    kappa = max(1, math.ceil(math.log(1.0 / (delta * (1.0 + r))) / alpha) - 2)
    while _tail(alpha, kappa) > delta:
        kappa += 1
    return kappa


def _tail(alpha: float, k: int) -> float:
    with decimal.localcontext() as context:
        context.prec = _DIGITS
        r = (-decimal.Decimal(alpha)).exp()
        return float(r**k / (1 + r)) * (1.0 + _ROUND_UP)


def split_probability(count, depth, alpha: float, kappa: int, bias: int, theta: int):
    """P[node splits] for integer ``count`` at decision ``depth`` (NumPy, float64): 0 for an
    empty node, else P[max(count - depth bias, theta - kappa) + Z >= theta], Z ~ DLap(alpha)."""
    r = math.exp(-alpha)
    s = theta - np.maximum(np.asarray(count) - np.asarray(depth) * bias, theta - kappa)  # Z >= s
    tail = np.where(s >= 0, r ** np.maximum(s, 0) / (1 + r), 1.0 - r ** np.maximum(1 - s, 0) / (1 + r))
    return np.where(np.asarray(count) > 0, tail, 0.0)


class PrivTreeRelease(NamedTuple):
    """PrivTree decisions: split iff max(c - i bias, theta - kappa) + Z >= theta, Z ~ DLap(alpha).

    Privacy (add/remove-one; docs/privacy.md): (epsilon, delta)-DP with epsilon =
    :func:`privacy_loss` (alpha, kappa, bias) and delta = P[Z >= kappa] (a record alone in a
    cell that never splits without it) + the sampler's ``levels`` tv (1 + e^epsilon).
    ``offset_delta`` is the delta charged beyond the sampler's (at least P[Z >= kappa]).
    """

    name: str
    epsilon: float
    stream: str
    alpha: float  # noise: P(Z = k) ∝ e^(-alpha |k|)
    kappa: int  # clamp gap
    bias: int  # delta_b per decision level
    levels: int  # decision levels (the public maximum depth below the forced ones)
    offset_delta: float = 0.0
    rows: str | None = "decisions"
    level: int | None = None

    @property
    def theta(self) -> int:
        """The split threshold: kappa + 1, so a one-point cell's biased count is theta - kappa."""
        return self.kappa + 1

    @property
    def sampler_delta(self) -> float:
        return tv_delta(self.levels * count_sampler_tv(self.alpha), self.epsilon)

    def noise(self, key: jax.Array, shape: tuple[int, ...]) -> Int:
        """Decision noise, one discrete Laplace draw per (level, cell slot)."""
        return count_noise(key, np.full(shape, self.alpha))

    def check(self) -> None:
        """A ValueError unless the stated epsilon and delta cover the bound (public numbers only)."""
        one_point = split_probability(1, np.arange(self.levels), self.alpha, self.kappa, self.bias, self.theta)
        conditions = {
            "the privacy loss bound exceeds epsilon": privacy_loss(self.alpha, self.kappa, self.bias) <= self.epsilon,
            "the clamp's tail exceeds delta": _tail(self.alpha, self.kappa) <= self.offset_delta,
            "a record alone in a cell splits too often": one_point.max() <= self.offset_delta,  # the tree's delta
            "the remove side's leaf exceeds epsilon": -math.log1p(-_tail(self.alpha, self.kappa)) <= self.epsilon,
            "the biased counts overflow int32": (self.theta + self.levels * self.bias) < 2**30,
        }
        failed = [name for name, holds in conditions.items() if not holds]
        if failed:
            prefix = f"{self.name}: " if self.name else ""
            raise ValueError(
                f"{prefix}PrivTree cannot be calibrated at epsilon {self.epsilon:.3g}: {'; '.join(failed)}"
            )

    def entry(self) -> LedgerEntry:
        rule = (
            f"L1: one decision per level of a path, biased count max(c - i {self.bias}, {self.theta - self.kappa})"
            f" against {self.theta} (PrivTree, discrete)"
        )
        return ledger_line(
            self, "privtree_discrete_laplace", self.offset_delta + self.sampler_delta, 1, rule, 1.0 / self.alpha
        )


def calibrate(name: str, stream: str, epsilon: float, delta: float, levels: int, gap_levels: int) -> PrivTreeRelease:
    """The release with the largest alpha whose bound is at most ``epsilon``, within ``delta`` in all.

    Bisection on alpha: kappa = :func:`clamp_gap` (alpha, delta - sampler), bias =
    ceil(kappa / gap_levels); the bound :func:`privacy_loss` grows with alpha (up to the
    integer roundings, which the final check covers).
    """
    floor = epsilon / (gap_levels + 64)  # no smaller alpha is ever tried: its sampler tv is the largest
    sampler = tv_delta(levels * count_sampler_tv(floor), epsilon)
    event_delta = delta - sampler
    if not event_delta > 0:
        raise ValueError(f"delta {delta:.3g} cannot pay for the PrivTree sampler ({sampler:.3g})")

    def release(alpha: float) -> PrivTreeRelease:
        kappa = clamp_gap(alpha, event_delta)
        bias = -(-kappa // gap_levels)
        return PrivTreeRelease(name, epsilon, stream, alpha, kappa, bias, levels, offset_delta=event_delta)

    def fits(alpha: float) -> bool:
        r = release(alpha)
        return privacy_loss(r.alpha, r.kappa, r.bias) <= epsilon

    low, high = floor, epsilon
    if not fits(low):
        raise ValueError(f"PrivTree cannot be calibrated at epsilon {epsilon:.3g}")
    for _ in range(48):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    result = release(low)
    # the tree takes what the sampler leaves (>= event_delta: alpha >= floor): the ledger adds up
    result = result._replace(offset_delta=at_most(delta, [result.sampler_delta], delta - result.sampler_delta))
    result.check()
    return result
