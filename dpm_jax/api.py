"""``cluster``: validation, key derivation and the orchestration of DPM (Algorithm 1).

Data flows one way: validate -> clip to the public bounds -> (``tau_r="auto"``: a
noisy count and the depth, :mod:`dpm_jax.depth`) -> noisy total count (line 7) ->
split interval size (line 8, Algorithm 2) -> the padded recursion (lines 10, 13-28)
-> DP centres of the leaves (line 11).

Key path of every mechanism (see :func:`dpm_jax.keys.derive_key`); each
stream is drawn once, as one array in heap layout (element i belongs to node i):
  depth (tau_r="auto")  discrete_laplace_count(derive_key(key, keys.DEPTH), ...)
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
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import bounds as bounds_lib
from dpm_jax import exact
from dpm_jax.exact import MAX_POINTS
from dpm_jax._arrays import to_unit_range
from dpm_jax.rows import MAX_BUCKETED_ROWS, bucket_size, first_rows, on_device, on_one_cpu, paddable
from dpm_jax.sharding import automatic_axes, rows_over_devices
from dpm_jax.averaging import leaf_centers
from dpm_jax.budget import Budget, validate_budget_and_config
from dpm_jax.config import DPMConfig
from dpm_jax.depth import AutoDepth, FixedDepth, depth_strategy
from dpm_jax.dpm_releases import DPMReleases
from dpm_jax.diagnostics.plan import warn_if_insufficient, warn_if_large_delta
from dpm_jax.entry import entry_point
from dpm_jax.interval import estimate_split_interval_size
from dpm_jax.keys import derive_key
from dpm_jax.merge import merge_roots, merged_slots
from dpm_jax.ledger import Ledger
from dpm_jax.mechanisms import (
    EM_DIGITS,
    EM_TRIES,
    add_count_noise,
    discrete_gaussian_table,
    em_weight_table,
    random_words,
)
from dpm_jax.tree import (
    LevelStart,
    Leaves,
    SplitTree,
    PublicInputs,
    build_tree,
    level_count_noise,
    level_schedule,
    level_merge_noise,
    level_structure_noise,
    padded_randomness,
    root_interval_size,
)

__all__ = [
    "ClusterResult",
    "cluster",
    "MAX_POINTS",
    "validate_key",
    "validated_input",
    "public_bounds",
    "within_float32",
    "released_arrays",
    "cluster_result",
    "RunPlan",
    "plan_run",
    "start_levels",
    "structure_noise",
    "merge_noise",
    "warn_if_starved",
    "em_table_on_device",
    "gaussian_thresholds_on_device",
]


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
      depth: the run's depth (int32 scalar; chosen from a noisy count under
        ``tau_r="auto"``, :mod:`dpm_jax.depth`).
      tree: the split tree (:class:`dpm_jax.tree.SplitTree`).
      split_interval_size: (d,) beta in data units (Algorithm 2; the cell grid: two of the root
        cell's half-bins, range / max_splits_per_dim).
      leaf_node: (2**P,) heap id in ``tree`` of each cluster (0 where not valid): its leaf, or with
        the merge (:mod:`dpm_jax.merge`) the split node whose leaves became one cluster.
    NOT differentially private (a function of each individual point):
      labels_nonprivate: (n,) cluster *slot* of every input point (a row of ``centers``, e.g. 0, 32,
        64, 96; not 0..k-1: indexing the k compacted centres with it is wrong, and JAX clamps
        out-of-range indices silently); do not publish. Compact labels 0..k-1:
        :func:`dpm_jax.training_labels`; labels of new data: :func:`dpm_jax.assign`.
    Public or DP:
      bounds: (lower, upper), (d,) float32 each: the bounds the run clipped to; the caller's
        public ones, or under ``bounds="private"`` the DP estimate (:mod:`dpm_jax.bounds`).
    Static:
      releases: ((depth, releases), ...): the run's releases
        (:class:`dpm_jax.dpm_releases.DPMReleases`) at every depth it may take, one for a fixed
        tau_r; :attr:`ledgers` are their ledgers, :attr:`ledger` the run's.
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
    releases: tuple[tuple[int, DPMReleases], ...] = dataclasses.field(metadata=dict(static=True))
    bounds: tuple[jax.Array, jax.Array] | None = None
    bounds_release: Any = dataclasses.field(default=None, metadata=dict(static=True))

    @property
    def ledgers(self) -> tuple[tuple[int, Ledger], ...]:
        """((depth, ledger), ...): the ledger of every depth the run may take; under private bounds
        their release's line (``bounds_release``, :mod:`dpm_jax.bounds`) comes first."""
        return tuple((depth, self._ledger_of(releases)) for depth, releases in self.releases)

    def _ledger_of(self, releases: DPMReleases) -> Ledger:
        if self.bounds_release is None:
            return releases.ledger()  # the releases' own (cached) ledger
        return Ledger([self.bounds_release.entry(), *releases.ledger()])

    @property
    def ledger(self) -> Ledger:
        """The privacy ledger of this run: of the depth it ran at; it adds up to the budget.

        Under ``tau_r="auto"`` the depth is data dependent, so a result of ``jax.vmap`` over
        runs of different depths has one ledger per run: :meth:`ledger_at` gives each.
        """
        return self._ledger_of(self.releases_of_run())

    def releases_of_run(self) -> DPMReleases:
        """The releases of this run: of the depth it ran at (under ``tau_r="auto"`` read outside jit)."""
        if len(self.releases) == 1:
            return self.releases[0][1]
        if isinstance(self.depth, jax.core.Tracer):
            raise ValueError("the depth of a traced result is not known yet: read the ledger outside jax.jit")
        depths = np.unique(np.asarray(self.depth))
        if depths.size != 1:
            raise ValueError(
                f"these runs chose different depths {depths.tolist()} (tau_r='auto'): each has its own "
                "ledger, result.ledger_at(int(result.depth[i]))"
            )
        return self.releases_at(int(depths[0]))

    def releases_at(self, depth: int) -> DPMReleases:
        """The releases of the run at ``depth``."""
        releases = dict(self.releases)
        if depth not in releases:
            raise ValueError(f"this run cannot have depth {depth}; its depths are {sorted(releases)}")
        return releases[depth]

    def ledger_at(self, depth: int) -> Ledger:
        """The ledger of the run at ``depth`` (every one adds up to the budget, never more)."""
        return self._ledger_of(self.releases_at(depth))

    def with_bounds_release(self, plan) -> ClusterResult:
        """This result with the private bounds' release ``plan`` (:class:`dpm_jax.bounds.BoundsPlan`)
        first in its ledgers (:func:`dpm_jax.bounds.with_bounds_entry`)."""
        return dataclasses.replace(self, bounds_release=plan)


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
    meta_fields=["releases", "bounds_release"],
)


