"""The privacy budget and its allocation over DPM's mechanisms and levels.

The ledger's lines are stated by the releases built from the allocation (:mod:`dpm_jax.dpm_releases`).

Paper ("DPM: Clustering Sensitive Data through Separation"):
  * Section 3.3, Equation 2: within the counts (and within the split choices) the
    level-i budget is proportional to sqrt(2**i) (Algorithm 1, lines 4-5).
  * Equation 1: the count offset lambda_i with P[n~ - lambda_i > |S|] <= delta_cnt_i
    (:func:`dpm_jax.mechanisms.count_offset`).
  * Section 4.4, Corollary 4 and Theorem 1: sequential composition over levels and
    mechanisms, parallel composition over the disjoint nodes of one level.
  * Section 6.1: the default shares 0.04/0.18/0.18/0.6 of epsilon and 0.2/0.8 of delta.

Accounting used here (basic composition, add/remove-one neighbours):
  epsilon = eps_int + sum_i eps_cnt_i (tau_r + 1 levels) + sum_i eps_exp_i (tau_r levels)
            + eps_avg
  delta   = sum_i delta_cnt_i (tau_r + 1 levels, equal parts) + delta_avg
            + the samplers' deltas (counts, splits, interval size; carved out of the
              count share; the averaging sampler's is inside delta_avg)
With ``DPMConfig.split_grid="cell"`` Algorithm 2 does not run: eps_int = 0 and its
share of epsilon goes to the split choices (eps_exp = (share_int + share_exp) epsilon), and
``DPMConfig.structure_share`` of the averaging's epsilon goes to the "no structure" tests
(:mod:`dpm_jax.structure`), one per split level with weights 2**-i (:func:`structure_weights`):
  epsilon = ... + sum_i eps_str_i (tau_r levels) + eps_avg, their sampler deltas carved out of
  the count share like the others'; likewise ``DPMConfig.merge_share`` of it goes to the merge's
  valley statistics (:mod:`dpm_jax.merge`), level i weighted i + 1 (:func:`merge_weights`).
Every entry of the ledger is one mechanism applied at one level to all nodes of that
level at once (parallel composition), so the entries add up exactly to the Budget.
"""

from __future__ import annotations

import functools

import dataclasses
import math
from typing import NamedTuple

from dpm_jax.config import DPMConfig, is_real_number
from dpm_jax.releases import at_most, proportional_parts
from dpm_jax.mechanisms import (
    EM_EPSILON_MARGIN,
    EM_MAX_CANDIDATES,
    count_offset,
    count_sampler_tv,
    em_sampler_tv,
    tv_delta,
)

__all__ = ["Budget", "Allocation", "allocate", "heap_count_epsilons"]


@dataclasses.dataclass(frozen=True)
class Budget:
    """A total (epsilon, delta)-DP budget for one call of :func:`dpm_jax.cluster`.

    Hashable, so it can be a static argument of ``jax.jit``.
    """

    epsilon: float
    delta: float

    def __post_init__(self):
        for name in ("epsilon", "delta"):
            value = getattr(self, name)
            if not is_real_number(value):
                raise TypeError(f"Budget.{name} must be a real number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"Budget.{name} must be finite, got {value}")
        if self.epsilon <= 0:
            raise ValueError(f"Budget.epsilon must be > 0, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise ValueError(f"Budget.delta must be in (0, 1), got {self.delta}")
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))


def level_weights(num_levels: int) -> tuple[float, ...]:
    """Equation 2's solution: level i < num_levels gets a share proportional to sqrt(2**i)."""
    return tuple(math.sqrt(2.0**i) for i in range(num_levels))


def structure_weights(num_levels: int) -> tuple[float, ...]:
    """The "no structure" tests' shares (:mod:`dpm_jax.structure`): level i gets 2**-i.

    Not Equation 2's sqrt(2**i): a test's power and its false-halt probability depend on
    epsilon_l theta_l, and theta_l (a window's share of the node's released count) halves
    with every level, so sqrt(2**i) weights gave the root the least; there a false halt
    ends the whole run at k = 1. Halving weights keep epsilon_l theta_l largest at the root
    and level 1, where uniform data must halt, and let the public gate switch off the levels
    where the test would be a coin toss.
    """
    return tuple(2.0**-i for i in range(num_levels))


# The merge's valley statistic S = 2 W - min(L, R) moves by at most 2 per record (dpm_jax.merge):
# defined here, where the sampler deltas are charged, and read by dpm_jax.merge.
MERGE_SENSITIVITY = 2


