"""``dpm_jax.kmeans``: DP k-means and k-median with a given k, the unified greedy
("Making Old Things New: A Unified Algorithm for Differentially Private Clustering",
central model: Algorithm 1 with the exponential mechanism, Section 5.1; the lift, Lemma
2.2; the private elbow, Section A.3).

Pipeline (each DP step a release of :mod:`dpm_jax.releases`, one ledger line each):
  1. working coordinates: the data mapped to [0, 1]^d by the public bounds; when d >
     ``grid_dim`` projected to [0, 1]^m by a data-independent orthonormal projection
     (public seed), y = 1/2 + Q^T (u - 1/2) / sqrt(d) (|Q^T v| <= |v| <= sqrt(d) / 2).
  2. the greedy (:mod:`dpm_jax.greedy.select`), by ``method``: "exponential": k (1 + L)
     exponential mechanisms, one zCDP-composed line ("greedy_select"); "histogram": every
     ball value of levels 0 .. L released once with discrete Gaussian noise
     (:mod:`dpm_jax.greedy.histogram`, Section 4; "greedy_histogram"), the greedy by arg
     max on it (post-processing).
  3. the lift (:mod:`dpm_jax.greedy.lift`): noisy cell sizes ("greedy_count") and noisy
     fixed-point sums in the original coordinates ("greedy_sum", rows "center_sums").
  4. the prefix order (``order``): "greedy" (default) keeps the greedy's order of selection;
     "weighted" re-orders the released centres by a weighted greedy on the release alone
     (:mod:`dpm_jax.greedy.order`, post-processing).
  5. the cost curve of the first k' greedy centres in that order ("greedy_sum", rows
     "cost_curve"), and the elbow read from it (post-processing).
The shares of the budget are SHARES; the parts add up to the budget (``split_budget``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import bounds as bounds_lib
from dpm_jax import keys
from dpm_jax._arrays import map_row_blocks, ordered_matmul, to_unit_range, unfused_multiply_add
from dpm_jax.api import em_table_on_device, gaussian_thresholds_on_device, public_bounds, validated_input
from dpm_jax.averaging import LeafSumsRelease, leaf_sums_release
from dpm_jax.budget import Budget
from dpm_jax.entry import entry_point
from dpm_jax import exact
from dpm_jax.greedy.lift import cost_unit, exact_costs, lift_exact, lift_private, nearest, private_costs
from dpm_jax.greedy.nets import (
    MAX_POINTS,
    VALUE_BITS,
    NetPlan,
    child_offsets,
    level_values,
    plan_nets,
    start_candidates,
)
from dpm_jax.greedy.histogram import check_balls, histogram_release, histogram_scores, noisy_values
from dpm_jax.greedy.order import prefix_centers, prefix_order
from dpm_jax.greedy.select import argmax_chooser, greedy_centers, point_scores
from dpm_jax.ledger import Ledger
from dpm_jax.releases import ComposedSelectionRelease, CountRelease, GaussianRelease, at_most, ledger_of, split_budget

__all__ = [
    "KMeansResult",
    "GreedyPlan",
    "plan_greedy",
    "kmeans",
    "elbow",
    "SHARES",
    "ELBOW_GAIN",
    "METHODS",
    "DEFAULT_METHOD",
    "ORDERS",
    "DEFAULT_ORDER",
]

# (select, count, sum, cost) shares of epsilon; of delta (the count spends only its sampler's).
SHARES = (0.6, 0.05, 0.25, 0.1)
DELTA_SHARES = (0.4, 0.0, 0.4, 0.2)
ELBOW_GAIN = 0.2  # the elbow: the first k' after which one more centre lowers the cost by less than this
ELBOW_NOISE = 2.0
# epsilon of a start selection : of a descent step (a start chooses among up to 2**17 balls,
# a step among the 16 children in 2-d: the noise's maximum grows like ln(candidates) / epsilon)
START_RATIO = (4.0, 1.0)
DEFAULT_LEVELS = 10
MAX_LEVELS = 20
MAX_GRID_DIM = 2
METHODS = ("exponential", "histogram")
# the default from evidence: the same-run comparison in docs/greedy.md ("Which to use"), where the
# histogram is level on 2-d blobs and far ahead on Synth-10d and the elbow at K = 32
DEFAULT_METHOD = "histogram"
ORDERS = ("greedy", "weighted")
# the default from evidence: docs/greedy.md, "Round 5": the weighted order's curve has small last drops
# and its private elbow misses K = 32 on one of 6 data sets; KMeansResult.prefix uses the weighted
# order whatever the run returned, so the prefixes are as good under the default
DEFAULT_ORDER = "greedy"


@dataclasses.dataclass(frozen=True)
class KMeansResult:
    """Output of :func:`kmeans`; a JAX pytree (the ledger is static metadata).

    Differentially private (released under the Budget; all of it when ``budget`` was given):
      centers: (k, d) lifted centres in data units (a cell of noisy size < 1 keeps its greedy centre).
      sizes: (k,) noisy cluster sizes.
      cost_curve: (k,) noisy cost of the first k' greedy centres, k' = 1 .. k (working units).
      elbow_k: int32, the number of clusters read from the cost curve (:func:`elbow`).
      greedy_centers: (k, m) the greedy's centres in working coordinates.
      start_level: (k,) the level of each centre's start ball.
    Every per-centre field is in the prefix order (``order=`` of :func:`kmeans`: the weighted
    re-ordering of :mod:`dpm_jax.greedy.order`, or the greedy's order of selection), the one
    the cost curve describes; :meth:`prefix` gives the solution for k' centres (in the weighted
    order, from either).
    Public or DP:
      bounds: (lower, upper), (d,) float32 each: the bounds of the working coordinates; the
        caller's public ones, or under ``bounds="private"`` the DP estimate (:mod:`dpm_jax.bounds`).
    Static:
      ledger: the privacy ledger (empty for ``budget=None``, whose outputs are NOT DP); under
        private bounds their release's line comes first.
      z: 2 (k-means) or 1 (k-median), the objective's power (for :meth:`prefix`).
    """

    centers: jax.Array
    sizes: jax.Array
    cost_curve: jax.Array
    elbow_k: jax.Array
    greedy_centers: jax.Array
    start_level: jax.Array
    bounds: tuple[jax.Array, jax.Array]
    ledger: Ledger = dataclasses.field(metadata=dict(static=True))
    z: int = dataclasses.field(default=2, metadata=dict(static=True))

    def prefix(self, count: int) -> jax.Array:
        """(count, d): the solution with ``count`` <= k centres read from this release alone
        (post-processing): the released centres in the weighted order of
        :func:`dpm_jax.greedy.order.prefix_order` (whatever ``order`` the run returned them in), the
        first ``count`` of them each moved to the size-weighted mean of the released centres nearest
        to it (:func:`dpm_jax.greedy.order.prefix_centers`). For the result of one run (under vmap,
        map it over the batch)."""
        weighted = prefix_order(self.centers, self.sizes, self.z)
        return prefix_centers(self.centers[weighted], self.sizes[weighted], count)

    @property
    def ledgers(self) -> tuple[tuple[int, Ledger]]:
        """((-1, ledger),): the one ledger, in the layout of the other results' (the greedy has no depth)."""
        return ((-1, self.ledger),)

    def with_bounds_release(self, plan) -> KMeansResult:
        """This result with the private bounds' release ``plan`` (:class:`dpm_jax.bounds.BoundsPlan`)
        first in its ledger (:func:`dpm_jax.bounds.with_bounds_entry`)."""
        return dataclasses.replace(self, ledger=Ledger([plan.entry(), *self.ledger]))


