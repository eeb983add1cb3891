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
cluster of every training point, which reveals each individual's cluster; ``score`` and
``transform`` on the training data (they read every row).

Preprocessing: a transformer *fitted on the private data* (``StandardScaler``, ``MinMaxScaler``,
PCA) computes its parameters from every record without noise, so a pipeline
``make_pipeline(StandardScaler(), DPMClustering(...))`` is NOT differentially private, and its
scaled data makes the public bounds meaningless. ``fit`` warns (:class:`PreprocessingWarning`)
when every column of X has mean 0 and standard deviation 1, the mark of such a scaler. The
private way: scale with public constants (``FunctionTransformer(lambda X: (X - c) / s)`` with c
and s known without looking at the data), or give DPM the raw data and its public bounds.

scikit-learn's estimator checks (``parametrize_with_checks``, tests/test_sklearn.py) pass at
near-noiseless settings only: epsilon = 20, delta = 1e-3, bounds (-3, 3), tau_r = 2, seed 0.
Their clustering check asks for an adjusted Rand index above 0.4 on 55 points, which no
epsilon = 1 release of 55 points can promise (the root count alone has noise of scale ~60).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import jax
import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
    from sklearn.metrics import pairwise_distances, pairwise_distances_argmin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as error:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError("dpm_jax.sklearn needs scikit-learn >= 1.6: pip install scikit-learn") from error

from dpm_jax.api import cluster
from dpm_jax.budget import Budget
from dpm_jax.keys import key_from_seed
from dpm_jax.config import DPMConfig

__all__ = ["DPMClustering", "PreprocessingWarning"]

_DEFAULTS = DPMConfig()
CONFIG_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(DPMConfig))


class PreprocessingWarning(UserWarning):
    """X looks scaled by a transformer fitted on it: such preprocessing is not differentially private."""


def _looks_standardised(X: np.ndarray) -> bool:
    """Every column has mean 0 and standard deviation 1 to within float32 rounding (a StandardScaler's
    output). A local check on the caller's data that releases nothing."""
    if X.shape[0] < 3:
        return False
    with np.errstate(over="ignore", invalid="ignore"):  # a record near 1e300: no data-dependent warning
        mean, std = X.mean(axis=0, dtype=np.float64), X.std(axis=0, dtype=np.float64)
    return bool(np.all(np.abs(mean) < 1e-4) and np.all(np.abs(std - 1.0) < 1e-4))


def _seed_of(seed, random_state) -> int | None:
    """The seed of :func:`dpm_jax.keys.key_from_seed`: ``random_state`` when not None, else ``seed``."""
    if random_state is None:
        return seed
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**32, dtype=np.uint64))
    return random_state


class DPMClustering(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
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
      random_state: scikit-learn's spelling of the same: None (fresh randomness, the default), an
        integer (as ``seed``) or a ``numpy.random.RandomState`` (a seed drawn from it at each
        ``fit``). When it is not None it takes precedence over ``seed`` (scikit-learn's
        ``set_random_state`` sets it).
      tau_r, max_depth, tau_e, alpha, t, q, epsilon_shares, delta_shares, ... (keyword only): every
        field of :class:`dpm_jax.DPMConfig`, with its default (paper defaults, Section 6.1, except
        the depth and the split grid); all public. The signature lists them from the config's fields.

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

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, bounds=None, seed: int | None = None, *,
                 random_state=None, **config):  # fmt: skip
        unknown = sorted(set(config) - set(CONFIG_FIELDS))
        if unknown:
            raise TypeError(f"DPMClustering got {unknown}, which are not fields of dpm_jax.DPMConfig: {CONFIG_FIELDS}")
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.seed = seed
        for name in CONFIG_FIELDS:
            setattr(self, name, config.get(name, getattr(_DEFAULTS, name)))
        self.random_state = random_state

    def dpm_config(self) -> DPMConfig:
        """The :class:`dpm_jax.DPMConfig` of the current parameters (validated there)."""
        values = {name: getattr(self, name) for name in CONFIG_FIELDS}
        for name in ("epsilon_shares", "delta_shares"):  # lists from a grid search or JSON
            if isinstance(values[name], (list, np.ndarray)):
                values[name] = tuple(float(v) for v in values[name])
        return DPMConfig(**values)

    def fit(self, X, y=None):
        """Run DPM once on ``X`` (n_samples, n_features), spending (epsilon, delta).

        ``y`` is ignored. Every call is a new release that spends the budget again (inside
        ``with accountant:`` it is charged to the :class:`dpm_jax.Accountant` before X is read).
        """
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        if _looks_standardised(X):
            warnings.warn(
                "every column of X has mean 0 and standard deviation 1, as a StandardScaler fitted on this data "
                "leaves it: such a scaler reads every record without noise, so the pipeline is NOT differentially "
                "private (and the bounds no longer describe the data). Scale with public constants instead "
                "(dpm_jax.sklearn module docstring)",
                PreprocessingWarning,
                stacklevel=2,
            )
        budget = Budget(epsilon=self.epsilon, delta=self.delta)
        config = self.dpm_config()
        seed = _seed_of(self.seed, self.random_state)
        # data sets of similar size (folds, resamples) share one compiled program: dpm_jax.rows
        result = cluster(key_from_seed(seed), X, budget, self.bounds, config=config)

        valid = np.asarray(result.valid)
        self.cluster_centers_ = np.asarray(result.centers)[valid]
        self.counts_ = np.asarray(result.counts)[valid]
        self.n_clusters_ = int(result.k)
        self._n_features_out = self.n_clusters_  # transform's columns (get_feature_names_out)
        self.depth_ = int(result.depth)
        self.split_tree_ = jax.tree.map(np.asarray, result.tree)
        self.split_interval_size_ = np.asarray(result.split_interval_size)
        self.ledger_ = result.ledger
        self.bounds_ = tuple(np.asarray(b) for b in result.bounds)
        with np.errstate(over="ignore", invalid="ignore"):  # a point near 1e300: no data-dependent warning
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

    def transform(self, X):
        """(n_samples, n_clusters_) Euclidean distances of every row of ``X`` to the DP centres.

        Post-processing of the DP centres; it reads X, so on the training data it is NOT private.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return pairwise_distances(X, self.cluster_centers_)

    def score(self, X, y=None):
        """Minus the sum of squared distances of the rows of ``X`` to their nearest DP centre (higher is
        better, as ``KMeans.score``), so ``GridSearchCV`` needs no scorer. It reads X: on the training
        data, or on held-out private data, the score is NOT differentially private."""
        distances = self.transform(X)
        return -float(np.sum(np.min(distances, axis=1) ** 2))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.seed is None and not isinstance(self.random_state, (int, np.integer))
        return tags


def _signature_with_config_fields(init) -> inspect.Signature:
    """``init``'s signature with ``**config`` spelled out as DPMConfig's fields (keyword-only, its
    defaults and types), before ``random_state``: scikit-learn reads the parameters from it
    (``get_params``, ``clone``), so every field of the config is a parameter of the estimator."""
    signature = inspect.signature(init)
    fields = [
        inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.type)
        for field in dataclasses.fields(DPMConfig)
    ]
    named = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return signature.replace(parameters=named[:-1] + fields + named[-1:])


DPMClustering.__init__.__signature__ = _signature_with_config_fields(DPMClustering.__init__)
