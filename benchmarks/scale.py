"""Scale: the first call, 10M points in memory, streamed .npy files, forced CPU devices.

    nice python benchmarks/scale.py --out benchmarks/results/scale.json \
        [--sections first_call,in_memory,stream,devices] [--reference /work/main]

Every measurement runs in a fresh Python process (``python -c``), so compile, import and
resident memory are those a user sees; peak resident memory is the process's VmHWM,
reset (``/proc/self/clear_refs``) after the data is in memory where stated.

* ``first_call``: Synth-10d (100,000 x 10): import + data + ``cluster`` in a fresh process
  with an empty persistent compilation cache, then again with it warm (dpm_jax.cache), and
  the sequential NumPy DPM (dpm_jax/eval/baselines/numpy_dpm.py) on the same data.
* ``in_memory``: n x 10 float32 (default 10M) already in memory: median of warm calls, and
  the peak resident memory of the calls (the program loaded from a warm compilation cache)
  above the process with its data loaded; ``resident_over_input`` = (input + that) / input;
  XLA's temporary buffer size at 1M x 10; and its floor: one streaming pass over X (a jitted
  column maximum, median of 7) times the passes DPM must make (depth + 2: the root, one per
  level to the released depth, the leaf sums). With ``--reference DIR`` the checkout in DIR
  (PYTHONPATH) is measured the same way in the same run, for a before/after.
* ``stream``: ``cluster_stream`` on .npy files of n x 10 float32 (created in --data-dir if
  missing), for each split grid of --stream-grids (default: the cell grid, the default, and
  the paper's), alternating in the same run: median wall time and peak resident memory
  (each run a fresh process, the first call with a warm compilation cache) over --repeats runs.
* ``devices``: 4 forced CPU devices (XLA_FLAGS) vs 1, rows sharded: identical release?
  median warm time of each (calls interleaved), the engine program's per-device temporary
  memory (``memory_analysis()``) and its all-gathers; with ``--reference`` for both checkouts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

from dpm_jax.eval.benchmark import machine_description
from dpm_jax.files import write_json

_PEAK = textwrap.dedent("""
    def rss_gb():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    def peak_gb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024 / 1e9
    def reset_peak():
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
""")

FIRST_CALL = textwrap.dedent("""
    import time
    start = time.perf_counter()
    import jax, numpy as np, dpm_jax
    imported = time.perf_counter()
    from dpm_jax.eval.datasets import synthetic_blobs
    data = synthetic_blobs(n=100_000, d=10, seed=42)
    ready = time.perf_counter()
    jax.block_until_ready(dpm_jax.cluster(jax.random.key(0), data.points, dpm_jax.Budget(1.0, {delta!r}),
                                          bounds=data.bounds).centers)
    done = time.perf_counter()
    print(done - start, imported - start, done - ready)
""")

BASELINE = textwrap.dedent("""
    import time
    start = time.perf_counter()
    import numpy as np
    from dpm_jax.eval.benchmark import numpy_baseline
    from dpm_jax.eval.datasets import synthetic_blobs
    data = synthetic_blobs(n=100_000, d=10, seed=42)
    numpy_baseline(np.random.default_rng(0), data.points, 1.0, {delta!r}, data.bounds)
    print(time.perf_counter() - start)
""")

IN_MEMORY = _PEAK + textwrap.dedent("""
    import gc, json, os, time
    import jax, numpy as np, dpm_jax
    n, d = {n}, 10
    rng = np.random.default_rng(0)
    centres = rng.uniform(-80, 80, (64, d)).astype(np.float32)
    host = centres[rng.integers(0, 64, n)]
    host += rng.standard_normal((n, d), dtype=np.float32)
    X = jax.block_until_ready(jax.device_put(host))  # the transfer is asynchronous: wait for it,
    del host  # then free the host copy, so that "loaded" is the process with its data on the device
    gc.collect()
    budget = dpm_jax.Budget(1.0, 1e-6)
    run = lambda key: jax.block_until_ready(dpm_jax.cluster(jax.random.key(key), X, budget, bounds=(-100.0, 100.0)))
    loaded = rss_gb()
    reset_peak()
    start = time.perf_counter(); run(0); first = time.perf_counter() - start  # program from the warm cache
    first_peak = peak_gb()
    times = []
    for key in range(1, {repeats} + 1):
        start = time.perf_counter(); result = run(key); times.append(time.perf_counter() - start)
    # The floor's unit: one streaming pass over X (a column maximum reads every value once and
    # is bound by memory bandwidth), the median of a few warm calls in this process.
    one_pass = jax.jit(lambda X: X.max(axis=0))
    jax.block_until_ready(one_pass(X))
    passes = []
    for _ in range(7):
        start = time.perf_counter(); jax.block_until_ready(one_pass(X)); passes.append(time.perf_counter() - start)
    print(json.dumps(dict(times=times, first_s=first, loaded_gb=loaded, peak_gb=max(first_peak, peak_gb()),
                          input_gb=n * d * 4 / 1e9, module=dpm_jax.__file__,
                          pass_s=float(np.median(passes)), depth=int(result.depth))))
