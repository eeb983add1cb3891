"""dpm_jax.diagnostics: know before you spend, understand after -- from public numbers only.

* :func:`plan` (:mod:`~dpm_jax.diagnostics.plan`): what a budget lets DPM do at a size
  ``n`` the user declares public, before any data is touched;
* :func:`explain` (:mod:`~dpm_jax.diagnostics.explain`): why a released
  :class:`~dpm_jax.ClusterResult` came out as it did, from its released tree and ledger;
* :mod:`~dpm_jax.diagnostics.theory`: the stopping analysis of "Understanding the
  Theoretical Guarantees of DPM", errata corrected;
* :mod:`~dpm_jax.diagnostics.separation`: how many balanced clusters a budget separates.

None of them takes data as an argument: their inputs are public numbers or
differentially private releases, so by post-processing they cost no privacy.
"""

from dpm_jax.diagnostics import separation, theory
from dpm_jax.diagnostics.explain import Explanation, NodeExplanation, explain
from dpm_jax.diagnostics.plan import (
    AlphaWindow,
    HaltingPrediction,
    InsufficientBudgetWarning,
    LargeDeltaWarning,
    LevelPlan,
    Plan,
    UniformPrediction,
    plan,
    warn_if_insufficient,
    warn_if_large_delta,
)
from dpm_jax.depth import recommended_tau_r

__all__ = [
    "AlphaWindow",
    "Explanation",
    "HaltingPrediction",
    "InsufficientBudgetWarning",
    "LargeDeltaWarning",
    "LevelPlan",
    "NodeExplanation",
    "Plan",
    "UniformPrediction",
    "explain",
    "plan",
    "recommended_tau_r",
    "separation",
    "theory",
    "warn_if_insufficient",
    "warn_if_large_delta",
]
