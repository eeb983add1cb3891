"""Out-of-core DPM: :func:`cluster_stream` streams chunks of rows through the device, level by level.

The DPM paper ("DPM: Clustering Sensitive Data through Separation", Algorithm 1) reads
the data only through reductions: the root count, the gap counts of Algorithm 2 (the
paper grid only), per level the half-bin counts of every node and the sizes of its
children, and the leaf sums. All of them are exact integers (:mod:`dpm_jax.exact`), so
they can be accumulated chunk by chunk, and the totals, hence every mechanism's input
and output, are those of :func:`dpm_jax.cluster` on the whole array: with the same key
the release is bit-identical (tests/test_stream.py). The mechanisms, their key streams
and the ledger are the in-memory path's own functions, called with the same arguments.

No per-point state is kept between passes: each pass routes every chunk from the root
through the splits released so far (lines 26-27), so memory is bounded by the chunk size
and the tree. Both split grids (``DPMConfig.split_grid``) bin and route a chunk with the
in-memory tree's own functions (:func:`dpm_jax.tree.level_grid`,
:func:`dpm_jax.tree.level_counts`): on the cell grid every level bins the chunk
relative to its nodes' cells, which are public (the bounds cut by the released splits)
and carried from level to level, and a point is routed at each level by its half-bin on
that level's grid, the one its node's histogram counted it in. The exception to the
bounded memory is Algorithm 2 (the paper grid only), the one step that is not a
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
nothing, but still take their pass).

Privacy: the same as :func:`dpm_jax.cluster` (docs/privacy.md), as the same
statistics enter the same mechanisms. The chunking is not released and does not
change any statistic. ``labels_nonprivate`` is not computed (it would be n numbers);
label points with the released tree or the nearest DP centre.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Iterator, NamedTuple

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
    validate_bounds,
    validate_key,
    within_float32,
    plan_run,
    released_arrays,
    root_count,
    split_bits,
    structure_noise,
)
from dpm_jax.averaging import blockwise_leaf_sums, centers_from_sums
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
    select_interval_size,
)
from dpm_jax.keys import derive_key
from dpm_jax.tree import (
    DrawnSplit,
    LevelRelease,
    assemble_tree,
    choose_splits,
    count_children,
    drawn_split,
    level_grid,
    level_counts,
    level_randomness,
    next_point_nodes,
    padded_randomness,
    level_schedule,
    point_inputs,
    release_level,
    structure_halts,
    root_cells,
    root_interval_size,
    root_node_counts,
    route_on_split_dimensions,
    tree_inputs,
)

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
    if bounds_lib.is_private(bounds):
        options = dict(config=config, chunk_rows=chunk_rows, column_bytes=column_bytes, progress=progress)
        return _with_private_bounds(key, data, budget, bounds, options)
    validate_key(key)
    validate_budget_and_config(budget, config)
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    source = _Chunks(data, int(chunk_rows))
    report = _progress_printer(sys.stderr.isatty() if progress is None else progress)
    report("validation")
    rows = source.survey()
    n, d = sum(rows), source.d
    lower, upper = (jnp.broadcast_to(jnp.asarray(b, jnp.float32), (d,)) for b in validate_bounds(bounds, d))

    run_plan = plan_run(budget, config, d)
    em_table = em_table_on_device()
    # tau_r="auto": the depth of a noisy count of the rows the validation pass counted, the
    # exact integer cluster counts; the run's allocation is that depth's (dpm_jax.depth).
    depth, noise, root_exact = _root_count(key, jnp.int32(n), run_plan=run_plan, padded=config.padded_depth)
    root_size = exact.to_float32(root_exact)
    # Line 8: Algorithm 2's release from sorted columns (the cell grid has none: it reports its root's interval size).
    if run_plan.interval is None:
        beta = _root_interval_size(lower, upper, config=config)
    else:
        beta = _interval_size(
            derive_key(key, run_plan.interval.stream),
            source,
            rows,
            (lower, upper, root_size, em_table),
            run_plan.interval,
            config,
            column_bytes,
            report,
        )
    # Lines 10, 13-28, level by level.
    public = _Public(em_table, lower, upper, root_exact, beta, depth)
    randomness = padded_randomness(
        split_bits(key, run_plan, config),
        noise,
        2 ** (config.padded_depth - 1),
        _structure_noise(key, run_plan=run_plan, depth=depth, config=config),
    )
    schedule = level_schedule(run_plan.by_depth, depth, config.padded_depth)
    releases, routes = _levels(source, rows, report, public, randomness, schedule, config)
    tree, leaves = _assemble_tree(releases, padded=config.padded_depth)
    # Line 11: exact leaf sums, accumulated over the chunks, then the same mechanism.
    centers = _centers(key, source, rows, report, public, routes, leaves, run_plan, config)
    report(None)
    arrays = dict(released_arrays(tree, leaves, centers, beta, lower, upper, depth), labels_nonprivate=None)
    return cluster_result(arrays, lower, upper, run_plan, budget, config)


def _centers(key, source: _Chunks, rows: list[int], report, public, routes, leaves, run_plan, config: DPMConfig):
    """Line 11: the leaves' exact code sums accumulated over the chunks, then the leaf sums' release."""
    sums = _accumulate(
        source,
        rows,
        "leaf sums",
        report,
        _leaf_sums_of_chunk,
        public,
        routes,
        jnp.int32(config.padded_depth),
        width=2 ** (config.padded_depth - 1),
        config=config,
        leaf_sums=run_plan.leaf_sums,
    )
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


def _levels(source: _Chunks, rows: list[int], report, public, randomness, schedule, config: DPMConfig):
    """Lines 13-28, level by level, one pass over the chunks per level: (the levels' releases, the routes).

    The released splits of the levels so far are kept padded to the tree's levels (one compiled
    program per pass kind); every step is the in-memory tree's (:func:`dpm_jax.tree.split_level`).
    """
    width = 2 ** (config.padded_depth - 1)
    cells = _root_cells(public, config=config)
    routes = _Routes(
        *(jnp.zeros((config.padded_depth, width), dtype) for dtype in (jnp.int32, jnp.int32, bool)),
        *(jnp.zeros((config.padded_depth,) + end.shape, end.dtype) for end in cells),
    )
    releases = []
    node_exact, node_active = root_node_counts(public.root_exact, width), jnp.arange(width) == 0
    counts = _accumulate(
        source,
        rows,
        "level 0 histogram",
        report,
        _root_histogram_of_chunk,
        public,
        routes,
        cells,
        width=width,
        config=config,
    )
    for level in range(config.padded_depth):
        level_bits, level_noise, level_tests = _level_randomness(randomness, jnp.int32(level), width)
        split_dim, split, halted = _choose_splits(
            public,
            jnp.int32(level),
            counts,
            node_exact,
            node_active,
            cells,
            level_bits,
            schedule.split_epsilons[level],
            schedule.count_offsets[level],
            level_tests,
            schedule.structure_epsilons[level],
            config=config,
            split_sensitivity=schedule.split_sensitivity,
        )
        # One pass: this level's children sizes and, for every child as if its parent were
        # split, the next level's histogram (rows of children not split into are zeroed below).
        last = level == config.padded_depth - 1
        child_true, next_counts = _accumulate(
            source,
            rows,
            f"level {level} children" + ("" if last else f", level {level + 1} histogram"),
            report,
            _children_of_chunk,
            public,
            routes,
            jnp.int32(level),
            cells,
            split_dim,
            split,
            width=width,
            config=config,
            next_histogram=not last,
        )
        release, child_exact = _release_level(
            public,
            jnp.int32(level),
            node_exact,
            node_active,
            split_dim,
            split.position,
            child_true,
            level_noise,
            halted,
            config=config,
        )
        releases.append(release)
        routes, node_exact, node_active, counts = _next_level(
            routes, jnp.int32(level), cells, split_dim, split, release, child_exact, next_counts, width=width
        )
        cells = (split.cell_lower, split.cell_upper)
    return releases, routes


def _with_private_bounds(key: jax.Array, data: Any, budget: Budget, bounds, options: dict) -> ClusterResult:
    """``cluster_stream`` on private bounds (:mod:`dpm_jax.bounds`): a validation pass, one pass
    accumulating the exact per-dimension histograms, the bounds release, then the run on the rest
    of the budget (which validates again); the bounds line comes first in the ledger."""
    validate_key(key)
    request = bounds_lib.as_request(bounds)
    if int(options["chunk_rows"]) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {options['chunk_rows']}")
    source = _Chunks(data, int(options["chunk_rows"]))
    rows = source.survey()
    plan, rest = bounds_lib.split_for_bounds(budget, request, source.d)
    counts = jnp.zeros((source.d, plan.num_buckets), jnp.int32)
    for _, piece, real in source.pieces("bounds", rows):
        counts = counts + _piece_histogram(piece, jnp.arange(source.chunk_rows) < real, plan.mantissa_bits)
    lower, upper = bounds_lib.bounds_from_counts(key, counts, plan)
    bounds_lib.check_found(lower, upper, plan)
    run = cluster_stream.__wrapped__  # the accountant has charged the whole budget already (dpm_jax.entry)
    return bounds_lib.with_bounds_entry(run(key, data, rest, (lower, upper), **options), plan, budget)


_piece_histogram = jax.jit(bounds_lib.histogram, static_argnums=2)


class _Public(NamedTuple):
    """The run's public values every pass reads (a pytree, an argument of the passes' programs): the
    exponential mechanism's table, the bounds, the root's noisy count n~ (exact), beta and the depth."""

    em_table: tuple
    lower: jax.Array
    upper: jax.Array
    root_exact: exact.Int
    beta: jax.Array
    depth: jax.Array


class _Routes(NamedTuple):
    """The released splits per level, (P, width) each (P the padded depth): what routes a point from the root."""

    split_dim: jax.Array
    first_right: jax.Array  # x >= s* iff the point's half-bin on its level's grid is >= this
    is_split: jax.Array
    cell_lower: jax.Array  # (P, width, d) every level's cells (cell grid), else (P, 0)
    cell_upper: jax.Array


# The node-level steps are compiled, as in the in-memory program: XLA's fused float32
# arithmetic (the released split positions, the centres) then rounds the same way.
@functools.partial(jax.jit, static_argnames=("config", "split_sensitivity"))
def _choose_splits(
    public,
    level,
    counts,
    node_exact,
    node_active,
    cells,
    level_bits,
    epsilon,
    offset,
    level_tests,
    structure_epsilon,
    *,
    config,
    split_sensitivity,
) -> tuple[jax.Array, DrawnSplit, jax.Array | None]:
    """Lines 22-25 for a level's nodes: the drawn dimensions, what the splits determine, and the
    nodes the "no structure" test halts (:func:`dpm_jax.tree.structure_halts`; None when off)."""
    inputs = _inputs(public, config)._replace(split_sensitivity=split_sensitivity)
    grid, candidate_valid = level_grid(inputs, *cells)
    split_dim, split_index = choose_splits(
        inputs, level, counts, node_exact, node_active, candidate_valid, level_bits, epsilon, offset
    )
    split = drawn_split(inputs, grid, *cells, split_dim, split_index)
    halted = structure_halts(inputs, grid, counts, node_exact, node_active, level, level_tests, structure_epsilon)
    return split_dim, split, halted


@functools.partial(jax.jit, static_argnames="config")
def _release_level(
    public, level, node_exact, node_active, split_dim, position, child_true, level_noise, halted, *, config
):
    return release_level(
        _inputs(public, config), level, node_exact, node_active, split_dim, position, child_true, level_noise, halted
    )


@functools.partial(jax.jit, static_argnames="config")
def _root_cells(public, *, config):
    return root_cells(_inputs(public, config))


_root_interval_size = jax.jit(root_interval_size, static_argnames="config")
_centers_from_sums = jax.jit(centers_from_sums, static_argnames="plan")
_level_randomness = jax.jit(level_randomness, static_argnames="width")
_structure_noise = jax.jit(structure_noise, static_argnames=("run_plan", "config"))


@functools.partial(jax.jit, static_argnames="width")
def _next_level(
    routes: _Routes,
    level,
    cells,
    split_dim,
    split: DrawnSplit,
    release: LevelRelease,
    child_exact: exact.Int,
    next_counts,
    *,
    width: int,
):
    """The routes with this level's splits; the next level's released counts, active slots and
    histogram (only the points of split nodes: the in-memory path's active points)."""
    routes = _Routes(
        *(
            part.at[level].set(value)
            for part, value in zip(routes, (split_dim, split.first_right, release.is_split, *cells))
        )
    )
    node_active = release.child_active[:width]
    if next_counts is not None:
        next_counts = jnp.where(node_active[:, None, None], next_counts, 0)
    return routes, exact.Int(tuple(limb[:width] for limb in child_exact.limbs)), node_active, next_counts


@functools.partial(jax.jit, static_argnames="padded")
def _assemble_tree(releases: list[LevelRelease], *, padded: int):
    stacked = LevelRelease(*(jnp.stack(field) for field in zip(*releases)))
    return assemble_tree(stacked, jnp.zeros(0, jnp.int32), padded)


@functools.partial(jax.jit, static_argnames=("release", "num_dims", "config"))
def _select_interval_size(key, em_table, histograms, noisy_count, *, release, num_dims: int, config: DPMConfig):
    return select_interval_size(
        key, em_table, counts_from_gap_histogram(jnp.stack(histograms)), noisy_count, release, num_dims, config
    )


_root_count = jax.jit(root_count, static_argnames=("run_plan", "padded"))


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


def _accumulate(
    source: _Chunks, rows: list[int], pass_name: str, report, function, public, routes: _Routes, *args, **static
):
    """The exact sum over all pieces of ``function(piece, valid, ...)`` (int32 arrays or exact Ints)."""
    report(pass_name)
    total = previous = None
    for _, piece, valid in source.pieces(pass_name, rows):
        part = function(jnp.asarray(piece), np.arange(source.chunk_rows) < valid, public, routes, *args, **static)
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


def _inputs(public: _Public, config: DPMConfig, piece=None):
    """The tree's public inputs (no points), or those of a piece, binned as in :func:`dpm_jax.tree.build_tree`."""
    em_table, lower, upper, root_exact, beta, depth = public
    if piece is None:
        return tree_inputs(None, None, em_table, lower, upper, root_exact, beta, config, depth)
    return point_inputs(piece, em_table, lower, upper, root_exact, beta, config, depth)


def _route(inputs, valid, routes: _Routes, num_levels):
    """Every point's local index and activity after the first ``num_levels`` levels (lines 26-27), each
    level's split applied to the half-bins of that level's grid, as in the in-memory tree."""

    def one_level(level, state):
        node, active = state
        grid, _ = level_grid(inputs, routes.cell_lower[level], routes.cell_upper[level])
        go_right = route_on_split_dimensions(inputs, grid, node, routes.split_dim[level], routes.first_right[level])
        return next_point_nodes(node, active, go_right, routes.is_split[level])

    return jax.lax.fori_loop(0, num_levels, one_level, (jnp.zeros(valid.shape[0], jnp.int32), valid))


def _histogram(inputs, cells, point_node, point_active):
    """(width, d, 2B) half-bin counts of the active points on the grid of ``cells``."""
    grid, _ = level_grid(inputs, *cells)
    return level_counts(inputs, grid, point_node, point_active)


@functools.partial(jax.jit, static_argnames=("width", "config"))
def _root_histogram_of_chunk(piece, valid, public, routes, cells, *, width: int, config: DPMConfig):
    return _histogram(_inputs(public, config, piece), cells, jnp.zeros(piece.shape[0], jnp.int32), valid)


@functools.partial(jax.jit, static_argnames=("width", "config", "next_histogram"))
def _children_of_chunk(
    piece,
    valid,
    public,
    routes,
    level,
    cells,
    split_dim,
    split: DrawnSplit,
    *,
    width: int,
    config: DPMConfig,
    next_histogram: bool,
):
    inputs = _inputs(public, config, piece)
    node, active = _route(inputs, valid, routes, level)
    grid, _ = level_grid(inputs, *cells)
    go_right = route_on_split_dimensions(inputs, grid, node, split_dim, split.first_right)
    child_true = count_children(node, active, go_right, width)
    if not next_histogram:
        return child_true, None
    child = 2 * node + go_right.astype(jnp.int32)  # the local index on the next level, if split
    return child_true, _histogram(inputs, (split.cell_lower, split.cell_upper), child, active)


@functools.partial(jax.jit, static_argnames=("width", "config", "leaf_sums"))
def _leaf_sums_of_chunk(piece, valid, public, routes, levels, *, width: int, config: DPMConfig, leaf_sums):
    # At the padded depth a point's local index is its leaf's slot (dpm_jax.tree).
    slot, _ = _route(_inputs(public, config, piece), valid, routes, levels)
    return blockwise_leaf_sums(piece, public.lower, public.upper, valid, slot, config.max_clusters, leaf_sums)


@functools.partial(jax.jit, static_argnames="dims")
def _quantised_columns(piece, lower, upper, *, dims: tuple[int, ...]):
    # The quantisation of dpm_jax.interval.sorted_levels, on the same scaled values.
    unit = to_unit_range(piece, lower, upper)
    return jnp.stack([jnp.floor(unit[:, dim] * np.float32(2**30)).astype(jnp.int32) for dim in dims])


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
