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


@pytest.mark.parametrize("n_rounds", [1, 2, 5])
def test_finite_divergence_is_an_error_naming_learning_rate(n_rounds):
    # learning_rate=1e6 used to return predictions near 1e21 (finite) without a word
    X, y, groups = make_federated_regression(n_clients=4, random_state=1)
    with pytest.raises(FloatingPointError, match="learning_rate=1000000.0 is too large"):
        FedAvgRegressor(learning_rate=1e6, n_rounds=n_rounds, random_state=0).fit(
            X, y, groups=groups)
    # under "skip" every client fails, so no client answers: the error says why
    with pytest.raises(RuntimeError, match="no client answered.*learning_rate"):
        FedAvgRegressor(learning_rate=1e6, n_rounds=n_rounds, on_client_error="skip",
                        random_state=0).fit(X, y, groups=groups)


def test_stable_fixed_learning_rates_pass_the_divergence_check():
    X, y, groups = make_federated_regression(n_clients=4, heterogeneity=2.0, random_state=1)
    for lr in (1e-4, 0.01, 0.1):
        for fine_tune_epochs in (0, 5):
            FedAvgRegressor(learning_rate=lr, n_rounds=30, local_epochs=3,
                            fine_tune_epochs=fine_tune_epochs, random_state=0).fit(
                X, y, groups=groups)


def test_client_failing_its_fine_tuning_keeps_the_global_model(monkeypatch):
    from skfed.baselines import _fedavg
    from skfed.federated import ClientDropout

    X, y, groups = make_federated_regression(n_clients=3, n_samples=60, heterogeneity=1.5,
                                             random_state=0)
    finalize = _fedavg._FedAvg.client_finalize

    def drop_client_1(self, data, state, broadcast, rng):
        if data.label == 1:
            raise ClientDropout("client 1 went offline before fine-tuning")
        return finalize(self, data, state, broadcast, rng)

    monkeypatch.setattr(_fedavg._FedAvg, "client_finalize", drop_client_1)
    kw = dict(n_rounds=5, fine_tune_epochs=2, random_state=0)
    model = FedAvgRegressor(on_client_error="skip", **kw).fit(X, y, groups=groups)
    assert model.fallback_clients_.tolist() == [1]
    np.testing.assert_array_equal(model.client_coefs_[1], model.coef_)
    assert model.client_intercepts_[1] == model.intercept_
    assert not np.allclose(model.client_coefs_[0], model.coef_)  # the others fine-tuned
    rows = groups == 1
    np.testing.assert_allclose(model.predict(X[rows], groups=groups[rows]), model.predict(X[rows]))
    assert model.communication_.failures == [
        (5, 1, "ClientDropout: client 1 went offline before fine-tuning")
    ]
    with pytest.raises(ClientDropout, match="offline"):
        FedAvgRegressor(on_client_error="raise", **kw).fit(X, y, groups=groups)
    monkeypatch.undo()
    clean = FedAvgRegressor(on_client_error="skip", **kw).fit(X, y, groups=groups)
    assert clean.fallback_clients_.size == 0
    np.testing.assert_array_equal(clean.client_coefs_[0], model.client_coefs_[0])


def test_numeric_string_targets_are_converted_like_sklearn_regressors():
    X, y, groups = make_federated_regression(n_clients=3, random_state=0)
    kw = dict(n_rounds=3, fine_tune_epochs=1, random_state=0)
    ref = FedAvgRegressor(**kw).fit(X, y, groups=groups)
    for y_text in (y.astype(str), y.astype(str).astype(object)):
        model = FedAvgRegressor(**kw).fit(X, y_text, groups=groups)
        np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-12)
    y_int = np.round(y).astype(int)
    np.testing.assert_array_equal(
        FedAvgRegressor(**kw).fit(X, y_int, groups=groups).coef_,
        FedAvgRegressor(**kw).fit(X, y_int.astype(float), groups=groups).coef_,
    )
    bad = y.astype(str)
    bad[3] = "n/a"
    with pytest.raises(ValueError, match="could not convert string to float"):
        FedAvgRegressor(**kw).fit(X, bad, groups=groups)


def test_overflowing_X_is_refused_by_name():
    # found by tests/test_properties.py: before, a FloatingPointError ("FedAvg diverged")
    X, y, groups = make_federated_regression(n_clients=2, n_samples=6, random_state=0)
    X[0, 0] = 1e300
    with pytest.raises(ValueError, match="X is out of range"):
        FedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, groups=groups)


