"""The depth of a synthesis's partition, lowered privately where the rule's cells would be too thin.

Not in "Differentially Private Synthetic Data Using KD-Trees": the paper's s1, s2 (and the
n~ epsilon rule that replaces them here, :func:`dpm_jax.synth.plan.depth_choice`) fix the
resolution from n epsilon alone. How fine the cells may be also depends on how much of the
public box the data fill, which nothing public says: the rule's constant was fitted on Balog
et al.'s mixtures, which fill a small part of their box, and on data that fill theirs (uniform
or standardised columns in d = 5) it picks cells so thin that none reaches the leaf threshold
and nothing is released (benchmarks/synth_fill.py).

The search lowers the depth privately. For candidate depth h_i with leaf threshold t_i, the
*excess mass* E_i = sum over the cells of depth h_i of (count - t_i)_+ says how much of the data
sits above the threshold (about what the leaves can release); it shrinks as the cells get
finer. From the coarsest candidate up to the rule's, the sparse vector technique stops at the
first i whose noisy E_i falls below T = ``fraction`` n~ - ``margin`` / epsilon_1 (n~ released
earlier) and takes the candidate before it (the coarsest if i = 0; the rule's if none falls
below). The margin, in noise scales, keeps the noise from lowering the rule's depth on data whose
excess is above fraction n~: each such query stops the search with probability below
0.5 e^-6 (1 + 3) = 0.01 (at most about 0.07 over 25 queries all at the edge). Where T <= 0 (n~
epsilon too small for the search to tell anything) the rule's depth stands. Searching upwards
puts the queries far above T first, where the noise rarely stops the search: from the rule's
depth downwards, every candidate with E_i near 0 (the thin cells the search exists to avoid)
would be a chance to stop at the wrong end.

Privacy (Lyu, Su and Li, "Understanding the Sparse Vector Technique for Differential Privacy",
VLDB 2017, Algorithm 1 with c = 1 and monotonic queries): adding a record raises one cell's
count per depth by one, so every E_i rises by 0 or 1; removing one lowers each by 0 or 1 (L-inf
sensitivity 1, all in one direction). With rho ~ DLap(epsilon_1) on the threshold and nu_i ~
DLap(epsilon_2) on each query (P(Z = k) ∝ e^(-epsilon |k|)), the stopping index k (the first
i with E_i + nu_i < T + rho) is (epsilon_1 + epsilon_2, 0)-DP. Let E' = E + delta, delta in
{0, 1}^L. P_E(k) <= e^epsilon_2 P_E'(k): the earlier queries continue more easily under E', and
nu_k -> nu_k - 1 keeps the k-th below (cost e^epsilon_2). P_E'(k) <= e^(epsilon_1 + epsilon_2)
P_E(k): rho -> rho - 1 (cost e^epsilon_1) makes every earlier query continue under E as under E'
(delta_i <= 1), and where delta_k = 0 also nu_k -> nu_k - 1 (cost e^epsilon_2). "None stops"
needs the rho shift alone. Removal is the same pair with the roles swapped. The chosen depth is
a function of the stopping index (and of n~). The shifts are integers, so the discrete Laplace's
ratio is exactly e^epsilon per unit. The
samplers' error (1 + L draws, :func:`dpm_jax.mechanisms.count_sampler_tv` each) is charged as
delta = tv (1 + e^epsilon). The comparison is in exact integers (:mod:`dpm_jax.exact`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax import exact
from dpm_jax.ledger import LedgerEntry
from dpm_jax.mechanisms import count_noise, count_sampler_tv, tv_delta
from dpm_jax.releases import ledger_line

__all__ = ["DepthSearch", "excess_mass"]

# T = SEARCH_FRACTION n~ - SEARCH_MARGIN noise scales. The RKHS distance of a grid release is least where
# about 0.9 of the data sits above the threshold on Balog et al.'s d = 2 mixture, whatever the box
# (docs/synthetic.md), while on their d = 5 mixture the rule's finer depths (0.63-0.75 above) win; 0.6
# lowers the rule's depth where its cells lose more than that and keeps Figure 3's depths but on two keys.
SEARCH_FRACTION = 0.6
SEARCH_MARGIN = 6.0


def excess_mass(codes: jax.Array, valid: jax.Array, total: int, depths, thresholds, last=None) -> jax.Array:
    """(L,) int32 E_i = sum over the cells of depth ``depths[i]`` of (count - ``thresholds[i]``)_+,
    thresholds >= 0 (the leaves' are >= 1), for i <= ``last`` (may be traced; None: every i); 0 past it.

    ``codes`` (n,) sorted cell codes of ``total`` bits, valid points first. NOT differentially
    private (exact counts): :class:`DepthSearch` releases a function of it.

    Without a segment sum per depth: E = (valid points) - (valid points whose rank in their cell
    is below t), since sum (c - t)_+ = sum c - sum min(c, t). A point starts a cell of depth h when
    its code and the previous one share fewer than h leading bits, so one count of shared leading
    bits serves every depth, and each depth costs one running maximum. The search queries the
    candidates up to the rule's (released) index only, so the loop stops there: its trip count, and
    so its run time, follows released values.
    """
    depth_table, threshold_table = (np.asarray(a, np.int32) for a in (depths, thresholds))
    count = depth_table.shape[0]

    def upto(codes, valid, stop):  # no traced value closed over: custom_vmap traces it on its own
        depths, thresholds = jnp.asarray(depth_table), jnp.asarray(threshold_table)
        n = codes.shape[0]
        shared = jax.lax.clz(jnp.bitwise_xor(codes, jnp.roll(codes, 1))).astype(jnp.int32) - (32 - total)
        index = jnp.arange(n, dtype=jnp.int32)
        points = jnp.sum(valid, dtype=jnp.int32)

        def one(i, excess):
            starts = (index == 0) | (shared < depths[i])
            first = jax.lax.cummax(jnp.where(starts, index, 0))  # the index of the point's cell's first point
            return excess.at[i].set(points - jnp.sum(valid & (index - first < thresholds[i]), dtype=jnp.int32))

        return jax.lax.fori_loop(0, stop, one, jnp.zeros(count, jnp.int32))

    if last is None:
        return upto(codes, valid, count)
    return _shared_over_the_batch(upto)(codes, valid, jnp.minimum(jnp.asarray(last, jnp.int32) + 1, count))


def _shared_over_the_batch(upto):
    """``upto(codes, valid, stop)`` (rows past ``stop`` zero) that ``jax.vmap`` runs to the batch's
    largest ``stop`` and then zeroes each member's rows past its own.

    Batched by jax's rule, a loop with a batched trip count batches its whole carry, so over keys
    (the data shared, each key's stop its own) every key would repeat the passes over the data.
    Here the passes run once for the batch (per data set where the data are batched too); the
    trip count is still a function of released values (every member's rule index). The rows
    each member keeps are those it would compute alone, bit for bit. Nested batches: data sets
    outside keys share the passes per data set; keys outside data sets repeat them per key (the
    outer axis batches this rule with jax's own rules).
    """
    loop = jax.custom_batching.custom_vmap(upto)

    @loop.def_vmap
    def batched(axis_size, in_batched, codes, valid, stop):
        codes_batched, valid_batched, stop_batched = in_batched
        longest = jnp.max(stop) if stop_batched else stop
        data_batched = codes_batched or valid_batched
        axes = (0 if codes_batched else None, 0 if valid_batched else None, None)
        excess = jax.vmap(upto, in_axes=axes)(codes, valid, longest) if data_batched else upto(codes, valid, longest)
        if not stop_batched:
            return excess, data_batched
        kept = jnp.arange(excess.shape[-1]) < stop[:, None]
        return jnp.where(kept, excess, 0), True

    return loop


class DepthSearch(NamedTuple):
    """The sparse vector technique over the candidates' excess mass (module docstring).

    ``epsilon`` is split equally between the threshold's noise and the queries'; ``candidates``
    (L) is the number of depths the plan lists.
    """

    name: str
    epsilon: float
    stream: str
    candidates: int
    fraction: float = SEARCH_FRACTION
    margin: float = SEARCH_MARGIN
    rows: str = "depth search"
    level: int | None = None
    rule: str = "excess mass per candidate depth, monotone (sparse vector technique)"

    @property
    def part_epsilon(self) -> float:
        """epsilon_1 = epsilon_2: the threshold's and each query's discrete Laplace parameter."""
        return self.epsilon / 2.0

    @property
    def sampler_delta(self) -> float:
        return tv_delta((1 + self.candidates) * count_sampler_tv(self.part_epsilon), self.epsilon)

    def draw(self, key: jax.Array, excess: jax.Array, start: jax.Array, noisy_size: jax.Array) -> jax.Array:
        """The chosen index: i - 1 for the first i <= ``start`` with E_i + nu_i < T + rho (0 if i = 0),
        ``start`` if there is none or if T <= 0.

        ``excess`` (L,) int32 from :func:`excess_mass`; ``start`` the rule's index and
        ``noisy_size`` (float32) n~, both released earlier.
        """
        size = noisy_size * np.float32(self.fraction) - np.float32(self.margin / self.part_epsilon)
        target = jnp.clip(jnp.floor(size), 0.0, 2.0**30).astype(jnp.int32)  # public: from n~ alone
        rho = count_noise(jax.random.fold_in(key, 0), np.full((), self.part_epsilon))
        nu = count_noise(jax.random.fold_in(key, 1), np.full(excess.shape, self.part_epsilon))
        raised = exact.add(exact.from_int32(jnp.broadcast_to(target, excess.shape)), rho)
        below = exact.less(exact.add(exact.from_int32(excess), nu), raised)
        index = jnp.arange(excess.shape[0], dtype=jnp.int32)
        queried = (index <= start) & (target > 0)  # T <= 0: no query, the rule's depth
        stop = jnp.min(jnp.where(below & queried, index, start + 1))
        return jnp.maximum(stop - 1, 0)

    def entry(self) -> LedgerEntry:
        return ledger_line(self, "sparse_vector", self.sampler_delta, 1, f"L-inf: {self.rule}", 1.0 / self.part_epsilon)
