"""``cluster``: validation, key derivation and the orchestration of DPM (Algorithm 1).

Data flows one way: validate -> clip to the public bounds -> (``tau_r="auto"``: a
noisy count and the depth, :mod:`dpm_jax.depth`) -> noisy total count (line 7) ->
split interval size (line 8, Algorithm 2) -> the padded recursion (lines 10, 13-28)
-> DP centres of the leaves (line 11).

Key path of every mechanism (see :func:`dpm_jax.keys.derive_key`); each
stream is drawn once, as one array in heap layout (element i belongs to node i):
  depth (tau_r="auto")  noisy_count(derive_key(key, keys.DEPTH), ...)
  counts of all nodes   count_noise(derive_key(key, keys.COUNT), heap_count_epsilons(...))
                        ("auto": one row per depth 1..max_depth, the depth's row is used)
  interval size         exponential_mechanism(derive_key(key, keys.INTERVAL), ...)
  split choices         bits(derive_key(key, keys.SPLIT), (2**padded_depth, EM_TRIES, EM_DIGITS))
  leaf sums             discrete_gaussian_noise(derive_key(key, keys.AVERAGE), ..., (2**padded_depth, d))

Every released number is computed in exact integer arithmetic from exact integer
statistics of the data (counts, ranks, gap counts, fixed-point sums; see
:mod:`dpm_jax.exact`), so the ledger's guarantees hold for the arithmetic the
machine performs (docs/privacy.md). Maximum n: 2**31 - 1 points.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import averaging as averaging_lib
from dpm_jax import bounds as bounds_lib
from dpm_jax import exact, interval, keys, tree
from dpm_jax._arrays import to_unit_range
from dpm_jax.sharding import automatic_axes
from dpm_jax.averaging import AveragingPlan, leaf_centers, plan_averaging
from dpm_jax.cache import library_programs
from dpm_jax.budget import (
    Allocation,
    Budget,
    allocate,
    count_entry,
    validate_budget_and_config,
)
from dpm_jax.config import AUTO_DEPTH, CELL_GRID, DPMConfig
from dpm_jax.depth import DepthPlan, depth_of, noisy_size, plan_depth
from dpm_jax.depth import ledger_entry as depth_ledger_entry
from dpm_jax.diagnostics.plan import warn_if_insufficient
from dpm_jax.interval import estimate_split_interval_size
from dpm_jax.keys import derive_key
from dpm_jax.ledger import Ledger, LedgerEntry
from dpm_jax.mechanisms import (
    EM_DIGITS,
    EM_TRIES,
    add_count_noise,
    discrete_gaussian_table,
    em_weight_table,
)
from dpm_jax.tree import Leaves, SplitTree, build_tree, level_count_noise, level_schedule, root_interval_size

__all__ = [
    "ClusterResult",
    "cluster",
    "build_ledger",
    "MAX_POINTS",
    "validate_key",
    "validate_bounds",
    "released_arrays",
    "RunPlan",
    "plan_run",
    "run_depth",
    "warn_if_starved",
    "em_table_on_device",
    "gaussian_thresholds_on_device",
]

MAX_POINTS = 2**31 - 1

BOUNDS_REQUIRED = (
    "bounds are required: pass the public range of the data as bounds=(lo, hi) (scalars or "
    "per-dimension arrays). DPM's sensitivities and split candidates depend on them, and reading "
    "them from the data (min/max) would leak the extreme points and void the privacy guarantee. "
    "Use domain knowledge (e.g. pixel values are in (0, 255)) or a range fixed before seeing the data."
)


@dataclasses.dataclass(frozen=True)
class ClusterResult:
    """Output of :func:`cluster`; a JAX pytree (the ledger is static metadata).

    Differentially private (released under the Budget); P = ``config.padded_depth``:
      centers: (2**P, d) cluster centres; rows where ``valid`` is False are NaN.
      counts: (2**P,) noisy cluster sizes (the DP weights); 0 where not valid.
      valid: (2**P,) bool, marks the real clusters.
      k: number of clusters found (int32 scalar).
      depth: the tree's depth tau_r (int32 scalar; chosen from a noisy count under
        ``tau_r="auto"``, :mod:`dpm_jax.depth`).
      tree: the split tree (:class:`dpm_jax.tree.SplitTree`).
      split_interval_size: (d,) beta in data units (Algorithm 2; the cell grid: two of the root
        cell's half-bins, range / max_splits_per_dim).
      leaf_node: (2**P,) heap id in ``tree`` of each cluster (0 where not valid).
    NOT differentially private (a function of each individual point):
      labels_nonprivate: (n,) cluster slot of every input point; do not publish.
    Public or DP:
      bounds: (lower, upper), (d,) float32 each: the bounds the run clipped to; the caller's
        public ones, or under ``bounds="private"`` the DP estimate (:mod:`dpm_jax.bounds`).
    Static:
      ledgers: ((depth, ledger), ...): the privacy ledger (:class:`dpm_jax.ledger.Ledger`) of
        every depth the run may take, one for a fixed tau_r; :attr:`ledger` is the run's.
    """

    centers: jax.Array
    counts: jax.Array
    valid: jax.Array
    k: jax.Array
    depth: jax.Array
    tree: SplitTree
    split_interval_size: jax.Array
    leaf_node: jax.Array
    labels_nonprivate: jax.Array
    ledgers: tuple[tuple[int, Ledger], ...] = dataclasses.field(metadata=dict(static=True))
    bounds: tuple[jax.Array, jax.Array] | None = None

    @property
    def ledger(self) -> Ledger:
        """The privacy ledger of this run: of the depth it ran at; it adds up to the budget.

        Under ``tau_r="auto"`` the depth is data dependent, so a result of ``jax.vmap`` over
        runs of different depths has one ledger per run: :meth:`ledger_at` gives each.
        """
        if len(self.ledgers) == 1:
            return self.ledgers[0][1]
        if isinstance(self.depth, jax.core.Tracer):
            raise ValueError("the depth of a traced result is not known yet: read the ledger outside jax.jit")
        depths = np.unique(np.asarray(self.depth))
        if depths.size != 1:
            raise ValueError(
                f"these runs chose different depths {depths.tolist()} (tau_r='auto'): each has its own "
                "ledger, result.ledger_at(int(result.depth[i]))"
            )
        return self.ledger_at(int(depths[0]))

    def ledger_at(self, depth: int) -> Ledger:
        """The ledger of the run at ``depth`` (every one adds up to the budget, never more)."""
        ledgers = dict(self.ledgers)
        if depth not in ledgers:
            raise ValueError(f"this run cannot have depth {depth}; its depths are {sorted(ledgers)}")
        return ledgers[depth]


jax.tree_util.register_dataclass(
    ClusterResult,
    data_fields=[
        "centers",
        "counts",
        "valid",
        "k",
        "depth",
        "tree",
        "split_interval_size",
        "leaf_node",
        "labels_nonprivate",
        "bounds",
    ],
    meta_fields=["ledgers"],
)


class RunPlan(NamedTuple):
    """Everything public a run needs before it sees data: its possible depths and their budgets.

    A fixed tau_r: one allocation. ``tau_r="auto"``: the depth count's plan and one allocation
    of the remaining budget per depth 1..max_depth (:mod:`dpm_jax.depth`); the averaging
    mechanism's budget is the same at every depth. Hashable (a static argument of jit).
    """

    depth_plan: DepthPlan | None
    allocations: tuple[Allocation, ...]  # consecutive depths, the first at depth first_depth
    averaging: AveragingPlan
    ledgers: tuple[tuple[int, Ledger], ...]

    @property
    def first_depth(self) -> int:
        return len(self.allocations[0].split_epsilons)

    @property
    def interval_epsilon(self) -> float:
        """Algorithm 2's epsilon (0 on the cell grid): the same at every depth (allocate's shares)."""
        return self.allocations[0].interval_epsilon


@functools.lru_cache(maxsize=64)
def plan_run(budget: Budget, config: DPMConfig, d: int) -> RunPlan:
    """The :class:`RunPlan` of ``budget`` and ``config`` in d dimensions; its ledgers add up to the budget."""
    if config.tau_r != AUTO_DEPTH:
        allocation = allocate(budget, config, d)
        averaging = plan_averaging(allocation.average_epsilon, allocation.average_delta, d)
        return RunPlan(
            None, (allocation,), averaging, ((config.tau_r, build_ledger(allocation, config, d, averaging)),)
        )
    depth_plan = plan_depth(budget, config, d)
    depths = range(1, depth_plan.deepest + 1)
    allocations = tuple(allocate(depth_plan.remaining, config.at_depth(depth), d) for depth in depths)
    # The leaf sums are drawn before the depth is known to them (one sampler table): every depth
    # averages with the smallest of its allocations' averaging budgets, which differ by at most
    # the ulps allocate rounds them down by, so each ledger still stays within the budget.
    common = dict(
        average_epsilon=min(a.average_epsilon for a in allocations),
        average_delta=min(a.average_delta for a in allocations),
    )
    allocations = tuple(a._replace(**common) for a in allocations)
    averaging = plan_averaging(common["average_epsilon"], common["average_delta"], d)
    ledgers = tuple(
        (
            depth,
            Ledger(
                [
                    depth_ledger_entry(depth_plan, depth),
                    *_on_row(build_ledger(a, config.at_depth(depth), d, averaging), depth - 1),
                ]
            ),
        )
        for depth, a in zip(depths, allocations)
    )
    return RunPlan(depth_plan, allocations, averaging, ledgers)


def _on_row(ledger: Ledger, row: int) -> list[LedgerEntry]:
    """The ledger's count lines with their row of the per-depth count draw (:func:`dpm_jax.tree.level_count_noise`)."""
    on_row = lambda entry: entry._replace(key_path=(keys.COUNT, f"row {row}", *entry.key_path[1:]))
    return [on_row(entry) if entry.key_path[0] == keys.COUNT else entry for entry in ledger]


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def validate_key(key) -> None:
    """A TypeError unless ``key`` is one JAX PRNG key (typed, or a legacy uint32 pair)."""
    if isinstance(key, jax.Array) or isinstance(key, np.ndarray):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape == ():
                return
        elif key.dtype == np.uint32 and key.shape == (2,):
            return
    raise TypeError(
        "key must be a single JAX PRNG key, e.g. jax.random.key(0) or jax.random.PRNGKey(0) "
        f"(got {type(key).__name__} with shape {getattr(key, 'shape', None)} and dtype "
        f"{getattr(key, 'dtype', None)}); to run several keys use jax.vmap"
    )


