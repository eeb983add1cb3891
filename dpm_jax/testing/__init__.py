"""Test tooling for dpm_jax: not part of the engine, not imported by it.

:func:`substituted` swaps a function of the engine for a deliberately broken variant
within a ``with`` block (the privacy audits and the mutation checks use it to show
that a measurement catches the bug it is meant to catch).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import jax

__all__ = ["substituted"]


@contextlib.contextmanager
def substituted(original: Callable, replacement: Callable) -> Iterator[None]:
    """Within the block, every dpm_jax module attribute that *is* ``original`` is
    ``replacement`` (e.g. a deliberately broken mechanism to check that an audit
    catches it); JAX's compilation caches and dpm_jax's own memoised plans (every
    ``functools.lru_cache`` of a dpm_jax module, e.g. :func:`dpm_jax.api.plan_run`) are
    cleared on entry and exit so no compiled ``cluster`` or plan of the other variant is
    reused. Not thread-safe.
    """
    replaced = []
    for module in _library_modules():
        for attribute, value in list(vars(module).items()):
            if value is original:
                replaced.append((module, attribute))
    if not replaced:
        raise ValueError(f"{original!r} is not held by any dpm_jax module")
    _clear_caches()
    for module, attribute in replaced:
        setattr(module, attribute, replacement)
    try:
        yield
    finally:
        for module, attribute in replaced:
            setattr(module, attribute, original)
        _clear_caches()


def _clear_caches() -> None:
    jax.clear_caches()
    for module in _library_modules():
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def _library_modules():
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name == "dpm_jax" or name.startswith("dpm_jax."))
    ]