class RunPlan(NamedTuple):
    """Everything public a run needs before it sees data: its depth rule and the releases of every
    depth it may take (:class:`dpm_jax.depth.FixedDepth`: one; :class:`dpm_jax.depth.AutoDepth`:
    1..max_depth on the budget its count leaves; the leaf sums' release is the same at every depth).
    Hashable (a static argument of jit).
    """

    depth_rule: FixedDepth | AutoDepth
    releases: tuple[tuple[int, DPMReleases], ...]  # consecutive depths

    @property
    def ledgers(self) -> tuple[tuple[int, Ledger], ...]:
        """((depth, ledger), ...): every possible depth's ledger; each adds up to the budget."""
        return tuple((depth, releases.ledger()) for depth, releases in self.releases)

    @property
    def by_depth(self) -> tuple[DPMReleases, ...]:
        """The releases of every possible depth, in order (consecutive depths)."""
        return tuple(releases for _, releases in self.releases)

    @property
    def interval(self):
        """Algorithm 2's release (None on the cell grid): the same at every depth (allocate's shares)."""
        return self.releases[0][1].interval

    @property
    def leaf_sums(self):
        """The leaf sums' release: the same at every depth."""
        return self.releases[0][1].leaf_sums

    @property
    def count_stream(self) -> str:
        """The key stream of the node counts (one draw for every depth, :func:`dpm_jax.tree.level_count_noise`)."""
        (stream,) = {count.stream for releases in self.by_depth for count in releases.counts}
        return stream

    @property
    def split_stream(self) -> str:
        """The key stream of the split choices (one draw of bits for the whole tree)."""
        (stream,) = {split.stream for releases in self.by_depth for split in releases.splits}
        return stream


