"""Bit-identity of ``cluster`` against outputs recorded from main (tests/data/golden.npz).

Restructuring must not change results: the same key, data and config give the same
bits. The fixture was recorded after the exact-arithmetic engine landed (the privacy
fixes changed outputs on purpose); re-record it only for a deliberate change of the
algorithm, and say so in the commit:

    python tests/test_golden.py      # rewrites tests/data/golden.npz

The case reuses the shape and config the rest of the suite compiles, so the test adds
little compile time; the sibling-subtraction path (d >= 32) is held to this one by
tests/test_tree.py::test_sibling_subtraction_gives_the_same_clustering.
"""

import pathlib
import subprocess
import sys

import jax
import numpy as np

import dpm_jax
from conftest import users_environment
from dpm_jax.eval.datasets import synthetic_blobs

GOLDEN = pathlib.Path(__file__).parent / "data" / "golden.npz"
SMALL_CONFIG = dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10, split_grid="paper")  # as conftest.py
# Recorded before the "no structure" test (issue 27): structure_share=0 is that engine, bit for bit.
CELL_CONFIG = dpm_jax.DPMConfig(tau_r=4, split_grid="cell", split_window=1, structure_share=0.0, merge_share=0.0)
# The default cell grid, its split_window included; recorded before the merge (merge_share=0: that engine).
WINDOW_CONFIG = dpm_jax.DPMConfig(tau_r=4, structure_share=0.0, merge_share=0.0)
CASES = {  # name: (n, d, num_blobs, seed, config, keys)
    "small_3d": (600, 3, 6, 3, SMALL_CONFIG, (0, 1, 2)),  # the paper's grid, recorded before the cell grid
    "cell_3d": (600, 3, 6, 3, CELL_CONFIG, (0, 1)),  # the cell grid (issue 14)
    "window_3d": (600, 3, 6, 3, WINDOW_CONFIG, (0, 1)),  # the cell grid's default split_window
}
# Every JAX gives these bits (checked on jax 0.5.3, the declared minimum, 0.10.2 and 0.11.2; on an
# H200 GPU too, benchmarks/accelerator.py): the float post-processing is computed by
# dpm_jax._arrays.unfused_multiply_add and divide, whose rounding no backend or fusion changes.
FIELDS = ("centers", "counts", "valid", "k", "split_interval_size", "leaf_node", "labels_nonprivate")
TREE_FIELDS = ("noisy_count", "reached", "is_split", "split_dim", "split_position")


def current_outputs() -> dict[str, np.ndarray]:
    """Every released array (and the non-private labels) of every case and key."""
    outputs = {}
    for name, (n, d, blobs, seed, config, keys) in CASES.items():
        data = synthetic_blobs(n=n, d=d, num_blobs=blobs, std=1.0, seed=seed)
        for k in keys:
            result = dpm_jax.cluster(
                jax.random.key(k), data.points, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds, config=config
            )
            for field in FIELDS:
                outputs[f"{name}/{k}/{field}"] = np.asarray(getattr(result, field))
            for field in TREE_FIELDS:
                outputs[f"{name}/{k}/tree.{field}"] = np.asarray(getattr(result.tree, field))
    return outputs


def differing_outputs() -> list[str]:
    """The recorded outputs this process computes differently (or does not compute)."""
    recorded = np.load(GOLDEN)
    outputs = current_outputs()
    if sorted(recorded.files) != sorted(outputs):
        return sorted(set(recorded.files) ^ set(outputs))
    return [
        name
        for name in outputs
        if recorded[name].dtype != outputs[name].dtype or recorded[name].tobytes() != outputs[name].tobytes()
    ]


def test_outputs_are_bit_identical_to_the_recorded_ones():
    # Under the suite's compiler settings (tests/conftest.py): they must not change a bit either.
    differing = differing_outputs()
    assert not differing, f"outputs changed: {differing}"


def test_outputs_at_xla_defaults_are_the_recorded_ones():
    # Long because: a fresh process compiles the golden cases with XLA's defaults, as users do:
    # a change visible only there (a multiply-add contracted at the default level) fails here.
    script = "import sys; sys.path.insert(0, sys.argv[1]); import test_golden; print(test_golden.differing_outputs())"
    here = str(pathlib.Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", script, here], capture_output=True, text=True, env=users_environment(), timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **current_outputs())
    print(f"recorded {GOLDEN}")