""")

TEMP_BYTES = textwrap.dedent("""
    import json, jax, numpy as np, dpm_jax
    run = jax.jit(lambda X: dpm_jax.cluster(jax.random.key(0), X, dpm_jax.Budget(1.0, 1e-6), bounds=(-100.0, 100.0)))
    analysis = run.lower(jax.ShapeDtypeStruct(({n}, 10), np.float32)).compile().memory_analysis()
    print(json.dumps(dict(temp_bytes=int(analysis.temp_size_in_bytes), input_bytes={n} * 40)))
""")

STREAM = _PEAK + textwrap.dedent("""
    import json, os, time
    import jax, numpy as np, dpm_jax
    start = time.perf_counter()
    r = dpm_jax.cluster_stream(jax.random.key(0), {path!r}, dpm_jax.Budget(1.0, 1e-6), bounds=(-100.0, 100.0),
                               config=dpm_jax.DPMConfig(split_grid={split_grid!r}))
    jax.block_until_ready(r.centers)
    print(json.dumps(dict(seconds=time.perf_counter() - start, peak_gb=peak_gb(), k=int(r.k))))
""")

DEVICES = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import json, re, time, warnings
    import jax, numpy as np, dpm_jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    from dpm_jax import api
    from dpm_jax.eval.datasets import synthetic_blobs
    warnings.simplefilter("ignore")
    data = synthetic_blobs(n={n}, d=10, seed=42)
    budget = dpm_jax.Budget(1.0, 1e-6)
    placed = {{"1 device": jax.device_put(data.points, jax.devices()[0]),
              "4 devices": jax.device_put(data.points, NamedSharding(jax.make_mesh((4,), ("rows",)), P("rows")))}}
    run = lambda X, key: jax.block_until_ready(dpm_jax.cluster(jax.random.key(key), X, budget, bounds=data.bounds))
    out, released, times = {{}}, {{}}, {{name: [] for name in placed}}
    for name, X in placed.items():
        calls = []  # the engine's program as called for this placement: its per-device memory
        engine = api._cluster_arrays
        api._cluster_arrays = lambda *a, **k: calls.append((a, k)) or engine(*a, **k)
        try:
            r = run(X, 0)
        finally:
            api._cluster_arrays = engine
        released[name] = [np.asarray(a).tobytes() for a in jax.tree_util.tree_leaves(r)]
        compiled = engine.lower(*calls[0][0], **calls[0][1]).compile()
        memory, text = compiled.memory_analysis(), compiled.as_text()
        out[name] = dict(
            per_device_temp_bytes=int(memory.temp_size_in_bytes),
            per_device_argument_bytes=int(memory.argument_size_in_bytes),
            all_gathers=len(re.findall(r"\\ball-gather\\(", text)),
            all_reduces=len(re.findall(r"\\ball-reduce\\(", text)),
        )
    for i in range({repeats}):  # interleaved: both placements see the same machine load
        for name in (list(placed) if i % 2 == 0 else list(placed)[::-1]):
            start = time.perf_counter(); run(placed[name], i + 1); times[name].append(time.perf_counter() - start)
    for name in placed:
        out[name].update(median_s=float(np.median(times[name])), all_s=times[name])
    out["identical"] = released["1 device"] == released["4 devices"]
    out["paired_ratio_4_over_1"] = float(np.median(np.divide(times["4 devices"], times["1 device"])))
    out["module"] = dpm_jax.__file__
    print(json.dumps(out))
""")


def _python(code: str, env_changes: dict | None = None, timeout: int = 3600) -> str:
    env = dict(os.environ)
    env.update(env_changes or {})
    # Run outside the repository: with ``python -c`` the working directory comes first on
    # sys.path and would shadow a --reference checkout given through PYTHONPATH.
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout.strip().splitlines()[-1]


