"""Batches of keys: ``jax.vmap`` of ``cluster`` over 16 keys against one call, two checkouts in one run.

    nice python benchmarks/vmap_keys.py --reference /path/to/before --out benchmarks/results/vmap_keys.json \\
        [--sizes 20000,100000] [--calls 15] [--keys 16] [--d 10] [--synthesize METHOD]

``--synthesize METHOD`` batches ``dpm_jax.synthesize(..., method=METHOD)`` instead of ``cluster``.

One long-lived worker process per checkout (PYTHONPATH) and size compiles the one-key program
and the vmapped one (Synth data, n x d, default config, jit around both), then the workers
take turns call by call (one key, then the batch, order alternating), so that every ratio
compares calls a second apart on this shared machine. Reported per checkout and size: the
median wall time of one call and of the batch, their ratio (the target is at most 8x for 16
keys), and the same in process CPU time (less sensitive to other users' load; the CPU
backend runs on all cores either way). Each worker checks that the batch's release equals the
16 single calls' bit for bit, and the checkouts' releases are compared with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap

from dpm_jax.eval.benchmark import machine_description
from dpm_jax.files import write_json
from workers import ask, start_worker, stop

_WORKER = textwrap.dedent("""
    import hashlib, sys, time, warnings
    import jax, numpy as np, dpm_jax
    from dpm_jax.eval.datasets import synthetic_blobs
    warnings.simplefilter("ignore")
    n, batch, d, method = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    data = synthetic_blobs(n=n, d=d, seed=42)
    X = jax.device_put(data.points)
    budget = dpm_jax.Budget(1.0, 1e-6)
    if method == "cluster":
        release = lambda key, X: dpm_jax.cluster(key, X, budget, bounds=data.bounds)
        fields = lambda r: (r.centers, r.counts, r.valid, r.k, *r.tree)
    else:
        release = lambda key, X: dpm_jax.synthesize(key, X, budget, bounds=data.bounds, method=method)
        fields = lambda r: (r.centers, r.weights, r.valid)
    one = jax.jit(lambda key, X: fields(release(key, X)))
    many = jax.jit(jax.vmap(lambda key, X: fields(release(key, X)), in_axes=(0, None)))
    keys = lambda seed: jax.random.split(jax.random.key(seed), batch)
    batched = jax.block_until_ready(many(keys(0), X))
    singles = [jax.block_until_ready(one(key, X)) for key in keys(0)]
    same = all(np.asarray(b)[i].tobytes() == np.asarray(s[j]).tobytes()
               for i, s in enumerate(singles) for j, b in enumerate(batched))
    digest = hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in batched)).hexdigest()
    print("ready", same, digest, dpm_jax.__file__, flush=True)
    for line in sys.stdin:
        which, seed = line.split()
        args = (jax.random.key(int(seed)), X) if which == "one" else (keys(int(seed)), X)
        program = one if which == "one" else many
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(program(*args))
        print(time.perf_counter() - wall, time.process_time() - cpu, flush=True)
""")


def measure(checkouts: dict, n: int, batch: int, calls: int, d: int = 10, entry: str = "cluster") -> dict:
    workers, result = {}, {}
    for name, path in checkouts.items():
        workers[name], ready = start_worker(_WORKER, [n, batch, d, entry], path)
        result[name] = dict(batch_equals_single_calls=ready[0] == "True", digest=ready[1], module=ready[2])
    times = {(name, which): [] for name in checkouts for which in ("one", "batch")}
    for i in range(calls):
        order = [(name, which) for name in checkouts for which in ("one", "batch")]
        for name, which in order if i % 2 == 0 else order[::-1]:
            wall, cpu = ask(workers[name], f"{which} {i + 1}")
            times[name, which].append((float(wall), float(cpu)))
    stop(workers.values())
    for name in checkouts:
        one, many = times[name, "one"], times[name, "batch"]
        median = lambda values, k: statistics.median(v[k] for v in values)
        result[name].update(
            one_call_s=median(one, 0),
            batch_s=median(many, 0),
            batch_over_one=median(many, 0) / median(one, 0),
            paired_batch_over_one=statistics.median(m[0] / o[0] for m, o in zip(many, one)),
            one_call_cpu_s=median(one, 1),
            batch_cpu_s=median(many, 1),
            batch_over_one_cpu=median(many, 1) / median(one, 1),
        )
        print(f"n={n} {name}: {result[name]}", file=sys.stderr)
    if len(checkouts) == 2:
        reference, this = result["reference"], result["this"]
        result["same_release_as_reference"] = reference["digest"] == this["digest"]
        result["reference_batch_over_this_batch"] = statistics.median(
            r[0] / t[0] for r, t in zip(times["reference", "batch"], times["this", "batch"])
        )
        result["reference_one_over_this_one"] = statistics.median(
            r[0] / t[0] for r, t in zip(times["reference", "one"], times["this", "one"])
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=None, help="a checkout to compare with (PYTHONPATH)")
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--keys", type=int, default=16)
    parser.add_argument("--calls", type=int, default=15, help="interleaved warm calls of each kind")
    parser.add_argument("--out", default="benchmarks/results/vmap_keys.json")
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--synthesize", default=None, metavar="METHOD", help="batch synthesize, not cluster")
    args = parser.parse_args(argv)
    entry = args.synthesize or "cluster"
    checkouts = {"this": None} if args.reference is None else {"reference": args.reference, "this": None}
    report = dict(
        machine=machine_description(), load_average_start=os.getloadavg(), keys=args.keys, d=args.d, entry=entry
    )
    report["sizes"] = {
        n: measure(checkouts, n, args.keys, args.calls, args.d, entry)
        for n in (int(float(v)) for v in args.sizes.split(","))
    }
    report["load_average_end"] = os.getloadavg()
    write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
