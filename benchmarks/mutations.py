"""Mutation check of the privacy wiring: does a test designed for each bug catch it?

    python benchmarks/mutations.py [--out results/mutations.json] [--only NAME]
    # --only with an existing --out: its rows of the file are replaced, the others kept
    python benchmarks/mutations.py --table results/mutations.json  # the docs' table

Each mutation is one deliberate bug in the engine's privacy wiring (a noise scale,
a sensitivity, an offset, the factor 2, which key feeds which draw, clipping, the
ledger). For each, the repository's dpm_jax/ and tests/ are copied to a temporary
directory, the bug is applied, and the test(s) *designed* for that bug run against
the mutated copy (PYTHONPATH puts the copy first). A mutation is "caught" when one of
those tests fails *on an assertion* (``AssertionError``, or pytest's ``Failed``: a
``pytest.raises`` that did not raise, ``pytest.fail``); the table lists which. A test that
fails with any other exception (a NameError of a mutation that no longer fits the code, a
shape error) only *crashed*: that is listed apart and does not count, since it says the
mutation broke the program, not that the test saw the bug. A plugin
(:data:`_FAILURES_PLUGIN`) records each failure's exception type. Nothing in the working tree
is modified.

Two kinds of bug:
* :class:`ReleaseMutation` breaks a release through its parameters (a split choice with
  half its sensitivity, leaf sums without the mid-shift, a histogram with half its L2
  sensitivity, leaf counts at twice their epsilon, a Lemma-10 delta not charged, ...): a
  pytest plugin (:data:`_PLUGIN`) wraps the builder the mutation names (``"module:function"``:
  DPM's :func:`dpm_jax.dpm_releases.dpm_releases` and :func:`dpm_jax.budget.allocate`, the
  greedy's :func:`dpm_jax.greedy.api.plan_greedy` and
  :func:`dpm_jax.greedy.histogram.histogram_release`, the synthesis's
  :func:`dpm_jax.synth.plan.plan_synthesis`, the private bounds'
  :func:`dpm_jax.bounds.plan_bounds` and :func:`dpm_jax.bounds.split_for_bounds`) and applies
  the mutation's transform to what it returns, so every run draws with the broken release and
  states its line from it. No source text is matched, so a refactor of the engine cannot
  switch it off; tests/test_mutation_catalogue.py imports every builder and applies every
  transform to a real release (a renamed builder fails that fast test).
* :class:`Mutation` changes engine source text. It stays text where no release holds the
  broken thing, so no transform of a builder's output can express it:
  - the draw departs from its release (the structure test's or the heap layout's noise at
    twice the epsilon the line states, the split exponent doubled, the histogram's, the lift's
    or PrivTree's noise at another scale, PrivTree's bias dropped at the call site, a sibling's
    bits, the bounds drawn from another key than the call site's): a release mutation moves the
    draw and the line together, and the designed tests re-derive the draw from the release, so
    only a text change can make the two disagree;
  - the derivation a test measures directly (the score's and Algorithm 2's integer
    sensitivities, the histogram's N_m, PrivTree's theta and loss bound, the sampler's epsilon
    margin): the tests compare the function's value with the measured change of neighbours;
  - what is not a parameter at all: clipping, exact integer sums, the score's arithmetic,
    sampler internals (the implicit empty cells' pass probability), control flow (forbidden
    balls, dropped noise, the auto depth's rule), data read to choose a public number (the
    bounds' threshold or grid), the accountant, output order, and the guarantee's edges.
  Each old string must occur exactly once, else the run stops with an error (and
  tests/test_mutation_catalogue.py fails first).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]


class Mutation(NamedTuple):
    name: str
    file: str  # relative to the repository
    replacements: tuple[tuple[str, str], ...]  # (old, new), each old must occur exactly once
    tests: tuple[str, ...]  # pytest node ids designed to catch it
    extra: tuple[tuple[str, str, str], ...] = ()  # (file, old, new) in other files


class ReleaseMutation(NamedTuple):
    name: str
    transform: str  # a Python expression: a function of what the builder returns, returning the broken one
    tests: tuple[str, ...]
    builder: str = "dpm_jax.dpm_releases:dpm_releases"  # "module:function" whose output is broken
    with_arguments: bool = False  # transform(output, *args, **kwargs): it also sees the builder's arguments

    @property
    def module(self) -> str:
        return self.builder.partition(":")[0]

    @property
    def function(self) -> str:
        return self.builder.partition(":")[2]


_SPLITS = "lambda r: r._replace(splits=tuple(s._replace({}) for s in r.splits))"
_COUNTS = "lambda r: r._replace(counts=tuple(c._replace({}) for c in r.counts))"
_LEAF_SUMS = "lambda r: r._replace(leaf_sums=r.leaf_sums._replace({}))"
# the KD-tree's decisions (a CountRelease; PrivTree's are a PrivTreeRelease, the grid has none)
_KDTREE_DECISIONS = (
    "lambda p: p._replace(decisions=p.decisions._replace({})) if type(p.decisions).__name__ == 'CountRelease' else p"
)
_REPLAYED_SPLITS = "tests/test_api.py::test_every_split_is_select_splits_with_the_levels_parameters_and_keyed_bits"
_RELEASED_COUNTS = "tests/test_api.py::test_every_released_count_is_its_true_count_plus_the_keyed_noise"
_LEAF_NOISE = "tests/test_api.py::test_leaf_noise_is_rederived_from_the_average_stream"
_RELEASE_SENSITIVITIES = "tests/test_sensitivity.py::test_the_runs_releases_state_the_sensitivities_their_inputs_have"

_STRUCTURE_AUDIT = "tests/test_structure.py::test_structure_audit_stays_below_the_claim"
_MERGE_AUDIT = "tests/test_merge.py::test_merge_audit_stays_below_the_claim"
_MERGE_LEDGER = "tests/test_merge.py::test_the_ledger_states_one_merge_line_per_level_and_adds_up_to_the_budget"
_MERGE_RULE = "tests/test_merge.py::test_the_highest_clear_node_without_a_valley_below_roots_the_merge"
_MERGE_STATISTIC = "tests/test_merge.py::test_the_engines_valley_statistic_is_the_definition_at_its_drawn_splits"
_STRUCTURE_LEDGER = (
    "tests/test_structure.py::test_the_ledger_states_one_structure_line_per_level_and_adds_up_to_the_budget"
)

RELEASE_MUTATIONS = (
    ReleaseMutation(
        "release: the merge's valley statistics with sensitivity 1 (half their noise)",
        "lambda r: r._replace(merges=tuple(m._replace(sensitivity=1) for m in r.merges))",
        (_MERGE_LEDGER, _MERGE_AUDIT),
    ),
    ReleaseMutation(
        "release: structure tests with twice their epsilon",
        "lambda r: r._replace(structures=tuple(t._replace(epsilon=2 * t.epsilon) for t in r.structures))",
        (_STRUCTURE_LEDGER, _STRUCTURE_AUDIT),
    ),
    ReleaseMutation(
        "release: split choices with half their sensitivity",
        _SPLITS.format("sensitivity=s.sensitivity // 2"),
        (_RELEASE_SENSITIVITIES, _REPLAYED_SPLITS),
    ),
    ReleaseMutation(
        "release: split epsilons of the levels in reverse order",
        "lambda r: r._replace(splits=tuple(s._replace(epsilon=t.epsilon) for s, t in zip(r.splits, r.splits[::-1])))",
        (_REPLAYED_SPLITS,),
    ),
    ReleaseMutation(
        "release: node counts with offset lambda = 0 (the splits' Lemma 5 ratio)",
        _COUNTS.format("offset=0.0"),
        (_REPLAYED_SPLITS,),
    ),
    ReleaseMutation(
        "release: node counts with twice their epsilon (noise scale halved)",
        _COUNTS.format("epsilon=2 * c.epsilon"),
        ("tests/test_budget.py::test_ledger_adds_up_exactly_to_the_budget", _RELEASED_COUNTS),
    ),
    ReleaseMutation(
        "release: Algorithm 2 with half the utility's sensitivity",
        "lambda r: r._replace(interval=r.interval and r.interval._replace(sensitivity=r.interval.sensitivity // 2))",
        (_RELEASE_SENSITIVITIES,),
    ),
    ReleaseMutation(
        "release: leaf sums without the mid-shift (raw codes summed)",
        _LEAF_SUMS.format("code_offset=0"),
        (_RELEASE_SENSITIVITIES, "tests/test_averaging.py::test_leaf_sums_are_exact_sums_of_mid_shifted_codes"),
    ),
    ReleaseMutation(
        "release: leaf sums with half the discrete Gaussian's sigma",
        _LEAF_SUMS.format("sigma=r.leaf_sums.sigma / 2"),
        (_LEAF_NOISE,),
    ),
    ReleaseMutation(
        "release: leaf sums drawn from the split stream",
        _LEAF_SUMS.format("stream=keys.SPLIT"),
        (_LEAF_NOISE,),
    ),
    ReleaseMutation(
        "release: structure tests with Equation 2's sqrt(2**l) weights (the root gets the least)",
        "lambda a: a._replace(structure_epsilons=tuple(sum(a.structure_epsilons) * 2 ** (i / 2)"
        " / sum(2 ** (j / 2) for j in range(len(a.structure_epsilons))) for i in range(len(a.structure_epsilons))))",
        ("tests/test_structure.py::test_a_node_with_an_empty_window_halts_rarely_and_the_root_is_tested",),
        builder="dpm_jax.budget:allocate",
    ),
    ReleaseMutation(
        "release: node counts' offsets lambda = 0 in the allocation",
        "lambda a: a._replace(count_offsets=tuple(0.0 for _ in a.count_offsets))",
        ("tests/test_budget.py::test_shares_and_per_level_weights",),
        builder="dpm_jax.budget:allocate",
    ),
    ReleaseMutation(
        "release: node counts' deltas not net of their samplers' (the samplers' delta charged twice)",
        "lambda a: a._replace(count_deltas=tuple(d + s for d, s in zip(a.count_deltas, a.count_sampler_deltas)))",
        ("tests/test_budget.py::test_ledger_adds_up_exactly_to_the_budget",),
        builder="dpm_jax.budget:allocate",
    ),
    ReleaseMutation(
        "release: greedy selection with half the ball value's sensitivity",
        "lambda p: p._replace(select=p.select._replace(sensitivity=p.select.sensitivity // 2)) "
        "if p.method == 'exponential' and p.select else p",
        ("tests/test_greedy.py::test_one_point_moves_a_ball_value_by_at_most_the_stated_sensitivity",),
        builder="dpm_jax.greedy.api:plan_greedy",
    ),
    ReleaseMutation(
        "release: greedy histogram with half its L2 sensitivity (and so half its sigma)",
        "lambda r: r._replace(l2_sensitivity=r.l2_sensitivity / 2, sigma=r.sigma / 2)",
        (
            "tests/test_greedy.py::test_histogram_sensitivity_is_the_proven_bound_and_is_attained_within_its_stated_slack",
        ),
        builder="dpm_jax.greedy.histogram:histogram_release",
    ),
    ReleaseMutation(
        "release: synth leaf counts with twice their epsilon (half the discrete Laplace noise)",
        "lambda p: p._replace(leaves=p.leaves._replace(epsilon=2 * p.leaves.epsilon))",
        ("tests/test_synth.py::test_nonempty_cell_counts_are_rederived_from_the_leaf_stream",),
        builder="dpm_jax.synth.plan:plan_synthesis",
    ),
    ReleaseMutation(
        "release: synth KD-tree decisions with the paper's printed count d log2(s1/s2) (d fewer levels)",
        _KDTREE_DECISIONS.format("sensitivity=p.decisions.sensitivity - p.dimension"),
        ("tests/test_synth.py::test_decision_noise_is_charged_for_every_level_decided",),
        builder="dpm_jax.synth.plan:plan_synthesis",
    ),
    ReleaseMutation(
        "release: synth KD-tree decisions without the Lemma-10 delta (empty cells never split)",
        _KDTREE_DECISIONS.format("offset_delta=0.0"),
        ("tests/test_synth.py::test_lemma10_delta_is_charged",),
        builder="dpm_jax.synth.plan:plan_synthesis",
    ),
    ReleaseMutation(
        "release: synth refine coarse counts with twice their epsilon (half the discrete Laplace noise)",
        "lambda p: p._replace(coarse=p.coarse._replace(epsilon=2 * p.coarse.epsilon)) if p.coarse else p",
        ("tests/test_synth.py::test_refine_counts_and_remaining_weights_are_rederived_from_their_streams",),
        builder="dpm_jax.synth.plan:plan_synthesis",
    ),
    ReleaseMutation(
        "release: private bounds' Laplace counts with sensitivity 1, not d",
        "lambda p: p._replace(noise=p.noise._replace(sensitivity=1)) if hasattr(p.noise, 'offset') else p",
        ("tests/test_bounds.py::test_bounds_audit_stays_below_the_claim",),
        builder="dpm_jax.bounds:plan_bounds",
    ),
    ReleaseMutation(
        "release: private bounds' Gaussian counts with L2 sensitivity 1, not sqrt(d)",
        "lambda p: p._replace(noise=p.noise._replace(l2_sensitivity=1.0, sigma=p.noise.sigma / p.noise.l2_sensitivity))"
        " if hasattr(p.noise, 'l2_sensitivity') else p",
        (
            "tests/test_bounds.py::test_gaussian_noise_has_the_scale_of_l2_sensitivity_sqrt_d",
            "tests/test_bounds.py::test_gaussian_bounds_audit_stays_below_the_claim",
        ),
        builder="dpm_jax.bounds:plan_bounds",
    ),
    ReleaseMutation(
        "release: private bounds' Gaussian counts with half their sigma",
        "lambda p: p._replace(noise=p.noise._replace(sigma=p.noise.sigma / 2))"
        " if hasattr(p.noise, 'l2_sensitivity') else p",
        ("tests/test_bounds.py::test_gaussian_noise_has_the_scale_of_l2_sensitivity_sqrt_d",),
        builder="dpm_jax.bounds:plan_bounds",
    ),
    ReleaseMutation(
        "release: private bounds in synthesize, the rest not reduced by their share (whole budget)",
        "lambda out, budget, *_, **__: (out[0], budget)",
        ("tests/test_synth.py::test_private_bounds_line_comes_first_and_the_ledger_adds_up_to_the_budget",),
        builder="dpm_jax.bounds:split_for_bounds",
        with_arguments=True,
    ),
    ReleaseMutation(
        "release: private bounds in kmeans, the rest not reduced by their share (whole budget)",
        "lambda out, budget, *_, **__: (out[0], budget)",
        ("tests/test_greedy.py::test_private_bounds_line_comes_first_and_the_ledger_adds_up_to_the_budget",),
        builder="dpm_jax.bounds:split_for_bounds",
        with_arguments=True,
    ),
)

_PLUGIN = """
import importlib
import math
import sys

