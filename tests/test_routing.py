"""groups routed through Pipeline, GridSearchCV and cross_validate (metadata routing)."""

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_federated_regression
from skfed.metrics import make_personalized_scorer
from skfed.model_selection import WithinClientKFold

CALLS = []


def _labels(groups):
    return None if groups is None else sorted(set(np.asarray(groups).tolist()))


class SpyLocal(LocalEstimator):
    """Records the client labels each method receives."""

    def fit(self, X, y, groups=None, sample_weight=None):
        CALLS.append(("fit", _labels(groups)))
        return super().fit(X, y, groups=groups, sample_weight=sample_weight)

    def predict(self, X, groups=None, return_std=False):
        CALLS.append(("predict", _labels(groups)))
        return super().predict(X, groups=groups, return_std=return_std)


@pytest.fixture
def data():
    return make_federated_regression(n_clients=6, n_samples=30, heterogeneity=1.5, random_state=0)


@pytest.fixture(autouse=True)
def routing():
    CALLS.clear()
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def test_grid_search_group_kfold_routes_groups_everywhere(data):
    X, y, groups = data
    pipe = make_pipeline(StandardScaler(), SpyLocal(Ridge()))
    gs = GridSearchCV(pipe, {"spylocal__estimator__alpha": [0.1, 10.0]}, cv=GroupKFold(3))
    gs.fit(X, y, groups=groups)
    splits = list(GroupKFold(3).split(X, y, groups))
    train_clients = [sorted(set(groups[tr].tolist())) for tr, _ in splits]
    test_clients = [sorted(set(groups[te].tolist())) for _, te in splits]
    fits = [c[1] for c in CALLS if c[0] == "fit"]
    predicts = [c[1] for c in CALLS if c[0] == "predict"]
    # every CV fit saw its training clients, every score its (unseen) test clients
    assert fits[:3] == train_clients and fits[-1] == list(range(6))  # refit on all
    assert predicts[:3] == test_clients
    assert gs.best_estimator_[-1].clients_.tolist() == list(range(6))
    assert np.isfinite(gs.best_score_)


def test_within_client_cv_scores_personalized_predictions(data):
    X, y, groups = data
    pipe = make_pipeline(StandardScaler(), LocalEstimator(Ridge()))
    cv = WithinClientKFold(3, shuffle=True, random_state=0)
    scorer = make_personalized_scorer("neg_mean_squared_error")
    res = cross_validate(pipe, X, y, cv=cv, scoring=scorer, params={"groups": groups})
    expected = []
    for train, test in cv.split(X, y, groups):
        fitted = make_pipeline(StandardScaler(), LocalEstimator(Ridge())).fit(
            X[train], y[train], groups=groups[train]
        )
        pred = fitted.predict(X[test], groups=groups[test])
        expected.append(-np.mean((y[test] - pred) ** 2))
        # every client is on both sides of the split
        assert set(groups[train]) == set(groups[test]) == set(range(6))
    np.testing.assert_allclose(res["test_score"], expected)
    # the population prediction scores worse here: clients really differ
    population = cross_validate(
        pipe, X, y, cv=cv, scoring="neg_mean_squared_error", params={"groups": groups}
    )
    assert res["test_score"].mean() > population["test_score"].mean()


def test_personalized_scorer_in_grid_search(data):
    X, y, groups = data
    gs = GridSearchCV(
        SpyLocal(Ridge()),
        {"estimator__alpha": [0.01, 100.0]},
        cv=WithinClientKFold(3),
        scoring={"r2": make_personalized_scorer(r2_score), "mse": "neg_mean_squared_error"},
        refit="r2",
    )
    gs.fit(X, y, groups=groups)
    predicts = [c[1] for c in CALLS if c[0] == "predict"]
    assert list(range(6)) in predicts  # the personalized scorer passed groups
    assert None in predicts  # the plain scikit-learn scorer did not
    assert gs.best_params_ == {"estimator__alpha": 0.01}


def test_default_scoring_uses_personalized_score(data):
    X, y, groups = data
    res = cross_validate(
        SpyLocal(Ridge()), X, y, cv=KFold(3, shuffle=True, random_state=0),
        params={"groups": groups},
    )
    assert all(c[1] is not None for c in CALLS if c[0] == "predict")
    assert np.all(res["test_score"] > 0.5)


