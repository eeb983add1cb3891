"""The privacy budget, its allocation over DPM's mechanisms and levels, and the ledger.

Paper (000_e63c772e1db0dbd8.txt):
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
Every entry of the ledger is one mechanism applied at one level to all nodes of that
level at once (parallel composition), so the entries add up exactly to the Budget.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from dpm_jax.config import DPMConfig, _is_real
from dpm_jax.mechanisms import count_offset

__all__ = ["Budget", "Allocation", "LedgerEntry", "Ledger", "allocate", "build_ledger",
           "heap_count_epsilons", "level_weights"]


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
            if not _is_real(value):
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
    """Equation 2's solution: weights sqrt(2**i) / sum_j sqrt(2**j), i < num_levels."""
    raw = [math.sqrt(2.0**i) for i in range(num_levels)]
    total = math.fsum(raw)
    return tuple(r / total for r in raw)


def _split_exactly(total: float, weights) -> tuple[float, ...]:
    """total * weights, with the last part absorbing rounding so the parts fsum to total."""
    parts = [total * w for w in weights[:-1]]
    parts.append(total - math.fsum(parts))
    return tuple(parts)


class Allocation(NamedTuple):
    """The budget of every mechanism of one DPM run (Algorithm 1, lines 4-6)."""

    interval_epsilon: float
    count_epsilons: tuple[float, ...]  # levels 0..tau_r
    split_epsilons: tuple[float, ...]  # levels 0..tau_r-1
    average_epsilon: float
    count_deltas: tuple[float, ...]  # levels 0..tau_r
    average_delta: float
    count_offsets: tuple[float, ...]  # lambda_i, Equation 1


def allocate(budget: Budget, config: DPMConfig) -> Allocation:
    """Split ``budget`` over DPM's mechanisms and levels; the parts add up to it."""
    eps_int_share, eps_cnt_share, eps_exp_share, _ = config.epsilon_shares
    eps_int = budget.epsilon * eps_int_share
    eps_cnt = budget.epsilon * eps_cnt_share
    eps_exp = budget.epsilon * eps_exp_share
    eps_avg = budget.epsilon - math.fsum([eps_int, eps_cnt, eps_exp])
    delta_cnt = budget.delta * config.delta_shares[0]
    delta_avg = budget.delta - delta_cnt

    count_epsilons = _split_exactly(eps_cnt, level_weights(config.tau_r + 1))
    split_epsilons = _split_exactly(eps_exp, level_weights(config.tau_r))
    count_deltas = _split_exactly(delta_cnt, [1.0 / (config.tau_r + 1)] * (config.tau_r + 1))
    count_offsets = tuple(count_offset(e, d) for d, e in zip(count_deltas, count_epsilons))
    return Allocation(eps_int, count_epsilons, split_epsilons, eps_avg, count_deltas, delta_avg,
                      count_offsets)


def heap_count_epsilons(allocation: Allocation) -> tuple[float, ...]:
    """epsilon_cnt of every tree node in heap layout (node i is at level floor(log2 i)).

    Element 0 is unused padding (given level 0's value so the array stays positive).
    """
    levels = len(allocation.count_epsilons)
    per_node = [allocation.count_epsilons[0]]
    for level in range(levels):
        per_node.extend([allocation.count_epsilons[level]] * 2**level)
    return tuple(per_node)


class LedgerEntry(NamedTuple):
    """One mechanism applied at one level (to all disjoint nodes of that level).

    ``sensitivity`` is the numeric bound where it is data-independent and ``None``
    where it depends on the released noisy counts; ``sensitivity_rule`` always says
    how it is computed. ``key_path`` is the argument list of
    :func:`dpm_jax.mechanisms.derive_key` that re-derives the entry's random key.
    """

    name: str
    mechanism: str
    level: int | None
    epsilon: float
    delta: float
    sensitivity: float | None
    sensitivity_rule: str
    noise_scale: float | None
    key_path: tuple


