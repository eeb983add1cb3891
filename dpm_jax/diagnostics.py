"""Know before you spend: what a budget lets DPM do at each level of the tree.

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
heuristic read of the exponential mechanism, not a theorem of the theory paper
("Understanding the Theoretical Guarantees of DPM"); its halting and separability
analyses are not implemented here yet.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from dpm_jax.budget import Budget, allocate
from dpm_jax.config import DPMConfig

__all__ = ["LevelPlan", "Plan", "plan", "recommended_tau_r"]

_MAX_RECOMMENDED_DEPTH = 12


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

    def __str__(self) -> str:
        header = (f"DPM plan: n = {self.n:,.0f} (declared public), d = {self.d}, epsilon = "
                  f"{self.budget.epsilon:g}, delta = {self.budget.delta:g}, tau_r = {self.config.tau_r}, "
                  f"M = {self.candidates} split candidates per node")
        rows = [header, f"{'level':>5} {'nodes':>6} {'n_l':>10} {'eps_exp':>9} {'eps_cnt':>9} "
                        f"{'lambda':>8} {'Delta_f':>10} {'B':>9}  split"]
        for level in self.levels:
            rows.append(f"{level.level:>5} {level.nodes:>6} {level.node_size:>10.1f} {level.split_epsilon:>9.4f} "
                        f"{level.count_epsilon:>9.4f} {level.count_offset:>8.1f} {level.score_sensitivity:>10.3g} "
                        f"{level.exponent_scale:>9.3g}  {'near random' if level.near_random else 'informative'}")
        depth = self.useful_depth
        best = recommended_tau_r(self.n, self.d, self.budget, self.config)
        if best == 0:
            advice = ("even the root split is near random: more epsilon or more data is needed before "
                      "DPM can separate two clusters")
        elif depth < self.config.tau_r:
            advice = (f"levels {depth}..{self.config.tau_r - 1} draw near-random splits; tau_r = {best} "
                      "gives their budget to levels that can use it")
        else:
            advice = f"every level's split can carry signal; the deepest such tau_r is {best}"
        return "\n".join(rows + [f"recommendation: {advice} (heuristic, see dpm_jax.diagnostics)"])


def plan(n: float, d: int, budget: Budget, config: DPMConfig = DPMConfig()) -> Plan:
    """The public per-level diagnostics of running DPM with ``budget`` on ``n`` points in ``d`` dimensions.

    ``n`` must be public: a number the user declares public, or the released root
    count n~ of a previous run. Nothing here reads data; the result costs no privacy.
    """
    if not (isinstance(n, (int, float)) and n > 0 and math.isfinite(n)):
        raise ValueError(f"n must be a positive finite number (a public size), got {n!r}")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    allocation = allocate(budget, config, d)
    slope = config.t / config.q + config.alpha
    candidates = d * min(math.ceil(1.0 / config.finest_interval - 1e-6), config.max_splits_per_dim)
    levels = []
    for level in range(config.tau_r):
        node_size = n / 2**level
        offset = allocation.count_offsets[level]
        sensitivity = slope / max(node_size - offset, 1.0)
        scale = allocation.split_epsilons[level] / (2.0 * sensitivity)
        levels.append(LevelPlan(level, 2**level, node_size, allocation.split_epsilons[level],
                                allocation.count_epsilons[level + 1], offset, sensitivity, scale,
                                scale * (config.t + config.alpha) < math.log(candidates)))
    return Plan(float(n), d, budget, config, candidates, tuple(levels))


def recommended_tau_r(n: float, d: int, budget: Budget, config: DPMConfig = DPMConfig()) -> int:
    """The largest depth tau_r (<= 12) at which :func:`plan` finds no near-random level; 0 if none.

    A smaller tau_r gives each level more budget, so the search runs over tau_r itself.
    Measured against the depth that clusters best in benchmarks/diagnostics.py (results
    in benchmarks/results/diagnostics.json). Public inputs only, like :func:`plan`.
    """
    best = 0
    for tau_r in range(1, _MAX_RECOMMENDED_DEPTH + 1):
        try:
            candidate = plan(n, d, budget, dataclasses.replace(config, tau_r=tau_r))
        except ValueError:  # a budget the exact samplers cannot certify at this depth
            break
        if candidate.useful_depth == tau_r:
            best = tau_r
    return best
