"""``DPMConfig(tau_r="auto")``: the depth chosen from a noisy count, paid for in the ledger.

The right depth depends on the data size: at n * epsilon = 20,000 the default 7 levels
spread the budget over levels whose split draws are near random
(:mod:`dpm_jax.diagnostics`). The size is private (add/remove-one neighbours change it),
so choosing the depth from it is a release: :func:`choose_depth` spends
AUTO_DEPTH_EPSILON_SHARE of epsilon on one discrete Laplace count of the points
(:func:`dpm_jax.mechanisms.noisy_count`, sensitivity 1, key stream ``keys.DEPTH``),
then picks :func:`dpm_jax.diagnostics.recommended_tau_r` of that noisy count and the
*remaining* budget (post-processing). The run itself spends the remaining budget;
the ledger lists the count first, so it still adds up exactly to the user's budget.

The count has to be known on the host before the program is compiled (the depth fixes
its shapes), so ``tau_r="auto"`` needs concrete inputs: it refuses to run under a
caller's ``jax.jit`` or ``jax.vmap`` (choose the depth once outside, e.g. with
:func:`dpm_jax.diagnostics.recommended_tau_r` on a size you declare public).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from dpm_jax import exact, keys
from dpm_jax.budget import Budget
from dpm_jax.config import AUTO_DEPTH, DPMConfig
from dpm_jax.diagnostics import recommended_tau_r
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import count_sampler_tv, noisy_count

__all__ = ["AUTO_DEPTH_EPSILON_SHARE", "choose_depth", "count_points"]

AUTO_DEPTH_EPSILON_SHARE = 0.02  # noise scale 50 / epsilon points: ample for a depth
_UNDER_TRACING = (
    f"tau_r={AUTO_DEPTH!r} releases a noisy count on the host to fix the program's "
    "shapes, so it cannot run under jax.jit or jax.vmap; choose tau_r outside, e.g. "
    "with dpm_jax.diagnostics.recommended_tau_r"
)


def count_points(point_mask) -> int:
    """The exact number of points (True entries of the (n,) mask), on the host: what the count reads.

    A mask under a caller's ``jax.jit`` or ``jax.vmap`` has no value yet: a clear error.
    """
    if isinstance(point_mask, jax.core.Tracer):
        raise ValueError(_UNDER_TRACING)
    return int(np.sum(np.asarray(point_mask), dtype=np.int64))


def choose_depth(
    key: jax.Array, num_points: int, budget: Budget, config: DPMConfig, d: int
) -> tuple[DPMConfig, Budget, LedgerEntry]:
    """(config with the chosen tau_r, the budget left for the run, the count's ledger line).

    ``num_points`` is the exact number of points (:func:`count_points` of the in-memory mask,
    the rows of the validation pass of :func:`dpm_jax.stream.cluster_stream`): the same
    integer gives the same noisy count and depth in both paths.

    Privacy: (epsilon_depth, tv (1 + e^epsilon_depth))-DP for the noisy count
    (:func:`dpm_jax.mechanisms.noisy_count`, sensitivity 1: adding or removing one point
    changes ``num_points`` by one); the depth is post-processing of it.
    """
    if config.tau_r != AUTO_DEPTH:
        raise ValueError(f"choose_depth is for tau_r={AUTO_DEPTH!r}, got {config.tau_r!r}")
    if isinstance(key, jax.core.Tracer):
        raise ValueError(_UNDER_TRACING)
    epsilon = budget.epsilon * AUTO_DEPTH_EPSILON_SHARE
    delta = count_sampler_tv(epsilon) * (1.0 + math.exp(epsilon))
    released = noisy_count(keys.derive_key(key, keys.DEPTH), np.int64(num_points), epsilon)
    released_count = float(exact.to_float32(released))  # post-processing of the released integer
    remaining = Budget(budget.epsilon - epsilon, budget.delta - delta)
    base = dataclasses.replace(config, tau_r=DPMConfig().tau_r)
    tau_r = max(1, recommended_tau_r(max(released_count, 1.0), d, remaining, base))
    entry = LedgerEntry(
        "depth",
        "discrete_laplace",
        None,
        epsilon,
        delta,
        1.0,
        f"count of all points; tau_r={tau_r} chosen from n~={released_count:.0f}",
        1.0 / epsilon,
        (keys.DEPTH,),
        sampler_delta=delta,
    )
    return dataclasses.replace(config, tau_r=tau_r), remaining, entry
