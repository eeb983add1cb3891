"""Shared fixtures: small data sets and budgets that keep JIT compiles few.

Statistical tests in this suite fix their keys; each states its error rate.
"""

import os
import subprocess
import sys

# Before jax and dpm_jax are imported: the tests never read or write a persistent
# compilation cache (neither dpm_jax's nor one configured for JAX), so a stale or
# corrupt cache on the developer's machine can neither hide nor cause a failure.
# Subprocesses started by tests inherit this; tests/test_cache.py tests the cache
# in subprocesses with their own temporary directories.
os.environ["DPM_JAX_NO_COMPILATION_CACHE"] = "1"
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)

# The suite's time is XLA compiling thousands of small programs, and on the CPU most of that
# is LLVM optimising machine code that then runs on a few hundred rows. These settings compile
# the same HLO in about 0.4x the time (docs/scaling.md, "Compiler settings"). They are not
# neutral in general (tanh rounds differently under them; which multiply-adds get contracted
# changes), but dpm_jax's releases must stay the same bits: tests/test_golden.py checks that
# under them and, in a subprocess, at XLA's defaults. Tests about the compiler's own rewriting
# compile with USERS_COMPILER_OPTIONS, and so do the run-bound ones (the empirical audits, tens of
# thousands of runs of one program: about 2.5x faster at XLA's defaults); subprocess tests that
# compare programs (sharding) run in users_environment(), at XLA's defaults.
_FAST_COMPILING = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flags: str) -> bool:
    """Whether this jaxlib starts with ``flags`` (an unknown XLA flag aborts the process)."""
    probe = [sys.executable, "-c", "import jax; jax.numpy.zeros(1).block_until_ready()"]
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    try:
        return subprocess.run(probe, env=env, capture_output=True, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:  # a loaded machine: run at XLA's defaults rather than fail the session
        return False


_AT_XLA_DEFAULTS = "DPM_JAX_TESTS_AT_XLA_DEFAULTS"  # set by users_environment() for subprocesses
if os.environ.get(_AT_XLA_DEFAULTS) != "1" and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    _flags = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILING}".strip()
    if _xla_accepts(_flags):
        os.environ["XLA_FLAGS"] = _flags


def users_environment() -> dict[str, str]:
    """This process's environment with the suite's compiler settings taken out of XLA_FLAGS."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if f not in _FAST_COMPILING.split())
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return {**environment, **({"XLA_FLAGS": flags} if flags else {}), _AT_XLA_DEFAULTS: "1"}


USERS_COMPILER_OPTIONS = (
    {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}
    if "--xla_cpu_use_fusion_emitters=false" in os.environ.get("XLA_FLAGS", "")
    else {}
)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import dpm_jax  # noqa: E402
from dpm_jax.eval.datasets import synthetic_blobs  # noqa: E402

# One small configuration reused across test modules so the JIT cache is shared.
SMALL_CONFIG = dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10, split_grid="paper")


def _memory_maps() -> tuple[int, int] | None:
    """(memory maps this process holds, the kernel's limit per process), or None off Linux."""
    try:
        with open("/proc/sys/vm/max_map_count") as limit, open("/proc/self/maps") as maps:
            return sum(1 for _ in maps), int(limit.read())
    except OSError:
        return None


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs when the process nears the kernel's memory-map limit.

    Every program XLA compiles for the CPU maps about three regions of machine code, kept
    until JAX's caches drop it. The whole suite compiles thousands of programs in one
    process; past ``vm.max_map_count`` (65,530 by default) the next compilation cannot map
    its code and XLA's compiler segfaults (measured: /proc/self/maps grew by about 100
    regions a second during a full run, and the run died in a compilation at about 90 %).
    Clearing at half the limit keeps the caches warm for most of the run.
    """
    yield
    counts = _memory_maps()
    if counts is not None and counts[0] > counts[1] // 2:
        jax.clear_caches()


@pytest.fixture(scope="session")
def small_blobs():
    """600 points, d = 3, 6 well-separated blobs in [-100, 100]^3."""
    return synthetic_blobs(n=600, d=3, num_blobs=6, std=1.0, seed=3)


@pytest.fixture(scope="session")
def budget():
    return dpm_jax.Budget(epsilon=1.0, delta=1e-6)


@pytest.fixture
def key():
    return jax.random.key(0)


def majority_accuracy(true_labels: np.ndarray, predicted: np.ndarray) -> float:
    """Definition 12: every cluster votes for its majority label."""
    total = 0
    for cluster in np.unique(predicted):
        total += np.bincount(true_labels[predicted == cluster]).max()
    return total / len(predicted)


def nearest_center_labels(points: np.ndarray, result) -> np.ndarray:
    centers = np.asarray(result.centers)[np.asarray(result.valid)]
    return np.argmin(((points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
