"""The result of :func:`dpm_jax.synthesize`: weighted cells and the sampler of synthetic rows.

Every field is DP (a release of :mod:`dpm_jax.synth.api`); :meth:`SynthResult.sample` is
post-processing of the released weights and boxes.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax._arrays import unfused_multiply_add
from dpm_jax.ledger import Ledger

__all__ = ["SynthResult", "sample_boxes"]


@dataclasses.dataclass(frozen=True)
class SynthResult:
    """A weighted synthetic data set; a JAX pytree (ledger and method are static). All DP.

    centers: (m, d) the cells' centres (NaN where ``valid`` is False: padding). m is public:
      ``SynthConfig.max_cells`` (the heaviest cells kept past it), or DPM's leaf slots for "dpm".
    weights: (m,) float32 noisy counts (0 where not valid); ``weights / weights.sum()`` is the
      synthetic distribution over the centres.
    lower, upper: (m, d) the cells' boxes (NaN where not ``valid``).
    valid: (m,) bool.
    depth: the depth of the run's ledger: DPM's tree depth for "dpm" (data dependent under
      tau_r="auto"), -1 otherwise.
    ledgers: ((depth, ledger), ...) static; :attr:`ledger` is the run's; under private bounds
      their release's line comes first in each (:func:`dpm_jax.bounds.with_bounds_entry`).
    method: the method (static).
    bounds: (lower, upper), (d,) float32 each: the box the cells partition; the caller's public
      bounds, or under ``bounds="private"`` the DP estimate (:mod:`dpm_jax.bounds`).
    """

    centers: jax.Array
    weights: jax.Array
    lower: jax.Array
    upper: jax.Array
    valid: jax.Array
    depth: jax.Array
    ledgers: tuple[tuple[int, Ledger], ...] = dataclasses.field(metadata=dict(static=True))
    method: str = dataclasses.field(metadata=dict(static=True))
    bounds: tuple[jax.Array, jax.Array] | None = None

    @property
    def ledger(self) -> Ledger:
        """The privacy ledger of this run (it adds up to the budget)."""
        if len(self.ledgers) == 1:
            return self.ledgers[0][1]
        depths = np.unique(np.asarray(self.depth))  # raises under jit: the depth is not known yet
        if depths.size != 1:
            raise ValueError(f"these runs have different depths {depths.tolist()}: each has its own ledger")
        return dict(self.ledgers)[int(depths[0])]

    def with_bounds_release(self, plan) -> SynthResult:
        """This result with the private bounds' release ``plan`` (:class:`dpm_jax.bounds.BoundsPlan`)
        first in each of its ledgers (:func:`dpm_jax.bounds.with_bounds_entry`)."""
        entry = plan.entry()
        ledgers = tuple((depth, Ledger([entry, *ledger])) for depth, ledger in self.ledgers)
        return dataclasses.replace(self, ledgers=ledgers)

    def sample(self, key: jax.Array, m: int) -> jax.Array:
        """(m, d) synthetic rows: a box drawn by weight, a uniform point inside it (post-processing).

        A release with no box of positive weight (every cell below the threshold) has nothing to
        draw from: a ValueError where the weights are concrete, rows of NaN under jit or vmap.
        """
        if not isinstance(self.weights, jax.core.Tracer) and not np.any(np.asarray(self.weights) > 0):
            raise ValueError(
                "this release holds no box of positive weight (every cell fell below the threshold): "
                "there is nothing to sample; a larger epsilon or fewer cells (SynthConfig) release some"
            )
        return sample_boxes(key, self.weights, self.lower, self.upper, m)


jax.tree_util.register_dataclass(
    SynthResult,
    data_fields=["centers", "weights", "lower", "upper", "valid", "depth", "bounds"],
    meta_fields=["ledgers", "method"],
)


@functools.partial(jax.jit, static_argnames=("m",))
def sample_boxes(key: jax.Array, weights: jax.Array, lower: jax.Array, upper: jax.Array, m: int) -> jax.Array:
    """m rows: box i with probability weights_i / sum(weights), then uniform in [lower_i, upper_i]."""
    pick, inside = jax.random.split(key)
    # Inverse CDF over the cumulative weights: O(m log cells) memory-light (categorical with a
    # shape draws an (m, cells) Gumbel array: tens of GB for m and cells in the 10^5).
    cumulative = jnp.cumsum(jnp.maximum(weights, 0.0).astype(jnp.float32))
    u = jnp.minimum(jax.random.uniform(pick, (m,), jnp.float32) * cumulative[-1], jnp.nextafter(cumulative[-1], 0))
    rows = jnp.minimum(jnp.searchsorted(cumulative, u, side="right"), weights.shape[0] - 1)
    u = jax.random.uniform(inside, (m, lower.shape[1]))
    drawn = unfused_multiply_add(u, upper[rows] - lower[rows], lower[rows])
    return jnp.where(cumulative[-1] > 0, drawn, jnp.nan)  # no positive weight: nothing to draw from
