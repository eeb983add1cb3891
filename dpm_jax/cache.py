"""JAX's persistent compilation cache in a user cache directory: a fast first call.

Compiling :func:`dpm_jax.cluster` costs seconds on CPU; the compiled program depends
only on shapes, dtypes, the budget and the config, never on data values. JAX can keep
compiled programs on disk (its persistent compilation cache, keyed by the program,
the JAX/XLA version and the device), so a second process with the same shapes loads
instead of compiling. ``import dpm_jax`` turns it on in
``$DPM_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpm_jax/xla``, else
``~/.cache/dpm_jax/xla``, unless

* the environment has ``DPM_JAX_NO_COMPILATION_CACHE=1`` (opt-out), or
* the caller configured JAX's cache already (``jax_compilation_cache_dir`` is set:
  theirs is kept).

:func:`enable_compilation_cache` and :func:`disable_compilation_cache` do the same
from code. ``cluster`` passes the data to its compiled program as an argument, so its
cached programs hold shapes and public constants only (budget, config, tables). A
caller's own ``jax.jit`` that *closes over* private data makes that data a constant
of the caller's program, which JAX's cache would write to disk like any other
program: pass data as an argument of a jitted function, or opt out. The default
directory is created readable by its owner only.
"""

from __future__ import annotations

import os
import pathlib

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

__all__ = [
    "OPT_OUT_VARIABLE",
    "DIRECTORY_VARIABLE",
    "default_cache_dir",
    "enable_compilation_cache",
    "disable_compilation_cache",
    "compilation_cache_dir",
]

OPT_OUT_VARIABLE = "DPM_JAX_NO_COMPILATION_CACHE"
DIRECTORY_VARIABLE = "DPM_JAX_CACHE_DIR"
# Programs that compile faster than this are not worth a disk read (JAX's default is 1 s,
# which would skip the small validation programs a first call also compiles).
_MIN_COMPILE_SECONDS = 0.1


def default_cache_dir() -> pathlib.Path:
    """Where the cache lives: $DPM_JAX_CACHE_DIR, else the user's cache directory."""
    if os.environ.get(DIRECTORY_VARIABLE):
        return pathlib.Path(os.environ[DIRECTORY_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "dpm_jax" / "xla"


def enable_compilation_cache(directory: str | os.PathLike | None = None) -> pathlib.Path:
    """Keep compiled programs in ``directory`` (default :func:`default_cache_dir`); returns it."""
    path = pathlib.Path(directory) if directory is not None else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    if directory is None:
        path.chmod(0o700)  # the user's own: see the module docstring on constants
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax_cache.reset_cache()  # JAX decides once per process whether to use a cache: decide again
    return path


def disable_compilation_cache() -> None:
    """Compile every program afresh in this process (JAX's cache directory unset)."""
    jax.config.update("jax_compilation_cache_dir", None)
    jax_cache.reset_cache()


def compilation_cache_dir() -> str | None:
    """The directory JAX's persistent cache uses now (None: off)."""
    return jax.config.jax_compilation_cache_dir


def enable_by_default() -> None:
    """What ``import dpm_jax`` does: enable unless opted out or configured by the caller.

    A cache directory that cannot be created (read-only home) leaves the cache off:
    compiling is always correct, only slower.
    """
    if os.environ.get(OPT_OUT_VARIABLE, "").strip() not in ("", "0") or compilation_cache_dir():
        return
    try:
        enable_compilation_cache()
    except OSError:
        pass
