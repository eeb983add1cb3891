"""DP-Lloyd: differentially private k-means on bounded data (Su et al., 2016).

The DP baseline of the DPM paper (Section 6.1; the
authors run diffprivlib's ``KMeans``, which implements DPLloyd of Su, Cao, Li,
Bertino and Jin, "Differentially private k-means clustering", CODASPY 2016).
This module follows diffprivlib's documented procedure, in JAX:

1. clip the points to the public ``bounds`` (a per-record map: DP is unaffected);
2. initial centres: data-independent, uniform in the bounds box and pairwise
   separated (diffprivlib's scheme, :func:`separated_uniform_centers`);
3. ``T`` iterations: assign every point to its nearest centre, then release, per
   cluster, a noisy count and a noisy coordinate sum; the new centre is the noisy
   sum over the noisy count, clipped to the box, except that a cluster whose noisy
   count is below 1 keeps its previous centre (diffprivlib keeps the centre of a
   cluster that is empty; deciding on the noisy count keeps that decision DP);
4. ``T`` follows diffprivlib's rule (:func:`su_num_iterations`), clamped to [2, 7].

Budget (Su et al.'s split, :func:`dp_lloyd_budget`): every iteration gets
epsilon / T; within it, the count and the sum vector share it as
1 : cbrt(4 d rho^2) with rho = 0.225. The parts add up exactly to epsilon.

Privacy (add/remove-one neighbours, Definition 1 of the DPM paper): the centres
of an iteration are public, so the clusters partition the data and each point
changes one count by 1 and one sum by its mid-shifted coordinates, whose L1
norm is at most sum_j (hi_j - lo_j) / 2. Discrete Laplace (two-sided geometric)
noise on the counts (scale 1/eps_count; the library's exact sampler added in
integers, :func:`dpm_jax.mechanisms.count_noise`) and Laplace noise on the sums
(scale L1 / eps_sum per coordinate) make one iteration (eps_count + eps_sum, 0)-DP
by parallel composition over the clusters; T iterations compose sequentially to
(epsilon, 0). This is the textbook guarantee of a *baseline*: the sums and their
Laplace noise are float32, so unlike :func:`dpm_jax.cluster` the claim is not made
for the machine's arithmetic (the count sampler adds its total variation on top).
Clamping counts to >= 1, centres to the box, and keeping a centre where the noisy
count is below 1 are post-processing.

Differences from diffprivlib 0.6 (deliberate):
* diffprivlib assigns the count budget normaliser * 1 and *each* coordinate of the
  sum normaliser * cbrt(4 d rho^2) with normaliser = epsilon / (T (d + cbrt(4 d rho^2))),
  so an iteration spends (1 + d cbrt(4 d rho^2)) / (d + cbrt(4 d rho^2)) times its
  share: 1.21 epsilon in total for d = 10, 2.66 epsilon for d = 100. Here the
  parts add up to epsilon.
* diffprivlib skips clusters without points (which reveals that they are empty)
  and uses the bounded-domain Laplace mechanism with sensitivity hi - lo per
  coordinate; here every cluster is noised, the sums are of mid-shifted points
  (sensitivity halved), and the box constraint is applied by clipping. Where noise
  swamps a small cluster's sum, clipping puts its centre on the faces of the box
  while the bounded-domain mechanism spreads it inside the box.
* diffprivlib computes T from the true n; here n is an argument the caller must
  treat as public (the harness uses the data set's published size).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax.eval.bounds import broadcast_bounds
from dpm_jax.eval.metrics import DEFAULT_CHUNK_SIZE, assign_to_centers
from dpm_jax.mechanisms import add_count_noise, count_noise

__all__ = [
    "SU_RHO",
    "DPLloydBudget",
    "DPLloydResult",
    "su_num_iterations",
    "dp_lloyd_budget",
    "separated_uniform_centers",
    "count_noise_of_iterations",
    "dp_lloyd",
]

SU_RHO = 0.225  # Su et al.'s coordinate normalisation factor (diffprivlib's default)
MAX_INIT_RETRIES = 100  # diffprivlib: consecutive rejected draws before the separation halves


def _count_to_sum_ratio(dimensions: int, rho: float) -> float:
    """Su et al.'s epsilon ratio eps_sum / eps_count = cbrt(4 d rho^2)."""
    return float(np.cbrt(4.0 * dimensions * rho**2))


