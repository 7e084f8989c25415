"""FlowerFederation's logic on an in-memory Flower grid: fast and deterministic.

The real processes (SuperLink, SuperNodes) are tested in ``test_flower.py``;
here the ``ServerApp`` and ``ClientApp`` exchange real Flower ``Message``
objects through a grid that calls the ``ClientApp`` directly, so the set-up
exchange, the failure policy and the error messages can be checked in
seconds, including a site that goes offline in the middle of training.
"""

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfed.baselines import FedAvgRegressor  # noqa: E402
from skfed.datasets import make_federated_regression  # noqa: E402
from skfed.federated import ClientDropout  # noqa: E402
from skfed.federated.flower import FlowerFederation, InMemoryGrid  # noqa: E402
from skfed.linear_model import DPFedDROClassifier  # noqa: E402


def _fedavg(run_config):
    return FedAvgRegressor(n_rounds=4, fine_tune_epochs=1, random_state=0,
                           on_client_error=run_config.get("policy", "raise"))


@pytest.fixture
def regression_sites():
    X, y, groups = make_federated_regression(n_clients=3, n_samples=[20, 25, 30],
                                             random_state=0)
    data = {k: (X[groups == k], y[groups == k]) for k in range(3)}
    return X, y, groups, data


def _grid(make_estimator, data, run_config=None, **kwargs):
    def load_data(node_config):
        return data[node_config["client-id"]]

    federation = FlowerFederation(make_estimator, load_data, round_timeout=5,
                                  offline_grace=kwargs.pop("offline_grace", 0.0),
                                  site_noise=kwargs.pop("site_noise", "secret"),
                                  sites=kwargs.pop("sites", None))
    configs = [{"client-id": k, **kwargs.pop("node_config", {})} for k in sorted(data)]
    return InMemoryGrid(federation, configs, {"min-nodes": len(data), **(run_config or {})},
                        **kwargs)


def test_in_memory_grid_equals_in_process_fit(regression_sites):
    X, y, groups, data = regression_sites
    remote = _grid(_fedavg, data).run()
    local = _fedavg({}).fit(X, y, groups=groups)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=0, atol=1e-12)
    a, b = remote.communication_, local.communication_
    assert (a.bytes_up, a.bytes_down, a.bytes_setup) == (b.bytes_up, b.bytes_down, b.bytes_setup)
    # the .npy encoding adds a header per array: what crossed exceeds the payload a little
    assert b.wire_bytes is None and len(a.round_seconds) == len(b.round_seconds) == 4
    assert a.wire_bytes["up"] > a.bytes_up and a.wire_bytes["down"] > a.bytes_down
    n_arrays = sum(len(r.names) for r in a.records)
    assert a.wire_bytes["up"] + a.wire_bytes["down"] < a.total_bytes + 200 * n_arrays


def test_set_up_summary_reaches_each_site_once_with_its_first_message(regression_sites):
    """No separate start-up exchange: a site not sampled in round 0 starts later."""
    X, y, groups, data = regression_sites

    def make(run_config):
        return FedAvgRegressor(n_rounds=4, fine_tune_epochs=1, client_fraction=0.5,
                               random_state=3)

    grid = _grid(make, data)
    sent = []
    push = grid.push_messages

    def spy(messages):
        messages = list(messages)
        sent.extend((m.metadata.dst_node_id, m.metadata.message_type,
                     "setup" in m.content.array_records) for m in messages)
        return push(messages)

    grid.push_messages = spy
    remote = grid.run()
    local = make({}).fit(X, y, groups=groups)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=0, atol=1e-12)
    assert remote.communication_.total_bytes == local.communication_.total_bytes
    assert {t for _, t, _ in sent} == {"query.setup", "train", "train.finalize"}
    for node in grid.contexts:
        carried = [has for n, t, has in sent if n == node and t != "query.setup"]
        assert carried[0] and not any(carried[1:])  # the first message only
    # with 2 of 3 sites per round, some site first hears of the run after round 0
    first_round = {n for n, t, has in sent[3:5]}
    assert len(first_round) == 2 and set(grid.contexts) - first_round


