"""Know before you spend: what a budget lets DPM do, level by level, from public numbers only.

:func:`plan` reads only public numbers -- a size ``n`` the user declares public (or the
released root count n~ of a run), the dimension, the :class:`~dpm_jax.Budget` and the
:class:`~dpm_jax.DPMConfig` -- never the data, so it costs no privacy. For every split
level it reports the quantities of the DPM paper ("DPM: Clustering Sensitive Data
through Separation", Sections 3.3-3.4 and Lemma 5) that decide whether the level's
split choices carry signal:

* epsilon_exp and epsilon_cnt of the level (Equation 2) and the count offset lambda
  (Equation 1);
* the expected node size n / 2**l under balanced splits and Lemma 5's
  Delta_f = (t/q + alpha) / (n_l - lambda);
* the exponent scale B = epsilon_exp / (2 Delta_f) per unit of the score f: a candidate
  whose score is larger by 1 / B is e times more likely to be drawn.

A level is flagged *near random* when even the largest possible score gap (t + alpha:
the best central, empty candidate against the worst) cannot outweigh the other
candidates: B (t + alpha) < ln(M), M = d * (candidates per dimension). This is a
heuristic read of the exponential mechanism (it drives :func:`dpm_jax.depth.recommended_tau_r`,
whose level arithmetic this report shows).

The :class:`Plan`'s methods answer the questions of "Understanding the Theoretical
Guarantees of DPM" (:mod:`dpm_jax.diagnostics.theory`, :mod:`dpm_jax.diagnostics.separation`):
how many balanced clusters the budget separates (:meth:`Plan.max_reliable_k`,
:meth:`Plan.min_n_epsilon`), whether one Gaussian cluster or uniform data halts
(Section 2.2), and which alpha separates (xi, rho)-separable clusters (Section 4.3).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import NamedTuple

from dpm_jax.budget import Budget, allocate, validate_budget_and_config
from dpm_jax.config import AUTO_DEPTH, DPMConfig
from dpm_jax.depth import (
    drawable_per_node,
    depth_rule,
    exponent_scale,
    near_random,
    plan_depth,
    recommended_tau_r,
)
from dpm_jax.diagnostics import separation, theory
from dpm_jax.entry import user_stacklevel

__all__ = [
    "LevelPlan",
    "Plan",
    "HaltingPrediction",
    "UniformPrediction",
    "AlphaWindow",
    "plan",
    "InsufficientBudgetWarning",
    "LargeDeltaWarning",
    "warn_if_large_delta",
    "warn_if_insufficient",
]

_BISECTION_STEPS = 40
_LARGEST_EPSILON = 50.0  # min_n_epsilon searches epsilon up to this


class LevelPlan(NamedTuple):
    """The public budget arithmetic of one split level."""

    level: int
    nodes: int  # 2**level
    node_size: float  # n / 2**level, balanced splits
    split_epsilon: float  # epsilon_exp of the level
    count_epsilon: float  # epsilon_cnt of the level's children
    count_offset: float  # lambda of the level (Equation 1)
    score_sensitivity: float  # Delta_f = (t/q + alpha) / max(n_l - lambda, 1) (Lemma 5)
    exponent_scale: float  # B = epsilon_exp / (2 Delta_f), per unit of f
    near_random: bool  # B (t + alpha) < ln(M): the draw is close to uniform

    @property
    def score_slack(self) -> float:
        """1 / B: the score gap that makes a candidate e times more likely to be drawn."""
        return 1.0 / self.exponent_scale


class HaltingPrediction(NamedTuple):
    """One Gaussian cluster (theory paper, Section 2.2.2; :meth:`Plan.single_cluster_halting`).

    ``depth``: the first level whose Equation 21 margin is positive, with every split
    in a fresh dimension (e_c stays e_c(0)); the model that matches measured runs.
    ``depth_one_dimension``: the paper's model, all splits in one dimension (e_c(i)).
    tau_r where no level halts (the depth limit stops DPM). 2**depth leaves.
    """

    alpha_needed_at_root: float  # (1 - 2 tau_e / n) / (1 - e_c(0))
    depth: int
    depth_one_dimension: int
    margins: tuple[float, ...]  # Equation 21's m per level, fresh dimensions
    margins_one_dimension: tuple[float, ...]  # the paper's model

    @property
    def halts_at_root(self) -> bool:
        return self.depth == 0

    @property
    def leaves(self) -> int:
        return 2**self.depth


class UniformPrediction(NamedTuple):
    """Uniform data, no clusters (theory paper, Section 2.2.1; :meth:`Plan.uniform_halting`).

    Every candidate is equally empty, so the central split wins and nodes halve
    until a child falls below tau_e. ``flagged``: tau_e <= n / 2**tau_r, DPM does not
    halt before the depth limit; ``on_boundary``: tau_e = n / 2**tau_r exactly (the
    default tau_e = n~ / 2**tau_r), where the last level's noisy counts decide and
    2**(tau_r - 1) to 2**tau_r leaves come out.
    """

    depth: int
    flagged: bool
    on_boundary: bool


class AlphaWindow(NamedTuple):
    """The alphas for which a (xi, rho)-separator with rho = beta beats both rivals by ``margin`` (Section 4.3)."""

    low: float
    high: float
    margin: float  # ln(M) / B: the score gap at which the separator outweighs all M candidates

    @property
    def empty(self) -> bool:
        return not self.low <= self.high

    def __contains__(self, alpha: float) -> bool:
        return self.low <= alpha <= self.high


class Plan(NamedTuple):
    """Per-level diagnostics of a budget (:func:`plan`); ``print(plan)`` gives a report."""

    n: float
    d: int
    budget: Budget
    config: DPMConfig
    candidates: int  # M: d times the candidates per dimension at the smallest interval size
    levels: tuple[LevelPlan, ...]

    @property
    def useful_depth(self) -> int:
        """The number of leading levels whose splits are not near random."""
        depth = 0
        for level in self.levels:
            if level.near_random:
                break
            depth += 1
        return depth

    @property
    def tau_e(self) -> float:
        """The minimum child size: the config's, or the default n / 2**tau_r at this n."""
        return self.n / 2**self.config.tau_r if self.config.tau_e is None else float(self.config.tau_e)

    @property
    def root_threshold(self) -> float:
        """t_tau of the root, 2 tau_e / n (at most 1): the centreness below which a split halts."""
        return min(1.0, max(2.0 * self.tau_e / self.n, 0.0))

    def expected_clusters(self, k: int) -> float:
        """E(k): expected clusters found when the data hold k balanced, well-separated clusters."""
        return separation.expected_clusters(k, self.n, allocate(self.budget, self.config, self.d), self.config)

    def separates(self, k: int) -> bool:
        """E(k) >= RELIABLE_SHARE k (and k <= 2**tau_r): k balanced clusters are separated."""
        return k <= 2**self.config.tau_r and self.expected_clusters(k) >= separation.RELIABLE_SHARE * k

    def max_reliable_k(self) -> int:
        """The largest k (<= 2**tau_r, <= MAX_MODEL_CLUSTERS) this n and budget separate; 1 if not even 2."""
        low, high = 1, min(2**self.config.tau_r, separation.MAX_MODEL_CLUSTERS)
        while low < high:  # E(k) / k falls with k: bisect for the last k that is separated
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.separates(middle) else (low, middle - 1)
        return low

    def min_n_epsilon(self, k: int) -> float:
        """The smallest n * epsilon at which k balanced clusters are separated, at this n and delta.

        Bisects epsilon (n, delta and the config fixed); inf when even the largest
        budget the exact samplers certify does not separate k clusters.
        """
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if k == 1:
            return 0.0
        low, high = math.log(1e-6), math.log(_LARGEST_EPSILON)
        if not self._separates_at(k, math.exp(high)):
            return math.inf
        for _ in range(_BISECTION_STEPS):
            middle = (low + high) / 2
            low, high = (low, middle) if self._separates_at(k, math.exp(middle)) else (middle, high)
        return self.n * math.exp(high)

    def _separates_at(self, k: int, epsilon: float) -> bool:
        try:
            return self._replace(budget=Budget(epsilon, self.budget.delta)).separates(k)
        except ValueError:  # a budget the exact samplers cannot certify
            return False

    def single_cluster_halting(self, sigma: float = 0.05) -> HaltingPrediction:
        """Does one Gaussian cluster halt at the root, and else at which depth (Equation 21, m > 0)?

        The central split's emptiness e_c depends on its interval beta against the
        cluster's standard deviation: the paper's grid has beta = sigma / 2 (what
        Algorithm 2 finds on one Gaussian); the cell grid's split interval is the window of
        ``split_window`` half-bins on each side of the cut, beta = split_window * range /
        max_splits_per_dim in a dimension not split yet, so it needs ``sigma``, the
        cluster's standard deviation as a share of the range -- a public guess, never
        read from data (default 0.05: N(0, 10**2) in bounds +-100; unused by the paper's
        grid). The halting threshold of a balanced depth-i node is 2**i * 2 tau_e / n. The model
        assumes the draws follow the scores (informative levels, as at n * epsilon =
        100,000, where it matches measured runs within one level: docs/diagnostics.md).
        At near-random levels (:attr:`useful_depth`) the draws are close to uniform and
        the many empty candidates around a cluster halt its nodes sooner: fewer leaves.
        """
        if not 0 < sigma <= 1:
            raise ValueError(
                f"sigma must be the cluster's standard deviation as a share of the range, in (0, 1], got {sigma!r}"
            )
        config, threshold = self.config, self.root_threshold
        half_width = (
            theory.GAUSSIAN_HALF_WIDTH
            if config.grid_shape.estimates_interval
            else config.split_window / (2.0 * config.max_splits_per_dim * sigma)
        )
        table = theory.central_emptiness_table(config.tau_r, half_width)
        fresh = tuple(theory.halting_margin(i, config.alpha, threshold, table[0]) for i in range(config.tau_r))
        one_dim = tuple(theory.halting_margin(i, config.alpha, threshold, table[i]) for i in range(config.tau_r))
        first = lambda margins: next((i for i, m in enumerate(margins) if m > 0), config.tau_r)
        return HaltingPrediction((1.0 - threshold) / (1.0 - table[0]), first(fresh), first(one_dim), fresh, one_dim)

    def uniform_halting(self) -> UniformPrediction:
        """Uniform data: balanced halving until a child falls below tau_e (Section 2.2.1)."""
        tau_r = self.config.tau_r
        halvings = math.log2(self.n / self.tau_e) if self.tau_e > 0 else math.inf  # children stay >= tau_e until then
        depth = tau_r if halvings >= tau_r else max(0, math.floor(halvings + 1e-9))
        return UniformPrediction(depth, halvings >= tau_r - 1e-9, math.isclose(halvings, tau_r))

    def alpha_window(
        self,
        xi: float,
        level: int = 0,
        separator_centreness: float = 1.0,
        cluster_emptiness: float | None = None,
        margin: float | None = None,
    ) -> AlphaWindow:
        """The alphas for which DPM prefers a (xi, rho)-separator with rho = beta (Section 4.3).

        A separator holding a share ``xi`` of the node's points in its interval has
        emptiness 1 - xi (Section 4.3: e = 1 - xi / n~) and centreness
        ``separator_centreness``. It must beat, by the margin ln(M) / B of ``level``,
        (a) a halting candidate, at most t_tau(level) + alpha: alpha <= (c_sep - t_tau - m) / xi;
        (b) the central split inside a cluster, 1 + alpha e_in (default e_c(0), one
        Gaussian with beta = sigma / 2): alpha >= (1 - c_sep + m) / (1 - xi - e_in).
        ``margin`` m defaults to ln(M) / B, at which one separator outweighs all M
        candidates together; 0 gives the paper's plain score comparison (Equation 21's m = 0).
        """
        if not 0 <= xi < 1:
            raise ValueError(f"xi must be the share of the node's points in the separator, in [0, 1), got {xi!r}")
        if not 0 <= level < self.config.tau_r:
            raise ValueError(f"level must be in [0, {self.config.tau_r}), got {level!r}")
        inside = theory.central_emptiness(0) if cluster_emptiness is None else cluster_emptiness
        if margin is None:
            margin = math.log(self.candidates) * self.levels[level].score_slack
        threshold = theory.halting_threshold(level, self.root_threshold)
        room = separator_centreness - threshold - margin
        high = (room / xi if xi > 0 else math.inf) if room >= 0 else -math.inf
        share = 1.0 - xi - inside
        low = (1.0 - separator_centreness + margin) / share if share > 0 else math.inf
        return AlphaWindow(max(low, 0.0), high, margin)

    def __str__(self) -> str:
        return "\n".join(_report_lines(self))