@pytest.mark.parametrize("classifier", [False, True])
@pytest.mark.parametrize("bad, match", [
    (lambda y: y[:-1], r"y has 179 rows but X has 180"),  # "inconsistent numbers of samples"
    (lambda y: np.r_[y[:-1], np.nan], r"Input y contains NaN"),  # "Input contains NaN."
    (lambda y: [None, *y[1:]], r"y contains 1 missing value"),
    (lambda y: y + 1j, r"y: Complex data not supported"),
])
def test_score_names_a_bad_y(data, classifier, bad, match):
    from sklearn.linear_model import LogisticRegression

    X, y, groups = data
    if classifier:
        y = (y > np.median(y)).astype(float)
    model = LocalEstimator(LogisticRegression() if classifier else Ridge()).fit(
        X, y, groups=groups)
    assert np.isfinite(model.score(X, y, groups=groups))
    with pytest.raises(ValueError, match=match):
        model.score(X, bad(y), groups=groups)


def test_user_can_opt_out_of_routing(data):
    X, y, groups = data
    est = SpyLocal(Ridge()).set_fit_request(groups=False)
    cross_validate(est, X, y, cv=GroupKFold(3), params={"groups": groups})
    assert all(c[1] is None for c in CALLS if c[0] == "fit")


def test_pooled_in_pipeline_grid_search(data):
    X, y, groups = data
    gs = GridSearchCV(
        make_pipeline(StandardScaler(), PooledEstimator(Ridge())),
        {"pooledestimator__estimator__alpha": [0.1, 1.0]},
        cv=GroupKFold(3),
    ).fit(X, y, groups=groups)
    assert gs.best_estimator_[-1].clients_.tolist() == list(range(6))


def test_scorer_without_groups_scores_population(data):
    X, y, groups = data
    model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    scorer = make_personalized_scorer(r2_score)
    assert scorer(model, X, y) == pytest.approx(r2_score(y, model.predict(X)))
    assert scorer(model, X, y, groups=groups) == pytest.approx(
        r2_score(y, model.predict(X, groups=groups))
    )
    loss = make_personalized_scorer(lambda a, b: np.mean((a - b) ** 2), greater_is_better=False)
    assert loss(model, X, y, groups=groups) < 0
    assert "greater_is_better=False" in repr(loss)
    with pytest.raises(ValueError, match="response_method"):
        make_personalized_scorer(r2_score, response_method="transform")
    with pytest.raises(ValueError, match="metric"):
        make_personalized_scorer(3)



