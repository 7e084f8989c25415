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


def test_predict_params_reach_a_pipeline_of_a_gaussian_process(data):
    import sklearn
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, groups, _, _ = data
    gp = GaussianProcessRegressor(alpha=1e-2, optimizer=None)
    pipe = make_pipeline(StandardScaler(), gp)
    pooled = PooledEstimator(pipe).fit(X, y, groups=groups)
    ref = clone(pipe).fit(X, y)
    for got, want in zip(pooled.predict(X[:5], return_std=True),
                         ref.predict(X[:5], return_std=True)):
        np.testing.assert_allclose(got, want)
    # other predict params are passed on as given
    _, cov = pooled.predict(X[:5], return_cov=True)
    np.testing.assert_allclose(cov, ref.predict(X[:5], return_cov=True)[1])
    local = LocalEstimator(pipe).fit(X, y, groups=groups)
    mean, std = local.predict(X[:5], groups=groups[:5], return_std=True)
    k = local.clients_.tolist().index(groups[0])
    np.testing.assert_allclose(std[0], local.estimators_[k].predict(X[:1], return_std=True)[1])
    # with metadata routing on, the step that requests return_std gets it
    ref_std = ref.predict(X[:5], return_std=True)[1]
    with sklearn.config_context(enable_metadata_routing=True):
        requested = make_pipeline(StandardScaler(), clone(gp).set_predict_request(return_std=True))
        pooled = PooledEstimator(requested).fit(X, y, groups=groups)
        np.testing.assert_allclose(pooled.predict(X[:5], return_std=True)[1], ref_std)
    with pytest.raises(TypeError, match="return_std"):  # the last step has none
        PooledEstimator(make_pipeline(StandardScaler(), Ridge())).fit(X, y).predict(
            X, return_std=True)


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


def test_new_site_class_is_the_argmax_of_the_size_weighted_mean_probability():
    # sites of unequal size and class shares; a new site's rows get the class of the
    # mixture of the site models (benchmarks/defaults/local_population_rule.py chose this rule)
    rng = np.random.default_rng(0)
    sizes, shift = [30, 60, 120], [-1.0, 0.0, 1.0]
    X = np.vstack([rng.normal(m, 1.0, size=(n, 2)) for n, m in zip(sizes, shift)])
    y = (X[:, 0] + 0.5 * rng.normal(size=X.shape[0]) > 0).astype(int)
    groups = np.repeat([0, 1, 2], sizes)
    model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    X_new = rng.normal(0.0, 1.5, size=(200, 2))
    mixture = sum(w * m.predict_proba(X_new)
                  for w, m in zip(np.array(sizes) / sum(sizes), model.estimators_))
    np.testing.assert_allclose(model.predict_proba(X_new, groups=[99] * 200), mixture)
    pred = model.predict(X_new, groups=[99] * 200)
    np.testing.assert_array_equal(pred, mixture.argmax(axis=1))
    # the mixture crosses 0.5: both classes, about as right as the pooled model
    truth = (X_new[:, 0] > 0).astype(int)
    pooled = PooledEstimator(LogisticRegression()).fit(X, y).predict(X_new)
    assert set(pred) == {0, 1}
    assert np.mean(pred == truth) > np.mean(pooled == truth) - 0.05


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
    # an inner estimator failing on one client (not a ValueError: no fallback) also
    # leaves it unchanged
    class FailsOnClient2(Ridge):
        def fit(self, X, y, sample_weight=None):
            if X.shape[0] == 60:  # client 2
                raise RuntimeError("site 2 is down")
            return super().fit(X, y, sample_weight=sample_weight)

    reg = LocalEstimator(FailsOnClient2()).fit(X[groups < 2], y[groups < 2],
                                               groups=groups[groups < 2])
    state = dict(vars(reg))
    with pytest.raises(RuntimeError, match="site 2 is down") as info:
        reg.fit(X[:, :3], y, groups=groups)
    assert "client 2" in " ".join(getattr(info.value, "__notes__", []))
    assert all(vars(reg)[k] is state[k] for k in state) and reg.n_features_in_ == X.shape[1]
    # so does a fit in which every client falls back (no population model)
    clf = LocalEstimator(LogisticRegression()).fit(X, (y > 0).astype(int), groups=groups)
    state = dict(vars(clf))
    with pytest.raises(ValueError, match="no client could fit.*single class"):
        clf.fit(X[:, :3], np.ones(len(y), dtype=int), groups=groups)
    assert all(vars(clf)[k] is state[k] for k in state) and clf.n_features_in_ == X.shape[1]


