"""PersonalizedTensorRegressor: recovery, privacy noise, prediction, bad input."""

import pickle

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed.datasets import make_tensor_regression
from skfed.federated import Federation
from skfed.privacy import pftr_noise_std
from skfed.tensor import PersonalizedTensorRegressor, retract, tangent_project
from skfed.tensor._stages import StageOne


def _diag_core_tensor(shape, rank, rng):
    """A Tucker-rank ``rank`` tensor whose unfoldings have equal singular values."""
    r = rank[0]
    core = np.zeros(rank)
    for i in range(r):
        core[(i,) * len(rank)] = 1.0
    factors = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n in shape]
    A = core
    for s, U in enumerate(factors):
        A = np.moveaxis(np.tensordot(U, A, axes=(1, s)), 0, s)
    return A


@pytest.fixture
def small():
    return make_tensor_regression(
        n_clients=3, n_samples=[60, 80, 100], tensor_shape=(5, 4), output_shape=(3,),
        rank=(2, 2, 2), n_nonzero=4, noise=0.05, return_truth=True, random_state=0,
    )


def test_noiseless_recovery_of_shared_and_sparse_parts():
    # Two clients share their design and have opposite deviations, so the
    # pooled Stage-I gradient vanishes exactly at the true A_0 (no
    # heterogeneity bias); Stage II then recovers each sparse B_k.
    rng = np.random.default_rng(0)
    shape = (3, 5, 4)
    A0 = _diag_core_tensor(shape, (2, 2, 2), rng)
    B = np.zeros(shape)
    B[0, 1, 2], B[2, 4, 0], B[1, 0, 3] = 0.5, -0.4, 0.3
    n = 120
    Xk = rng.standard_normal((n, 20))
    X = np.vstack([Xk, Xk])
    Y = np.vstack([Xk @ (A0 + B).reshape(3, 20).T, Xk @ (A0 - B).reshape(3, 20).T])
    groups = np.repeat([0, 1], n)
    model = PersonalizedTensorRegressor(
        tensor_shape=(5, 4), rank=(2, 2, 2), step_size=0.5, n_rounds=150,
        clip_quantile=1.0, alpha=1e-5, penalty_scaling="none", n_local_iter=3000,
    ).fit(X, Y, groups=groups)
    np.testing.assert_allclose(model.shared_coef_, A0, atol=1e-8)
    np.testing.assert_allclose(model.deviations_[0], B, atol=1e-3)
    np.testing.assert_allclose(model.deviations_[1], -B, atol=1e-3)
    assert np.sum(np.abs(model.deviations_[0]) > 1e-3) == 3
    assert model.rank_ == (2, 2, 2)
    np.testing.assert_allclose(model.predict(Xk[:5], groups=[0] * 5), Y[:5], atol=1e-3)


def test_federated_fit_beats_initializer_and_reports_attributes(small):
    X, y, groups, truth = small
    model = PersonalizedTensorRegressor(
        tensor_shape=(5, 4), rank=(2, 2, 2), step_size=0.5, n_rounds=30, random_state=0
    ).fit(X, y, groups=groups)
    assert model.shared_coef_.shape == model.coef_shape_ == (3, 5, 4)
    assert model.core_.shape == (2, 2, 2)
    assert [U.shape for U in model.factors_] == [(3, 2), (5, 2), (4, 2)]
    assert model.deviations_.shape == model.coef_.shape == (3, 3, 5, 4)
    assert model.clients_.tolist() == [0, 1, 2]
    assert model.init_client_ == 2  # the largest client starts A_0
    err = np.linalg.norm(model.shared_coef_ - truth.shared_coef)
    assert err < 0.25
    A_err = [np.linalg.norm(model.coef_[k] - truth.coef[k]) for k in range(3)]
    assert max(A_err) < 0.25
    assert model.noise_std_.shape == (3, 30) and np.all(model.noise_std_ == 0)
    assert model.privacy_spent_["epsilon"] == np.inf
    assert model.communication_.bytes_up > 0


