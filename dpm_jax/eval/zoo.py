"""Evaluation on the structure zoo: DPM variants as named configs, runs over keys, labelled scores.

The DPM paper ("DPM: Clustering Sensitive Data through Separation", Section 6)
evaluates on well-separated blobs; the zoo (:mod:`dpm_jax.eval.datasets`, ``ZOO``)
adds the layouts users bring. This module holds what benchmarks/zoo.py and its
tests share:

* :data:`DPM_VARIANTS`: the DPM modes compared, each a name and a
  :class:`~dpm_jax.DPMConfig` (a new mode is one line);
* :data:`LATTICE_VARIANTS` and :func:`variant_config`: variants that are also told the
  data set's public lattice step (:attr:`dpm_jax.eval.datasets.Dataset.lattice`, e.g. 1
  for UCI Letters' integer features) where the cell grid can use it;
* :func:`run_dpm`: one run per key, under ``jax.vmap`` over the keys;
* :func:`labelled_scores`: adjusted Rand index, accuracy and k of released centres,
  with every point labelled by its nearest valid centre (as the paper's evaluation
  labels points).

These are evaluations, not DP releases: the scores read the data and its labels.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import dpm_jax
from dpm_jax.eval import metrics
from dpm_jax.eval.datasets import Dataset

__all__ = [
    "DPM_VARIANTS",
    "LATTICE_VARIANTS",
    "Centers",
    "paper_delta",
    "with_public_lattice",
    "variant_config",
    "run_dpm",
    "labelled_scores",
]

DPM_VARIANTS: dict[str, dpm_jax.DPMConfig] = {
    "dpm": dpm_jax.DPMConfig(),  # the default config (the cell split grid, tau_r="auto")
    "dpm-narrow": dpm_jax.DPMConfig(split_window=1),  # the cell grid before split_window (one half-bin per side)
    "dpm-paper": dpm_jax.DPMConfig(split_grid="paper", tau_r=7),  # the published design (Algorithm 2's beta)
    "dpm-depth7": dpm_jax.DPMConfig(tau_r=7),  # the paper's fixed depth (the default before tau_r="auto")
    "dpm-no-structure": dpm_jax.DPMConfig(structure_share=0.0),  # the default before the structure test (issue 27)
    "dpm-window12": dpm_jax.DPMConfig(split_window=12),  # a wider split window (issue 27: large beside small)
    "dpm-leaf0": dpm_jax.DPMConfig(leaf_slack=0),  # the default before leaf_slack (issue 27): tau_e = n~ / 2**depth
    # 0.16 of epsilon moved from the averaging to the split choices (the structure test keeps its 0.05)
    "dpm-splits38": dpm_jax.DPMConfig(epsilon_shares=(0.04, 0.18, 0.38, 0.40), structure_share=0.125),
    "dpm-no-merge": dpm_jax.DPMConfig(merge_share=0.0),  # the default before the merge (issue 27, stop 44)
    "dpm-merge25": dpm_jax.DPMConfig(merge_share=0.25),  # three times the merge's share: 0.15 of epsilon
}

# name -> the variant of DPM_VARIANTS that is run with the data set's public lattice step.
LATTICE_VARIANTS: dict[str, str] = {"dpm-lattice": "dpm"}


class Centers(NamedTuple):
    """Released centres of several runs: ``centers`` (runs, slots, d) with ``valid`` (runs, slots).

    ``split_interval_size`` (runs, d) is each run's released beta in data units
    (:attr:`dpm_jax.ClusterResult.split_interval_size`): the range over beta is the
    number of split candidates per dimension at the root.
    """

    centers: np.ndarray
    valid: np.ndarray
    split_interval_size: np.ndarray


def paper_delta(n: int) -> float:
    """delta = n^-1.5, the paper's choice (Section 6.1), for a public size n."""
    return 1.0 / (n * math.sqrt(n))


def with_public_lattice(config: dpm_jax.DPMConfig, data: Dataset) -> dpm_jax.DPMConfig:
    """``config`` told the public lattice step of ``data`` (e.g. 1 for integer features) when it uses the
    cell grid and sets no step itself; otherwise ``config`` unchanged. The step is public knowledge about
    the domain, like the bounds, so using it costs no privacy."""
    if data.lattice is None or config.grid_shape.estimates_interval or config.lattice_step is not None:
        return config
    return dataclasses.replace(config, lattice_step=data.lattice)


def variant_config(name: str, data: Dataset) -> dpm_jax.DPMConfig:
    """The config of the DPM variant ``name`` (a key of DPM_VARIANTS or LATTICE_VARIANTS) for ``data``."""
    if name in LATTICE_VARIANTS:
        return with_public_lattice(DPM_VARIANTS[LATTICE_VARIANTS[name]], data)
    return DPM_VARIANTS[name]


def run_dpm(
    keys: jax.Array, points: np.ndarray, budget: dpm_jax.Budget, bounds: tuple[float, float], config: dpm_jax.DPMConfig
) -> Centers:
    """One :func:`dpm_jax.cluster` run per key of ``keys`` (shape (runs,)), as one ``jax.vmap``
    over the keys with the bounds traced, so data sets of one shape and budget share a compiled
    program (``tau_r="auto"`` included: every run has ``config.max_clusters`` slots)."""
    result = _vmapped(budget, config)(keys, jnp.asarray(points), jnp.float32(bounds[0]), jnp.float32(bounds[1]))
    return Centers(*(np.asarray(array) for array in result))


_COMPILED: dict = {}


def _vmapped(budget: dpm_jax.Budget, config: dpm_jax.DPMConfig):
    """The jitted, key-vmapped cluster program of one (budget, config), compiled once per shape."""
    if (budget, config) not in _COMPILED:

        def one(key, points, lower, upper):
            result = dpm_jax.cluster(key, points, budget, bounds=(lower, upper), config=config)
            return result.centers, result.valid, result.split_interval_size

        _COMPILED[budget, config] = jax.jit(jax.vmap(one, in_axes=(0, None, None, None)))
    return _COMPILED[budget, config]


def labelled_scores(
    points: np.ndarray, labels: np.ndarray, centers: np.ndarray, valid: np.ndarray, num_classes: int
) -> dict[str, float]:
    """Adjusted Rand index, accuracy and k of one clustering's centres against the true labels.

    Every point takes the label of its nearest valid centre; scores in float64.
    ``k`` is the number of valid centres released (not the number that received points).
    """
    with jax.enable_x64(True):
        slots = centers.shape[0]
        assignment = metrics.assign_to_centers(
            jnp.asarray(points, jnp.float64), jnp.asarray(centers, jnp.float64), jnp.asarray(valid)
        )
        truth = jnp.asarray(labels)
        return {
            "ari": float(metrics.adjusted_rand_index(assignment.labels, truth, slots, num_classes)),
            "accuracy": float(metrics.clustering_accuracy(assignment.labels, truth, slots, num_classes)),
            "k": int(np.sum(valid)),
        }
