"""The stopping and separation analysis of DPM, with its errata corrected.

From "Understanding the Theoretical Guarantees of DPM" (Section 2: stopping
criterion; Section 4: (xi, rho)-separability). Every function here is arithmetic on
public numbers: a score's exponent scale B, counts of split candidates, the
hyper-parameters. None reads data.

Notation. A node's split candidates W are scored f = c + alpha e (Definition 5 of
the theory paper: centreness c in [0, 1], emptiness e in [0, 1]); the exponential
mechanism draws s with probability proportional to exp(B f(s)), B = epsilon_exp /
(2 Delta_f). A candidate whose centreness is at most the *centreness threshold*
t_tau (the centreness of rank tau_e) leaves a child below tau_e: DPM halts there.
e_min is the smallest emptiness of any candidate, e_QI the largest emptiness in the
inner quantile (centreness >= t).

Errata (each checked against the proofs; the corrected forms are the ones below):

* Lemma 2.4 prints the numerator |W_<=t_tau| e^{e_min B}. A halting candidate scores
  at least alpha e_min, so the bound is e^{alpha e_min B}; the printed form is valid
  only for alpha >= 1. The same holds for Lemma 2.5's numerator (a t'-central
  candidate scores at least t' + alpha e_min; the statement prints t_tau(S) where
  its proof has t') and for the denominators of Lemma 2.7, which carry alpha e_min.
* Lemma 2.5 bounds the emptiness of every t'-central candidate by e_QI; that is
  only true when t' >= t (the inner quantile). For t' < t the candidates with
  centreness in [t', t) may be empty (e = 1); they are counted with t + alpha.
* Theorems 2.6 and 2.9 raise the product over levels to the power 2**i. The events
  "every node continues on levels l < i and all 2**i nodes of level i halt" are
  disjoint for different i, and level l has 2**l nodes drawing independently, so
  P[every node has halted by depth j] >= sum_{i <= j} prod_{l < i} P_c(l)**(2**l)
  * P_h(i)**(2**i) (:func:`halting_bound`).
* Lemma 2.8 / Equation 8 (the threshold's growth per level): the two cases of the
  minimum are swapped and the inner-quantile algebra does not hold as printed. Not
  used here: the halting model below takes the threshold of a balanced node at
  depth i directly, 2**i * 2 tau_e / n~ (Section 2.2.2).
* Equation 21's shifts: z_i = Phi^-1(1 - 2**-(i+1)) (the paper prints 2**i in the
  argument, and rounds z_5, so it reports e_5 = .3155 for the exact .349).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple, Sequence

__all__ = [
    "central_emptiness",
    "central_emptiness_table",
    "halting_threshold",
    "halting_margin",
    "centreness",
    "NodeSummary",
    "halt_lower_bound",
    "central_split_lower_bound",
    "continue_lower_bound",
    "halting_bound",
]

_NORMAL = NormalDist()
GAUSSIAN_HALF_WIDTH = 0.25  # beta / (2 sigma) with beta = sigma / 2 (Algorithm 2 on one Gaussian)


def central_emptiness(level: int, half_width: float = GAUSSIAN_HALF_WIDTH, shift: float | None = None) -> float:
    """e_c(i): emptiness of the central split of a depth-``level`` node of one Gaussian (Section 2.2.2).

    1 - 2**i (Phi(z_i + w) - Phi(z_i - w)) with w = beta / (2 sigma) and, unless
    ``shift`` is given, z_i = Phi^-1(1 - 2**-(i+1)): the median of the outermost of
    the 2**i equal-mass nodes after i splits in one dimension (erratum: the paper
    prints Phi^-1((1 + (1 - 2**i)) / 2)). ``shift`` lets a caller reproduce the
    paper's arithmetic with its rounded z_i.
    """
    z = _NORMAL.inv_cdf(1.0 - 2.0 ** -(level + 1)) if shift is None else shift
    return 1.0 - 2.0**level * (_NORMAL.cdf(z + half_width) - _NORMAL.cdf(z - half_width))


def central_emptiness_table(levels: int = 7, half_width: float = GAUSSIAN_HALF_WIDTH) -> tuple[float, ...]:
    """(e_c(0), ..., e_c(levels - 1)): about .803 .684 .587 .501 .423 .349 .278 for beta = sigma / 2."""
    return tuple(central_emptiness(level, half_width) for level in range(levels))


def halting_threshold(level: int, root_threshold: float) -> float:
    """t_tau of a balanced depth-``level`` node: 2**i times the root's 2 tau_e / n~, at most 1.

    The paper's bound (Section 2.2.2) with the centreness c_{2q,q}, a lower bound on
    every valid (t, q) (Lemma 2.8's proof): halving a node doubles tau_e's share of it.
    """
    return min(1.0, 2.0**level * root_threshold)


def halting_margin(level: int, alpha: float, root_threshold: float, emptiness: float) -> float:
    """Equation 21's margin m: best halting score minus the central split's, t_tau(i) + alpha - 1 - alpha e_c.

    A halting candidate scores at most t_tau(i) + alpha (emptiness 1), the central
    split 1 + alpha e_c. m > 0: the halting candidates score higher than the central
    split, so the node stops once B m outweighs their number; m < 0: it splits.
    """
    return halting_threshold(level, root_threshold) + alpha - 1.0 - alpha * emptiness


def centreness(rank_fraction: float, t: float, q: float) -> float:
    """Definition 6's centreness c_{t,q} of a split at rank r = rank_fraction * n~."""
    distance = min(rank_fraction, 1.0 - rank_fraction)
    if distance <= q:
        return t * distance / q
    return (t - 2.0 * q) / (1.0 - 2.0 * q) + (1.0 - t) * distance / (0.5 - q)


class NodeSummary(NamedTuple):
    """What the stopping bounds know of one node: candidate counts per class and score limits.

    halting: |W_<=t_tau| (centreness <= t_tau); middle: centreness in (t_tau, t);
    inner: centreness >= t (and > t_tau). e_min: smallest emptiness of any candidate;
    e_inner: largest emptiness of an inner candidate (e_QI).
    """

    halting: int
    middle: int
    inner: int
    threshold: float  # t_tau
    e_min: float
    e_inner: float


def _weight(score: float, scale: float, reference: float) -> float:
    return math.exp(scale * (score - reference))  # shifted by a common reference: no overflow


def halt_lower_bound(node: NodeSummary, scale: float, alpha: float, t: float) -> float:
    """Lemma 2.4, corrected: P[DPM halts immediately] >= |W_h| e^{B alpha e_min} / (upper bound on all weights).

    Denominator: halting candidates score <= t_tau + alpha, middle ones < t + alpha,
    inner ones <= 1 + alpha e_QI. Needs t_tau < t.
    """
    top = max(node.threshold + alpha, t + alpha, 1.0 + alpha * node.e_inner)
    numerator = node.halting * _weight(alpha * node.e_min, scale, top)
    denominator = (
        node.halting * _weight(node.threshold + alpha, scale, top)
        + node.middle * _weight(t + alpha, scale, top)
        + node.inner * _weight(1.0 + alpha * node.e_inner, scale, top)
    )
    return numerator / denominator if denominator > 0 else 0.0


def central_split_lower_bound(
    node: NodeSummary, scale: float, alpha: float, t: float, t_prime: float, central: int, between: int
) -> float:
    """Lemma 2.5, corrected: P[a t'-central split is drawn] >= e^{B (t' + alpha e_min)} / (upper bound).

    ``central`` = |W_>=t'| (at least one), ``between`` = |W_(t_tau, t')|. Upper
    bound on the weights: halting candidates t_tau + alpha; candidates between t_tau
    and t' below t' + alpha; t'-central candidates 1 + alpha e_QI when t' >= t, and
    for t' < t those with centreness in [t', t) up to t + alpha (erratum), which
    this bound counts among ``central`` at the larger of the two scores.
    """
    if central < 1:
        raise ValueError("Lemma 2.5 assumes at least one t'-central candidate")
    central_top = 1.0 + alpha * node.e_inner if t_prime >= t else max(t + alpha, 1.0 + alpha * node.e_inner)
    top = max(node.threshold + alpha, t_prime + alpha, central_top)
    numerator = _weight(t_prime + alpha * node.e_min, scale, top)
    denominator = (
        node.halting * _weight(node.threshold + alpha, scale, top)
        + central * _weight(central_top, scale, top)
        + between * _weight(t_prime + alpha, scale, top)
    )
    return numerator / denominator


def continue_lower_bound(node: NodeSummary, scale: float, alpha: float, t: float) -> float:
    """Lemma 2.7: P[DPM does not halt immediately] >= 1 - (upper bound on the halting weight) / (lower bound on all).

    Halting candidates weigh at most e^{B (alpha + t_tau)}; every candidate at least
    e^{B alpha e_min}, middle ones e^{B (alpha e_min + t_tau)}, inner ones
    e^{B (alpha e_min + t)}. Clipped at 0 (the bound is vacuous there).
    """
    top = alpha + node.threshold
    numerator = node.halting * _weight(alpha + node.threshold, scale, top)
    denominator = (
        node.halting * _weight(alpha * node.e_min, scale, top)
        + node.middle * _weight(alpha * node.e_min + node.threshold, scale, top)
        + node.inner * _weight(alpha * node.e_min + t, scale, top)
    )
    if denominator <= 0:
        return 0.0
    return max(0.0, 1.0 - numerator / denominator)


def halting_bound(halt: Sequence[float], carry_on: Sequence[float], depth: int) -> float:
    """Theorems 2.6 / 2.9, re-indexed: a lower bound on P[every node has halted by depth j].

    sum_{i <= j} prod_{l < i} P_c(l)**(2**l) * P_h(i)**(2**i): the event that every
    node continues on levels l < i and all 2**i nodes of level i halt, for each i.

    ``halt[i]`` and ``carry_on[i]`` are lower bounds, valid for every node of level i,
    on halting immediately and on drawing a split that does not halt (Lemmas
    2.4 and 2.7, or 2.5 with a t'-central split).
    """
    if not 0 <= depth < min(len(halt), len(carry_on) + 1):
        raise ValueError(f"depth {depth} needs halting bounds for levels 0..{depth}")
    total, reach = 0.0, 1.0  # reach: lower bound on P[all 2**i nodes of level i exist]
    for level in range(depth + 1):
        total += reach * halt[level] ** (2**level)
        if level < depth:
            reach *= carry_on[level] ** (2**level)
    return total
