"""The DP mechanisms DPM is built from, each next to its privacy statement.

Every function takes its PRNG key first and draws nothing else; keys come from
:func:`derive_key`, so each draw of a run can be re-derived from the caller's key.

Neighbouring data sets differ by adding or removing one point (Definition 1 of the
DPM paper, 000_e63c772e1db0dbd8.txt).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = [
    "STREAMS",
    "derive_key",
    "laplace_noise",
    "noisy_count",
    "count_offset",
    "exponential_mechanism",
    "analytic_gaussian_sigma",
    "gaussian_noise",
]

# Key derivation: key_for(stream, level) = fold_in(fold_in(key, STREAMS[stream]), level).
# One key per mechanism and level; the nodes of a level draw from that key as one
# array, node j taking element j.
STREAMS = {"count": 0, "interval": 1, "split": 2, "average": 3}


def derive_key(key: jax.Array, stream: str, level: int = 0) -> jax.Array:
    """The key of mechanism ``stream`` at recursion ``level`` (documented key path)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown key stream {stream!r}; expected one of {sorted(STREAMS)}")
    return jax.random.fold_in(jax.random.fold_in(key, STREAMS[stream]), level)


# --------------------------------------------------------------------------- Laplace
def laplace_noise(key: jax.Array, shape: tuple[int, ...], scale) -> jax.Array:
    """Lap(scale) noise of the given shape (float32)."""
    return scale * jax.random.laplace(key, shape, dtype=jnp.float32)


def noisy_count(key: jax.Array, true_counts: jax.Array, epsilon: float) -> jax.Array:
    """Laplace mechanism for counts: ``|S| + Lap(1/epsilon)`` per entry.

    Privacy: a count has sensitivity 1 under add/remove-one, so each entry is
    (epsilon, 0)-DP (Corollary 1). The entries of one call count disjoint sets
    (the nodes of one level), so the whole call is (epsilon, 0)-DP by parallel
    composition. Noise scale 1/epsilon.
    """
    noise = laplace_noise(key, true_counts.shape, 1.0 / epsilon)
    return true_counts.astype(jnp.float32) + noise


def count_offset(epsilon: float, delta: float) -> float:
    """Equation 1: lambda = -ln(2 delta) / epsilon, so P[n~ - lambda > |S|] = delta."""
    return -math.log(2.0 * delta) / epsilon


# --------------------------------------------------------------------- exponential
def exponential_mechanism(key: jax.Array, scores: jax.Array, valid: jax.Array,
                          epsilon, sensitivity) -> jax.Array:
    """Exponential mechanism over a batch of candidate sets (Definition 4, fixed).

    Selects index i of ``scores[b, ..., i]`` (flattened over the trailing axes
    after the batch axis) with probability proportional to
    ``exp(epsilon * score_i / (2 * sensitivity_b))`` among the ``valid`` candidates.
    The paper prints exp(eps f / Delta_f); because the score is not monotone in the
    data the factor 2 is needed for epsilon-DP (McSherry and Talwar, 2007).

    Privacy: (epsilon, 0)-DP per batch row when every score of that row changes by
    at most ``sensitivity[b]`` between neighbours; rows over disjoint sets compose
    in parallel. Invalid candidates have probability exactly 0.

    Sampling: exact inverse-CDF sampling in two stages (the trailing axis ``-2``
    group, then the candidate within it), needing two uniforms per row instead of
    one Gumbel draw per candidate. Floating-point caveat: probabilities are
    computed in float32 after subtracting the row maximum; a candidate whose
    probability is below about 1e-38 relative to the best is never selected, and
    cumulative sums carry a relative rounding error of about (#candidates) * 6e-8.

    Args:
      key: PRNG key.
      scores: (batch, groups, candidates) array.
      valid: boolean mask with the same shape.
      epsilon: privacy parameter (scalar).
      sensitivity: (batch,) positive sensitivities.

    Returns:
      (group_index, candidate_index), two int32 arrays of shape (batch,). Rows
      with no valid candidate return (0, 0).
    """
    batch = scores.shape[0]
    logits = epsilon * scores / (2.0 * sensitivity.reshape((batch, 1, 1)))
    logits = jnp.where(valid, logits, -jnp.inf)
    row_max = jnp.max(logits, axis=(1, 2), keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    weights = jnp.where(valid, jnp.exp(logits - row_max), 0.0)
    group_key, candidate_key = jax.random.split(key)
    group_mass = jnp.sum(weights, axis=2)
    group = _inverse_cdf(group_key, group_mass)
    within = jnp.take_along_axis(weights, group[:, None, None], axis=1)[:, 0, :]
    candidate = _inverse_cdf(candidate_key, within)
    return group, candidate


def _inverse_cdf(key, weights):
    """Index i with probability weights[b, i] / sum_i weights[b, i], per row b."""
    cumulative = jnp.cumsum(weights, axis=-1)
    total = cumulative[:, -1:]
    uniform = jax.random.uniform(key, (weights.shape[0], 1), dtype=weights.dtype)
    index = jnp.sum(cumulative <= uniform * total, axis=-1)
    # uniform * total can round up to total; never step past the last positive weight.
    positions = jnp.arange(weights.shape[-1])
    last_positive = jnp.max(jnp.where(weights > 0, positions, 0), axis=-1)
    return jnp.minimum(index, last_positive).astype(jnp.int32)


# ------------------------------------------------------------------------- Gaussian
def _std_normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP.

    Analytic Gaussian mechanism (Balle and Wang, ICML 2018, Theorem 8): the
    Gaussian mechanism with L2 sensitivity Delta is (epsilon, delta)-DP iff
        Phi(Delta/(2 sigma) - epsilon sigma/Delta)
          - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta.
    The left side decreases in sigma; we bisect on it (in float64, on the host:
    the result only depends on public numbers) and return an upper end of the
    final bracket, so the returned sigma always satisfies the condition.
    """
    if epsilon <= 0 or not 0 < delta < 1 or sensitivity <= 0:
        raise ValueError("analytic_gaussian_sigma needs epsilon > 0, 0 < delta < 1, sensitivity > 0")

    def privacy_loss_delta(sigma):
        a = sensitivity / (2.0 * sigma)
        b = epsilon * sigma / sensitivity
        return _std_normal_cdf(a - b) - math.exp(epsilon) * _std_normal_cdf(-a - b)

    low, high = 1e-12 * sensitivity, sensitivity
    while privacy_loss_delta(high) > delta:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if privacy_loss_delta(mid) > delta:
            low = mid
        else:
            high = mid
    return high


def gaussian_noise(key: jax.Array, shape: tuple[int, ...], sigma) -> jax.Array:
    """N(0, sigma^2) noise of the given shape (float32).

    Floating-point caveat: drawn with JAX's float32 normal sampler; like any
    textbook floating-point Gaussian sampler it is not hardened against the
    attacks on low-order bits described by Mironov (2012).
    """
    return sigma * jax.random.normal(key, shape, dtype=jnp.float32)
