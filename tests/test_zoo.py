"""dpm_jax.eval.zoo: DPM variants, runs over keys, labelled scores."""

import dataclasses

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax.eval import datasets, zoo
from conftest import SMALL_CONFIG as SMALL  # the suite's shared config: its eager programs compile once


@pytest.fixture(scope="module")
def unbalanced():
    return datasets.unbalanced_clusters(2_000, seed=1)


def test_variants_are_valid_named_configs_with_the_default_first():
    assert list(zoo.DPM_VARIANTS)[0] == "dpm" and zoo.DPM_VARIANTS["dpm"] == dpm_jax.DPMConfig()
    assert all(isinstance(config, dpm_jax.DPMConfig) for config in zoo.DPM_VARIANTS.values())
    assert len(set(zoo.DPM_VARIANTS.values())) == len(zoo.DPM_VARIANTS)  # no two names for one mode


def test_paper_delta_is_n_to_the_minus_one_and_a_half():
    assert zoo.paper_delta(10_000) == pytest.approx(1e-6)


# cluster warns that the suite's 600-point fixture is too small for two clusters at epsilon = 1; the test
# compares the harness's vmapped runs with cluster's, not the clustering.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpm_jax.diagnostics.InsufficientBudgetWarning")
def test_vmapped_runs_equal_one_cluster_call_per_key(small_blobs, budget):
    # Long because: compiles the variants under vmap and one call per key (32 s, 2 cores at load 9).
    """Long (a compile of the key-vmapped program with traced bounds): the benchmark's only DPM path,
    so it must give exactly what ``cluster`` gives key by key."""
    keys = jax.random.split(jax.random.key(3), 3)
    runs = zoo.run_dpm(keys, small_blobs.points, budget, small_blobs.bounds, SMALL)
    assert runs.centers.shape == (3, 16, 3) and runs.valid.shape == (3, 16)
    for index, key in enumerate(keys):
        alone = dpm_jax.cluster(key, small_blobs.points, budget, bounds=small_blobs.bounds, config=SMALL)
        np.testing.assert_array_equal(runs.split_interval_size[index], np.asarray(alone.split_interval_size))
        np.testing.assert_array_equal(runs.valid[index], np.asarray(alone.valid))
        np.testing.assert_array_equal(
            runs.centers[index][runs.valid[index]], np.asarray(alone.centers)[np.asarray(alone.valid)]
        )
    assert not np.array_equal(runs.valid[0], runs.valid[1]) or not np.allclose(runs.centers[0], runs.centers[1])


def test_labelled_scores_of_the_true_centres_and_of_a_merge(unbalanced):
    centers = np.vstack([unbalanced.centers, np.full((3, 2), np.nan)])  # padded slots, invalid
    valid = np.arange(11) < 8
    perfect = zoo.labelled_scores(unbalanced.points, unbalanced.labels, centers, valid, 8)
    assert perfect == {"ari": pytest.approx(1.0), "accuracy": pytest.approx(1.0), "k": 8}
    # One centre dropped: its points join other clusters, where at least the smaller class of a merge (>= 45
    # points of 2,000) loses the majority vote; ARI falls below 1; k is 7.
    merged = zoo.labelled_scores(unbalanced.points, unbalanced.labels, centers, valid & (np.arange(11) != 0), 8)
    smallest = np.bincount(unbalanced.labels).min()
    assert merged["k"] == 7 and merged["ari"] < 0.99 and merged["accuracy"] <= 1 - smallest / 2_000


def test_lattice_variant_tells_the_cell_grid_the_data_sets_public_step():
    on_lattice = datasets.Dataset(np.zeros((4, 2), np.float32), None, (0.0, 15.0), None, "integers", lattice=1.0)
    continuous = on_lattice._replace(lattice=None)
    default = zoo.DPM_VARIANTS["dpm"]
    assert zoo.variant_config("dpm-lattice", on_lattice) == dataclasses.replace(default, lattice_step=1.0)
    assert zoo.variant_config("dpm-lattice", continuous) == default
    assert zoo.variant_config("dpm", on_lattice) == default  # only the lattice variants are told
    paper = dpm_jax.DPMConfig(split_grid="paper")
    assert zoo.with_public_lattice(paper, on_lattice) == paper  # the paper's one global grid takes no lattice
    own = dpm_jax.DPMConfig(lattice_step=0.5)
    assert zoo.with_public_lattice(own, on_lattice) == own  # a step the config sets itself wins
