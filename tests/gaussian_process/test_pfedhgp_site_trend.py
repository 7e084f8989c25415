"""PFedHGPRegressor's per-site linear trend (``site_trend="linear"``)."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from skfed import PFedHGPRegressor
from skfed.gaussian_process._site_trend import (
    SITE_TREND_ALPHA, site_trend_design, site_trend_fit, site_trend_moments,
)

SMALL = dict(inference="variational",
             n_inducing_global=6, n_inducing_local=4, n_rounds=4, random_state=0)


def _data(seed=0):
    # a random intercept and slope per site plus a shared curve
    rng = np.random.default_rng(seed)
    groups = np.repeat([0, 1, 2], 20)
    X = rng.uniform(0, 10, (60, 1))
    slope = np.array([1.0, -0.5, 2.0])[groups]
    y = np.sin(X[:, 0]) + slope * X[:, 0] + groups + 0.1 * rng.normal(size=60)
    return X, y, groups


def test_site_trend_fit_is_ridge_with_the_intercept_penalized():
    rng = np.random.default_rng(1)
    X, r = rng.normal(size=(7, 2)), rng.normal(size=7)
    coef, cov = site_trend_fit(X, r)
    A = np.column_stack([np.ones(7), X])
    ref = Ridge(alpha=SITE_TREND_ALPHA, fit_intercept=False).fit(A, r)
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-10)
    np.testing.assert_allclose(cov, np.linalg.inv(A.T @ A + SITE_TREND_ALPHA * np.eye(3)),
                               rtol=1e-10)
    # one row: still defined (the prior keeps it finite)
    c1, v1 = site_trend_fit(X[:1], r[:1])
    assert np.all(np.isfinite(c1)) and np.all(np.linalg.eigvalsh(v1) > 0)


def test_site_trend_moments_match_numpy():
    rng = np.random.default_rng(2)
    X, coef = rng.normal(size=(5, 2)), rng.normal(size=3)
    B = rng.normal(size=(3, 3))
    cov = B @ B.T
    A = site_trend_design(X)
    m, full = site_trend_moments(X, coef, cov, full=True)
    m2, diag = site_trend_moments(X, coef, cov, full=False)
    np.testing.assert_allclose(m, A @ coef)
    np.testing.assert_allclose(m2, m)
    np.testing.assert_allclose(full, A @ cov @ A.T, rtol=1e-12)
    np.testing.assert_allclose(diag, np.diag(A @ cov @ A.T), rtol=1e-12)


def test_fitted_site_trend_is_the_ridge_fit_of_the_clients_residuals():
    X, y, groups = _data()
    m = PFedHGPRegressor(site_trend="linear", **SMALL).fit(X, y, groups=groups)
    for k in range(3):
        rows = groups == k
        r = (y[rows] - m._prior_mean(X[rows])) / m.y_std_
        coef, cov = site_trend_fit(m._scale_X(X[rows]), r)
        np.testing.assert_allclose(m._locals[k]["site_coef"], coef, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(m._locals[k]["site_cov"], cov, rtol=1e-10)
    # the seen-site prediction adds the trend and its variance, consistently in both forms
    mean, std = m.predict(X[:5], groups=groups[:5], return_std=True)
    mean_c, cov = m.predict(X[:5], groups=groups[:5], return_cov=True)
    np.testing.assert_allclose(mean_c, mean)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-8)
    s2 = m.noise_variance_ / m.y_std_**2
    base = m._moments(X[:5], np.zeros(5, dtype=int), full=False)
    m._locals[0] = {k: v for k, v in m._locals[0].items() if not k.startswith("site_")}
    without = m._moments(X[:5], np.zeros(5, dtype=int), full=False)
    t_mean, t_var = site_trend_moments(m._scale_X(X[:5]), *(
        site_trend_fit(m._scale_X(X[groups == 0]),
                       (y[groups == 0] - m._prior_mean(X[groups == 0])) / m.y_std_)), full=False)
    np.testing.assert_allclose(base[0], without[0] + t_mean, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(base[1], without[1] + s2 * t_var, rtol=1e-8, atol=1e-12)


def test_site_trend_sends_nothing_more_and_leaves_new_sites_alone():
    X, y, groups = _data()
    a = PFedHGPRegressor(**SMALL).fit(X, y, groups=groups)
    b = PFedHGPRegressor(site_trend="linear", **SMALL).fit(X, y, groups=groups)
    names = [(r.round, r.direction, tuple(r.names), tuple(r.shapes))
             for r in a.communication_.records]
    assert names == [(r.round, r.direction, tuple(r.names), tuple(r.shapes))
                     for r in b.communication_.records]
    assert all(not any(n.startswith("site_") for n in r.names) for r in b.communication_.records)
    assert np.all(np.isfinite(b.predict(X, groups=None)))


@pytest.mark.parametrize("value", ["affine", None, 1, True])
def test_bad_site_trend_is_a_value_error(value):
    X, y, groups = _data()
    with pytest.raises(ValueError, match="'site_trend' parameter"):
        PFedHGPRegressor(site_trend=value, **SMALL).fit(X, y, groups=groups)


def test_site_trend_is_for_1d_y_only():
    X, y, groups = _data()
    with pytest.raises(ValueError, match="site_trend='linear' is implemented for 1-D y"):
        PFedHGPRegressor(site_trend="linear", **SMALL).fit(
            X, np.column_stack([y, -y]), groups=groups)