def test_noise_scale_matches_formula_and_vanishes_at_infinite_epsilon():
    # Full Tucker rank of a square tensor: the tangent space is everything, so the
    # sent message minus the clean clipped gradient is exactly the Gaussian noise.
    rng = np.random.default_rng(1)
    n, side = 40, 6
    X = rng.standard_normal((n, side * side))
    y = rng.standard_normal((n, 1))
    fed = Federation.from_arrays(X, y)
    A = np.zeros((1, side, side))
    kwargs = dict(step_size=0.1, n_rounds=50, epsilon=5.0, delta=0.01,
                  tau_x=2.0, tau_e=0.5, tangent="exact")
    alg = StageOne(A.shape, (1, side, side), A, **kwargs)
    state = alg.client_init(fed.clients[0], rng)
    _, core, factors = retract(A, (1, side, side))
    broadcast = {"coef": A, "core": core, **{f"factor_{j}": U for j, U in enumerate(factors)}}
    sigma = pftr_noise_std(0.5, 2.0, n, 50, 5.0, 0.01)
    z = 50 * np.sqrt(2 * np.log(1.25 * 50 / 0.01)) / 5.0
    assert sigma == pytest.approx(2 * 0.5 * 2.0 / n * z)
    clean_alg = StageOne(A.shape, (1, side, side), A, **{**kwargs, "epsilon": None})
    _, clean = clean_alg.client_step(fed.clients[0], state, broadcast, rng)
    draws = []
    for t in range(50):
        new_state, msg = alg.client_step(fed.clients[0], state, broadcast, np.random.default_rng(t))
        draws.append(msg["grad"] - clean["grad"])
        assert new_state["sigma"][-1] == pytest.approx(sigma)
    draws = np.concatenate([d.ravel() for d in draws])
    assert np.std(draws) == pytest.approx(sigma, rel=0.05)
    assert abs(np.mean(draws)) < 4 * sigma / np.sqrt(draws.size)
    assert pftr_noise_std(0.5, 2.0, n, 50, float("inf"), 0.01) == 0.0


