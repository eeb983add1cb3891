"""The scikit-learn estimator: conventions (scikit-learn's own checks), reproducibility
against the functional API, cloning, pickling and Pipelines.

Every fit here uses the same budget, tau_r and feature count, so the data, padded to
their row bucket (1,024 rows, :mod:`dpm_jax.rows`), share one compiled DPM program;
scikit-learn's checks add one program per feature count they use (1, 2, 3, 4, 5, 10).
"""

import dataclasses
import inspect
import pickle
import warnings

import jax
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import dpm_jax  # noqa: E402
from dpm_jax.eval.datasets import synthetic_blobs  # noqa: E402
from dpm_jax.sklearn import CONFIG_FIELDS, DPMClustering, PreprocessingWarning  # noqa: E402

# epsilon = 1000 makes the noise negligible, so that scikit-learn's check_clustering
# (adjusted Rand index > 0.4 on 55 points) tests the clustering logic, not the noise;
# at epsilon = 1 the root count alone has Laplace noise of scale ~60 on 55 points.
# A large budget so the checks see near-noiseless centres; delta 1e-3 pays the exact
# samplers at epsilon_avg = 12 (their e^epsilon-scaled deviation, dpm_jax.mechanisms).
PARAMS = dict(epsilon=20.0, delta=1e-3, bounds=(-10.0, 10.0), seed=0, tau_r=2)
BLOBS = synthetic_blobs(200, 3, num_blobs=3, box=(-8.0, 8.0), std=0.5, seed=3)
# check_clustering standardises its three blobs (all within +-1.8): their public range is
# about +-3. With bounds +-10 the gaps between the blobs are narrower than the default
# split window (3/64 of the cell, 0.94 units), no window at the root is empty and DPM stops
# at k = 1, as docs/evaluation.md describes for close clusters.
CHECK_PARAMS = {**PARAMS, "bounds": (-3.0, 3.0)}


@pytest.mark.slow
@parametrize_with_checks([DPMClustering(**CHECK_PARAMS)])
def test_sklearn_conventions(estimator, check):
    # Long because: scikit-learn's checks fit many data shapes, each compiled (up to 13 s, 2 cores at load 9, each).
    """All of scikit-learn's estimator checks apply to a clusterer and pass; none is
    marked as an expected failure. (check_array_api_input skips itself unless
    SCIPY_ARRAY_API is set; DPMClustering takes NumPy-convertible input only.)"""
    check(estimator)


def fitted_model(**overrides) -> DPMClustering:
    return DPMClustering(**{**PARAMS, **overrides}).fit(BLOBS.points)