jax.tree_util.register_dataclass(
    KMeansResult,
    data_fields=["centers", "sizes", "cost_curve", "elbow_k", "greedy_centers", "start_level", "bounds"],
    meta_fields=["ledger", "z"],
)


class GreedyPlan(NamedTuple):
    """The public parameters of one run (hashable: a static argument of the program)."""

    nets: NetPlan
    k: int
    d: int
    projection_seed: int
    method: str
    order: str  # the prefix order (post-processing of the release; no budget)
    select: ComposedSelectionRelease | GaussianRelease | None  # the greedy's release; None: not private
    count: CountRelease | None
    sums: LeafSumsRelease | None
    costs: LeafSumsRelease | None

    @property
    def releases(self) -> tuple:
        """The ledger's releases, built from the fields the run draws with (() when not private)."""
        if self.select is None:
            return ()
        return (self.select, self.count, _gaussian("center_sums", self.sums), _gaussian("cost_curve", self.costs))


@functools.lru_cache(maxsize=64)
def plan_greedy(
    budget: Budget | None,
    k: int,
    d: int,
    z: int,
    levels: int,
    grid_dim: int,
    projection_seed: int,
    method: str = DEFAULT_METHOD,
    order: str = DEFAULT_ORDER,
):
    """Calibrate every release of a run to its share of ``budget`` (host side)."""
    nets = plan_nets(min(d, grid_dim), levels, z)
    if budget is None:
        return GreedyPlan(nets, k, d, projection_seed, method, order, None, None, None, None)
    eps = split_budget(budget.epsilon, SHARES)
    count = CountRelease("greedy_count", eps[1], keys.GREEDY_COUNT, rule="sizes of the disjoint Voronoi cells")
    dlt = _delta_parts(budget.delta, count.entry().delta)
    if method == "histogram":
        select = histogram_release(eps[0], dlt[0], nets)
    else:
        select = _selection_release(eps[0], dlt[0], nets, k)
    sums, costs = leaf_sums_release(eps[2], dlt[2], d), leaf_sums_release(eps[3], dlt[3], k)
    return GreedyPlan(nets, k, d, projection_seed, method, order, select, count, sums, costs)