@functools.lru_cache(maxsize=64)
def plan_run(budget: Budget, config: DPMConfig, d: int) -> RunPlan:
    """The :class:`RunPlan` of ``budget`` and ``config`` in d dimensions; its ledgers add up to the budget."""
    rule = depth_strategy(budget, config, d)
    return RunPlan(rule, rule.releases(budget, config, d))


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


def as_numeric_array(X, name: str = "X"):
    """``X`` as an array: JAX and NumPy arrays as they are; pandas DataFrames, lists and other
    array-likes through :func:`numpy.asarray` (a copy or a view, never written to); a clear
    TypeError naming the non-numeric columns of a DataFrame."""
    if isinstance(X, (jax.Array, np.ndarray)) or _is_tracer(X):
        return X
    columns, dtypes = getattr(X, "columns", None), getattr(X, "dtypes", None)
    if columns is not None and dtypes is not None:  # a DataFrame: every column must be numeric
        bad = [f"{c!r} ({t})" for c, t in zip(columns, dtypes) if getattr(t, "kind", "O") not in "iuf"]
        if bad:
            raise TypeError(
                f"{name} has non-numeric columns {', '.join(bad)}: drop or encode them first, e.g. "
                f"{name}.drop(columns=[...]) or {name}.select_dtypes('number')"
            )
    try:
        array = np.asarray(X)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be an array-like of shape (n, d), got {type(X).__name__}: {error}") from error
    if array.dtype.kind not in "biufc":  # strings, objects: not numbers at all
        raise TypeError(f"{name} must be a numeric array-like of shape (n, d), got {type(X).__name__}")
    return array


def _validate_points(X) -> jax.Array | np.ndarray:
    X = as_numeric_array(X)
    if X.ndim != 2:
        raise ValueError(f"X must have rank 2 (n points, d dimensions), got shape {tuple(X.shape)}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty: shape {tuple(X.shape)}; need at least one point and one dimension")
    if X.shape[0] > MAX_POINTS:
        raise ValueError(
            f"X has {X.shape[0]} points; dpm_jax supports at most {MAX_POINTS} (2**31 - 1: "
            "counts are exact int32 integers)"
        )
    if X.dtype.kind not in "iuf":
        raise TypeError(f"X must hold real numbers, got dtype {X.dtype}; convert it, e.g. np.asarray(X, float)")
    if not _is_tracer(X):
        # A JAX array is checked where it lives (one fused reduction, no transfer);
        # the position of the first bad value is only looked up when there is one.
        if not _all_finite(X):
            row, col = np.argwhere(~np.isfinite(np.asarray(X)))[0]
            raise ValueError(
                f"X contains NaN or inf (first at row {row}, column {col}); "
                "remove or impute those values before clustering"
            )
    if not (isinstance(X, jax.Array) or _is_tracer(X)):
        return within_float32(np.asarray(X))  # moved to the device by rows.on_device, as a copy
    # A JAX array is immutable; sharded rows stay on their devices (dpm_jax.sharding).
    return X if _is_tracer(X) else automatic_axes(X)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def within_float32(X: np.ndarray) -> np.ndarray:
    """``X`` with values beyond float32's range set to +-its largest finite value (a copy if any).

    The data domain is the finite reals, clipped to the bounds. Cast to float32, a finite float64
    above 3.4e38 would become inf (clipped to the bound all the same) with a RuntimeWarning that
    only data holding such a record emits; saturated first, it is clipped to the bound like every
    other value, silently. A per-record map applied before any statistic: privacy is unaffected.
    """
    if X.dtype.kind == "f" and X.dtype.itemsize > 4 and X.size and (X.max() > _FLOAT32_MAX or X.min() < -_FLOAT32_MAX):
        return np.clip(X, -_FLOAT32_MAX, _FLOAT32_MAX)
    return X


