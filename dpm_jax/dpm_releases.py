"""DPM's releases: the mechanisms of Algorithm 1 as release objects, built from an allocation.

Paper ("DPM: Clustering Sensitive Data through Separation"): every DP output of one run
is one release (:mod:`dpm_jax.releases`), holding the parameters the engine draws with
and stating its ledger line from them:

* the node counts of every level, shifted by lambda_l (Algorithm 1, lines 7 and 16-17;
  Equation 1): :class:`dpm_jax.releases.CountRelease` with ``offset`` lambda_l and the
  ``offset_delta`` P[n~ - lambda_l > |S|] it pays, rows ``heap_rows(l)`` of the count stream;
* the split interval size (line 8, Algorithm 2; not on the cell grid): a
  :class:`dpm_jax.releases.SelectionRelease` over ``num_sigmas`` candidates with the
  integer utility's sensitivity (Lemma 1, in 2**-10 units);
* the split choice of every level (lines 22-25, Definition 7, Lemma 5): a
  :class:`dpm_jax.releases.SelectionRelease` with the integer score's sensitivity;
* the "no structure" test of every level (not in the paper, :mod:`dpm_jax.structure`): a
  :class:`dpm_jax.releases.CountRelease` of the drawn split's window count, sensitivity 1;
* the merge's valley statistic of every level (not in the paper, :mod:`dpm_jax.merge`): a
  :class:`dpm_jax.releases.CountRelease` of 2 W - min(L, R) at the drawn split, sensitivity 2;
* the leaf sums (line 11, Section 3.4): :class:`dpm_jax.averaging.LeafSumsRelease`;
* under ``tau_r="auto"`` the depth's count (:mod:`dpm_jax.depth`).

The engine reads the epsilons, offsets and sensitivities it draws with from these objects
(:func:`dpm_jax.tree.level_schedule`, :func:`dpm_jax.tree.level_count_noise`, the interval's
and the averaging's draws), and the run's ledger is the list of their lines,
:meth:`DPMReleases.ledger`; :func:`dpm_jax.diagnostics.explain` reads them back.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from dpm_jax import keys
from dpm_jax.averaging import LeafSumsRelease
from dpm_jax.budget import MERGE_SENSITIVITY, Allocation
from dpm_jax.config import DPMConfig
from dpm_jax.interval import num_interval_dimensions, utility_sensitivity
from dpm_jax.ledger import Ledger, heap_rows
from dpm_jax.releases import CountRelease, SelectionRelease, ledger_of
from dpm_jax.scoring import score_coefficients

__all__ = ["DPMReleases", "dpm_releases"]


class DPMReleases(NamedTuple):
    """The releases of one DPM run at one depth; hashable (part of a static jit argument)."""

    counts: tuple[CountRelease, ...]  # node counts of levels 0..depth (level 0: the root, line 7)
    interval: SelectionRelease | None  # Algorithm 2; None on the cell grid
    splits: tuple[SelectionRelease, ...]  # split choices of levels 0..depth-1
    leaf_sums: LeafSumsRelease
    depth_count: CountRelease | None = None  # tau_r="auto": the count the depth is chosen from
    structures: tuple[CountRelease, ...] = ()  # "no structure" tests of levels 0..depth-1; () when off
    merges: tuple[CountRelease, ...] = ()  # the merge's valley statistics of levels 0..depth-1; () when off

    @property
    def depth(self) -> int:
        return len(self.splits)

    @property
    def count_epsilons(self) -> tuple[float, ...]:
        """The discrete Laplace parameter of every level's counts (epsilon / sensitivity)."""
        return tuple(count.noise_epsilon for count in self.counts)

    @property
    def count_offsets(self) -> tuple[float, ...]:
        """lambda_l of every level's counts (Equation 1)."""
        return tuple(count.offset for count in self.counts)

    @property
    def split_epsilons(self) -> tuple[float, ...]:
        return tuple(split.epsilon for split in self.splits)

    @property
    def structure_epsilons(self) -> tuple[float, ...]:
        """The "no structure" tests' epsilon per level (:mod:`dpm_jax.structure`); () when off."""
        return tuple(test.epsilon for test in self.structures)

    @property
    def merge_epsilons(self) -> tuple[float, ...]:
        """The merge's valley statistics' epsilon per level (:mod:`dpm_jax.merge`); () when off."""
        return tuple(merge.epsilon for merge in self.merges)

    @property
    def split_sensitivity(self) -> int:
        """The integer score's sensitivity the split choices draw with (the same at every level)."""
        (sensitivity,) = {split.sensitivity for split in self.splits}
        return sensitivity

    def in_order(self) -> list:
        """The releases in the order Algorithm 1 runs them (the ledger's order)."""
        root, *children = self.counts
        order = [self.depth_count] if self.depth_count is not None else []
        order += [root] + ([self.interval] if self.interval is not None else [])
        tests = self.structures or (None,) * len(self.splits)
        merges = self.merges or (None,) * len(self.splits)
        for split, test, merge, child_counts in zip(self.splits, tests, merges, children):
            order += [split] + [r for r in (test, merge) if r is not None] + [child_counts]
        return order + [self.leaf_sums]

    def ledger(self) -> Ledger:
        """The run's ledger: the lines of :meth:`in_order` (one object per releases, memoised)."""
        return _ledger(self)