def _selection_release(epsilon: float, delta: float, nets: NetPlan, k: int) -> ComposedSelectionRelease:
    """The k (1 + L) exponential mechanisms of the "exponential" method, zCDP-composed."""
    candidates = max(int(start_candidates(nets)[0].shape[0]), int(child_offsets(nets.dim).shape[0]))
    return ComposedSelectionRelease.calibrated(
        "greedy_select",
        epsilon,
        delta,
        keys.GREEDY_SELECT,
        2**VALUE_BITS,
        candidates,
        (k, k * nets.levels),
        START_RATIO,
        rule="ball value, integer units of r^z / 2**8",
    )


def _delta_parts(delta: float, count_delta: float) -> tuple[float, ...]:
    """(select, count, sum, cost) parts of delta: the count's sampler share first, the rest by DELTA_SHARES."""
    select, _, sums, costs = split_budget(delta - count_delta, DELTA_SHARES)
    return (select, count_delta, sums, at_most(delta, [count_delta, select, sums], costs))


def _gaussian(rows: str, plan: LeafSumsRelease) -> GaussianRelease:
    """The ledger line of an averaging-mechanism release on the "greedy_sum" stream."""
    return GaussianRelease(
        "greedy_" + rows,
        plan.epsilon,
        plan.delta,
        keys.GREEDY_SUM,
        plan.sensitivity,
        plan.sigma,
        plan.sampler_delta,
        rows=rows,
        rule=f"L2 of fixed-point sums / 2**{plan.coarse_shift}",
    )


@entry_point("kmeans")  # accountant, first-call message, 32-bit engine (dpm_jax.entry)
def kmeans(
    key: jax.Array,
    X,
    k: int,
    budget: Budget | None,
    *,
    bounds=None,
    z: int = 2,
    levels: int = DEFAULT_LEVELS,
    grid_dim: int = MAX_GRID_DIM,
    projection_seed: int = 0,
    point_mask=None,
    method: str = DEFAULT_METHOD,
    order: str = DEFAULT_ORDER,
) -> KMeansResult:
    """DP k-means (z = 2) or k-median (z = 1) with k centres, and the private cost curve over k' <= k.

    Args:
      key: a JAX PRNG key (keep it secret; every noise draw derives from it).
      X: (n, d) points; n <= MAX_POINTS.
      k: number of centres (>= 1).
      budget: the (epsilon, delta) Budget; ``None`` runs the NOT private greedy
        (arg max choices, exact lift and costs) for comparison.
      bounds: public (lo, hi), scalars or (d,) arrays (required); or "private" /
        :class:`dpm_jax.PrivateBounds`: estimated under DP with a share of ``budget`` first
        (:func:`dpm_jax.bounds.run_with_private_bounds`: its line comes first in the ledger, the
        greedy runs on the rest; needs a budget).
      z: 2 for k-means, 1 for k-median.
      levels: L, the last level of the nets (public).
      grid_dim: the largest working dimension m; data of higher d is projected.
      projection_seed: the public seed of the projection (data independent).
      point_mask: optional (n,) bool, rows to use.
      method: "histogram" (default: every ball value released once, the greedy as
        post-processing, Section 4; its noise does not grow with k) or "exponential" (an
        exponential mechanism per choice, Section 5.1).
      order: the order of the returned centres, whose prefixes the cost curve describes:
        "greedy" (default: the greedy's order of selection, Algorithm 1; its curve gives the
        better elbow) or "weighted" (the released centres re-ordered by a weighted greedy on
        the release alone, :mod:`dpm_jax.greedy.order`; post-processing, no budget). The
        k'-solutions are :meth:`KMeansResult.prefix`'s, in the weighted order under either.

    Works under ``jax.jit`` (``k``, ``budget`` and the keywords static) and ``jax.vmap`` over keys.
    Inside ``with accountant:`` the call charges ``budget`` once before it reads ``X``.
    """
    # without a budget the cost curve sums floats over the rows, whose order follows the row
    # count: such runs keep their shape (dpm_jax.rows)
    points, mask, n = validated_input(key, X, point_mask, bucket=budget is not None)
    d = points.shape[1]
    _validate_arguments(n, k, z, levels, grid_dim, budget)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if method == "histogram":
        check_balls(plan_nets(min(d, grid_dim), int(levels), int(z)))
    plan_of = functools.partial(
        plan_greedy, k=int(k), d=d, z=int(z), levels=int(levels), grid_dim=int(grid_dim),
        projection_seed=int(projection_seed), method=method, order=order,
    )  # fmt: skip
    if bounds_lib.is_private(bounds):
        if budget is None:
            raise ValueError('bounds="private" spends a share of the budget: give a Budget, or public bounds')
        prepare = lambda rest: functools.partial(_run_within, key, points, mask, plan_of(rest))  # noqa: E731
        return bounds_lib.run_with_private_bounds(key, points, mask, budget, bounds, prepare)
    return _run_within(key, points, mask, plan_of(budget), bounds)


