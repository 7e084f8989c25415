"""fit_intercept (local centring, personal and population intercepts) and input ranges."""

import numpy as np
import pytest

from skfed.datasets import make_tensor_regression
from skfed.tensor import (
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
    TensorlyTuckerRegressor,
)
from skfed.tensor import _baselines, _stages


@pytest.fixture(scope="module")
def data():
    X, y, groups = make_tensor_regression(
        n_clients=3, n_samples=[40, 60, 50], tensor_shape=(4, 3), output_shape=None,
        rank=(2, 2), n_nonzero=2, noise=0.05, random_state=0,
    )
    return X, y, groups


def _centred(X, y, groups):
    Xc, yc = X.copy(), y.copy()
    for k in np.unique(groups):
        rows = groups == k
        Xc[rows] -= X[rows].mean(axis=0)
        yc[rows] -= y[rows].mean(axis=0)
    return Xc, yc


KW = dict(tensor_shape=(4, 3), rank=(2, 2), n_rounds=5, random_state=0)


def test_intercept_is_local_centring_plus_personal_and_population_intercepts(data):
    X, y, groups = data
    offset_y = np.array([100.0, -50.0, 3.0])[groups]
    offset_x = np.array([[5.0], [-2.0], [0.5]])[groups]
    Xr, yr = X + offset_x, y + offset_y  # raw, uncentred data
    model = PersonalizedTensorRegressor(**KW).fit(Xr, yr, groups=groups)
    Xc, yc = _centred(Xr, yr, groups)
    paper = PersonalizedTensorRegressor(fit_intercept=False, **KW).fit(Xc, yc, groups=groups)
    # the slopes are those of the paper's protocol on per-client centred data
    np.testing.assert_allclose(model.coef_, paper.coef_, atol=1e-10)
    np.testing.assert_allclose(model.shared_coef_, paper.shared_coef_, atol=1e-10)
    for k in range(3):
        rows = groups == k
        expected = yr[rows].mean() - model.coef_[k].ravel() @ Xr[rows].mean(axis=0)
        assert model.intercept_[k] == pytest.approx(expected)
    pooled = yr.mean() - model.shared_coef_.ravel() @ Xr.mean(axis=0)
    assert model.shared_intercept_ == pytest.approx(pooled)
    # = the n_k-weighted mean of the clients' intercepts under A_0
    n_k = np.bincount(groups)
    under_a0 = [yr[groups == k].mean() - model.shared_coef_.ravel() @ Xr[groups == k].mean(0)
                for k in range(3)]
    assert model.shared_intercept_ == pytest.approx(n_k @ under_a0 / n_k.sum())
    pred = model.predict(Xr, groups=groups)
    assert np.sqrt(np.mean((pred - yr) ** 2)) < 0.5
    np.testing.assert_allclose(model.predict(Xr[:3]), Xr[:3] @ model.shared_coef_.ravel()
                               + model.shared_intercept_)
    # without the intercept the raw offsets ruin the fit
    flat = PersonalizedTensorRegressor(fit_intercept=False, **KW).fit(Xr, yr, groups=groups)
    flat_rmse = np.sqrt(np.mean((flat.predict(Xr, groups=groups) - yr) ** 2))
    assert np.sqrt(np.mean((pred - yr) ** 2)) < flat_rmse / 2
    assert flat.shared_intercept_ == 0.0 and np.all(flat.intercept_ == 0.0)


def test_intercept_with_vector_covariates_and_tensor_response():
    X, y, groups = make_tensor_regression(
        n_clients=2, n_samples=50, tensor_shape=(4, 3), output_shape=(2, 2),
        rank=(2, 2, 2, 2), n_nonzero=2, random_state=1,
    )
    y = y + 10.0
    m = PersonalizedTensorRegressor(output_shape=(2, 2), rank=2, n_rounds=3).fit(
        X, y, groups=groups)  # X as plain vectors (tensor_shape=None)
    assert m.coef_shape_ == (2, 2, 12)
    assert m.intercept_.shape == (2, 2, 2) and m.shared_intercept_.shape == (2, 2)
    np.testing.assert_allclose(m.shared_intercept_.ravel(),
                               y.mean(0) - m.shared_coef_.reshape(4, 12) @ X.mean(0))
    assert m.predict(X[:3], groups=groups[:3]).shape == (3, 4)


def test_private_fit_intercept_needs_public_levels_of_the_private_means(data):
    # a private fit_intercept=True is covered by the noisy means (tests/tensor/
    # test_private_intercept.py); the strict mode asks for their levels, not for centred data
    X, y, groups = data
    model = PersonalizedTensorRegressor(epsilon=5.0, delta=1e-5, tau_x=4.0, tau_e=2.0,
                                        step_size=0.5, **KW)
    with pytest.raises(ValueError, match=r"(?s)intercept_tau_x: .*intercept_tau_y: "):
        model.fit(X, y, groups=groups)
    assert not hasattr(model, "coef_")
    model.set_params(fit_intercept=False).fit(X, y, groups=groups)
    model.set_params(fit_intercept=True, intercept_tau_x=6.0, intercept_tau_y=3.0).fit(
        X, y, groups=groups)
    assert model.privacy_spent_["strict"]
    # epsilon=inf is no privacy: the intercept from the exact sums
    PersonalizedTensorRegressor(epsilon=float("inf"), **KW).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="'fit_intercept' parameter"):
        PersonalizedTensorRegressor(fit_intercept="yes", **KW).fit(X, y, groups=groups)