@functools.lru_cache(maxsize=256)
def _ledger(releases: DPMReleases) -> Ledger:
    return ledger_of(releases.in_order())


def dpm_releases(
    allocation: Allocation, config: DPMConfig, d: int, leaf_sums: LeafSumsRelease, count_row: int | None = None
) -> DPMReleases:
    """The releases of ``allocation`` (:func:`dpm_jax.budget.allocate`) at depth ``config.tau_r``.

    ``count_row``: under ``tau_r="auto"`` the row of the per-depth count draw this depth's
    counts use (:func:`dpm_jax.tree.level_count_noise`), part of their key paths.
    """
    counts = tuple(_node_counts(allocation, level, count_row) for level in range(config.tau_r + 1))
    sensitivity = score_coefficients(config.t, config.q, config.alpha).sensitivity
    splits = tuple(
        SelectionRelease(
            f"split/level{level}",
            allocation.split_epsilons[level],
            keys.SPLIT,
            sensitivity,
            d * config.grid_shape.candidates_per_dim,
            rows=heap_rows(level),
            level=level,
            rule=f"integer score x min(1,(n~-{allocation.count_offsets[level]:.4g})/N)",
        )
        for level in range(config.tau_r)
    )
    structures = tuple(
        CountRelease(
            f"structure/level{level}",
            epsilon,
            keys.STRUCTURE,
            rows=heap_rows(level) if count_row is None else (f"row {count_row}", heap_rows(level)),
            level=level,
            rule="min over a node's inner windows of count - threshold (disjoint nodes); only the halt bit is released",
        )
        for level, epsilon in enumerate(allocation.structure_epsilons)
    )
    merges = tuple(
        CountRelease(
            f"merge/level{level}",
            epsilon,
            keys.MERGE,
            sensitivity=MERGE_SENSITIVITY,
            rows=heap_rows(level) if count_row is None else (f"row {count_row}", heap_rows(level)),
            level=level,
            rule="2 W - min(L, R) at the drawn split (disjoint nodes); the merge is post-processing",
        )
        for level, epsilon in enumerate(allocation.merge_epsilons)
    )
    interval = _interval(allocation, config, d)
    return DPMReleases(counts, interval, splits, leaf_sums, structures=structures, merges=merges)


def _node_counts(allocation: Allocation, level: int, count_row: int | None) -> CountRelease:
    """The counts of ``level``'s nodes: sensitivity 1 (disjoint nodes), shifted by lambda_l."""
    rows = heap_rows(level) if count_row is None else (f"row {count_row}", heap_rows(level))
    offset = allocation.count_offsets[level]
    return CountRelease(
        f"count/level{level}",
        allocation.count_epsilons[level],
        keys.COUNT,
        rows=rows,
        level=level,
        offset_delta=allocation.count_deltas[level],
        rule=f"count of disjoint nodes; offset lambda={offset:.4g}",
        offset=offset,
    )


def _interval(allocation: Allocation, config: DPMConfig, d: int) -> SelectionRelease | None:
    """Algorithm 2's release (Lemma 1: sensitivity 2 d' gap counts, in the utility's 2**-10 units)."""
    if not config.grid_shape.estimates_interval:
        return None
    num_dims = num_interval_dimensions(d, config.interval_max_dims)
    return SelectionRelease(
        "interval_size",
        allocation.interval_epsilon,
        keys.INTERVAL,
        utility_sensitivity(num_dims),
        config.num_sigmas,
        rule=f"gap counts summed over {num_dims} dims (Lemma 1), units of 2**-10",
    )
