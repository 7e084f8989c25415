"""PFedHGPRegressor's linear prior mean (``mean_function="linear"``)."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from skfed import PFedHGPRegressor
from skfed.gaussian_process._setup import (
    LINEAR_MEAN_ALPHA, cross_summary, input_summary, linear_mean, target_summary,
)


def variational(**params):
    """``PFedHGPRegressor(inference="variational", **params)``: the fit these tests pin."""
    return PFedHGPRegressor(inference="variational", **params)


def _data(n_outputs=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (90, 2))
    groups = np.repeat([0, 1, 2], 30)
    y = 3.0 * X[:, 0] - 0.5 * X[:, 1] + np.sin(X[:, 1]) + 0.5 * groups \
        + 0.1 * rng.normal(size=90)
    if n_outputs:
        y = np.column_stack([y, X[:, 1] - y])
    return X, y, groups


def _messages(X, y, groups):
    return [{"n": np.int64((groups == k).sum()), **target_summary(y[groups == k]),
             **input_summary(X[groups == k]), **cross_summary(X[groups == k], y[groups == k])}
            for k in np.unique(groups)]


@pytest.mark.parametrize("n_outputs", [None, 2])
def test_linear_mean_is_the_pooled_ridge_fit(n_outputs):
    X, y, groups = _data(n_outputs)
    shift, scale = np.array([4.0, 6.0]), np.array([2.0, 3.0])
    mean, coef, var = linear_mean(_messages(X, y, groups), shift, scale, 0.0)
    Xs = (X - shift) / scale
    ref = Ridge(alpha=LINEAR_MEAN_ALPHA).fit(Xs, y)
    np.testing.assert_allclose(coef, ref.coef_.T, rtol=1e-9)
    np.testing.assert_allclose(mean, ref.intercept_, rtol=1e-9)
    resid = y - ref.predict(Xs)
    expected = np.var(resid) if n_outputs is None else np.cov(resid.T, bias=True)
    np.testing.assert_allclose(var, expected, rtol=1e-8, atol=1e-10)


def test_small_clients_send_no_cross_products():
    X, y, _ = _data()
    assert cross_summary(X[:2], y[:2]) == {}
    msg = cross_summary(X[:3], y[:3])
    assert set(msg) == {"xtx", "xty"} and msg["xtx"].shape == (3,)
    # no client sent any: the constant shift and a zero slope
    mean, coef, var = linear_mean([{"n": np.int64(2)}], np.zeros(2), np.ones(2), 1.5)
    assert mean == 1.5 and np.all(coef == 0) and var is None


def test_a_product_of_one_row_is_never_sent():
    # an indicator set on one row: sum_i x_i1 y_i would be that row's y
    X = np.array([[1.0, 1.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]])
    y = np.array([7.0, 5.0, 6.0, 8.0])
    assert cross_summary(X, y) == {}
    X[1:3, 1] = [1.0, 1.0]  # now three rows carry it
    assert set(cross_summary(X, y)) == {"xtx", "xty"}
    y[[0, 1]] = 0.0  # x_1 y has one nonzero product left
    assert cross_summary(X, y) == {}
    # a column that is zero on every row sums no product: allowed (it sends exact zeros)
    Z = np.column_stack([X[:, 0], np.zeros(4)])
    assert set(cross_summary(Z, np.arange(1.0, 5.0))) == {"xtx", "xty"}


def test_the_linear_mean_leaves_out_the_clients_that_withhold():
    X, y, groups = _data()
    X = np.column_stack([X, (np.arange(90) % 30 == 0).astype(float)])  # one row per client
    model = PFedHGPRegressor(inference="variational",
                             n_inducing_global=6, n_inducing_local=3, n_rounds=2,
                             random_state=0).fit(X, y, groups=groups)
    up = [r for r in model.communication_.records if r.direction == "up"]
    assert up and not any("xty" in r.names for r in up)
    assert np.all(model.mean_coef_ == 0)


@pytest.mark.parametrize("n_outputs", [None, 2])
def test_new_sites_follow_the_pooled_trend(n_outputs):
    X, y, groups = _data(n_outputs)
    kw = dict(n_inducing_global=8, n_inducing_local=4, n_rounds=6, random_state=0)
    lin = variational(mean_function="linear", **kw).fit(X, y, groups=groups)
    const = variational(mean_function="constant", **kw).fit(X, y, groups=groups)
    far = np.array([[30.0, 5.0]])  # far outside the inputs' range [0, 10]
    truth = 3.0 * 30.0 - 0.5 * 5.0 + np.sin(5.0) + 0.5
    if n_outputs:
        truth = np.array([truth, 5.0 - truth])
        assert lin.mean_coef_.shape == (2, 2)
    else:
        assert lin.mean_coef_.shape == (2,)
        np.testing.assert_allclose(lin.mean_coef_[0], 3.0, rtol=0.05)
    assert np.all(np.abs(lin.predict(far) - truth) < 0.05 * np.abs(truth) + 1.0)
    # the GP alone reverts to the pooled mean there
    assert np.all(np.abs(const.predict(far) - truth) > 0.3 * np.abs(truth))
    assert np.all(const.mean_coef_ == 0)
    # the personalized predictions in range fit as well as with the constant mean
    assert lin.score(X, y, groups=groups) > 0.99


def test_the_cross_products_are_in_the_ledger_only_with_the_linear_mean():
    X, y, groups = _data()
    kw = dict(n_inducing_global=6, n_inducing_local=3, n_rounds=2, random_state=0)
    for mean_function, sent in (("linear", True), ("constant", False)):
        model = variational(mean_function=mean_function, **kw).fit(X, y, groups=groups)
        setup = [r for r in model.communication_.records if r.direction == "up" and r.round == 0]
        assert setup and all(({"xtx", "xty"} <= set(r.names)) == sent for r in setup)
        down = [r for r in model.communication_.records if r.direction == "down" and r.round > 0]
        assert all(("y_coef" in r.names) == sent for r in down)


def test_bad_mean_function_is_refused():
    X, y, groups = _data()
    with pytest.raises(ValueError, match="'mean_function' parameter"):
        variational(mean_function="quadratic").fit(X, y, groups=groups)


@pytest.mark.parametrize("inference, n_outputs",
                         [("collapsed", None), ("variational", None), ("variational", 2)])
def test_the_prior_mean_is_mean_intercept_plus_x_mean_coef(inference, n_outputs):
    # without a global GP a new site's prediction is the prior mean alone: the fixed
    # effects' line, whose intercept (collapsed: the generalized least squares one,
    # not the target's standardization shift) the attributes must give
    X, y, groups = _data(n_outputs)
    kw = dict(n_inducing_local=4, n_rounds=3) if inference == "variational" else {}
    model = PFedHGPRegressor(inference=inference, components=("local",), random_state=0,
                             **kw).fit(X, y, groups=groups)
    Xt = np.random.default_rng(1).uniform(-5, 15, (7, 2))
    line = model.mean_intercept_ + Xt @ model.mean_coef_
    np.testing.assert_allclose(model.predict(Xt), line, rtol=1e-10, atol=1e-10)
    assert np.shape(model.mean_intercept_) == np.shape(model.y_mean_)
    if inference == "collapsed":  # the intercept is a fitted effect, not the shift
        assert abs(model.mean_intercept_ - (model.y_mean_ - model.x_mean_ @ model.mean_coef_)) \
            > 1e-6
