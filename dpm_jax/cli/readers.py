"""Reading the data a user clusters from the command line: ``.npy``, ``.csv`` and ``.parquet``.

:func:`stream_points` opens ``.npy`` and ``.parquet`` files for ``dpm_jax.cluster_stream``
instead (``dpm-jax cluster --stream``): a memmap, or the Parquet file's row groups one at
a time (:mod:`dpm_jax.tables`, the reader ``cluster_stream`` uses for a ``.parquet`` path).

Every reader returns the values as an (n, d) float64 table with column names and
rejects what DPM cannot use (non-numeric columns, missing, NaN or infinite values,
tables that are not 2-D) with a message naming the file, the line or row and the column.
Positions: a CSV's *line* counts from 1, as an editor shows it; rows of .npy and .parquet
data and column *positions* count from 0, as NumPy and pandas do.

Columns: a CSV has a header iff a field of its first line is not a number. ``columns``
keeps, ``drop`` removes columns by name or position. A column that is obviously a row index
(named ``""``, ``"Unnamed: 0"``, ``"index"`` or ``"__index_level_0__"``, or holding exactly
0, 1, 2, ... or 1, 2, 3, ...: pandas' ``to_csv`` writes one) is refused unless ``columns``
names it: it would be clustered as a feature.
"""

from __future__ import annotations

import csv
import os
from typing import Any, NamedTuple, Sequence

import numpy as np

from dpm_jax.tables import parquet_columns, parquet_row_groups, pyarrow_modules

__all__ = ["Points", "read_points", "StreamedPoints", "stream_points", "select_columns"]

INDEX_NAMES = ("", "unnamed: 0", "index", "__index_level_0__")


class Points(NamedTuple):
    """Points read from a file and the names of their columns."""

    values: np.ndarray  # (n, d) float64
    columns: tuple[str, ...]


def select_columns(names: Sequence[str], columns=None, drop=None, path: str = "the data") -> list[int]:
    """Positions of the columns to cluster: ``columns`` (names or positions from 0) in that order, else
    every column but ``drop``; a ValueError naming an unknown column."""

    def position(spec: str) -> int:
        if spec in names:
            return list(names).index(spec)
        if spec.lstrip("-").isdigit() and 0 <= int(spec) < len(names):
            return int(spec)
        raise ValueError(
            f"{path} has no column {spec!r}: its columns are {', '.join(map(repr, names))} "
            f"(or positions 0..{len(names) - 1})"
        )

    if columns:
        return [position(spec) for spec in columns]
    dropped = {position(spec) for spec in drop or ()}
    kept = [i for i in range(len(names)) if i not in dropped]
    if not kept:
        raise ValueError(f"--drop removes every column of {path}")
    return kept


def _refuse_index_columns(values: np.ndarray, names: Sequence[str], path: str, explicit: bool) -> None:
    if explicit:
        return
    n = values.shape[0]
    for j, name in enumerate(names):
        by_name = name.strip().lower() in INDEX_NAMES
        if by_name or (n >= 3 and _is_counter(values[:, j])):
            first = ", ".join(str(int(v)) for v in values[:3, j])
            reason = "its name" if by_name else f"its values are {first}, ..."
            raise ValueError(
                f"{path}: column {name!r} (position {j}) looks like a row index ({reason}); it would be "
                f"clustered as a feature. Drop it with --drop {j} (pandas: to_csv(index=False)), or name the "
                "columns to cluster with --columns"
            )


def _is_counter(column: np.ndarray) -> bool:
    n = column.shape[0]
    return bool(np.array_equal(column, np.arange(n)) or np.array_equal(column, np.arange(1, n + 1)))


def read_points(path: str, columns: Sequence[str] | None = None, drop: Sequence[str] | None = None) -> Points:
    """Read an (n, d) numeric table from ``.npy``, ``.csv`` (header detected) or ``.parquet``.

    ``columns``/``drop``: module docstring.

    Raises:
      OSError: the file cannot be read.
      ValueError: unknown format, a non-numeric, missing, NaN or infinite value, an index
        column, an unknown column, or not a 2-D table.
    """
    extension = os.path.splitext(path)[1].lower()
    readers = {".npy": _read_npy, ".csv": _read_csv, ".parquet": _read_parquet}
    if extension not in readers:
        raise ValueError(f"unsupported input format {extension or '(none)'!r} of {path}: use .npy, .csv or .parquet")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file not found: {path}")
    points = readers[extension](path)
    if points.values.ndim != 2 or 0 in points.values.shape:
        raise ValueError(
            f"{path} must hold a non-empty 2-D table (n points x d columns), got shape {points.values.shape}"
        )
    kept = select_columns(points.columns, columns, drop, path)
    points = Points(points.values[:, kept], tuple(points.columns[i] for i in kept))
    finite = np.isfinite(points.values)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(
            f"{path}: data row {row} (counting from 0), column {points.columns[column]!r} "
            f"is {points.values[row, column]}; remove or impute missing and infinite "
            "values before clustering"
        )
    _refuse_index_columns(points.values, points.columns, path, explicit=bool(columns))
    return points


