"""GPBoostRegressor and MERFRegressor: the benchmark's mixed-effects anchors.

Agreement with MixedLM and with the packages' own predictions, seen and new
clients, tuning on the training rows, the API. Tiny data: a few seconds.
"""

import importlib.util
import logging
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, KFold, cross_validate

from skfed.baselines import GPBoostRegressor, MERFRegressor, MixedLMRegressor

ROOT = str(Path(__file__).resolve().parents[2])
HAS = {name: importlib.util.find_spec(name) is not None
       for name in ("gpboost", "merf", "statsmodels")}
needs_gpboost = pytest.mark.skipif(not HAS["gpboost"], reason="gpboost is not installed")
needs_merf = pytest.mark.skipif(not HAS["merf"], reason="merf is not installed")

# small, fast settings (the defaults tune over larger grids)
FAST = {
    "trees": lambda **kw: GPBoostRegressor(
        param_grid={"learning_rate": [0.1], "max_depth": [2, 3]}, n_estimators=50,
        early_stopping_rounds=5, random_state=0, **kw),
    "linear": lambda **kw: GPBoostRegressor(kind="linear", **kw),
    "merf": lambda **kw: MERFRegressor(n_estimators=10, param_grid={"min_samples_leaf": [1, 5]},
                                       max_iterations=3, random_state=0, **kw),
}
KINDS = [pytest.param("trees", marks=needs_gpboost), pytest.param("linear", marks=needs_gpboost),
         pytest.param("merf", marks=needs_merf)]