class Ledger(tuple):
    """The privacy ledger of one run: a tuple of :class:`LedgerEntry`."""

    @property
    def total_epsilon(self) -> float:
        return math.fsum(e.epsilon for e in self)

    @property
    def total_delta(self) -> float:
        return math.fsum(e.delta for e in self)

    def table(self) -> str:
        """A plain-text table, one line per entry."""
        header = f"{'entry':<16}{'mechanism':<18}{'epsilon':>10}{'delta':>11}  {'sensitivity':<46}{'noise scale':>12}  key path"
        lines = [header, "-" * len(header)]
        for e in self:
            scale = "-" if e.noise_scale is None else f"{e.noise_scale:.4g}"
            sens = e.sensitivity_rule if e.sensitivity is None else f"{e.sensitivity:.4g} ({e.sensitivity_rule})"
            lines.append(f"{e.name:<16}{e.mechanism:<18}{e.epsilon:>10.5g}{e.delta:>11.3g}  {sens:<46.46}{scale:>12}  {e.key_path}")
        lines.append(f"{'total':<34}{self.total_epsilon:>10.5g}{self.total_delta:>11.3g}")
        return "\n".join(lines)

    def to_dicts(self) -> list[dict]:
        """JSON-ready list of entries."""
        return [dict(e._asdict(), key_path=list(e.key_path)) for e in self]

    def __repr__(self) -> str:
        return f"Ledger(total_epsilon={self.total_epsilon!r}, total_delta={self.total_delta!r}, entries={len(self)})"


def build_ledger(allocation: Allocation, config: DPMConfig, average_sensitivity: float | None,
                 average_sigma_per_unit: float) -> Ledger:
    """One entry per mechanism per level, in the order Algorithm 1 runs them.

    Args:
      allocation: from :func:`allocate`.
      config: the hyper-parameters (t, q, alpha enter the split sensitivity).
      average_sensitivity: L2 sensitivity of a leaf sum, or None when the bounds
        are traced (then only the rule is recorded).
      average_sigma_per_unit: analytic Gaussian sigma for unit sensitivity.
    """
    score_numerator = config.t / config.q + config.alpha  # Lemma 5: (t/q + alpha) / (n~ - lambda)
    entries = [
        LedgerEntry("count/level0", "discrete_laplace", 0, allocation.count_epsilons[0],
                    allocation.count_deltas[0], 1.0,
                    f"count; offset lambda={allocation.count_offsets[0]:.4g}",
                    1.0 / allocation.count_epsilons[0], ("count", "heap[1]")),
        LedgerEntry("interval_size", "exponential", None, allocation.interval_epsilon, 0.0, 2.0,
                    "gap-count utility (Lemma 1)", None, ("interval",)),
    ]
    for level in range(config.tau_r):
        entries.append(LedgerEntry(
            f"split/level{level}", "exponential", level, allocation.split_epsilons[level], 0.0,
            None, f"{score_numerator:.4g}/max(n~-{allocation.count_offsets[level]:.4g},1)", None,
            ("split", f"heap[{2**level}:{2**(level + 1)}]")))
        entries.append(LedgerEntry(
            f"count/level{level + 1}", "discrete_laplace", level + 1, allocation.count_epsilons[level + 1],
            allocation.count_deltas[level + 1], 1.0,
            f"count; offset lambda={allocation.count_offsets[level + 1]:.4g}",
            1.0 / allocation.count_epsilons[level + 1],
            ("count", f"heap[{2**(level + 1)}:{2**(level + 2)}]")))
    scale = None if average_sensitivity is None else average_sensitivity * average_sigma_per_unit
    entries.append(LedgerEntry(
        "leaf_sums", "gaussian", None, allocation.average_epsilon, allocation.average_delta,
        average_sensitivity, f"L2 of (point - middle); sigma={average_sigma_per_unit:.4g}x",
        scale, ("average",)))
    return Ledger(entries)
