"""After the run: why a released ClusterResult came out as it did, from its released parts only.

:func:`explain` reads the split tree (noisy node sizes, drawn dimensions and
positions, which nodes split), the ledger and the number of clusters of a
:class:`~dpm_jax.ClusterResult` -- all released under the budget -- and public
hyper-parameters. It never reads the data nor ``labels_nonprivate``, so it is
post-processing of the release and costs no privacy.

Per node of the tree it gives the exponential mechanism's exponent scale B at the
node (Lemma 5 of "DPM: Clustering Sensitive Data through Separation":
B = epsilon_exp,l max(n~ - lambda_l, 1) / (2 (t/q + alpha)), with epsilon_exp,l and
lambda_l read from the run's releases, :mod:`dpm_jax.dpm_releases`), whether its draw was near random
(:func:`dpm_jax.depth.near_random`), and for every leaf why it stopped
(Algorithm 1, lines 14-18):

* ``depth limit``: the leaf is at the run's depth;
* ``empty child``: the drawn split lies outside the node's box (bounded by its
  ancestors' splits and, when given, the public bounds), so one child is empty
  whatever the data: the draw was one of the halting candidates of the theory paper
  ("Understanding the Theoretical Guarantees of DPM", Section 2.1). Only the paper's
  global grid (``split_grid="paper"``) draws there; the cell grid's candidates lie
  inside the node's cell;
* ``stopping rule``: a noisy child count fell below tau_e (which includes a child
  left empty because the data do not fill the box: the release cannot tell), or, with the
  "no structure" test (``DPMConfig.structure_share`` > 0, the cell grid: :mod:`dpm_jax.structure`),
  the test halted the node: the release holds the halt, not which rule made it.

With the merge (``DPMConfig.merge_share`` > 0, :mod:`dpm_jax.merge`) a cluster may be a whole
subtree: every node below a merge root (a released cluster's node that was split) says which
group it was merged into, and the report counts the leaves the groups joined.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dpm_jax.budget import Budget
from dpm_jax.config import DPMConfig
from dpm_jax.depth import drawable_per_node, exponent_scale, near_random
from dpm_jax.diagnostics.plan import plan
from dpm_jax.scoring import score_coefficients

if TYPE_CHECKING:
    from dpm_jax.api import ClusterResult

__all__ = ["NodeExplanation", "Explanation", "explain", "DEPTH_LIMIT", "EMPTY_CHILD", "STOPPING_RULE"]

DEPTH_LIMIT, EMPTY_CHILD, STOPPING_RULE = "depth limit", "empty child", "stopping rule"


class NodeExplanation(NamedTuple):
    """One reached node of the released tree."""

    node: int  # heap id (root 1, children 2i, 2i + 1)
    level: int
    noisy_count: float  # n~ (released)
    exponent_scale: float | None  # B of the node's split draw; None at the run's depth (no draw)
    near_random: bool | None
    is_leaf: bool
    reason: str | None  # why a leaf stopped (DEPTH_LIMIT, EMPTY_CHILD, STOPPING_RULE); None if split
    merged_into: int | None = None  # the merge root whose group holds the node (dpm_jax.merge); None if none


class Explanation(NamedTuple):
    """:func:`explain`'s report; ``print(report)`` reads it out."""

    nodes: tuple[NodeExplanation, ...]
    k: int
    tau_e: float
    split_epsilons: tuple[float, ...]  # epsilon_exp per level, from the run's split releases
    count_offsets: tuple[float, ...]  # lambda per level, from the run's count releases
    max_reliable_k: int  # what the budget separates at the released n~ (dpm_jax.diagnostics.plan)

    @property
    def leaves(self) -> tuple[NodeExplanation, ...]:
        return tuple(node for node in self.nodes if node.is_leaf)

    @property
    def budget_limited(self) -> bool:
        """k reached what the budget separates: more clusters in the data would have been merged."""
        return self.k >= self.max_reliable_k

    def __str__(self) -> str:
        rows = [
            f"DPM result: k = {self.k}, released root size n~ = {self.nodes[0].noisy_count:,.0f}, "
            f"tau_e = {self.tau_e:,.1f}",
            f"{'node':>6} {'level':>5} {'n~':>10} {'B':>9}  {'draw':<12} outcome",
        ]
        for node in self.nodes:
            scale = "-" if node.exponent_scale is None else f"{node.exponent_scale:.3g}"
            draw = "-" if node.near_random is None else ("near random" if node.near_random else "informative")
            merged = "" if node.merged_into is None else f", merged into {node.merged_into}"
            rows.append(
                f"{node.node:>6} {node.level:>5} {node.noisy_count:>10,.0f} {scale:>9}  {draw:<12} "
                f"{'leaf: ' + node.reason if node.is_leaf else 'split'}{merged}"
            )
        reasons = [node.reason for node in self.leaves]
        rows.append(
            "leaves: "
            + ", ".join(f"{reasons.count(reason)} {reason}" for reason in (STOPPING_RULE, EMPTY_CHILD, DEPTH_LIMIT))
        )
        groups = {node.merged_into for node in self.leaves} - {None}
        if groups:
            joined = sum(node.merged_into is not None for node in self.leaves)
            rows.append(f"merged: {joined} leaves into {len(groups)} clusters (no split inside them cut a valley)")
        if self.budget_limited:
            rows.append(
                f"warning: k = {self.k} is at the limit of what this budget separates at n~ "
                f"(about {self.max_reliable_k} balanced clusters); the data may hold more clusters, "
                "merged for lack of budget (dpm_jax.diagnostics.plan says what more epsilon buys)"
            )
        return "\n".join(rows)