def test_dp_fed_dro_with_text_labels_equals_in_process_fit():
    rng = np.random.default_rng(1)
    groups = np.repeat([0, 1, 2], [15, 20, 25])
    codes = rng.integers(0, 3, groups.size)
    X = np.eye(3)[codes] + 0.3 * rng.standard_normal((groups.size, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.array(["a", "b", "c"])[codes]
    y[groups == 0] = np.where(y[groups == 0] == "c", "a", y[groups == 0])  # site 0 lacks "c"
    data = {k: (X[groups == k], y[groups == k]) for k in range(3)}

    def make(run_config):
        return DPFedDROClassifier(epsilon=0.5, n_rounds=3, fit_intercept=True,
                                  random_state=0)

    # the sites draw their noise from the run's seed only with the test option
    with pytest.warns(UserWarning, match=r"not against the\s+coordinator"):
        remote = _grid(make, data, site_noise="shared").run()
    local = make({}).fit(X, y, groups=groups)
    assert remote.classes_.tolist() == ["a", "b", "c"]
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=0, atol=1e-12)
    assert remote.privacy_spent_.pop("against_coordinator") is False
    assert remote.privacy_spent_ == local.privacy_spent_
    assert remote.communication_.total_bytes == local.communication_.total_bytes


def test_site_that_leaves_is_skipped_under_skip_policy(regression_sites):
    *_, data = regression_sites
    grid = _grid(_fedavg, data, {"policy": "skip"}, offline_after={102: 2})
    model = grid.run()
    failed = sorted((rnd, label) for rnd, label, _ in model.communication_.failures)
    assert failed == [(2, 2), (3, 2), (4, 2)]  # rounds 2, 3 and the final broadcast
    assert all("client 2" in reason and "offline" in reason
               for *_, reason in model.communication_.failures)
    assert np.all(np.isfinite(model.coef_))


def test_site_offline_only_briefly_is_waited_for(regression_sites):
    """A late heartbeat (node listed offline for less than the grace) loses nothing."""
    *_, data = regression_sites
    grid = _grid(_fedavg, data, offline_grace=0.6)
    listed = grid.get_node_ids
    calls = {"n": 0}

    def flaky():  # node 101 missing from every other listing during the first rounds
        calls["n"] += 1
        nodes = listed()
        return [n for n in nodes if n != 101] if calls["n"] % 2 and calls["n"] < 20 else nodes

    grid.get_node_ids = flaky
    model = grid.run()
    assert model.communication_.failures == []


def test_site_that_leaves_stops_the_run_under_raise_policy(regression_sites):
    *_, data = regression_sites
    grid = _grid(_fedavg, data, {"policy": "raise"}, offline_after={101: 1})
    with pytest.raises(ClientDropout, match="client 1"):
        grid.run()


def test_site_whose_loader_fails_is_named(regression_sites):
    *_, data = regression_sites
    data = dict(data)
    data[1] = (np.full((5, 3), np.nan), np.zeros(5))
    with pytest.raises(RuntimeError, match=r"site 1: validating its rows failed \(ValueError"):
        _grid(_fedavg, data).run()


def test_site_with_other_feature_count_is_named(regression_sites):
    *_, data = regression_sites
    data = dict(data)
    X1, y1 = data[1]
    data[1] = (X1[:, :-1], y1)
    with pytest.raises(ValueError, match=r"disagree on the number of features.*1: 4"):
        _grid(_fedavg, data).run()


def test_estimator_without_the_contract_is_refused():
    from sklearn.linear_model import Ridge

    with pytest.raises(TypeError, match="Ridge does not support federation"):
        FlowerFederation(lambda config: Ridge(), lambda config: None).check()


def test_site_keeps_its_personalized_model_on_the_site(regression_sites, tmp_path):
    """``site_model`` gives a site the personalized prediction of an in-process fit."""
    from skfed.federated.flower import site_model

    X, y, groups, data = regression_sites

    def load_data(node_config):
        return data[node_config["client-id"]]

    configs = [{"client-id": k, "model-path": str(tmp_path / f"site{k}.pkl")} for k in range(3)]
    grid = InMemoryGrid(FlowerFederation(_fedavg, load_data, round_timeout=5), configs,
                        {"min-nodes": 3})
    remote = grid.run()
    local = _fedavg({}).fit(X, y, groups=groups)
    for k in range(3):
        site = site_model(remote, tmp_path / f"site{k}.pkl")
        rows = X[groups == k]
        np.testing.assert_allclose(site.predict(rows, groups=np.full(len(rows), k)),
                                   local.predict(rows, groups=np.full(len(rows), k)),
                                   rtol=0, atol=1e-12)
        assert site.clients_.tolist() == [k]
    # the personalized models differ from the global one the server holds, which has none
    assert not np.allclose(site.client_coefs_[0], remote.coef_)
    assert remote.client_coefs_ is None
    with pytest.raises(ValueError, match="lives on its site"):
        remote.predict(X[:3], groups=[1, 1, 1])
    np.testing.assert_allclose(remote.predict(X[:3]), local.predict(X[:3]), atol=1e-12)
    with pytest.raises(ValueError, match="not a client"):
        site_model(_fedavg({}).fit(X[groups < 2], y[groups < 2], groups=groups[groups < 2]),
                   tmp_path / "site2.pkl")


def test_sites_score_their_personalized_models_on_held_out_rows(tmp_path):
    """query.evaluate: only a score and a row count come back from each site."""
    import json

    X, y, groups = make_federated_regression(n_clients=3, n_samples=[30, 35, 40],
                                             random_state=1)
    test = {k: (X[groups == k][-10:], y[groups == k][-10:]) for k in range(3)}
    train = {k: (X[groups == k][:-10], y[groups == k][:-10]) for k in range(3)}

    federation = FlowerFederation(_fedavg, lambda cfg: train[cfg["client-id"]], round_timeout=5,
                                  load_test_data=lambda cfg, run_cfg: test[cfg["client-id"]])
    grid = InMemoryGrid(federation, [{"client-id": k} for k in range(3)],
                        {"min-nodes": 3, "scores-output": str(tmp_path / "scores.json")})
    remote = grid.run()
    local = _fedavg({}).fit(np.vstack([train[k][0] for k in range(3)]),
                            np.concatenate([train[k][1] for k in range(3)]),
                            groups=np.repeat([0, 1, 2], [20, 25, 30]))
    for k in range(3):
        score, n = federation.site_scores_[k]
        assert n == 10
        assert score == pytest.approx(local.score(*test[k], groups=[k] * 10), abs=1e-10)
    assert json.loads((tmp_path / "scores.json").read_text())["2"][1] == 10
    # the fit's ledger is that of the training alone
    assert remote.communication_.total_bytes == local.communication_.total_bytes


def test_centralized_reference_is_refused():
    """CentralizedDROClassifier shares the hooks but pools rows: not a federated estimator."""
    from skfed.linear_model import CentralizedDROClassifier

    with pytest.raises(TypeError, match="does not support federation"):
        FlowerFederation(lambda run_config: CentralizedDROClassifier(), lambda cfg: None).check()