def test_unknown_client_option_is_validated(data):
    X, y, groups, _, _ = data
    with pytest.raises(ValueError, match="unknown_client"):
        LocalEstimator(Ridge(), unknown_client="zero").fit(X, y, groups=groups)


# --- clients that cannot fit a model of their own fall back to the population model ---

FALLBACK = "use the population model instead of a model of their own"


def _two_class_sites(single_class_site=2):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
    groups = np.repeat([0, 1, 2], 30)
    y[groups == single_class_site] = 1
    return X, y, groups


def test_single_class_site_falls_back_to_population_model():
    X, y, groups = _two_class_sites()
    with pytest.warns(UserWarning, match=FALLBACK + r".*client 2: a single class \(1\)"):
        model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    assert model.fallback_clients_.tolist() == [2]
    assert model.estimators_[2] is None and model.estimators_[0] is not None
    np.testing.assert_allclose(model.client_weights_, [0.5, 0.5, 0.0])
    site2 = groups == 2
    # predict, predict_proba and decision_function: the population model, consistently
    for method in ("predict", "predict_proba", "decision_function"):
        personalized = getattr(model, method)(X, groups=groups)
        population = getattr(model, method)(X)
        np.testing.assert_array_equal(personalized[site2], population[site2])
        own = getattr(model.estimators_[0], method)(X[groups == 0])
        np.testing.assert_allclose(personalized[groups == 0], own)
    proba = model.predict_proba(X, groups=groups)
    assert proba.shape == (90, 2)
    expected = 0.5 * (model.estimators_[0].predict_proba(X) + model.estimators_[1].predict_proba(X))
    np.testing.assert_allclose(model.predict_proba(X), expected)
    assert model.score(X, y, groups=groups) > 0.8


def test_multiclass_fallback_and_partial_clients_keep_every_class_column():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 2))
    y = np.digitize(X[:, 0], [-0.5, 0.5])  # classes 0, 1, 2
    groups = np.repeat(["a", "b", "c", "d"], 30)
    y[groups == "b"] = np.where(y[groups == "b"] == 2, 1, y[groups == "b"])  # b: {0, 1}
    y[groups == "c"] = 2  # c: a single class
    with pytest.warns(UserWarning, match=FALLBACK):
        model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    assert model.fallback_clients_.tolist() == ["c"]
    assert model.classes_.tolist() == [0, 1, 2]
    proba = model.predict_proba(X, groups=groups)
    assert proba.shape == (120, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.all(proba[groups == "b", 2] == 0)  # b never saw class 2
    np.testing.assert_allclose(proba[groups == "c"], model.predict_proba(X[groups == "c"]))
    assert set(model.predict(X, groups=groups)) <= {0, 1, 2}


def test_too_few_rows_fall_back():
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(41, 3)), rng.normal(size=41)
    groups = np.array([0] * 20 + [1] * 20 + [2])  # client 2: one row
    with pytest.warns(UserWarning, match=r"client 2: 1 sample\(s\), fewer than the 2 rows"):
        model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    assert model.fallback_clients_.tolist() == [2]
    np.testing.assert_allclose(model.predict(X[:3], groups=[2, 2, 2]), model.predict(X[:3]))


