"""Data sharded over the devices of one host or many (``jax.sharding``, ``jax.distributed``).

Everything DPM computes from the data is a reduction of per-point quantities:
counts (the root count, half-bin histograms, child counts, gap counts) and the
fixed-point leaf sums, all exact integers (:mod:`dpm_jax.exact`). Integer addition
is associative, so when the rows of ``X`` are sharded over devices the compiler's
cross-device reductions (partial histograms and sums per device, then an
all-reduce) give the same integers as one device, and every mechanism sees the same
statistic: the release is bit-identical to one device's and its privacy argument
is unchanged (the noise is drawn from the same keys, replicated on every device).

The engine is traced with automatic (GSPMD) sharding: :func:`automatic_axes` turns
an input sharded over a mesh with *explicit* axes (the default of
``jax.make_mesh``), under which every scatter and the sort would need hand-written
sharding types, into the same placement over the same devices with automatic axes
(no data moves). The one step that is not a reduction is Algorithm 2 of the DPM
paper ("DPM: Clustering Sensitive Data through Separation", Section 3.5): it sorts
every dimension along the points, and XLA sorts only along an axis that is not
split over devices; the partitioner gathers the sort's operand (the (d', n) int32
quantised coordinates, d' <= 16 dimensions) onto the devices, sorts whole
dimensions and reduces the gap counts from there. The sorted values, and so the
gap counts, are those of one device.

The loops over blocks of rows (binning a level's points in their cells, the leaf sums)
would slice the rows at a dynamic offset, which the partitioner can only serve by
gathering the whole array onto every device. When :func:`dpm_jax.cluster` gets rows split
over devices (:func:`rows_over_devices`) its program reads *strided* blocks instead
(:func:`dpm_jax._arrays.row_blocks`: the rows viewed as (groups, blocks, run), a block
indexed along the axis that is never split), so every device reads only its own rows;
one device keeps contiguous blocks (faster there). Which rows a block holds changes no
count or sum, so the release is the same.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec

__all__ = ["automatic_axes", "rows_over_devices", "GlobalRows", "rows_of_all_processes"]

ROWS_AXIS = "rows"


def automatic_axes(x: jax.Array) -> jax.Array:
    """``x`` with the same placement over the same devices, its mesh axes automatic (GSPMD).

    A no-op unless ``x`` is sharded over a mesh with explicit axes; the buffers are
    shared, not copied.
    """
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding) or all(t == AxisType.Auto for t in sharding.mesh.axis_types):
        return x
    mesh = sharding.mesh.update(axis_types=(AxisType.Auto,) * len(sharding.mesh.axis_names))
    return jax.device_put(x, NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind))


def rows_over_devices(x: Any) -> bool:
    """Whether ``x`` is a concrete array whose rows are split over several devices.

    The engine then loops over strided row blocks, each device reading its own rows
    (:func:`dpm_jax._arrays.row_blocks`); under a caller's ``jax.jit`` the placement is not
    known at trace time (False: contiguous blocks, correct but the partitioner may gather).
    """
    sharding = getattr(x, "sharding", None) if isinstance(x, jax.Array) else None
    if sharding is None or len(sharding.device_set) < 2 or x.ndim == 0:
        return False
    try:
        return sharding.shard_shape(x.shape)[0] < x.shape[0]
    except Exception:  # a sharding that cannot say: assume split
        return True


class GlobalRows(NamedTuple):
    """The rows of every process as one global array, for ``cluster(key, points, ..., point_mask=mask)``.

    Each process's rows are padded to a common length (padding rows are False in
    ``mask`` and ignored exactly), so the release equals that of one process on the
    concatenated rows. ``labels_nonprivate`` of such a run has one entry per padded row.
    """

    points: jax.Array  # (processes * padded_rows, d) float32, rows sharded over all devices
    mask: jax.Array  # (processes * padded_rows,) bool, same sharding


def rows_of_all_processes(local_points: Any) -> GlobalRows:
    """Many hosts: every process passes its own rows; all get the same global array.

    Call after ``jax.distributed.initialize`` on every process (collectively). The
    processes exchange their row and column counts (among themselves: nothing is
    released; the release holds only global noisy counts) to agree on the padding;
    a process whose column count differs is named in the error before any work.
    Each process's rows stay on its devices.
    """
    local = np.asarray(local_points, np.float32)
    if local.ndim != 2:
        raise ValueError(f"process {jax.process_index()}: local rows must have shape (n, d), got {local.shape}")
    shapes = np.asarray(multihost_utils.process_allgather(np.asarray(local.shape, np.int64))).reshape(-1, 2)
    columns = shapes[:, 1]
    if np.any(columns != columns[0]):
        raise ValueError(
            f"the processes' rows have different numbers of columns: {columns.tolist()} "
            f"(by process index); every process must hold rows of the same d"
        )
    devices = jax.local_device_count()
    padded = max(1, -(-int(shapes[:, 0].max()) // devices)) * devices
    rows = np.zeros((padded, local.shape[1]), np.float32)
    rows[: local.shape[0]] = local
    mask = np.arange(padded) < local.shape[0]
    mesh = jax.make_mesh((jax.device_count(),), (ROWS_AXIS,), axis_types=(AxisType.Auto,))
    total = padded * jax.process_count()
    return GlobalRows(
        jax.make_array_from_process_local_data(
            NamedSharding(mesh, PartitionSpec(ROWS_AXIS)), rows, (total, local.shape[1])
        ),
        jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec(ROWS_AXIS)), mask, (total,)),
    )
