"""Speed of dpm_jax.cluster on Synth-10d and Synth-100d; see dpm_jax/eval/benchmark.py.

    python benchmarks/speed.py --out results/speed.json [--baseline]

The same as ``dpm-jax bench``. ``--baseline`` also times the sequential NumPy DPM of
dpm_jax/eval/baselines/numpy_dpm.py on the same data in the same run, so the speed-up is a
ratio measured on one machine.
"""

import sys

from dpm_jax.eval.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
