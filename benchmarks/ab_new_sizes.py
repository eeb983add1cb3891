"""A/B: ``dpm_jax.cluster`` on a new number of rows after the first call, for two source trees.

    python benchmarks/ab_new_sizes.py --a /path/to/baseline --b . [--n 20000 --d 10] [--repeats 5] [--out FILE]

What a user pays who clusters a subset, a cross-validation fold or a day's new records after
a first call: each repeat starts one fresh process per tree (A and B alternating), runs the
first call on Synth data of ``--n`` x ``--d`` (dpm_jax.eval.datasets.synthetic_blobs, seed 42;
delta n^-1.5), then one call on each of ``--fewer`` fewer rows (the first n - m rows, each a
new row count), then five warm calls on all n rows. Recorded: the first call, the median and
largest of the new-size calls, and the median warm call (what padding to the row bucket costs
a caller who never changes n; dpm_jax.rows). Only ratios B / A within one run mean something.
"""

from __future__ import annotations

import sys
import textwrap

from workers import ab_parser, ab_trees, fresh_process_ab, report_ab

_WORKER = textwrap.dedent("""
    import math, statistics, sys, time
    import jax, dpm_jax
    from dpm_jax.eval.datasets import synthetic_blobs
    n, d = int(sys.argv[1]), int(sys.argv[2])
    fewer = [int(m) for m in sys.argv[3].split(",")]
    data = synthetic_blobs(n=n, d=d, seed=42)
    budget = dpm_jax.Budget(1.0, 1.0 / (n * math.sqrt(n)))

    def timed(seed, rows):
        start = time.perf_counter()
        result = dpm_jax.cluster(jax.random.key(seed), data.points[:rows], budget, bounds=data.bounds)
        jax.block_until_ready((result.centers, result.labels_nonprivate))
        return time.perf_counter() - start

    first = timed(0, n)
    new = [timed(1 + i, n - m) for i, m in enumerate(fewer)]
    warm = sorted(timed(100 + i, n) for i in range(5))[2]
    print("ready", first, statistics.median(new), max(new), warm, flush=True)
""")

_FIELDS = ("first_call_s", "new_size_median_s", "new_size_max_s", "warm_s")


def main(argv=None) -> int:
    parser = ab_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per tree")
    parser.add_argument("--fewer", default="1,7,50,300", help="comma-separated m: one call on n - m rows each")
    args = parser.parse_args(argv)
    trees = ab_trees(args)
    ab = fresh_process_ab(_WORKER, [args.n, args.d, args.fewer], trees, args.repeats, _FIELDS)
    report_ab(args, trees, ab, fewer=args.fewer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