def _all_finite(X) -> bool:
    # a CPU array that is padded (no program per n) is read in place; a larger one on the device
    if not isinstance(X, jax.Array) or (on_one_cpu(X) and X.shape[0] <= MAX_BUCKETED_ROWS):
        return bool(np.isfinite(np.asarray(X)).all())
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
    if isinstance(bounds, (np.ndarray, jax.Array)) and bounds.ndim in (1, 2) and bounds.shape[0] == 2:
        bounds = (bounds[0], bounds[1])  # an array of shape (2,) or (2, d): rows lo and hi
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise ValueError(
            f"bounds must be a pair (lo, hi) of scalars or ({d},) arrays, or an array of shape (2,) or (2, {d}); "
            f"got {bounds!r}"
        )
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
        with np.errstate(over="ignore"):  # public numbers: an overflow is refused below, not warned about
            _check_float32_range(*(a.astype(np.float32) for a in arrays), lower, upper)
    # Concrete bounds stay NumPy (float32): the value checks above ran on exactly these numbers.
    arrays = [a if _is_tracer(a) else np.asarray(a, np.float32) for a in arrays]
    return arrays[0], arrays[1]


_MIN_RANGE, _MAX_RANGE = 2.0**-100, 2.0**100  # hi - lo; far from float32's subnormals (2**-126)


def _check_float32_range(lower: np.ndarray, upper: np.ndarray, given_lower, given_upper) -> None:
    """The computation runs in float32: the bounds must be finite there, and the range ``hi - lo``
    and its reciprocal (every point is scaled by it) normal numbers well away from the subnormals,
    which the CPU flushes to 0 (a range above 2**126 scaled every point to 0: one collapsed centre)."""
    given = f"lo={given_lower}, hi={given_upper}"
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError(f"bounds {given} overflow float32 (|value| <= 3.4e38): rescale the data")
    if not np.all(lower < upper):
        raise ValueError(
            f"bounds {given} collapse to lo == hi in float32; "
            "rescale the data so the range is resolvable in single precision"
        )
    width = upper.astype(np.float64) - lower.astype(np.float64)
    if not np.all((width >= _MIN_RANGE) & (width <= _MAX_RANGE)):
        raise ValueError(
            f"bounds {given}: the range hi - lo must be between 2**-100 (7.9e-31) and 2**100 (1.3e30) "
            "for single-precision arithmetic: rescale the data (and the bounds) to a moderate range"
        )


def _validate_mask(point_mask, n: int) -> jax.Array | np.ndarray:
    if point_mask is None:
        return np.ones(n, bool)
    if not hasattr(point_mask, "shape") or point_mask.shape != (n,):
        raise ValueError(f"point_mask must have shape ({n},), got {getattr(point_mask, 'shape', None)}")
    return point_mask if isinstance(point_mask, jax.Array) or _is_tracer(point_mask) else np.asarray(point_mask)


class ValidInput(NamedTuple):
    """An entry point's data after the checks every algorithm makes before any work (:func:`validated_input`)."""

    points: jax.Array  # (m, d) float32 (a copy: the caller's X is never touched)
    mask: jax.Array  # (m,) bool, False marks padding points
    rows: int  # n, the caller's rows: m = n, or its row bucket (dpm_jax.rows)


def validated_input(key: jax.Array, X: Any, point_mask: Any = None, *, bucket: bool = False) -> ValidInput:
    """The key and data of an entry point (:func:`cluster`, :func:`dpm_jax.synthesize`,
    :func:`dpm_jax.kmeans`, :func:`dpm_jax.private_bounds`), checked in this order before any
    statistic of ``X`` is computed: the key (:func:`validate_key`); X numeric (a DataFrame's columns
    named when not), of rank 2, not empty, at most :data:`MAX_POINTS` rows, finite where concrete;
    ``point_mask`` of shape (n,) (None: every row).

    ``bucket``: concrete data are padded with masked rows to their row bucket
    (:func:`dpm_jax.rows.bucket_size`), so that a new n reuses a compiled program; only for
    engines whose release ignores masked rows bit for bit."""
    validate_key(key)
    points = _validate_points(X)
    n = points.shape[0]
    mask = _validate_mask(point_mask, n)
    size = bucket_size(n) if bucket and paddable(points) and paddable(mask) else n
    return ValidInput(on_device(points, size, np.float32), on_device(mask, size, np.bool_), n)


def public_bounds(bounds, d: int) -> tuple[jax.Array, jax.Array]:
    """Public (lo, hi) as a run reads them: (d,) float32 each, after :func:`validate_bounds`' checks."""
    lower, upper = validate_bounds(bounds, d)
    return tuple(jnp.broadcast_to(jnp.asarray(b, jnp.float32), (d,)) for b in (lower, upper))


