"""Reading the data a user clusters from the command line: ``.npy``, ``.csv`` and ``.parquet``.

:func:`stream_points` opens ``.npy`` and ``.parquet`` files for ``dpm_jax.cluster_stream``
instead (``dpm-jax cluster --stream``): a memmap, or the Parquet file's row groups one at
a time, read again in every pass.

Every reader returns the values as an (n, d) float64 table with column names and
rejects what DPM cannot use (non-numeric columns, missing, NaN or infinite values,
tables that are not 2-D) with a message naming the file, row and column.
"""

from __future__ import annotations

import csv
import os
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Points", "read_points", "StreamedPoints", "stream_points"]


class Points(NamedTuple):
    """Points read from a file and the names of their columns."""

    values: np.ndarray  # (n, d) float64
    columns: tuple[str, ...]


def read_points(path: str) -> Points:
    """Read an (n, d) numeric table from ``.npy``, ``.csv`` (header optional) or ``.parquet``.

    Raises:
      OSError: the file cannot be read.
      ValueError: unknown format, a non-numeric, missing, NaN or infinite value, or not
        a 2-D table.
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
    finite = np.isfinite(points.values)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(
            f"{path}: data row {row} (counting from 0), column {points.columns[column]!r} "
            f"is {points.values[row, column]}; remove or impute missing and infinite "
            "values before clustering"
        )
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
    """Comma-separated numbers; the first row is a header iff one of its fields is not a number."""
    with open(path, newline="") as file:
        first_row = next(csv.reader(file), None)
    if first_row is None:
        raise ValueError(f"{path} is empty")
    has_header = not all(_is_number(field) for field in first_row)
    try:
        values = np.loadtxt(path, delimiter=",", skiprows=int(has_header), ndmin=2, dtype=np.float64)
    except ValueError as error:  # numpy names the row and column of a bad field
        raise ValueError(f"{path}: {error}".rstrip(".") + " (all columns must be numeric)") from None
    columns = tuple(name.strip() for name in first_row) if has_header else _default_columns(len(first_row))
    return Points(values, columns)


def _read_parquet(path: str) -> Points:
    parquet, arrow_types = _pyarrow()
    table = parquet.read_table(path)
    for field in table.schema:
        if not (arrow_types.is_integer(field.type) or arrow_types.is_floating(field.type)):
            raise ValueError(f"{path}: column {field.name!r} has type {field.type}; all columns must be numeric")
        if table.column(field.name).null_count:
            raise ValueError(
                f"{path}: column {field.name!r} has missing values; remove or impute them before clustering"
            )
    values = (
        np.column_stack([table.column(name).to_numpy().astype(np.float64) for name in table.column_names])
        if table.num_columns
        else np.empty((0, 0))
    )
    return Points(values, tuple(table.column_names))


class StreamedPoints(NamedTuple):
    """A file opened for :func:`dpm_jax.cluster_stream` and the names of its columns."""

    data: Any  # a .npy path, or a function returning an iterator over the row groups
    columns: tuple[str, ...]


def stream_points(path: str) -> StreamedPoints:
    """Open ``.npy`` (a memmap in every pass) or ``.parquet`` (row group by row group) for streaming.

    The schema is checked here (numeric columns, a 2-D array); the values (NaN, missing)
    are checked by ``cluster_stream``'s first pass, which names the chunk (the row group).
    """
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".npy", ".parquet"):
        raise ValueError(
            f"--stream reads .npy and .parquet files, not {extension or '(none)'!r} ({path}): "
            "convert the data, or cluster it in memory without --stream"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file not found: {path}")
    if extension == ".npy":
        values = np.load(path, mmap_mode="r", allow_pickle=False)
        if values.ndim != 2 or not (
            np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)
        ):
            raise ValueError(
                f"{path} must hold an (n, d) array of numbers, got shape {values.shape} and dtype {values.dtype}"
            )
        return StreamedPoints(path, _default_columns(values.shape[1]))
    parquet, arrow_types = _pyarrow()
    schema = parquet.ParquetFile(path).schema_arrow
    for field in schema:
        if not (arrow_types.is_integer(field.type) or arrow_types.is_floating(field.type)):
            raise ValueError(f"{path}: column {field.name!r} has type {field.type}; all columns must be numeric")

    def row_groups():
        file = parquet.ParquetFile(path)  # opened again in every pass: a removed file is an error
        for index in range(file.num_row_groups):
            table = file.read_row_group(index)
            # Missing values become NaN, which cluster_stream reports with the row group's index.
            yield np.column_stack(
                [table.column(name).to_numpy(zero_copy_only=False).astype(np.float64) for name in table.column_names]
            )

    return StreamedPoints(row_groups, tuple(schema.names))


def _pyarrow():
    try:
        import pyarrow.parquet as parquet
        import pyarrow.types as arrow_types
    except ImportError:
        raise ValueError(
            "reading .parquet files needs pyarrow: pip install pyarrow (or convert the data to .npy or .csv)"
        ) from None
    return parquet, arrow_types
