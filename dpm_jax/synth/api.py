"""``synthesize``: DP synthetic data from partitions of the public box (KD-tree paper, Section 3).

Paper: "Differentially Private Synthetic Data Using KD-Trees" (Kreačić et al.).

Methods:
  "grid"    Algorithm 1: the 2**h midpoint cells of the box, thresholded noisy counts,
            the empty cells drawn implicitly (Algorithm 5).
  "kdtree"  Algorithms 2-3: h data-independent levels, then D levels of noisy split
            decisions; the leaves released as in Algorithm 1.
  "privtree" h data-independent levels, then up to D levels of PrivTree's biased-count
            decisions (:mod:`dpm_jax.synth.privtree`); the leaves released as in Algorithm 1.
  "refine"  Algorithm 1 on a coarse grid, then Algorithm 1 on the children of its released
            cells; a coarse cell keeps what its released children leave of its count
            (:mod:`dpm_jax.synth.refine`).
  "dpm"     DPM's own release (:func:`dpm_jax.cluster`): its leaf boxes and noisy counts
            already describe the data; sampling from them is post-processing.

Key path: ``derive_key(key, "synth_tree")`` folded with 0 (the size n~), 1 (the
decisions: then with the decision row, then 0 or 1, :func:`dpm_jax.synth.kdtree.grow`;
"refine": the coarse counts, folds 0, 1, 2 as the leaves') and 2 (the depth search: then
0 for the threshold's noise, 1 for the queries', :mod:`dpm_jax.synth.depth_search`);
``derive_key(key, "synth_leaf")`` for the leaf counts (folds 0, 1, 2: the
non-empty counts, the empty cells' skips, their conditioned counts).
Neighbours differ by adding or removing one record (replace-one costs twice: docs/synthetic.md).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from dpm_jax import bounds as bounds_lib
from dpm_jax import exact, keys
from dpm_jax.api import public_bounds, validated_input
from dpm_jax.budget import Budget, validate_budget_and_config
from dpm_jax.config import DPMConfig
from dpm_jax.entry import entry_point
from dpm_jax.synth.from_dpm import synthesize_from_cluster
from dpm_jax.synth.result import SynthResult, sample_boxes
from dpm_jax.synth.cells import cell_boxes, cell_codes
from dpm_jax.synth.depth_search import excess_mass
from dpm_jax.synth.kdtree import empty_cell_at, grow
from dpm_jax.synth.refine import refine
from dpm_jax.synth.plan import METHODS, SynthConfig, SynthPlan, depth_choice, plan_synthesis

__all__ = ["SynthResult", "synthesize", "sample_boxes", "released_cells"]


@entry_point("synthesize")  # accountant, first-call message, 32-bit engine (dpm_jax.entry)
def synthesize(
    key: jax.Array,
    X: Any,
    budget: Budget,
    bounds=None,
    *,
    method: str = "kdtree",
    config: SynthConfig = SynthConfig(),
    point_mask: Any = None,
    cluster_config=None,
) -> SynthResult:
    """A DP weighted synthetic data set of ``X`` (n, d) under ``budget``, within public ``bounds``.

    Args mirror :func:`dpm_jax.cluster`; ``method`` is "grid", "kdtree", "privtree", "refine" or "dpm" (then
    ``cluster_config`` is its DPMConfig). ``bounds``: public (lo, hi), or "private" (here
    :data:`dpm_jax.bounds.COVERING`, a wider box than clustering's) /
    :class:`dpm_jax.PrivateBounds`: estimated under DP with a share of ``budget`` first (the
    KD-tree paper reads the root cube from the data's min and max, which is not private;
    :func:`dpm_jax.bounds.run_with_private_bounds`: its line comes first in the ledger, the
    synthesis runs on the rest). Works under jax.jit (budget, method, config static) and
    jax.vmap over keys. The ledger adds up to the budget (epsilon exactly; delta at most).
    Inside ``with accountant:`` the call charges ``budget`` once before it reads ``X``.

    The stated maximum n is ``config.max_rows`` (public, default 2**24 rows), never the row count of
    ``X`` (private under add/remove-one neighbours): Lemma 10's tau, PrivTree's and "refine"'s
    thresholds and the empty-cell capacities follow it (:func:`dpm_jax.synth.plan.plan_synthesis`),
    and ``X`` with more rows is refused. State a smaller public capacity when one is known: the
    thresholds grow with its logarithm (docs/synthetic.md).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dpm_jax.Budget, got {type(budget).__name__}")
    if not isinstance(config, SynthConfig):
        raise TypeError(f"config must be a SynthConfig, got {type(config).__name__}")
    points, mask, _ = validated_input(key, X, point_mask)  # exact shapes: the leaf slots follow the rows
    prepare = functools.partial(
        _prepare, key, points, mask, method=method, config=config, cluster_config=cluster_config
    )
    if bounds_lib.is_private(bounds):
        return bounds_lib.run_with_private_bounds(
            key, points, mask, budget, bounds, prepare, default=bounds_lib.SYNTHESIS_DEFAULT
        )
    return prepare(budget)(bounds)


def _prepare(key, points, mask, budget: Budget, *, method: str, config: SynthConfig, cluster_config):
    """The synthesis on ``budget`` as a function of the bounds, planned (and refused) before it runs."""
    if method == "dpm":
        cluster_config = cluster_config or DPMConfig()
        validate_budget_and_config(budget, cluster_config)
        return lambda bounds: synthesize_from_cluster(key, points, budget, bounds, cluster_config, mask)
    if points.shape[0] > config.max_rows:
        raise ValueError(  # the row count itself is not printed: the message may be shown or logged
            f"X has more rows than SynthConfig.max_rows = {config.max_rows} (the public capacity the "
            "thresholds are computed from): state a larger one"
        )
    plan = plan_synthesis(budget, config, method, points.shape[1])

    def run(bounds) -> SynthResult:
        lower, upper = public_bounds(bounds, points.shape[1])
        arrays = _synthesize_arrays(key, points, mask, lower, upper, plan=plan, rows=config.max_cells)
        released = arrays.pop("released")  # how many cells passed (DP: a function of the noisy counts)
        if not isinstance(released, jax.core.Tracer) and int(released) > config.max_cells:
            warnings.warn(
                f"{int(released)} cells were released, more than SynthConfig.max_cells = {config.max_cells}: "
                "the heaviest are kept; a larger max_cells keeps them all",
                stacklevel=4,
            )
        ledgers = ((-1, plan.ledger),)
        return SynthResult(**arrays, depth=jnp.int32(-1), ledgers=ledgers, method=method, bounds=(lower, upper))

    return run


@functools.partial(jax.jit, static_argnames=("plan", "rows"))
def _synthesize_arrays(key, points, mask, lower, upper, *, plan: SynthPlan, rows: int) -> dict:
    tree_key, leaf_key = keys.derive_key(key, keys.SYNTH_TREE), keys.derive_key(key, keys.SYNTH_LEAF)
    total = plan.total_depth
    codes = cell_codes(points, lower, upper, total)
    order = jnp.lexsort((codes, ~mask))
    codes, valid = codes[order], mask[order]
    decision_key = jax.random.fold_in(tree_key, 1)
    # "refine": the grid's counts are the coarse release (synth_tree, fold 1), its children's the leaves'
    first, first_key = (plan.leaves, leaf_key) if plan.coarse is None else (plan.coarse, decision_key)
    choice = jnp.int32(0)
    if plan.size is not None:  # the rule's depth from n~, lowered by the search where its cells are too thin
        noisy = exact.to_float32(plan.size.draw(jax.random.fold_in(tree_key, 0), jnp.sum(mask, dtype=jnp.int32)))
        rule = depth_choice(plan, noisy)
        excess = excess_mass(codes, valid, total, plan.depths, first.thresholds, rule)
        choice = plan.search.draw(jax.random.fold_in(tree_key, 2), excess, rule, noisy)
    h = jnp.asarray(plan.depths, jnp.int32)[choice]
    partition = grow(
        codes, valid, h, plan.num_decisions, total, decision_key, plan.decisions, plan.tau, plan.bias, plan.floor
    )

    draw = first.draw(first_key, partition.count, partition.num_empty, choice)
    kept = draw.kept & (jnp.arange(codes.shape[0]) < partition.num_leaves)
    ghost_start, ghost_depth = empty_cell_at(draw.positions, partition, h, total)
    start, depth, weight, released = (
        jnp.concatenate(pair)
        for pair in zip(
            (partition.start, partition.depth, draw.weights, kept),
            (ghost_start, ghost_depth, draw.ghost_weights, draw.passed),
        )
    )
    if plan.coarse is not None:  # "refine": the released cells' children
        start, depth, weight, released = refine(
            codes, valid, start, weight, released, h, plan.refine_bits, total, leaf_key, plan.leaves
        )
    return released_cells(start, depth, weight, released, lower, upper, total, rows)


def heaviest(start, depth, weight, valid, rows: int) -> tuple:
    """The ``rows`` heaviest released cells (released first, then by weight, code and depth), or, where
    every candidate fits (a static condition), all of them in their order and padded with empty rows
    to ``rows``: a function of the released cells alone."""
    padding = rows - start.shape[0]
    if padding >= 0:  # every candidate fits: no sort (released_cells orders the rows)
        pad = lambda a: jnp.concatenate([a, jnp.zeros(padding, a.dtype)])  # noqa: E731
        return pad(start), pad(depth), pad(weight), pad(valid)
    order = jnp.lexsort((depth, start, -weight, ~valid))[:rows]
    return start[order], depth[order], weight[order], valid[order]


def released_cells(start, depth, weight, valid, lower, upper, total, rows: int) -> dict:
    """The released cells as ``rows`` rows (public), in a canonical order (by code; padding last),
    and ``released``, how many passed (DP, before any are cut).

    Every output is a function of the released cells alone (their codes, depths, noisy weights):
    * the candidates' order (non-empty cells first) must not show which cells held data;
    * the candidates' number (n + a constant) must not show n, so the arrays have ``rows`` rows;
      where more cells are released the heaviest are kept, ties broken by code and depth;
    * a row that is not released holds no box (NaN, like its centre): a candidate below the
      threshold is still an occupied cell.
    """
    num_released = jnp.sum(valid, dtype=jnp.int32)
    start, depth, weight, valid = heaviest(start, depth, weight, valid, rows)
    order = jnp.lexsort((depth, start, ~valid))
    start, depth, weight, valid = start[order], depth[order], weight[order], valid[order]
    low, high = cell_boxes(start, depth, lower, upper, total)
    released = valid[:, None]
    return dict(
        centers=jnp.where(released, 0.5 * (low + high), jnp.nan),
        weights=jnp.where(valid, weight, 0).astype(jnp.float32),
        lower=jnp.where(released, low, jnp.nan),
        upper=jnp.where(released, high, jnp.nan),
        valid=valid,
        released=num_released,
    )