@entry_point("cluster")  # accountant, first-call message, 32-bit engine (dpm_jax.entry)
def cluster(
    key: jax.Array, X: Any, budget: Budget, bounds=None, *, config: DPMConfig = DPMConfig(), point_mask: Any = None
) -> ClusterResult:
    """Cluster ``X`` under (epsilon, delta)-DP with DPM, without being told k.

    Args:
      key: a JAX PRNG key; every noise draw is derived from it (module docstring).
      X: (n, d) data: a JAX or NumPy array, a pandas DataFrame with numeric columns, or any
        numeric array-like. Values outside ``bounds`` are clipped to them.
      budget: the total :class:`Budget`; the ledger of the result adds up to it.
      bounds: public (lo, hi), scalars or (d,) arrays, or an array of shape (2,) or (2, d)
        (see BOUNDS_REQUIRED); or "private" / :class:`dpm_jax.bounds.PrivateBounds`: estimated under
        DP with a share of ``budget`` first (:func:`dpm_jax.bounds.run_with_private_bounds`; its
        ledger line comes first).
      config: hyper-parameters (:class:`DPMConfig`, paper defaults).
      point_mask: optional (n,) bool; False marks padding points, which are ignored.
        Use it to batch data sets of different sizes under ``jax.vmap``.

    Returns:
      A :class:`ClusterResult`. ``np.asarray(r.centers)[np.asarray(r.valid)]``
      are the k centres.

    Works under ``jax.jit`` (with ``budget`` and ``config`` static) and ``jax.vmap``
    (over keys, data sets, masks). Value checks on X and bounds (NaN, lo < hi) run
    only when they are concrete, i.e. outside of jit/vmap tracing. The release is the same
    with ``jax_enable_x64`` on (:mod:`dpm_jax.entry`). Inside ``with accountant:`` the call
    charges ``budget`` to the :class:`dpm_jax.Accountant` before it reads ``X``.
    """
    validate_budget_and_config(budget, config)
    data = validated_input(key, X, point_mask, bucket=True)
    d = data.points.shape[1]
    if bounds_lib.is_private(bounds):

        def prepare(rest: Budget):  # plans (and refuses) the run before the bounds are estimated
            run_plan = plan_run(rest, config, d)
            return lambda released: _cluster_within(key, data, public_bounds(released, d), rest, run_plan, config)

        return bounds_lib.run_with_private_bounds(key, data.points, data.mask, budget, bounds, prepare)
    within = public_bounds(bounds, d)
    return _cluster_within(key, data, within, budget, plan_run(budget, config, d), config)


def _cluster_within(
    key, data: ValidInput, within, budget: Budget, run_plan: RunPlan, config: DPMConfig
) -> ClusterResult:
    """The run on validated data within validated bounds ``within`` (public, or the released private ones).

    ``data`` may be padded to their row bucket; the labels are cut back to the caller's rows."""
    lower, upper = within
    points, mask, rows = data
    arrays = _cluster_arrays(
        key,
        points,
        mask,
        lower,
        upper,
        em_table_on_device(),
        gaussian_thresholds_on_device(run_plan.leaf_sums.sigma),
        run_plan=run_plan,
        config=config,
        rows_sharded=rows_over_devices(points),
    )
    arrays = dict(arrays, labels_nonprivate=first_rows(arrays["labels_nonprivate"], rows))
    return cluster_result(arrays, lower, upper, run_plan, budget, config)


def cluster_result(arrays: dict, lower, upper, run_plan: RunPlan, budget: Budget, config: DPMConfig) -> ClusterResult:
    """The step after the levels, for every kind of run (in memory, streamed): the result of the
    released ``arrays`` with the run's releases and bounds, and the warnings of :func:`warn_if_starved`."""
    result = ClusterResult(**arrays, releases=run_plan.releases, bounds=(lower, upper))
    warn_if_starved(result, budget, config, lower.shape[0])
    return result


