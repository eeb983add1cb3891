"""Reading Parquet files row group by row group: the one reader of :func:`dpm_jax.cluster_stream`
(a ``.parquet`` path) and of ``dpm-jax cluster --stream``.

pyarrow is needed only here (a dev extra, not a dependency): a clear error says so.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

__all__ = ["pyarrow_modules", "parquet_columns", "parquet_row_groups"]


def pyarrow_modules():
    """(pyarrow.parquet, pyarrow.types), or a ValueError saying how to install pyarrow."""
    try:
        import pyarrow.parquet as parquet
        import pyarrow.types as arrow_types
    except ImportError:
        raise ValueError(
            "reading .parquet files needs pyarrow: pip install pyarrow (or convert the data to .npy or .csv)"
        ) from None
    return parquet, arrow_types


def parquet_columns(path: str) -> tuple[str, ...]:
    """The column names of a Parquet file; a ValueError naming the first non-numeric column."""
    parquet, arrow_types = pyarrow_modules()
    schema = parquet.ParquetFile(path).schema_arrow
    for field in schema:
        if not (arrow_types.is_integer(field.type) or arrow_types.is_floating(field.type)):
            raise ValueError(f"{path}: column {field.name!r} has type {field.type}; all columns must be numeric")
    return tuple(schema.names)


def parquet_row_groups(path: str, columns: Sequence[str] | None = None) -> Callable[[], Iterator[np.ndarray]]:
    """A function returning a fresh iterator over the row groups of ``path`` as (rows, d) float64 arrays
    (the ``columns`` given, default all, in that order); the file is opened again in every pass, so a
    removed file is an error. Missing values become NaN, which ``cluster_stream`` reports."""
    names = tuple(columns) if columns is not None else parquet_columns(path)
    parquet, _ = pyarrow_modules()

    def row_groups() -> Iterator[np.ndarray]:
        file = parquet.ParquetFile(path)
        for index in range(file.num_row_groups):
            table = file.read_row_group(index, columns=list(names))
            yield np.column_stack(
                [table.column(name).to_numpy(zero_copy_only=False).astype(np.float64) for name in names]
            )

    return row_groups
