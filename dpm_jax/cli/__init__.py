"""The ``dpm-jax`` command line, in three pieces.

* :mod:`dpm_jax.cli.readers`: the input files (``.npy``, ``.csv``, ``.parquet``);
* :mod:`dpm_jax.cli.release`: the public JSON release of a run (its schema);
* :mod:`dpm_jax.cli.main`: the argument parser and the commands (``cluster``, ``demo``,
  ``bench``), one-line errors with exit status 1 (2 for a malformed command line).
"""

from dpm_jax.cli.main import main
from dpm_jax.cli.readers import read_points
from dpm_jax.cli.release import release_to_dict

__all__ = ["main", "read_points", "release_to_dict"]
