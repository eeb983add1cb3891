"""benchmarks/accelerator.py's release comparison: it must see a changed release and nothing else."""

import sys
from pathlib import Path

import jax

import dpm_jax
from conftest import SMALL_CONFIG

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from accelerator import differing_fields, identity_case  # noqa: E402


def test_differing_fields_names_the_changed_arrays_and_only_those(small_blobs, budget):
    def run(seed):
        return dpm_jax.cluster(
            jax.random.key(seed), small_blobs.points, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG
        )

    assert differing_fields(run(0), run(0)) == []
    changed = differing_fields(run(0), run(1))
    assert any("counts" in path for path in changed) and any("tree" in path for path in changed)
    assert not any("split_interval_size" in path for path in changed)  # public: the same for every key


def test_without_an_accelerator_the_identity_check_says_so():
    if jax.devices()[0].platform == "cpu":
        assert "no accelerator" in identity_case(100, 2)["compared"]