def test_value_error_of_the_wrapped_fit_falls_back():
    from sklearn.linear_model import RidgeCV

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(43, 2)), rng.normal(size=43)
    groups = np.array([0] * 20 + [1] * 20 + [2] * 3)  # 3 rows < 5 folds
    with pytest.warns(UserWarning, match="client 2: RidgeCV.fit raised ValueError: Cannot"):
        model = LocalEstimator(RidgeCV(cv=5)).fit(X, y, groups=groups)
    assert model.fallback_clients_.tolist() == [2]
    np.testing.assert_allclose(model.predict(X, groups=groups)[40:], model.predict(X[40:]))


def test_no_fallback_no_warning(data):
    import warnings

    X, y, groups, _, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    assert model.fallback_clients_.size == 0
    assert model.fallback_clients_.dtype == model.clients_.dtype


# -- found by tests/test_properties.py ------------------------------------------------------

def test_no_client_model_message_names_the_inputs():
    with pytest.raises(ValueError, match=r"no client could fit.*rows of X and y.*groups"):
        LocalEstimator(Ridge()).fit(np.ones((1, 2)), np.ones(1), groups=[0])


@pytest.mark.parametrize("estimator, X, y", [
    (LogisticRegression(), np.ones((4, 2)), np.zeros(4)),  # one class
    (Ridge(), np.array([[1e300, 0.0], [1.0, 1.0], [0.0, 2.0]]), np.ones(3)),  # overflow in Ridge
])
def test_pooled_names_the_inputs_the_wrapped_estimator_refused(estimator, X, y):
    # before: the wrapped estimator's message alone ("This solver needs samples of at least
    # 2 classes", "array must not contain infs or NaNs")
    with pytest.raises(ValueError, match=r"\.fit refused the pooled X and y"):
        PooledEstimator(estimator).fit(X, y)


def test_pooled_names_sample_weight_when_the_wrapped_estimator_refuses_it():
    # Ridge fails on a negative weight with "array must not contain infs or NaNs"
    with pytest.raises(ValueError, match=r"X and y \(with sample_weight\)"):
        PooledEstimator(Ridge()).fit(np.eye(4, 2), np.ones(4), sample_weight=[1, -1, 1, 1])


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt:RuntimeWarning")
def test_local_names_sample_weight_when_the_wrapped_estimator_refuses_it():
    # as PooledEstimator: before, "... Ridge.fit raised ValueError: array must not contain infs
    # or NaNs" did not say that the weights were passed (negative ones: some estimators take them)
    rng = np.random.default_rng(0)
    X, y, groups = rng.uniform(-1, 1, (18, 2)), rng.normal(size=18), np.repeat([0, 1, 2], 6)
    with pytest.raises(ValueError, match=r"no client could fit.*Ridge\.fit raised ValueError "
                                         r"\(with sample_weight\)"):
        LocalEstimator(Ridge()).fit(X, y, groups=groups, sample_weight=-np.ones(18))
    # one client's negative weights: it falls back, and the warning names sample_weight
    with pytest.warns(UserWarning, match=r"client 0: Ridge\.fit raised ValueError "
                                         r"\(with sample_weight\)"):
        model = LocalEstimator(Ridge()).fit(X, y, groups=groups,
                                            sample_weight=np.r_[-np.ones(6), np.ones(12)])
    assert model.fallback_clients_.tolist() == [0]


# --- sample_weight weights the population model as duplicated or dropped rows would ---

