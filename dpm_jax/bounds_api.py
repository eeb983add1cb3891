"""``dpm_jax.private_bounds``: the private bounds of :mod:`dpm_jax.bounds` as a standalone release.

For algorithms that need bounds before they run (synthetic data, greedy clustering):
validate with the engine's own checks, then spend all of the given budget on the bounds.
"""

from __future__ import annotations

import jax

from dpm_jax.api import validated_input
from dpm_jax.bounds import COVERING, PrivateBounds, check_found, estimate_bounds, plan_bounds
from dpm_jax.budget import Budget

__all__ = ["private_bounds"]


def private_bounds(
    key: jax.Array, X, budget: Budget, request: PrivateBounds = COVERING, point_mask=None
) -> tuple[jax.Array, jax.Array]:
    """DP per-dimension (lower, upper) of ``X`` spending all of ``budget`` (:mod:`dpm_jax.bounds`).

    Its ledger line is ``plan_bounds(budget, d, request).entry()`` (``request.share`` is not
    used here). The default request is :data:`dpm_jax.bounds.COVERING` (the box is the product
    here, so it is widened to hold nearly every point); ``PrivateBounds()`` gives the tight box
    that ``bounds="private"`` gives a clustering. Raises a ValueError when a dimension has no
    occupied bucket (outside jit). ``X`` is never modified.
    """
    points, mask, _ = validated_input(key, X, point_mask, bucket=True)
    plan = plan_bounds(budget, points.shape[1], request)
    lower, upper = estimate_bounds(key, points, mask, plan)
    check_found(lower, upper, plan)
    return lower, upper
