"""Baselines: single-client two-stage, Fed-Common, Fed-Avg, the tensorly wrapper."""

import numpy as np
import pytest
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_tensor_regression
from skfed.tensor import (
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
    TensorlyTuckerRegressor,
)
from skfed.tensor._stages import local_stage_one


@pytest.fixture
def data():
    return make_tensor_regression(
        n_clients=3, n_samples=[50, 60, 70], tensor_shape=(5, 4), output_shape=None,
        rank=(2, 2), n_nonzero=2, noise=0.05, return_truth=True, random_state=0,
    )


def test_local_two_stage_uses_only_own_rows(data):
    X, y, groups, truth = data
    model = LocalTwoStageTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_iter=50)
    model.fit(X, y, groups=groups)
    alone = LocalTwoStageTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_iter=50)
    alone.fit(X[groups == 1], y[groups == 1])
    np.testing.assert_allclose(model.coef_[1], alone.coef_[0])
    up = [r for r in model.communication_.records if r.direction == "up" and r.round >= 0]
    assert {n for r in up for n in r.names} == {"n_samples"}
    pop = np.tensordot(model.client_weights_, model.coef_, axes=1)
    intercept = model.client_weights_ @ model.intercept_
    np.testing.assert_allclose(model.predict(X[:3]), X[:3] @ pop.ravel() + intercept)
    err = [np.linalg.norm(model.coef_[k] - truth.coef[k]) for k in range(3)]
    assert max(err) < 0.5


@pytest.mark.parametrize("make", [
    lambda: LocalTwoStageTensorRegressor(rank=(2, 2), n_iter=20),
    lambda: FedAvgTensorRegressor(rank=(2, 2), n_iter=20),
    lambda: FedCommonTensorRegressor(rank=(2, 2), n_rounds=2, random_state=0),
])
def test_nested_lists_are_the_equivalent_ndarray(data, make):
    # a 3-D ndarray X was accepted, the same rows as nested lists refused ("dim 3")
    X, y, groups, _ = data
    X3 = X.reshape(-1, 5, 4)
    nd, lists = make().fit(X3, y, groups=groups), make().fit(X3.tolist(), y, groups=groups)
    assert lists.tensor_shape_ == (5, 4)
    np.testing.assert_array_equal(lists.coef_, nd.coef_)
    np.testing.assert_array_equal(lists.predict(X3[:4].tolist(), groups=groups[:4]),
                                  nd.predict(X3[:4], groups=groups[:4]))


def test_local_stage_one_is_riemannian_descent_to_a_noiseless_truth():
    rng = np.random.default_rng(0)
    A = np.outer(rng.standard_normal(6), rng.standard_normal(5))[None]  # (1, 6, 5), rank 1
    X = rng.standard_normal((200, 30))
    y = X @ A.reshape(1, 30).T
    A_hat, core, factors = local_stage_one(X, y, np.zeros_like(A) + 0.1 * A, (1, 1, 1), "auto", 300)
    np.testing.assert_allclose(A_hat, A, atol=1e-8)


def test_fed_avg_and_fed_common(data):
    X, y, groups, _ = data
    avg = FedAvgTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_iter=30)
    avg.fit(X, y, groups=groups)
    np.testing.assert_allclose(avg.average_coef_, avg.coef_.mean(axis=0))
    np.testing.assert_allclose(avg.average_intercept_, avg.intercept_.mean())
    np.testing.assert_allclose(avg.predict(X[:4], groups=groups[:4]),
                               X[:4] @ avg.average_coef_.ravel() + avg.average_intercept_)
    w = FedAvgTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_iter=30, weights="n_samples")
    w.fit(X, y, groups=groups)
    expected = np.tensordot([50 / 180, 60 / 180, 70 / 180], w.coef_, 1)
    np.testing.assert_allclose(w.average_coef_, expected)
    with pytest.raises(ValueError, match="weights"):
        FedAvgTensorRegressor(weights="median").fit(X, y, groups=groups)
    common = FedCommonTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_rounds=5, random_state=0)
    common.fit(X, y, groups=groups)
    full = PersonalizedTensorRegressor(tensor_shape=(5, 4), rank=(2, 2), n_rounds=5, random_state=0)
    full.fit(X, y, groups=groups)
    np.testing.assert_allclose(common.shared_coef_, full.shared_coef_)
    np.testing.assert_allclose(common.predict(X[:4], groups=groups[:4]), full.predict(X[:4]))


def test_tensorly_wrapper_in_pipeline_cv_and_federated_wrappers(data):
    X, y, groups, truth = data
    est = TensorlyTuckerRegressor(tensor_shape=(5, 4), weight_ranks=(2, 2), random_state=0)
    scores = cross_val_score(make_pipeline(StandardScaler(), est), X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)
    local = LocalEstimator(est).fit(X, y, groups=groups)
    assert local.predict(X[:2], groups=groups[:2]).shape == (2,)
    pooled = PooledEstimator(est).fit(X, y, groups=groups)
    assert pooled.estimator_.coef_.shape == (5, 4)
    with pytest.raises(ValueError, match="weight_ranks"):
        TensorlyTuckerRegressor(tensor_shape=(5, 4), weight_ranks=(6, 1)).fit(X, y)
    with pytest.raises(ValueError, match="tensor_shape"):
        TensorlyTuckerRegressor(tensor_shape=(3, 3)).fit(X, y)


