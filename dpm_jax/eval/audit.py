"""Empirical privacy audit: a statistical *lower* bound on the epsilon a mechanism spends.

A mechanism M is (epsilon, delta)-DP only if, for neighbouring data sets A and B and
every output event E,

    P[M(A) in E] <= e^epsilon P[M(B) in E] + delta   (and A, B swapped).

:func:`audit` runs M many times on A and on B (``jax.vmap`` over keys, in batches),
counts how often each event occurs, and turns the counts into one-sided
Clopper-Pearson bounds: with p_hi_lower a lower confidence bound of the larger
probability and p_lo_upper an upper confidence bound of the smaller one,

    epsilon >= ln((p_hi_lower - delta) / p_lo_upper).

It does this for every event, its complement, and both directions. The 4 one-sided
bounds per event (lower and upper, for A and for B; the complement reuses them)
are taken at level (1 - confidence) / (4 * #events) each, so by Bonferroni all of
them, and hence every reported bound and their maximum, hold simultaneously with
probability >= ``confidence`` over the mechanism's randomness. A correct mechanism
therefore reports ``epsilon_lower_bound > claimed epsilon`` with probability at
most 1 - confidence; a result above the claim is evidence of a privacy bug.

An audit can only show violations, never prove privacy: the bound is as strong as
the data sets and events chosen. Good pairs put the differing point where it moves
released statistics the most (e.g. far from all other points, at the bounds), and
good events are tails of the released quantities it moves. :func:`far_point_neighbours`
and the event constructors below build such pairs and events for :func:`dpm_jax.cluster`;
:func:`split_step_mechanism` isolates one split choice of the tree (library pieces,
public n~) so that the exponential mechanism can be audited on its own.
:func:`audit_host` audits the entry points that run on the host, the estimator
(:func:`estimator_mechanism`) and the command line (:func:`cli_mechanism`), run by run,
with a refusal (an exception, an exit status) as one of the outcomes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact, mechanisms, tree
from dpm_jax.budget import Budget
from dpm_jax.config import DPMConfig
from dpm_jax.eval.bounds import broadcast_bounds

__all__ = [
    "AuditResult",
    "EventAudit",
    "audit",
    "clopper_pearson_bounds",
    "epsilon_lower_bound",
    "far_point_neighbours",
    "float32_sum_neighbours",
    "cluster_mechanism",
    "split_step_mechanism",
    "structure_step_mechanism",
    "merge_step_mechanism",
    "greedy_selection_mechanism",
    "greedy_histogram_mechanism",
    "noisy_count_at_least",
    "num_clusters_equals",
    "first_split_dim_equals",
    "first_split_above",
    "center_in_box",
    "both",
    "Refused",
    "CliOutput",
    "audit_host",
    "estimator_mechanism",
    "cli_mechanism",
    "released",
    "stderr_mentions",
    "stderr_shaped_as",
]

Event = Callable[[Any], jax.Array]
Mechanism = Callable[[jax.Array, Any], Any]


class EventAudit(NamedTuple):
    """The audit of one event.

    Attributes:
      name: the event's name.
      count_a, count_b: how often it occurred in ``num_runs`` runs on A and on B.
      interval_a, interval_b: simultaneous (lower, upper) Clopper-Pearson bounds of
        P[E] under A and under B (each side at level (1 - confidence) / (4 #events)).
      epsilon_lower_bound: the best of the four bounds (E or not E, A over B or B
        over A), clipped at 0.
      direction: which of the four attained it, e.g. "P_b(E) / P_a(E)".
    """

    name: str
    count_a: int
    count_b: int
    interval_a: tuple[float, float]
    interval_b: tuple[float, float]
    epsilon_lower_bound: float
    direction: str


class AuditResult(NamedTuple):
    """Result of :func:`audit`.

    Attributes:
      epsilon_lower_bound: max over events; with probability >= ``confidence`` the
        mechanism is not (epsilon, delta)-DP for any epsilon below it.
      per_event: one :class:`EventAudit` per event, in the order given.
      num_runs: runs on each data set.
      confidence: the simultaneous confidence of all bounds.
      delta: the delta the bounds are computed for.
    """

    epsilon_lower_bound: float
    per_event: tuple[EventAudit, ...]
    num_runs: int
    confidence: float
    delta: float

    def table(self) -> str:
        """A plain-text table of the per-event results."""
        lines = [
            f"{'event':<34}{'count A':>9}{'count B':>9}  {'P_A interval':<21}"
            f"{'P_B interval':<21}{'eps_lb':>8}  direction"
        ]
        for e in self.per_event:
            lines.append(
                f"{e.name:<34.34}{e.count_a:>9}{e.count_b:>9}  "
                f"[{e.interval_a[0]:.4f}, {e.interval_a[1]:.4f}]  "
                f"[{e.interval_b[0]:.4f}, {e.interval_b[1]:.4f}]  "
                f"{e.epsilon_lower_bound:>7.3f}  {e.direction}"
            )
        lines.append(
            f"epsilon lower bound {self.epsilon_lower_bound:.4f} at confidence "
            f"{self.confidence} (delta={self.delta:g}, {self.num_runs} runs per data set)"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dictionary."""
        return dict(
            epsilon_lower_bound=self.epsilon_lower_bound,
            num_runs=self.num_runs,
            confidence=self.confidence,
            delta=self.delta,
            per_event=[e._asdict() for e in self.per_event],
        )


# ---------------------------------------------------------------------- statistics
def clopper_pearson_bounds(count: int, num_runs: int, level: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) of a binomial proportion.

    Each holds with probability >= 1 - ``level`` on its own:
    lower = Beta^{-1}(level; k, n - k + 1) (0 if k = 0),
    upper = Beta^{-1}(1 - level; k + 1, n - k) (1 if k = n).
    """
    from scipy.stats import beta  # scipy is needed only for auditing

    if not 0 <= count <= num_runs or num_runs < 1:
        raise ValueError(f"need 0 <= count <= num_runs and num_runs >= 1, got {count}, {num_runs}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    lower = 0.0 if count == 0 else float(beta.ppf(level, count, num_runs - count + 1))
    upper = 1.0 if count == num_runs else float(beta.isf(level, count + 1, num_runs - count))
    return lower, upper


def _log_ratio_bound(p_high_lower: float, p_low_upper: float, delta: float) -> float:
    """ln((p_high_lower - delta) / p_low_upper), or -inf where it is not defined."""
    if p_high_lower - delta <= 0 or p_low_upper <= 0:
        return -math.inf
    return math.log((p_high_lower - delta) / p_low_upper)


def epsilon_lower_bound(
    count_a: int, count_b: int, num_runs: int, delta: float = 0.0, level: float = 0.05
) -> tuple[float, str, tuple, tuple]:
    """The best epsilon lower bound one event's counts give, over E / not E and directions.

    Args:
      count_a, count_b: occurrences of E in ``num_runs`` runs on A and on B.
      num_runs: runs per data set.
      delta: the delta of the (epsilon, delta) claim being tested.
      level: the level of each of the four one-sided Clopper-Pearson bounds.
    Returns:
      (bound clipped at 0, direction, (lower, upper) for A, (lower, upper) for B).
    """
    a_low, a_high = clopper_pearson_bounds(count_a, num_runs, level)
    b_low, b_high = clopper_pearson_bounds(count_b, num_runs, level)
    candidates = {
        "P_a(E) / P_b(E)": _log_ratio_bound(a_low, b_high, delta),
        "P_b(E) / P_a(E)": _log_ratio_bound(b_low, a_high, delta),
        "P_a(not E) / P_b(not E)": _log_ratio_bound(1 - a_high, 1 - b_low, delta),
        "P_b(not E) / P_a(not E)": _log_ratio_bound(1 - b_high, 1 - a_low, delta),
    }
    direction = max(candidates, key=candidates.get)
    return max(0.0, candidates[direction]), direction, (a_low, a_high), (b_low, b_high)


# ------------------------------------------------------------------------ sampling
def _event_counter(
    mechanism: Mechanism,
    events: tuple[Event, ...],
    num_runs: int,
    batch_size: int,
    compiler_options: Mapping[str, Any] | None = None,
) -> Callable[[jax.Array, Any], np.ndarray]:
    """``count(key, dataset)``: how often each event occurs in ``num_runs`` runs.

    One jitted batch function serves both data sets (compiled once per shape).
    """
    batch_size = max(1, min(batch_size, num_runs))
    num_batches = -(-num_runs // batch_size)

    def one_run(run_key, data):
        output = mechanism(run_key, data)
        return jnp.stack([jnp.reshape(jnp.asarray(event(output), bool), ()) for event in events])

    @functools.partial(jax.jit, compiler_options=compiler_options)
    def batch_counts(batch_keys, start, data):
        occurred = jax.vmap(one_run, in_axes=(0, None))(batch_keys, data)
        counted = (start + jnp.arange(batch_size)) < num_runs  # drop the runs past num_runs
        return jnp.sum(occurred & counted[:, None], axis=0, dtype=jnp.int32)

    def count(key, dataset):
        keys = jax.random.split(key, num_batches * batch_size).reshape(num_batches, batch_size)
        totals = np.zeros(len(events), np.int64)
        for b in range(num_batches):
            totals += np.asarray(batch_counts(keys[b], b * batch_size, dataset))
        return totals

    return count


def audit(
    key: jax.Array,
    mechanism: Mechanism,
    dataset_a: Any,
    dataset_b: Any,
    events: Mapping[str, Event],
    num_runs: int,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    batch_size: int = 8192,
    compiler_options: Mapping[str, Any] | None = None,
) -> AuditResult:
    """Audit ``mechanism`` on the neighbouring data sets A and B (module docstring).

    Args:
      key: PRNG key; the runs on A use split(key)[0], those on B split(key)[1].
      mechanism: ``mechanism(key, dataset) -> output`` (any pytree), jit/vmap-able.
        The data sets are passed as traced arguments (``cluster`` then skips its
        value checks, so check the data sets beforehand).
      dataset_a, dataset_b: neighbouring data sets (any pytrees; shapes may differ,
        each shape is compiled once).
      events: name -> ``event(output) -> bool scalar``.
      num_runs: runs per data set.
      delta: the delta of the claim to test (0 for pure DP).
      confidence: simultaneous confidence of all bounds (Bonferroni over 4 one-sided
        bounds per event).
      batch_size: runs per compiled batch (memory).
      compiler_options: XLA options of the compiled batch (``jax.jit``'s), e.g. to audit at XLA's
        defaults in a process whose ``XLA_FLAGS`` trade run time for compile time.

    Returns:
      :class:`AuditResult`.
    """
    _check_audit_arguments(events, num_runs, delta, confidence)
    names = tuple(events)
    functions = tuple(events[name] for name in names)
    key_a, key_b = jax.random.split(key)
    count = _event_counter(mechanism, functions, int(num_runs), batch_size, compiler_options)
    return _audit_result(names, count(key_a, dataset_a), count(key_b, dataset_b), num_runs, delta, confidence)


def _check_audit_arguments(events, num_runs, delta: float, confidence: float) -> None:
    if not events:
        raise ValueError("audit needs at least one event")
    if int(num_runs) < 1:
        raise ValueError(f"num_runs must be >= 1, got {num_runs}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")


def _audit_result(names, counts_a, counts_b, num_runs, delta: float, confidence: float) -> AuditResult:
    """The simultaneous bounds of every event from its counts (module docstring)."""
    level = (1.0 - confidence) / (4 * len(names))
    per_event = []
    for name, count_a, count_b in zip(names, counts_a, counts_b):
        bound, direction, interval_a, interval_b = epsilon_lower_bound(
            int(count_a), int(count_b), int(num_runs), delta, level
        )
        per_event.append(EventAudit(name, int(count_a), int(count_b), interval_a, interval_b, bound, direction))
    best = max(e.epsilon_lower_bound for e in per_event)
    return AuditResult(best, tuple(per_event), int(num_runs), float(confidence), float(delta))


# ------------------------------------------------------- neighbours and mechanisms
def far_point_neighbours(points, bounds, corner: str = "upper", masked: bool = False):
    """(A, B): A = ``points``, B = A plus one point at a corner of the public bounds.

    The extra point is as far from a cluster near the opposite corner as the bounds
    allow, so it lands alone in its own region of every split.

    With ``masked=True`` both data sets are ``(X, mask)`` pairs over the same array
    X = B, the extra point masked out in A: one shape, so :func:`audit` compiles the
    mechanism once (``cluster`` treats a masked point as absent).
    """
    points = np.asarray(points, np.float32)
    if points.ndim != 2 or corner not in ("upper", "lower"):
        raise ValueError("points must be (n, d) and corner 'upper' or 'lower'")
    lower, upper = broadcast_bounds(bounds, points.shape[1], np.float32)
    extended = np.concatenate([points, (upper if corner == "upper" else lower)[None, :]])
    if not masked:
        return points, extended
    present = np.ones(len(extended), bool)
    return (extended, np.arange(len(extended)) < len(points)), (extended, present)


def float32_sum_neighbours():
    """The construction that broke float32 leaf sums, as masked pairs ``((X, mask_A), (X, mask_B))``.

    d = 1, bounds (-1, 1): 16,383 points at +1, then 40,000 pairs (+1.2, -0.9) 2**-10;
    B adds one point at 1.0 placed first. Float32 partial sums of B sit one binade
    higher than A's from the start, so every small pair rounds differently: the float32
    sums differ by about 79 (data units) against a sensitivity of 1. Exact sums
    differ by the added point only.
    """
    pairs = np.tile(np.array([1.2, -0.9]) * 2.0**-10, 40_000)
    points = np.concatenate([[1.0], np.ones(16_383), pairs]).astype(np.float32)[:, None]
    return (points, np.arange(len(points)) > 0), (points, np.ones(len(points), bool))


def cluster_mechanism(budget: Budget, bounds, config: DPMConfig = DPMConfig()) -> Mechanism:
    """``mechanism(key, data)``: :func:`dpm_jax.cluster` of ``data`` = X or (X, point_mask)."""
    from dpm_jax.api import cluster

    def mechanism(key, data):
        points, mask = data if isinstance(data, tuple) else (data, None)
        return cluster(key, points, budget, bounds=bounds, config=config, point_mask=mask)

    return mechanism


def split_step_mechanism(
    noisy_count: int, epsilon: float, beta: float, config: DPMConfig = DPMConfig(), offset: float = 0.0
) -> Mechanism:
    """One split choice of the tree, on the engine's own code path, for auditing.

    ``mechanism(key, unit_points) -> (dim, candidate)``: the root level of the tree for one
    node, step by step as :func:`dpm_jax.tree.split_level` runs it: the run's inputs
    (``tree.point_inputs``, the points given in unit coordinates: bounds (0, 1)), the level's
    grid (``tree.level_grid``: the paper's global grid of interval size ``beta``, or the root's
    cell with ``config.split_window``), its histogram (``tree.level_counts``) and the split
    choice (``tree.choose_splits``: integer scores, the exact exponential mechanism), with the
    *public* released count ``noisy_count`` and the level's ``offset`` lambda (looked up at
    call time, so a test can substitute a broken variant of any piece). Conditioned on n~,
    the tree's split choice is this mechanism; its claim is (epsilon, delta)-DP with the
    sampler's delta :func:`dpm_jax.mechanisms.em_sampler_tv` (1 + e^epsilon) for the config's
    candidates.
    """
    config = dataclasses.replace(config, tau_r=1)  # one level, one node slot
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def mechanism(key, unit_points):
        n, d = unit_points.shape
        count = exact.from_int32(jnp.full((), noisy_count, jnp.int32))
        inputs = tree.point_inputs(
            unit_points, table, jnp.zeros(d), jnp.ones(d), count, jnp.float32(beta), config, jnp.int32(config.tau_r)
        )
        grid, candidate_valid = tree.level_grid(inputs, *tree.root_cells(inputs))
        point_node, point_active = jnp.zeros(n, jnp.int32), jnp.ones(n, bool)
        histogram = tree.level_counts(inputs, grid, point_node, point_active)
        bits = mechanisms.random_words(key, (1, mechanisms.EM_TRIES, mechanisms.EM_DIGITS))
        choice = tree.choose_splits(
            inputs,
            jnp.int32(0),
            histogram,
            tree.root_node_counts(count, 1),
            jnp.ones(1, bool),
            candidate_valid,
            bits,
            epsilon,
            offset,
        )
        return choice.split_dim[0], choice.split_index[0]

    return mechanism


def structure_step_mechanism(noisy_count: int, budget: Budget, config: DPMConfig) -> Mechanism:
    """The root's "no structure" test (:mod:`dpm_jax.structure`) on the engine's own code path.

    ``mechanism(key, unit_points) -> halted`` (bool): the run plan of ``budget`` and ``config``
    at tau_r = 1 (:func:`dpm_jax.api.plan_run`, whose ``structure/level0`` release states the
    claim), its test noise as a run draws it (:func:`dpm_jax.api.structure_noise`), the root's
    cell grid and histogram (``tree.level_grid``, ``tree.level_counts``) and the decision
    (``tree.choose_splits``' window excess, ``tree.structure_halts``), with the *public* released
    count ``noisy_count``. Conditioned on
    n~ the tree's halt bit at the root is this mechanism; its claim is the line's
    (epsilon, sampler delta). Pieces are looked up at call time (a test can substitute them).
    """
    from dpm_jax import api

    config = dataclasses.replace(config, tau_r=1)
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def mechanism(key, unit_points):
        run_plan = api.plan_run(budget, config, unit_points.shape[1])
        (releases,) = run_plan.by_depth
        # Q as the engine computes it, beside the split scores (their draw is not this release's).
        inputs, grid, nodes, choice = _root_choice(unit_points, noisy_count, config, table, test=True)
        noise = _root_noise(api.structure_noise(key, run_plan, 1, config))
        root = (nodes, jnp.ones(1, bool), jnp.int32(0))
        halted = tree.structure_halts(inputs, grid, choice.excess, *root, noise, releases.structure_epsilons[0])
        return halted[0]

    return mechanism


def merge_step_mechanism(noisy_count: int, budget: Budget, config: DPMConfig) -> Mechanism:
    """The root's valley statistic for the merge (:mod:`dpm_jax.merge`) on the engine's own code path.

    ``mechanism(key, unit_points) -> (split index, noisy S)`` (int32 each): the run plan of
    ``budget`` and ``config`` at tau_r = 1 (whose ``merge/level0`` release states the claim), its
    noise as a run draws it (:func:`dpm_jax.api.merge_noise`), the root's cell grid and histogram
    (``tree.level_grid``, ``tree.level_counts``), the split choice with its valley statistic
    (``tree.choose_splits``) and the noise added as a level adds it (``merge.noisy_valleys``), with
    the *public* released count ``noisy_count``. The split is drawn with all-zero random words, so it
    is a function of the data: the claim holds for the statistic *given* the split, and an audit's
    events should condition on it (e.g. "the split is s and S~ >= t", with A and B drawing the same s).
    Pieces are looked up at call time (a test can substitute them).
    """
    from dpm_jax import api, merge

    config = dataclasses.replace(config, tau_r=1)
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def mechanism(key, unit_points):
        run_plan = api.plan_run(budget, config, unit_points.shape[1])
        *_, choice = _root_choice(unit_points, noisy_count, config, table, merge=True)
        noise = _root_noise(api.merge_noise(key, run_plan, 1, config))
        return choice.split_index[0], merge.noisy_valleys(choice.valley, noise)[0]

    return mechanism


def _root_choice(unit_points, noisy_count: int, config: DPMConfig, table, test: bool = False, merge: bool = False):
    """The root's split choice on the engine's path (``tree.choose_splits``, all-zero random words)
    with the "no structure" test's Q (``test``) and the merge's S (``merge``) beside it, at the
    public released count ``noisy_count``: (the tree's inputs, the root's cell grid, its count, the choice)."""
    n, d = unit_points.shape
    count = exact.from_int32(jnp.full((), noisy_count, jnp.int32))
    inputs = tree.point_inputs(unit_points, table, jnp.zeros(d), jnp.ones(d), count, jnp.float32(0.5), config, 1)
    grid, valid = tree.level_grid(inputs, *tree.root_cells(inputs))
    histogram = tree.level_counts(inputs, grid, jnp.zeros(n, jnp.int32), jnp.ones(n, bool))
    bits = jnp.zeros((1, mechanisms.EM_TRIES, mechanisms.EM_DIGITS), jnp.uint32)
    nodes = tree.root_node_counts(count, 1)
    used = lambda wanted: grid.used if wanted else None
    level = (jnp.int32(0), histogram, nodes, jnp.ones(1, bool), valid, bits, 1.0, 0.0, used(test), used(merge))
    return inputs, grid, nodes, tree.choose_splits(inputs, *level)


def _root_noise(heap_noise: exact.Int) -> exact.Int:
    """The root's entry (heap index 1) of a per-node noise draw."""
    return exact.Int(tuple(limb[1:2] for limb in heap_noise.limbs))


# ------------------------------------------------- entry points run on the host
class Refused(NamedTuple):
    """The outcome of a run that raised: what a caller sees instead of a release (its exception type)."""

    error: str


class CliOutput(NamedTuple):
    """What one ``dpm-jax cluster`` run shows: its exit status, its JSON release (None on failure), its stderr."""

    status: int
    release: dict | None
    stderr: str


HostMechanism = Callable[[int, Any], Any]


def audit_host(
    key: jax.Array,
    mechanism: HostMechanism,
    dataset_a: Any,
    dataset_b: Any,
    events: Mapping[str, Callable[[Any], bool]],
    num_runs: int,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> AuditResult:
    """:func:`audit` of an entry point that runs on the host and cannot be traced (the estimator, the CLI).

    ``mechanism(seed, dataset)`` runs once per seed (32-bit seeds drawn from split(key)[0] for A,
    split(key)[1] for B); an exception is an outcome like any release (:class:`Refused`), so a
    record that one entry point refuses and another accepts shows up as an unbounded loss. Events
    are host functions of the output. Same bounds and confidence as :func:`audit`.
    """
    _check_audit_arguments(events, num_runs, delta, confidence)
    names = tuple(events)

    def count(run_key, dataset) -> np.ndarray:
        seeds = np.asarray(jax.random.bits(run_key, (int(num_runs),), jnp.uint32)).tolist()
        totals = np.zeros(len(names), np.int64)
        for seed in seeds:
            try:
                output = mechanism(int(seed), dataset)
            except Exception as error:  # an outcome, observable by whoever runs the entry point
                output = Refused(type(error).__name__)
            totals += np.array([bool(events[name](output)) for name in names])
        return totals

    key_a, key_b = jax.random.split(key)
    return _audit_result(names, count(key_a, dataset_a), count(key_b, dataset_b), num_runs, delta, confidence)


def estimator_mechanism(budget: Budget, bounds, config: DPMConfig = DPMConfig()) -> HostMechanism:
    """``mechanism(seed, X)``: :class:`dpm_jax.sklearn.DPMClustering` fitted on X; its DP attributes."""
    from dpm_jax.sklearn import DPMClustering  # scikit-learn is needed only here

    parameters = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}

    def mechanism(seed, points):
        model = DPMClustering(budget.epsilon, budget.delta, bounds, seed, **parameters).fit(points)
        return dict(k=model.n_clusters_, centers=model.cluster_centers_, counts=model.counts_, depth=model.depth_)

    return mechanism


def cli_mechanism(budget: Budget, bounds: tuple[float, float], options: tuple[str, ...] = ()) -> HostMechanism:
    """``mechanism(seed, path)``: ``dpm-jax cluster path`` in this process (:class:`CliOutput`).

    ``options``: more command-line arguments (hyper-parameters, ``--stream``).
    """
    import contextlib
    import io
    import json
    import tempfile

    from dpm_jax.cli.main import main

    def mechanism(seed, path):
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()) as stderr:
            out = f"{folder}/release.json"
            arguments = ["--epsilon", repr(budget.epsilon), "--delta", repr(budget.delta), "--seed", str(seed)]
            bound_arguments = ["--bounds", repr(float(bounds[0])), repr(float(bounds[1])), "--out", out]
            status = main(["cluster", str(path), *arguments, *bound_arguments, *options])
            release = None
            if status == 0:
                with open(out) as file:
                    release = json.load(file)
        # The paths are the caller's (public) choice: masked, so that stderr has one text per outcome.
        return CliOutput(status, release, stderr.getvalue().replace(folder, "<out>").replace(str(path), "<input>"))

    return mechanism


def released(output) -> bool:
    """Host event: the run released something (it did not raise, and a CLI run exited with status 0)."""
    return not isinstance(output, Refused) and not (isinstance(output, CliOutput) and output.status != 0)


def stderr_mentions(number: int) -> Callable[[Any], bool]:
    """Host event: a CLI run's stderr holds ``number`` as a whole number (e.g. the exact row count)."""
    pattern = re.compile(rf"(?<![\d.]){number}(?![\d])")
    return lambda output: isinstance(output, CliOutput) and bool(pattern.search(output.stderr))


def stderr_shaped_as(reference: str) -> Callable[[Any], bool]:
    """Host event: a CLI run's stderr equals ``reference`` with every number masked (catches status
    or warning lines that only some data sets print; the DP numbers, k and the time, are masked)."""
    shape = lambda text: re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)
    masked = shape(reference)
    return lambda output: isinstance(output, CliOutput) and shape(output.stderr) == masked


# --------------------------------------------------------------------------- events
def greedy_selection_mechanism(epsilon: float, levels: int = 2) -> Mechanism:
    """The greedy's first centre on its own code path (:func:`dpm_jax.greedy.select.greedy_centers`).

    ``mechanism(key, (unit_points (n, 1), mask)) -> (start level, start cell)``: 1-d nets with
    start levels 0 .. ``levels``, every choice the exact exponential mechanism at ``epsilon``
    on the ball values (sensitivity 2**VALUE_BITS), as :func:`dpm_jax.kmeans` runs each
    selection (claim: epsilon per selection).
    """
    from dpm_jax.greedy import nets, select

    plan = nets.NetPlan(1, levels, levels, 2)
    table = tuple(jnp.asarray(part) for part in mechanisms.em_weight_table())

    def choose(group, key, scores, valid):
        del group
        return mechanisms.exponential_mechanism(
            key, table, exact.from_int32(scores[None]), valid[None], epsilon, 2**nets.VALUE_BITS
        )[0]

    def mechanism(key, data):
        points, mask = data
        greedy = select.greedy_centers(key, select.point_scores(points, mask, plan), plan, 1, choose)
        return greedy.start_level[0], greedy.start_cell[0, 0]

    return mechanism


def greedy_histogram_mechanism(epsilon: float, delta: float, plan) -> Mechanism:
    """The histogram method's release on its own code path (:func:`dpm_jax.greedy.histogram.noisy_values`).

    ``mechanism(key, (points_t (m, n), mask)) -> (ball_count,) int32``: every ball value of
    the nets ``plan`` (:class:`dpm_jax.greedy.nets.NetPlan`) plus the discrete Gaussian at the
    sigma :func:`dpm_jax.greedy.histogram.histogram_release` calibrates to (``epsilon``,
    ``delta``) and the stated L2 sensitivity, as :func:`dpm_jax.kmeans` runs it with
    ``method="histogram"`` (claim: (epsilon, delta)-DP).
    """
    from dpm_jax.greedy import histogram

    release = histogram.histogram_release(epsilon, delta, plan)

    def mechanism(key, data):
        points_t, mask = data
        return histogram.noisy_values(key, points_t, mask, plan, release)

    return mechanism


def noisy_count_at_least(node: int, threshold: float) -> Event:
    """The released noisy count of heap node ``node`` (1 = root) is >= ``threshold``."""
    return lambda result: result.tree.noisy_count[node] >= threshold


def num_clusters_equals(k: int) -> Event:
    """Exactly ``k`` clusters were released."""
    return lambda result: result.k == k


def first_split_dim_equals(dim: int) -> Event:
    """The root's split was drawn in dimension ``dim``."""
    return lambda result: result.tree.split_dim[1] == dim


def first_split_above(position: float) -> Event:
    """The root's split position is above ``position`` (data units)."""
    return lambda result: result.tree.split_position[1] > position


def center_in_box(lower, upper) -> Event:
    """Some released (valid) centre lies in the box [lower, upper]."""
    lower, upper = jnp.asarray(lower, jnp.float32), jnp.asarray(upper, jnp.float32)

    def event(result):
        inside = jnp.all((result.centers >= lower) & (result.centers <= upper), axis=-1)
        return jnp.any(inside & result.valid)

    return event


def both(first: Event, second: Event) -> Event:
    """The intersection of two events."""
    return lambda output: jnp.logical_and(first(output), second(output))
