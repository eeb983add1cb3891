"""The accelerator benchmark: the device, Synth-10d/100d, 10M rows, vmap over keys, the streamed path, CPU identity.

    python benchmarks/accelerator.py --out benchmarks/results/accelerator.json
    python benchmarks/accelerator.py --large-rows 1000000 --stream-rows 200000 --out /tmp/acc.json  # a small CPU run

Runs on JAX's default device (a GPU or TPU when one is present, else the CPU) and records it:

* ``speed``: Synth-10d and Synth-100d (100,000 rows): :func:`dpm_jax.eval.benchmark.speed_benchmark`
  (first call in a fresh process, warm median, vmap over 16 keys and its ratio to one call,
  XLA's temporary memory);
* ``large``: ``--large-rows`` x 10 and x 100 (default 10,000,000; the x 100 case holds 4 GB of
  float32): first call and warm median;
* ``stream``: :func:`dpm_jax.cluster_stream` on a ``.npy`` file of ``--stream-rows`` x 10: median
  wall time, and whether its release equals ``cluster``'s on the same rows and key;
* ``identity``: for Synth-10d and the large x 10 case, every array of the release (centres,
  counts, the tree, ...) computed on the default device against the same call on the CPU, byte
  for byte. On a machine without an accelerator both are the CPU, and the file says so.

Releases are compared with :func:`differing_fields`; the JSON keeps every timing and the medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import dpm_jax
from dpm_jax.eval.benchmark import machine_description, speed_benchmark
from dpm_jax.eval.datasets import synthetic_blobs
from dpm_jax.files import write_json


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def differing_fields(first, second) -> list[str]:
    """Paths of the arrays (leaves of the result pytree) whose dtype, shape or bytes differ."""
    pairs = zip(jax.tree_util.tree_leaves_with_path(first), jax.tree_util.tree_leaves_with_path(second))
    return [
        jax.tree_util.keystr(path)
        for (path, a), (_, b) in pairs
        if np.asarray(a).dtype != np.asarray(b).dtype or np.asarray(a).tobytes() != np.asarray(b).tobytes()
    ]


def _budget(n: int) -> dpm_jax.Budget:
    return dpm_jax.Budget(1.0, 1.0 / (n * math.sqrt(n)))  # the DPM paper's delta (Section 6.1)


def _timed(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def large_case(n: int, d: int, repeats: int) -> dict:
    """First call and warm median of ``cluster`` on n x d blobs on the default device."""
    data = synthetic_blobs(n=n, d=d, seed=42)
    points, budget = jax.device_put(data.points), _budget(n)

    def run(seed: int):
        return dpm_jax.cluster(jax.random.key(seed), points, budget, bounds=data.bounds)

    log(f"[{n} x {d}] first call, then {repeats} warm calls ...")
    first = _timed(lambda: run(0))
    warm = [_timed(lambda s=s: run(s + 1)) for s in range(repeats)]
    return dict(n=n, d=d, first_call_s=first, warm_s=float(np.median(warm)), warm_all_s=warm)


def identity_case(n: int, d: int) -> dict:
    """The release on the default device against the release on the CPU, same key and data."""
    data = synthetic_blobs(n=n, d=d, seed=42)
    budget, device = _budget(n), jax.devices()[0]
    if device.platform == "cpu":
        return dict(n=n, d=d, device=str(device), compared="no accelerator: the default device is the CPU")
    log(f"[{n} x {d}] the release on {device} and on the CPU ...")
    here = dpm_jax.cluster(jax.random.key(7), jax.device_put(data.points, device), budget, bounds=data.bounds)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        there = dpm_jax.cluster(jax.random.key(7), jax.device_put(data.points, cpu), budget, bounds=data.bounds)
    differing = differing_fields(here, there)
    return dict(n=n, d=d, device=str(device), identical=not differing, differing=differing)


def stream_case(n: int, repeats: int, directory: Path) -> dict:
    """cluster_stream on a .npy file against cluster on the same rows (same key, same device)."""
    data = synthetic_blobs(n=n, d=10, seed=42)
    path = directory / "stream.npy"
    np.save(path, data.points)
    budget = _budget(n)
    log(f"[stream {n} x 10] against cluster, then {repeats} warm runs ...")
    streamed = dpm_jax.cluster_stream(jax.random.key(0), path, budget, bounds=data.bounds)  # compiles
    in_memory = dpm_jax.cluster(jax.random.key(0), data.points, budget, bounds=data.bounds)
    differing = differing_fields(streamed, dataclasses.replace(in_memory, labels_nonprivate=None))
    times = [
        _timed(lambda s=s: dpm_jax.cluster_stream(jax.random.key(s + 1), path, budget, bounds=data.bounds).centers)
        for s in range(repeats)
    ]
    return dict(n=n, d=10, stream_s=float(np.median(times)), stream_all_s=times, same_as_cluster=not differing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/accelerator.json")
    parser.add_argument("--large-rows", type=int, default=10_000_000)
    parser.add_argument("--stream-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    result: dict = dict(machine=machine_description(), device=str(jax.devices()[0]))
    log(f"device: {result['device']}")
    result["speed"] = [speed_benchmark(name, n=100_000, repeats=args.repeats) for name in ("synth-10d", "synth-100d")]
    result["large"] = [large_case(args.large_rows, d, args.repeats) for d in (10, 100)]
    with tempfile.TemporaryDirectory() as directory:
        result["stream"] = stream_case(args.stream_rows, args.repeats, Path(directory))
    result["identity"] = [identity_case(100_000, 10), identity_case(args.large_rows, 10)]
    write_json(args.out, result)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