def _default_columns(d: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(d))


def _read_npy(path: str) -> Points:
    values = np.load(path, allow_pickle=False)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"{path} must hold numbers, got dtype {values.dtype}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        raise ValueError(
            f"{path} holds a 1-D array of shape {values.shape}; "
            "save the data as (n, d), e.g. X.reshape(-1, 1) for one column"
        )
    return Points(values, _default_columns(values.shape[1]) if values.ndim == 2 else ())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_csv(path: str) -> Points:
    """Comma-separated numbers; the first line is a header iff one of its fields is not a number."""
    with open(path, newline="") as file:
        first_row = next(csv.reader(file), None)
    if first_row is None:
        raise ValueError(f"{path} is empty")
    has_header = not all(_is_number(field) for field in first_row)
    columns = tuple(name.strip() for name in first_row) if has_header else _default_columns(len(first_row))
    try:
        values = np.loadtxt(path, delimiter=",", skiprows=int(has_header), ndmin=2, dtype=np.float64)
    except ValueError:
        raise ValueError(_first_bad_field(path, columns)) from None
    return Points(values, columns)


def _first_bad_field(path: str, columns: Sequence[str]) -> str:
    """The message for the first field of a CSV that is not a number (line from 1, column by name)."""
    with open(path, newline="") as file:
        for line, row in enumerate(csv.reader(file), start=1):
            if line == 1 and not all(_is_number(field) for field in row):
                continue  # the header
            if len(row) != len(columns):
                return f"{path}: line {line} has {len(row)} fields, the first line has {len(columns)}"
            for j, field in enumerate(row):
                if not _is_number(field):
                    what = "is empty (a missing value)" if not field.strip() else f"is {field!r}, not a number"
                    return (
                        f"{path}: line {line}, column {columns[j]!r} (position {j}) {what}; all columns must "
                        "be numeric (drop a column with --drop, impute missing values)"
                    )
    return f"{path}: cannot be read as a table of numbers"


def _read_parquet(path: str) -> Points:
    parquet, _ = pyarrow_modules()
    names = parquet_columns(path)
    table = parquet.read_table(path)
    for name in names:
        if table.column(name).null_count:
            raise ValueError(f"{path}: column {name!r} has missing values; remove or impute them before clustering")
    values = (
        np.column_stack([table.column(name).to_numpy().astype(np.float64) for name in names])
        if names
        else np.empty((0, 0))
    )
    return Points(values, names)


class StreamedPoints(NamedTuple):
    """A file opened for :func:`dpm_jax.cluster_stream` and the names of its columns."""

    data: Any  # a .npy path, or a function returning an iterator over the chunks
    columns: tuple[str, ...]


def stream_points(path: str, columns: Sequence[str] | None = None, drop: Sequence[str] | None = None) -> StreamedPoints:
    """Open ``.npy`` (read in chunks in every pass) or ``.parquet`` (row group by row group) for streaming.

    The schema is checked here (numeric columns, a 2-D array; index columns by name only: the
    values are not read twice); the values (NaN, missing) are checked by ``cluster_stream``'s
    first pass, which names the chunk (the row group).
    """
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".npy", ".parquet"):
        raise ValueError(
            f"--stream reads .npy and .parquet files, not {extension or '(none)'!r} ({path}): "
            "convert the data, or cluster it in memory without --stream"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file not found: {path}")
    if extension == ".parquet":
        names = parquet_columns(path)
        kept = tuple(names[i] for i in select_columns(names, columns, drop, path))
        _refuse_index_columns(np.empty((0, len(kept))), kept, path, explicit=bool(columns))
        return StreamedPoints(parquet_row_groups(path, kept), kept)
    values = np.load(path, mmap_mode="r", allow_pickle=False)
    if values.ndim != 2 or not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(
            f"{path} must hold an (n, d) array of numbers, got shape {values.shape} and dtype {values.dtype}"
        )
    names = _default_columns(values.shape[1])
    kept = select_columns(names, columns, drop, path)
    if kept == list(range(len(names))):
        return StreamedPoints(path, names)
    chunk_rows = 2**16
    chunks = (
        lambda: (  # a fresh memmap per pass
            np.asarray(part[:, kept])
            for memmap in [np.load(path, mmap_mode="r", allow_pickle=False)]
            for part in (memmap[i : i + chunk_rows] for i in range(0, memmap.shape[0], chunk_rows))
        )
    )
    return StreamedPoints(chunks, tuple(names[i] for i in kept))