def test_infinite_epsilon_is_bitwise_the_non_private_fit(small):
    X, y, groups, _ = small
    kw = dict(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=5, random_state=3)
    a = PersonalizedTensorRegressor(epsilon=None, **kw).fit(X, y, groups=groups)
    b = PersonalizedTensorRegressor(epsilon=float("inf"), **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(b.noise_std_, 0.0)


def test_private_fit_noise_and_privacy_report(small):
    X, y, groups, _ = small
    kw = dict(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=10, epsilon=20.0, delta=0.1,
              fit_intercept=False, step_size=0.5)
    model = PersonalizedTensorRegressor(tau_x=5.0, tau_e=1.0, random_state=0, **kw)
    model.fit(X, y, groups=groups)
    n_k = np.array([60, 80, 100])
    # 11 releases: the 10 rounds and the private initializer's moment
    expected = 2 * 1.0 * 5.0 / n_k * 11 * np.sqrt(2 * np.log(1.25 * 11 / 0.1)) / 20.0
    np.testing.assert_allclose(model.noise_std_, np.repeat(expected[:, None], 10, axis=1))
    spent = model.privacy_spent_
    assert spent["strict"] and spent["epsilon"] == 20.0 and spent["delta"] == 0.1
    assert spent["n_releases"] == 11 and spent["outside"] == []
    assert 0 < spent["epsilon_rdp"] < 20.0
    assert not spent["classical_valid"]  # per-release epsilon 20/11 >= 1
    # quantile truncation: data-dependent levels, only in the paper's mode, no guarantee
    kw["privacy_mode"] = "paper"
    with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
        q = PersonalizedTensorRegressor(random_state=0, **kw).fit(X, y, groups=groups)
    assert not q.privacy_spent_["strict"] and q.privacy_spent_["epsilon"] == np.inf
    assert q.privacy_spent_["epsilon_nominal"] == 20.0
    norms = np.linalg.norm(X[groups == 0], axis=1)
    assert q.tau_x_[0] == pytest.approx(np.quantile(norms, 0.9))
    # same seed, same noise; another seed, other noise
    with pytest.warns(UserWarning):
        again = PersonalizedTensorRegressor(random_state=0, **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(q.coef_, again.coef_)
    threads = PersonalizedTensorRegressor(random_state=0, n_jobs=2, **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(q.coef_, threads.coef_)
    other = PersonalizedTensorRegressor(random_state=1, **kw).fit(X, y, groups=groups)
    assert not np.array_equal(q.shared_coef_, other.shared_coef_)


def test_messages_hold_no_raw_rows(small):
    X, y, groups, _ = small
    model = PersonalizedTensorRegressor(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=3)
    model.fit(X, y, groups=groups)
    records = model.communication_.records
    setup = {name for r in records if r.round < 0 for name in r.names}
    # with the intercept, each site's sums of X and y (not raw rows, not means) go up in
    # the set-up and the pooled means come down; with step_size="auto", each site's L_k
    assert setup == {"n_samples", "n_features", "tensor_shape", "output_shape", "y_layout",
                     "x_sum", "y_sum", "x_mean", "y_mean", "lipschitz"}
    for r in records:
        if r.round < 0:
            for name, shape in zip(r.names, r.shapes):
                assert name not in ("x_sum", "y_sum", "x_mean", "y_mean") or \
                    shape in ((20,), (3,))
                assert r.direction == "up" or name not in ("x_sum", "y_sum")
    no_intercept = PersonalizedTensorRegressor(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=3,
                                               fit_intercept=False, step_size=0.04).fit(
        X, y, groups=groups)
    assert {name for r in no_intercept.communication_.records if r.round < 0
            for name in r.names} == {"n_samples", "n_features", "tensor_shape",
                                     "output_shape", "y_layout"}
    up = [r for r in records if r.direction == "up" and r.round >= 0]
    names = {name for r in up for name in r.names}
    assert names <= {"n_samples", "coef", "grad"}
    for r in up:
        for name, shape in zip(r.names, r.shapes):
            # only counts and coefficient-shaped tensors, never (n_k, ...) rows
            assert shape in ((), (3, 5, 4)), (name, shape)
    # init: 3 counts + 1 estimate; Stage I: 3 rounds x 3 clients; Stage II: nothing
    grads = [r for r in up if "grad" in r.names]
    assert len(grads) == 9
    assert sum("coef" in r.names for r in up) == 1


def test_predict_routes_clients_and_population(small):
    X, y, groups, _ = small
    model = PersonalizedTensorRegressor(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=5)
    model.fit(X, y, groups=groups)
    Xt = X[:4]
    shared = Xt @ model.shared_coef_.reshape(3, 20).T + model.shared_intercept_
    np.testing.assert_allclose(model.predict(Xt), shared)
    np.testing.assert_allclose(model.predict_shared(Xt), shared)
    np.testing.assert_allclose(model.predict(Xt, groups=[7] * 4), shared)  # unseen
    own = Xt @ model.coef_[1].reshape(3, 20).T + model.intercept_[1]
    np.testing.assert_allclose(model.predict(Xt, groups=[1] * 4), own)
    # n-D X gives the same model and predictions
    nd = PersonalizedTensorRegressor(rank=(2, 2, 2), n_rounds=5).fit(
        X.reshape(-1, 5, 4), y, groups=groups
    )
    np.testing.assert_allclose(nd.coef_, model.coef_)
    np.testing.assert_allclose(nd.predict(Xt.reshape(-1, 5, 4), groups=[1] * 4), own)
    with pytest.raises(ValueError, match="unknown_client|not seen"):
        model.set_params(unknown_client="error").predict(Xt, groups=[7] * 4)
    restored = pickle.loads(pickle.dumps(model.set_params(unknown_client="global")))
    np.testing.assert_array_equal(restored.predict(Xt, groups=[1] * 4),
                                  model.predict(Xt, groups=[1] * 4))


def test_nested_lists_are_the_equivalent_ndarray(small):
    # a 3-D ndarray X was accepted, the same rows as nested lists refused ("dim 3")
    X, y, groups, _ = small
    X3, Y3 = X.reshape(-1, 5, 4), y.reshape(-1, 3, 1)
    kw = dict(rank=(2, 1, 2, 2), n_rounds=3, random_state=0)
    nd = PersonalizedTensorRegressor(**kw).fit(X3, Y3, groups=groups)
    lists = PersonalizedTensorRegressor(**kw).fit(X3.tolist(), Y3.tolist(), groups=groups)
    assert lists.tensor_shape_ == (5, 4) and lists.output_shape_ == (3, 1)
    np.testing.assert_array_equal(lists.coef_, nd.coef_)
    np.testing.assert_array_equal(lists.predict(X3[:4].tolist(), groups=groups[:4]),
                                  nd.predict(X3[:4], groups=groups[:4]))
    with pytest.raises(ValueError, match=r"\bX\b"):  # ragged: still refused by name
        PersonalizedTensorRegressor(**kw).fit([[[1.0, 2.0]], [[1.0]]], [1.0, 2.0])


def test_tensor_response_layout():
    X, y, groups = make_tensor_regression(
        n_clients=2, n_samples=50, tensor_shape=(4, 3), output_shape=(2, 2),
        rank=(2, 2, 2, 2), n_nonzero=2, random_state=0,
    )
    m2 = PersonalizedTensorRegressor(tensor_shape=(4, 3), output_shape=(2, 2), rank=2, n_rounds=3)
    assert m2.fit(X, y, groups=groups).predict(X[:3]).shape == (3, 4)
    assert m2.coef_shape_ == (2, 2, 4, 3)
    m3 = PersonalizedTensorRegressor(tensor_shape=(4, 3), rank=2, n_rounds=3)
    assert m3.fit(X, y.reshape(-1, 2, 2), groups=groups).predict(X[:3]).shape == (3, 2, 2)
    np.testing.assert_allclose(m3.coef_, m2.coef_)
    # score of a tensor response: R^2 over its entries (it failed inside r2_score)
    Y3 = y.reshape(-1, 2, 2)
    assert m3.score(X, Y3, groups=groups) == pytest.approx(m2.score(X, y, groups=groups))
    with pytest.raises(ValueError, match=r"y has shape \(100, 3\)"):
        m3.score(X, y[:, :3], groups=groups)


def test_rank_selection_finds_the_true_rank_on_clean_data():
    rng = np.random.default_rng(0)
    shape = (4, 6, 5)
    A0 = _diag_core_tensor(shape, (2, 2, 2), rng)
    X = rng.standard_normal((3 * 150, 30))
    y = X @ A0.reshape(4, 30).T + 0.01 * rng.standard_normal((450, 4))
    groups = np.repeat([0, 1, 2], 150)
    model = PersonalizedTensorRegressor(tensor_shape=(6, 5), n_rounds=2).fit(X, y, groups=groups)
    assert model.rank_ == (2, 2, 2)
    assert model.local_ranks_ == {0: (2, 2, 2), 1: (2, 2, 2), 2: (2, 2, 2)}


def test_cv_option_and_grid_search(small):
    X, y, groups, _ = small
    fast = dict(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=5, init_max_iter=30)
    model = PersonalizedTensorRegressor(
        cv=2, param_grid={"step_size": [0.05, 0.5], "alpha": [0.01, 0.1]}, **fast
    ).fit(X, y, groups=groups)
    assert model.best_params_["step_size"] in (0.05, 0.5)
    assert model.cv_results_["mean_validation_error"].shape == (4,)
    best = np.argmin(model.cv_results_["mean_validation_error"])
    assert model.cv_results_["step_size"][best] == model.best_params_["step_size"]
    assert model.cv_results_["alpha"][best] == model.best_params_["alpha"]
    # every tuning parameter is also a plain, searchable parameter
    search = GridSearchCV(
        PersonalizedTensorRegressor(**fast), {"step_size": [0.05, 0.5]}, cv=2
    ).fit(X, y)
    assert set(search.best_params_) == {"step_size"}
    pipe = make_pipeline(StandardScaler(), PersonalizedTensorRegressor(**fast))
    assert pipe.fit(X, y).predict(X[:2]).shape == (2, 3)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"tensor_shape": (3, 3)}, "tensor_shape"),
        ({"tensor_shape": (5, 4), "rank": (2, 6, 2)}, r"rank\[1\]"),
        ({"tensor_shape": (5, 4), "rank": (1, 1, 2)}, "infeasible"),
        ({"tensor_shape": (5, 4), "rank": (2, 2)}, "3 integers"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0}, "delta"),
        ({"cv": 70}, r"cv=70 folds need at least 70 rows per client.*\(cv\)"),
        ({"tau_x": -1.0}, "tau_x"),
        ({"clip_quantile": 0.0}, "clip_quantile"),
        ({"step_size": 0.0}, "step_size"),
        ({"tangent": "approx"}, "tangent"),
        ({"retraction": "hooi"}, "retraction"),
        ({"init": np.zeros(3)}, "init"),
        ({"rank": "best"}, "rank"),
        ({"output_shape": (2, 2)}, "output_shape"),
        ({"param_grid": {"n_rounds": [1]}}, "param_grid"),
        # a value, not a list: "object of type 'float' has no len()" before
        ({"cv": 2, "param_grid": {"alpha": 0.1}},
         r"param_grid\['alpha'\] must be a list of values, got 0\.1"),
        ({"cv": 2, "param_grid": {"step_size": "0.1"}}, r"\['step_size'\] must be a list"),
        ({"cv": 2, "param_grid": {"alpha": []}}, r"param_grid\['alpha'\] is empty"),
        ({"cv": 2, "param_grid": {"alpha": [-1.0]}}, r"param_grid\['alpha'\]"),
    ],
)
def test_bad_input_is_named(small, params, match):
    X, y, groups, _ = small
    with pytest.raises(ValueError, match=match):
        PersonalizedTensorRegressor(n_rounds=2, **params).fit(X, y, groups=groups)