def test_baselines_fit_intercepts(data):
    X, y, groups = data
    yr = y + np.array([20.0, -20.0, 5.0])[groups]
    local = LocalTwoStageTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), n_iter=20)
    local.fit(X, yr, groups=groups)
    for k in range(3):
        rows = groups == k
        assert local.intercept_[k] == pytest.approx(
            yr[rows].mean() - local.coef_[k].ravel() @ X[rows].mean(0))
    assert local.score(X, yr, groups=groups) > 0.9
    avg = FedAvgTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), n_iter=20).fit(
        X, yr, groups=groups)
    assert avg.average_intercept_ == pytest.approx(avg.intercept_.mean())
    common = FedCommonTensorRegressor(**KW).fit(X, yr, groups=groups)
    np.testing.assert_allclose(common.predict(X[:4], groups=groups[:4]), common.predict(X[:4]))
    tl = TensorlyTuckerRegressor(tensor_shape=(4, 3), weight_ranks=(2, 2), random_state=0)
    tl.fit(X, y + 100.0)
    assert tl.intercept_ == pytest.approx(100.0, abs=1.0)
    assert TensorlyTuckerRegressor(tensor_shape=(4, 3), fit_intercept=False).fit(
        X, y).intercept_ == 0.0


# -- out-of-range input: a ValueError naming the argument and the client, before any step --


@pytest.mark.parametrize("estimator", [
    PersonalizedTensorRegressor(**KW),
    PersonalizedTensorRegressor(cv=2, param_grid={"alpha": (0.01,)}, **KW),
    LocalTwoStageTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), n_iter=5),
])
def test_out_of_range_input_names_argument_and_client(data, estimator, monkeypatch):
    X, y, groups = data
    labels = np.array(["a", "b", "c"])[groups]
    calls = []
    real = _stages.admm_init
    monkeypatch.setattr(_stages, "admm_init", lambda *a, **k: calls.append(1) or real(*a, **k))
    bad_y = y.copy()
    bad_y[np.flatnonzero(groups == 1)[0]] = 1e200
    with pytest.raises(ValueError, match=r"y of client 'b' is out of range.*\(y\)"):
        estimator.fit(X, bad_y, groups=labels)
    bad_X = X.copy()
    bad_X[np.flatnonzero(groups == 2)[3]] = 1e300
    with pytest.raises(ValueError, match=r"X of client 'c' is out of range.*\(X\)"):
        estimator.fit(bad_X, y, groups=labels)
    with pytest.raises(ValueError, match=r"y of client 'a' is out of range"):
        estimator.fit(X * 1e150, y * 1e160, groups=labels)
    assert not calls  # checked before any step ran
    assert not hasattr(estimator, "coef_")


def test_huge_but_finite_valid_input_still_fits(data):
    X, y, groups = data
    m = PersonalizedTensorRegressor(**KW).fit(X, y * 1e10, groups=groups)
    assert m.score(X, y * 1e10, groups=groups) > 0.9


def test_diverging_stage_one_names_client_round_and_remedy(data):
    X, y, groups = data
    # X on a 1e10 scale: a fixed step size makes Stage I diverge
    with pytest.raises(FloatingPointError,
                       match=r"client 0 failed in Stage I \(round \d+ of the phase\).*step_size"):
        PersonalizedTensorRegressor(**{**KW, "n_rounds": 20, "step_size": 0.04}).fit(
            X * 1e10, y, groups=groups)
    # the default step_size="auto" (1 / L) is scale-free
    m = PersonalizedTensorRegressor(**{**KW, "n_rounds": 20}).fit(X * 1e10, y, groups=groups)
    assert m.score(X * 1e10, y, groups=groups) > 0.9


def test_library_errors_in_client_steps_are_reported_with_client_and_phase(data, monkeypatch):
    X, y, groups = data

    def no_svd(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(_stages, "admm_init", no_svd)
    monkeypatch.setattr(_baselines, "admm_init", no_svd)
    with pytest.raises(FloatingPointError,
                       match=r"client 0 failed in the initializer \(round 0 of the phase\): "
                             r"LinAlgError: SVD did not converge\. To fix: .*init_rho"):
        PersonalizedTensorRegressor(**KW).fit(X, y, groups=groups)
    with pytest.raises(FloatingPointError, match=r"client 0 failed in the local two-stage fit"):
        LocalTwoStageTensorRegressor(tensor_shape=(4, 3), rank=(2, 2)).fit(X, y, groups=groups)
    monkeypatch.undo()

    def nan_deviation(Xm, R0, *args):
        return np.full((R0.shape[1], Xm.shape[1]), np.nan), 0.1

    monkeypatch.setattr(_stages, "fit_deviation", nan_deviation)
    with pytest.raises(FloatingPointError,
                       match=r"client 0 failed in Stage II: FloatingPointError: the deviation "
                             r"B_k is not finite\. To fix: .*alpha"):
        PersonalizedTensorRegressor(**KW).fit(X, y, groups=groups)
