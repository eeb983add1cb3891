"""Out-of-core DPM: :func:`cluster_stream` streams chunks of rows through the device, level by level.

The DPM paper ("DPM: Clustering Sensitive Data through Separation", Algorithm 1) reads
the data only through reductions: the root count, the gap counts of Algorithm 2 (the
paper grid only), per level the half-bin counts of every node and the sizes of its
children, and the leaf sums. All of them are exact integers (:mod:`dpm_jax.exact`), so
they can be accumulated chunk by chunk, and the totals, hence every mechanism's input
and output, are those of :func:`dpm_jax.cluster` on the whole array: with the same key
the release is bit-identical (tests/test_stream.py). The mechanisms, their key streams
and the ledger are the in-memory path's own functions, called with the same arguments.

The steps before the levels are the in-memory run's (:func:`dpm_jax.api.start_levels`, with
Algorithm 2 on sorted columns); the levels and the leaf sums are passes over the chunks
(:mod:`dpm_jax.tree_passes`, every step the in-memory tree's). This module holds the chunk
source and the passes. No per-point state is kept between passes, so memory is bounded by
the chunk size and the tree. The exception to the bounded
memory is Algorithm 2 (the paper grid only), the one step that is not a
reduction (Section 3.5): it sorts each dimension, so it holds one quantised column of
all n points at a time (4 n bytes, as many columns per pass as fit in ``column_bytes``),
sorted on the host; the gap histogram of the sorted column is accumulated in blocks (a
sum of exact counts, the same integers).

Passes over the data (each reads every chunk): one to validate (before any noise is
drawn), ceil(d' / columns per pass) for Algorithm 2 (none on the cell grid), one for the
root's histogram, one per tree level (its children's sizes and, counting every child as
if its parent were split, the next level's histogram on the children's cells, of which
the rows of children that are not nodes are then zeroed: the same counts), one for the
leaf sums: P + 3 on the cell grid, P + 4 on the paper grid when the columns fit, P =
``config.padded_depth`` (under ``tau_r="auto"`` the levels from the chosen depth on split
nothing, but still take their pass); under private bounds one more, for the bounds' histograms.

Privacy: the same as :func:`dpm_jax.cluster` (docs/privacy.md), as the same
statistics enter the same mechanisms. The chunking is not released and does not
change any statistic. ``labels_nonprivate`` is not computed (it would be n numbers);
label points with the released tree or the nearest DP centre.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import bounds as bounds_lib
from dpm_jax import exact
from dpm_jax._arrays import to_unit_range
from dpm_jax.api import (
    MAX_POINTS,
    ClusterResult,
    cluster_result,
    em_table_on_device,
    gaussian_thresholds_on_device,
    public_bounds,
    validate_key,
    within_float32,
    plan_run,
    released_arrays,
    start_levels,
)
from dpm_jax.averaging import centers_from_sums
from dpm_jax.cache import library_programs
from dpm_jax.entry import entry_point
from dpm_jax.tables import parquet_row_groups
from dpm_jax.budget import Budget, validate_budget_and_config
from dpm_jax.config import DPMConfig
from dpm_jax.interval import (
    counts_from_gap_histogram,
    first_gap_threshold,
    gap_histogram,
    interval_dimensions,
    quantised,
    select_interval_size,
)
from dpm_jax.keys import derive_key
from dpm_jax.tree import PublicInputs
from dpm_jax.tree_passes import leaf_sums_over_passes, levels_over_passes

__all__ = ["cluster_stream", "ChunkError", "DEFAULT_CHUNK_ROWS"]

DEFAULT_CHUNK_ROWS = 2**20
_GAP_BLOCK = 2**20  # sorted values per gap-histogram block: fixed, so the program's shape never holds n
_COLUMN_BYTES = 2**30


class ChunkError(ValueError):
    """A chunk of the data is bad or unreadable; the message names the chunk and the pass."""


class _Chunks:
    """The data as passes over chunks of rows, each split into pieces of at most ``chunk_rows``.

    Accepts a 2-D array (NumPy, memmap, anything array-like), a ``.npy`` path (read chunk
    by chunk, opened again in every pass, so a file removed mid-run is an error), a ``.parquet``
    path (row group by row group, :func:`dpm_jax.tables.parquet_row_groups`), a sequence of
    2-D arrays, or a factory: a function returning a fresh iterable of chunks per pass.
    """

    def __init__(self, data: Any, chunk_rows: int):
        self.chunk_rows = chunk_rows
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            self.describe = f"file {path!r}"
            parquet = path.lower().endswith(".parquet")
            self._open = (lambda: parquet_row_groups(path)()) if parquet else lambda: _npy_chunks(path, chunk_rows)
        elif callable(data):
            self.describe = "the chunk factory"
            self._open = data
        elif hasattr(data, "shape") and hasattr(data, "dtype"):
            self.describe = "the array"
            self._open = lambda: [data]
        elif isinstance(data, (list, tuple)):
            self.describe = "the sequence of chunks"
            self._open = lambda: data
        else:
            raise TypeError(
                f"data must be a 2-D array, a .npy path, a sequence of 2-D arrays or a function "
                f"returning an iterable of chunks, got {type(data).__name__}; a one-shot iterator "
                "cannot be read once per pass: wrap it in a function that recreates it"
            )

    def chunks(self, pass_name: str) -> Iterator[tuple[int, Any]]:
        """(index, chunk) of one pass; a failure of the source names the chunk and the pass."""
        index = 0  # the chunk being read: a failure of the source names it
        try:
            for chunk in iter(self._open()):
                yield index, chunk
                index += 1
        except ChunkError:
            raise
        except Exception as error:  # the source's own failure (a file removed, a reader error)
            raise ChunkError(
                f"reading chunk {index} of {self.describe} failed in pass {pass_name!r}: "
                f"{type(error).__name__}: {error}"
            ) from error

    def pieces(self, pass_name: str, expected_rows: list[int] | None = None) -> Iterator[tuple[int, np.ndarray, int]]:
        """(chunk index, float32 piece padded to ``chunk_rows`` rows, number of real rows)."""
        seen = 0
        for index, chunk in self.chunks(pass_name):
            rows = _check_chunk(chunk, index, self.d, pass_name)
            if expected_rows is not None and (index >= len(expected_rows) or rows != expected_rows[index]):
                raise ChunkError(
                    f"chunk {index} of {self.describe} changed between passes (pass {pass_name!r}): "
                    "the data must not change while it is clustered"
                )
            seen += 1
            for start in range(0, rows, self.chunk_rows):
                stop = min(rows, start + self.chunk_rows)
                # A fresh buffer per piece: the device may use it without a copy while the
                # host reads the next piece (asynchronous dispatch), so it is never reused.
                buffer = np.zeros((self.chunk_rows, self.d), np.float32)
                buffer[: stop - start] = within_float32(np.asarray(chunk[start:stop]))
                yield index, buffer, stop - start
        if expected_rows is not None and seen != len(expected_rows):
            raise ChunkError(
                f"{self.describe} yielded {seen} chunks in pass {pass_name!r} but "
                f"{len(expected_rows)} in the first: the data must not change while it is clustered"
            )

    def survey(self) -> list[int]:
        """The validation pass (before any noise is drawn): shapes, dtypes, finiteness; rows per chunk."""
        rows, self.d = [], None
        for index, chunk in self.chunks("validation"):
            if self.d is None:
                shape = getattr(chunk, "shape", None)
                if shape is None or len(shape) != 2 or shape[1] == 0:
                    raise ChunkError(
                        f"chunk {index} of {self.describe} must have shape (rows, d) with d >= 1, got {shape}"
                    )
                self.d = int(shape[1])
            rows.append(_check_chunk(chunk, index, self.d, "validation", finite_rows=self.chunk_rows))
        if not rows:
            raise ChunkError(f"{self.describe} yielded no chunks: there is no data to cluster")
        if sum(rows) == 0:
            raise ChunkError(f"{self.describe} holds no rows: there is no data to cluster")
        if sum(rows) > MAX_POINTS:
            raise ChunkError(f"{self.describe} holds {sum(rows)} rows; at most {MAX_POINTS} are supported")
        return rows


def _npy_chunks(path: str, rows_per_chunk: int) -> Iterator[np.ndarray]:
    """The rows of a ``.npy`` file, ``rows_per_chunk`` at a time, read (not mapped) from an open file.

    Reading keeps the resident memory at one chunk; a memory map would keep every page
    it touched resident until the kernel needs it back (a pass over a 4 GB file would
    count 4 GB). The file is opened again in every pass, so a removed file is an error.
    """
    if not path.endswith(".npy"):
        raise ChunkError(f"{path!r}: only .npy and .parquet files are read directly; pass other formats as chunks")
    with open(path, "rb") as file:
        version = np.lib.format.read_magic(file)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = header(file)
        if len(shape) != 2 or fortran_order or dtype.hasobject:
            raise ChunkError(
                f"{path!r} must hold a C-ordered (n, d) numeric array, got shape {shape}, "
                f"dtype {dtype}{', Fortran order' if fortran_order else ''}"
            )
        for start in range(0, shape[0], rows_per_chunk):
            rows = min(rows_per_chunk, shape[0] - start)
            chunk = np.fromfile(file, dtype=dtype, count=rows * shape[1])
            if chunk.size != rows * shape[1]:
                raise ChunkError(
                    f"{path!r} ends after {start + chunk.size // max(shape[1], 1)} of its "
                    f"{shape[0]} rows: the file is truncated"
                )
            yield chunk.reshape(rows, shape[1])


def _check_chunk(chunk, index: int, d: int, pass_name: str, finite_rows: int = 0) -> int:
    """The chunk's row count after checking its shape and dtype (and, with ``finite_rows``, that its
    values are finite, that many rows at a time: a memmap is never read whole)."""
    shape, dtype = getattr(chunk, "shape", None), getattr(chunk, "dtype", None)
    if shape is None or len(shape) != 2:
        raise ChunkError(f"chunk {index} must be a 2-D array (rows, d), got shape {shape} in pass {pass_name!r}")
    if shape[1] != d:
        raise ChunkError(f"chunk {index} has {shape[1]} columns, the first chunk has {d} (pass {pass_name!r})")
    if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)) or np.issubdtype(dtype, np.bool_):
        raise ChunkError(f"chunk {index} must hold real numbers, got dtype {dtype}")
    for start in range(0, shape[0] if finite_rows else 0, max(finite_rows, 1)):
        bad = ~np.isfinite(np.asarray(chunk[start : start + finite_rows]))
        if bad.any():
            row, column = np.argwhere(bad)[0]
            raise ChunkError(
                f"chunk {index} contains NaN or inf (first at row {start + row} of the chunk, "
                f"column {column}); remove or impute those values before clustering"
            )
    return int(shape[0])


@entry_point("cluster_stream")  # accountant, first-call message, 32-bit engine (dpm_jax.entry)
@library_programs()  # the compilation cache holds the library's programs only (dpm_jax.cache)
def cluster_stream(
    key: jax.Array,
    data: Any,
    budget: Budget,
    bounds=None,
    *,
    config: DPMConfig = DPMConfig(),
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    column_bytes: int = _COLUMN_BYTES,
    progress: bool | None = None,
) -> ClusterResult:
    """:func:`dpm_jax.cluster` on data read in chunks (out of core); the same release for the same key.

    Args:
      key, budget, bounds, config: as for :func:`dpm_jax.cluster`; with ``tau_r="auto"`` the
        depth's noisy count (:func:`dpm_jax.depth.noisy_size`) reads the number of rows the
        validation pass counted, the exact integer ``cluster`` counts.
      data: a 2-D array or memmap, a ``.npy`` or ``.parquet`` path, a sequence of 2-D arrays (the chunks),
        or a function returning a fresh iterable of chunks (called once per pass).
      chunk_rows: rows sent to the device at once (memory: about 10 bytes per coordinate).
      column_bytes: host memory for Algorithm 2's sorted columns (4 bytes per point each).
      progress: a line per pass on stderr; default: when stderr is a terminal.

    Returns:
      A :class:`dpm_jax.api.ClusterResult` whose ``labels_nonprivate`` is None.

    Raises:
      ChunkError: a chunk has the wrong number of columns, NaN or inf, is unreadable, the
        source yields nothing or changes between passes. Shape and value errors are found
        in the first pass, before any noise is drawn; no partial result is ever returned.
    """
    validate_key(key)
    validate_budget_and_config(budget, config)
    request = bounds_lib.as_request(bounds) if bounds_lib.is_private(bounds) else None
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    source = _Chunks(data, int(chunk_rows))
    report = _progress_printer(sys.stderr.isatty() if progress is None else progress)
    report("validation")
    rows = source.survey()
    if request is not None:
        return _with_private_bounds(key, source, rows, budget, request, config, column_bytes, report)
    within = public_bounds(bounds, source.d)
    return _run(key, source, rows, budget, within, plan_run(budget, config, source.d), config, column_bytes, report)


def _run(key, source: _Chunks, rows: list[int], budget: Budget, within, run_plan, config, column_bytes, report):
    """The run on the surveyed ``source`` within validated bounds (public, or the released private ones)."""
    n = sum(rows)
    lower, upper = within
    em_table = em_table_on_device()

    def algorithm_2(interval_key, root_exact):  # line 8, from sorted columns
        public_numbers = (lower, upper, exact.to_float32(root_exact), em_table)
        return _interval_size(
            interval_key, source, rows, public_numbers, run_plan.interval, config, column_bytes, report
        )

    # tau_r="auto": the depth of a noisy count of the rows the validation pass counted, the
    # exact integer cluster counts; the run's allocation is that depth's (dpm_jax.depth).
    start = start_levels(key, jnp.int32(n), lower, upper, em_table, run_plan, config, algorithm_2)
    # Lines 10, 13-28, one pass per level (dpm_jax.tree_passes).
    accumulate = functools.partial(_accumulate, source, rows, report)
    tree, leaves, routes = levels_over_passes(start, config, accumulate)
    # Line 11: exact leaf sums, accumulated over the chunks, then the same mechanism.
    centers = _centers(key, accumulate, start.public, routes, leaves, run_plan, config)
    report(None)
    arrays = released_arrays(tree, leaves, centers, start, config)
    arrays = dict(arrays, labels_nonprivate=None)
    return cluster_result(arrays, lower, upper, run_plan, budget, config)


def _centers(key, accumulate, public: PublicInputs, routes, leaves, run_plan, config: DPMConfig):
    """Line 11: the leaves' exact code sums accumulated over the chunks, then the leaf sums' release."""
    sums = leaf_sums_over_passes(public, routes, config, run_plan.leaf_sums, accumulate)
    return _centers_from_sums(
        derive_key(key, run_plan.leaf_sums.stream),
        sums,
        leaves.noisy_count,
        leaves.valid,
        public.lower,
        public.upper,
        gaussian_thresholds_on_device(run_plan.leaf_sums.sigma),
        run_plan.leaf_sums,
    )


def _with_private_bounds(key, source: _Chunks, rows: list[int], budget: Budget, request, config, column_bytes, report):
    """``cluster_stream`` on private bounds (:mod:`dpm_jax.bounds`) after the validation pass: the run
    planned (and refused) on the rest of the budget, one pass accumulating the exact per-dimension
    histograms, the bounds release, then the run on the rest; the bounds line comes first in the ledger."""
    plan, rest = bounds_lib.split_for_bounds(budget, request, source.d)
    run_plan = plan_run(rest, config, source.d)
    report("bounds")
    counts = jnp.zeros((source.d, plan.num_buckets), jnp.int32)
    for _, piece, real in source.pieces("bounds", rows):
        counts = counts + _piece_histogram(piece, jnp.arange(source.chunk_rows) < real, plan.mantissa_bits)
    lower, upper = bounds_lib.bounds_from_counts(key, counts, plan)
    bounds_lib.check_found(lower, upper, plan)
    within = public_bounds((lower, upper), source.d)
    result = _run(key, source, rows, rest, within, run_plan, config, column_bytes, report)
    return bounds_lib.with_bounds_entry(result, plan, budget)


_piece_histogram = jax.jit(bounds_lib.histogram, static_argnums=2)


_centers_from_sums = jax.jit(centers_from_sums, static_argnames="plan")


@functools.partial(jax.jit, static_argnames=("release", "num_dims", "config"))
def _select_interval_size(key, em_table, histograms, noisy_count, *, release, num_dims: int, config: DPMConfig):
    return select_interval_size(
        key, em_table, counts_from_gap_histogram(jnp.stack(histograms)), noisy_count, release, num_dims, config
    )


def _progress_printer(enabled: bool) -> Callable[[str | None], None]:
    """One status line per pass on stderr: rewritten in place on a terminal, plain lines elsewhere
    (a log file or a notebook gets no escape codes)."""
    terminal = sys.stderr.isatty()

    def report(pass_name: str | None) -> None:
        if enabled:
            text = f"dpm_jax: pass {pass_name}" if pass_name else "dpm_jax: done"
            if terminal:
                print("\r\033[K" + text, end="" if pass_name else "\n", file=sys.stderr, flush=True)
            else:
                print(text, file=sys.stderr, flush=True)

    return report


def _accumulate(source: _Chunks, rows: list[int], report, pass_name: str, function, *args, **static):
    """The exact sum over all pieces of ``function(piece, valid, ...)`` (int32 arrays or exact Ints)."""
    report(pass_name)
    total = previous = None
    for _, piece, valid in source.pieces(pass_name, rows):
        part = function(jnp.asarray(piece), np.arange(source.chunk_rows) < valid, *args, **static)
        total = part if total is None else _add(total, part)
        # At most two pieces in flight: dispatch is asynchronous, and a reader faster than
        # the device would otherwise hold every piece it has read.
        jax.block_until_ready(previous)
        previous = total
    return total


@jax.jit
def _add(total, part):
    # Counts stay below n <= 2**31 - 1 (exact in int32); leaf sums are exact Ints.
    return jax.tree.map(
        lambda a, b: exact.add(a, b) if isinstance(a, exact.Int) else a + b,
        total,
        part,
        is_leaf=lambda x: isinstance(x, exact.Int),
    )


@functools.partial(jax.jit, static_argnames="dims")
def _quantised_columns(piece, lower, upper, *, dims: tuple[int, ...]):
    # The quantisation of dpm_jax.interval.sorted_levels, on the same scaled values.
    unit = to_unit_range(piece, lower, upper)
    return jnp.stack([quantised(unit[:, dim]) for dim in dims])


@functools.partial(jax.jit, static_argnames="num_thresholds")
def _gap_histogram_of_block(levels, real_gaps, threshold_step, *, num_thresholds: int):
    return gap_histogram(num_thresholds, levels[None], real_gaps, threshold_step)[0]


def _interval_size(
    key,
    source: _Chunks,
    rows: list[int],
    public_numbers,
    release,
    config: DPMConfig,
    column_bytes: int,
    report,
) -> jax.Array:
    """Algorithm 2 (:func:`dpm_jax.interval.estimate_split_interval_size`) with one sorted column at a time.

    ``public_numbers``: (lower, upper, the released root size n~, the EM weight table)."""
    lower, upper, root_size, em_table = public_numbers
    dims_key, select_key = jax.random.split(key)
    d = source.d
    chosen = interval_dimensions(dims_key, d, config.interval_max_dims)
    dims = list(range(d)) if chosen is None else [int(i) for i in np.asarray(chosen)]
    n = sum(rows)
    per_pass = max(1, column_bytes // (4 * n))
    step = first_gap_threshold(root_size, config)
    histograms = []
    for first in range(0, len(dims), per_pass):
        group = tuple(dims[first : first + per_pass])
        name = f"interval columns {list(group)}"
        report(name)
        columns = np.empty((len(group), n), np.int32)
        filled = 0
        for _, piece, valid in source.pieces(name, rows):
            columns[:, filled : filled + valid] = np.asarray(
                _quantised_columns(jnp.asarray(piece), lower, upper, dims=group)
            )[:, :valid]
            filled += valid
        for column in columns:
            column.sort()  # integers: the same order as XLA's sort in the in-memory path
            histograms.append(_column_gap_histogram(column, step, config.num_sigmas))
        del columns
    beta, _ = _select_interval_size(
        select_key, em_table, histograms, root_size, release=release, num_dims=len(dims), config=config
    )
    return beta


def _column_gap_histogram(column: np.ndarray, step, num_thresholds: int) -> jax.Array:
    """:func:`dpm_jax.interval.gap_histogram` of one sorted column, accumulated over blocks of gaps."""
    n = column.shape[0]
    total = jnp.zeros(num_thresholds + 2, jnp.int32)
    size = _GAP_BLOCK  # not min(_GAP_BLOCK, n - 1): the compiled program (cached on disk) would record n
    for start in range(0, max(n - 1, 0), size):
        stop = min(n, start + size + 1)  # values start..stop-1: gaps start..stop-2
        block = np.empty(size + 1, np.int32)  # fresh: the device may read it after this loop moves on
        block[: stop - start] = column[start:stop]
        block[stop - start :] = column[stop - 1]  # padding gaps are not real: bucketed past the end
        real = np.arange(size) < stop - start - 1
        previous, total = (
            total,
            total + _gap_histogram_of_block(jnp.asarray(block), jnp.asarray(real), step, num_thresholds=num_thresholds),
        )
        jax.block_until_ready(previous)  # at most two blocks in flight (see _accumulate)
    return total
