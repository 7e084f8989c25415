"""Client sampling and the failure policy on every estimator that trains in rounds.

The user guide promises ``client_fraction`` and ``on_client_error`` on every
multi-round estimator, on the in-process engine and on Flower (here: the
in-memory Flower grid, real Flower messages). Rounds that need every client
(set-up statistics, the tensor initializer's vote, a release or calibration
round) ask every client; a private fit reports the full-participation
guarantee (no amplification by sampling is claimed).
"""

import numpy as np
import pytest

from skfed.baselines import FedAvgRegressor
from skfed.datasets import (make_federated_regression, make_hierarchical_gp,
                            make_tensor_regression)
from skfed.federated import ClientDropout, fit_federated
from skfed.gaussian_process import PFedGPRegressor, PFedHGPRegressor
from skfed.linear_model import (DPFedDROClassifier, DPFedERMClassifier, DPFedSGDClassifier,
                                FedOvADROClassifier)
from skfed.tensor import FedCommonTensorRegressor, PersonalizedTensorRegressor

N_CLIENTS = 4


def _gp_data():
    d = make_hierarchical_gp(n_clients=N_CLIENTS, n_outputs=None, n_train=15, n_test=5,
                             local_lengthscales=(1.0,), local_scales=(0.5,), noise=0.1,
                             random_state=0)
    return d.X_train, d.y_train, d.groups_train


def _tensor_data():
    X, y, groups = make_tensor_regression(n_clients=N_CLIENTS, n_samples=30, tensor_shape=(4, 3),
                                          output_shape=None, rank=(2, 2), n_nonzero=2,
                                          random_state=0)
    return X, y, groups


