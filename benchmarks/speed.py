"""Speed of dpm_jax.cluster on Synth-10d and Synth-100d; see dpm_jax/benchmark.py.

    python benchmarks/speed.py --out results/speed.json [--baseline]

``--baseline`` also times the sequential NumPy DPM of tests/reference_dpm.py on the
same data in the same run, so the speed-up is a ratio measured on one machine.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from dpm_jax import DPMConfig  # noqa: E402
from dpm_jax.benchmark import main  # noqa: E402
from reference_dpm import reference_dpm  # noqa: E402


def numpy_baseline(rng, points, epsilon, delta, bounds):
    return reference_dpm(rng, points, epsilon, delta, bounds, DPMConfig())


if __name__ == "__main__":
    sys.exit(main(baseline=numpy_baseline))