def _report_lines(plan_: Plan) -> list[str]:
    config = plan_.config
    rows = [
        f"DPM plan: n = {plan_.n:,.0f} (declared public), d = {plan_.d}, epsilon = {plan_.budget.epsilon:g}, "
        f"delta = {plan_.budget.delta:g}, tau_r = {config.tau_r}, alpha = {config.alpha:g}, "
        f"M = {plan_.candidates} split candidates per node",
        f"{'level':>5} {'nodes':>6} {'n_l':>10} {'eps_exp':>9} {'eps_cnt':>9} {'lambda':>8} {'Delta_f':>10} "
        f"{'B':>9} {'1/B':>8}  split",
    ]
    for level in plan_.levels:
        rows.append(
            f"{level.level:>5} {level.nodes:>6} {level.node_size:>10.1f} {level.split_epsilon:>9.4f} "
            f"{level.count_epsilon:>9.4f} {level.count_offset:>8.1f} {level.score_sensitivity:>10.3g} "
            f"{level.exponent_scale:>9.3g} {level.score_slack:>8.3g}  "
            f"{'near random' if level.near_random else 'informative'}"
        )
    reliable = plan_.max_reliable_k()
    most = min(2**config.tau_r, separation.MAX_MODEL_CLUSTERS)
    rows.append(
        f"balanced clusters separated (E(k) >= {separation.RELIABLE_SHARE:g} k): up to k = {reliable}; "
        f"{most} would need n * epsilon >= {plan_.min_n_epsilon(most):,.0f} "
        f"(now {plan_.n * plan_.budget.epsilon:,.0f})"
    )
    halting = plan_.single_cluster_halting()
    outcome = "halts at the root" if halting.halts_at_root else f"splits into about {halting.leaves} leaves"
    caveat = (
        f"; levels {plan_.useful_depth}.. are near random, where random empty splits halt nodes sooner"
        if plan_.useful_depth < halting.depth
        else ""
    )
    spread = "" if config.grid_shape.estimates_interval else " (sd 5 % of the range)"
    rows.append(
        f"one Gaussian cluster{spread}: {outcome} "
        f"(alpha = {config.alpha:g}; halting at the root needs alpha > {halting.alpha_needed_at_root:.3g}"
        f"{caveat})"
    )
    uniform = plan_.uniform_halting()
    if uniform.flagged:
        rows.append(
            "uniform data (no clusters): does not halt before the depth limit "
            f"({'on the boundary tau_e = n / 2**tau_r: ' if uniform.on_boundary else ''}"
            f"up to {2**config.tau_r} leaves); a larger tau_e or a smaller tau_r makes it halt"
        )
    return rows + [f"recommendation: {_advice(plan_, reliable)}"]