def first_call(repeats: int) -> dict:
    delta = 1.0 / (100_000 * 100_000**0.5)
    rows = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            cold = [float(x) for x in _python(FIRST_CALL.format(delta=delta), {"DPM_JAX_CACHE_DIR": cache}).split()]
            warm = [float(x) for x in _python(FIRST_CALL.format(delta=delta), {"DPM_JAX_CACHE_DIR": cache}).split()]
        baseline = float(_python(BASELINE.format(delta=delta)))
        rows.append(
            dict(
                cold_total_s=cold[0],
                cold_import_s=cold[1],
                cold_first_call_s=cold[2],
                warm_total_s=warm[0],
                warm_import_s=warm[1],
                warm_first_call_s=warm[2],
                numpy_baseline_s=baseline,
            )
        )
    summary = {key: float(np.median([row[key] for row in rows])) for key in rows[0]}
    summary["baseline_over_warm_total"] = summary["numpy_baseline_s"] / summary["warm_total_s"]
    summary["baseline_over_cold_total"] = summary["numpy_baseline_s"] / summary["cold_total_s"]
    return dict(dataset="synth-10d", n=100_000, d=10, runs=rows, medians=summary)


def in_memory(n: int, repeats: int, reference: str | None) -> dict:
    """Both checkouts with a warm persistent cache of their own (JAX's, so the reference needs no
    dpm_jax.cache): the measured process loads the program instead of compiling it, so its peak
    resident memory above the loaded data is the run's, not the compiler's."""
    checkouts = {"this": None} if reference is None else {"reference": reference, "this": None}
    result = dict(n=n, d=10, input_gb=n * 10 * 4 / 1e9)
    for name, path in checkouts.items():
        with tempfile.TemporaryDirectory() as cache:
            env = {
                "DPM_JAX_NO_COMPILATION_CACHE": "1",
                "JAX_COMPILATION_CACHE_DIR": cache,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            }
            if path:
                env["PYTHONPATH"] = path
            _python(IN_MEMORY.format(n=n, repeats=1), env)  # fills the cache
            run = json.loads(_python(IN_MEMORY.format(n=n, repeats=repeats), env))
        temp = json.loads(
            _python(
                TEMP_BYTES.format(n=min(n, 1_000_000)),
                {"DPM_JAX_NO_COMPILATION_CACHE": "1", **({"PYTHONPATH": path} if path else {})},
            )
        )
        working = run["peak_gb"] - run["loaded_gb"]
        result[name] = dict(
            warm_median_s=float(np.median(run["times"])),
            warm_all_s=run["times"],
            first_call_from_cache_s=run["first_s"],
            loaded_resident_gb=run["loaded_gb"],
            peak_resident_gb=run["peak_gb"],
            working_gb=working,
            resident_over_input=(working + result["input_gb"]) / result["input_gb"],
            module=run["module"],
            xla_temp_bytes_at_1m=temp["temp_bytes"],
            xla_temp_over_input_at_1m=temp["temp_bytes"] / temp["input_bytes"],
            **_floor(run),
        )
        print(f"in_memory {name}: {result[name]}", file=sys.stderr)
    if reference:
        result["reference_over_this_time"] = result["reference"]["warm_median_s"] / result["this"]["warm_median_s"]
    return result


def _floor(run: dict) -> dict:
    """The in-memory run against its floor: the passes DPM must make over X (the root's count and
    clip, one per level down to the released depth to bin every point in its node's cell, the
    leaf sums) times one streaming pass's time, measured in the same process."""
    if "pass_s" not in run:  # a reference checkout's script without the floor
        return {}
    passes = run["depth"] + 2
    floor = passes * run["pass_s"]
    warm = float(np.median(run["times"]))
    return dict(one_pass_s=run["pass_s"], passes=passes, floor_s=floor, warm_over_floor=warm / floor)


def _npy(path: str, n: int) -> str:
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        centres = rng.uniform(-80, 80, (64, 10)).astype(np.float32)
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 10))
        for start in range(0, n, 2**22):
            rows = min(n, start + 2**22) - start
            array[start : start + rows] = centres[rng.integers(0, 64, rows)] + rng.standard_normal(
                (rows, 10), dtype=np.float32
            )
        array.flush()
    return path


