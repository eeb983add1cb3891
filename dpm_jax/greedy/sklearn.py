"""A scikit-learn estimator for the unified greedy: ``DPKMeans`` (:func:`dpm_jax.kmeans`).

    from dpm_jax.greedy.sklearn import DPKMeans
    model = DPKMeans(n_clusters=8, epsilon=1.0, delta=1e-6, bounds=(-100.0, 100.0)).fit(X)
    model.cluster_centers_, model.sizes_, model.cost_curve_, model.elbow_k_, model.ledger_, model.bounds_

Differentially private: ``cluster_centers_``, ``sizes_``, ``cost_curve_``, ``elbow_k_``,
``bounds_`` (one run's release, accounted in ``ledger_``) and anything computed from them alone,
e.g. ``predict`` on other data. NOT differentially private: ``labels_`` (and
``fit_predict``), the centre of every training point. Needs scikit-learn.
"""

from __future__ import annotations

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClusterMixin
    from sklearn.metrics import pairwise_distances_argmin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as error:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError("dpm_jax.greedy.sklearn needs scikit-learn >= 1.6: pip install scikit-learn") from error

from dpm_jax.bounds import is_private
from dpm_jax.budget import Budget
from dpm_jax.greedy.api import DEFAULT_LEVELS, DEFAULT_METHOD, DEFAULT_ORDER, MAX_GRID_DIM, kmeans
from dpm_jax.keys import key_from_seed

__all__ = ["DPKMeans"]


class DPKMeans(ClusterMixin, BaseEstimator):
    """DP k-means (z = 2) or k-median (z = 1) with ``n_clusters`` centres (the unified greedy).

    Parameters: n_clusters; epsilon, delta (the budget of one ``fit``); bounds (public
    ``(lo, hi)``, required; or ``"private"`` / :class:`dpm_jax.PrivateBounds`: estimated under DP
    with a share of the budget, ``bounds_`` then holds the estimate); seed (None: fresh randomness per
    fit; an integer makes fits reproducible, keep it secret); z, levels, grid_dim, method, order
    (public, see :func:`dpm_jax.kmeans`; ``cluster_centers_`` are in the prefix order).
    """

    def __init__(
        self,
        n_clusters: int = 8,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        bounds=None,
        seed: int | None = None,
        *,
        z: int = 2,
        levels: int = DEFAULT_LEVELS,
        grid_dim: int = MAX_GRID_DIM,
        method: str = DEFAULT_METHOD,
        order: str = DEFAULT_ORDER,
    ):
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.seed = seed
        self.z = z
        self.levels = levels
        self.grid_dim = grid_dim
        self.method = method
        self.order = order

    def fit(self, X, y=None):
        """One DP run on X (y is ignored)."""
        X = validate_data(self, X, dtype=np.float32)
        bounds = self.bounds if self.bounds is None or is_private(self.bounds) else tuple(self.bounds)
        result = kmeans(
            key_from_seed(self.seed),
            X,
            self.n_clusters,
            Budget(self.epsilon, self.delta),
            bounds=bounds,
            z=self.z,
            levels=self.levels,
            grid_dim=self.grid_dim,
            method=self.method,
            order=self.order,
        )
        self.cluster_centers_ = np.asarray(result.centers, np.float64)
        self.sizes_ = np.asarray(result.sizes)
        self.cost_curve_ = np.asarray(result.cost_curve)
        self.elbow_k_ = int(result.elbow_k)
        self.ledger_ = result.ledger
        self.bounds_ = tuple(np.asarray(b) for b in result.bounds)
        self.labels_ = pairwise_distances_argmin(X, self.cluster_centers_)
        return self

    def predict(self, X):
        """Index of the nearest DP centre of every row of X."""
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float32, reset=False)
        return pairwise_distances_argmin(X, self.cluster_centers_)
