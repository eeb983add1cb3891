"""Row buckets: concrete data padded to one of a few public row counts, so that a new n reuses
a compiled program.

XLA compiles one program per input shape, and compiling ``cluster``'s program takes seconds
on a CPU (docs/scaling.md). Without buckets, every new number of rows (a subset, a
cross-validation fold, a day's new records) paid that compile again. An entry point now pads
a concrete X with masked rows up to :func:`bucket_size` of its n: the sizes with at most
:data:`BUCKET_BITS` significant bits, so a bucket holds at most 1/16 more rows than the data
(about 3 % on average), and the sizes from n to about n + n / 16 share one program.

Exact: a padding row is False in the point mask, and the engines ignore masked rows exactly
(integer counts and sums), so the release is the unpadded run's bit for bit
(``tests/test_rows.py``). Only the engines whose release does not depend on the row
dimension use buckets (``cluster``, ``kmeans``, ``private_bounds``); the synthesis sizes
its leaf slots and draws by the rows, so it keeps exact shapes.

Privacy: the bucket is a function of the private n, and it is visible in the program's shape
and run time, as n itself was before (docs/privacy.md, "Run time"); a bucket tells less than
n (the estimator's own padding, to powers of two, which the buckets replace, told less
still). The release does not depend on it.

Not padded (the caller chose the shapes): traced X or masks (inside the caller's
``jax.jit``/``jax.vmap``), rows on several devices, and more than :data:`MAX_BUCKETED_ROWS`
rows, where the padded copy would cost memory that a large run needs more than a compile.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MAX_BUCKETED_ROWS", "bucket_size", "paddable", "on_device", "on_one_cpu", "first_rows"]

BUCKET_BITS = 5  # significant bits of a bucket: at most 1/16 more rows than the data
MIN_BUCKET = 1024  # fewer rows than this are padded to it (the passes over them cost microseconds)
MAX_BUCKETED_ROWS = 2**22  # beyond this the padded copy's memory matters more than the compile


def bucket_size(n: int) -> int:
    """The row count a concrete X of n rows is padded to: the smallest m >= max(n, MIN_BUCKET)
    with at most BUCKET_BITS significant bits; n itself above MAX_BUCKETED_ROWS."""
    if n > MAX_BUCKETED_ROWS:
        return n
    m = max(n, MIN_BUCKET)
    shift = max(m.bit_length() - BUCKET_BITS, 0)
    return -(-m >> shift) << shift


def paddable(x) -> bool:
    """Whether an entry point may pad ``x``: host data (NumPy), or a concrete JAX array on one
    device; not a tracer of the caller's jit/vmap (the caller chose its shape) nor rows on
    several devices (padding would gather them)."""
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, jax.core.Tracer) or not isinstance(x, jax.Array):
        return False
    return len(x.sharding.device_set) == 1


def on_device(x, size: int, dtype) -> jax.Array:
    """``x`` (host or JAX, n rows) as a JAX array of ``dtype`` with zero (False) rows appended up
    to ``size`` >= n, on the device it is on (host data: the default device).

    Host data are copied once, into the padded buffer (the caller's array is never touched). On
    the CPU a JAX array is padded through NumPy too: an XLA op on the n-row array would itself
    compile per n (tens of milliseconds each), which the buckets exist to avoid."""
    n = x.shape[0]
    if isinstance(x, np.ndarray) and n > MAX_BUCKETED_ROWS:
        return jnp.array(x, dtype)  # never padded: one copy, made by XLA (a host copy would be a second)
    if isinstance(x, np.ndarray) or (size > n and on_one_cpu(x)):
        host = np.zeros((size,) + x.shape[1:], dtype)
        with np.errstate(over="ignore"):  # a float64 beyond float32 becomes inf, as XLA's cast makes it,
            host[:n] = np.asarray(x)  # silently: a warning would depend on the data (then clipped to the bounds)
        return jax.device_put(host, _placement(x))
    if size == n:  # a JAX array the caller shaped (traced, on several devices) or already a bucket
        return x if x.dtype == dtype else jnp.asarray(x, dtype)
    return jnp.concatenate([jnp.asarray(x, dtype), jnp.zeros((size - n,) + x.shape[1:], dtype)])


def first_rows(x: jax.Array, rows: int) -> jax.Array:
    """The first ``rows`` rows of a per-point output of a padded run, on its device."""
    if x.shape[0] == rows:
        return x
    if on_one_cpu(x):
        return jax.device_put(np.asarray(x)[:rows], _placement(x))
    return x[:rows]  # traced (a caller's vmap over keys of concrete data) or on an accelerator


def _placement(x):
    """Where a copy of ``x`` goes: its device when the caller committed it there, else the default
    device, uncommitted (a committed copy would compile programs apart from the uncommitted ones)."""
    return x.sharding if isinstance(x, jax.Array) and x.committed else None


def on_one_cpu(x) -> bool:
    """Whether ``x`` is a concrete JAX array on one CPU device (NumPy reads it in place)."""
    return isinstance(x, jax.Array) and paddable(x) and next(iter(x.sharding.device_set)).platform == "cpu"