def _random_intercepts(n_groups=12, seed=0, slope_sd=0.0):
    """Unbalanced groups whose features shift with the group (so GLS is not OLS)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(4, 14, n_groups)
    g = np.repeat(np.arange(n_groups), sizes)
    shift = rng.normal(size=n_groups)
    X = rng.normal(size=(g.size, 2)) + 0.5 * shift[g, None]
    u = rng.normal(size=n_groups)
    b = slope_sd * rng.normal(size=n_groups)
    y = 1.0 + X @ [2.0, -1.0] + u[g] + b[g] * X[:, 0] + 0.5 * rng.normal(size=g.size)
    return X, y, g


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("slopes", [None, [0]])
def test_fit_predict_shapes_and_seen_versus_new_clients(kind, slopes):
    X, y, g = _random_intercepts(seed=1, slope_sd=0.5)
    model = FAST[kind](random_slopes=slopes).fit(X, y, groups=g)
    q = 1 if slopes is None else 2
    assert model.random_effects_.shape == (12, q)
    assert model.random_slopes_.tolist() == ([] if slopes is None else [0])
    assert model.clients_.tolist() == list(range(12))
    seen = model.predict(X, groups=g)
    population = model.predict(X)
    assert seen.shape == population.shape == (len(y),)
    assert np.all(np.isfinite(seen)) and not np.allclose(seen, population)
    # each seen row: the population prediction plus its client's intercept (and slope)
    u = model.random_effects_[g]
    expected = population + u[:, 0] + (0 if slopes is None else u[:, 1] * X[:, 0])
    np.testing.assert_allclose(seen, expected, rtol=1e-10, atol=1e-10)
    # an unseen client gets the population prediction, row by row
    mixed = model.predict(X[:4], groups=[99, g[0], 99, g[0]])
    np.testing.assert_allclose(mixed[[0, 2]], population[[0, 2]])
    np.testing.assert_allclose(mixed[[1, 3]], seen[[1, 3]])
    np.testing.assert_allclose(model.predict(X, groups=np.full(len(g), 99)), population)
    # the personalized model fits the training rows better than the population one
    assert np.mean((y - seen) ** 2) < np.mean((y - population) ** 2)
    strict = clone(model).set_params(unknown_client="error").fit(X, y, groups=g)
    with pytest.raises(ValueError, match=r"clients not seen in fit: \[99\]"):
        strict.predict(X[:2], groups=[g[0], 99])


@needs_gpboost
@pytest.mark.skipif(not HAS["statsmodels"], reason="statsmodels is not installed")
def test_gpboost_linear_mixed_model_matches_mixedlm():
    # gpboost estimates the variances by ML: against MixedLM's ML fit the fixed effects
    # agreed to 1.8e-6 and the random effects to 3e-5 (measured over seeds 0-4 of 30
    # unbalanced groups); against REML, to 2.4e-4 and 4e-3
    X, y, g = _random_intercepts(n_groups=30, seed=0)
    gpb = GPBoostRegressor(kind="linear").fit(X, y, groups=g)
    ml = MixedLMRegressor(reml=False).fit(X, y, groups=g)
    reml = MixedLMRegressor().fit(X, y, groups=g)
    ours = np.r_[gpb.intercept_, gpb.coef_]
    np.testing.assert_allclose(ours, np.r_[ml.intercept_, ml.coef_], atol=1e-5)
    np.testing.assert_allclose(ours, np.r_[reml.intercept_, reml.coef_], atol=1e-3)
    np.testing.assert_allclose(gpb.random_effects_, ml.random_effects_, atol=1e-4)
    np.testing.assert_allclose(gpb.random_effects_var_, np.diag(ml.random_effects_cov_),
                               rtol=1e-3)
    assert gpb.noise_variance_ == pytest.approx(ml.noise_variance_, rel=1e-3)
    np.testing.assert_allclose(gpb.predict(X, groups=g), ml.predict(X, groups=g), atol=1e-4)


@needs_gpboost
@pytest.mark.parametrize("kind", ["trees", "linear"])
def test_gpboost_predictions_equal_gpboosts_own(kind):
    """The random effects read off gpboost give its own predictions for seen groups."""
    X, y, g = _random_intercepts(seed=2, slope_sd=0.5)
    model = FAST[kind](random_slopes=[0]).fit(X, y, groups=g)
    center, scale = model._y_center, model._y_scale
    z = X[:, [0]] / np.sqrt(np.mean((X[:, [0]] - X[:, 0].mean()) ** 2))
    if kind == "trees":
        theirs = model.booster_.predict(data=X, group_data_pred=g, group_rand_coef_data_pred=z,
                                        predict_var=False)["response_mean"]
        np.testing.assert_allclose(center + scale * theirs, model.predict(X, groups=g),
                                   rtol=1e-8, atol=1e-8)
    else:  # the linear model is refitted here: gpboost's GPModel is not kept
        import gpboost

        design = np.column_stack([np.ones(len(y)), (X - X.mean(0)) / X.std(0)])
        gp = gpboost.GPModel(group_data=g, group_rand_coef_data=z,
                             ind_effect_group_rand_coef=[1], num_parallel_threads=1,
                             matrix_inversion_method="cholesky")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(y=(y - center) / scale, X=design, params={"trace": False})
        theirs = gp.predict(X_pred=design, group_data_pred=g, group_rand_coef_data_pred=z,
                            predict_var=False)["mu"]
        np.testing.assert_allclose(center + scale * theirs, model.predict(X, groups=g),
                                   rtol=1e-6, atol=1e-6)


@needs_merf
def test_merf_predictions_equal_merfs_own(monkeypatch):
    import merf
    import pandas as pd

    fitted = []

    class Recording(merf.MERF):
        def fit(self, *args, **kwargs):
            fitted.append(self)
            return super().fit(*args, **kwargs)

    monkeypatch.setattr(merf, "MERF", Recording)
    X, y, g = _random_intercepts(seed=3, slope_sd=0.5)
    model = FAST["merf"](random_slopes=[0]).fit(X, y, groups=g)
    assert len(fitted) == 2 * 3 + 1  # 2 leaf sizes x 3 inner folds, then the refit
    final = fitted[-1]
    z = np.column_stack([np.ones(len(y)), X[:, 0] / X[:, 0].std()])
    clusters = pd.Series(np.where(np.arange(len(g)) % 5 == 0, 99, g))  # some new clusters
    theirs = final.predict(X, z, clusters)
    ours = model.predict(X, groups=clusters.to_numpy())
    np.testing.assert_allclose(model._y_center + model._y_scale * theirs, ours, rtol=1e-8)
    assert model.n_iter_ == 3 and model.best_params_["min_samples_leaf"] in (1, 5)
    assert model.random_effects_cov_.shape == (2, 2) and model.noise_variance_ > 0


@needs_gpboost
def test_gpboost_trees_tune_on_the_training_rows():
    X, y, g = _random_intercepts(seed=4)
    model = FAST["trees"]().fit(X, y, groups=g)
    assert model.best_params_ in ({"learning_rate": 0.1, "max_depth": 2},
                                  {"learning_rate": 0.1, "max_depth": 3})
    assert 1 <= model.n_estimators_ <= 50 and model.cv_score_ > 0
    # a client-level inner CV (the new-site protocol's) runs too
    grouped = FAST["trees"](cv=GroupKFold(3)).fit(X, y, groups=g)
    assert 1 <= grouped.n_estimators_ <= 50
    # too few rows for the folds: no tuning, the grid's first values, and a warning
    with pytest.warns(UserWarning, match="cannot be split for the inner cross-validation"):
        small = FAST["trees"]().fit(X[:6], y[:6], groups=np.arange(6))
    assert small.best_params_ == {"learning_rate": 0.1, "max_depth": 2}
    assert np.isnan(small.cv_score_)


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_fit_and_pickle(kind):
    X, y, g = _random_intercepts(seed=5)
    a = FAST[kind]().fit(X, y, groups=g)
    b = FAST[kind]().fit(X, y, groups=g)
    np.testing.assert_array_equal(a.predict(X, groups=g), b.predict(X, groups=g))
    restored = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(restored.predict(X, groups=g), a.predict(X, groups=g))
    np.testing.assert_array_equal(restored.predict(X), a.predict(X))


@pytest.mark.parametrize("kind", KINDS)
def test_clone_and_get_params(kind):
    model = FAST[kind](random_slopes=[0], cv=GroupKFold(3))
    copy = clone(model)
    assert copy is not model
    params, copied = model.get_params(), copy.get_params()
    assert params.keys() == copied.keys()
    assert {k: v for k, v in params.items() if k != "cv"} == \
        {k: v for k, v in copied.items() if k != "cv"}
    assert isinstance(copied["cv"], GroupKFold) and copied["cv"].n_splits == 3
    assert copy.set_params(random_state=7).random_state == 7


@needs_gpboost
def test_constant_and_exactly_linear_y_fit_without_noise():
    X, y, g = _random_intercepts(seed=6)
    flat = FAST["trees"]().fit(X, np.full(len(y), 3.0), groups=g)
    np.testing.assert_allclose(flat.predict(X, groups=g), 3.0)
    line = FAST["linear"]().fit(X, 1.0 + X @ [2.0, -1.0], groups=g)
    np.testing.assert_allclose(line.coef_, [2.0, -1.0])
    assert line.intercept_ == pytest.approx(1.0) and line.noise_variance_ == 0


@needs_gpboost
def test_gpboost_linear_drops_constant_columns_and_slopes():
    X, y, g = _random_intercepts(seed=7)
    wide = np.column_stack([X, np.ones(len(y))])
    with pytest.warns(UserWarning, match=r"random slopes on features \[2\] were dropped"):
        model = FAST["linear"](random_slopes=[0, 2]).fit(wide, y, groups=g)
    assert model.coef_[2] == 0 and model.random_slopes_.tolist() == [0]
    base = FAST["linear"](random_slopes=[0]).fit(X, y, groups=g)
    np.testing.assert_allclose(model.coef_[:2], base.coef_, rtol=1e-6)


@needs_gpboost
def test_cross_validate_routes_groups():
    X, y, g = _random_intercepts(seed=8)
    cv = KFold(3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        scores = cross_validate(FAST["linear"](), X, y, cv=cv, params={"groups": g})["test_score"]
    for score, (train, test) in zip(scores, cv.split(X)):
        model = FAST["linear"]().fit(X[train], y[train], groups=g[train])
        assert score == pytest.approx(model.score(X[test], y[test], groups=g[test]))


@pytest.mark.parametrize("cls, params, match", [
    (GPBoostRegressor, {"kind": "forest"}, "kind must be one of"),
    (GPBoostRegressor, {"param_grid": "fast"}, "param_grid must be a dict"),
    (GPBoostRegressor, {"param_grid": {"max_depth": []}}, r"param_grid\['max_depth'\] is empty"),
    (GPBoostRegressor, {"param_grid": {"max_depth": 3}}, r"param_grid\['max_depth'\] must be"),
    (GPBoostRegressor, {"param_grid": {"num_iterations": [5]}}, "param_grid may not set"),
    # gpboost's grid search skipped these and then said "Did not find any valid parameter
    # combination"
    (GPBoostRegressor, {"param_grid": {"learning_rate": [-1.0]}}, r"\['learning_rate'\]"),
    (GPBoostRegressor, {"param_grid": {"learning_rate": [0.1, 0]}},
     r"param_grid\['learning_rate'\] values must be finite numbers > 0, got 0"),
    (GPBoostRegressor, {"param_grid": {"learning_rate": [np.nan]}}, r"\['learning_rate'\]"),
    (GPBoostRegressor, {"param_grid": {"shrinkage_rate": [True]}}, r"\['shrinkage_rate'\]"),
    (GPBoostRegressor, {"n_estimators": 0}, "n_estimators"),
    (GPBoostRegressor, {"early_stopping_rounds": 1.5}, "early_stopping_rounds"),
    (GPBoostRegressor, {"cv": 1}, "cv must be an integer >= 2"),
    (GPBoostRegressor, {"cv": "groups"}, "cv must be an integer >= 2 or a cross-validation"),
    (GPBoostRegressor, {"n_jobs": 0}, "n_jobs"),
    (GPBoostRegressor, {"random_slopes": [5]}, "column index 5"),
    (GPBoostRegressor, {"unknown_client": "drop"}, "unknown_client"),
    (MERFRegressor, {"param_grid": {"n_estimators": [5]}}, "param_grid may not set"),
    (MERFRegressor, {"max_iterations": 0}, "max_iterations"),
    (MERFRegressor, {"n_estimators": -1}, "n_estimators"),
    (MERFRegressor, {"cv": 0}, "cv must be an integer >= 2"),
    (MERFRegressor, {"random_slopes": "b"}, r"pass \['b'\]"),
])
def test_bad_parameters_raise_value_errors_naming_them(cls, params, match):
    # refused before the optional package is needed: no importorskip here
    X, y, g = _random_intercepts(seed=9)
    if "random_slopes" in params and not HAS["gpboost" if cls is GPBoostRegressor else "merf"]:
        pytest.skip("random_slopes is checked after the package is imported")
    with pytest.raises(ValueError, match=match):
        cls(**params).fit(X, y, groups=g)


@needs_gpboost
@pytest.mark.parametrize("param_grid, match", [
    ({"learning_rat": [5.0]}, r"not gpboost parameters: 'learning_rat' \(did you mean "
                              r"'learning_rate'\?\).*e\.g\. learning_rate, max_depth"),
    ({"max_depth": [2], "bogus": [None]}, r"param_grid has keys.*: 'bogus'\."),
    ({"verbosity": [-1], "bogus": [1]}, r"param_grid has keys.*: 'bogus'\."),  # not hidden
])
def test_gpboost_refuses_unknown_param_grid_keys(param_grid, match):
    # gpboost ignores a name it does not know: the typo tuned nothing, the default grid was gone
    X, y, g = _random_intercepts(seed=9)
    with pytest.raises(ValueError, match=match):
        GPBoostRegressor(param_grid=param_grid, n_estimators=10).fit(X, y, groups=g)


@needs_gpboost
def test_gpboost_accepts_aliases_in_param_grid():
    X, y, g = _random_intercepts(seed=9)
    kw = dict(n_estimators=30, early_stopping_rounds=5, random_state=0)
    a = GPBoostRegressor(param_grid={"learning_rate": [0.1], "max_depth": [2]}, **kw)
    b = GPBoostRegressor(param_grid={"shrinkage_rate": [0.1], "max_depth": [2]}, **kw)
    np.testing.assert_array_equal(a.fit(X, y, groups=g).predict(X, groups=g),
                                  b.fit(X, y, groups=g).predict(X, groups=g))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_data_is_refused_by_name(kind):
    X, y, g = _random_intercepts(seed=10)
    with pytest.raises(ValueError, match=r"\bgroups\b"):
        FAST[kind]().fit(X, y, groups=g[:-1])
    with pytest.raises(ValueError, match=r"\bX\b"):
        FAST[kind]().fit(np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), y,
                         groups=g)
    with pytest.raises(ValueError, match=r"y is out of range"):
        FAST[kind]().fit(X, np.r_[1e300, y[1:]], groups=g)
    model = FAST[kind]().fit(X, y, groups=g)
    with pytest.raises(ValueError, match=r"X has 3 features"):
        model.predict(np.ones((2, 3)))


@pytest.mark.parametrize("cls, module", [(GPBoostRegressor, "gpboost"), (MERFRegressor, "merf")])
def test_missing_package_names_the_bench_extra(monkeypatch, cls, module):
    X, y, g = _random_intercepts(seed=11)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError,
                       match=rf'{cls.__name__} needs {module}.*-e "\.\[bench\]" in the skfed clone'):
        cls().fit(X, y, groups=g)


@needs_merf
def test_importing_merf_leaves_the_logging_setup_alone():
    # merf's import calls logging.basicConfig(level=INFO); a fresh process shows it undone
    code = ("import logging, numpy as np\n"
            "from skfed.baselines import MERFRegressor\n"
            "rng = np.random.default_rng(0)\n"
            "X, y = rng.normal(size=(30, 2)), rng.normal(size=30)\n"
            "MERFRegressor(n_estimators=3, param_grid={}, max_iterations=2)"
            ".fit(X, y, groups=np.arange(30) % 3)\n"
            "import merf\n"
            "root = logging.getLogger()\n"
            "print(len(root.handlers), root.level)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(logging.WARNING)]
    assert "GLL" not in done.stderr  # merf's per-iteration INFO lines


@pytest.mark.parametrize("cls", [GPBoostRegressor, MERFRegressor])
@pytest.mark.parametrize("n_jobs", [0, 1.5, True, "2"])
def test_n_jobs_is_read_as_joblib_reads_it(cls, n_jobs):
    # None, a count or -1, -2, ... as everywhere in scikit-learn; 0 and non-integers refused
    X, y, g = _random_intercepts(seed=9)
    with pytest.raises(ValueError, match="n_jobs must be None, an integer >= 1 or a negative"):
        cls(n_jobs=n_jobs).fit(X, y, groups=g)


def test_n_jobs_minus_one_is_every_core():
    from joblib import effective_n_jobs

    from skfed.utils._validation import check_n_jobs

    assert check_n_jobs(None) == 1 and check_n_jobs(3) == 3
    assert check_n_jobs(-1) == effective_n_jobs(-1)
