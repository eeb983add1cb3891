"""Long-lived benchmark workers: one Python process per checkout, fed a line, answering a line.

For the A/B benchmarks (benchmarks/ab_speed.py, benchmarks/vmap_keys.py): each checkout's
worker compiles once, then the workers take turns call by call, so that every ratio compares
calls a second apart on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile


def start_worker(
    code: str, args: list, path: str | os.PathLike | None, xla_flags: str | None = None
) -> tuple[subprocess.Popen, list[str]]:
    """``python -c code *args`` on the checkout at ``path`` (PYTHONPATH; None: the installed one),
    without the persistent compilation cache, started and waited for: (the process, the words
    after "ready" of its first line). A worker whose first line is not "ready ..." is an error.
    ``xla_flags``: the worker's XLA_FLAGS (None: this process's)."""
    env = dict(os.environ, DPM_JAX_NO_COMPILATION_CACHE="1")
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    if path:
        env["PYTHONPATH"] = str(path)
    # Outside the repository: with ``python -c`` the working directory would shadow PYTHONPATH.
    process = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        cwd=tempfile.gettempdir(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ready = process.stdout.readline().split()
    if not ready or ready[0] != "ready":
        raise RuntimeError(f"the worker for {path or 'this checkout'} did not start")
    return process, ready[1:]


def ask(process: subprocess.Popen, line: str) -> list[str]:
    """The words of the worker's answer to one line."""
    process.stdin.write(f"{line}\n")
    process.stdin.flush()
    return process.stdout.readline().split()


def stop(workers) -> None:
    """Close the workers' input (their loops end) and wait for them."""
    for process in workers:
        process.stdin.close()
        process.wait()


def ab_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every A/B benchmark takes: the two source trees, the data's size, --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--a", required=True, help="source tree A (the baseline)")
    parser.add_argument("--b", default=".", help="source tree B")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--out", default=None)
    return parser


def ab_trees(args: argparse.Namespace) -> dict[str, pathlib.Path]:
    """{"A": tree, "B": tree}, resolved."""
    return {"A": pathlib.Path(args.a).resolve(), "B": pathlib.Path(args.b).resolve()}


def fresh_process_ab(
    worker: str, argv: list, trees: dict, repeats: int, fields: tuple[str, ...], xla_flags=None
) -> dict:
    """Run ``worker`` once per repeat in a fresh process per tree, A and B alternating in order;
    its "ready" line's numbers are ``fields``. The runs, their medians and the ratios B / A."""
    xla_flags = xla_flags or {"A": None, "B": None}
    runs = {name: [] for name in trees}
    for repeat in range(repeats):
        for name in ("A", "B") if repeat % 2 == 0 else ("B", "A"):
            process, words = start_worker(worker, argv, trees[name], xla_flags[name])
            stop([process])
            runs[name].append(dict(zip(fields, map(float, words))))
            print(f"repeat {repeat} {name}: {runs[name][-1]}", file=sys.stderr)
    medians = {name: {f: statistics.median(r[f] for r in rows) for f in fields} for name, rows in runs.items()}
    ratio = {f: medians["B"][f] / medians["A"][f] for f in fields}
    return dict(runs=runs, medians=medians, ratio_b_over_a=ratio)


def report_ab(args: argparse.Namespace, trees: dict, ab: dict, **settings) -> None:
    """Print the medians and ratios of :func:`fresh_process_ab` and write the whole run to ``--out``."""
    result = dict(
        n=args.n, d=args.d, repeats=args.repeats, **settings, trees={k: str(v) for k, v in trees.items()}, **ab
    )
    print(json.dumps(dict(medians=ab["medians"], ratio_b_over_a=ab["ratio_b_over_a"]), indent=1))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
