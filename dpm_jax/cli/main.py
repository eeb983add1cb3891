"""The ``dpm-jax`` argument parser and its commands: cluster a file, plan a budget, the demo, the benchmark.

    dpm-jax cluster data.csv --epsilon 1 --delta 1e-6 --bounds -100 100 --out release.json
    dpm-jax accountant budget.json --epsilon 3 --delta 1e-5     # then: cluster ... --accountant budget.json
    dpm-jax plan --n 20000 --d 10 --epsilon 1 --delta 1e-6
    dpm-jax demo --n 100000 --d 10
    dpm-jax bench ...

``cluster`` writes the *release* of one DPM run (the DPM paper,
Algorithm 1): the DP centres, their noisy sizes, the split tree, the split interval
size and the privacy ledger, together with the public inputs (budget, bounds,
hyper-parameters). Nothing computed from individual points without noise (labels,
the exact number of rows) goes into it. Results go to stdout or to files written
atomically; status messages go to stderr, and they hold public numbers and the release
only, except the wall time, labelled NOT PRIVATE. Bad input ends the command with exit
status 1 (2 for a malformed command line) and a one-line message, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import os
import sys
import time
import warnings
from typing import Callable, Sequence

from dpm_jax.accountant import BudgetExceededError
from dpm_jax.cli import kmeans as kmeans_command
from dpm_jax.api import cluster
from dpm_jax.budget import Budget
from dpm_jax.cli.budget_file import add_accountant_command, open_accountant
from dpm_jax.cli.readers import read_points, stream_points
from dpm_jax.cli import synthesize as synthesize_command
from dpm_jax.cli.bounds_option import parse_bounds, released_bounds
from dpm_jax.bounds import PRIVATE, PrivateBounds
from dpm_jax.cli.release import release_to_dict, write_centers_csv
from dpm_jax.config import DPMConfig
from dpm_jax.diagnostics import InsufficientBudgetWarning, plan
from dpm_jax.files import write_atomically
from dpm_jax.keys import MAX_SEED, key_from_seed
from dpm_jax.stream import DEFAULT_CHUNK_ROWS, cluster_stream

__all__ = ["main", "build_parser", "CONFIG_OPTIONS", "CommandError", "config_from_args"]

PROG = "dpm-jax"


# DPMConfig's fields exposed as options: (field, parser of the text, help), from the fields' metadata.
CONFIG_OPTIONS: tuple[tuple[str, Callable[[str], object], str], ...] = tuple(
    (field.name, field.metadata["parse"], field.metadata["help"]) for field in dataclasses.fields(DPMConfig)
)


class CommandError(Exception):
    """A user error: reported as one line on stderr with a non-zero exit status."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors become one-line :class:`CommandError`."""

    def error(self, message: str):
        raise CommandError(f"{message} (see {self.prog} --help)", status=2)


def _check_writable(path: str | None) -> None:
    """Fail before the (possibly long) run when an output's folder does not exist."""
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"cannot write {path}: folder {directory} does not exist")
    if os.path.isdir(path):
        raise CommandError(f"cannot write {path}: it is a folder")


