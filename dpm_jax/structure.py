"""A private "no structure" decision at every node: is any window of the node's inner part emptier
than half of what it would hold if the node's points were uniform over its cell?

Not in the DPM paper ("DPM: Clustering Sensitive Data through Separation"): Algorithm 1 stops a
node only when a child of its drawn split falls below tau_e (line 18). A node without cluster
structure (uniform noise) splits into two halves that both pass that rule, so such data grow the
tree to its full depth and DPM reports dozens of clusters where there are none.

The test, per node, from the half-bin counts the level's scores are computed from (the cell grid,
:mod:`dpm_jax.histogram`): for every dimension and every inner boundary i of the cell (the
candidates of :func:`dpm_jax.scoring.boundary_statistics`) with u/8 <= i <= 7u/8 (u the cell's
half-bins: the middle three quarters of the cell, a public set), let W_i be the node's points in
the window of :data:`TEST_WINDOW` half-bins on each side of i (the default ``split_window``,
whatever the run's; clipped to the cell) and

    theta_i = floor(gamma N h_i / u),  gamma = 1/2,  N = n~ (released),  h_i = the window's half-bins;
    Q = min_i (W_i - theta_i),  Q~ = Q + Z,  Z discrete Laplace with epsilon_str_l;
    the node halts (becomes a leaf) iff it is tested and Q~ > 0.

So a node goes on splitting only where some window in the middle of its cell holds less than half
the node's average density: a gap between clusters holds about none, uniform data about 2 theta
everywhere. The middle three quarters, not every boundary: the tails of any cluster are empty.

Why a test and not a "halt" candidate in the exponential mechanism (which would cost nothing): a
halt candidate needs a public score, and Definition 7's score mixes centreness into it. The split
that cuts a cluster of a tenth of the node off at its gap has centreness c = 0.31 (Definition 6,
t = 0.3, q = 1/12: D = N/11), while the central split of uniform data scores c = 1 with
emptiness 1 - alpha w / B (0.77 with the defaults): any public score that halts uniform data also
halts every split that cuts off less than about a third of a node. And not a test of the *drawn*
split's window: on unbalanced data the exponential mechanism often draws the centre of a large
cluster at the root (its centreness outweighs the gap's emptiness), and such a test halts there.

Gate (public): a node is tested only where epsilon_str_l theta >= :data:`GATE_NATS` (theta of a
full window), so that a node with an empty window halts with probability P[Z > theta] <
e^-GATE_NATS (below 0.1 %); below that (few points, little budget) it splits as in the paper,
and the test's budget is still charged (the ledger states it whatever the data). A false halt
at the root ends the run at k = 1: with a gate of 3 nats (5 %) and Equation 2's weights, one
Synth-10d key in 30 did (the budget's :func:`dpm_jax.budget.structure_weights` now halve per
level, so the root and level 1 pass this gate at n = 100,000, epsilon = 1).

Privacy: N, the cells and so every theta_i and the set of boundaries are public. Adding or removing
one point changes each W_i by at most one (a point lies in several windows, but adds one to each),
so the minimum Q changes by at most one, and only in the point's node (the nodes of a level are
disjoint): sensitivity 1 (maximum n: 2**31 - 1, the int32 counts; W_i is capped at 2**30 before
the difference, a 1-Lipschitz map, so Q stays in int32), (epsilon_str_l, sampler delta)-DP per
level for the exact discrete Laplace sampler (:func:`dpm_jax.mechanisms.count_noise`), composed
sequentially with the level's other releases (ledger line ``structure/level{l}``,
:mod:`dpm_jax.dpm_releases`). Only the halt bit is released (post-processing of Q~).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpm_jax._arrays import divide
from dpm_jax import exact
from dpm_jax.mechanisms import add_count_noise
from dpm_jax.scoring import boundary_statistics

__all__ = ["excess_of_windows", "full_window_theta", "halts"]

STRUCTURE_RATIO = 0.5  # gamma: a gap is a window below half the node's average density
GATE_NATS = 7.0  # test only where epsilon theta >= this: an empty window halts with probability < e^-7
INNER_EIGHTHS = 1  # the boundaries tested leave at least this many eighths of the cell on each side
# The test's window, half-bins on each side (the default split_window's): fixed, not the split's window, so
# that a wider split window (DPMConfig.split_window, e.g. 12 for large clusters beside small ones) does
# not widen the gaps the test looks for beyond the gaps between many close clusters.
TEST_WINDOW = 6


def window_excess(counts: jax.Array, used: jax.Array, node_size: jax.Array, window: int) -> tuple[jax.Array, jax.Array]:
    """(Q, theta of a full window), (nodes,) int32 each: Q = min_i (W_i - theta_i) over the inner boundaries.

    ``counts`` (nodes, d, 2B) the level's half-bin counts (exact), ``used`` (nodes, d) the cells'
    half-bins, ``node_size`` (nodes,) the released n~ (public; float32). Nodes without an inner
    boundary get Q = 2**30 (no gap: such a node is never tested, see :func:`halts`'s gate).
    """
    intervals, _ = boundary_statistics(counts, window)  # (nodes, d, 2B): boundary i at index i - 1
    return excess_of_windows(intervals, used, node_size, window), full_window_theta(used, node_size, window)


def excess_of_windows(intervals: jax.Array, used: jax.Array, node_size: jax.Array, window: int) -> jax.Array:
    """(nodes,) int32 Q of :func:`window_excess`, from the window counts W_i themselves ((nodes, d, 2B),
    boundary i at index i - 1: :func:`dpm_jax.scoring.window_counts`), which the split scores'
    cumulative sum gives."""
    boundary = jnp.arange(1, intervals.shape[-1] + 1)
    cells = used[..., None]  # (nodes, d, 1)
    inner = (8 * boundary >= INNER_EIGHTHS * cells) & (8 * boundary <= (8 - INNER_EIGHTHS) * cells) & (boundary < cells)
    inside = jnp.minimum(boundary + window, cells) - jnp.maximum(boundary - window, 0)
    theta = jnp.floor(STRUCTURE_RATIO * _node_scale(used, node_size)[..., None] * inside.astype(jnp.float32))
    theta = jnp.clip(theta, 0.0, 2.0**30).astype(jnp.int32)  # public, so its float rounding is too
    excess = jnp.where(inner, jnp.minimum(intervals, 2**30) - theta, 2**30)
    return jnp.min(excess, axis=(1, 2))


def _node_scale(used: jax.Array, node_size: jax.Array) -> jax.Array:
    """(nodes, d) float32: the node's released n~ per half-bin of its cell, per dimension."""
    return divide(jnp.maximum(node_size, 0.0)[:, None], jnp.maximum(used, 1).astype(jnp.float32))


def full_window_theta(used: jax.Array, node_size: jax.Array, window: int) -> jax.Array:
    """(nodes,) int32: a full window's theta (the gate's), from public values only (n~, the cells)."""
    full = jnp.floor(STRUCTURE_RATIO * _node_scale(used, node_size)[:, 0] * (2 * window) * jnp.ones(()))
    return jnp.clip(full, 0.0, 2.0**30).astype(jnp.int32)


def passes_gate(full_theta: jax.Array, epsilon) -> jax.Array:
    """(nodes,) bool: epsilon theta >= GATE_NATS (public: the node may be tested)."""
    return jnp.asarray(epsilon, jnp.float32) * full_theta.astype(jnp.float32) >= GATE_NATS


def halts(excess: jax.Array, noise: exact.Int, full_theta: jax.Array, epsilon, tested: jax.Array) -> jax.Array:
    """(nodes,) bool: the node is tested, passes the gate epsilon theta >= GATE_NATS, and Q + Z > 0 (exact).

    ``tested`` (nodes,) the nodes that drew a split this level.
    """
    noisy = exact.clip_to_int32(add_count_noise(excess, noise), -(2**31) + 1, 2**31 - 1)
    return tested & passes_gate(full_theta, epsilon) & (noisy > 0)