def su_num_iterations(epsilon: float, num_points: int, dimensions: int, num_clusters: int, rho: float = SU_RHO) -> int:
    """Number of Lloyd iterations for DP-Lloyd (diffprivlib's rule).

    ``int(clip(epsilon / epsilon_m, 2, 7))`` with
    ``epsilon_m = sqrt(500 k^3 / n^2 * (d + cbrt(4 d rho^2))^3)``. ``num_points``
    must be public (a published size, or a noisy count paid for separately).
    """
    epsilon_m = math.sqrt(
        500.0 * num_clusters**3 / num_points**2 * (dimensions + _count_to_sum_ratio(dimensions, rho)) ** 3
    )
    return int(max(min(epsilon / epsilon_m, 7.0), 2.0))


class DPLloydBudget(NamedTuple):
    """How DP-Lloyd spends its epsilon; all numbers are public.

    Attributes:
      epsilon: the total (epsilon, 0)-DP budget.
      num_iterations: T.
      count_epsilon: per iteration, for the noisy counts (two-sided geometric).
      sum_epsilon: per iteration, for the noisy sum vectors (Laplace).
      sum_l1_sensitivity: L1 norm bound of one mid-shifted point, sum_j (hi_j - lo_j) / 2.
      count_noise_scale: 1 / count_epsilon.
      sum_noise_scale: sum_l1_sensitivity / sum_epsilon (Laplace scale per coordinate).
    """

    epsilon: float
    num_iterations: int
    count_epsilon: float
    sum_epsilon: float
    sum_l1_sensitivity: float
    count_noise_scale: float
    sum_noise_scale: float

    @property
    def total_epsilon(self) -> float:
        """Sequential composition over the iterations: T (count_epsilon + sum_epsilon)."""
        return math.fsum([self.count_epsilon, self.sum_epsilon] * self.num_iterations)


def dp_lloyd_budget(epsilon: float, bounds, dimensions: int, num_iterations: int, rho: float = SU_RHO) -> DPLloydBudget:
    """Split ``epsilon`` over ``num_iterations`` iterations and, within each, Su et al.'s ratio.

    Args:
      epsilon: total budget, > 0.
      bounds: public (lo, hi), scalars or (d,) sequences.
      dimensions: d.
      num_iterations: T >= 1.
      rho: Su et al.'s normalisation factor.
    """
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    lower, upper = broadcast_bounds(bounds, dimensions)
    if not np.all(lower < upper):
        raise ValueError(f"bounds need lo < hi in every dimension, got {bounds!r}")
    per_iteration = epsilon / num_iterations
    ratio = _count_to_sum_ratio(dimensions, rho)
    count_epsilon = per_iteration / (1.0 + ratio)
    sum_epsilon = per_iteration - count_epsilon
    l1_sensitivity = float(np.sum((upper - lower) / 2.0))
    return DPLloydBudget(
        float(epsilon),
        int(num_iterations),
        count_epsilon,
        sum_epsilon,
        l1_sensitivity,
        1.0 / count_epsilon,
        l1_sensitivity / sum_epsilon,
    )