def merge_weights(num_levels: int) -> tuple[float, ...]:
    """The merge's shares (:mod:`dpm_jax.merge`): level i gets i + 1.

    A merge is blocked by a valley anywhere below its root, so the deeper levels' statistics decide
    as much as the root's, and a deeper node holds fewer points: growing weights keep the noise
    of a deep split's statistic from hiding its valley (chosen on ``benchmarks/merge_probe.py``).
    """
    return tuple(float(i + 1) for i in range(num_levels))


class Allocation(NamedTuple):
    """The budget of every mechanism of one DPM run (Algorithm 1, lines 4-6).

    Every delta here is spent by exactly one ledger entry; the sampler deltas pay
    for the (bounded, proven) distance of each exact sampler from its ideal
    distribution (:mod:`dpm_jax.mechanisms`), and are carved out of the count share.
    """

    interval_epsilon: float
    count_epsilons: tuple[float, ...]  # levels 0..tau_r
    split_epsilons: tuple[float, ...]  # levels 0..tau_r-1
    average_epsilon: float
    count_deltas: tuple[float, ...]  # levels 0..tau_r: the offsets' P[n~ - lambda > |S|]
    average_delta: float  # includes the averaging sampler's delta (dpm_jax.averaging)
    count_offsets: tuple[float, ...]  # lambda_i, Equation 1
    count_sampler_deltas: tuple[float, ...]  # levels 0..tau_r
    split_sampler_deltas: tuple[float, ...]  # levels 0..tau_r-1
    interval_sampler_delta: float
    structure_epsilons: tuple[float, ...] = ()  # levels 0..tau_r-1 (dpm_jax.structure); () without the test
    structure_sampler_deltas: tuple[float, ...] = ()
    merge_epsilons: tuple[float, ...] = ()  # levels 0..tau_r-1 (dpm_jax.merge); () without the merge
    merge_sampler_deltas: tuple[float, ...] = ()


# A budget whose samplers would need more than this share of the count delta is
# refused: it means an epsilon so large (or delta so small) that an exact sampler's
# deviation, multiplied by e^epsilon, is no longer negligible.
_MAX_SAMPLER_SHARE = 0.01


def validate_budget_and_config(budget, config) -> None:
    """A TypeError unless ``budget`` is a :class:`Budget` and ``config`` a :class:`DPMConfig`."""
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dpm_jax.Budget, got {type(budget).__name__}")
    if not isinstance(config, DPMConfig):
        raise TypeError(f"config must be a dpm_jax.DPMConfig, got {type(config).__name__}")