def _run_within(key, points, mask, plan: GreedyPlan, bounds) -> KMeansResult:
    """The run of ``plan`` within ``bounds`` (public, or the released private estimate), validated."""
    lower, upper = public_bounds(bounds, plan.d)
    return _run(key, points, mask, lower, upper, plan)


def _validate_arguments(n: int, k, z, levels, grid_dim, budget) -> None:
    if n > MAX_POINTS:
        raise ValueError(f"X has {n} points; kmeans supports at most {MAX_POINTS} (exact int32 ball values)")
    for name, value, low in (("k", k, 1), ("levels", levels, 1), ("grid_dim", grid_dim, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if levels > MAX_LEVELS:
        raise ValueError(
            f"levels must be <= {MAX_LEVELS} (float32 resolves the unit cube to about 2**-24), got {levels}"
        )
    if z not in (1, 2):
        raise ValueError(f"z must be 1 (k-median) or 2 (k-means), got {z!r}")
    if grid_dim > 4:
        raise ValueError(f"grid_dim {grid_dim} is too large: the children per step grow like (c sqrt m)^m")
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dpm_jax.Budget or None, got {type(budget).__name__}")


@functools.partial(jax.jit, static_argnames=("plan",))
def _run(key, X, mask, lower, upper, plan: GreedyPlan) -> KMeansResult:
    working, to_data = _working_coordinates(X, lower, upper, plan)
    select_key = keys.derive_key(key, keys.GREEDY_SELECT)
    scores, choose = _greedy_inputs(select_key, working, mask, plan)
    greedy = greedy_centers(select_key, scores, plan.nets, plan.k, choose)
    slot = nearest(working, greedy.centers)
    fallback = to_data(greedy.centers)
    if plan.select is None:
        centers, sizes = lift_exact(X, mask, slot, fallback)
    else:
        sum_key = keys.derive_key(key, keys.GREEDY_SUM)
        lift_keys = (keys.derive_key(key, keys.GREEDY_COUNT), jax.random.fold_in(sum_key, 0))
        tables = gaussian_thresholds_on_device(plan.sums.sigma)
        centers, sizes = lift_private(
            lift_keys, X, (lower, upper), mask, slot, fallback, (plan.count, plan.sums, tables)
        )
    # the prefix order reads the release only (the lifted centres and their noisy sizes)
    if plan.order == "weighted":
        permutation = prefix_order(centers, sizes, plan.nets.z)
    else:
        permutation = jnp.arange(plan.k)
    centers, sizes, greedy_in_order = centers[permutation], sizes[permutation], greedy.centers[permutation]
    # the curve describes the prefixes in the returned order; which centres it is computed for is
    # decided by earlier releases, and its sensitivity does not depend on their order
    if plan.select is None:
        costs = exact_costs(working, mask, greedy_in_order, plan.nets.z)
    else:
        cost_tables = gaussian_thresholds_on_device(plan.costs.sigma)
        costs = private_costs(
            jax.random.fold_in(sum_key, 1), working, mask, greedy_in_order, plan.nets.z, plan.costs, cost_tables
        )
    return KMeansResult(
        centers,
        sizes,
        costs,
        elbow(costs, cost_noise_std(plan)),
        greedy_in_order,
        greedy.start_level[permutation],
        (lower, upper),
        ledger_of(plan.releases),
        plan.nets.z,
    )


def _greedy_inputs(select_key, working, mask, plan: GreedyPlan):
    """(the greedy's scores, its chooser) for the plan's method (the histogram's noise drawn here)."""
    if plan.method == "histogram":
        points_t = working.T
        if plan.select is None:
            values = level_values(points_t, mask, plan.nets, plan.nets.levels)
        else:
            values = noisy_values(select_key, points_t, mask, plan.nets, plan.select)
        return histogram_scores(values, plan.nets), argmax_chooser
    if plan.select is None:
        return point_scores(working, mask, plan.nets), argmax_chooser
    table = em_table_on_device()
    choose = lambda g, k_, s, v: plan.select.select(g, k_, table, exact.from_int32(s[None]), v[None])[0]  # noqa: E731
    return point_scores(working, mask, plan.nets), choose


_PROJECTION_ROWS = 2**14  # rows projected per loop step (their transposed tile stays in cache)


def _projection(plan: GreedyPlan) -> np.ndarray:
    """(d, m) orthonormal columns from the public seed (data independent)."""
    gaussian = np.random.default_rng(plan.projection_seed).standard_normal((plan.d, plan.nets.dim))
    return np.linalg.qr(gaussian)[0].astype(np.float32)


def _working_coordinates(X, lower, upper, plan: GreedyPlan):
    """(points in [0, 1]^m, the map of working centres back to data units)."""
    if plan.nets.dim == plan.d:
        return to_unit_range(X, lower, upper), lambda c: unfused_multiply_add(c, upper - lower, lower)
    q, root_d = jnp.asarray(_projection(plan)), np.float32(math.sqrt(plan.d))
    inverse_root_d = np.float32(1.0 / math.sqrt(plan.d))

    def project(rows):  # a record's working coordinates are a function of that record alone
        centred = to_unit_range(rows, lower, upper) - 0.5
        return jnp.clip(unfused_multiply_add(ordered_matmul(centred, q), inverse_root_d, 0.5), 0.0, 1.0)

    working = map_row_blocks(project, (plan.nets.dim,), jnp.float32, _PROJECTION_ROWS, X)
    # back: the least-norm preimage of the working centre (clipped to the bounds)
    back = lambda c: jnp.clip(0.5 + ordered_matmul(root_d * (c - 0.5), q.T), 0.0, 1.0)  # noqa: E731
    return working, lambda c: unfused_multiply_add(back(c), upper - lower, lower)


def cost_noise_std(plan: GreedyPlan) -> float:
    """The standard deviation of each released prefix cost in working units (0 without privacy)."""
    if plan.costs is None:
        return 0.0
    return plan.costs.sigma * 2.0**plan.costs.coarse_shift * cost_unit(plan.nets.dim, plan.nets.z)


def elbow(costs: jax.Array, noise_std: float = 0.0, gain: float = ELBOW_GAIN) -> jax.Array:
    """int32: the k' after the last centre that lowered the cost by at least ``gain`` of it.

    A drop counts only beyond ``ELBOW_NOISE`` standard deviations of the difference of two
    noisy costs. If no centre lowered the cost by ``gain``, the k' after the drop that is largest
    relative to its cost (beyond that margin); 1 if no drop clears the margin. Post-processing of
    the cost curve (Section A.3: the elbow method on the prefixes of one run).
    """
    drop = costs[:-1] - costs[1:]
    margin = ELBOW_NOISE * math.sqrt(2.0) * noise_std
    large = drop >= unfused_multiply_add(jnp.float32(gain), jnp.maximum(costs[:-1], 0.0), jnp.float32(margin))
    last = costs.shape[0] - 1 - jnp.argmax(large[::-1])
    # Many clusters spread evenly lower the cost by a few per cent per centre, and near k the
    # noise can hide the last large drops: the strongest relative drop left is then the
    # best evidence of where the structure ends (with "1 if none", K = 32 blobs gave 1 on
    # 7 of 240 runs, docs/greedy.md). Here every drop clearing the margin has a positive cost.
    relative = (drop - margin) / jnp.maximum(costs[:-1], jnp.finfo(costs.dtype).tiny)
    strongest = jnp.where(jnp.max(relative) > 0, jnp.argmax(relative) + 2, 1)
    return jnp.where(jnp.any(large), last + 1, strongest).astype(jnp.int32)