@functools.partial(jax.jit, static_argnames=("num_clusters", "max_retries"))
def separated_uniform_centers(
    key: jax.Array, num_clusters: int, lower: jax.Array, upper: jax.Array, max_retries: int = MAX_INIT_RETRIES
) -> jax.Array:
    """Data-independent initial centres, spread over the box (diffprivlib's initialisation).

    Starting from a separation p = min_j (hi_j - lo_j) / 2, centres are drawn one
    after the other uniformly from the box shrunk by p on every side and kept when
    they are at least 2p from all kept centres; after ``max_retries`` consecutive
    rejections the attempt is abandoned and p halves. Drawing ``max_retries``
    candidates at once and keeping the first acceptable one is the same
    distribution as drawing them one by one. Uses no data, so no privacy budget.

    Args:
      key: PRNG key.
      num_clusters: k (static).
      lower, upper: (d,) public bounds.
    Returns:
      (k, d) centres inside the box.
    """
    dimensions = lower.shape[0]
    width = upper - lower
    initial_separation = jnp.min(width) / 2.0

    def attempt(attempt_key, separation):
        def place(index, state):
            centers, placed_all = state
            draws = jax.random.uniform(
                jax.random.fold_in(attempt_key, index), (max_retries, dimensions), dtype=lower.dtype
            )
            candidates = lower + separation + draws * (width - 2.0 * separation)
            distances = jnp.sqrt(jnp.sum((candidates[:, None, :] - centers[None, :, :]) ** 2, axis=-1))
            kept_before = jnp.arange(num_clusters)[None, :] < index
            acceptable = jnp.all(jnp.where(kept_before, distances >= 2.0 * separation, True), axis=1)
            first = jnp.argmax(acceptable)
            return centers.at[index].set(candidates[first]), placed_all & acceptable[first]

        start = jnp.zeros((num_clusters, dimensions), lower.dtype)
        return jax.lax.fori_loop(0, num_clusters, place, (start, jnp.bool_(True)))

    def not_done(state):
        _, placed_all, _, _ = state
        return ~placed_all

    def halve(state):
        _, _, separation, round_index = state
        separation = separation / 2.0
        centers, placed_all = attempt(jax.random.fold_in(key, round_index + 1), separation)
        return centers, placed_all, separation, round_index + 1

    centers, placed_all = attempt(jax.random.fold_in(key, 0), initial_separation)
    centers, *_ = jax.lax.while_loop(not_done, halve, (centers, placed_all, initial_separation, 0))
    return centers


class DPLloydResult(NamedTuple):
    """Output of :func:`dp_lloyd`.

    Differentially private (released under ``budget``):
      centers: (k, d) centres, inside the bounds box.
      noisy_counts: (T, k) noisy cluster sizes released in every iteration.
    NOT differentially private:
      labels_nonprivate: (n,) nearest final centre of every point; do not publish.
    Public:
      budget: the :class:`DPLloydBudget` that was spent.
    """

    centers: jax.Array
    noisy_counts: jax.Array
    labels_nonprivate: jax.Array
    budget: DPLloydBudget


@functools.partial(jax.jit, static_argnames=("num_clusters", "chunk_size"))
def _dp_lloyd_arrays(
    key, points, lower, upper, count_noise_limbs, sum_noise_scale, *, num_clusters: int, chunk_size: int
):
    points = jnp.clip(points, lower, upper)  # per-record map: DP is unaffected
    middle = (lower + upper) / 2.0
    shifted = points - middle
    centers = separated_uniform_centers(jax.random.fold_in(key, 0), num_clusters, lower, upper)
    num_iterations = count_noise_limbs[0].shape[0]

    def iteration(centers, inputs):
        iteration_index, noise_limbs = inputs
        _, sum_key = _iteration_keys(key, iteration_index)
        labels = assign_to_centers(points, centers, chunk_size=chunk_size).labels
        counts = jax.ops.segment_sum(jnp.ones(points.shape[0], jnp.int32), labels, num_segments=num_clusters)
        sums = jax.ops.segment_sum(shifted, labels, num_segments=num_clusters)
        # exact integers |S| + Z, converted for the division (post-processing)
        noisy_counts = exact.to_float32(add_count_noise(counts, exact.Int(noise_limbs)))
        noisy_sums = sums + sum_noise_scale * jax.random.laplace(sum_key, sums.shape, sums.dtype)
        new_centers = jnp.clip(middle + noisy_sums / jnp.maximum(noisy_counts, 1.0)[:, None], lower, upper)
        new_centers = jnp.where(noisy_counts[:, None] >= 1.0, new_centers, centers)
        return new_centers, noisy_counts

    centers, noisy_counts = jax.lax.scan(iteration, centers, (jnp.arange(num_iterations), count_noise_limbs))
    labels = assign_to_centers(points, centers, chunk_size=chunk_size).labels
    return centers, noisy_counts, labels


