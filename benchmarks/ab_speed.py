"""A/B warm speed of ``dpm_jax.cluster`` for two source trees, in one run, rounds interleaved.

    python benchmarks/ab_speed.py --a /work/main --b . [--rounds 3] [--out results/ab_speed.json]

Each round starts one fresh process per tree (A then B, alternating which goes first),
which compiles once and times ``--calls`` warm calls (keys 1..calls) on Synth data of
``--n`` x ``--d`` (dpm_jax.eval.datasets.synthetic_blobs, seed 42) at the default
config; the medians of all warm calls per tree and their ratio B / A are reported. On a
shared machine only the ratio means something, and only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import textwrap

_WORKER = textwrap.dedent("""
    import json, sys, time
    import jax, dpm_jax
    from dpm_jax.eval.datasets import synthetic_blobs
    n, d, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data = synthetic_blobs(n=n, d=d, seed=42)
    X = jax.device_put(data.points)
    budget = dpm_jax.Budget(1.0, 1e-6)
    run = lambda key: jax.block_until_ready(dpm_jax.cluster(key, X, budget, bounds=data.bounds).centers)
    run(jax.random.key(0))  # compile
    times = []
    for i in range(calls):
        tick = time.perf_counter()
        run(jax.random.key(i + 1))
        times.append(time.perf_counter() - tick)
    print(json.dumps(dict(source=dpm_jax.__file__, times=times)))
""")


def measure(tree: pathlib.Path, n: int, d: int, calls: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), DPM_JAX_NO_COMPILATION_CACHE="1")
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(n), str(d), str(calls)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="source tree A (the baseline)")
    parser.add_argument("--b", default=".", help="source tree B")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    trees = {"A": pathlib.Path(args.a).resolve(), "B": pathlib.Path(args.b).resolve()}
    times = {"A": [], "B": []}
    for round_ in range(args.rounds):
        for label in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
            row = measure(trees[label], args.n, args.d, args.calls)
            times[label] += row["times"]
            print(
                f"round {round_} {label} ({row['source']}): median {statistics.median(row['times']):.3f} s", flush=True
            )
    medians = {label: statistics.median(values) for label, values in times.items()}
    result = dict(
        n=args.n,
        d=args.d,
        trees={label: str(tree) for label, tree in trees.items()},
        warm_seconds=times,
        median_seconds=medians,
        ratio_b_over_a=medians["B"] / medians["A"],
        machine="shared 2-core CPU (other engineers' jobs running): compare the ratio only",
    )
    print(f"median A {medians['A']:.3f} s, B {medians['B']:.3f} s, B / A = {result['ratio_b_over_a']:.3f}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
