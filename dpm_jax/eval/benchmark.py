"""Speed benchmark of :func:`dpm_jax.cluster` (``dpm-jax bench``, ``benchmarks/speed.py``).

For each data set (Synth-10d: 100,000 x 10; Synth-100d: 100,000 x 100, as in the
paper's Section 6.1) it measures, on the machine it runs on:

* ``first_call_s``: import + first call in a fresh Python process (compile included);
* ``warm_s``: the median of several warm calls with different keys;
* ``vmap_s``: the median of several warm calls of ``jax.vmap`` over 16 keys, and its
  ratio to ``warm_s``;
* ``temp_bytes``: XLA's temporary buffer size for one call (its peak working memory
  besides inputs and outputs), and its ratio to the input size;
* optionally ``baseline_s``: a sequential NumPy DPM (dpm_jax/eval/baselines/numpy_dpm.py, the
  plain line-by-line recursion) on the same data in the same run, and the speed-up.

Timings are wall-clock seconds with ``block_until_ready``; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Callable

import jax
import numpy as np

import dpm_jax
from dpm_jax.eval.datasets import synthetic_blobs
from dpm_jax.files import write_json

__all__ = ["speed_benchmark", "numpy_baseline", "main"]

DATASETS = {"synth-10d": 10, "synth-100d": 100}

_FIRST_CALL = """
import time
start = time.perf_counter()
import jax, numpy as np, dpm_jax
from dpm_jax.eval.datasets import synthetic_blobs
data = synthetic_blobs(n={n}, d={d}, seed=42)
budget = dpm_jax.Budget(1.0, {delta!r})
ready = time.perf_counter()
jax.block_until_ready(dpm_jax.cluster(jax.random.key(0), data.points, budget, bounds=data.bounds))
print(time.perf_counter() - ready, ready - start)
"""


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def machine_description() -> dict:
    """Where the numbers come from."""
    return dict(
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        jax=jax.__version__,
        backend=jax.default_backend(),
        devices=[str(d) for d in jax.devices()],
    )


def speed_benchmark(
    dataset: str,
    n: int = 100_000,
    repeats: int = 5,
    vmap_keys: int = 16,
    first_call: bool = True,
    baseline: Callable[[np.random.Generator, np.ndarray, float, float, tuple], object] | None = None,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> dict:
    """Time ``cluster`` on one synthetic data set; returns a JSON-ready dict."""
    d = DATASETS[dataset]
    delta = 1.0 / (n * math.sqrt(n))  # the paper's delta
    row: dict = dict(dataset=dataset, n=n, d=d, epsilon=1.0, delta=delta)
    if first_call:
        log(f"[{dataset}] first call in a fresh process ...")
        out = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL.format(n=n, d=d, delta=delta)],
            capture_output=True,
            text=True,
            check=True,
        )
        row["first_call_s"], row["import_and_data_s"] = map(float, out.stdout.split())
    data = synthetic_blobs(n=n, d=d, seed=42)
    budget = dpm_jax.Budget(1.0, delta)
    points = jax.device_put(data.points)

    def run(key):
        return dpm_jax.cluster(key, points, budget, bounds=data.bounds)

    jax.block_until_ready(run(jax.random.key(0)))
    log(f"[{dataset}] {repeats} warm calls ...")
    warm = [_time(lambda i=i: run(jax.random.key(i + 1))) for i in range(repeats)]
    row["warm_s"], row["warm_all_s"] = float(np.median(warm)), warm

    batched = jax.jit(jax.vmap(run))
    keys = jax.random.split(jax.random.key(99), vmap_keys)
    jax.block_until_ready(batched(keys))
    log(f"[{dataset}] vmap over {vmap_keys} keys ...")
    vmapped = [_time(lambda: batched(keys)) for _ in range(repeats)]
    row["vmap_keys"] = vmap_keys
    row["vmap_s"] = float(np.median(vmapped))
    row["vmap_over_warm"] = row["vmap_s"] / row["warm_s"]

    compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    analysis = compiled.memory_analysis()
    if analysis is not None:
        row["temp_bytes"] = int(analysis.temp_size_in_bytes)
        row["input_bytes"] = int(data.points.nbytes)
        row["temp_over_input"] = row["temp_bytes"] / row["input_bytes"]

    if baseline is not None:
        log(f"[{dataset}] sequential NumPy baseline (one run) ...")
        start = time.perf_counter()
        baseline(np.random.default_rng(0), data.points, 1.0, delta, data.bounds)
        row["baseline_s"] = time.perf_counter() - start
        row["speedup_vs_baseline"] = row["baseline_s"] / row["warm_s"]
    return row


def numpy_baseline(rng: np.random.Generator, points: np.ndarray, epsilon: float, delta: float, bounds: tuple) -> dict:
    """The sequential NumPy DPM (:mod:`dpm_jax.eval.baselines.numpy_dpm`) with the paper's defaults
    (its fixed depth tau_r = 7)."""
    from dpm_jax.eval.baselines.numpy_dpm import reference_dpm

    return reference_dpm(rng, points, epsilon, delta, bounds, dpm_jax.DPMConfig(tau_r=7))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``dpm-jax bench`` / ``python benchmarks/speed.py``."""
    parser = argparse.ArgumentParser(prog="dpm-jax bench", description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="synth-10d,synth-100d")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vmap-keys", type=int, default=16)
    parser.add_argument("--no-first-call", action="store_true", help="skip the fresh-process timing")
    parser.add_argument(
        "--baseline", action="store_true", help="also time the sequential NumPy DPM (dpm_jax.eval.baselines.numpy_dpm)"
    )
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.datasets.split(",") if name.strip()]
    unknown = [name for name in names if name not in DATASETS]
    if unknown:
        print(f"dpm-jax bench: unknown data set(s) {unknown}; choose from {sorted(DATASETS)}", file=sys.stderr)
        return 2
    rows = [
        speed_benchmark(
            name,
            n=args.n,
            repeats=args.repeats,
            vmap_keys=args.vmap_keys,
            first_call=not args.no_first_call,
            baseline=numpy_baseline if args.baseline else None,
        )
        for name in names
    ]
    report = dict(machine=machine_description(), results=rows)
    if args.out:
        write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 0
