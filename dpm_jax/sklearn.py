"""A scikit-learn estimator for DPM: ``DPMClustering``.

    from dpm_jax.sklearn import DPMClustering
    model = DPMClustering(epsilon=1.0, delta=1e-6, bounds=(-100.0, 100.0)).fit(X)
    model.cluster_centers_, model.counts_, model.n_clusters_, model.ledger_

It wraps :func:`dpm_jax.cluster` (DPM, "DPM: Clustering Sensitive Data through Separation", Algorithm 1) in the
scikit-learn conventions, so it clones, pickles and runs inside a Pipeline.
Needs scikit-learn (>= 1.6), which is not a dependency of dpm_jax itself.

What is differentially private: ``cluster_centers_``, ``counts_``, ``n_clusters_``,
``split_tree_`` and ``split_interval_size_`` (the release of one run, whose privacy
accounting is ``ledger_``), and anything computed from them alone, e.g.
``predict`` on *other* data. What is NOT: ``labels_`` (and ``fit_predict``), the
cluster of every training point, which reveals each individual's cluster.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

try:
    from sklearn.base import BaseEstimator, ClusterMixin
    from sklearn.metrics import pairwise_distances_argmin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as error:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError("dpm_jax.sklearn needs scikit-learn >= 1.6: pip install scikit-learn") from error

from dpm_jax.api import cluster
from dpm_jax.budget import Budget
from dpm_jax.keys import key_from_seed
from dpm_jax.config import DPMConfig

__all__ = ["DPMClustering"]

_DEFAULTS = DPMConfig()
CONFIG_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(DPMConfig))
MIN_PADDED_ROWS = 256


def padded_size(n: int) -> int:
    """Rows the data is padded to: the next power of two, at least ``MIN_PADDED_ROWS``.

    Padding rows are masked out (``point_mask``), so the result is unchanged; data
    sets of similar size (cross-validation folds, bootstrap samples) then share one
    compiled program instead of paying a JIT compilation each.
    """
    return max(MIN_PADDED_ROWS, 1 << max(n - 1, 0).bit_length())


class DPMClustering(ClusterMixin, BaseEstimator):
    """Differentially private clustering with DPM; the number of clusters is found, not given.

    Parameters:
      epsilon, delta: the total (epsilon, delta)-DP budget of one ``fit``; choose
        delta well below 1/n (the paper uses 1/(n sqrt n)).
      bounds: public ``(lo, hi)`` range of the data, scalars or per-feature arrays.
        Required: ``fit`` raises ``ValueError`` when it is None, because reading
        the range from the data would void the privacy guarantee. Values outside
        are clipped to it. Or ``"private"`` / :class:`dpm_jax.PrivateBounds`: estimated under
        DP with a share of the budget (:mod:`dpm_jax.bounds`).
      seed: ``None`` (default) draws fresh randomness from the operating system on
        every ``fit``, as a real release should; an integer in [0, 2**32) makes fits
        reproducible (``jax.random.key(seed)``). Keep a seed secret: whoever knows it
        can remove the noise.
      tau_r, max_depth, tau_e, alpha, t, q, epsilon_shares, delta_shares, percentile, sigma_step,
        num_sigmas, interval_factor, interval_max_dims, max_splits_per_dim, split_grid, lattice_step,
        split_window:
        the hyper-parameters of :class:`dpm_jax.DPMConfig` (paper defaults, Section 6.1, except
        the split grid); all public.

    Attributes (differentially private):
      cluster_centers_: (n_clusters_, n_features_in_) the DP centres.
      counts_: (n_clusters_,) their noisy sizes.
      n_clusters_: the number of clusters found.
      depth_: the tree's depth tau_r (with ``tau_r="auto"``, the default, chosen from a noisy count).
      split_tree_: the released split tree (:class:`dpm_jax.SplitTree`, NumPy arrays).
      split_interval_size_: (n_features_in_,) the split interval size beta (Algorithm 2).
      ledger_: the privacy ledger (:class:`dpm_jax.Ledger`); it adds up to (epsilon, delta).
      bounds_: (lower, upper), each (n_features_in_,): the bounds the data were clipped to.
    Attributes (NOT differentially private):
      labels_: (n_samples,) index of the nearest DP centre of every training point
        (the same as ``predict`` on the training data). Do not publish it.
      n_features_in_, feature_names_in_: as in scikit-learn.
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        bounds=None,
        seed: int | None = None,
        *,
        tau_r: int | str = _DEFAULTS.tau_r,
        max_depth: int = _DEFAULTS.max_depth,
        tau_e: float | None = _DEFAULTS.tau_e,
        alpha: float = _DEFAULTS.alpha,
        t: float = _DEFAULTS.t,
        q: float = _DEFAULTS.q,
        epsilon_shares: tuple[float, ...] = _DEFAULTS.epsilon_shares,
        delta_shares: tuple[float, ...] = _DEFAULTS.delta_shares,
        percentile: float = _DEFAULTS.percentile,
        sigma_step: float = _DEFAULTS.sigma_step,
        num_sigmas: int = _DEFAULTS.num_sigmas,
        interval_factor: float = _DEFAULTS.interval_factor,
        interval_max_dims: int | None = _DEFAULTS.interval_max_dims,
        max_splits_per_dim: int = _DEFAULTS.max_splits_per_dim,
        split_grid: str = _DEFAULTS.split_grid,
        lattice_step: float | None = _DEFAULTS.lattice_step,
        split_window: int = _DEFAULTS.split_window,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.seed = seed
        self.tau_r = tau_r
        self.max_depth = max_depth
        self.tau_e = tau_e
        self.alpha = alpha
        self.t = t
        self.q = q
        self.epsilon_shares = epsilon_shares
        self.delta_shares = delta_shares
        self.percentile = percentile
        self.sigma_step = sigma_step
        self.num_sigmas = num_sigmas
        self.interval_factor = interval_factor
        self.interval_max_dims = interval_max_dims
        self.max_splits_per_dim = max_splits_per_dim
        self.split_grid = split_grid
        self.lattice_step = lattice_step
        self.split_window = split_window

    def dpm_config(self) -> DPMConfig:
        """The :class:`dpm_jax.DPMConfig` of the current parameters (validated there)."""
        values = {name: getattr(self, name) for name in CONFIG_FIELDS}
        for name in ("epsilon_shares", "delta_shares"):  # lists from a grid search or JSON
            if isinstance(values[name], (list, np.ndarray)):
                values[name] = tuple(float(v) for v in values[name])
        return DPMConfig(**values)

    def fit(self, X, y=None):
        """Run DPM once on ``X`` (n_samples, n_features), spending (epsilon, delta).

        ``y`` is ignored. Every call is a new release that spends the budget again.
        """
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        budget = Budget(epsilon=self.epsilon, delta=self.delta)
        config = self.dpm_config()
        n = X.shape[0]
        padded = np.zeros((padded_size(n), X.shape[1]), dtype=np.float32)
        padded[:n] = X
        mask = np.arange(padded.shape[0]) < n
        result = cluster(key_from_seed(self.seed), padded, budget, self.bounds, config=config, point_mask=mask)

        valid = np.asarray(result.valid)
        self.cluster_centers_ = np.asarray(result.centers)[valid]
        self.counts_ = np.asarray(result.counts)[valid]
        self.n_clusters_ = int(result.k)
        self.depth_ = int(result.depth)
        self.split_tree_ = jax.tree.map(np.asarray, result.tree)
        self.split_interval_size_ = np.asarray(result.split_interval_size)
        self.ledger_ = result.ledger
        self.bounds_ = tuple(np.asarray(b) for b in result.bounds)
        self.labels_ = pairwise_distances_argmin(X, self.cluster_centers_)
        return self

    def predict(self, X):
        """Index of the nearest DP centre (Euclidean) of every row of ``X``.

        Post-processing of the DP centres; on the training data the labels are as
        non-private as ``labels_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return pairwise_distances_argmin(X, self.cluster_centers_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.seed is None
        return tags