def _validate_points(X) -> jax.Array:
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if not hasattr(X, "shape") or not hasattr(X, "dtype"):
        raise TypeError(f"X must be an array of shape (n, d), got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must have rank 2 (n points, d dimensions), got shape {tuple(X.shape)}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty: shape {tuple(X.shape)}; need at least one point and one dimension")
    if X.shape[0] > MAX_POINTS:
        raise ValueError(
            f"X has {X.shape[0]} points; dpm_jax supports at most {MAX_POINTS} (2**31 - 1: "
            "counts are exact int32 integers)"
        )
    if not (jnp.issubdtype(X.dtype, jnp.floating) or jnp.issubdtype(X.dtype, jnp.integer)) or jnp.issubdtype(
        X.dtype, jnp.bool_
    ):
        raise TypeError(f"X must hold real numbers, got dtype {X.dtype}")
    if not _is_tracer(X):
        # A JAX array is checked where it lives (one fused reduction, no transfer);
        # the position of the first bad value is only looked up when there is one.
        if not _all_finite(X):
            row, col = np.argwhere(~np.isfinite(np.asarray(X)))[0]
            raise ValueError(
                f"X contains NaN or inf (first at row {row}, column {col}); "
                "remove or impute those values before clustering"
            )
    if not (isinstance(X, jax.Array) and X.dtype == jnp.float32):
        X = jnp.array(X, dtype=jnp.float32)  # a copy: the caller's array is never touched
    # A JAX array is immutable; sharded rows stay on their devices (dpm_jax.sharding).
    return X if _is_tracer(X) else automatic_axes(X)


