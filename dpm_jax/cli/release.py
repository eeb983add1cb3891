"""The release of one ``dpm-jax cluster`` run: what is public and goes into the JSON.

DP outputs of the DPM paper's Algorithm 1 (centres, noisy sizes, the split tree, the
split interval size, the privacy ledger) and the public inputs (budget, bounds,
hyper-parameters). Nothing computed from individual points without noise (labels,
the exact number of rows) goes into it.
"""

from __future__ import annotations

import csv
import dataclasses
from typing import Any, Sequence

import jax
import numpy as np

from dpm_jax.api import ClusterResult
from dpm_jax.budget import Budget
from dpm_jax.config import DPMConfig

__all__ = ["release_to_dict", "write_centers_csv"]


def _to_list(array) -> list:
    return np.asarray(array).tolist()


def release_to_dict(
    result: ClusterResult, budget: Budget, bounds: tuple[float, float], config: DPMConfig, columns: Sequence[str]
) -> dict[str, Any]:
    """The JSON-ready release of one run: DP outputs and public inputs only.

    Contains the k valid centres, their noisy sizes, the heap id of each cluster's
    leaf, the reached nodes of the split tree (with the split only where it was
    applied), the split interval size and the ledger, whose epsilons and deltas add
    up to ``budget``. The non-private ``labels_nonprivate`` are left out.
    """
    valid = np.asarray(result.valid)
    tree = jax.tree.map(np.asarray, result.tree)
    nodes = []
    for node in np.flatnonzero(tree.reached):
        split = bool(tree.is_split[node])
        nodes.append(
            dict(
                node=int(node),
                noisy_count=float(tree.noisy_count[node]),
                is_split=split,
                split_dim=int(tree.split_dim[node]) if split else None,
                split_position=float(tree.split_position[node]) if split else None,
            )
        )
    return dict(
        columns=list(columns),
        k=int(result.k),
        depth=int(result.depth),
        centers=_to_list(np.asarray(result.centers)[valid]),
        counts=_to_list(np.asarray(result.counts)[valid]),
        leaf_nodes=_to_list(np.asarray(result.leaf_node)[valid]),
        split_interval_size=_to_list(result.split_interval_size),
        split_tree=nodes,
        budget=dict(epsilon=budget.epsilon, delta=budget.delta),
        bounds=dict(lower=bounds[0], upper=bounds[1]),
        config=dataclasses.asdict(config),
        ledger=result.ledger.to_dicts(),
    )


def write_centers_csv(file, columns: Sequence[str], centers: list) -> None:
    """The k centres as CSV rows under a header of the data's column names."""
    writer = csv.writer(file)
    writer.writerow(columns)
    writer.writerows([[repr(float(v)) for v in row] for row in centers])