def _class_data():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(N_CLIENTS), 15)
    codes = rng.integers(0, 3, groups.size)
    X = np.eye(3)[codes] + 0.4 * rng.standard_normal((groups.size, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, codes, groups


def _regression_data():
    X, y, groups = make_federated_regression(n_clients=N_CLIENTS, n_samples=15, random_state=0)
    return X, y, groups


GP = dict(inference="variational", n_inducing_global=6, n_inducing_local=4, n_rounds=5,
          random_state=0)
TENSOR = dict(tensor_shape=(4, 3), rank=(2, 2), n_rounds=5, random_state=0)
PRIVATE_TENSOR = dict(TENSOR, fit_intercept=False, epsilon=20.0, delta=0.1, tau_x=3.0, tau_e=3.0,
                      step_size=0.2)

# (id, make estimator from extra params, data, rounds that ask every client:
#  indices counted from the first round, negative from the last)
CASES = [
    ("pfedhgp-cavi", lambda **kw: PFedHGPRegressor(**GP, **kw), _gp_data, (0, -1)),
    ("pfedhgp-paper", lambda **kw: PFedHGPRegressor(**GP, optimizer="paper", local_steps=3,
                                                    **kw), _gp_data, (0, -1)),
    ("pfedgp", lambda **kw: PFedGPRegressor(n_inducing=4, n_rounds=5, optimizer="cavi",
                                            random_state=0, **kw), _gp_data, (0, -1)),
    ("pftr", lambda **kw: PersonalizedTensorRegressor(**TENSOR, **kw), _tensor_data, (0, 1)),
    # strict: one round of the private moment initializer asks every client
    ("pftr-private", lambda **kw: PersonalizedTensorRegressor(**PRIVATE_TENSOR, **kw),
     _tensor_data, (0,)),
    ("fedcommon", lambda **kw: FedCommonTensorRegressor(**TENSOR, **kw), _tensor_data, (0, 1)),
    # private: the scaling histograms and the temperature's losses ask every client
    ("dpfeddro", lambda **kw: DPFedDROClassifier(n_rounds=5, random_state=0, **kw),
     _class_data, (0, -1)),
    ("fedddro-nonprivate", lambda **kw: DPFedDROClassifier(epsilon=None, n_rounds=5,
                                                           random_state=0, **kw),
     _class_data, (-1,)),  # the calibration round of predict_proba
    ("dpfederm", lambda **kw: DPFedERMClassifier(n_rounds=5, random_state=0, **kw),
     _class_data, ()),
    ("dpfedsgd", lambda **kw: DPFedSGDClassifier(n_rounds=5, random_state=0, **kw),
     _class_data, ()),
    ("fedova", lambda **kw: FedOvADROClassifier(n_rounds=5, random_state=0, **kw),
     _class_data, ()),
    ("fedavg", lambda **kw: FedAvgRegressor(n_rounds=5, random_state=0, **kw),
     _regression_data, ()),
]
IDS = [c[0] for c in CASES]


def _answered_per_round(ledger):
    """Number of clients that replied in each training round (the set-up excluded)."""
    counts = {}
    for r in ledger.records:
        if r.round >= 0 and r.direction == "up":
            counts[r.round] = counts.get(r.round, 0) + 1
    return [counts.get(t, 0) for t in range(max(counts) + 1)]


def _predictions(model, X, groups):
    out = [model.predict(X), model.predict(X, groups=groups)]
    if hasattr(model, "predict_proba") and getattr(model, "epsilon", 0) is None:
        out.append(model.predict_proba(X, groups=groups))
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_client_fraction_asks_a_fraction_and_everyone_where_needed(case):
    _, make, data, everyone = case
    X, y, groups = data()
    model = make(client_fraction=0.5).fit(X, y, groups=groups)
    answered = _answered_per_round(model.communication_)
    full = {t % len(answered) for t in everyone}
    for t, n in enumerate(answered):
        assert n == (N_CLIENTS if t in full else N_CLIENTS // 2), (t, answered)
    for p in _predictions(model, X, groups):
        assert np.all(np.isfinite(p))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_client_sampling_is_reproducible_for_any_n_jobs(case):
    _, make, data, _ = case
    X, y, groups = data()
    a = make(client_fraction=0.5, n_jobs=1).fit(X, y, groups=groups)
    b = make(client_fraction=0.5, n_jobs=2).fit(X, y, groups=groups)
    for p, q in zip(_predictions(a, X, groups), _predictions(b, X, groups)):
        np.testing.assert_array_equal(p, q)


def _drop_client(estimator, label, call):
    """Make client ``label``'s ``call``-th step (1-based) raise ``ClientDropout``."""
    build = estimator._federated_algorithm

    def federated_algorithm(setup):
        algorithm = build(setup)
        step = algorithm.client_step
        calls = {"n": 0}

        def client_step(data, state, broadcast, rng):
            if data.label == label:
                calls["n"] += 1
                if calls["n"] == call:
                    raise ClientDropout(f"client {label} went offline")
            return step(data, state, broadcast, rng)

        algorithm.client_step = client_step
        return algorithm

    estimator._federated_algorithm = federated_algorithm
    return estimator


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_skip_policy_leaves_a_failed_client_out_of_its_round(case):
    _, make, data, _ = case
    X, y, groups = data()
    # the third step of client 1 is a training round for every estimator
    model = _drop_client(make(on_client_error="skip"), 1, 3).fit(X, y, groups=groups)
    failures = model.communication_.failures
    assert [(label, reason) for _, label, reason in failures] == [
        (1, "ClientDropout: client 1 went offline")]
    answered = _answered_per_round(model.communication_)
    assert answered[failures[0][0]] == N_CLIENTS - 1
    for p in _predictions(model, X, groups):
        assert np.all(np.isfinite(p))

    raising = _drop_client(make(on_client_error="raise"), 1, 3)
    with pytest.raises(ClientDropout, match="went offline") as info:
        raising.fit(X, y, groups=groups)
    assert any("client 1" in note for note in info.value.__notes__)
    assert not hasattr(raising, "communication_")


@pytest.mark.parametrize("make", [
    lambda **kw: DPFedDROClassifier(epsilon=None, standardize=False, n_rounds=8,
                                    random_state=0, **kw),
    lambda **kw: DPFedDROClassifier(epsilon=1.0, n_rounds=8, random_state=0, **kw),
    lambda **kw: DPFedERMClassifier(n_rounds=8, random_state=0, **kw),
    lambda **kw: FedOvADROClassifier(n_rounds=8, random_state=0, **kw),
], ids=["dro", "dro-private", "erm", "ova"])
def test_admm_server_mirrors_each_clients_dual_under_sampling(make):
    """The server's copy of every mu_g is the client's own (it moves when g answers)."""
    X, y, groups = _class_data()
    est = make(client_fraction=0.5)
    est.fit(X, y, groups=groups)  # the fitted set-up entries (classes, moments)
    result = fit_federated(est, X, np.searchsorted(est.classes_, y), groups,
                           min_samples=2).result
    server = result.server_state
    assert len(server["last"]) == N_CLIENTS
    for k, state in enumerate(result.client_states):
        if state["round"] > 1:
            np.testing.assert_array_equal(server["mu"][k], state["mu"])
            np.testing.assert_array_equal(server["last"][k], state["coef"])


def test_pfedhgp_server_sums_each_clients_latest_statistics():
    """With sampling the closed-form server sums every client's last reply."""
    X, y, groups = _gp_data()
    est = PFedHGPRegressor(**GP, client_fraction=0.5)
    est._check_params()
    result = fit_federated(est, X, y, groups).result
    replies = result.server_state["replies"]
    assert sorted(replies) == list(range(N_CLIENTS))
    n = sum(float(m["n"]) for m in replies.values())
    assert n == X.shape[0]


@pytest.mark.parametrize("make", [
    lambda **kw: DPFedDROClassifier(n_rounds=5, random_state=0, **kw),
    lambda **kw: DPFedERMClassifier(n_rounds=5, random_state=0, **kw),
    lambda **kw: DPFedSGDClassifier(n_rounds=5, random_state=0, **kw),
], ids=["dro", "erm", "sgd"])
def test_private_linear_fit_claims_no_amplification_by_sampling(make):
    X, y, groups = _class_data()
    full = make().fit(X, y, groups=groups)
    sampled = make(client_fraction=0.5).fit(X, y, groups=groups)
    assert sampled.privacy_spent_ == full.privacy_spent_


def test_private_tensor_fit_claims_no_amplification_by_sampling():
    X, y, groups = _tensor_data()
    full = PersonalizedTensorRegressor(**PRIVATE_TENSOR).fit(X, y, groups=groups)
    sampled = PersonalizedTensorRegressor(**PRIVATE_TENSOR, client_fraction=0.5).fit(
        X, y, groups=groups)
    assert sampled.privacy_spent_ == full.privacy_spent_


@pytest.mark.parametrize("param, value", [("client_fraction", 0.0), ("client_fraction", 1.5),
                                          ("on_client_error", "ignore")])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_participation_parameters_are_named(case, param, value):
    _, make, data, _ = case
    X, y, groups = data()
    with pytest.raises(ValueError, match=param):
        make(**{param: value}).fit(X, y, groups=groups)


# -- the same on Flower (in-memory grid: real Flower messages, in seconds) -----

FLOWER_CASES = [c for c in CASES if c[0] in ("pfedhgp-cavi", "pftr", "dpfeddro",
                                             "fedddro-nonprivate", "dpfedsgd")]


def _flower_grid(make, params, X, y, groups, **grid_kwargs):
    pytest.importorskip("flwr")
    from skfed.federated.flower import FlowerFederation, InMemoryGrid

    def load_data(node_config):
        rows = groups == node_config["client-id"]
        return X[rows], y[rows]

    # a site that left is reported offline at once (no grace, no round timeout); the sites
    # draw their noise from the run's seed (the test option) to compare with in-process fits
    app = FlowerFederation(lambda run_config: make(**params), load_data, round_timeout=5,
                           offline_grace=0.0, site_noise="shared")
    labels = np.unique(groups)
    return InMemoryGrid(app, [{"client-id": int(c)} for c in labels],
                        {"min-nodes": len(labels)}, **grid_kwargs)


@pytest.mark.filterwarnings("ignore:site_noise='shared'")
@pytest.mark.parametrize("case", FLOWER_CASES, ids=[c[0] for c in FLOWER_CASES])
def test_client_sampling_on_flower_equals_in_process(case):
    _, make, data, _ = case
    X, y, groups = data()
    params = dict(client_fraction=0.5)
    remote = _flower_grid(make, params, X, y, groups).run()
    local = make(**params).fit(X, y, groups=groups)
    np.testing.assert_allclose(remote.predict(X), local.predict(X), rtol=1e-10, atol=1e-10)
    assert _answered_per_round(remote.communication_) == \
        _answered_per_round(local.communication_)
    assert remote.communication_.total_bytes == local.communication_.total_bytes


@pytest.mark.filterwarnings("ignore:site_noise='shared'")
@pytest.mark.parametrize("case", FLOWER_CASES, ids=[c[0] for c in FLOWER_CASES])
def test_site_leaving_on_flower_follows_the_failure_policy(case):
    _, make, data, _ = case
    X, y, groups = data()
    # node 101 (client 1) goes offline after its second round
    skip = _flower_grid(make, dict(on_client_error="skip"), X, y, groups,
                        offline_after={101: 2})
    model = skip.run()
    failed = {label for _, label, _ in model.communication_.failures}
    assert failed == {1}
    assert np.all(np.isfinite(model.predict(X)))
    stop = _flower_grid(make, dict(on_client_error="raise"), X, y, groups,
                        offline_after={101: 2})
    with pytest.raises(ClientDropout, match="client 1"):
        stop.run()