def test_admm_initializer_unfolding_for_scalar_response():
    from skfed.tensor._stages import admm_init

    rng = np.random.default_rng(0)
    W = np.outer(rng.standard_normal(8), rng.standard_normal(6))  # rank-1 image
    X = rng.standard_normal((300, 48))
    y = X @ W.ravel() + 0.05 * rng.standard_normal(300)
    A_resp, _, _ = admm_init(X, y[:, None], lam=0.05, omega=1.0, max_iter=300)
    A_mode, _, _ = admm_init(X, y[:, None], lam=0.05, omega=1.0, max_iter=300, rows=8)
    sv_mode = np.linalg.svd(A_mode.reshape(8, 6), compute_uv=False)
    sv_resp = np.linalg.svd(A_resp.reshape(8, 6), compute_uv=False)
    # the nuclear norm of the 8 x 6 unfolding shrinks the spurious singular values
    assert sv_mode[1] / sv_mode[0] < 0.05
    assert sv_mode[1] / sv_mode[0] < sv_resp[1] / sv_resp[0]


# -- found by tests/test_properties.py ------------------------------------------------------

def test_tensorly_failed_fit_leaves_the_model_unchanged():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 4)), rng.standard_normal(20)
    model = TensorlyTuckerRegressor(tensor_shape=(2, 2), n_iter_max=5, random_state=0).fit(X, y)
    model.set_params(weight_ranks=(3, 3))  # more than the mode size 2: refused in fit
    before = dict(model.__dict__)
    with pytest.raises(ValueError, match="weight_ranks"):
        model.fit(rng.standard_normal((20, 4)), y)
    assert model.__dict__.keys() == before.keys()
    assert all(model.__dict__[k] is v for k, v in before.items())  # was: tensor_shape_ changed


def test_tensorly_refuses_overflowing_values_instead_of_nan_predictions():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 4)), rng.standard_normal(20)
    X[3, 1] = 1e300  # finite, but its square overflows: NaN weights before
    with pytest.raises(ValueError, match=r"X is out of range"):
        TensorlyTuckerRegressor(tensor_shape=(2, 2), random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=r"y is out of range"):
        TensorlyTuckerRegressor(random_state=0).fit(X[:, :1] * 0 + 1, y * 1e300)


@pytest.mark.parametrize("cls", [PersonalizedTensorRegressor, FedAvgTensorRegressor,
                                 FedCommonTensorRegressor, LocalTwoStageTensorRegressor])
def test_predict_on_zero_tensor_rows_names_X(cls):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((24, 2, 2)), rng.standard_normal(24)
    model = cls(rank=(1, 1)).fit(X, y, groups=np.repeat([0, 1, 2], 8))
    # before: "cannot reshape array of size 0 into shape (0,newaxis)"
    with pytest.raises(ValueError, match=r"^X: Found array with 0 sample"):
        model.predict(X[:0])


def test_fedavg_small_clients_send_no_local_model():
    from skfed.federated._ledger import keeping_payloads

    rng = np.random.default_rng(0)
    sizes = (20, 25, 1, 2)  # the Gram matrix of one or two rows gives them
    X = rng.standard_normal((sum(sizes), 3, 2))
    y = X[:, 0, 0] - X[:, 1, 1] + 0.1 * rng.standard_normal(sum(sizes))
    groups = np.repeat(np.arange(4), sizes)
    kw = dict(rank=(1, 1), n_iter=10, weights="n_samples")
    with keeping_payloads():
        model = FedAvgTensorRegressor(**kw).fit(X, y, groups=groups)
    ledger = model.communication_
    up = {r.client: p for r, p in zip(ledger.records, ledger.payloads)
          if r.direction == "up" and r.round == 0}
    assert set(up[2]) == set(up[3]) == {"n_samples"}
    assert set(up[0]) == set(up[1]) == {"n_samples", "coef", "intercept"}
    # the average is over the clients that sent a model
    w = np.array(sizes[:2]) / sum(sizes[:2])
    np.testing.assert_allclose(model.average_coef_, np.tensordot(w, model.coef_[:2], axes=1))
    np.testing.assert_allclose(model.average_intercept_, w @ model.intercept_[:2])
    # none large enough: zeros, with a warning
    with pytest.warns(UserWarning, match="none sent the local models the average needs"):
        small = FedAvgTensorRegressor(**kw).fit(X[-3:], y[-3:], groups=groups[-3:])
    assert not small.average_coef_.any() and small.average_intercept_ == 0.0
