"""Mutation check of the privacy wiring: does a test designed for each bug catch it?

    python benchmarks/mutations.py [--out results/mutations.json] [--only NAME]

Each mutation is one deliberate bug in the engine's privacy wiring (a noise scale,
a sensitivity, an offset, the factor 2, which key feeds which draw, clipping, the
ledger). For each, the repository's dpm_jax/ and tests/ are copied to a temporary
directory, the one source change is applied (it must match exactly once), and the
test(s) *designed* for that bug run against the mutated copy (PYTHONPATH puts the
copy first). A mutation is "caught" when one of those tests fails; the table lists
which. Nothing in the working tree is modified.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
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


MUTATIONS = (
    Mutation(
        "averaging noise: half the discrete Gaussian's sigma on the device",
        "dpm_jax/api.py",
        (
            (
                "gaussian_thresholds_on_device(run_plan.averaging.sigma)",
                "gaussian_thresholds_on_device(run_plan.averaging.sigma / 2)",
            ),
        ),
        ("tests/test_api.py::test_leaf_noise_is_rederived_from_the_average_stream",),
    ),
    Mutation(
        "averaging: raw codes summed, no shift to the middle of the bounds",
        "dpm_jax/averaging.py",
        (
            (
                "return jnp.clip(codes, 0, 2**FIXED_POINT_BITS) - _CODE_HALF_RANGE",
                "return jnp.clip(codes, 0, 2**FIXED_POINT_BITS)",
            ),
        ),
        ("tests/test_averaging.py::test_leaf_sums_are_exact_sums_of_mid_shifted_codes",),
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
                "scale = em_exponent_scale(epsilon, coefficients.sensitivity, ratio)",
                "scale = 2.0 * em_exponent_scale(epsilon, coefficients.sensitivity, ratio)",
            ),
        ),
        ("tests/test_audit.py::test_split_step_audit_stays_below_the_claim",),
    ),
    Mutation(
        "scores: the cell grid's window counts every point twice (sensitivity 2 a3)",
        "dpm_jax/scoring.py",
        (("return upper - lower, inclusive", "return 2 * (upper - lower), inclusive"),),
        ("tests/test_scoring.py::test_boundary_statistics_count_the_window_of_half_bins_inside_the_cell",),
    ),
    Mutation(
        "scores: Lemma 5's n~ - lambda becomes n~ + lambda",
        "dpm_jax/scoring.py",
        (("ratio = jnp.maximum(noisy_count - offset, 1.0)", "ratio = jnp.maximum(noisy_count + offset, 1.0)"),),
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
        "keys: the leaf noise drawn from the split stream",
        "dpm_jax/api.py",
        (
            (
                "    centers = leaf_centers(\n        derive_key(key, keys.AVERAGE),",
                "    centers = leaf_centers(\n        derive_key(key, keys.SPLIT),",
            ),
        ),
        ("tests/test_api.py::test_leaf_noise_is_rederived_from_the_average_stream",),
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
                "return jnp.clip(codes, 0, 2**FIXED_POINT_BITS) - _CODE_HALF_RANGE",
                "return codes - _CODE_HALF_RANGE",
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
        "counts: offsets lambda set to 0",
        "dpm_jax/budget.py",
        (
            (
                "count_offsets = tuple(count_offset(e, d_) for d_, e in zip(count_deltas, count_epsilons))",
                "count_offsets = tuple(0.0 for _ in count_epsilons)",
            ),
        ),
        ("tests/test_budget.py::test_shares_and_per_level_weights",),
    ),
    Mutation(
        "Algorithm 2: the utility's sensitivity halved",
        "dpm_jax/interval.py",
        (("return PERCENTILE_SENSITIVITY * num_dims * _UTILITY_UNITS", "return num_dims * _UTILITY_UNITS"),),
        ("tests/test_sensitivity.py::test_gap_counts_and_utility_change_by_at_most_their_sensitivity",),
    ),
    Mutation(
        "ledger: the samplers' delta not carved out of the count share",
        "dpm_jax/budget.py",
        (("offset_delta = delta_cnt - sampler_total", "offset_delta = delta_cnt"),),
        ("tests/test_budget.py::test_ledger_adds_up_exactly_to_the_budget",),
    ),
    Mutation(
        "auto depth: tau_e = n~ / 2**max_depth instead of n~ / 2**depth",
        "dpm_jax/tree.py",
        (("jnp.ldexp(root_noisy_size, -depth)", "jnp.ldexp(root_noisy_size, -tau_r)"),),
        ("tests/test_depth.py::test_the_depth_is_the_rule_of_the_noisy_count_and_its_allocation_runs",),
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
        "tree: every level's split uses offset lambda = 0",
        "dpm_jax/tree.py",
        (("pad(a.count_offsets[:-1], padded) for a in allocations]", "[0.0] * padded for a in allocations]"),),
        ("tests/test_api.py::test_every_split_is_select_splits_with_the_levels_parameters_and_keyed_bits",),
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
        "tree: the split epsilons of the levels in reverse order",
        "dpm_jax/tree.py",
        (
            (
                "pad(a.split_epsilons, padded) for a in allocations]",
                "pad(a.split_epsilons[::-1], padded) for a in allocations]",
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
        "private bounds: Laplace noise on the wrong scale (sensitivity 1, not d)",
        "dpm_jax/bounds.py",
        (("keys.BOUNDS, sensitivity=d, rule=", "keys.BOUNDS, sensitivity=1, rule="),),
        ("tests/test_bounds.py::test_bounds_audit_stays_below_the_claim",),
    ),
    Mutation(
        "private bounds: the bucket grid derived from the data (scaled by max |x|)",
        "dpm_jax/bounds.py",
        (
            (
                "cells = bucket_index(points, mantissa_bits)",
                "cells = bucket_index(points / jnp.max(jnp.abs(points)), mantissa_bits)",
            ),
        ),
        ("tests/test_bounds.py::test_one_record_moves_one_count_per_dimension",),
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
)


def _mutated_copy(mutation: Mutation) -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp(prefix="dpm_mutation_"))
    for part in ("dpm_jax", "tests"):
        shutil.copytree(REPOSITORY / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    changes = [(mutation.file, old, new) for old, new in mutation.replacements] + list(mutation.extra)
    for file, old, new in changes:
        path = root / file
        source = path.read_text()
        if source.count(old) != 1:
            raise RuntimeError(f"{mutation.name}: {old!r} occurs {source.count(old)} times in {file}")
        path.write_text(source.replace(old, new))
    return root


def run(mutation: Mutation) -> dict:
    root = _mutated_copy(mutation)
    tick = time.time()
    environment = dict(os.environ, PYTHONPATH=str(root))
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *mutation.tests],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(root, ignore_errors=True)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", process.stdout, flags=re.MULTILINE)))
    caught = process.returncode != 0 and bool(failed)
    return dict(
        mutation=mutation.name,
        file=mutation.file,
        caught=caught,
        caught_by=[name.split(" ")[0] for name in failed],
        designed_tests=list(mutation.tests),
        seconds=round(time.time() - tick, 1),
        note="" if caught or process.returncode in (0, 1) else process.stdout[-2000:],
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="run the mutations whose name contains this")
    args = parser.parse_args(argv)
    rows = []
    for mutation in MUTATIONS:
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
        pathlib.Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["caught"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