@pytest.mark.slow
def test_fit_reproduces_the_functional_api():
    # Long because: the first fit compiles the clustering (20 s in the fast loop, 2 cores at load 9).
    """seed s gives jax.random.key(s); padding the rows to 256 must not change the release."""
    model = fitted_model()
    result = dpm_jax.cluster(
        jax.random.key(PARAMS["seed"]),
        BLOBS.points,
        dpm_jax.Budget(PARAMS["epsilon"], PARAMS["delta"]),
        PARAMS["bounds"],
        config=dpm_jax.DPMConfig(tau_r=PARAMS["tau_r"]),
    )
    valid = np.asarray(result.valid)
    assert model.n_clusters_ == int(result.k) == len(model.cluster_centers_) == len(model.counts_)
    np.testing.assert_allclose(model.cluster_centers_, np.asarray(result.centers)[valid], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(model.counts_, np.asarray(result.counts)[valid], rtol=1e-5, atol=1e-3)
    for fitted, direct in zip(model.split_tree_, result.tree):
        np.testing.assert_allclose(fitted, np.asarray(direct), rtol=1e-5, atol=1e-3)
    assert model.ledger_ == result.ledger
    assert model.ledger_.total_epsilon == pytest.approx(PARAMS["epsilon"], rel=1e-12)
    assert model.ledger_.total_delta == pytest.approx(PARAMS["delta"], rel=1e-12)


@pytest.mark.slow
def test_labels_are_the_nearest_dp_centre():
    # Long because: fits (shares the compile of the fits above).
    model = fitted_model()
    distances = ((BLOBS.points[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(model.labels_, distances.argmin(1))
    np.testing.assert_array_equal(model.predict(BLOBS.points), model.labels_)
    np.testing.assert_array_equal(DPMClustering(**PARAMS).fit_predict(BLOBS.points), model.labels_)
    # negligible noise: the three separated blobs are found
    assert model.n_clusters_ == 3
    errors = np.linalg.norm(model.cluster_centers_[:, None] - BLOBS.centers[None], axis=-1)
    assert sorted(errors.argmin(1)) == [0, 1, 2] and errors.min(1).max() < 0.5


def test_bounds_are_never_read_from_the_data():
    with pytest.raises(ValueError, match="bounds are required"):
        DPMClustering(seed=0).fit(BLOBS.points)


@pytest.mark.parametrize(
    "params, error",
    [
        (dict(epsilon=0.0), ValueError),
        (dict(delta=1.5), ValueError),
        (dict(tau_r=0), ValueError),
        (dict(q=0.4, t=0.3), ValueError),
        (dict(seed=-1), ValueError),
        (dict(seed=1.5), TypeError),
    ],
)
def test_invalid_parameters_fail_at_fit(params, error):
    model = DPMClustering(**{**PARAMS, **params})  # scikit-learn validates in fit, not __init__
    with pytest.raises(error):
        model.fit(BLOBS.points)


def test_parameters_mirror_dpm_config():
    params = DPMClustering().get_params()
    assert set(params) - {"epsilon", "delta", "bounds", "seed", "random_state"} == set(CONFIG_FIELDS)
    assert DPMClustering().dpm_config() == dpm_jax.DPMConfig()
    config = DPMClustering(tau_r=5, epsilon_shares=[0.1, 0.2, 0.3, 0.4]).dpm_config()
    assert config.tau_r == 5 and config.epsilon_shares == (0.1, 0.2, 0.3, 0.4)
    hash(config)  # lists from a grid search become tuples: the config stays a static jit argument


def test_the_signature_lists_every_config_field_with_its_default_and_nothing_else_is_accepted():
    parameters = inspect.signature(DPMClustering).parameters
    fields = dataclasses.fields(dpm_jax.DPMConfig)
    assert list(parameters)[4:-1] == [field.name for field in fields]  # epsilon, delta, bounds, seed; random_state
    assert all(
        parameters[f.name].default == f.default and parameters[f.name].kind is inspect.Parameter.KEYWORD_ONLY
        for f in fields
    )
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    with pytest.raises(TypeError, match="alpah"):
        DPMClustering(alpah=2.0)
    model = clone(DPMClustering(split_window=1, max_depth=5))
    assert (model.split_window, model.max_depth) == (1, 5) and model.dpm_config().split_window == 1


@pytest.mark.slow
def test_pipeline_clone_and_pickle():
    # Long because: fits (shares the compile of the fits above).
    """A data-independent preprocessing step keeps the public bounds meaningful."""
    pipeline = make_pipeline(FunctionTransformer(np.negative), DPMClustering(**PARAMS))
    labels = pipeline.fit_predict(BLOBS.points)
    direct = DPMClustering(**PARAMS).fit(-BLOBS.points)
    np.testing.assert_array_equal(labels, direct.labels_)

    restored = pickle.loads(pickle.dumps(pipeline))
    np.testing.assert_array_equal(restored.predict(BLOBS.points), pipeline.predict(BLOBS.points))
    assert restored[-1].ledger_ == direct.ledger_

    copy = clone(pipeline)
    assert copy[-1].get_params() == pipeline[-1].get_params()
    assert not hasattr(copy[-1], "cluster_centers_")


@pytest.mark.slow
def test_seed_none_draws_fresh_noise():
    # Long because: fits (shares the compile of the fits above).
    model = DPMClustering(**{**PARAMS, "seed": None})
    assert model.__sklearn_tags__().non_deterministic
    first = model.fit(BLOBS.points).cluster_centers_.copy()
    second = model.fit(BLOBS.points).cluster_centers_
    assert first.shape != second.shape or not np.allclose(first, second, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_automatic_depth_spends_its_count_first():
    # Long because: compiles the automatic-depth fit (16 s, 2 cores at load 9).
    """tau_r='auto' through the estimator: the padding mask is concrete, so the depth's noisy
    count runs; it is the ledger's first line and the ledger still adds up to the budget."""
    X = synthetic_blobs(300, 2, num_blobs=3, seed=2).points
    model = DPMClustering(epsilon=20.0, delta=1e-3, bounds=(-100.0, 100.0), tau_r="auto", seed=1).fit(X)
    assert model.ledger_[0].name == "depth"
    assert model.ledger_.total_epsilon == pytest.approx(20.0, rel=1e-12)
    assert len([e for e in model.ledger_ if e.name.startswith("split/")]) == model.depth_ >= 1


@pytest.mark.slow
def test_fit_warns_when_the_budget_cannot_separate_two_clusters():
    # Long because: a starved budget compiles the fit again (15 s, 2 cores at load 9).
    data = synthetic_blobs(300, 2, num_blobs=2, seed=0)
    model = DPMClustering(epsilon=1.0, delta=1e-6, bounds=data.bounds, tau_r=3, seed=0)
    with pytest.warns(dpm_jax.diagnostics.InsufficientBudgetWarning, match="cannot separate even two"):
        model.fit(data.points)


@pytest.mark.slow
def test_random_state_as_scikit_learn_accepts_it():
    # Long because: fits (shares the compile of the fits above).
    """An int is the seed; a RandomState draws the seed (same state, same fit); None is fresh noise."""
    base = {k: v for k, v in PARAMS.items() if k != "seed"}
    by_int = DPMClustering(**base, random_state=0).fit(BLOBS.points)
    np.testing.assert_array_equal(by_int.cluster_centers_, fitted_model().cluster_centers_)
    first = DPMClustering(**base, random_state=np.random.RandomState(5)).fit(BLOBS.points)
    again = DPMClustering(**base, random_state=np.random.RandomState(5)).fit(BLOBS.points)
    np.testing.assert_array_equal(first.cluster_centers_, again.cluster_centers_)
    assert DPMClustering(**base).__sklearn_tags__().non_deterministic
    assert not DPMClustering(**base, random_state=3).__sklearn_tags__().non_deterministic
    np.testing.assert_array_equal(  # random_state, when given, takes precedence over seed
        DPMClustering(**{**PARAMS, "seed": 7}, random_state=0).fit(BLOBS.points).cluster_centers_,
        by_int.cluster_centers_,
    )


@pytest.mark.slow
def test_transform_and_score_measure_distances_to_the_dp_centres():
    # Long because: fits (shares the compile of the fits above).
    model = fitted_model()
    distances = np.linalg.norm(BLOBS.points[:, None, :] - model.cluster_centers_[None], axis=-1)
    np.testing.assert_allclose(model.transform(BLOBS.points), distances, rtol=1e-5, atol=1e-5)
    assert model.score(BLOBS.points) == pytest.approx(-np.sum(distances.min(1) ** 2), rel=1e-5)
    moved = model.cluster_centers_ + 1.0  # centres further from the data score lower
    assert model.score(BLOBS.points) > -np.sum(np.min(np.linalg.norm(BLOBS.points[:, None] - moved, axis=-1), 1) ** 2)


@pytest.mark.slow
def test_grid_search_and_pipeline_need_no_extra_arguments():
    # Long because: the grid search's fits compile their shapes (14 s, 2 cores at load 9).
    from sklearn.model_selection import GridSearchCV

    search = GridSearchCV(DPMClustering(**PARAMS), {"epsilon": [10.0, 20.0]}, cv=2).fit(BLOBS.points)
    assert search.best_params_["epsilon"] in (10.0, 20.0) and np.isfinite(search.best_score_)
    pipeline = make_pipeline(FunctionTransformer(np.negative), DPMClustering(**PARAMS)).fit(BLOBS.points)
    assert pipeline.transform(BLOBS.points).shape == (len(BLOBS.points), pipeline[-1].n_clusters_)


@pytest.mark.slow
def test_a_fitted_standard_scaler_before_the_estimator_warns():
    # Long because: fits (shares the compile of the fits above).
    from sklearn.preprocessing import StandardScaler

    with pytest.warns(PreprocessingWarning, match="NOT differentially private"):
        make_pipeline(StandardScaler(), DPMClustering(**{**PARAMS, "bounds": (-3.0, 3.0)})).fit(BLOBS.points)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreprocessingWarning)
        DPMClustering(**PARAMS).fit(BLOBS.points)  # raw data: no warning