def _iteration_keys(key: jax.Array, iteration_index) -> tuple[jax.Array, jax.Array]:
    """(count key, sum key) of iteration t: ``split(fold_in(key, t + 1))``."""
    count_key, sum_key = jax.random.split(jax.random.fold_in(key, iteration_index + 1))
    return count_key, sum_key


def count_noise_of_iterations(key: jax.Array, budget: DPLloydBudget, num_clusters: int) -> exact.Int:
    """(T, k) exact discrete Laplace noise of the counts, row t from iteration t's count key.

    Drawn outside the jitted iterations because the exact sampler's integer
    thresholds are built on the host from the (public) count epsilon
    (:func:`dpm_jax.mechanisms.count_noise`).
    """
    epsilons = np.full(num_clusters, budget.count_epsilon)
    rows = [count_noise(_iteration_keys(key, t)[0], epsilons) for t in range(budget.num_iterations)]
    return exact.Int(tuple(jnp.stack([row.limbs[i] for row in rows]) for i in range(len(rows[0].limbs))))


def dp_lloyd(
    key: jax.Array,
    points,
    num_clusters: int,
    epsilon: float,
    bounds,
    *,
    num_iterations: int | None = None,
    num_points_public: int | None = None,
    rho: float = SU_RHO,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> DPLloydResult:
    """DP-Lloyd: (epsilon, 0)-DP k-means of ``points`` clipped to the public ``bounds``.

    Args:
      key: PRNG key; the initial centres use ``fold_in(key, 0)``, iteration t
        ``fold_in(key, t + 1)``, split into the count and the sum key
        (:func:`count_noise_of_iterations` draws the counts' noise).
      points: (n, d) data; values outside ``bounds`` are clipped.
      num_clusters: k.
      epsilon: total privacy budget.
      bounds: public (lo, hi), scalars or (d,) sequences. Required.
      num_iterations: T; default :func:`su_num_iterations` from ``num_points_public``.
      num_points_public: public size of the data set, needed when
        ``num_iterations`` is not given.
      rho: Su et al.'s normalisation factor.
      chunk_size: points per distance block.
    """
    if bounds is None:
        raise ValueError("bounds are required: pass the public range of the data as (lo, hi)")
    points = jnp.asarray(points, jnp.float32)
    dimensions = points.shape[1]
    if num_iterations is None:
        if num_points_public is None:
            raise ValueError(
                "pass num_iterations, or num_points_public to use Su et al.'s rule "
                "(the true size of private data is not public)"
            )
        num_iterations = su_num_iterations(epsilon, num_points_public, dimensions, num_clusters, rho)
    budget = dp_lloyd_budget(epsilon, bounds, dimensions, num_iterations, rho)
    lower, upper = (jnp.asarray(b) for b in broadcast_bounds(bounds, dimensions, np.float32))
    centers, noisy_counts, labels = _dp_lloyd_arrays(
        key,
        points,
        lower,
        upper,
        count_noise_of_iterations(key, budget, num_clusters).limbs,
        budget.sum_noise_scale,
        num_clusters=num_clusters,
        chunk_size=chunk_size,
    )
    return DPLloydResult(centers, noisy_counts, labels, budget)
