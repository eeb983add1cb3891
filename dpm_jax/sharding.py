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
"""

from __future__ import annotations

import jax
from jax.sharding import AxisType, NamedSharding

__all__ = ["automatic_axes"]


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
