import numpy as np
import pytest
from sklearn.linear_model import Ridge

from skfed.baselines import FedAvgRegressor
from skfed.baselines._kernels import sgd_squared_epochs
from skfed.datasets import make_federated_regression


def _sgd_reference(X, y, coef, intercept, order, lr, alpha, batch_size, fit_intercept):
    coef = coef.copy()
    for perm in order:
        for start in range(0, len(perm), batch_size):
            idx = perm[start:start + batch_size]
            r = X[idx] @ coef + intercept - y[idx]
            grad = X[idx].T @ r / len(idx) + alpha * coef
            grad_b = r.mean()
            coef = coef - lr * grad
            if fit_intercept:
                intercept = intercept - lr * grad_b
    return coef, intercept


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_sgd_kernel_matches_numpy(fit_intercept):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(37, 4)), rng.normal(size=37)
    order = np.stack([rng.permutation(37) for _ in range(3)])
    coef = rng.normal(size=4)
    ref = _sgd_reference(X, y, coef, 0.3, order, 0.05, 0.01, 8, fit_intercept)
    got = coef.copy()
    b = sgd_squared_epochs(X, y, got, 0.3, order, 0.05, 0.01, 8, fit_intercept)
    np.testing.assert_allclose(got, ref[0], rtol=1e-12)
    assert b == pytest.approx(ref[1], rel=1e-12)


def test_converges_to_pooled_ridge_when_clients_agree():
    X, y, groups = make_federated_regression(n_clients=4, n_samples=100, heterogeneity=0.0,
                                             noise=0.1, random_state=0)
    model = FedAvgRegressor(n_rounds=200, learning_rate=0.3, batch_size=400, alpha=0.0,
                            random_state=0).fit(X, y, groups=groups)
    # one full-batch step per round: FedAvg is gradient descent on the pooled loss
    ref = Ridge(alpha=1e-10).fit(X, y)
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-3)
    assert model.intercept_ == pytest.approx(ref.intercept_, abs=1e-3)
    assert model.n_iter_ == 200


def test_fine_tuning_personalizes():
    X, y, groups = make_federated_regression(n_clients=5, n_samples=200, heterogeneity=1.5,
                                             noise=0.1, random_state=1)
    plain = FedAvgRegressor(n_rounds=20, random_state=0).fit(X, y, groups=groups)
    tuned = FedAvgRegressor(n_rounds=20, fine_tune_epochs=20, random_state=0).fit(
        X, y, groups=groups)
    np.testing.assert_array_equal(plain.coef_, tuned.coef_)  # same global model
    assert tuned.score(X, y, groups=groups) > plain.score(X, y, groups=groups) + 0.1
    np.testing.assert_allclose(tuned.predict(X), plain.predict(X))  # population = global
    # the final broadcast to every client is recorded as an extra round, with no reply
    assert tuned.communication_.n_rounds == 21
    assert tuned.communication_.bytes_up_per_round[-1] == 0
    assert plain.communication_.n_rounds == 20


def test_deterministic_across_n_jobs_and_sampling():
    X, y, groups = make_federated_regression(n_clients=6, random_state=2)
    kw = dict(n_rounds=5, client_fraction=0.5, fine_tune_epochs=2, random_state=3)
    a = FedAvgRegressor(n_jobs=1, **kw).fit(X, y, groups=groups)
    b = FedAvgRegressor(n_jobs=2, **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.client_coefs_, b.client_coefs_)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_messages_hold_models_not_rows():
    X, y, groups = make_federated_regression(n_clients=3, random_state=0)
    model = FedAvgRegressor(n_rounds=2).fit(X, y, groups=groups)
    records = model.communication_.records
    up = {r.names for r in records if r.direction == "up" and r.round >= 0}
    assert up == {("coef", "intercept", "n_samples")}
    # the set-up exchange (round -1): each client's row and feature counts up,
    # the combined summary (every client's row count) down
    setup = [r for r in records if r.round == -1]
    assert [r.direction for r in setup] == ["up"] * 3 + ["down"] * 3
    assert {r.names for r in setup[:3]} == {("n_samples", "n_features")}
    assert {r.names for r in setup[3:]} == {("n_features", "n_samples")}
    assert model.communication_.bytes_setup == 3 * 16 + 3 * (8 + 3 * 8)


@pytest.mark.parametrize(
    "params, match",
    [({"learning_rate": 0}, "learning_rate"), ({"learning_rate": "fast"}, "learning_rate"),
     ({"alpha": -1}, "alpha"), ({"n_rounds": 0}, "n_rounds"), ({"batch_size": 0}, "batch_size"),
     ({"fine_tune_epochs": -1}, "fine_tune_epochs"), ({"client_fraction": 2}, "client_fraction")],
)
def test_bad_parameters(params, match):
    X, y, groups = make_federated_regression(n_clients=2, random_state=0)
    with pytest.raises(ValueError, match=match):
        FedAvgRegressor(**params).fit(X, y, groups=groups)


def test_divergence_is_an_error():
    X, y, groups = make_federated_regression(n_clients=2, random_state=0)
    with pytest.raises(FloatingPointError, match="diverged"):
        FedAvgRegressor(learning_rate=10.0, n_rounds=50).fit(100 * X, y, groups=groups)
