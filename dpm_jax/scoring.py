"""Split scores of DPM: emptiness, centreness and their sum (Section 3.2).

A level of the recursion bins every coordinate into *half-intervals* of width
beta/2 starting at the lower bound ``a``. Candidate j of a dimension sits at
``s_j = a + (j + 1/2) beta`` and its split interval is ``[a + j beta, a + (j+1) beta)``,
so one histogram of half-bins per (node, dimension) gives both sub-scores:

* ``|s_j|`` (Definition 5) = half-bins 2j and 2j+1;
* the rank r(s_j) (Definition 6), the number of points strictly below s_j,
  = the half-bins 0..2j.

Deviation from Definition 5, stated: the split interval is half-open, so every
point lies in exactly one interval per dimension (the closed intervals of the paper
share their end points). The sensitivity of Lemma 4 is unchanged.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpm_jax._arrays import cumsum_last

__all__ = ["candidate_statistics", "emptiness", "centreness", "split_scores", "score_sensitivity"]


def candidate_statistics(half_bin_counts: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """From (..., 2B) half-bin counts to (interval counts |s_j|, ranks r_j), each (..., B)."""
    interval_counts = half_bin_counts[..., 0::2] + half_bin_counts[..., 1::2]
    ranks = cumsum_last(half_bin_counts)[..., 0::2]
    return interval_counts, ranks


def emptiness(interval_counts, n_tilde):
    """Definition 5: e = 1 - |s| / n~."""
    return 1.0 - interval_counts / n_tilde


def centreness(ranks, n_tilde, t: float, q: float):
    """Definition 6: piecewise-linear in the rank, 1 at the median, t at ranks n~q.

    Ranks outside [0, n~] (possible because n~ is noisy) use the outer formula,
    which keeps the slope, and hence the sensitivity, of Lemma 3.
    """
    half = n_tilde / 2.0
    distance_from_border = half - jnp.abs(ranks - half)
    outer = distance_from_border * t / (n_tilde * q)
    inner = (t - 2.0 * q) / (1.0 - 2.0 * q) + distance_from_border * (1.0 - t) / (half - n_tilde * q)
    in_outer = (ranks <= n_tilde * q) | (ranks >= n_tilde - n_tilde * q)
    return jnp.where(in_outer, outer, inner)


def split_scores(half_bin_counts, n_tilde, t: float, q: float, alpha: float):
    """Definition 7: f = c + alpha * e for every candidate.

    Args:
      half_bin_counts: (..., 2B) counts; leading axes are batch axes.
      n_tilde: noisy counts broadcastable to the leading axes (..., 1 added here).
        Values below 1 are clamped to 1 so the scores stay finite; the clamp only
        raises the denominator, so the sensitivity bound below still holds.
    Returns:
      (..., B) scores.
    """
    n_tilde = jnp.maximum(n_tilde, 1.0)[..., None]
    interval_counts, ranks = candidate_statistics(half_bin_counts)
    return centreness(ranks, n_tilde, t, q) + alpha * emptiness(interval_counts, n_tilde)


def score_sensitivity(n_tilde, offset: float, t: float, q: float, alpha: float):
    """Lemma 5: Delta_f = (t/q + alpha) / (n~ - lambda), denominator clamped at 1.

    With n~ fixed (it is released by the Laplace mechanism) the scores change by at
    most (t/q + alpha) / max(n~, 1) when one point is added or removed (Lemmas 3
    and 4: a rank and an interval count change by at most one). Since
    max(n~ - lambda, 1) <= max(n~, 1), the returned value is always an upper bound,
    also in the low-probability event n~ - lambda > |S| that the paper charges
    delta_cnt for.
    """
    return (t / q + alpha) / jnp.maximum(n_tilde - offset, 1.0)
