"""dpm_jax.diagnostics.explain: a released result explained from its released parts only."""

import dataclasses
import inspect
import math

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax.budget import allocate
from dpm_jax.diagnostics.explain import DEPTH_LIMIT, EMPTY_CHILD, STOPPING_RULE
from dpm_jax.diagnostics import explain
from dpm_jax.eval.datasets import synthetic_blobs

BUDGET = dpm_jax.Budget(1.0, 1e-6)
CONFIG = dpm_jax.DPMConfig(tau_r=5, split_grid="paper")  # one global grid: splits can miss a node's data


@pytest.fixture(scope="module")
def run():
    data = synthetic_blobs(6_000, 3, num_blobs=16, seed=1)
    result = dpm_jax.cluster(jax.random.key(3), data.points, BUDGET, bounds=data.bounds, config=CONFIG)
    return data, result


def test_explain_takes_no_data():
    assert list(inspect.signature(explain).parameters) == ["result", "config", "bounds"]


@pytest.mark.slow
def test_every_leaf_has_its_reason(run):
    # Long because: the module's run fixture compiles a clustering (12 s in the fast loop, 2 cores at load 8).
    data, result = run
    report = explain(result, CONFIG, bounds=data.bounds)
    leaves = report.leaves
    assert len(leaves) == int(result.k) == report.k
    assert {leaf.node for leaf in leaves} == set(np.asarray(result.leaf_node)[np.asarray(result.valid)].tolist())
    for node in report.nodes:
        assert (node.reason is None) == (not node.is_leaf)
        assert (node.reason == DEPTH_LIMIT) == (node.is_leaf and node.level == CONFIG.tau_r)
        assert (node.exponent_scale is None) == (node.level == CONFIG.tau_r)
    assert {leaf.reason for leaf in leaves} <= {DEPTH_LIMIT, EMPTY_CHILD, STOPPING_RULE}
    assert "leaves:" in str(report)


@pytest.mark.slow
def test_an_empty_child_is_empty_in_the_data(run):
    # Long because: uses the module's compiled run.
    """Soundness against the data (which explain never sees): the drawn split has no point on one side."""
    data, result = run
    report = explain(result, CONFIG, bounds=data.bounds)
    slots = {int(node): slot for slot, node in enumerate(np.asarray(result.leaf_node)) if node}
    labels, tree = np.asarray(result.labels_nonprivate), result.tree
    empty = [leaf for leaf in report.leaves if leaf.reason == EMPTY_CHILD]
    assert empty  # this key draws four
    for leaf in empty:
        points = data.points[labels == slots[leaf.node]]
        dim, position = int(tree.split_dim[leaf.node]), float(tree.split_position[leaf.node])
        assert min((points[:, dim] < position).sum(), (points[:, dim] >= position).sum()) == 0
    without_bounds = explain(result, CONFIG)  # only the ancestors' splits bound the box: never more found
    assert sum(leaf.reason == EMPTY_CHILD for leaf in without_bounds.leaves) <= len(empty)


@pytest.mark.slow
def test_numbers_agree_with_a_recomputation_from_the_ledger(run):
    # Long because: uses the module's compiled run.
    data, result = run
    report = explain(result, CONFIG)
    allocation = allocate(BUDGET, CONFIG, 3)
    assert report.split_epsilons == allocation.split_epsilons
    assert report.count_offsets == allocation.count_offsets[: CONFIG.tau_r]
    slope = CONFIG.t / CONFIG.q + CONFIG.alpha
    tree = result.tree
    for node in report.nodes:
        assert node.noisy_count == float(tree.noisy_count[node.node])
        if node.exponent_scale is not None:
            expected = (
                allocation.split_epsilons[node.level]
                * max(node.noisy_count - allocation.count_offsets[node.level], 1.0)
                / (2 * slope)
            )
            assert math.isclose(node.exponent_scale, expected, rel_tol=1e-12)
    assert report.tau_e == float(tree.noisy_count[1]) / 2**CONFIG.tau_r


@pytest.mark.slow
def test_works_on_the_release_alone(run):
    # Long because: uses the module's compiled run.
    """No labels, no data: explain reads only released parts."""
    data, result = run
    release = dataclasses.replace(result, labels_nonprivate=None)
    points = data.points
    del points
    assert explain(release, CONFIG) == explain(result, CONFIG)


@pytest.mark.slow
def test_a_starved_budget_is_reported(run):
    # Long because: a starved budget compiles the clustering again (23 s, 2 cores at load 7).
    data, _ = run
    starved = dpm_jax.cluster(
        jax.random.key(0), data.points[:500], dpm_jax.Budget(0.5, 1e-6), bounds=data.bounds, config=CONFIG
    )
    report = explain(starved, CONFIG)
    assert report.max_reliable_k == 1 and report.budget_limited and "warning" in str(report)


@pytest.mark.slow
def test_wrong_config_and_batches_are_rejected(run):
    # Long because: uses the module's compiled run.
    _, result = run
    with pytest.raises(ValueError, match="config"):
        explain(result, dpm_jax.DPMConfig(alpha=2.0))
    batch = jax.tree_util.tree_map(lambda a: np.stack([a, a]), result)
    with pytest.raises(ValueError, match="batch"):
        explain(batch, CONFIG)


@pytest.mark.slow
def test_an_automatic_depth_is_read_from_the_result(run):
    # Long because: compiles an automatic-depth clustering of its own (30 s, 2 cores at load 7).
    """tau_r='auto': the depth comes from the tree, the run's budget is the ledger without the depth count."""
    data, _ = run
    auto = dpm_jax.cluster(
        jax.random.key(3), data.points, BUDGET, bounds=data.bounds, config=dpm_jax.DPMConfig(tau_r="auto")
    )  # and the default cell grid
    report = explain(auto, dpm_jax.DPMConfig(tau_r="auto"))
    # the cell grid draws inside the node's cell: no split is outside the box
    assert {leaf.reason for leaf in report.leaves} <= {STOPPING_RULE, DEPTH_LIMIT}
    depth = int(auto.depth)
    assert len(report.split_epsilons) == depth and max(node.level for node in report.nodes) <= depth
    remaining = [entry for entry in auto.ledger if entry.name != "depth"]
    allocation = allocate(
        dpm_jax.Budget(math.fsum(e.epsilon for e in remaining), math.fsum(e.delta for e in remaining)),
        dpm_jax.DPMConfig(tau_r=depth),
        3,
    )
    assert report.count_offsets == allocation.count_offsets[:depth]
    # the run's tau_e: n~ / 2**min(depth + leaf_slack, max_depth) under "auto" (DPMConfig.leaf_slack)
    halvings = min(depth + dpm_jax.DPMConfig().leaf_slack, dpm_jax.DPMConfig().max_depth)
    assert report.tau_e == float(auto.tree.noisy_count[1]) / 2**halvings
