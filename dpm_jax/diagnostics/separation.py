"""How many balanced, well-separated clusters a budget lets DPM separate: a model from public numbers.

The model (ours, built on the exponential mechanism of "DPM: Clustering Sensitive
Data through Separation", Definition 4 and Lemma 5, and on the gap view of
"Understanding the Theoretical Guarantees of DPM", Section 4.3): the data are k
equal-sized clusters, narrow against the split interval and with centres spread
uniformly over the public range. A node holding m of them, at level l, has in every
dimension m - 1 gaps between consecutive centres and two empty ends, each of
expected length range / (m + 1). Every candidate in a gap is empty (e = 1) and
has the centreness c(j / m) of the rank j n_node / m of the j-th gap (Definition 6);
every candidate in an end is empty too but has centreness 0 and leaves a child
empty, so drawing it halts the node. The exponential mechanism therefore separates
the node's clusters with probability

    P_sep = sum_j e^{B c(j/m)} / (sum_j e^{B c(j/m)} + 2),
    B = epsilon_exp_l max(n_node - lambda_l, 1) / (2 (t/q + alpha)),

and the j-th gap with weight e^{B c(j/m)}; otherwise the node is one leaf holding
all m clusters. The expected number of clusters found, E(k) (a node with one cluster
or at depth tau_r is one leaf), follows by recursion over (m, level). No constant
is fitted. Measured against DPM runs in benchmarks/diagnostics.py (results in
benchmarks/results/diagnostics.json; docs/diagnostics.md has the figures): with the
cell grid (candidates across each node's own cell, as the model has them) within 2
clusters of the measured median k over n * epsilon = 10k..100k; with the paper's
global grid it overestimates k by 5-10 below n * epsilon = 60k, where near-random
draws that cut a cluster still add leaves.
"""

from __future__ import annotations

import math

import numpy as np

from dpm_jax.budget import Allocation
from dpm_jax.config import DPMConfig
from dpm_jax.depth import exponent_scale
from dpm_jax.diagnostics.theory import centreness

__all__ = ["RELIABLE_SHARE", "MAX_MODEL_CLUSTERS", "expected_clusters"]

RELIABLE_SHARE = 0.9  # k clusters count as separated when E(k) >= 0.9 k
MAX_MODEL_CLUSTERS = 1024  # the recursion costs O(k**2 tau_r)
_END_CANDIDATES = 2.0  # the two empty ends of a node, each worth one gap's candidates


def expected_clusters(k: int, n: float, allocation: Allocation, config: DPMConfig) -> float:
    """E(k): the expected number of clusters DPM finds in ``n`` points holding k balanced clusters (module model)."""
    if not (isinstance(k, (int, np.integer)) and 1 <= k <= MAX_MODEL_CLUSTERS):
        raise ValueError(f"k must be an integer in [1, {MAX_MODEL_CLUSTERS}], got {k!r}")
    found = np.ones(k + 1)  # level tau_r: every node is a leaf (found[m] for m clusters)
    for level in reversed(range(config.tau_r)):
        above = found
        found = np.ones(k + 1)
        for m in range(2, k + 1):
            scale = exponent_scale(allocation.split_epsilons[level], m * n / k, allocation.count_offsets[level], config)
            gaps = np.arange(1, m)
            # weights shifted by the largest centreness (1): no overflow at large B
            weights = np.exp(scale * (np.array([centreness(j / m, config.t, config.q) for j in gaps]) - 1.0))
            separate = weights.sum() / (weights.sum() + _END_CANDIDATES * math.exp(-scale))
            children = np.dot(weights, above[gaps] + above[m - gaps]) / weights.sum()
            found[m] = separate * children + (1.0 - separate)
    return float(found[k])