import dpm_jax
from dpm_jax import keys

_module = importlib.import_module({module!r})
_original = getattr(_module, {function!r})
_transform = {transform}


def _broken(*args, **kwargs):
    if {with_arguments!r}:
        return _transform(_original(*args, **kwargs), *args, **kwargs)
    return _transform(_original(*args, **kwargs))


for _name, _loaded in list(sys.modules.items()):
    if _name == "dpm_jax" or _name.startswith("dpm_jax."):
        for _attribute, _value in list(vars(_loaded).items()):
            if _value is _original:
                setattr(_loaded, _attribute, _broken)
"""

MUTATIONS = (
    Mutation(
        "merge: its noise drawn with twice the epsilon its line states",
        "dpm_jax/tree.py",
        (
            (
                "(m.noise_epsilon,) * 2**m.level for m in r.merges",
                "(2 * m.noise_epsilon,) * 2**m.level for m in r.merges",
            ),
        ),
        (_MERGE_AUDIT,),
    ),
    Mutation(
        "merge: the sensitivity stated as 1 (the noise and the sampler deltas of sensitivity 1)",
        "dpm_jax/budget.py",
        (("MERGE_SENSITIVITY = 2", "MERGE_SENSITIVITY = 1"),),
        (_MERGE_LEDGER, _MERGE_AUDIT),
    ),
    Mutation(
        "merge: the side peaks over windows that overlap the split's (S no longer sees a valley's edges)",
        "dpm_jax/merge.py",
        (("full & (boundary + MERGE_WINDOW <= split)", "full & (boundary <= split)"),),
        (_MERGE_STATISTIC, "tests/test_merge.py::test_one_point_moves_the_valley_statistic_by_minus_one_to_two"),
    ),
    Mutation(
        "merge: a split without a full window on both sides reads as no valley (S = 2 W >= 0)",
        "dpm_jax/merge.py",
        (
            (
                "    return jnp.where(jnp.any(left, axis=-1) & jnp.any(right, axis=-1), 2 * at_split - peak, UNSEEN)",
                "    return 2 * at_split - peak",
            ),
        ),
        ("tests/test_merge.py::test_a_split_without_a_full_window_on_both_sides_reads_as_a_valley", _MERGE_STATISTIC),
    ),
    Mutation(
        "merge: a valley below a clear node does not block its merge",
        "dpm_jax/merge.py",
        (("    merges = candidate & ~blocked", "    merges = candidate"),),
        (_MERGE_RULE,),
    ),
    Mutation(
        "merge: the gate dropped (small nodes merge on noise)",
        "dpm_jax/merge.py",
        (
            (
                "    candidate = is_split & (noisy >= STRICT_SCALES * scale) & gate",
                "    candidate = is_split & (noisy >= STRICT_SCALES * scale)",
            ),
        ),
        (_MERGE_RULE,),
    ),
    Mutation(
        "merge: a group's centre the unweighted mean of its leaves' centres",
        "dpm_jax/merge.py",
        (("    weight = jnp.maximum(noisy_count, 1.0)", "    weight = jnp.ones_like(noisy_count)"),),
        ("tests/test_merge.py::test_merged_clusters_sum_counts_and_weight_centres",),
    ),
    Mutation(
        "structure test: its noise drawn with twice the epsilon its line states",
        "dpm_jax/tree.py",
        (
            (
                "sum(((e,) * 2**level for level, e in enumerate(r.structure_epsilons)), ())",
                "sum(((2 * e,) * 2**level for level, e in enumerate(r.structure_epsilons)), ())",
            ),
        ),
        (_STRUCTURE_AUDIT,),
    ),
    Mutation(
        "structure test: a 3-nat gate (an empty window halts with probability up to 5 %)",
        "dpm_jax/structure.py",
        (("GATE_NATS = 7.0", "GATE_NATS = 3.0"),),
        ("tests/test_structure.py::test_a_node_with_an_empty_window_halts_rarely_and_the_root_is_tested",),
    ),
    Mutation(
        "structure test: Q from twice the window counts in the split choice's chunks (sensitivity 2, line 1)",
        "dpm_jax/tree.py",
        (("excess_of_windows(test_intervals, used,", "excess_of_windows(2 * test_intervals, used,"),),
        ("tests/test_structure.py::test_the_engines_excess_moves_by_at_most_one_and_only_in_the_points_node",),
    ),
    Mutation(
        "structure test: the window counts' minimum taken over every boundary (the cell's empty tails)",
        "dpm_jax/structure.py",
        (("    excess = jnp.where(inner, ", "    excess = jnp.where(boundary < cells, "),),
        ("tests/test_structure.py::test_window_excess_is_the_minimum_over_the_inner_windows",),
    ),
    Mutation(
        "tree: + 1 on every child count before the noise",
        "dpm_jax/tree.py",
        (("child_exact = add_count_noise(child_true, ", "child_exact = add_count_noise(child_true + 1, "),),
        ("tests/test_api.py::test_every_released_count_is_its_true_count_plus_the_keyed_noise",),
    ),
    Mutation(
        "tree: the split exponent doubled (factor 2 dropped / Delta_f halved)",
        "dpm_jax/tree.py",
        (
            (
                "scale = em_exponent_scale(epsilon, delta_f, ratio)",
                "scale = 2.0 * em_exponent_scale(epsilon, delta_f, ratio)",
            ),
        ),
        ("tests/test_audit.py::test_split_step_audit_stays_below_the_claim",),
    ),
    Mutation(
        "scores: the cell grid's window counts every point twice (sensitivity 2 a3)",
        "dpm_jax/scoring.py",
        (("    return upper - lower\n", "    return 2 * (upper - lower)\n"),),
        ("tests/test_scoring.py::test_boundary_statistics_count_the_window_of_half_bins_inside_the_cell",),
    ),
    Mutation(
        "scores: Lemma 5's n~ - lambda becomes n~ + lambda",
        "dpm_jax/scoring.py",
        (("divide(jnp.maximum(noisy_count - offset, 1.0)", "divide(jnp.maximum(noisy_count + offset, 1.0)"),),
        ("tests/test_scoring.py::test_exponent_ratio_is_in_unit_interval",),
    ),
    Mutation(
        "counts: every node's epsilon doubled in the heap layout (noise scale halved)",
        "dpm_jax/budget.py",
        (
            (
                "per_node.extend([allocation.count_epsilons[level]] * 2**level)",
                "per_node.extend([2 * allocation.count_epsilons[level]] * 2**level)",
            ),
        ),
        (
            "tests/test_budget.py::test_heap_count_epsilons_follow_the_levels",
            "tests/test_api.py::test_every_released_count_is_its_true_count_plus_the_keyed_noise",
        ),
    ),
    Mutation(
        "scores: the integer sensitivity halved",
        "dpm_jax/scoring.py",
        (
            (
                "return self.outer_slope + self.emptiness_weight",
                "return (self.outer_slope + self.emptiness_weight) // 2",
            ),
        ),
        ("tests/test_sensitivity.py::test_split_scores_change_by_at_most_their_exact_sensitivity",),
    ),
    Mutation(
        "clipping to the public bounds removed (the unit scaling) and the codes unclipped (averaging)",
        "dpm_jax/_arrays.py",
        (
            ("    points = jnp.clip(points, lower, upper)\n", ""),
            (
                "return jnp.clip((points - lower) * scale, 0.0, 1.0)",
                "return (points - lower) * scale",
            ),
        ),
        ("tests/test_api.py::test_points_outside_the_bounds_are_clipped_before_every_statistic",),
        extra=(
            (
                "dpm_jax/averaging.py",
                "return jnp.clip(codes, 0, 2**FIXED_POINT_BITS) - code_offset",
                "return codes - code_offset",
            ),
        ),
    ),
    Mutation(
        "exponential mechanism: the sampler's epsilon margin not subtracted",
        "dpm_jax/mechanisms.py",
        (
            (
                "usable = jnp.asarray(epsilon, jnp.float32) - np.float32(EM_EPSILON_MARGIN)",
                "usable = jnp.asarray(epsilon, jnp.float32)",
            ),
        ),
        ("tests/test_mechanisms.py::test_em_exponent_scale_never_exceeds_epsilon_minus_margin",),
    ),
    Mutation(
        "Algorithm 2: the utility's sensitivity halved",
        "dpm_jax/interval.py",
        (("return PERCENTILE_SENSITIVITY * num_dims * _UTILITY_UNITS", "return num_dims * _UTILITY_UNITS"),),
        ("tests/test_sensitivity.py::test_gap_counts_and_utility_change_by_at_most_their_sensitivity",),
    ),
    Mutation(
        "auto depth: tau_e = n~ / 2**max_depth instead of n~ / 2**depth",
        "dpm_jax/tree.py",
        (("jnp.ldexp(root_noisy_size, -depth)", "jnp.ldexp(root_noisy_size, -padded)"),),
        ("tests/test_tree.py::test_the_default_tau_e_halves_the_root_count_depth_plus_leaf_slack_times",),
    ),
    Mutation(
        "auto depth: the count noise of the deepest depth's row whatever the depth",
        "dpm_jax/tree.py",
        (
            (
                "return exact.Int(tuple(limb[row] for limb in noise.limbs))",
                "return exact.Int(tuple(limb[-1] for limb in noise.limbs))",
            ),
        ),
        ("tests/test_depth.py::test_the_depth_is_the_rule_of_the_noisy_count_and_its_allocation_runs",),
    ),
    Mutation(
        "tree: a node's split drawn with its sibling's random bits",
        "dpm_jax/tree.py",
        (
            (
                "jax.lax.dynamic_slice_in_dim(bits, first, width),",
                "jnp.roll(jax.lax.dynamic_slice_in_dim(bits, first, width), 1, axis=0),",
            ),
        ),
        ("tests/test_api.py::test_every_split_is_select_splits_with_the_levels_parameters_and_keyed_bits",),
    ),
    Mutation(
        "private bounds: the threshold computed from the true count (1 % of n)",
        "dpm_jax/bounds.py",
        (
            (
                "jnp.full(counts.shape, plan.threshold, jnp.int32)",
                "jnp.full(counts.shape, jnp.sum(counts[0]) // 100, jnp.int32)",
            ),
        ),
        ("tests/test_bounds.py::test_released_bounds_are_the_keyed_noisy_histogram_post_processed",),
    ),
    Mutation(
        "private bounds: the bucket grid derived from the data (scaled by max |x|)",
        "dpm_jax/bounds.py",
        (
            (
                "    initial = jnp.zeros(d * num_buckets, jnp.int32)\n",
                "    points = points / jnp.max(jnp.abs(points))\n    initial = jnp.zeros(d * num_buckets, jnp.int32)\n",
            ),
        ),
        ("tests/test_bounds.py::test_one_record_moves_one_count_per_dimension",),
    ),
    Mutation(
        "private bounds: inf and NaN bucketed past their dimension's row (into the next one's)",
        "dpm_jax/bounds.py",
        (("magnitude = jnp.minimum(magnitude, middle)  # exponent 255", "magnitude = magnitude  # exponent 255"),),
        ("tests/test_bounds.py::test_every_bit_pattern_counts_once_in_its_own_dimension",),
    ),
    Mutation(
        "private bounds in synthesize: the bounds drawn from another key (not the bounds' own stream)",
        "dpm_jax/synth/api.py",
        (
            (
                "key, points, mask, budget, bounds, prepare, default=",
                "keys.derive_key(key, keys.SYNTH_LEAF), points, mask, budget, bounds, prepare, default=",
            ),
        ),
        ("tests/test_synth.py::test_released_bounds_are_private_bounds_of_the_same_key_and_share",),
    ),
    Mutation(
        "private bounds in synthesize: the dpm method charges the accountant again (decorated cluster)",
        "dpm_jax/synth/from_dpm.py",
        (("cluster.__wrapped__(key, X,", "cluster(key, X,"),),
        ("tests/test_synth.py::test_an_accountant_is_charged_once_for_the_whole_call",),
    ),
    Mutation(
        "private bounds in kmeans: the bounds drawn from another key (the greedy's selection stream)",
        "dpm_jax/greedy/api.py",
        (
            (
                "run_with_private_bounds(key, points,",
                "run_with_private_bounds(keys.derive_key(key, keys.GREEDY_SELECT), points,",
            ),
        ),
        ("tests/test_greedy.py::test_released_bounds_are_private_bounds_of_the_same_key_and_share",),
    ),
    Mutation(
        "leaf sums accumulated in float32 (the engine before exact sums)",
        "dpm_jax/averaging.py",
        (
            (
                "return exact.tree_total(exact.chunk_totals(codes, segment, num_slots, _CHUNK))",
                "sums = jax.ops.segment_sum(jnp.where(point_mask[:, None], codes.astype(jnp.float32), 0.0), "
                "point_slot, num_segments=num_slots)\n"
                "    high = jnp.floor(sums / 2.0**30)\n"
                "    return exact.Int(((sums - high * 2.0**30).astype(jnp.int32), high.astype(jnp.int32)))",
            ),
        ),
        (
            "tests/test_averaging.py::test_leaf_sums_are_bit_identical_under_row_permutation",
            "tests/test_averaging.py::test_float32_binade_attack_moves_the_exact_sum_by_the_added_code_only",
        ),
    ),
    Mutation(
        "greedy: forbidden balls allowed (no availability test at the start)",
        "dpm_jax/greedy/select.py",
        (("valid = ~forbidden | jnp.all(forbidden)", "valid = jnp.ones_like(forbidden)"),),
        ("tests/test_greedy.py::test_nonprivate_greedy_starts_at_the_best_available_ball",),
    ),
    Mutation(
        "greedy: the lift's count noise dropped",
        "dpm_jax/greedy/lift.py",
        (
            (
                "sizes = exact.to_float32(count_release.draw(keys_[0], cell_counts(slot, point_mask, k)))",
                "sizes = cell_counts(slot, point_mask, k).astype(jnp.float32)",
            ),
        ),
        ("tests/test_greedy.py::test_lift_is_the_exact_counts_and_sums_plus_the_keyed_noise",),
    ),
    Mutation(
        "greedy: the lift's sum noise at a sixteenth of its sigma",
        "dpm_jax/greedy/api.py",
        (("gaussian_thresholds_on_device(plan.sums.sigma)", "gaussian_thresholds_on_device(plan.sums.sigma / 16)"),),
        ("tests/test_greedy.py::test_lift_is_the_exact_counts_and_sums_plus_the_keyed_noise",),
    ),
    Mutation(
        "greedy prefix order: the weights ignored (every released centre counts 1)",
        "dpm_jax/greedy/order.py",
        (
            (
                "weight = jnp.maximum(weights.astype(jnp.float32), 0.0)\n    k = centers.shape[0]",
                "weight = jnp.ones_like(weights, jnp.float32)\n    k = centers.shape[0]",
            ),
        ),
        ("tests/test_greedy_order.py::test_order_weighs_the_centres_by_their_sizes",),
    ),
    Mutation(
        "greedy prefix order read from the exact cell sizes (private data) instead of the noisy ones",
        "dpm_jax/greedy/api.py",
        (
            (
                "permutation = prefix_order(centers, sizes, plan.nets.z)",
                "permutation = prefix_order(centers, __import__('dpm_jax.greedy.lift', fromlist=['lift'])"
                ".cell_counts(slot, mask, plan.k), plan.nets.z)",
            ),
        ),
        ("tests/test_greedy_order.py::test_weighted_order_permutes_the_release_and_reads_only_the_release",),
    ),
    Mutation(
        "greedy cost curve computed in the order of selection, not the returned order",
        "dpm_jax/greedy/api.py",
        (
            (
                "jax.random.fold_in(sum_key, 1), working, mask, greedy_in_order,",
                "jax.random.fold_in(sum_key, 1), working, mask, greedy.centers,",
            ),
        ),
        ("tests/test_greedy_order.py::test_cost_curve_is_that_of_the_returned_prefixes",),
    ),
    Mutation(
        "greedy prefix(k') merged in the returned order (the selection order by default), not the weighted one",
        "dpm_jax/greedy/api.py",
        (
            (
                "weighted = prefix_order(self.centers, self.sizes, self.z)",
                "weighted = jnp.arange(self.centers.shape[0])",
            ),
        ),
        ("tests/test_greedy_order.py::test_prefix_is_the_weighted_orders_whatever_the_returned_order",),
    ),
    Mutation(
        "synth plan from the row count of X (private) instead of the stated capacity max_rows",
        "dpm_jax/synth/api.py",
        (
            (
                "plan = plan_synthesis(budget, config, method, points.shape[1])",
                "plan = plan_synthesis(budget, __import__('dataclasses').replace(config, max_rows=points.shape[0]), "
                "method, points.shape[1])",
            ),
        ),
        (
            "tests/test_synth.py::test_plan_and_ledger_do_not_read_the_row_count[kdtree]",
            "tests/test_synth.py::test_plan_and_ledger_do_not_read_the_row_count[privtree]",
            "tests/test_synth.py::test_plan_and_ledger_do_not_read_the_row_count[refine]",
        ),
    ),
    Mutation(
        "synth implicit empty cells: more empty cells than the draw's 31-bit positions accepted",
        "dpm_jax/synth/threshold.py",
        (("if max(self.max_empty) >= int(implicit.SATURATED):", "if False:"),),
        (
            "tests/test_synth.py::test_more_empty_cells_than_the_draws_31_bit_positions_are_refused_before_any_work"
            "[kdtree]",
        ),
    ),
    Mutation(
        "synth depth search: no noise on the threshold (rho = 0)",
        "dpm_jax/synth/depth_search.py",
        (
            (
                "rho = count_noise(jax.random.fold_in(key, 0), np.full((), self.part_epsilon))",
                "rho = exact.from_int32(jnp.int32(0))",
            ),
        ),
        ("tests/test_depth_search.py::test_the_search_is_the_sparse_vector_technique_on_its_own_stream",),
    ),
    Mutation(
        "synth depth search: the queries' noise at twice the stated epsilon",
        "dpm_jax/synth/depth_search.py",
        (
            (
                "np.full(excess.shape, self.part_epsilon))",
                "np.full(excess.shape, 2 * self.part_epsilon))",
            ),
        ),
        ("tests/test_depth_search.py::test_the_search_is_the_sparse_vector_technique_on_its_own_stream",),
    ),
    Mutation(
        "synth depth search: searched downwards from the rule's depth (the first candidate that stays above)",
        "dpm_jax/synth/depth_search.py",
        (
            (
                "        stop = jnp.min(jnp.where(below & queried, index, start + 1))\n"
                "        return jnp.maximum(stop - 1, 0)\n",
                "        return jnp.max(jnp.where(~below & queried, index, 0))\n",
            ),
        ),
        ("tests/test_depth_search.py::test_the_search_is_the_sparse_vector_technique_on_its_own_stream",),
    ),
    Mutation(
        "synth depth search: the excess mass without the leaf threshold (the count itself)",
        "dpm_jax/synth/depth_search.py",
        (
            (
                "jnp.sum(valid & (index - first < thresholds[i]), dtype=jnp.int32)",
                "jnp.sum(valid & (index - first < 0), dtype=jnp.int32)",
            ),
        ),
        ("tests/test_depth_search.py::test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells",),
    ),
    Mutation(
        "synth depth search: a cell of depth h starts where h leading bits are shared (off by one)",
        "dpm_jax/synth/depth_search.py",
        (("starts = (index == 0) | (shared < depths[i])", "starts = (index == 0) | (shared <= depths[i])"),),
        ("tests/test_depth_search.py::test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells",),
    ),
    Mutation(
        "synth depth search: the excess mass computed below the rule's index only (off by one)",
        "dpm_jax/synth/depth_search.py",
        (("jnp.minimum(jnp.asarray(last, jnp.int32) + 1, count)", "jnp.minimum(jnp.asarray(last, jnp.int32), count)"),),
        ("tests/test_depth_search.py::test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells",),
    ),
    Mutation(
        "synth depth search: under jax.vmap the shared loop stops at the batch's smallest index",
        "dpm_jax/synth/depth_search.py",
        (("longest = jnp.max(stop) if stop_batched else stop", "longest = jnp.min(stop) if stop_batched else stop"),),
        ("tests/test_depth_search.py::test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells",),
    ),
    Mutation(
        "synth depth search: under jax.vmap over data sets every member reads the first data set's excess",
        "dpm_jax/synth/depth_search.py",
        (
            (
                "jax.vmap(upto, in_axes=axes)(codes, valid, longest) if data_batched",
                "upto(codes[0] if codes_batched else codes, valid[0] if valid_batched else valid, longest)"
                " if data_batched",
            ),
        ),
        ("tests/test_depth_search.py::test_excess_mass_is_the_count_above_the_threshold_summed_over_the_cells",),
    ),
    Mutation(
        "synth decision draws under jax.vmap: every branch runs (jax's select), not only those some member takes",
        "dpm_jax/_arrays.py",
        (("out = _when_any(index == i, branch, *operands)", "out = branch(*operands)"),),
        ("tests/test_arrays.py::test_switch_taken_is_the_switch_and_runs_only_the_branches_some_member_takes",),
    ),
    Mutation(
        "synth decision draws under nested jax.vmap: the index shared by the inner axis switched by lax.switch",
        "dpm_jax/_arrays.py",
        (("result = switch_taken(index, tuple(each), *operands)", "result = jax.lax.switch(index, each, *operands)"),),
        ("tests/test_arrays.py::test_switch_taken_is_the_switch_and_runs_only_the_branches_some_member_takes",),
    ),
    Mutation(
        "synth decision draws under jax.vmap: every member keeps the first branch's draw",
        "dpm_jax/_arrays.py",
        (("jnp.where(_along_batch(index == i, o), o, r)", "jnp.where(_along_batch(index == 0, o), o, r)"),),
        ("tests/test_arrays.py::test_switch_taken_is_the_switch_and_runs_only_the_branches_some_member_takes",),
    ),
    Mutation(
        "synth depth search: its noise drawn from the decisions' key (synth_tree fold 1)",
        "dpm_jax/synth/api.py",
        (
            (
                "choice = plan.search.draw(jax.random.fold_in(tree_key, 2),",
                "choice = plan.search.draw(jax.random.fold_in(tree_key, 1),",
            ),
        ),
        ("tests/test_depth_search.py::test_synthesize_takes_the_depth_the_search_draws_from_its_stream",),
    ),
    Mutation(
        "synth: the released arrays as long as the candidates (n + a constant) instead of max_cells",
        "dpm_jax/synth/api.py",
        (("    padding = rows - start.shape[0]\n", "    padding, rows = 0, start.shape[0]\n"),),
        tuple(
            f"tests/test_synth.py::test_released_arrays_have_a_public_length[{method}]"
            for method in ("grid", "kdtree", "privtree", "refine")
        ),
    ),
    Mutation(
        "synth: rows that are not released keep their cells' boxes (occupied cells below the threshold)",
        "dpm_jax/synth/api.py",
        (
            ("lower=jnp.where(released, low, jnp.nan),", "lower=low,"),
            ("upper=jnp.where(released, high, jnp.nan),", "upper=high,"),
        ),
        tuple(
            f"tests/test_synth.py::test_rows_that_are_not_released_hold_no_box[{method}]"
            for method in ("grid", "kdtree", "privtree", "refine")
        ),
    ),
    Mutation(
        "greedy: the histogram's noise at half its sigma",
        "dpm_jax/greedy/histogram.py",
        (
            (
                "noise = release.draw(key, values.shape)",
                "noise = release._replace(sigma=release.sigma / 2).draw(key, values.shape)",
            ),
        ),
        ("tests/test_greedy.py::test_histogram_noise_is_the_keyed_discrete_gaussian_at_the_release_sigma",),
    ),
    Mutation(
        "greedy: the histogram's sampler charged for one value per level (N_m = 1)",
        "dpm_jax/greedy/histogram.py",
        (("    return 2 ** (dim - 1)\n", "    return 1\n"),),
        (
            "tests/test_greedy.py::test_histogram_sensitivity_is_the_proven_bound_and_is_attained_within_its_stated_slack",
        ),
    ),
    Mutation(
        "synth implicit empty cells: pass probability of threshold t + 1",
        "dpm_jax/synth/threshold.py",
        (
            (
                "implicit.geometric_table(self.epsilon, t, implicit.SKIP_BITS)",
                "implicit.geometric_table(self.epsilon, t + 1, implicit.SKIP_BITS)",
            ),
        ),
        ("tests/test_synth.py::test_implicit_empty_cells_have_the_law_of_explicit_enumeration",),
    ),
    Mutation(
        "synth PrivTree: the bias dropped (plain counts against theta at every level)",
        "dpm_jax/synth/api.py",
        (("plan.decisions, plan.tau, plan.bias, plan.floor", "plan.decisions, plan.tau, 0, plan.floor"),),
        ("tests/test_privtree.py::test_decisions_are_rederived_from_the_tree_stream",),
    ),
    Mutation(
        "synth PrivTree: the decision noise scale halved (twice alpha)",
        "dpm_jax/synth/privtree.py",
        (
            (
                "return count_noise(key, np.full(shape, self.alpha))",
                "return count_noise(key, np.full(shape, 2 * self.alpha))",
            ),
        ),
        ("tests/test_privtree.py::test_decisions_are_rederived_from_the_tree_stream",),
    ),
    Mutation(
        "synth PrivTree: the loss bound without its terms above theta",
        "dpm_jax/synth/privtree.py",
        (("            terms.append(value)\n", "            terms.append(0 * value)\n"),),
        ("tests/test_privtree.py::test_loss_bound_covers_every_tree_on_small_domains",),
    ),
    Mutation(
        "synth PrivTree: theta = kappa (a one-record cell sits above the clamp)",
        "dpm_jax/synth/privtree.py",
        (("        return self.kappa + 1\n", "        return self.kappa\n"),),
        ("tests/test_privtree.py::test_calibration_states_its_bound_and_the_one_point_delta",),
    ),
    Mutation(
        "synth refine: the empty children of released coarse cells never drawn (only data can pass)",
        "dpm_jax/synth/refine.py",
        (
            (
                "num_empty = num_children - jnp.sum(candidate, dtype=jnp.int32)",
                "num_empty = 0 * num_children",
            ),
        ),
        ("tests/test_synth.py::test_auditor_on_the_refined_children_stays_at_or_below_the_claim",),
    ),
    Mutation(
        "synth output: cells in draw order (non-empty first) instead of by code",
        "dpm_jax/synth/api.py",
        (
            ("order = jnp.lexsort((depth, start, ~valid))", "order = jnp.lexsort((~valid,))"),
            ("order = jnp.lexsort((depth, start, -weight, ~valid))[:rows]", "order = jnp.arange(rows)"),
        ),
        ("tests/test_synth.py::test_released_cells_are_in_code_order",),
    ),
    # Issue 28, row buckets: a new n reuses a compiled program, the release unchanged.
    Mutation(
        "rows: the padding rows counted as points (ones, unmasked)",
        "dpm_jax/rows.py",
        (("host = np.zeros((size,) + x.shape[1:], dtype)", "host = np.ones((size,) + x.shape[1:], dtype)"),),
        ("tests/test_rows.py::test_cluster_releases_what_the_unpadded_run_releases",),
    ),
    Mutation(
        "rows: the labels of the padding rows returned to the caller",
        "dpm_jax/rows.py",
        (("        return jax.device_put(np.asarray(x)[:rows], _placement(x))\n", "        return x\n"),),
        ("tests/test_rows.py::test_cluster_releases_what_the_unpadded_run_releases",),
    ),
    Mutation(
        "rows: padded data moved to the default device, not the caller's",
        "dpm_jax/rows.py",
        (
            (
                "return jax.device_put(host, _placement(x))",
                "return jax.device_put(host)",
            ),
        ),
        ("tests/test_rows.py::test_data_on_a_chosen_device_stay_there",),
    ),
    Mutation(
        "rows: a padded copy of an uncommitted array committed (programs compiled apart)",
        "dpm_jax/rows.py",
        (
            (
                "return x.sharding if isinstance(x, jax.Array) and x.committed else None",
                "return x.sharding if isinstance(x, jax.Array) else None",
            ),
        ),
        ("tests/test_rows.py::test_a_new_row_count_in_the_bucket_compiles_nothing",),
    ),
    Mutation(
        "rows: a JAX array's finiteness checked by a program compiled per n",
        "dpm_jax/api.py",
        (
            (
                "if not isinstance(X, jax.Array) or (on_one_cpu(X) and X.shape[0] <= MAX_BUCKETED_ROWS):",
                "if not isinstance(X, jax.Array):",
            ),
        ),
        ("tests/test_rows.py::test_a_new_row_count_in_the_bucket_compiles_nothing",),
    ),
    Mutation(
        "rows: the padded cast warns on a float64 beyond float32 (a warning only such data emit)",
        "dpm_jax/rows.py",
        (('with np.errstate(over="ignore"):', 'with np.errstate(over="warn"):'),),
        ("tests/test_rows.py::test_a_float64_beyond_float32_is_padded_silently_as_xla_casts_it",),
    ),
    Mutation(
        "rows: the default mask built by an XLA op (a compile per n)",
        "dpm_jax/api.py",
        (("        return np.ones(n, bool)\n", "        return jnp.ones(n, bool)\n"),),
        ("tests/test_rows.py::test_a_new_row_count_in_the_bucket_compiles_nothing",),
    ),
    # Issue 21, the guarantee's edges ("edges:" runs them alone: --only edges:).
    Mutation(
        "edges: the averaging's share fitted on the rounded sum (fsum), not the exact one",
        "dpm_jax/releases.py",
        (("    if Fraction(last) <= room:\n", "    if math.fsum([*parts, last]) <= total:\n"),),
        (
            "tests/test_guarantee_edges.py::test_every_ledger_stays_within_its_budget_for_random_budgets",
            "tests/test_guarantee_edges.py::test_the_reported_budget_gets_a_ledger_within_it",
        ),
    ),
    Mutation(
        "edges: no saturation before the float32 cast (1e39 becomes inf, with a warning)",
        "dpm_jax/api.py",
        (("        return np.clip(X, -_FLOAT32_MAX, _FLOAT32_MAX)\n", "        return X\n"),),
        (
            "tests/test_guarantee_edges.py::test_every_finite_record_is_clipped_to_the_bounds_on_every_entry_point",
            "tests/test_guarantee_edges.py::test_cli_audit_of_neighbours_stays_below_the_claim",
        ),
    ),
    Mutation(
        "edges: the command line prints the exact row count",
        "dpm_jax/cli/main.py",
        (
            (
                '_status(f"read {d} columns (',
                '_status(f"read {n} points, {d} columns (',
            ),
        ),
        ("tests/test_guarantee_edges.py::test_cli_status_lines_hold_no_row_count",),
    ),
    Mutation(
        "edges: the synthesize command prints the exact row count",
        "dpm_jax/cli/synthesize.py",
        (
            (
                'status(f"read {points.values.shape[1]} columns from',
                'status(f"read {points.values.shape[0]} rows, {points.values.shape[1]} columns from',
            ),
        ),
        ("tests/test_guarantee_edges.py::test_cli_status_lines_hold_no_row_count",),
    ),
    Mutation(
        "edges: the in-memory engine's programs (shaped by n) in the persistent cache",
        "dpm_jax/api.py",
        (("\ndef cluster(\n", "\n@__import__('dpm_jax.cache').cache.library_programs()\ndef cluster(\n"),),
        ("tests/test_cache.py::test_nothing_on_disk_tells_neighbouring_sizes_apart",),
    ),
    Mutation(
        "edges: the synthesis's decision draws sized by the unreleased non-empty cells (a timing channel)",
        "dpm_jax/synth/kdtree.py",
        (
            (
                "    tier = sum((most_reached > size)",
                "    tier = sum((jnp.sum(reached, dtype=jnp.int32) > size)",
            ),
        ),
        ("tests/test_privtree.py::test_decisions_are_rederived_from_the_tree_stream[9-False]",),
    ),
    Mutation(
        "edges: bounds whose range float32 cannot scale by accepted",
        "dpm_jax/api.py",
        (("    if not np.all((width >= _MIN_RANGE) & (width <= _MAX_RANGE)):\n", "    if False:\n"),),
        ("tests/test_guarantee_edges.py::test_bounds_float32_cannot_scale_by_are_refused_on_every_entry_point",),
    ),
)


# Records every failing test's exception type (in each xdist worker) for run(): a mutation is
# caught only by a test that fails on an assertion, not by one that crashes.
_FAILURES_PLUGIN = """
import json
import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed and call.excinfo is not None:
        line = json.dumps(dict(test=item.nodeid, when=call.when, kind=call.excinfo.typename))
        with open(os.environ["DPM_MUTATION_FAILURES"], "a") as out:
            out.write(line + "\\n")