def warn_if_starved(result: ClusterResult, budget: Budget, config: DPMConfig, d: int) -> None:
    """An InsufficientBudgetWarning when the plan cannot separate two clusters at the released size,
    a LargeDeltaWarning when delta >= 1 / the released size.

    The size is the released root count n~ (post-processing of the release: no privacy
    cost), not the row count of X, which is private under add/remove-one neighbours
    unless the user declares it public. Skipped under jax.jit and jax.vmap, where n~ is
    not a number yet.
    """
    root = result.tree.noisy_count
    if not _is_tracer(root):
        warn_if_insufficient(float(root[1]), d, budget, config, "the released size n~")
        warn_if_large_delta(float(root[1]), budget, "the released size n~")


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


def root_count(key: jax.Array, num_points: jax.Array, run_plan: RunPlan, padded: int):
    """The run's depth (its depth rule's ``choose``), the count stream's noise of every node in heap
    layout (:func:`dpm_jax.tree.level_count_noise`) and the root's noisy count n~ = |S| + Z
    (Algorithm 1, line 7), exact integers. Traceable."""
    depth = run_plan.depth_rule.choose(key, num_points)
    noise = level_count_noise(derive_key(key, run_plan.count_stream), run_plan.by_depth, depth, padded)
    return depth, noise, add_count_noise(num_points, exact.Int(tuple(limb[1] for limb in noise.limbs)))


def split_bits(key: jax.Array, run_plan: RunPlan, config: DPMConfig) -> jax.Array:
    """The split choices' random words of every node in heap layout, (2**padded_depth, EM_TRIES, EM_DIGITS)."""
    shape = (config.max_clusters, EM_TRIES, EM_DIGITS)
    return random_words(derive_key(key, run_plan.split_stream), shape)


def structure_noise(key: jax.Array, run_plan: RunPlan, depth, config: DPMConfig) -> exact.Int | None:
    """The "no structure" tests' noise of every inner node in heap layout, (2**padded_depth,), or
    None without the test (:func:`dpm_jax.tree.level_structure_noise`, :mod:`dpm_jax.structure`)."""
    return _per_node_noise(key, run_plan, depth, config, lambda r: r.structures, level_structure_noise)


def merge_noise(key: jax.Array, run_plan: RunPlan, depth, config: DPMConfig) -> exact.Int | None:
    """The merge's valley statistics' noise of every inner node in heap layout, (2**padded_depth,),
    or None without the merge (:func:`dpm_jax.tree.level_merge_noise`, :mod:`dpm_jax.merge`)."""
    return _per_node_noise(key, run_plan, depth, config, lambda r: r.merges, level_merge_noise)


def _per_node_noise(key, run_plan: RunPlan, depth, config: DPMConfig, releases_of, draw) -> exact.Int | None:
    """``draw``'s noise from the key of the one stream of every depth's ``releases_of(releases)``; None when none."""
    by_depth = run_plan.by_depth
    if not releases_of(by_depth[0]):
        return None
    (stream,) = {release.stream for releases in by_depth for release in releases_of(releases)}
    return draw(derive_key(key, stream), by_depth, depth, config.padded_depth)


_structure_noise = jax.jit(structure_noise, static_argnames=("run_plan", "config"))
_merge_noise = jax.jit(merge_noise, static_argnames=("run_plan", "config"))


# Compiled as the in-memory program compiles them (there they are traced inline): the streamed
# path calls them on the host, and XLA's fused float32 arithmetic then rounds the same way.
_root_count = jax.jit(root_count, static_argnames=("run_plan", "padded"))
_root_interval_size = jax.jit(root_interval_size, static_argnames="config")


def start_levels(
    key: jax.Array,
    num_points: jax.Array,
    lower: jax.Array,
    upper: jax.Array,
    em_table,
    run_plan: RunPlan,
    config: DPMConfig,
    algorithm_2: Callable[[jax.Array, exact.Int], jax.Array],
) -> LevelStart:
    """The steps before the levels, for every kind of run (in memory, streamed, sharded): the depth and
    the root's noisy count n~ (:func:`root_count`, line 7), the split interval size (line 8), the
    schedule of the run's depth and the randomness of every node (count noise, split bits).

    ``algorithm_2(key, n~) -> beta``: Algorithm 2's release on the run's data, with its key stream's
    key and the released root count (in memory: its sorts; streamed: sorted columns). Called on the
    paper grid only; the cell grid has no such release and reports its root's interval size
    (:func:`dpm_jax.tree.root_interval_size`). Traceable when ``algorithm_2`` is.
    """
    padded = config.padded_depth
    depth, noise, root_exact = _root_count(key, num_points, run_plan=run_plan, padded=padded)
    if run_plan.interval is None:
        beta = _root_interval_size(lower, upper, config=config)
    else:
        beta = algorithm_2(derive_key(key, run_plan.interval.stream), root_exact)
    return LevelStart(
        PublicInputs(em_table, lower, upper, root_exact, beta, depth),
        level_schedule(run_plan.by_depth, depth, padded),
        padded_randomness(
            split_bits(key, run_plan, config),
            noise,
            2 ** (padded - 1),
            _structure_noise(key, run_plan=run_plan, depth=depth, config=config),
            _merge_noise(key, run_plan=run_plan, depth=depth, config=config),
        ),
    )