def _all_finite(X) -> bool:
    if not isinstance(X, jax.Array):
        return bool(np.isfinite(X).all())
    # X may be a concrete array closed over by a caller's jit: evaluate it now anyway.
    with jax.ensure_compile_time_eval():
        return bool(_all_finite_on_device(X))


@jax.jit
def _all_finite_on_device(X: jax.Array) -> jax.Array:
    return jnp.all(jnp.isfinite(X))


def validate_bounds(bounds, d: int) -> tuple[jax.Array, jax.Array]:
    """(lower, upper) as (d,) float32 from public (lo, hi); a clear error for missing or bad bounds."""
    if bounds is None:
        raise ValueError(BOUNDS_REQUIRED)
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise ValueError(f"bounds must be a pair (lo, hi), got {bounds!r}")
    lower, upper = bounds
    arrays = []
    for name, value in (("lo", lower), ("hi", upper)):
        if _is_tracer(value):
            arrays.append(value)
            continue
        value = np.asarray(value, dtype=np.float64)
        if value.ndim > 1 or (value.ndim == 1 and value.shape[0] != d):
            raise ValueError(f"bounds {name} must be a scalar or have shape ({d},), got shape {value.shape}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"bounds {name} must be finite, got {value}")
        arrays.append(np.broadcast_to(value, (d,)))
    if not (_is_tracer(arrays[0]) or _is_tracer(arrays[1])):
        if not np.all(arrays[0] < arrays[1]):
            raise ValueError(f"bounds need lo < hi in every dimension, got lo={lower}, hi={upper}")
        # the computation runs in float32: the range must survive that rounding
        if not np.all(arrays[0].astype(np.float32) < arrays[1].astype(np.float32)):
            raise ValueError(
                f"bounds lo={lower}, hi={upper} collapse to lo == hi in float32; "
                "rescale the data so the range is resolvable in single precision"
            )
    # Concrete bounds stay NumPy (float32): the value checks above ran on exactly these numbers.
    arrays = [a if _is_tracer(a) else np.asarray(a, np.float32) for a in arrays]
    return arrays[0], arrays[1]


def _validate_mask(point_mask, n: int) -> jax.Array:
    if point_mask is None:
        return jnp.ones(n, bool)
    if not hasattr(point_mask, "shape") or point_mask.shape != (n,):
        raise ValueError(f"point_mask must have shape ({n},), got {getattr(point_mask, 'shape', None)}")
    return jnp.asarray(point_mask, bool)


@library_programs()  # the compilation cache holds the library's programs only (dpm_jax.cache)
def cluster(
    key: jax.Array, X: Any, budget: Budget, bounds=None, *, config: DPMConfig = DPMConfig(), point_mask: Any = None
) -> ClusterResult:
    """Cluster ``X`` under (epsilon, delta)-DP with DPM, without being told k.

    Args:
      key: a JAX PRNG key; every noise draw is derived from it (module docstring).
      X: (n, d) data. Values outside ``bounds`` are clipped to them.
      budget: the total :class:`Budget`; the ledger of the result adds up to it.
      bounds: public (lo, hi), scalars or (d,) arrays (see BOUNDS_REQUIRED); or "private" /
        :class:`dpm_jax.bounds.PrivateBounds`: estimated under DP with a share of ``budget``
        first (:func:`dpm_jax.bounds.run_with_private_bounds`; its ledger line comes first).
      config: hyper-parameters (:class:`DPMConfig`, paper defaults).
      point_mask: optional (n,) bool; False marks padding points, which are ignored.
        Use it to batch data sets of different sizes under ``jax.vmap``.

    Returns:
      A :class:`ClusterResult`. ``np.asarray(r.centers)[np.asarray(r.valid)]``
      are the k centres.

    Works under ``jax.jit`` (with ``budget`` and ``config`` static) and ``jax.vmap``
    (over keys, data sets, masks). Value checks on X and bounds (NaN, lo < hi) run
    only when they are concrete, i.e. outside of jit/vmap tracing.
    """
    if bounds_lib.is_private(bounds):
        validate_key(key)
        points = _validate_points(X)
        run = lambda rest, found: cluster(key, points, rest, found, config=config, point_mask=point_mask)
        return bounds_lib.run_with_private_bounds(
            key, points, _validate_mask(point_mask, points.shape[0]), budget, bounds, run
        )
    validate_key(key)
    validate_budget_and_config(budget, config)
    points = _validate_points(X)
    n, d = points.shape
    lower, upper = validate_bounds(bounds, d)
    mask = _validate_mask(point_mask, n)

    run_plan = plan_run(budget, config, d)
    lower = jnp.broadcast_to(jnp.asarray(lower, jnp.float32), (d,))
    upper = jnp.broadcast_to(jnp.asarray(upper, jnp.float32), (d,))

    arrays = _cluster_arrays(
        key,
        points,
        mask,
        lower,
        upper,
        em_table_on_device(),
        gaussian_thresholds_on_device(run_plan.averaging.sigma),
        run_plan=run_plan,
        config=config,
    )
    result = ClusterResult(**arrays, ledgers=run_plan.ledgers, bounds=(lower, upper))
    warn_if_starved(result, budget, config, d)
    return result


def warn_if_starved(result: ClusterResult, budget: Budget, config: DPMConfig, d: int) -> None:
    """An InsufficientBudgetWarning when the plan cannot separate two clusters at the released size.

    The size is the released root count n~ (post-processing of the release: no privacy
    cost), not the row count of X, which is private under add/remove-one neighbours
    unless the user declares it public. Skipped under jax.jit and jax.vmap, where n~ is
    not a number yet.
    """
    root = result.tree.noisy_count
    if not _is_tracer(root):
        warn_if_insufficient(float(root[1]), d, budget, config, "the released size n~", stacklevel=3)


@functools.lru_cache(maxsize=64)
def build_ledger(allocation: Allocation, config: DPMConfig, d: int, averaging: AveragingPlan) -> Ledger:
    """The run's ledger: every mechanism's own lines, in the order Algorithm 1 runs them.

    The root count (line 7), Algorithm 2 (line 8), the tree's split choices and child
    counts level by level (lines 13-28), the leaf sums (line 11). Each line comes from
    the module that draws the noise, from the parameters it draws it with; the lines
    add up exactly to the budget (:func:`dpm_jax.budget.allocate`).
    """
    interval_entries = (
        []
        if config.split_grid == CELL_GRID
        else [interval.ledger_entry(allocation.interval_epsilon, allocation.interval_sampler_delta, d, config)]
    )
    return Ledger(
        [
            count_entry(allocation, 0),
            *interval_entries,
            *tree.ledger_entries(allocation, config),
            averaging_lib.ledger_entry(averaging, allocation.average_epsilon, allocation.average_delta),
        ]
    )


@functools.lru_cache(maxsize=1)
def em_table_on_device():
    """The exponential mechanism's weight table (:func:`dpm_jax.mechanisms.em_weight_table`) on the device."""
    # Concrete device arrays even when cluster is called inside a caller's jit or vmap
    # (a staged constant would be a tracer, and caching it would leak it).
    with jax.ensure_compile_time_eval():
        return tuple(jax.device_put(part) for part in em_weight_table())


@functools.lru_cache(maxsize=8)
def gaussian_thresholds_on_device(sigma: float):
    """The discrete Gaussian sampler's inverse-CDF thresholds for ``sigma`` on the device."""
    table = discrete_gaussian_table(sigma)
    with jax.ensure_compile_time_eval():
        return jax.device_put(table.thresholds_high), jax.device_put(table.thresholds_low)


def run_depth(key: jax.Array, num_points: jax.Array, run_plan: RunPlan) -> jax.Array:
    """int32 the run's tau_r: the fixed one, or under ``tau_r="auto"`` the depth of a noisy count
    of the ``num_points`` points (:func:`dpm_jax.depth.noisy_size`, :func:`dpm_jax.depth.depth_of`).
    Traceable."""
    if run_plan.depth_plan is None:
        return jnp.int32(run_plan.first_depth)
    return depth_of(noisy_size(key, num_points, run_plan.depth_plan), run_plan.depth_plan)


@functools.partial(jax.jit, static_argnames=("run_plan", "config"))
def _cluster_arrays(
    key,
    points,
    mask,
    lower,
    upper,
    em_table,
    gaussian_thresholds,
    *,
    run_plan: RunPlan,
    config: DPMConfig,
):
    # When X is closed over by a caller's jit/vmap it becomes a compile-time constant,
    # and XLA would constant-fold the data sort of Algorithm 2 at compile time (tens of
    # seconds for 100k points); the barrier keeps the data opaque to the compiler.
    points = jax.lax.optimization_barrier(points)

    # tau_r="auto": the depth from a noisy count (dpm_jax.depth); then its allocation.
    depth = run_depth(key, jnp.sum(mask, dtype=jnp.int32), run_plan)
    schedule = level_schedule(run_plan.allocations, depth, config.padded_depth)
    # Algorithm 1, line 7 (and lines 16-17 of every level): n~ = |S| + Lap(1/eps_cnt_level),
    # exact integers.
    noise = level_count_noise(derive_key(key, keys.COUNT), run_plan.allocations, depth, config.padded_depth)
    root_noisy_count = add_count_noise(
        jnp.sum(mask, dtype=jnp.int32), exact.Int(tuple(limb[1] for limb in noise.limbs))
    )
    # Line 8: Algorithm 2 (the cell grid needs no interval size: it reports its root's).
    if config.split_grid == CELL_GRID:
        beta = root_interval_size(lower, upper, config)
    else:
        beta, _ = estimate_split_interval_size(
            derive_key(key, keys.INTERVAL),
            em_table,
            to_unit_range(points, lower, upper),  # a per-record map: DP is unaffected
            mask,
            exact.to_float32(root_noisy_count),
            run_plan.interval_epsilon,
            config,
        )
    # Lines 10, 13-28.
    split_bits = jax.random.bits(
        derive_key(key, keys.SPLIT), (config.max_clusters, EM_TRIES, EM_DIGITS), dtype=jnp.uint32
    )
    tree, leaves = build_tree(
        split_bits, noise, em_table, points, mask, lower, upper, root_noisy_count, beta, schedule, config
    )
    # Line 11.
    centers = leaf_centers(
        derive_key(key, keys.AVERAGE),
        points,
        mask,
        leaves.point_slot,
        leaves.noisy_count,
        leaves.valid,
        lower,
        upper,
        gaussian_thresholds,
        run_plan.averaging,
    )
    return dict(
        **released_arrays(tree, leaves, centers, beta, lower, upper, depth), labels_nonprivate=leaves.point_slot
    )


def released_arrays(tree: SplitTree, leaves: Leaves, centers, beta, lower, upper, depth) -> dict:
    """The DP fields of a :class:`ClusterResult` from the tree, its leaves and their centres.

    Shared by :func:`cluster` and :func:`dpm_jax.stream.cluster_stream`; all of it is
    post-processing of released values.
    """
    return dict(
        centers=centers,
        counts=jnp.where(leaves.valid, leaves.noisy_count, 0.0),
        valid=leaves.valid,
        k=jnp.sum(leaves.valid).astype(jnp.int32),
        depth=jnp.asarray(depth, jnp.int32),
        tree=tree,
        split_interval_size=beta * (upper - lower),
        leaf_node=leaves.node,
    )