def _advice(plan_: Plan, reliable: int) -> str:
    depth, best = plan_.useful_depth, recommended_tau_r(plan_.n, plan_.d, plan_.budget, plan_.config)
    if reliable < 2:
        return (
            f"this budget cannot separate even two clusters at n = {plan_.n:,.0f}: two need n * epsilon >= "
            f"{plan_.min_n_epsilon(2):,.0f}; spend more epsilon or collect more data"
        )
    if best == 0:
        return "even the root split is near random: more epsilon or more data is needed"
    if depth < plan_.config.tau_r:
        return (
            f"levels {depth}..{plan_.config.tau_r - 1} draw near-random splits; tau_r = {best} gives their "
            f"budget to levels that can use it"
        )
    return f"every level's split can carry signal; the deepest such tau_r is {best}"


def plan(n: float, d: int, budget: Budget, config: DPMConfig = DPMConfig()) -> Plan:
    """The public per-level diagnostics of running DPM with ``budget`` on ``n`` points in ``d`` dimensions.

    ``n`` must be public: a number the user declares public, or the released root
    count n~ of a previous run. Nothing here reads data; the result costs no privacy.
    With ``tau_r="auto"``: the plan of the run ``"auto"`` makes when its noisy count is ``n``,
    i.e. at depth :func:`dpm_jax.depth.depth_rule` of ``n`` on the budget its count leaves.
    """
    if not (isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 and math.isfinite(n)):
        raise ValueError(f"n must be a positive finite number (a public size), got {n!r}")
    if not (isinstance(d, int) and not isinstance(d, bool) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    validate_budget_and_config(budget, config)
    if config.tau_r == AUTO_DEPTH:
        remaining = plan_depth(budget, config, d).remaining
        depth = depth_rule(n, d, remaining, config)
        fixed = config.at_depth(depth)
        if config.tau_e is None:  # the run's default tau_e (DPMConfig.leaf_slack, dpm_jax.tree.tree_inputs)
            fixed = dataclasses.replace(fixed, tau_e=n / 2 ** min(depth + config.tau_e_halvings, config.max_depth))
        return plan(n, d, remaining, fixed)
    allocation = allocate(budget, config, d)
    candidates = drawable_per_node(d, config)
    levels = []
    for level in range(config.tau_r):
        node_size = n / 2**level
        offset = allocation.count_offsets[level]
        scale = exponent_scale(allocation.split_epsilons[level], node_size, offset, config)
        levels.append(
            LevelPlan(
                level,
                2**level,
                node_size,
                allocation.split_epsilons[level],
                allocation.count_epsilons[level + 1],
                offset,
                allocation.split_epsilons[level] / (2.0 * scale),
                scale,
                near_random(scale, candidates, config),
            )
        )
    return Plan(float(n), d, budget, config, candidates, tuple(levels))


class InsufficientBudgetWarning(UserWarning):
    """The plan at a public size says the budget cannot separate even two clusters.

    Attributed to the caller's line; silence it with
    ``warnings.filterwarnings("ignore", category=dpm_jax.InsufficientBudgetWarning)``.
    """


def warn_if_insufficient(n: float, d: int, budget: Budget, config: DPMConfig, what: str) -> bool:
    """Warn (:class:`InsufficientBudgetWarning`) if :func:`plan` cannot separate two clusters at ``n``; True if so.

    ``n`` must be public: declared so by the user, or a released noisy count
    (``what`` names it in the message, e.g. "the released size n~"). Public inputs only, like :func:`plan`.
    """
    budget_plan = plan(max(float(n), 1.0), d, budget, config)
    if budget_plan.separates(2):
        return False
    report = f"; print(dpm_jax.diagnostics.plan({n:.0f}, {d}, budget, config)) for the report" if n >= 1 else ""
    warnings.warn(
        _insufficient_message(budget, budget_plan, n, what) + report,
        InsufficientBudgetWarning,
        stacklevel=user_stacklevel(),
    )
    return True


class LargeDeltaWarning(UserWarning):
    """delta >= 1/n: such a delta permits releasing a whole record."""


def warn_if_large_delta(n: float, budget: Budget, what: str) -> bool:
    """Warn (:class:`LargeDeltaWarning`) if ``budget.delta >= 1 / n``; True if so.

    A mechanism that publishes each record with probability delta is (0, delta)-DP, so
    delta >= 1/n allows publishing about one record outright (Dwork & Roth, Section 2.3).
    ``n`` must be public (``what`` names it), e.g. the released size n~.
    """
    if budget.delta < 1.0 / max(float(n), 1.0):
        return False
    warnings.warn(
        f"delta = {budget.delta:g} is at least 1/n for {what} = {n:,.0f}: such a delta permits releasing a "
        f"whole record; choose delta well below 1/n (the paper uses 1/(n sqrt n), here {_paper_delta(n):.2g})",
        LargeDeltaWarning,
        stacklevel=user_stacklevel(),
    )
    return True


def _paper_delta(n: float) -> float:
    n = max(float(n), 1.0)
    return 1.0 / (n * math.sqrt(n))


def _insufficient_message(budget: Budget, budget_plan: Plan, n: float, what: str) -> str:
    head = f"this budget (epsilon = {budget.epsilon:g}, delta = {budget.delta:g}) cannot separate even two clusters"
    if n < 1:
        return (
            f"{head}: {what} = {n:,.0f} is below 1 (the count noise at this epsilon is larger than the data); "
            "spend more epsilon or collect more data"
        )
    needed = budget_plan.min_n_epsilon(2)
    if math.isinf(needed):
        return (
            f"{head} at {what} = {n:,.0f}: no epsilon up to {_LARGEST_EPSILON:g} separates two clusters of "
            "this few points; collect more data"
        )
    return (
        f"{head} at {what} = {n:,.0f}: two balanced clusters need n * epsilon >= {needed:,.0f} "
        f"(now {n * budget.epsilon:,.0f})"
    )