@functools.lru_cache(maxsize=64)
def allocate(budget: Budget, config: DPMConfig, d: int) -> Allocation:
    """Split ``budget`` over DPM's mechanisms and levels for d dimensions; the parts add up to it.

    Raises ValueError for degenerate budgets (see _MAX_SAMPLER_SHARE and the
    exponential mechanism's epsilon margin).
    """
    if isinstance(config.tau_r, str):
        raise ValueError(f"tau_r={config.tau_r!r} must be resolved to a depth first (dpm_jax.cluster does)")
    eps_int_share, eps_cnt_share, eps_exp_share, _ = config.epsilon_shares
    interval = config.grid_shape.estimates_interval
    if not interval:
        eps_int_share, eps_exp_share = 0.0, eps_int_share + eps_exp_share
    eps_int = budget.epsilon * eps_int_share
    eps_cnt = budget.epsilon * eps_cnt_share
    eps_exp = budget.epsilon * eps_exp_share
    eps_str = budget.epsilon * config.epsilon_shares[3] * config.structure_share if config.tests_structure else 0.0
    eps_merge = budget.epsilon * config.epsilon_shares[3] * config.merge_share if config.merges_leaves else 0.0
    eps_avg = budget.epsilon - math.fsum([eps_int, eps_cnt, eps_exp, eps_str, eps_merge])
    delta_cnt = budget.delta * config.delta_shares[0]
    delta_avg = budget.delta - delta_cnt

    count_epsilons = proportional_parts(eps_cnt, level_weights(config.tau_r + 1))
    split_epsilons = proportional_parts(eps_exp, level_weights(config.tau_r))
    structure_epsilons = proportional_parts(eps_str, structure_weights(config.tau_r)) if eps_str > 0 else ()
    merge_epsilons = proportional_parts(eps_merge, merge_weights(config.tau_r)) if eps_merge > 0 else ()
    candidates = _checked_selections([("interval size", eps_int)] * interval, split_epsilons, d, config)
    count_sampler = tuple(tv_delta(count_sampler_tv(e), e) for e in count_epsilons)
    split_sampler = tuple(tv_delta(em_sampler_tv(candidates), e) for e in split_epsilons)
    interval_sampler = tv_delta(em_sampler_tv(config.num_sigmas), eps_int) if interval else 0.0
    structure_sampler = tuple(tv_delta(count_sampler_tv(e), e) for e in structure_epsilons)
    # Sensitivity 2: noise of epsilon / 2, charged as CountRelease.sampler_delta charges it.
    merge_sampler = tuple(
        tv_delta(MERGE_SENSITIVITY * count_sampler_tv(e / MERGE_SENSITIVITY), e) for e in merge_epsilons
    )
    sampler_total = math.fsum(count_sampler + split_sampler + (interval_sampler,) + structure_sampler + merge_sampler)
    if not sampler_total <= _MAX_SAMPLER_SHARE * delta_cnt:
        # The samplers' share depends on the epsilons and d only, so this delta is enough (raised by
        # 0.5 % so that its 3 printed digits never round below it):
        least_delta = sampler_total / (_MAX_SAMPLER_SHARE * config.delta_shares[0]) * 1.005
        raise ValueError(
            f"degenerate budget: at epsilon {budget.epsilon:.4g} and d = {d} the samplers' deviation from "
            f"their ideal distributions, multiplied by e^epsilon, would need delta {sampler_total:.3g}, more "
            f"than {_MAX_SAMPLER_SHARE:.0%} of the count delta {delta_cnt:.3g}; raise delta to at least "
            f"{least_delta:.3g}, or lower epsilon (per level count epsilons above about 20 cannot be "
            "sampled exactly; the split samplers' deviation grows with d)"
        )
    offset_delta = delta_cnt - sampler_total
    count_deltas = proportional_parts(offset_delta, [1.0] * (config.tau_r + 1))
    count_offsets = tuple(count_offset(e, d_) for d_, e in zip(count_deltas, count_epsilons))
    # The averaging takes what is left, rounded down until the ledger's lines (as
    # the releases of dpm_jax.dpm_releases state them) add up to no more
    # than the budget: float rounding of the parts must never spend more than the user gave.
    lines = [eps_int, *count_epsilons, *split_epsilons, *structure_epsilons, *merge_epsilons]
    eps_avg = at_most(budget.epsilon, lines, eps_avg)
    delta_lines = [c + s for c, s in zip(count_deltas, count_sampler)] + [
        *split_sampler,
        interval_sampler,
        *structure_sampler,
        *merge_sampler,
    ]
    delta_avg = at_most(budget.delta, delta_lines, delta_avg)
    return Allocation(
        eps_int,
        count_epsilons,
        split_epsilons,
        eps_avg,
        count_deltas,
        delta_avg,
        count_offsets,
        count_sampler,
        split_sampler,
        interval_sampler,
        structure_epsilons,
        structure_sampler,
        merge_epsilons,
        merge_sampler,
    )


def _checked_selections(interval: list, split_epsilons: tuple[float, ...], d: int, config: DPMConfig) -> int:
    """The split choices' candidates per node; a ValueError where an exponential mechanism's epsilon
    (``interval``: [("interval size", epsilon)] or []) is within its margin, or the candidates too many."""
    for name, epsilon in interval + [(f"split level {i}", e) for i, e in enumerate(split_epsilons)]:
        if epsilon <= 2 * EM_EPSILON_MARGIN:
            raise ValueError(
                f"the {name} epsilon {epsilon:.3g} is too small for the exact "
                f"exponential mechanism (margin {EM_EPSILON_MARGIN:.2g}); raise epsilon"
            )
    candidates = d * config.grid_shape.candidates_per_dim
    if candidates > EM_MAX_CANDIDATES:
        raise ValueError(
            f"d * candidates per dimension = {candidates} split candidates per node exceed "
            f"{EM_MAX_CANDIDATES}; lower max_splits_per_dim"
        )
    return candidates


def heap_count_epsilons(allocation) -> tuple[float, ...]:
    """epsilon_cnt of every tree node in heap layout (node i is at level floor(log2 i)), from
    ``allocation.count_epsilons`` (an :class:`Allocation` or :class:`dpm_jax.dpm_releases.DPMReleases`).

    Element 0 is unused padding (given level 0's value so the array stays positive).
    """
    levels = len(allocation.count_epsilons)
    per_node = [allocation.count_epsilons[0]]
    for level in range(levels):
        per_node.extend([allocation.count_epsilons[level]] * 2**level)
    return tuple(per_node)