@pytest.mark.parametrize("estimator", [Ridge(), LogisticRegression()])
def test_sample_weight_population_model_equals_duplicated_and_dropped_rows(estimator):
    rng = np.random.RandomState(0)
    X, groups = rng.normal(size=(60, 3)), np.repeat([0, 1, 2], 20)
    y = X @ [1.0, 2.0, -1.0] + 2.0 * groups + 0.1 * rng.normal(size=60)
    if isinstance(estimator, LogisticRegression):
        y = (y > 2.0).astype(int)
    methods = ["predict"] + (["predict_proba", "decision_function"]
                             if isinstance(estimator, LogisticRegression) else [])
    # weight 2 on every row of client 0 == those rows twice
    twice = LocalEstimator(estimator).fit(X, y, groups=groups,
                                          sample_weight=np.where(groups == 0, 2.0, 1.0))
    c0 = groups == 0
    dup = LocalEstimator(estimator).fit(np.r_[X, X[c0]], np.r_[y, y[c0]],
                                        groups=np.r_[groups, groups[c0]])
    np.testing.assert_allclose(twice.client_weights_, [0.5, 0.25, 0.25])
    np.testing.assert_allclose(twice.client_weights_, dup.client_weights_)
    # weight 0 on 10 rows of client 0 == those rows dropped
    w0 = np.r_[np.zeros(10), np.ones(50)]
    zero = LocalEstimator(estimator).fit(X, y, groups=groups, sample_weight=w0)
    dropped = LocalEstimator(estimator).fit(X[10:], y[10:], groups=groups[10:])
    np.testing.assert_allclose(zero.client_weights_, [0.2, 0.4, 0.4])
    for a, b in ((twice, dup), (zero, dropped)):
        for method in methods:
            for g in (None, [7] * 60):  # groups=None and an unseen client: the population model
                np.testing.assert_allclose(getattr(a, method)(X, groups=g),
                                           getattr(b, method)(X, groups=g), atol=1e-8)
    # the client sends its total weight along with its row count
    up = {r.names for r in twice.communication_.records if r.direction == "up"}
    assert up == {("n_samples", "sample_weight_sum")}


@pytest.mark.filterwarnings("ignore:overflow encountered in matmul:RuntimeWarning")
def test_sample_weight_with_a_negative_client_total_is_refused():
    # LogisticRegression takes negative weights, but a client's share of the population
    # model cannot be negative
    rng = np.random.default_rng(0)
    X, groups = rng.normal(size=(60, 2)), np.repeat([0, 1, 2], 20)
    y = (X[:, 0] > 0).astype(int)
    w = np.where(groups == 0, -1.0, 1.0)
    model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    before = model.predict_proba(X)
    with pytest.raises(ValueError, match=r"sample_weight .*negative for clients \[0\]"):
        model.fit(X, y, groups=groups, sample_weight=w)
    np.testing.assert_array_equal(model.predict_proba(X), before)  # the failed fit is undone


# --- the population decision_function is that of the population predict ---

@pytest.mark.parametrize("n_classes", [2, 3])
def test_population_decision_function_agrees_with_predict(n_classes):
    rng = np.random.RandomState(0)
    X, groups = rng.normal(size=(240, 2)), np.repeat([0, 1, 2, 3], 60)
    score = X[:, 0] * np.array([1, -1, 3, 0.5])[groups] + 0.5 * rng.normal(size=240)
    y = (score > 0).astype(int) if n_classes == 2 else np.digitize(score, [-0.5, 0.5])
    y = np.array(["a", "b", "c"])[y]
    groups = np.where(groups == 3, 9, groups)
    y[groups == 9] = "a"  # client 9: a single class, it falls back to the population model
    with pytest.warns(UserWarning, match=FALLBACK):
        model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    X_new = rng.normal(0.0, 2.0, size=(300, 2))
    for Xe, g in ((X, None), (X, groups), (X_new, [99] * 300), (X_new, None)):
        dec, pred = model.decision_function(Xe, groups=g), model.predict(Xe, groups=g)
        assert dec.shape == ((len(Xe),) if n_classes == 2 else (len(Xe), n_classes))
        index = (dec > 0).astype(int) if n_classes == 2 else dec.argmax(axis=1)
        np.testing.assert_array_equal(model.classes_[index], pred)
    # population rows: the log of the mixed probabilities (log-odds for two classes)
    log_proba = np.log(model.predict_proba(X_new))
    expected = log_proba[:, 1] - log_proba[:, 0] if n_classes == 2 else log_proba
    np.testing.assert_allclose(model.decision_function(X_new), expected)
    # a seen client's rows keep its own model's scores; the fallback client's, the population's
    own = groups == 1
    np.testing.assert_array_equal(model.decision_function(X[own], groups=groups[own]),
                                  model.estimators_[1].decision_function(X[own]))
    fb = groups == 9
    np.testing.assert_array_equal(model.decision_function(X[fb], groups=groups[fb]),
                                  model.decision_function(X[fb]))


