"""The public plan of a synthesis: budget split, depths, thresholds -- all from public numbers.

"Differentially Private Synthetic Data Using KD-Trees" never states how epsilon is split
between the tree and the leaf counts, nor t, tau, s1, s2 for its experiments. Choices here
(docs/synthetic.md measures them):

* ``size_share`` of epsilon buys a noisy count n~ (discrete Laplace); the depth h then
  follows n~ epsilon (:func:`depth_choice`): c (n~ epsilon_leaf)^(1 / (d + 2)) cells per
  axis, the rate at which a histogram's rounding error and its noise balance (a fixed
  s2 saturates as n epsilon grows). c = 7 was fitted on the mixtures of Balog et al. in
  d = 2 and 5 (benchmarks/synth_kdtree.py, docs/synthetic.md). A fixed depth (``levels``)
  skips that count.
* The leaf threshold t is the smallest integer with J P[Z >= t] <= 1 for J public
  cells: about one empty cell passes on average (Theorem 5's t = 8 log(1/delta) / epsilon
  is the high-probability version and drops far more of the data).
* KD-tree: ``tree_share`` of epsilon for the decisions, D = ``decisions`` levels, tau
  from Lemma 10 with what the samplers leave of delta (:func:`dpm_jax.synth.kdtree.decision_threshold`).
* PrivTree: ``tree_share`` of epsilon and what the samplers leave of delta for the decisions
  (:func:`dpm_jax.synth.privtree.calibrate`), D = ``decisions`` levels at most (default 2 d,
  within the 31-bit codes), the bias crossing the clamp gap in ``gap_levels`` levels. Its leaf
  threshold counts 2**h + 2 D n / theta candidate empty leaves (a split needs about theta
  points, so a level has at most n / theta of them; a utility heuristic, public numbers).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from dpm_jax import keys
from dpm_jax.budget import Budget
from dpm_jax.ledger import Ledger
from dpm_jax.releases import CountRelease, at_most, ledger_of, split_budget
from dpm_jax.synth.cells import MAX_DEPTH
from dpm_jax.synth.implicit import pass_probability
from dpm_jax.synth.kdtree import decision_threshold, lemma10_delta
from dpm_jax.synth.privtree import PrivTreeRelease, calibrate
from dpm_jax.synth.threshold import ThresholdRelease

__all__ = ["SynthConfig", "SynthPlan", "plan_synthesis", "METHODS"]

METHODS = ("grid", "kdtree", "privtree", "dpm")


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """Hyper-parameters of :func:`dpm_jax.synthesize` (hashable: a static argument of jax.jit).

    levels: data-independent depth h (grid: 2**h cells), or None for the n~ epsilon rule.
    decisions: KD-tree levels decided by noisy counts (D); None: d (one halving per axis);
      PrivTree: the public maximum of decision levels, None: 2 d (at most 31 - 2 d).
    size_share, tree_share: parts of epsilon for n~ and for the tree's decisions.
    cells_per_axis: the rule's c: 2**(h / d) = c (n~ epsilon_leaf)^(1 / (d + 2)).
    gap_levels: PrivTree's m: the bias per level is ceil(kappa / m) (dpm_jax.synth.privtree).
    """

    levels: int | None = None
    decisions: int | None = None
    size_share: float = 0.05
    tree_share: float = 0.3
    cells_per_axis: float = 7.0
    gap_levels: int = 2

    def __post_init__(self):
        if self.levels is not None and not (isinstance(self.levels, int) and 0 <= self.levels <= 30):
            raise ValueError(f"levels must be an integer in [0, 30] or None, got {self.levels!r}")
        if self.decisions is not None and not (isinstance(self.decisions, int) and 1 <= self.decisions <= 30):
            raise ValueError(f"decisions must be an integer in [1, 30] or None, got {self.decisions!r}")
        for name in ("size_share", "tree_share"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be in (0, 1), got {value!r}")
        if not (isinstance(self.gap_levels, int) and 1 <= self.gap_levels <= 64):
            raise ValueError(f"gap_levels must be an integer in [1, 64], got {self.gap_levels!r}")
        if not self.cells_per_axis > 0:
            raise ValueError(f"cells_per_axis must be > 0, got {self.cells_per_axis!r}")


class SynthPlan(NamedTuple):
    """Public numbers of one synthesis: its releases, depths and thresholds."""

    size: CountRelease | None
    decisions: CountRelease | PrivTreeRelease | None
    leaves: ThresholdRelease
    depths: tuple[int, ...]  # candidate h, indexed by the rule's choice
    num_decisions: int
    tau: int
    total_depth: int
    cells_per_axis: float
    dimension: int
    bias: int = 0  # PrivTree: per decision level
    floor: int = 0  # PrivTree: theta - kappa

    @property
    def ledger(self) -> Ledger:
        return ledger_of([r for r in (self.size, self.decisions, self.leaves) if r is not None])


def _depth_range(d: int, decisions: int, levels: int | None) -> tuple[int, ...]:
    top = min(30, MAX_DEPTH - decisions)
    if levels is not None:
        if levels > top:
            raise ValueError(f"levels {levels} + decisions {decisions} exceed the {MAX_DEPTH}-bit cell codes")
        return (levels,)
    return tuple(range(min(2 * d, top), top + 1))


def _threshold(epsilon: float, cells: int) -> int:
    """The smallest integer t >= 1 with cells P[Z >= t] <= 1."""
    t = max(1, math.floor(math.log(cells) / epsilon) - 2)
    while cells * pass_probability(epsilon, t) > 1.0:
        t += 1
    return t


def _default_decisions(method: str, d: int, config: SynthConfig) -> int:
    if method == "grid":
        return 0
    if config.decisions is not None:
        return config.decisions
    return d if method == "kdtree" else max(1, min(2 * d, MAX_DEPTH - 2 * d))


def plan_synthesis(budget: Budget, config: SynthConfig, method: str, d: int, n_max: int) -> SynthPlan:
    """The releases and public parameters of a "grid", "kdtree" or "privtree" synthesis of d columns.

    ``n_max`` (the row count of X) is the stated maximum n of the Lemma-10 and truncation bounds.
    """
    decisions = _default_decisions(method, d, config)
    depths = _depth_range(d, decisions, config.levels)
    size_share = 0.0 if config.levels is not None else config.size_share
    tree_share = config.tree_share if decisions else 0.0
    shares = [s for s in (size_share, tree_share) if s] + [1.0 - size_share - tree_share]
    parts = list(split_budget(budget.epsilon, shares))
    size = CountRelease("synth size", parts.pop(0), keys.SYNTH_TREE, rows="size") if size_share else None
    tree_epsilon = parts.pop(0) if decisions else 0.0
    leaf_epsilon = parts.pop(0)
    size_delta = size.entry().delta if size else 0.0
    if method == "privtree":  # a provisional theta for the threshold heuristic (public numbers)
        theta = calibrate("", "", tree_epsilon, 0.5 * budget.delta, decisions, config.gap_levels).theta
        cells = [2**h + 2 * decisions * (n_max // theta) for h in depths]
    else:
        cells = [2**h * (decisions + 1) for h in depths]
    leaves = ThresholdRelease(
        "synth leaves",
        leaf_epsilon,
        keys.SYNTH_LEAF,
        tuple(_threshold(leaf_epsilon, c) for c in cells),
        tuple(2**h + n_max * decisions for h in depths),
    )
    leaves.check()
    spent = [size_delta, leaves.sampler_delta]
    if math.fsum(spent) > 0.5 * budget.delta:
        raise ValueError(f"delta {budget.delta:.3g} cannot pay for the samplers ({math.fsum(spent):.3g})")
    decision_release, tau, bias, floor = None, 0, 0, 0
    if decisions:  # the tree takes the rest of delta: the ledger adds up to the budget
        tree_delta = at_most(budget.delta, spent, budget.delta - math.fsum(spent))
    if method == "privtree":
        decision_release = calibrate(
            "synth decisions", keys.SYNTH_TREE, tree_epsilon, tree_delta, decisions, config.gap_levels
        )
        tau, bias = decision_release.theta, decision_release.bias
        floor = decision_release.theta - decision_release.kappa  # 1: a one-point cell sits on the clamp
    elif decisions:
        probe = CountRelease("synth decisions", tree_epsilon, keys.SYNTH_TREE, sensitivity=decisions, rows="decisions")
        tau = decision_threshold(max(depths), decisions, n_max, tree_epsilon, tree_delta - probe.sampler_delta)
        event = lemma10_delta(max(depths), decisions, n_max, tree_epsilon, tau) * (1.0 + math.exp(tree_epsilon))
        assert event + probe.sampler_delta <= tree_delta
        decision_release = probe._replace(
            offset_delta=tree_delta - probe.sampler_delta, rule="one count per level of a root-to-leaf path"
        )
    return SynthPlan(
        size,
        decision_release,
        leaves,
        depths,
        decisions,
        tau,
        max(depths) + decisions,
        config.cells_per_axis,
        d,
        bias,
        floor,
    )


def depth_choice(plan: SynthPlan, noisy_size, xp=np):
    """Index into ``plan.depths`` for the released size n~ (post-processing of n~)."""
    d = plan.dimension
    scale = xp.log2(xp.maximum(noisy_size * plan.leaves.epsilon, 1.0)) / (d + 2)
    target = d * (np.log2(plan.cells_per_axis) + scale)
    return xp.clip(xp.round(target).astype(np.int32) - plan.depths[0], 0, len(plan.depths) - 1)