def _node_box(node: int, split_dim: np.ndarray, split_position: np.ndarray, lower, upper):
    """The box of ``node``: the public bounds (or +-inf) cut by its ancestors' splits (x < s left, x >= s right)."""
    lower, upper = lower.copy(), upper.copy()
    child = node
    while child > 1:
        parent = child // 2
        dim, position = split_dim[parent], split_position[parent]
        if child % 2 == 0:
            upper[dim] = min(upper[dim], position)
        else:
            lower[dim] = max(lower[dim], position)
        child = parent
    return lower, upper


def explain(result: ClusterResult, config: DPMConfig = DPMConfig(), bounds=None) -> Explanation:
    """Why ``result`` has its k leaves: per node B, near-random draws, and each leaf's reason to stop.

    ``config`` must be the hyper-parameters of the run (public; the run's depth is read
    from the result's ``depth``); ``bounds`` the public bounds, optional (without them an empty
    child is recognised only against the ancestors' splits). Reads only released
    parts of ``result`` (module docstring): no privacy cost.
    """
    tree = result.tree
    count = np.asarray(tree.noisy_count)
    if count.ndim != 1:
        raise ValueError(f"explain takes one result; got a batch (tree of shape {count.shape}): index it first")
    depth = int(np.asarray(result.depth))  # chosen by the run under tau_r="auto"
    releases = result.releases_at(depth)
    splits, offsets = releases.split_epsilons, releases.count_offsets[:depth]
    halvings = min(depth + config.tau_e_halvings, config.padded_depth)  # the run's default tau_e (tree.tree_inputs)
    config = config.at_depth(depth)
    if score_coefficients(config.t, config.q, config.alpha).sensitivity != releases.split_sensitivity:
        raise ValueError(
            f"config (t={config.t}, q={config.q}, alpha={config.alpha}) is not the run's: the "
            "split releases' sensitivity differs; pass the DPMConfig the result was computed with"
        )
    d = int(np.shape(result.centers)[-1])
    reached, is_split = np.asarray(tree.reached), np.asarray(tree.is_split)
    split_dim, split_position = np.asarray(tree.split_dim), np.asarray(tree.split_position, np.float64)
    edges = (-np.inf, np.inf) if bounds is None else bounds
    lower, upper = (np.broadcast_to(np.asarray(edge, np.float64), (d,)) for edge in edges)
    root = float(count[1])
    tau_e = root / 2**halvings if config.tau_e is None else float(config.tau_e)
    candidates = drawable_per_node(d, config)
    roots = {int(v) for v in np.asarray(result.leaf_node)[np.asarray(result.valid)] if is_split[v]}  # merge roots
    nodes = []
    for node in np.flatnonzero(reached):
        level = int(node).bit_length() - 1
        scale = None if level == depth else exponent_scale(splits[level], float(count[node]), offsets[level], config)
        reason = None
        if not is_split[node]:
            reason = DEPTH_LIMIT if level == depth else _stopping_reason(node, split_dim, split_position, lower, upper)
        nodes.append(
            NodeExplanation(
                int(node),
                level,
                float(count[node]),
                scale,
                None if scale is None else near_random(scale, candidates, config),
                not is_split[node],
                reason,
                _merge_root(int(node), roots),
            )
        )
    entries = [release.entry() for release in releases._replace(depth_count=None).in_order()]  # the run's own
    run_budget = Budget(math.fsum(e.epsilon for e in entries), math.fsum(e.delta for e in entries))
    reliable = plan(max(root, 1.0), d, run_budget, config).max_reliable_k()
    return Explanation(tuple(nodes), int(np.asarray(result.k)), tau_e, splits, offsets, reliable)


def _merge_root(node: int, roots: set[int]) -> int | None:
    """The merge root among ``node`` and its ancestors, or None."""
    while node >= 1 and node not in roots:
        node //= 2
    return node if node >= 1 else None


def _stopping_reason(node: int, split_dim, split_position, lower, upper) -> str:
    box_lower, box_upper = _node_box(node, split_dim, split_position, lower, upper)
    dim, position = split_dim[node], split_position[node]
    return EMPTY_CHILD if position <= box_lower[dim] or position >= box_upper[dim] else STOPPING_RULE