@pytest.mark.parametrize(
    "metric, kwargs, match",
    [
        ("r2", dict(response_method="bogus"), "response_method"),
        ("r2", dict(response_method="predict_proba"), "response_method"),
        ("roc_auc", dict(response_method="decision_function"), "response_method"),
        ("r2", dict(greater_is_better=False), "greater_is_better"),
        (r2_score, dict(greater_is_better="no"), "greater_is_better"),
        (r2_score, dict(greater_is_better=None), "greater_is_better"),
        (r2_score, dict(response_method=["predict"]), "response_method"),
    ],
)
def test_scorer_refuses_ignored_or_bad_options(metric, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_personalized_scorer(metric, **kwargs)


def test_scorer_accepts_numpy_bool():
    assert "greater_is_better=False" in repr(
        make_personalized_scorer(r2_score, greater_is_better=np.False_)
    )


def test_scorer_name_falls_back_to_predict_proba():
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score, get_scorer, roc_auc_score

    rng = np.random.default_rng(0)
    X, groups = rng.uniform(-1, 1, (18, 2)), np.repeat(["a", "b", "c"], 6)
    y = np.tile([0, 1], 9)
    forest = LocalEstimator(RandomForestClassifier(n_estimators=5, random_state=0))
    forest.fit(X, y, groups=groups)  # no decision_function: scikit-learn uses predict_proba
    logistic = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    for name, metric in [("roc_auc", roc_auc_score),
                         ("average_precision", average_precision_score)]:
        scorer = make_personalized_scorer(name)
        assert scorer(forest, X, y) == get_scorer(name)(forest, X, y)
        assert scorer(forest, X, y, groups=groups) == metric(
            y, forest.predict_proba(X, groups=groups)[:, 1]
        )
        assert scorer(logistic, X, y, groups=groups) == metric(
            y, logistic.decision_function(X, groups=groups)
        )
    ridge = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    with pytest.raises(AttributeError, match="decision_function, predict_proba"):
        make_personalized_scorer("roc_auc")(ridge, X, y, groups=groups)


# --- routing off: groups given to a search reach only the splitter; fit warns ---

NOT_ROUTED = "fit received no groups: all rows are one client"


def _not_routed_warnings(call):
    import warnings

    with sklearn.config_context(enable_metadata_routing=False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
    return [w for w in caught if NOT_ROUTED in str(w.message)]


@pytest.mark.parametrize("in_pipeline", [False, True])
def test_routing_off_grid_search_with_groups_warns(data, in_pipeline):
    X, y, groups = data
    est = LocalEstimator(Ridge())
    grid = {"estimator__alpha": [0.1, 1.0]}
    if in_pipeline:
        est = make_pipeline(StandardScaler(), est)
        grid = {"localestimator__estimator__alpha": [0.1, 1.0]}
    gs = GridSearchCV(est, grid, cv=GroupKFold(3))
    caught = _not_routed_warnings(lambda: gs.fit(X, y, groups=groups))
    assert caught and all(w.category is UserWarning for w in caught)
    assert "enable_metadata_routing=True" in str(caught[0].message)
    best = gs.best_estimator_ if not in_pipeline else gs.best_estimator_[-1]
    assert best.clients_.tolist() == [0]  # what the warning is about


def test_routing_off_cross_validate_with_groups_warns(data):
    from sklearn.model_selection import cross_val_score, learning_curve

    from skfed.baselines import FedAvgRegressor

    X, y, groups = data
    assert _not_routed_warnings(
        lambda: cross_validate(LocalEstimator(Ridge()), X, y, groups=groups, cv=GroupKFold(3))
    )
    assert _not_routed_warnings(
        lambda: cross_val_score(FedAvgRegressor(n_rounds=2), X, y, groups=groups,
                                cv=GroupKFold(3))
    )
    assert _not_routed_warnings(
        lambda: learning_curve(LocalEstimator(Ridge()), X, y, groups=groups, cv=GroupKFold(3),
                               train_sizes=[0.5, 1.0])
    )


def test_no_not_routed_warning_without_groups_direct_fit_or_routing(data):
    X, y, groups = data
    # no groups given to the search: a single client is what was asked for
    assert not _not_routed_warnings(
        lambda: cross_validate(LocalEstimator(Ridge()), X, y, cv=KFold(3))
    )
    assert not _not_routed_warnings(
        lambda: GridSearchCV(LocalEstimator(Ridge()), {"estimator__alpha": [0.1, 1.0]},
                             cv=KFold(3)).fit(X, y)
    )
    # a direct fit(X, y)
    assert not _not_routed_warnings(lambda: LocalEstimator(Ridge()).fit(X, y))
    # routing on (the autouse fixture): groups reach fit, nothing to warn about
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=NOT_ROUTED)
        GridSearchCV(LocalEstimator(Ridge()), {"estimator__alpha": [0.1, 1.0]},
                     cv=GroupKFold(3)).fit(X, y, groups=groups)
        cross_validate(LocalEstimator(Ridge()), X, y, cv=GroupKFold(3),
                       params={"groups": groups})


def test_routing_off_fit_in_a_worker_warns_that_it_could_not_check(data):
    from joblib import parallel_backend

    X, y, groups = data
    with parallel_backend("threading"):  # worker threads do not see the caller's frames
        caught = _not_routed_warnings(
            lambda: cross_validate(LocalEstimator(Ridge()), X, y, groups=groups,
                                   cv=GroupKFold(3), n_jobs=2)
        )
    assert caught and "could not be checked" in str(caught[0].message)


@pytest.mark.parametrize("make", ["pfedgp", "tensor", "local"])
def test_routing_off_warns_once_a_fit_at_the_callers_line(data, make):
    # PFedGPRegressor and the tensor regressors split groups=None twice and warned twice a
    # fit, at a line inside skfed
    from skfed.gaussian_process import PFedGPRegressor
    from skfed.tensor import PersonalizedTensorRegressor

    X, y, groups = data
    est = {"pfedgp": lambda: PFedGPRegressor(n_rounds=2, n_inducing=3),
           "tensor": lambda: PersonalizedTensorRegressor(tensor_shape=(X.shape[1],), rank=(1,),
                                                         n_rounds=2),
           "local": lambda: LocalEstimator(Ridge())}[make]()
    caught = _not_routed_warnings(
        lambda: cross_validate(est, X, y, groups=groups, cv=GroupKFold(3)))
    assert len(caught) == 3
    assert all("/skfed/" not in w.filename.replace("\\", "/") for w in caught)


# --- pos_label: the response of the positive class, as scikit-learn's scorers ---


def _ap_of_disease(y_true, y_score, pos_label="disease"):
    from sklearn.metrics import average_precision_score

    return average_precision_score(y_true, y_score, pos_label=pos_label)


@pytest.fixture
def disease():
    """Binary string labels; the positive class "disease" is ``classes_[0]``."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.RandomState(0)
    X, groups = rng.normal(size=(60, 2)), np.repeat([0, 1, 2], 20)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=60) > 0, "healthy", "disease")
    model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    assert model.classes_.tolist() == ["disease", "healthy"]
    return model, X, y, groups


@pytest.mark.parametrize("response_method", ["predict_proba", "decision_function"])
@pytest.mark.parametrize(
    "metric, kwargs, positive",
    [
        ("average_precision_score", dict(pos_label="disease"), "disease"),
        ("average_precision_score", dict(pos_label="healthy"), "healthy"),
        ("roc_auc_score", dict(), "healthy"),  # no pos_label: classes_[1]
        ("_ap_of_disease", dict(), "disease"),  # the metric's default pos_label
    ],
)
def test_scorer_scores_the_pos_label_response(disease, response_method, metric, kwargs, positive):
    from sklearn import metrics
    from sklearn.metrics import make_scorer

    model, X, y, groups = disease
    func = globals()[metric] if metric.startswith("_") else getattr(metrics, metric)
    scorer = make_personalized_scorer(func, response_method=response_method, **kwargs)
    reference = make_scorer(func, response_method=response_method, **kwargs)
    assert scorer(model, X, y) == reference(model, X, y)
    pipeline = make_pipeline(StandardScaler(), clone(model)).fit(X, y, groups=groups)
    assert scorer(pipeline, X, y) == reference(pipeline, X, y)
    if response_method == "predict_proba":
        column = model.classes_.tolist().index(positive)
        y_score = model.predict_proba(X, groups=groups)[:, column]
    else:
        sign = 1 if positive == model.classes_[1] else -1
        y_score = sign * model.decision_function(X, groups=groups)
    assert scorer(model, X, y, groups=groups) == func(y, y_score, **kwargs)
    if positive == "disease":  # the personalized AP of "disease", not of "healthy"
        assert scorer(model, X, y, groups=groups) > 0.9


def test_scorer_name_with_pos_label(disease):
    from sklearn.metrics import average_precision_score, get_scorer

    model, X, y, groups = disease
    scorer = make_personalized_scorer("average_precision", pos_label="disease")
    reference = get_scorer("average_precision")
    reference._kwargs = {**reference._kwargs, "pos_label": "disease"}
    assert scorer(model, X, y) == reference(model, X, y)
    assert scorer(model, X, y, groups=groups) == average_precision_score(
        y, -model.decision_function(X, groups=groups), pos_label="disease"
    )


@pytest.mark.parametrize("response_method", ["predict", "predict_proba", "decision_function"])
@pytest.mark.parametrize("with_groups", [False, True])
def test_scorer_refuses_a_pos_label_not_in_classes(disease, response_method, with_groups):
    from sklearn.metrics import average_precision_score, make_scorer

    model, X, y, groups = disease
    kwargs = dict(response_method=response_method, pos_label="flu")
    with pytest.raises(ValueError) as expected:
        make_scorer(average_precision_score, **kwargs)(model, X, y)
    scorer = make_personalized_scorer(average_precision_score, **kwargs)
    with pytest.raises(ValueError, match="pos_label") as got:
        scorer(model, X, y, groups=groups if with_groups else None)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("response_method", ["predict_proba", "decision_function"])
def test_scorer_multiclass_response_unchanged(response_method):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import make_scorer, roc_auc_score

    rng = np.random.RandomState(0)
    codes, groups = np.tile([0, 1, 2], 30), np.repeat([0, 1, 2], 30)
    X = rng.normal(size=(90, 2)) + np.array([[0, 0], [1, 0], [0, 1]])[codes]
    y = np.array(["a", "b", "c"])[codes]
    model = LocalEstimator(LogisticRegression()).fit(X, y, groups=groups)
    kwargs = dict(multi_class="ovr")
    if response_method == "decision_function":
        func = lambda y_true, y_score, **kw: roc_auc_score(  # noqa: E731
            y_true, np.exp(y_score) / np.exp(y_score).sum(axis=1, keepdims=True), **kw
        )
    else:
        func = roc_auc_score
    scorer = make_personalized_scorer(func, response_method=response_method, **kwargs)
    reference = make_scorer(func, response_method=response_method, **kwargs)
    assert scorer(model, X, y) == reference(model, X, y)
    method = getattr(model, response_method)
    assert scorer(model, X, y, groups=groups) == func(y, method(X, groups=groups), **kwargs)