def stream(sizes: list[int], data_dir: str, grids: list[str], repeats: int) -> list[dict]:
    """Per size and grid, the median over ``repeats`` fresh processes, the grids alternating."""
    rows = []
    for n in sizes:
        path = _npy(os.path.join(data_dir, f"scale_{n}.npy"), n)
        runs = {grid: [] for grid in grids}
        for _ in range(repeats):
            for grid in grids:
                runs[grid].append(json.loads(_python(STREAM.format(path=path, split_grid=grid))))
                print(f"stream n={n}, {grid} grid: {runs[grid][-1]}", file=sys.stderr)
        for grid, results in runs.items():
            rows.append(
                dict(
                    n=n,
                    split_grid=grid,
                    file_gb=os.path.getsize(path) / 1e9,
                    k=results[0]["k"],
                    seconds=float(np.median([r["seconds"] for r in results])),
                    peak_gb=float(np.median([r["peak_gb"] for r in results])),
                    runs=[{key: r[key] for key in ("seconds", "peak_gb")} for r in results],
                )
            )
    return rows


def _stream_row_key(row: dict) -> tuple[int, str]:
    return row["n"], row.get("split_grid", "paper")  # rows recorded before the cell grid streamed: paper


def devices(n: int, repeats: int, reference: str | None) -> dict:
    """4 forced CPU devices against one, rows sharded, in one process per checkout (with
    ``--reference`` the reference checkout first, then this one): identical release, medians of
    interleaved warm calls, and the engine program's per-device temporary memory (XLA's
    memory_analysis) and cross-device gathers."""
    checkouts = {"this": None} if reference is None else {"reference": reference, "this": None}
    result = dict(n=n, d=10)
    for name, path in checkouts.items():
        env = {"DPM_JAX_NO_COMPILATION_CACHE": "1", **({"PYTHONPATH": path} if path else {})}
        run = json.loads(_python(DEVICES.format(n=n, repeats=repeats), env))
        run["four_over_one"] = run["4 devices"]["median_s"] / run["1 device"]["median_s"]
        run["temp_four_over_one"] = run["4 devices"]["per_device_temp_bytes"] / run["1 device"]["per_device_temp_bytes"]
        result[name] = run
        print(f"devices {name}: {run}", file=sys.stderr)
    return result


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.get("stream") or []
    if not rows:
        return
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for grid in sorted({_stream_row_key(row)[1] for row in rows}):
        mine = [row for row in rows if _stream_row_key(row)[1] == grid]
        n = [row["n"] for row in mine]
        axes[0].loglog(n, [row["seconds"] for row in mine], "o-", label=f"{grid} grid")
        axes[1].semilogx(n, [row["peak_gb"] for row in mine], "o-", label=f"peak resident, {grid} grid")
    sizes = sorted({row["n"]: row["file_gb"] for row in rows}.items())
    axes[1].semilogx([n for n, _ in sizes], [gb for _, gb in sizes], "k--", label="file size")
    axes[0].legend()
    axes[0].set(xlabel="n (x 10 float32, from .npy)", ylabel="seconds", title="cluster_stream: time")
    axes[1].set(xlabel="n", ylabel="GB", title="cluster_stream: memory")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="first_call,in_memory,stream,devices")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--in-memory-n", type=int, default=10_000_000)
    parser.add_argument("--stream-sizes", default="1000000,10000000")
    parser.add_argument("--stream-grids", default="cell,paper", help="split grids streamed at every size")
    parser.add_argument("--devices-n", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default=tempfile.gettempdir())
    parser.add_argument("--reference", default=None, help="a checkout to compare in_memory and devices with")
    parser.add_argument("--out", default="benchmarks/results/scale.json")
    args = parser.parse_args(argv)
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    report = dict(machine=machine_description(), load_average=os.getloadavg())
    if os.path.exists(args.out):  # sections not rerun keep their last numbers
        with open(args.out) as handle:
            report = {**json.load(handle), **report}
    for name in sections:
        print(f"[{name}] ...", file=sys.stderr)
        if name == "first_call":
            report[name] = first_call(args.repeats)
        elif name == "in_memory":
            report[name] = in_memory(args.in_memory_n, args.repeats, args.reference)
        elif name == "stream":  # rows of sizes not rerun are kept: large sizes can run on their own
            fresh = stream(
                [int(float(n)) for n in args.stream_sizes.split(",")],
                args.data_dir,
                [grid.strip() for grid in args.stream_grids.split(",") if grid.strip()],
                args.repeats,
            )
            kept = [
                row
                for row in report.get(name, [])
                if _stream_row_key(row) not in {_stream_row_key(row) for row in fresh}
            ]
            report[name] = sorted(kept + fresh, key=_stream_row_key)
        elif name == "devices":
            report[name] = devices(args.devices_n, args.repeats, args.reference)
        else:
            parser.error(f"unknown section {name!r}")
        write_json(args.out, report)
    plot(report, os.path.splitext(args.out)[0] + ".png")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
