"""``dpm-jax synthesize``: M synthetic rows of a table under (epsilon, delta)-DP, as CSV or .npy.

    dpm-jax synthesize data.csv --epsilon 1 --delta 1e-6 --bounds -100 100 --rows 10000 --out synth.csv
    dpm-jax synthesize data.csv --epsilon 1 --delta 1e-6 --bounds private --rows 10000 --out synth.csv

The rows are drawn from the weighted cells of :func:`dpm_jax.synthesize` (a cell by its
noisy count, a uniform point inside it): post-processing of the DP release, so they cost
nothing beyond its ledger, which goes to stderr (and to ``--ledger FILE`` as JSON).
"""

from __future__ import annotations

import argparse
import csv
import json

import jax
import numpy as np

from dpm_jax.bounds import PrivateBounds
from dpm_jax.cli.bounds_option import released_bounds
from dpm_jax.cli.readers import read_points
from dpm_jax.bounds import SYNTHESIS_DEFAULT
from dpm_jax.cli.run_options import add_run_command, budget_and_bounds
from dpm_jax.files import write_atomically
from dpm_jax.keys import key_from_seed
from dpm_jax.synth.api import synthesize
from dpm_jax.synth.plan import DEFAULT_MAX_CELLS, DEFAULT_MAX_ROWS, METHODS, SynthConfig

__all__ = ["add_parser"]

_FORMATS = (".csv", ".npy")


def _write_rows(path: str, columns, rows: np.ndarray) -> None:
    if path.lower().endswith(".npy"):
        write_atomically(path, lambda f: np.save(f.buffer, rows))  # the binary layer of the text file
        return

    def write(f):
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows([[repr(float(v)) for v in row] for row in rows])

    write_atomically(path, write)


def run(args: argparse.Namespace, check_writable, status, error) -> int:
    """The command: validate everything, synthesize, sample, write."""
    budget, bounds = budget_and_bounds(args)
    if args.rows < 1:
        raise error(f"--rows must be >= 1, got {args.rows}")
    try:
        config = SynthConfig(max_rows=args.max_rows, max_cells=args.max_cells)
    except ValueError as problem:
        raise error(f"--max-rows / --max-cells: {problem}") from None
    if not args.out.lower().endswith(_FORMATS):
        raise error(f"--out must end in .csv or .npy, got {args.out}")
    check_writable(args.out)
    check_writable(args.ledger)
    points = read_points(args.input)
    key = key_from_seed(args.seed)
    # the columns only: the row count is private (add/remove-one neighbours), stderr is an output too
    status(f"read {points.values.shape[1]} columns from {args.input}; method {args.method}")
    result = synthesize(key, points.values, budget, bounds, method=args.method, config=config)
    rows = np.asarray(result.sample(jax.random.fold_in(key, 1 << 20), args.rows), np.float64)
    _write_rows(args.out, points.columns, rows)
    ledger = result.ledger
    if args.ledger is not None:
        text = json.dumps(ledger.to_dicts(), indent=2) + "\n"
        write_atomically(args.ledger, lambda f: f.write(text))
    if isinstance(bounds, PrivateBounds):
        lower, upper = released_bounds(bounds, result)
        status(f"DP bounds (in the ledger's first line): lower {lower}, upper {upper}")
    status(
        f"wrote {args.rows} synthetic rows to {args.out}; {int(np.asarray(result.valid).sum())} cells; "
        f"ledger total epsilon={ledger.total_epsilon:.6g}, delta={ledger.total_delta:.3g}"
    )
    return 0


def add_parser(commands, seed_type) -> argparse.ArgumentParser:
    """Register ``synthesize`` on the sub-command set ``commands``."""
    parser = add_run_command(
        commands,
        "synthesize",
        seed_type,
        help="write M DP synthetic rows of a .npy, .csv or .parquet table (CSV or .npy)",
        description="Release a DP weighted synthetic set of INPUT (dpm_jax.synthesize) and write --rows rows "
        "drawn from it to --out (.csv or .npy by its suffix).",
        private_default=SYNTHESIS_DEFAULT,
    )
    parser.add_argument("--rows", type=int, required=True, help="number of synthetic rows M")
    parser.add_argument("--out", metavar="FILE", required=True, help="output file, .csv or .npy")
    parser.add_argument(
        "--method", choices=METHODS, default="kdtree", help="grid, kdtree (default), privtree, refine or dpm"
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        help=f"public capacity: the most rows the input may have, stated before seeing it (the thresholds "
        f"are computed from it, never from the input's row count, which is private); default {DEFAULT_MAX_ROWS}",
    )
    parser.add_argument(
        "--max-cells",
        type=int,
        default=DEFAULT_MAX_CELLS,
        help="public: the most cells the release keeps (the heaviest, with a warning past it); the rows are "
        f"drawn from them; default {DEFAULT_MAX_CELLS}",
    )
    parser.add_argument("--ledger", metavar="FILE", default=None, help="also write the ledger as JSON")
    return parser
