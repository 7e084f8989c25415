"""LocalEstimator and PooledEstimator: routing, population prediction, bad input."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.svm import LinearSVC

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_federated_regression


@pytest.fixture
def data():
    X, y, groups, coef, intercept = make_federated_regression(
        n_clients=3, n_samples=[40, 50, 60], heterogeneity=2.0, noise=0.01,
        return_coef=True, random_state=0,
    )
    return X, y, groups, coef, intercept


def test_each_client_model_sees_only_its_rows(data):
    X, y, groups, coef, intercept = data
    model = LocalEstimator(LinearRegression()).fit(X, y, groups=groups)
    assert model.clients_.tolist() == [0, 1, 2]
    for k, est in enumerate(model.estimators_):
        ref = LinearRegression().fit(X[groups == k], y[groups == k])
        np.testing.assert_allclose(est.coef_, ref.coef_)
        np.testing.assert_allclose(est.coef_, coef[k], atol=0.01)
    np.testing.assert_allclose(model.client_weights_, [40 / 150, 50 / 150, 60 / 150])
    # personalized predictions route rows to their client's model
    pred = model.predict(X, groups=groups)
    for k in range(3):
        np.testing.assert_allclose(pred[groups == k], model.estimators_[k].predict(X[groups == k]))
    assert model.score(X, y, groups=groups) > 0.99


def test_population_prediction_is_weighted_mixture(data):
    X, y, groups, _, _ = data
    model = LocalEstimator(LinearRegression()).fit(X, y, groups=groups)
    expected = sum(w * m.predict(X) for w, m in zip(model.client_weights_, model.estimators_))
    np.testing.assert_allclose(model.predict(X), expected)
    # unseen clients get the population prediction ...
    np.testing.assert_allclose(model.predict(X[:5], groups=[7] * 5), expected[:5])
    mixed = model.predict(X[:4], groups=[0, 99, 1, 99])
    np.testing.assert_allclose(mixed[[1, 3]], expected[[1, 3]])
    np.testing.assert_allclose(mixed[0], model.estimators_[0].predict(X[:1])[0])
    # ... or an error
    strict = clone(model).set_params(unknown_client="error").fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"clients not seen in fit: \[99\]"):
        strict.predict(X[:2], groups=[0, 99])


def test_return_std_is_forwarded_and_mixture_std_is_right(data):
    X, y, groups, _, _ = data
    gp = GaussianProcessRegressor(alpha=1e-2, optimizer=None)
    model = LocalEstimator(gp).fit(X[:90], y[:90], groups=groups[:90])
    mean, std = model.predict(X[90:], groups=groups[90:], return_std=True)
    k = groups[90]
    ref_mean, ref_std = model.estimators_[k].predict(X[90:91], return_std=True)
    np.testing.assert_allclose([mean[0], std[0]], [ref_mean[0], ref_std[0]])
    # population: mixture of Gaussians, checked by brute force
    pm, ps = model.predict(X[:3], return_std=True)
    outs = [m.predict(X[:3], return_std=True) for m in model.estimators_]
    w = model.client_weights_
    mu = sum(wk * o[0] for wk, o in zip(w, outs))
    var = sum(wk * (o[1] ** 2 + (o[0] - mu) ** 2) for wk, o in zip(w, outs))
    np.testing.assert_allclose(pm, mu)
    np.testing.assert_allclose(ps, np.sqrt(var))
    with pytest.raises(ValueError, match="return_std"):
        LocalEstimator(Ridge()).fit(X, y, groups=groups).predict(X, return_std=True)


def test_classifier_with_string_clients_and_missing_classes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    y = np.where(X[:, 0] > 0, "pos", "neg").astype(object)
    y[:10] = "mid"
    groups = np.array(["site-b"] * 60 + ["site-a"] * 60)
    model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    assert model.clients_.tolist() == ["site-a", "site-b"]
    assert model.classes_.tolist() == ["mid", "neg", "pos"]
    proba = model.predict_proba(X, groups=groups)
    assert proba.shape == (120, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.all(proba[groups == "site-a", 0] == 0)  # site-a never saw "mid"
    assert set(model.predict(X)) <= {"mid", "neg", "pos"}
    with pytest.raises(ValueError, match="did not see every class"):
        model.decision_function(X, groups=groups)


def test_classifier_without_predict_proba_votes():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 2))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    groups = np.repeat([0, 1, 2], 30)
    model = LocalEstimator(LinearSVC()).fit(X, y, groups=groups)
    assert not hasattr(model, "predict_proba")
    assert model.decision_function(X, groups=groups).shape == (90,)
    assert model.score(X, y) > 0.9  # population vote


def test_pooled_ignores_groups(data):
    X, y, groups, _, _ = data
    model = PooledEstimator(Ridge()).fit(X, y, groups=groups)
    ref = Ridge().fit(X, y)
    np.testing.assert_allclose(model.predict(X, groups=groups), ref.predict(X))
    np.testing.assert_allclose(model.predict(X), ref.predict(X))
    assert model.clients_.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="groups has 2 labels but X has 3 rows"):
        model.predict(X[:3], groups=[0, 1])


def test_sample_weight_is_forwarded(data):
    X, y, groups, _, _ = data
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    model = LocalEstimator(Ridge()).fit(X, y, groups=groups, sample_weight=w)
    ref = Ridge().fit(X[groups == 1], y[groups == 1], sample_weight=w[groups == 1])
    np.testing.assert_allclose(model.estimators_[1].coef_, ref.coef_)

    class NoWeights(Ridge):
        def fit(self, X, y):
            return super().fit(X, y)

    with pytest.raises(ValueError, match="does not accept sample_weight"):
        LocalEstimator(NoWeights()).fit(X, y, groups=groups, sample_weight=w)


def test_results_do_not_depend_on_n_jobs(data):
    X, y, groups, _, _ = data
    a = LocalEstimator(Ridge(), n_jobs=1).fit(X, y, groups=groups).predict(X, groups=groups)
    b = LocalEstimator(Ridge(), n_jobs=2).fit(X, y, groups=groups).predict(X, groups=groups)
    np.testing.assert_array_equal(a, b)


def test_communication_sends_only_counts(data):
    X, y, groups, _, _ = data
    model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    ledger = model.communication_
    assert ledger.bytes_up == 3 * 8 and ledger.bytes_down == 0
    assert {r.names for r in ledger.records if r.direction == "up"} == {("n_samples",)}
    assert pickle.loads(pickle.dumps(model)).communication_.bytes_up == 24


@pytest.mark.parametrize("Wrapper", [LocalEstimator, PooledEstimator])
@pytest.mark.parametrize(
    "make_bad, match",
    [
        (lambda X, y, g: (np.where(X == X[0, 3], np.nan, X), y, g), "NaN"),
        (lambda X, y, g: (X, np.where(np.arange(y.size) == 2, np.inf, y), g), "infinity|inf"),
        (lambda X, y, g: (X, y, g[:-1]), "groups has"),
        (lambda X, y, g: (X[:, :, None], y, g), "dim 3"),
        (lambda X, y, g: (X, y[:-1], g), "inconsistent numbers of samples"),
        (lambda X, y, g: (X, y, np.c_[g, g]), "groups must be 1-D"),
        (lambda X, y, g: (X, y, np.r_[np.nan, g[1:]]), "groups contains NaN"),
    ],
)
def test_bad_input_is_a_clear_error(data, Wrapper, make_bad, match):
    X, y, groups, _, _ = data
    Xb, yb, gb = make_bad(X, y, groups)
    with pytest.raises(ValueError, match=match):
        Wrapper(Ridge()).fit(Xb, yb, groups=gb)


@pytest.mark.parametrize("Wrapper", [LocalEstimator, PooledEstimator])
@pytest.mark.parametrize("bad", [Ridge, "ridge", None, 3])
def test_estimator_must_be_an_estimator(data, Wrapper, bad):
    X, y, groups, _, _ = data
    with pytest.raises(TypeError, match="estimator must be a scikit-learn estimator"):
        Wrapper(bad).fit(X, y, groups=groups)


def test_failed_fit_leaves_fitted_estimator_unchanged(data):
    X, y, groups, _, _ = data
    model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    before = {k: v for k, v in vars(model).items()}
    pred = model.predict(X[:5], groups=groups[:5])
    Xbad = X[:, :2].copy()
    Xbad[0, 0] = np.nan
    with pytest.raises(ValueError):
        model.fit(Xbad, y, groups=groups)
    assert vars(model).keys() == before.keys()
    assert all(vars(model)[k] is before[k] for k in before)
    assert model.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(model.predict(X[:5], groups=groups[:5]), pred)
    # an inner estimator failing on one client also leaves it unchanged
    y_cls = (y > 0).astype(int)
    y_cls[groups == 2] = 1  # client 2 has a single class
    clf = LocalEstimator(LogisticRegression()).fit(X, (y > 0).astype(int), groups=groups)
    state = dict(vars(clf))
    with pytest.raises(ValueError, match="class") as info:
        clf.fit(X[:, :3], y_cls, groups=groups)
    assert "client 2" in " ".join(getattr(info.value, "__notes__", []))
    assert all(vars(clf)[k] is state[k] for k in state) and clf.n_features_in_ == X.shape[1]


def test_unknown_client_option_is_validated(data):
    X, y, groups, _, _ = data
    with pytest.raises(ValueError, match="unknown_client"):
        LocalEstimator(Ridge(), unknown_client="zero").fit(X, y, groups=groups)