def test_failed_fit_keeps_previous_model(small):
    X, y, groups, _ = small
    model = PersonalizedTensorRegressor(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=2)
    model.fit(X, y, groups=groups)
    coef = model.coef_.copy()
    with pytest.raises(ValueError):
        model.set_params(rank=(9, 9, 9)).fit(X, y, groups=groups)
    np.testing.assert_array_equal(model.coef_, coef)


def test_groups_reach_fit_through_metadata_routing(small):
    from sklearn import config_context
    from sklearn.model_selection import KFold

    X, y, groups, _ = small
    fast = dict(tensor_shape=(5, 4), rank=(2, 2, 2), n_rounds=3, init_max_iter=30)
    with config_context(enable_metadata_routing=True):
        search = GridSearchCV(
            make_pipeline(StandardScaler(), PersonalizedTensorRegressor(**fast)),
            {"personalizedtensorregressor__alpha": [0.01, 0.1]},
            cv=KFold(2, shuffle=True, random_state=0),
        ).fit(X, y, groups=groups)
    assert search.best_estimator_[-1].clients_.tolist() == [0, 1, 2]


def test_stage_one_sets_up_the_tangent_projector_once_per_broadcast(small):
    X, y, groups, _ = small
    fed = Federation.from_arrays(X, y, groups)
    rng = np.random.default_rng(0)
    init = retract(rng.standard_normal((3, 5, 4)), (2, 2, 2))[0]
    alg = StageOne((3, 5, 4), (2, 2, 2), init, step_size=0.1, n_rounds=3, epsilon=None,
                   delta=0.1)
    states = [alg.client_init(c, rng) for c in fed.clients]
    server, broadcast = alg.server_init(rng)
    assert not broadcast["core"].flags.writeable  # immutable, like the engine's copies
    projector = alg._projector(broadcast)
    msgs = {}
    for k, c in enumerate(fed.clients):
        states[k], msgs[k] = alg.client_step(c, states[k], broadcast, rng)
        assert alg._projector(broadcast) is projector
    server, new_broadcast = alg.server_step(server, msgs, rng)
    assert server["coef"].flags.writeable
    assert alg._projector(new_broadcast) is not projector
    # writable arrays are compared by value: equal values share, a change is seen
    copy = {k: np.array(v) for k, v in new_broadcast.items()}
    assert alg._projector(copy) is alg._projector(new_broadcast)
    copy["core"][0, 0, 0] += 1.0
    changed = alg._projector(copy)
    factors = [copy[f"factor_{j}"] for j in range(3)]
    G = rng.standard_normal((3, 5, 4))
    np.testing.assert_allclose(changed(G), tangent_project(G, copy["core"], factors),
                               atol=1e-13)
    with pytest.raises(ValueError, match="shape"):
        changed(G[:2])
