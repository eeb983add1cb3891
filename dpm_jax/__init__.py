"""dpm_jax: differentially private clustering with DPM in pure-functional JAX.

DPM (the paper "DPM: Clustering Sensitive Data through
Separation") recursively splits the data through sparse regions chosen by the
exponential mechanism and returns DP cluster centres without being told k.

    import jax, dpm_jax
    res = dpm_jax.cluster(jax.random.key(0), X, dpm_jax.Budget(epsilon=1.0, delta=1e-6),
                          bounds=(-100.0, 100.0))
"""

from dpm_jax import cache, diagnostics
from dpm_jax.accountant import Accountant, BudgetExceededError
from dpm_jax.api import ClusterResult, cluster
from dpm_jax.assign import assign, released_clusters, training_labels
from dpm_jax.diagnostics.plan import InsufficientBudgetWarning, LargeDeltaWarning
from dpm_jax.bounds import PrivateBounds
from dpm_jax.bounds_api import private_bounds
from dpm_jax.budget import Budget
from dpm_jax.ledger import Ledger, LedgerEntry
from dpm_jax.config import DPMConfig
from dpm_jax.greedy import KMeansResult, kmeans
from dpm_jax.keys import derive_key
from dpm_jax.stream import ChunkError, cluster_stream
from dpm_jax.synth.api import SynthResult, synthesize
from dpm_jax.synth.plan import SynthConfig
from dpm_jax.tree import SplitTree

__all__ = [
    "Accountant",
    "Budget",
    "BudgetExceededError",
    "InsufficientBudgetWarning",
    "LargeDeltaWarning",
    "assign",
    "released_clusters",
    "training_labels",
    "ChunkError",
    "ClusterResult",
    "DPMConfig",
    "KMeansResult",
    "Ledger",
    "LedgerEntry",
    "PrivateBounds",
    "SplitTree",
    "SynthConfig",
    "SynthResult",
    "cache",
    "cluster",
    "cluster_stream",
    "derive_key",
    "private_bounds",
    "diagnostics",
    "kmeans",
    "synthesize",
]  # DPMClustering (scikit-learn's estimator) is an attribute, not in *: scikit-learn is optional
__version__ = "0.1.0"

cache.enable_by_default()  # JAX's persistent compilation cache; opt-out: DPM_JAX_NO_COMPILATION_CACHE=1


def __getattr__(name):
    # The scikit-learn estimator is imported lazily: scikit-learn is not a dependency.
    if name == "DPMClustering":
        from dpm_jax.sklearn import DPMClustering

        return DPMClustering
    raise AttributeError(f"module 'dpm_jax' has no attribute {name!r}")