"""
ASSERTION_KINDS = ("AssertionError", "Failed")  # pytest.fail and a pytest.raises that did not raise: Failed


def classify_failures(lines: list[str]) -> tuple[list[str], list[str]]:
    """(tests failing on an assertion in their body, the other failing tests with their exception type)."""
    caught, crashed = set(), set()
    for record in map(json.loads, lines):
        if record["when"] == "call" and record["kind"] in ASSERTION_KINDS:
            caught.add(record["test"])
        else:
            crashed.add(f"{record['test']} ({record['when']}: {record['kind']})")
    return sorted(caught), sorted(crashed)


def transform_of(mutation: ReleaseMutation):
    """The mutation's transform as a function, in the plugin's namespace (``keys``, ``math``)."""
    import math

    from dpm_jax import keys

    return eval(mutation.transform, {"keys": keys, "math": math})


def plugin_source(mutation: ReleaseMutation) -> str:
    """The pytest plugin that makes ``mutation.builder`` return ``mutation.transform`` of its output."""
    return _PLUGIN.format(
        module=mutation.module,
        function=mutation.function,
        transform=mutation.transform,
        with_arguments=mutation.with_arguments,
    )


def _mutated_copy(mutation: Mutation | ReleaseMutation) -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp(prefix="dpm_mutation_"))
    for part in ("dpm_jax", "tests"):
        shutil.copytree(REPOSITORY / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "_failures_plugin.py").write_text(_FAILURES_PLUGIN)
    if isinstance(mutation, ReleaseMutation):
        (root / "_mutation_plugin.py").write_text(plugin_source(mutation))
        return root
    changes = [(mutation.file, old, new) for old, new in mutation.replacements] + list(mutation.extra)
    for file, old, new in changes:
        path = root / file
        source = path.read_text()
        if source.count(old) != 1:
            raise RuntimeError(f"{mutation.name}: {old!r} occurs {source.count(old)} times in {file}")
        path.write_text(source.replace(old, new))
    return root


def run(mutation: Mutation | ReleaseMutation) -> dict:
    root = _mutated_copy(mutation)
    tick = time.time()
    failures = root / "failures.jsonl"
    environment = dict(os.environ, PYTHONPATH=str(root), DPM_MUTATION_FAILURES=str(failures))
    plugins = ["-p", "_failures_plugin"] + (["-p", "_mutation_plugin"] if isinstance(mutation, ReleaseMutation) else [])
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins, *mutation.tests],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
    )
    caught_by, crashed = classify_failures(failures.read_text().splitlines() if failures.exists() else [])
    shutil.rmtree(root, ignore_errors=True)
    return dict(
        mutation=mutation.name,
        file=mutation.file if isinstance(mutation, Mutation) else "release: " + mutation.transform,
        caught=bool(caught_by),
        caught_by=caught_by,
        crashed=crashed,
        designed_tests=list(mutation.tests),
        seconds=round(time.time() - tick, 1),
        note="" if caught_by or process.returncode in (0, 1) else process.stdout[-2000:],
    )


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """The results of ``old`` with the rows of ``new`` in place of theirs, in the catalogue's order
    (what ``--only`` writes to an existing ``--out``; rows of mutations no longer listed go last)."""
    order = {m.name: i for i, m in enumerate(RELEASE_MUTATIONS + MUTATIONS)}
    rows = {row["mutation"]: row for row in old} | {row["mutation"]: row for row in new}
    return sorted(rows.values(), key=lambda row: order.get(row["mutation"], len(order)))


def markdown_table(rows: list[dict]) -> str:
    """The rows of a results file as the table of docs/privacy.md (what each mutation breaks through)."""
    through = {m.name: f"`{m.builder}`" for m in RELEASE_MUTATIONS}
    through.update({m.name: f"`{m.file}`" for m in MUTATIONS})
    lines = [
        "| mutation | broken through | caught (on an assertion) | by the test designed for it |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        tests = ", ".join(f"`{t.removeprefix('tests/')}`" for t in row["caught_by"]) or "-"
        where = through.get(row["mutation"], "?")
        verdict = "yes" if row["caught"] else "**no**"
        if not row["caught"] and row.get("crashed"):
            crashed = ", ".join(f"`{t.removeprefix('tests/')}`" for t in row["crashed"])
            verdict += f" (its tests only crashed: {crashed})"
        lines.append(f"| {row['mutation']} | {where} | {verdict} | {tests} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="run the mutations whose name contains this")
    parser.add_argument("--table", default=None, help="print a results file as a markdown table, run nothing")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(pathlib.Path(args.table).read_text())))
        return 0
    rows = []
    for mutation in RELEASE_MUTATIONS + MUTATIONS:
        if args.only and args.only not in mutation.name:
            continue
        row = run(mutation)
        rows.append(row)
        print(
            f"{'CAUGHT' if row['caught'] else 'NOT CAUGHT':<11}{row['mutation']:<75} "
            f"{', '.join(row['caught_by']) or '-'} ({row['seconds']} s)",
            flush=True,
        )
    if args.out:
        out = pathlib.Path(args.out)
        merged = merge_rows(json.loads(out.read_text()), rows) if args.only and out.exists() else rows
        out.write_text(json.dumps(merged, indent=1))
    return 0 if all(r["caught"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