def _with_small_clients(sizes=(1, 2), n_large=3, seed=0):
    """Clients of ``make_federated_regression`` followed by small clients (last labels)."""
    X, y, groups = make_federated_regression(n_clients=n_large, n_samples=30, random_state=seed)
    rng = np.random.default_rng(seed)
    n_small = sum(sizes)
    X_small = rng.normal(size=(n_small, X.shape[1]))
    y_small = rng.normal(size=n_small)
    g_small = np.repeat(np.arange(n_large, n_large + len(sizes)), sizes)
    return (np.vstack([X, X_small]), np.concatenate([y, y_small]),
            np.concatenate([groups, g_small]), (X, y, groups))


def _up_payloads(model, client):
    ledger = model.communication_
    return [p for r, p in zip(ledger.records, ledger.payloads)
            if r.client == client and r.direction == "up" and r.round >= 0]


def test_one_row_client_sends_nothing_that_solves_for_its_row():
    from skfed.federated._ledger import keeping_payloads

    from skfed.baselines._fedavg import _local_sgd

    X, y, groups, _ = _with_small_clients(sizes=(1,))
    row = X[-1]
    # from the zero model, a one-row client's SGD step moves coef by lr * y * x and the
    # intercept by lr * y: their ratio is its row
    coef, intercept = _local_sgd(X[-1:], y[-1:], np.zeros(row.size), 0.0, 1,
                                 np.random.default_rng(0), 0.1, 1e-4, 32, True)
    np.testing.assert_allclose(coef / intercept, row)
    with keeping_payloads():
        model = FedAvgRegressor(n_rounds=3, random_state=0).fit(X, y, groups=groups)
    payloads = _up_payloads(model, 3)
    assert len(payloads) == 3
    for payload in payloads:  # the row count alone
        assert set(payload) == {"n_samples"} and int(payload["n_samples"]) == 1


def test_two_row_client_sends_no_update():
    from skfed.federated._ledger import keeping_payloads

    X, y, groups, _ = _with_small_clients(sizes=(2, 3))
    with keeping_payloads():
        model = FedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, groups=groups)
    # the updates of a two-row client give its Gram matrix, hence its two rows up to order
    assert all(set(p) == {"n_samples"} for p in _up_payloads(model, 3))
    # three rows hide in their Gram matrix (up to a rotation): that client sends its update
    assert all(set(p) == {"coef", "intercept", "n_samples"} for p in _up_payloads(model, 4))


def test_small_clients_leave_the_global_model_as_without_them():
    X, y, groups, (X0, y0, g0) = _with_small_clients(sizes=(1, 2))
    kw = dict(n_rounds=4, fine_tune_epochs=2, random_state=0)
    with_small = FedAvgRegressor(**kw).fit(X, y, groups=groups)
    without = FedAvgRegressor(**kw).fit(X0, y0, groups=g0)
    # the large clients keep their indices and random streams: the same global model
    np.testing.assert_array_equal(with_small.coef_, without.coef_)
    assert with_small.intercept_ == without.intercept_
    np.testing.assert_array_equal(with_small.client_coefs_[:3], without.client_coefs_)
    # the small clients still fine-tune the global model on their own rows
    assert not np.array_equal(with_small.client_coefs_[3], with_small.coef_)


def test_an_indicator_on_one_row_keeps_the_update_home():
    X, y, groups = make_federated_regression(n_clients=3, n_samples=20, random_state=0)
    X = np.column_stack([X, np.zeros(len(X))])
    # client 0: an indicator set on one row (X^T y holds that row's y)
    X[np.flatnonzero(groups == np.unique(groups)[0])[0], -1] = 1.0
    model = FedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, groups=groups)
    senders = {r.client for r in model.communication_.records
               if r.direction == "up" and r.round >= 0 and "coef" in r.names}
    assert senders == {1, 2}


def test_no_client_large_enough_warns_and_keeps_the_zero_model():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(4, 2)), rng.normal(size=4)
    groups = np.array([0, 0, 1, 1])
    with pytest.warns(UserWarning, match="none sent the model updates the global model"):
        model = FedAvgRegressor(n_rounds=3, fine_tune_epochs=1, random_state=0).fit(
            X, y, groups=groups)
    assert not model.coef_.any() and model.intercept_ == 0.0
    assert model.client_coefs_.any()  # fine-tuned from the zero model