@functools.partial(jax.jit, static_argnames=("run_plan", "config", "rows_sharded"))
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
    rows_sharded: bool = False,
):
    # When X is closed over by a caller's jit/vmap it becomes a compile-time constant,
    # and XLA would constant-fold the data sort of Algorithm 2 at compile time (tens of
    # seconds for 100k points); the barrier keeps the data opaque to the compiler.
    points = jax.lax.optimization_barrier(points)

    def algorithm_2(interval_key, root_exact):  # line 8, on the points' sorted coordinates
        unit_points = to_unit_range(points, lower, upper)  # a per-record map: DP is unaffected
        noisy_size = exact.to_float32(root_exact)
        return estimate_split_interval_size(
            interval_key, em_table, unit_points, mask, noisy_size, run_plan.interval, config
        )[0]

    start = start_levels(key, jnp.sum(mask, dtype=jnp.int32), lower, upper, em_table, run_plan, config, algorithm_2)
    # Lines 10, 13-28. Rows sharded over devices: the loops over row blocks (here and in the leaf
    # sums) read strided blocks, which stay on the rows' devices (dpm_jax._arrays.row_blocks);
    # the same release either way.
    tree, leaves = build_tree(start, points, mask, config, rows_sharded)
    # Line 11.
    centers = leaf_centers(
        derive_key(key, run_plan.leaf_sums.stream),
        points,
        mask,
        leaves.point_slot,
        leaves.noisy_count,
        leaves.valid,
        lower,
        upper,
        gaussian_thresholds,
        run_plan.leaf_sums,
        rows_sharded,
    )
    return released_arrays(tree, leaves, centers, start, config)


def released_arrays(tree: SplitTree, leaves: Leaves, centers, start: LevelStart, config: DPMConfig) -> dict:
    """The fields of a :class:`ClusterResult` from the tree, its leaves and their centres: DP but
    ``labels_nonprivate`` (the leaves' ``point_slot``, empty for streamed data).

    Shared by :func:`cluster` and :func:`dpm_jax.stream.cluster_stream`; all of it is
    post-processing of released values. With the merge (``DPMConfig.merge_share``) the leaves
    become the merged groups first (:mod:`dpm_jax.merge`). A leaf whose released size is below 1
    (tiny budgets: count noise larger than the data) is not reported as a cluster while another
    leaf reaches 1; when none does, every leaf stays (k >= 1) with its size reported as 1. A valid
    cluster's released size is never below 1.
    """
    if config.merges_leaves:
        roots = merge_roots(
            tree.is_split, tree.valley, tree.noisy_count, start.schedule.merge_epsilons, config.max_splits_per_dim
        )
        merged = merged_slots(roots, *leaves, centers)
        leaves, centers = Leaves(*merged[:-1]), merged.centers
    reaches_one = leaves.valid & (leaves.noisy_count >= 1)
    valid = jnp.where(jnp.any(reaches_one), reaches_one, leaves.valid)
    lower, upper = start.public.lower, start.public.upper
    return dict(
        centers=jnp.where(valid[:, None], centers, jnp.nan),
        counts=jnp.where(valid, jnp.maximum(leaves.noisy_count, 1.0), 0.0),
        valid=valid,
        k=jnp.sum(valid).astype(jnp.int32),
        depth=jnp.asarray(start.public.depth, jnp.int32),
        tree=tree,
        split_interval_size=start.public.beta * (upper - lower),
        leaf_node=leaves.node,
        labels_nonprivate=leaves.point_slot,
    )