def test_population_decision_function_is_finite_where_a_probability_is_zero():
    # client 1 never saw class 2: a probability of exactly 0 is clipped, not log(0) = -inf
    model = LocalEstimator(LogisticRegression()).fit(
        np.eye(6, 2), [0, 1, 2, 0, 1, 2], groups=[0, 0, 0, 1, 1, 1])
    model.estimators_[1].predict_proba = lambda X: np.tile([1.0, 0.0, 0.0], (len(X), 1))
    model.estimators_[0].predict_proba = lambda X: np.tile([1.0, 0.0, 0.0], (len(X), 1))
    dec = model.decision_function(np.zeros((2, 2)))
    assert np.isfinite(dec).all()
    np.testing.assert_allclose(dec[:, 1], np.log(np.finfo(float).tiny))


# --- a refit removes the fitted attributes it does not set ---

@pytest.mark.parametrize("Wrapper", [LocalEstimator, PooledEstimator])
def test_refit_as_regressor_removes_classes_but_a_failed_refit_keeps_them(Wrapper):
    rng = np.random.RandomState(0)
    X, groups = rng.normal(size=(60, 3)), np.repeat([0, 1, 2], 20)
    y = X[:, 0] + rng.normal(size=60)
    model = Wrapper(LogisticRegression()).fit(X, y > 0, groups=groups)
    before = model.predict_proba(X)
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError):  # a failed refit as a regressor leaves the classifier
        model.set_params(estimator=Ridge()).fit(X_nan, y, groups=groups)
    assert model.classes_.tolist() == [False, True]
    np.testing.assert_array_equal(model.predict_proba(X), before)
    # predict follows the fitted classifier, not the new estimator parameter
    np.testing.assert_array_equal(model.predict(X), model.classes_[before.argmax(1)])
    model.fit(X, y, groups=groups)  # the successful refit as a regressor
    assert not hasattr(model, "classes_")
    np.testing.assert_array_equal(model.predict(X),
                                  Wrapper(Ridge()).fit(X, y, groups=groups).predict(X))
    model.set_params(estimator=LogisticRegression()).fit(X, y > 0, groups=groups)
    assert model.classes_.tolist() == [False, True]


@pytest.mark.parametrize("estimator", [Ridge(), LogisticRegression()])
def test_rows_of_weight_zero_count_as_dropped_for_the_fallback(estimator):
    # client 2's rows of non-zero weight: one row (Ridge), or one class (LogisticRegression)
    rng = np.random.default_rng(4)
    X, groups = rng.normal(size=(46, 2)), np.repeat([0, 1, 2], [20, 20, 6])
    y = X[:, 0] + 0.1 * rng.normal(size=46)
    w = np.ones(46)
    if isinstance(estimator, LogisticRegression):
        y = (y > 0).astype(int)
        y[40:] = [1, 1, 1, 0, 0, 0]
        w[43:] = 0.0  # the 0s of client 2 weigh nothing
        reason = r"client 2: a single class \(1\) in its rows of non-zero sample_weight"
    else:
        w[41:] = 0.0
        reason = r"client 2: 1 sample\(s\) of non-zero sample_weight, fewer than the 2 rows"
    with pytest.warns(UserWarning, match=reason):
        weighted = LocalEstimator(estimator).fit(X, y, groups=groups, sample_weight=w)
    kept = w != 0
    with pytest.warns(UserWarning, match=FALLBACK):
        dropped = LocalEstimator(estimator).fit(X[kept], y[kept], groups=groups[kept])
    assert weighted.fallback_clients_.tolist() == dropped.fallback_clients_.tolist() == [2]
    np.testing.assert_allclose(weighted.client_weights_, dropped.client_weights_)
    for g in (groups, None):
        np.testing.assert_allclose(weighted.predict(X, groups=g), dropped.predict(X, groups=g))
