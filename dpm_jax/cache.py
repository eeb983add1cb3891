"""JAX's persistent compilation cache for dpm_jax's own programs: a fast first call.

Compiling DPM costs seconds on CPU; the compiled program depends only on shapes, dtypes,
the budget and the config, never on data values. JAX can keep
compiled programs on disk (its persistent compilation cache, keyed by the program,
the JAX/XLA version and the device), so a second process with the same shapes loads
instead of compiling. ``import dpm_jax`` chooses ``$DPM_JAX_CACHE_DIR``, else
``$XDG_CACHE_HOME/dpm_jax/xla``, else ``~/.cache/dpm_jax/xla`` (created readable by its
owner only, when the first entry point runs: importing touches nothing on disk), unless

* the environment has ``DPM_JAX_NO_COMPILATION_CACHE=1`` (opt-out), or
* the caller configured JAX's cache already (``jax_compilation_cache_dir`` is set:
  theirs is kept, and it caches whatever JAX caches).

:func:`enable_compilation_cache` and :func:`disable_compilation_cache` do the same
from code.

**Private data and the cache.** A compiled program holds the arrays its function
*closes over* as constants, and JAX's cache writes the program to disk, constants
included (measured: a closed-over array's bytes are in the cache entry, compressed).
``cluster`` passes the data to its programs as arguments, but a caller's own
``jax.jit`` that closes over private data (``jax.jit(lambda key: cluster(key, X, ...))``)
would have it written to disk if the cache were on for every program of the process.
So the cache is on only *while a dpm_jax entry point runs* (:func:`library_programs`,
around :func:`dpm_jax.stream.cluster_stream`), and off otherwise: a caller's program is
compiled after their trace of ``cluster`` has returned, with the cache off, and never stored.

**Private sizes and the cache.** A cache entry is keyed by its program, shapes included,
and :func:`dpm_jax.cluster`'s program is shaped by the data's (n, d): n is private under
add/remove-one neighbours, so ``cluster`` never turns the cache on (nor do the estimator and
the command line, which call it). ``cluster_stream``'s programs are shaped by ``chunk_rows``
and fixed blocks, never by n (docs/privacy.md, section 6). (Programs another thread compiles
while an entry point runs are cached too: do not compile programs closing over private
data in a thread beside a running ``cluster_stream``, or opt out.)
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from typing import Iterator

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

__all__ = [
    "OPT_OUT_VARIABLE",
    "DIRECTORY_VARIABLE",
    "default_cache_dir",
    "enable_compilation_cache",
    "disable_compilation_cache",
    "compilation_cache_dir",
    "library_programs",
]

OPT_OUT_VARIABLE = "DPM_JAX_NO_COMPILATION_CACHE"
DIRECTORY_VARIABLE = "DPM_JAX_CACHE_DIR"
# Programs that compile faster than this are not worth a disk read (JAX's default is 1 s,
# which would skip the small validation programs a first call also compiles).
_MIN_COMPILE_SECONDS = 0.1
_directory: pathlib.Path | None = None  # dpm_jax's cache directory (None: off)
_private = False  # the default directory: created readable by its owner only
_created = False  # the directory exists (made by the first library_programs block)
_active = 0  # library_programs blocks running, in all threads
_restore: tuple | None = None  # JAX's settings before the outermost block set them
_lock = threading.Lock()


def default_cache_dir() -> pathlib.Path:
    """Where the cache lives: $DPM_JAX_CACHE_DIR, else the user's cache directory."""
    if os.environ.get(DIRECTORY_VARIABLE):
        return pathlib.Path(os.environ[DIRECTORY_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "dpm_jax" / "xla"


def enable_compilation_cache(directory: str | os.PathLike | None = None) -> pathlib.Path:
    """Cache dpm_jax's programs in ``directory`` (default :func:`default_cache_dir`); returns it.

    The directory is created when the first dpm_jax entry point runs; if it cannot be
    (a read-only home), the cache stays off: compiling is always correct, only slower.
    """
    global _directory, _private, _created
    _directory = pathlib.Path(directory) if directory is not None else default_cache_dir()
    _private, _created = directory is None, False
    return _directory


def disable_compilation_cache() -> None:
    """Compile every dpm_jax program afresh in this process (a cache configured for JAX is not touched)."""
    global _directory
    _directory = None


def _usable_directory() -> pathlib.Path | None:
    """dpm_jax's cache directory, created on first use; None (and the cache off) if it cannot be."""
    global _directory, _created
    if _directory is not None and not _created:
        try:
            _directory.mkdir(parents=True, exist_ok=True)
            if _private:
                _directory.chmod(0o700)  # the user's own
            _created = True
        except OSError:
            _directory = None
    return _directory


def compilation_cache_dir() -> str | None:
    """Where compiled programs of dpm_jax are cached: dpm_jax's directory, a cache the caller configured
    for JAX, or None (off)."""
    return str(_directory) if _directory is not None else jax.config.jax_compilation_cache_dir


@contextlib.contextmanager
def library_programs() -> Iterator[None]:
    """JAX's cache on in dpm_jax's directory while the block runs (dpm_jax's entry points), off after.

    The cache's settings are process-wide and JAX decides once whether to use one, so the
    outermost block sets them and resets JAX's decision, and restores both when it ends.
    Nothing changes when the cache is off or the caller configured JAX's own.
    """
    global _active, _restore
    with _lock:
        _active += 1
        if _active == 1 and jax.config.jax_compilation_cache_dir is None and _usable_directory() is not None:
            _restore = _set_jax_cache(str(_directory), _MIN_COMPILE_SECONDS, 0)
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _restore is not None:
                _set_jax_cache(*_restore)
                _restore = None


def _set_jax_cache(directory: str | None, min_compile_seconds: float, min_entry_bytes: int) -> tuple:
    """Set JAX's cache directory and thresholds; returns the previous ones."""
    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    previous = tuple(getattr(jax.config, name) for name in names)
    for name, value in zip(names, (directory, min_compile_seconds, min_entry_bytes)):
        jax.config.update(name, value)
    jax_cache.reset_cache()  # JAX decides once per process whether to use a cache: decide again
    return previous


def enable_by_default() -> None:
    """What ``import dpm_jax`` does: choose the cache directory unless opted out or configured by
    the caller (nothing is created until an entry point runs)."""
    if os.environ.get(OPT_OUT_VARIABLE, "").strip() not in ("", "0") or compilation_cache_dir():
        return
    enable_compilation_cache()
