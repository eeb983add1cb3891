"""Reading the data a user clusters from the command line: ``.npy``, ``.csv`` and ``.parquet``.

Every reader returns the values as an (n, d) float64 table with column names and
rejects what DPM cannot use (non-numeric columns, missing, NaN or infinite values,
tables that are not 2-D) with a message naming the file, row and column.
"""

from __future__ import annotations

import csv
import os
from typing import NamedTuple

import numpy as np

__all__ = ["Points", "read_points"]


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
        raise ValueError(f"unsupported input format {extension or '(none)'!r} of {path}: "
                         "use .npy, .csv or .parquet")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file not found: {path}")
    points = readers[extension](path)
    if points.values.ndim != 2 or 0 in points.values.shape:
        raise ValueError(f"{path} must hold a non-empty 2-D table (n points x d columns), "
                         f"got shape {points.values.shape}")
    finite = np.isfinite(points.values)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(f"{path}: data row {row} (counting from 0), column {points.columns[column]!r} "
                         f"is {points.values[row, column]}; remove or impute missing and infinite "
                         "values before clustering")
    return points


def _default_columns(d: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(d))


def _read_npy(path: str) -> Points:
    values = np.load(path, allow_pickle=False)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"{path} must hold numbers, got dtype {values.dtype}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        raise ValueError(f"{path} holds a 1-D array of shape {values.shape}; "
                         "save the data as (n, d), e.g. X.reshape(-1, 1) for one column")
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
        values = np.loadtxt(path, delimiter=",", skiprows=int(has_header), ndmin=2,
                            dtype=np.float64)
    except ValueError as error:  # numpy names the row and column of a bad field
        raise ValueError(f"{path}: {error}".rstrip(".") + " (all columns must be numeric)") from None
    columns = tuple(name.strip() for name in first_row) if has_header else _default_columns(len(first_row))
    return Points(values, columns)


def _read_parquet(path: str) -> Points:
    try:
        import pyarrow.parquet as parquet
        import pyarrow.types as arrow_types
    except ImportError:
        raise ValueError("reading .parquet files needs pyarrow: pip install pyarrow "
                         "(or convert the data to .npy or .csv)") from None
    table = parquet.read_table(path)
    for field in table.schema:
        if not (arrow_types.is_integer(field.type) or arrow_types.is_floating(field.type)):
            raise ValueError(f"{path}: column {field.name!r} has type {field.type}; "
                             "all columns must be numeric")
        if table.column(field.name).null_count:
            raise ValueError(f"{path}: column {field.name!r} has missing values; "
                             "remove or impute them before clustering")
    values = np.column_stack([table.column(name).to_numpy().astype(np.float64)
                              for name in table.column_names]) if table.num_columns else np.empty((0, 0))
    return Points(values, tuple(table.column_names))
