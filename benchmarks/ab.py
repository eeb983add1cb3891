"""A/B speed of two checkouts in one run: dpm_jax.cluster's warm call on Synth-10d, alternating.

    python benchmarks/ab.py --a /work/main --b . --out benchmarks/results/ab_issue23.json

Each round runs one fresh process per checkout (A then B), each timing ``--repeats`` warm calls
after one compiling call; the report gives every round's median and the ratio B/A of the medians
over all rounds. Alternating rounds spread a shared machine's load over both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from dpm_jax.files import write_json

CHILD = """
import json, time, sys, warnings
import jax, numpy as np, dpm_jax
from dpm_jax.eval.datasets import synthetic_blobs
warnings.simplefilter("ignore")
data = synthetic_blobs(n={n}, d=10, seed=0)
budget = dpm_jax.Budget(1.0, 1e-6)
run = lambda i: jax.block_until_ready(dpm_jax.cluster(jax.random.key(i), data.points, budget, bounds=data.bounds).k)
run(0)
times = []
for i in range({repeats}):
    start = time.perf_counter(); run(i + 1); times.append(time.perf_counter() - start)
print(json.dumps(dict(file=dpm_jax.__file__, times=times)))
"""


def _time_checkout(path: str, n: int, repeats: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(n=n, repeats=repeats)],
        cwd=os.path.abspath(path),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DPM_JAX_NO_COMPILATION_CACHE": "1", "PYTHONPATH": os.path.abspath(path)},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rounds = [
        {side: _time_checkout(path, args.n, args.repeats) for side, path in (("a", args.a), ("b", args.b))}
        for _ in range(args.rounds)
    ]
    medians = {side: float(np.median([t for r in rounds for t in r[side]["times"]])) for side in ("a", "b")}
    report = dict(
        n=args.n,
        d=10,
        repeats=args.repeats,
        rounds=rounds,
        median_a_s=medians["a"],
        median_b_s=medians["b"],
        b_over_a=medians["b"] / medians["a"],
    )
    if args.out:
        write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