def _status(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def config_from_args(args: argparse.Namespace) -> DPMConfig:
    """The hyper-parameters given on the command line, the paper's defaults for the rest."""
    overrides = {name: getattr(args, name) for name, _, _ in CONFIG_OPTIONS if getattr(args, name) is not None}
    return DPMConfig(**overrides)


def _bounds_request(args: argparse.Namespace) -> PrivateBounds | list[tuple[float, float]]:
    """--bounds private (a :class:`PrivateBounds`), or the (lo, hi) pairs of --bounds / --bounds-file;
    checked before the data is read."""
    try:
        if args.bounds_file:
            if args.bounds_share is not None:
                raise CommandError("--bounds-share applies only to --bounds private")
            return _read_bounds_file(args.bounds_file)
        if any(list(values) == [PRIVATE] for values in args.bounds):
            if len(args.bounds) != 1:
                raise CommandError("--bounds private replaces every other --bounds: give it alone")
            return parse_bounds(args.bounds[0], args.bounds_share)
        return [parse_bounds(values, args.bounds_share) for values in args.bounds]
    except ValueError as error:
        raise CommandError(str(error)) from None


def _bounds_of(request: PrivateBounds | list[tuple[float, float]], d: int):
    """The ``bounds`` argument of the run: the request for private bounds, one (lo, hi) pair for every
    column, or per-column (lo, hi) lists."""
    if isinstance(request, PrivateBounds):
        return request
    for j, (lower, upper) in enumerate(request):
        if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
            raise CommandError(f"bounds need finite LO < HI, got {lower:g} {upper:g} (pair {j + 1} of {len(request)})")
    if len(request) == 1:
        return request[0]
    if len(request) != d:
        raise CommandError(
            f"{len(request)} bounds pairs for {d} columns: give one pair for all columns or one per column"
        )
    return tuple(list(side) for side in zip(*request))


def _read_bounds_file(path: str) -> list[tuple[float, float]]:
    """Per-column bounds: a CSV line 'lo,hi' per column (in the order clustered), '#' comments allowed."""
    pairs = []
    with open(path) as file:
        for number, line in enumerate(file, start=1):
            text = line.split("#")[0].strip()
            if not text:
                continue
            try:
                lower, upper = (float(v) for v in text.split(","))
            except ValueError:
                raise CommandError(f"{path}: line {number} must be 'lo,hi' (two numbers), got {text!r}") from None
            pairs.append((lower, upper))
    if not pairs:
        raise CommandError(f"{path} holds no bounds")
    return pairs


def _split_names(text: str | None) -> list[str] | None:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _run_cluster(args: argparse.Namespace) -> int:
    bounds_request = _bounds_request(args)
    budget, config = Budget(epsilon=args.epsilon, delta=args.delta), config_from_args(args)
    columns, drop = _split_names(args.columns), _split_names(args.drop)
    if columns and drop:
        raise CommandError("give --columns or --drop, not both")
    accountant = open_accountant(args.accountant)
    if accountant is not None:
        accountant.check(budget)  # refused before the data is read
    key = key_from_seed(args.seed)
    _check_writable(args.out)
    _check_writable(args.centers_csv)

    under = f"(epsilon={budget.epsilon:g}, delta={budget.delta:g})-DP" + (
        "" if args.seed is not None else " with a fresh random seed"
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # one line each on stderr, like the status
        warnings.simplefilter("always")
        if args.stream:
            points = stream_points(args.input, columns, drop)
            bounds = _bounds_of(bounds_request, len(points.columns))
            _status(
                f"streaming {args.input} (columns {', '.join(points.columns)}) in chunks of {args.chunk_rows} rows; "
                f"clustering under {under}"
            )
            with accountant or contextlib.nullcontext():
                result = cluster_stream(key, points.data, budget, bounds, config=config, chunk_rows=args.chunk_rows)
        else:
            points = read_points(args.input, columns, drop)
            n, d = points.values.shape
            bounds = _bounds_of(bounds_request, d)
            # The number of rows is private (add/remove-one neighbours): only the public columns.
            _status(f"read {d} columns ({', '.join(points.columns)}) from {args.input}; clustering under {under}")
            with accountant or contextlib.nullcontext():
                result = cluster(key, points.values, budget, bounds, config=config)
    for warning in caught:
        _status(f"warning: {_cli_warning(warning.message, result, budget, config)}")
    release = release_to_dict(result, budget, released_bounds(bounds, result), config, points.columns)
    seconds = time.perf_counter() - start

    text = json.dumps(release, indent=2, allow_nan=False) + "\n"
    if args.centers_csv is not None:
        write_atomically(args.centers_csv, lambda f: write_centers_csv(f, points.columns, release["centers"]))
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomically(args.out, lambda f: f.write(text))
    written = [p for p in (args.out, args.centers_csv) if p is not None]
    _status(
        f"k={release['k']} clusters; NOT PRIVATE: wall time {seconds:.1f} s (including compilation; it grows "
        "with the number of rows); "
        f"ledger total epsilon={result.ledger.total_epsilon:.6g}, "
        f"delta={result.ledger.total_delta:.3g}" + (f"; wrote {', '.join(written)}" if written else "")
    )
    return 0


def _cli_warning(message: Warning, result, budget: Budget, config: DPMConfig) -> str:
    """A warning's text for the command line: the budget warning points at ``dpm-jax plan``."""
    text = str(message)
    if isinstance(message, InsufficientBudgetWarning) and "; print(" in text:
        n, d = float(result.tree.noisy_count[1]), int(result.centers.shape[-1])
        tau = "" if config.tau_r == DPMConfig().tau_r else f" --tau-r {config.tau_r}"
        text = text.split("; print(")[0] + (
            f"; run dpm-jax plan --n {n:.0f} --d {d} --epsilon {budget.epsilon:g} --delta {budget.delta:g}{tau} "
            "for the report"
        )
    return text


def _run_plan(args: argparse.Namespace) -> int:
    """Print :func:`dpm_jax.diagnostics.plan`'s report: public numbers only, no data is read."""
    print(plan(args.n, args.d, Budget(epsilon=args.epsilon, delta=args.delta), config_from_args(args)))
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from dpm_jax.eval.datasets import synthetic_blobs
    from dpm_jax.eval.metrics import assign_to_centers, clustering_accuracy

    if args.n < 1 or args.d < 1 or args.blobs < 1:
        raise CommandError(f"--n, --d and --blobs must be >= 1, got {args.n}, {args.d}, {args.blobs}")
    delta = args.delta if args.delta is not None else 1.0 / (args.n * math.sqrt(args.n))
    budget, config = Budget(epsilon=args.epsilon, delta=delta), config_from_args(args)
    _status(f"generating {args.n} points in {args.d} dimensions around {args.blobs} blobs")
    data = synthetic_blobs(args.n, args.d, num_blobs=args.blobs, seed=args.seed)
    _status("clustering (the first call compiles, which takes a few seconds)")
    start = time.perf_counter()
    result = cluster(key_from_seed(args.seed), data.points, budget, data.bounds, config=config)
    result.k.block_until_ready()
    seconds = time.perf_counter() - start
    nearest = assign_to_centers(data.points, result.centers, result.valid).labels
    accuracy = float(clustering_accuracy(nearest, data.labels, config.max_clusters, args.blobs))
    print(f"data: {data.name}, n={args.n}, d={args.d}, {args.blobs} blobs, bounds={data.bounds}")
    print(f"budget: epsilon={budget.epsilon:g}, delta={budget.delta:.3g}")
    print(f"clusters found: k={int(result.k)} (true: {args.blobs})")
    print(f"accuracy (majority label of the nearest DP centre): {accuracy:.3f}")
    print(f"time: {seconds:.2f} s including compilation")
    print("privacy ledger:")
    print(result.ledger.table())
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    try:
        benchmark = importlib.import_module("dpm_jax.eval.benchmark")
    except ModuleNotFoundError as error:
        if error.name != "dpm_jax.eval.benchmark":
            raise
        raise CommandError(
            "the speed benchmark is not available in this installation (module dpm_jax.eval.benchmark is missing)"
        ) from None
    status = benchmark.main(list(args.bench_args))
    return 0 if status is None else int(status)


# Algorithm 2's options: they act only with --split-grid paper (the default grid is the cell grid).
ALGORITHM_2_OPTIONS = ("percentile", "sigma_step", "num_sigmas", "interval_factor", "interval_max_dims")


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    defaults = DPMConfig()
    group = parser.add_argument_group("DPM hyper-parameters (public; defaults of dpm_jax.DPMConfig)")
    paper_grid = parser.add_argument_group(
        "Algorithm 2's split interval size (public; used only with --split-grid paper)"
    )
    for name, kind, text in CONFIG_OPTIONS:
        default = getattr(defaults, name)
        (paper_grid if name in ALGORITHM_2_OPTIONS else group).add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=kind,
            default=None,
            metavar=kind.__name__.upper(),
            help=text if default is None else f"{text} (default {_shown(default)})",
        )


def _shown(default) -> str:
    if isinstance(default, tuple):
        return ",".join(format(value, "g") for value in default)
    return default if isinstance(default, str) else format(default, "g")


def _seed(text: str) -> int:
    seed = int(text)
    if not 0 <= seed < MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**32), got {seed}")
    return seed


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dpm-jax`` (sub-commands cluster, plan, demo, bench)."""
    parser = _Parser(prog=PROG, description="Differentially private clustering with DPM.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    _add_cluster_command(commands)
    _add_plan_command(commands)
    _add_demo_command(commands)
    synthesize_command.add_parser(commands, _seed).set_defaults(
        handler=lambda args: synthesize_command.run(args, _check_writable, _status, CommandError)
    )
    add_accountant_command(commands)

    bench = commands.add_parser(
        "bench", help="run the speed benchmark (arguments go to dpm_jax.eval.benchmark)", add_help=False
    )
    bench.set_defaults(handler=_run_bench)
    kmeans_command.add_parser(commands, _seed).set_defaults(
        handler=lambda args: kmeans_command.run_kmeans(args, _check_writable, _status)
    )
    return parser


def _add_cluster_command(commands) -> None:
    """``dpm-jax cluster``: a file in, the DP release out."""
    run = commands.add_parser(
        "cluster",
        help="cluster a .npy, .csv or .parquet file under (epsilon, delta)-DP",
        description="Cluster the rows of INPUT and write the DP release (centres, noisy "
        "counts, split tree, privacy ledger) as JSON to --out or stdout. A CSV has a header iff its first line "
        "has a field that is not a number; a column that looks like a row index is refused (--drop it).",
    )
    run.add_argument("input", metavar="INPUT", help="an (n, d) table: .npy, .csv (header optional), .parquet")
    run.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon > 0")
    run.add_argument(
        "--delta", type=float, required=True, help="total delta in (0, 1); well below 1/n, e.g. 1/(n sqrt n)"
    )
    bounds = run.add_mutually_exclusive_group(required=True)
    bounds.add_argument(
        "--bounds",
        nargs="+",
        action="append",
        metavar="BOUND",
        help="LO HI: public range of the data, fixed without looking at it (reading it from the data would void the "
        "privacy guarantee): once for every column, or repeated once per clustered column in order; or the "
        "word private: estimated under DP with a share of the budget (--bounds-share), its line first in "
        "the ledger",
    )
    bounds.add_argument(
        "--bounds-file", metavar="FILE", help="per-column public bounds: a line 'lo,hi' per clustered column"
    )
    run.add_argument(
        "--bounds-share",
        type=float,
        default=None,
        help="with --bounds private: the share of epsilon (and delta) spent on the bounds (default 0.1)",
    )
    run.add_argument(
        "--columns", metavar="A,B,...", help="cluster only these columns (names, or positions counting from 0)"
    )
    run.add_argument("--drop", metavar="A,B,...", help="cluster every column but these (e.g. a label column)")
    run.add_argument(
        "--accountant",
        metavar="FILE",
        help="charge this run to the total budget in FILE (dpm-jax accountant); refused, before the data is "
        "read, when the total would be exceeded",
    )
    run.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help="integer seed for a reproducible run (keep it secret); default: fresh "
        "randomness from the operating system",
    )
    run.add_argument("--out", metavar="FILE", default=None, help="write the JSON release here (default stdout)")
    run.add_argument("--centers-csv", metavar="FILE", default=None, help="also write the k centres as CSV")
    run.add_argument(
        "--stream",
        action="store_true",
        help="read .npy or .parquet in chunks (row groups) instead of loading it: for data "
        "larger than memory; the same release (dpm_jax.cluster_stream)",
    )
    run.add_argument(
        "--chunk-rows",
        type=int,
        default=DEFAULT_CHUNK_ROWS,
        help=f"rows per chunk sent to the device with --stream (default {DEFAULT_CHUNK_ROWS})",
    )
    _add_config_options(run)
    run.set_defaults(handler=_run_cluster)


def _add_plan_command(commands) -> None:
    """``dpm-jax plan``: what a budget lets DPM do at a public n (reads no data)."""
    budget_plan = commands.add_parser(
        "plan",
        help="print what a budget lets DPM do at a public size n (reads no data)",
        description="Print dpm_jax.diagnostics.plan's report: per split level the budget and the exponential "
        "mechanism's exponent scale, the balanced clusters the budget separates, how one Gaussian "
        "cluster and uniform data halt, and a recommendation. Only public numbers go in.",
    )
    budget_plan.add_argument(
        "--n", type=float, required=True, help="number of rows, declared public (or the released n~ of a run)"
    )
    budget_plan.add_argument("--d", type=int, required=True, help="number of columns")
    budget_plan.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon > 0")
    budget_plan.add_argument("--delta", type=float, required=True, help="total delta in (0, 1)")
    _add_config_options(budget_plan)
    budget_plan.set_defaults(handler=_run_plan)


def _add_demo_command(commands) -> None:
    """``dpm-jax demo``: synthetic blobs clustered, with k, accuracy and the ledger."""
    demo = commands.add_parser("demo", help="cluster synthetic Gaussian blobs and print k, accuracy and the ledger")
    demo.add_argument("--n", type=int, default=100_000, help="number of points (default 100000, the paper's Synth-10d)")
    demo.add_argument("--d", type=int, default=10, help="dimensions (default 10)")
    demo.add_argument("--blobs", type=int, default=64, help="number of blobs (default 64)")
    demo.add_argument("--seed", type=_seed, default=0, help="seed of the data and of the noise (default 0)")
    demo.add_argument("--epsilon", type=float, default=1.0, help="total epsilon (default 1)")
    demo.add_argument("--delta", type=float, default=None, help="total delta (default 1/(n sqrt n))")
    _add_config_options(demo)
    demo.set_defaults(handler=_run_demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dpm-jax`` and ``python -m dpm_jax``; returns the exit status."""
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if args.command == "bench":
            args.bench_args = extra  # every argument after "bench" belongs to the benchmark
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return args.handler(args)
    except CommandError as error:
        status, message = error.status, str(error)
    except (OSError, ValueError, TypeError, BudgetExceededError) as error:
        status, message = 1, str(error)
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return status
