"""``python -m dpm_jax ...``: the same as the ``dpm-jax`` command (see :mod:`dpm_jax.cli`)."""

from dpm_jax.cli import main

raise SystemExit(main())
