"""The public plan of a synthesis: budget split, depths, thresholds -- all from public numbers.

"Differentially Private Synthetic Data Using KD-Trees" never states how epsilon is split
between the tree and the leaf counts, nor t, tau, s1, s2 for its experiments. Choices here
(docs/synthetic.md measures them):

* ``size_share`` of epsilon buys a noisy count n~ (discrete Laplace); the depth h then
  follows n~ epsilon (:func:`depth_choice`): c (n~ epsilon_leaf)^(1 / (d + 2)) cells per
  axis, the rate at which a histogram's rounding error and its noise balance (a fixed
  s2 saturates as n epsilon grows). c = 7 was fitted on the mixtures of Balog et al. in
  d = 2 and 5 (benchmarks/synth_kdtree.py, docs/synthetic.md), which fill a small part of
  their box; ``search_share`` buys the depth search (:mod:`dpm_jax.synth.depth_search`),
  which lowers that depth where its cells would hold too little of the data (data that fill
  their box). A fixed depth (``levels``) skips both.
* The leaf threshold t is the smallest integer with J P[Z >= t] <= K for J public cells,
  K = min(16, max(1, J / 256)) (:func:`empty_cells_passing`): about 16 empty cells pass on
  average, at most one in 256. Theorem 5's t = 8 log(1/delta) / epsilon is the
  high-probability version and drops far more of the data. Until stop 42 the rule let about
  one pass, which dropped more of the data's thin cells than 16 false ones cost
  (docs/synthetic.md, "The leaf threshold", says how K and the cap were chosen).
* KD-tree: ``tree_share`` of epsilon for the decisions, D = ``decisions`` levels, tau
  from Lemma 10 with what the samplers leave of delta (:func:`dpm_jax.synth.kdtree.decision_threshold`).
  Its leaf threshold counts 2**h + 2 D n / tau candidate empty leaves, as PrivTree's below (with
  tau for theta). (It counted 2**h (D + 1), which at a coarse h is far fewer than the empty
  children D n_max can be: a low threshold there made the empty-cell capacity, which must
  serve max_empty, 13 times as large once the depth search reached coarse depths.)
* PrivTree: ``tree_share`` of epsilon and what the samplers leave of delta for the decisions
  (:func:`dpm_jax.synth.privtree.calibrate`), D = ``decisions`` levels at most (default 2 d,
  within the 31-bit codes), the bias crossing the clamp gap in ``gap_levels`` levels. Its leaf
  threshold counts 2**h + 2 D n / theta candidate empty leaves (a split needs about theta
  points, so a level has at most n / theta of them; a utility heuristic, public numbers).
* Refine (:mod:`dpm_jax.synth.refine`): ``coarse_share`` of the leaf epsilon for the coarse
  grid of depth h, the rest for the 2**k children (k = d: one halving per axis) of its
  released cells; the rule's depth is the children's, h = rule - k. The children's threshold
  has one candidate per power of two 2**j >= J = (released coarse cells) 2**k.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import keys
from dpm_jax.budget import Budget
from dpm_jax.exact import MAX_POINTS
from dpm_jax.ledger import Ledger
from dpm_jax.releases import CountRelease, at_most, ledger_of, split_budget
from dpm_jax.synth.cells import MAX_DEPTH
from dpm_jax.synth.depth_search import DepthSearch
from dpm_jax.synth.implicit import pass_probability
from dpm_jax.synth.kdtree import decision_threshold, lemma10_delta
from dpm_jax.synth.privtree import PrivTreeRelease, calibrate
from dpm_jax.synth.threshold import ThresholdRelease

__all__ = ["SynthConfig", "SynthPlan", "plan_synthesis", "METHODS", "DEFAULT_MAX_ROWS", "DEFAULT_MAX_CELLS"]

METHODS = ("grid", "kdtree", "privtree", "refine", "dpm")
CELLS_PER_AXIS = 7.0  # the rule's c, fitted on Balog et al.'s d = 2 and 5 mixtures
REFINE_CELLS_PER_AXIS = 10.0  # "refine": c of its children's depth, chosen on keys other than Figure 3's
# SynthConfig.max_rows: a public capacity (2**24 rows, 16.8 million) for when the caller states none; the
# thresholds grow with its logarithm (docs/synthetic.md)
DEFAULT_MAX_ROWS = 2**24
# SynthConfig.max_cells: the length of the released arrays (a public number; the heaviest cells are kept
# past it, with a warning). The largest release of benchmarks/synth_kdtree.py (Figures 3 and 4, App. G.3)
# holds 2,784 cells; data that fill their box release about 0.8 n epsilon / ln(cells) cells at the
# depth search's depth (6,200 at n = 100,000, epsilon 1, d = 2: benchmarks/synth_fill.py); a row costs
# 3 d + 2 numbers in the result.
DEFAULT_MAX_CELLS = 2**14
# The leaf thresholds let about this many empty cells pass on average (public: a count of cells), but
# at most one in PASSING_SHARE of them and at least one. A passing empty cell adds about
# t + 1/epsilon false points; a cell of the data below t is lost. One passing cell (the rule until
# stop 42) lost more of the data's thin cells than 16 false ones cost, except where the candidates
# are few (d = 2 at epsilon 0.01: 2**10 cells), where 16 of them is too much false mass
# (docs/synthetic.md, "The leaf threshold").
EMPTY_CELLS_PASSING = 16
PASSING_SHARE = 256
# The leaf threshold counts at least EMPTY_CELLS_PASSING/WORST_CASE_SHARE of the worst case's empty
# leaves, so that at most about WORST_CASE_SHARE of them pass on average and the
# empty-cell capacity (drawn every call) stays bounded where the heuristic's count is far below the
# worst case (PrivTree at a small max_rows and epsilon: 52 million draws without it). A floor above
# the heuristic raises the threshold, so it costs released cells: at 1/1024 the KD-tree on N(0, I_5)
# in [-5, 5]^5 (epsilon 0.1, the default max_rows) scored 0.166 against 0.110 without it; at 1/4096
# it does not bind there, and at most about 4,096 empty cells pass on average, so the capacity stays
# below ghost_capacity of that mean, 5,131 draws (tests/test_synth.py checks it over extreme plans).
WORST_CASE_SHARE = 4096


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """Hyper-parameters of :func:`dpm_jax.synthesize` (hashable: a static argument of jax.jit).

    levels: data-independent depth h (grid: 2**h cells), or None for the n~ epsilon rule.
    decisions: KD-tree levels decided by noisy counts (D); None: d (one halving per axis);
      PrivTree: the public maximum of decision levels, None: 2 d (at most 31 - 2 d).
    size_share, search_share, tree_share: parts of epsilon for n~, for the depth search
      (:mod:`dpm_jax.synth.depth_search`: the rule's depth lowered where its cells would hold too
      little of the data) and for the tree's decisions.
    cells_per_axis: the rule's c: 2**(h / d) = c (n~ epsilon_leaf)^(1 / (d + 2)); None: 7, and
      10 for "refine" (whose rule depth is its children's: docs/synthetic.md measures both).
    gap_levels: PrivTree's m: the bias per level is ceil(kappa / m) (dpm_jax.synth.privtree).
    coarse_share: "refine": the part of the leaf epsilon for the coarse grid (dpm_jax.synth.refine).
    max_rows: the stated maximum n, a public capacity fixed before the data are seen: Lemma 10's
      tau, PrivTree's leaf thresholds, the empty-cell capacities and "refine"'s candidate
      thresholds are computed from it, never from the row count of X (private under
      add/remove-one neighbours); X with more rows is refused. A tighter public capacity gives
      lower thresholds.
    max_cells: the length of the released arrays (public, so that it cannot show the row count of X,
      as the candidates' n + a constant would); where more cells are released, the heaviest are kept
      (post-processing of the noisy weights, ties broken by the cell's code and depth).
    """

    levels: int | None = None
    decisions: int | None = None
    size_share: float = 0.04
    search_share: float = 0.01
    tree_share: float = 0.3
    cells_per_axis: float | None = None
    gap_levels: int = 2
    coarse_share: float = 0.6
    max_rows: int = DEFAULT_MAX_ROWS
    max_cells: int = DEFAULT_MAX_CELLS

    def __post_init__(self):
        if self.levels is not None and not (isinstance(self.levels, int) and 0 <= self.levels <= 30):
            raise ValueError(f"levels must be an integer in [0, 30] or None, got {self.levels!r}")
        if self.decisions is not None and not (isinstance(self.decisions, int) and 1 <= self.decisions <= 30):
            raise ValueError(f"decisions must be an integer in [1, 30] or None, got {self.decisions!r}")
        for name in ("size_share", "search_share", "tree_share", "coarse_share"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be in (0, 1), got {value!r}")
        if not self.size_share + self.search_share < 1:
            raise ValueError(
                "size_share + search_share must be below 1 (the rest is the tree's and the leaves'), got "
                f"{self.size_share + self.search_share!r}"
            )
        if not (isinstance(self.gap_levels, int) and 1 <= self.gap_levels <= 64):
            raise ValueError(f"gap_levels must be an integer in [1, 64], got {self.gap_levels!r}")
        if self.cells_per_axis is not None and not self.cells_per_axis > 0:
            raise ValueError(f"cells_per_axis must be > 0, got {self.cells_per_axis!r}")
        for name in ("max_rows", "max_cells"):  # public counts, int32 like every count
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= MAX_POINTS):
                raise ValueError(f"{name} must be an integer in [1, {MAX_POINTS}], got {value!r}")


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
    coarse: ThresholdRelease | None = None  # refine: the coarse grid's counts (then leaves: the children's)
    search: DepthSearch | None = None  # the depth search (None with a fixed depth)
    refine_bits: int = 0  # refine: k, the children's depth below the coarse cells

    @property
    def ledger(self) -> Ledger:
        releases = (self.size, self.search, self.decisions, self.coarse, self.leaves)
        return ledger_of([r for r in releases if r is not None])


def _depth_range(d: int, decisions: int, levels: int | None) -> tuple[int, ...]:
    top = min(30, MAX_DEPTH - decisions)
    if levels is not None:
        if levels > top:
            raise ValueError(f"levels {levels} + decisions {decisions} exceed the {MAX_DEPTH}-bit cell codes")
        return (levels,)
    return tuple(range(0, top + 1))  # the depth search may go down to one cell


def empty_cells_passing(cells: int) -> float:
    """How many of ``cells`` empty cells a leaf threshold lets pass on average: EMPTY_CELLS_PASSING,
    at most cells / PASSING_SHARE, at least 1 (a function of the public count alone)."""
    return min(float(EMPTY_CELLS_PASSING), max(1.0, cells / PASSING_SHARE))


def _threshold(epsilon: float, cells: int) -> int:
    """The smallest integer t >= 1 with cells P[Z >= t] <= K: K = :func:`empty_cells_passing` of cells."""
    passing = empty_cells_passing(cells)
    # p(t) = r**t / (1 + r) <= K / cells  <=>  t >= ln(cells / (K (1 + r))) / epsilon; the float estimate
    # can fall on either side of the smallest t, so the loops step down, then up, in exact comparisons
    passes = lambda t: cells * pass_probability(epsilon, t) <= passing  # noqa: E731
    ratio = cells / (passing * (1.0 + math.exp(-epsilon)))
    t = max(1, math.floor(math.log(max(ratio, 1.0)) / epsilon))
    while t > 1 and passes(t - 1):
        t -= 1
    while not passes(t):
        t += 1
    return t


def _default_decisions(method: str, d: int, config: SynthConfig) -> int:
    if method in ("grid", "refine"):
        return 0
    if config.decisions is not None:
        return config.decisions
    return d if method == "kdtree" else max(1, min(2 * d, MAX_DEPTH - 2 * d))


def plan_synthesis(budget: Budget, config: SynthConfig, method: str, d: int) -> SynthPlan:
    """The releases and public parameters of a "grid", "kdtree", "privtree" or "refine" synthesis of d columns.

    ``config.max_rows`` (public) is the stated maximum n of the Lemma-10 and truncation bounds:
    nothing here reads the data, not even their row count.
    """
    n_max = config.max_rows
    decisions = _default_decisions(method, d, config)
    if method == "refine":
        return _plan_refine(budget, config, d, n_max)
    depths = _depth_range(d, decisions, config.levels)
    size_share, search_share = _rule_shares(config)
    tree_share = config.tree_share if decisions else 0.0
    if not size_share + search_share + tree_share < 1:
        raise ValueError(
            f"size_share + search_share + tree_share must be below 1 (the rest is the leaves'), got {config}"
        )
    shares = [s for s in (size_share, search_share, tree_share) if s] + [1.0 - size_share - search_share - tree_share]
    parts = list(split_budget(budget.epsilon, shares))
    size, search = _rule_releases(parts, size_share, len(depths))
    tree_epsilon = parts.pop(0) if decisions else 0.0
    leaf_epsilon = parts.pop(0)
    size_delta = (size.entry().delta + search.entry().delta) if size else 0.0
    # a provisional split threshold (public numbers) for the leaf threshold's heuristic: a split needs
    # about that many points, so a level splits at most n_max / threshold cells (0: no decisions)
    split_at = 0
    if method == "privtree":
        split_at = calibrate("", "", tree_epsilon, 0.5 * budget.delta, decisions, config.gap_levels).theta
    elif decisions:
        # (a floor on delta: a delta too small for the samplers is refused below, with its own message)
        split_at = decision_threshold(max(depths), decisions, n_max, tree_epsilon, max(0.5 * budget.delta, 1e-30))
    cells, worst = _leaf_candidates(depths, decisions, n_max, split_at)
    leaves = ThresholdRelease(
        "synth leaves",
        leaf_epsilon,
        keys.SYNTH_LEAF,
        tuple(_threshold(leaf_epsilon, c) for c in cells),
        tuple(worst),
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
        config.cells_per_axis or CELLS_PER_AXIS,
        d,
        bias,
        floor,
        search=search,
    )


def _leaf_candidates(depths, decisions: int, n_max: int, split_at: int) -> tuple[list[int], list[int]]:
    """Per candidate depth h: the count of empty leaves the leaf threshold is computed for, and the
    worst case's (2**h + n_max D, which bounds the implicit draw).

    The count is the heuristic 2**h + 2 D n_max / split_at (a split needs about split_at points),
    but at least EMPTY_CELLS_PASSING/WORST_CASE_SHARE of the worst case, so that at most about
    WORST_CASE_SHARE of them pass on average: the empty-cell capacity, drawn every call, stays
    bounded where the heuristic's count is small against the worst case.
    """
    worst = [2**h + n_max * decisions for h in depths]
    heuristic = [2**h + (2 * decisions * (n_max // split_at) if decisions else 0) for h in depths]
    floor = [-(-w * EMPTY_CELLS_PASSING // WORST_CASE_SHARE) for w in worst]
    return [max(c, f) for c, f in zip(heuristic, floor)], worst


def _plan_refine(budget: Budget, config: SynthConfig, d: int, n_max: int) -> SynthPlan:
    """The releases of "refine": n~, the coarse grid's counts, its released cells' children's counts.

    Thresholds as for the grid (about EMPTY_CELLS_PASSING empty cells pass): 2**h cells for the coarse grid;
    for the children, one candidate per J = 2**j (j = k, k + 1, ..., enough for n_max + the
    coarse sampler's capacity released coarse cells), chosen from the released J.
    """
    k = d
    depths = _depth_range(d, k, config.levels)
    size_share, search_share = _rule_shares(config)
    leaf_share = 1.0 - size_share - search_share
    shares = [s for s in (size_share, search_share) if s] + [
        leaf_share * config.coarse_share,
        leaf_share * (1 - config.coarse_share),
    ]
    parts = list(split_budget(budget.epsilon, shares))
    size, search = _rule_releases(parts, size_share, len(depths))
    coarse_epsilon, child_epsilon = parts
    coarse = _cell_counts(
        "synth coarse", coarse_epsilon, keys.SYNTH_TREE, depths, "one count per cell of the coarse grid"
    )
    # at most n_max + the coarse sampler's capacity released coarse cells, capped at 2**(30 - k): the
    # children of released coarse cells past the cap (in code order) are not counted (refine.py)
    top = min(30, max(k, math.ceil(math.log2((n_max + coarse.capacity) * 2**k))))
    rule = f"one count per child (2**{k}) of a released coarse cell"
    leaves = _cell_counts("synth leaves", child_epsilon, keys.SYNTH_LEAF, range(k, top + 1), rule)
    spent = [(size.entry().delta + search.entry().delta) if size else 0.0, coarse.sampler_delta, leaves.sampler_delta]
    if math.fsum(spent) > budget.delta:
        raise ValueError(f"delta {budget.delta:.3g} cannot pay for the samplers ({math.fsum(spent):.3g})")
    return SynthPlan(
        size,
        None,
        leaves,
        depths,
        0,
        0,
        max(depths) + k,
        config.cells_per_axis or REFINE_CELLS_PER_AXIS,
        d,
        coarse=coarse,
        refine_bits=k,
        search=search,
    )


def _rule_shares(config: SynthConfig) -> tuple[float, float]:
    """The shares of n~ and of the depth search: none with a fixed depth."""
    return (0.0, 0.0) if config.levels is not None else (config.size_share, config.search_share)


def _rule_releases(parts: list, size_share: float, candidates: int):
    """n~ and the depth search from the front of ``parts`` (taken off it), or (None, None)."""
    if not size_share:
        return None, None
    size = CountRelease("synth size", parts.pop(0), keys.SYNTH_TREE, rows="size")
    return size, DepthSearch("synth depth", parts.pop(0), keys.SYNTH_TREE, candidates)


def _cell_counts(name: str, epsilon: float, stream: str, exponents, rule: str) -> ThresholdRelease:
    """Thresholded counts of 2**j cells, one candidate threshold per j of ``exponents``."""
    release = ThresholdRelease(
        name,
        epsilon,
        stream,
        tuple(_threshold(epsilon, 2**j) for j in exponents),
        tuple(2**j for j in exponents),
        rule=rule,
    )
    release.check()
    return release


def depth_choice(plan: SynthPlan, noisy_size: jax.Array) -> jax.Array:
    """Index into ``plan.depths`` for the released size n~ (post-processing of n~); "refine": the
    rule's depth is its children's (``refine_bits`` below the coarse depth).

    The rule's depth is d (log2 c + log2(m) / (d + 2)) - refine_bits, m = max(n~ epsilon, 1), to
    the nearest integer within the candidates, half-way up (stop 36's device rule went half-way to
    even: the two differ only where m is exactly a threshold). A log2 on the device rounds as the
    backend's own approximation does, and the depth would follow it near a half-way point; so the
    m at which each next depth starts is computed here, on the host, as a public float32
    threshold, and the device only compares: the same choice on every backend.
    """
    d = plan.dimension
    epsilon = plan.leaves.epsilon + (plan.coarse.epsilon if plan.coarse is not None else 0.0)
    # depth index j + 1 from target >= depths[0] + j + 1/2, i.e. log2 m >= (d + 2) (that / d - log2 c)
    steps = np.arange(len(plan.depths) - 1) + plan.depths[0] + 0.5 + plan.refine_bits
    exponents = (d + 2) * (steps / d - np.log2(plan.cells_per_axis))
    wanted = np.exp2(np.minimum(exponents, 128.0))
    with np.errstate(over="ignore"):
        thresholds = wanted.astype(np.float32)  # beyond float32: inf, never met
    # rounded up, so that a float32 m meets the float32 threshold exactly when it meets the wanted one
    thresholds = np.where(thresholds < wanted, np.nextafter(thresholds, np.float32(np.inf)), thresholds)
    m = jnp.maximum(noisy_size * np.float32(epsilon), 1.0)
    return jnp.sum(m[..., None] >= thresholds, axis=-1, dtype=jnp.int32)
