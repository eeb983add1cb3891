"""A/B warm speed of ``dpm_jax.cluster`` for two source trees, in one run, calls interleaved.

    python benchmarks/ab_speed.py --a /work/main --b . [--calls 40] [--out results/ab_speed.json]
                                  [--synthesize METHOD]

``--synthesize METHOD`` times ``dpm_jax.synthesize(..., method=METHOD)`` instead of ``cluster``.

One long-lived process per tree (PYTHONPATH = the tree) compiles once, then the two take
turns call by call (A, B, B, A, A, B, ...), each warm call on Synth data of ``--n`` x ``--d``
(dpm_jax.eval.datasets.synthetic_blobs, seed 42) at the default config with a fresh key:
both see the same machine load within a second, which is what makes the ratio B / A of the
medians meaningful on a shared machine. Only the ratio means something, and only within one run.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
import textwrap

from workers import ab_parser, ab_trees, ask, start_worker, stop

_WORKER = textwrap.dedent("""
    import sys, time
    import jax, dpm_jax
    from dpm_jax.eval.datasets import synthetic_blobs
    n, d, method = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    data = synthetic_blobs(n=n, d=d, seed=42)
    X = jax.device_put(data.points)
    budget = dpm_jax.Budget(1.0, 1e-6)
    if method == "cluster":
        run = lambda key: jax.block_until_ready(dpm_jax.cluster(key, X, budget, bounds=data.bounds).centers)
    else:
        synth = jax.jit(lambda key, x: dpm_jax.synthesize(key, x, budget, bounds=data.bounds, method=method))
        run = lambda key: jax.block_until_ready(synth(key, X).weights)
    run(jax.random.key(0))  # compile
    print("ready", dpm_jax.__file__, flush=True)
    for line in sys.stdin:
        tick = time.perf_counter()
        run(jax.random.key(int(line)))
        print(time.perf_counter() - tick, flush=True)
""")


def main(argv=None) -> int:
    parser = ab_parser(__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="warm calls per tree")
    parser.add_argument("--synthesize", default=None, metavar="METHOD", help="time synthesize, not cluster")
    args = parser.parse_args(argv)
    entry = args.synthesize or "cluster"
    trees = ab_trees(args)
    workers = {}
    for label, tree in trees.items():
        workers[label], ready = start_worker(_WORKER, [args.n, args.d, entry], tree)
        print(f"{tree}: {ready[0]}", flush=True)
    times = {"A": [], "B": []}
    for i in range(args.calls):
        for label in ("A", "B") if i % 2 == 0 else ("B", "A"):
            times[label].append(float(ask(workers[label], str(i + 1))[0]))  # the same keys for both trees
    stop(workers.values())
    medians = {label: statistics.median(values) for label, values in times.items()}
    ratios = sorted(b / a for a, b in zip(times["A"], times["B"]))
    result = dict(
        entry=entry,
        n=args.n,
        d=args.d,
        trees={label: str(tree) for label, tree in trees.items()},
        warm_seconds=times,
        median_seconds=medians,
        ratio_of_medians_b_over_a=medians["B"] / medians["A"],
        median_of_paired_ratios=statistics.median(ratios),
        paired_ratio_quartiles=[ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]],
        machine="shared 2-core CPU (other engineers' jobs running): compare the ratio only",
    )
    print(
        f"median A {medians['A']:.3f} s, B {medians['B']:.3f} s; B / A of medians "
        f"{result['ratio_of_medians_b_over_a']:.3f}, median of paired ratios {result['median_of_paired_ratios']:.3f} "
        f"(quartiles {result['paired_ratio_quartiles'][0]:.3f}, {result['paired_ratio_quartiles'][1]:.3f})"
    )
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
