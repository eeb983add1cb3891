"""What every public entry point (:func:`dpm_jax.cluster`, :func:`dpm_jax.cluster_stream`) does
around the engine: charge the active :class:`dpm_jax.Accountant` before any data is read, say
once that the first call compiles, and trace the engine in 32-bit mode.

The engine's arithmetic is exact 32-bit integer arithmetic (counts, limbs, fixed-point sums;
:mod:`dpm_jax.exact`) on float32 data, whatever ``jax_enable_x64`` says: under x64 its programs
are traced with x64 off, so the release is the one without x64 (same key, same numbers).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
from typing import Callable

import jax

from dpm_jax.accountant import active_accountant
from dpm_jax.budget import Budget

__all__ = ["entry_point", "user_stacklevel", "FIRST_CALL_MESSAGE"]

# Frames of these files are the library's: dpm_jax's own and contextlib's (decorators made with it).
_LIBRARY_FILES = (os.path.dirname(os.path.abspath(__file__)), os.path.abspath(contextlib.__file__))
_log = logging.getLogger("dpm_jax")
FIRST_CALL_MESSAGE = (
    "dpm_jax: the first call compiles its programs (typically 5-20 s on a CPU, longer on a loaded machine; "
    "a warm compilation cache makes it faster); later calls with the same shapes, budget and config reuse them"
)
_announced = False


def _x64_off():
    """A context in which ``jax_enable_x64`` is off (JAX >= 0.7: jax.enable_x64; before: jax.experimental)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(False)
    from jax.experimental import disable_x64  # pragma: no cover - older JAX

    return disable_x64()  # pragma: no cover


def _announce_first_call() -> None:
    """:data:`FIRST_CALL_MESSAGE`, once per process: to the ``dpm_jax`` logger at INFO when logging is
    configured (a handler on it or the root), else on stderr."""
    global _announced
    if _announced:
        return
    _announced = True
    if _log.hasHandlers():
        _log.info(FIRST_CALL_MESSAGE)
    else:
        print(FIRST_CALL_MESSAGE, file=sys.stderr)


def user_stacklevel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn` that names the first frame outside dpm_jax
    (and :mod:`contextlib`, whose decorators wrap entry points) as the warning's origin,
    counted from the caller of this function."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARY_FILES):
        frame, level = frame.f_back, level + 1
    return level


def entry_point(what: str) -> Callable[[Callable], Callable]:
    """Decorate the entry point ``what``, whose arguments include ``budget`` (module docstring)."""

    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            traced = _is_traced(args, kwargs)
            accountant = active_accountant()
            if accountant is not None:
                if traced:
                    raise ValueError(
                        f"{what} runs under jax.jit or jax.vmap inside an active Accountant, which cannot count "
                        "the releases a traced call makes: charge them yourself (accountant.spend(budget, what) "
                        "once per release) outside the `with accountant:` block"
                    )
                budget = signature.bind(*args, **kwargs).arguments.get("budget")
                if isinstance(budget, Budget):  # else the entry point's own validation refuses it
                    accountant.spend(budget, what)  # refuses before the data is looked at
            if not traced:
                _announce_first_call()
            with _x64_off():
                return function(*args, **kwargs)

        return wrapper

    return decorate


def _is_traced(args, kwargs) -> bool:
    """True when any array argument is a tracer (the call is being traced by jit or vmap)."""
    return any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((args, kwargs)))
