"""A/B first call of ``dpm_jax.cluster`` for two source trees: fresh processes, interleaved.

    python benchmarks/ab_first_call.py --a /path/to/baseline --b . [--repeats 7] [--out results/ab_first_call.json]
    python benchmarks/ab_first_call.py --a . --b . --xla-flags-b "--xla_cpu_use_fusion_emitters=false"

What a Colab user pays once per session: import, then the first ``cluster`` on Synth data of
``--n`` x ``--d`` (dpm_jax.eval.datasets.synthetic_blobs, seed 42; the DPM paper's delta
n^-1.5), with no compilation cache (``cluster`` never uses it: its programs are shaped by the
private n). Each repeat starts one fresh process per tree, A and B in alternating order, and
records the first call's wall time, the seconds XLA spent compiling (JAX's
``backend_compile_duration`` events), the process's CPU seconds for the call, and the median
of five warm calls after it (what a faster-compiling setting costs later). Compile CPU is the
least load-sensitive on a shared machine; only ratios B / A within one run mean something.
``--xla-flags-a`` / ``--xla-flags-b`` set a side's XLA_FLAGS (compiler settings, one tree).
"""

from __future__ import annotations

import sys
import textwrap

from workers import ab_parser, ab_trees, fresh_process_ab, report_ab

_WORKER = textwrap.dedent("""
    import math, sys, time
    import jax, dpm_jax
    import jax._src.monitoring as monitoring
    from dpm_jax.eval.datasets import synthetic_blobs
    n, d = int(sys.argv[1]), int(sys.argv[2])
    data = synthetic_blobs(n=n, d=d, seed=42)
    budget = dpm_jax.Budget(1.0, 1.0 / (n * math.sqrt(n)))
    compile_s = []
    monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compile_s.append(seconds) if event.endswith("backend_compile_duration") else None
    )
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(dpm_jax.cluster(jax.random.key(0), data.points, budget, bounds=data.bounds).centers)
    first, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
    warm = []
    for seed in range(1, 6):
        start = time.perf_counter()
        jax.block_until_ready(dpm_jax.cluster(jax.random.key(seed), data.points, budget, bounds=data.bounds).centers)
        warm.append(time.perf_counter() - start)
    print("ready", first, first_cpu, sum(compile_s), sorted(warm)[2], flush=True)
""")

_FIELDS = ("first_call_s", "first_call_cpu_s", "compile_s", "warm_s")


def main(argv=None) -> int:
    parser = ab_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per tree")
    parser.add_argument("--xla-flags-a", default=None, help="side A's XLA_FLAGS (default: this process's)")
    parser.add_argument("--xla-flags-b", default=None, help="side B's XLA_FLAGS (default: this process's)")
    args = parser.parse_args(argv)
    trees = ab_trees(args)
    xla_flags = {"A": args.xla_flags_a, "B": args.xla_flags_b}
    ab = fresh_process_ab(_WORKER, [args.n, args.d], trees, args.repeats, _FIELDS, xla_flags)
    report_ab(args, trees, ab, xla_flags=xla_flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
