"""Public bounds (lo, hi) as per-dimension arrays, for the evaluation tooling.

Bounds are given as scalars or (d,) sequences everywhere in dpm_jax; the engine
validates and broadcasts them in :func:`dpm_jax.cluster`, the evaluation code (metrics,
baselines, the auditor) through :func:`broadcast_bounds`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["broadcast_bounds"]


def broadcast_bounds(bounds, d: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper), each a (d,) array of ``dtype``, from (lo, hi) scalars or (d,) sequences."""
    lower, upper = bounds
    return tuple(np.broadcast_to(np.asarray(b, dtype), (d,)) for b in (lower, upper))
