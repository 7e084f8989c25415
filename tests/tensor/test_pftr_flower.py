"""PersonalizedTensorRegressor on Flower (real Flower messages, in one process).

With the same ``random_state`` a Flower fit and the in-process fit give the same
shared tensor and the same communication; the personalized parts stay on the sites.
"""

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfed.datasets import make_tensor_regression  # noqa: E402
from skfed.federated.flower import FlowerFederation, InMemoryGrid  # noqa: E402
from skfed.tensor import (  # noqa: E402
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
)

X, Y, GROUPS = make_tensor_regression(
    n_clients=3, n_samples=[40, 60, 50], tensor_shape=(3, 4), output_shape=(2, 2),
    rank=(2, 2, 2, 2), n_nonzero=3, random_state=0,
)
BASE = dict(tensor_shape=(3, 4), output_shape=(2, 2), step_size=0.2, n_rounds=4,
            init_max_iter=60, random_state=0)


def load_data(node_config):
    rows = GROUPS == node_config["client-id"]
    return X[rows], Y[rows]


def flower_fit(make, load=load_data, **kwargs):
    app = FlowerFederation(lambda run_config: make(), load, **kwargs)
    grid = InMemoryGrid(app, [{"client-id": k} for k in range(3)], {"min-nodes": 3})
    return grid.run()


def assert_same_communication(a, b):
    for name in ("bytes_up", "bytes_down", "bytes_setup", "n_rounds", "n_messages"):
        assert getattr(a, name) == getattr(b, name), name
    np.testing.assert_array_equal(a.bytes_up_per_round, b.bytes_up_per_round)
    np.testing.assert_array_equal(a.bytes_down_per_round, b.bytes_down_per_round)


@pytest.mark.parametrize("params", [
    {"rank": "auto"},  # the initializer and the rank vote run
    {"rank": (2, 2, 2, 2)},
    {"rank": (2, 2, 2, 2), "init": np.zeros((2, 2, 3, 4)) + 0.1},  # no initializer
], ids=["auto", "explicit", "public-init"])
def test_flower_fit_equals_in_process_fit(params):
    local = PersonalizedTensorRegressor(**BASE, **params).fit(X, Y, groups=GROUPS)
    remote = flower_fit(lambda: PersonalizedTensorRegressor(**BASE, **params))
    np.testing.assert_allclose(remote.shared_coef_, local.shared_coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.core_, local.core_, rtol=0, atol=1e-8)
    for a, b in zip(remote.factors_, local.factors_, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-8)
    assert remote.rank_ == local.rank_
    assert remote.local_ranks_ == local.local_ranks_
    assert remote.init_client_ == local.init_client_
    assert_same_communication(remote.communication_, local.communication_)
    assert remote.communication_.wire_bytes["up"] > 0
    np.testing.assert_allclose(remote.predict(X[:5]), local.predict(X[:5]), atol=1e-8)


def test_private_flower_fit_draws_the_same_noise():
    params = dict(BASE, rank=(2, 2, 2, 2), epsilon=20.0, delta=0.1, fit_intercept=False,
                  tau_x=4.0, tau_e=2.0)  # strict: the noisy moment starts A_0
    local = PersonalizedTensorRegressor(**params).fit(X, Y, groups=GROUPS)
    # the test option: the sites draw from the run's seed, as in-process
    with pytest.warns(UserWarning, match="site_noise='shared'"):
        remote = flower_fit(lambda: PersonalizedTensorRegressor(**params), site_noise="shared")
    assert np.all(local.noise_std_ > 0)
    np.testing.assert_array_equal(remote.shared_coef_, local.shared_coef_)
    np.testing.assert_array_equal(remote.grad_norm_, local.grad_norm_)
    assert remote.privacy_spent_.pop("against_coordinator") is False
    assert remote.privacy_spent_ == local.privacy_spent_
    assert_same_communication(remote.communication_, local.communication_)
    # by default each site's noise is its own secret: another release, the same guarantee
    secret = flower_fit(lambda: PersonalizedTensorRegressor(**params))
    assert not np.allclose(secret.shared_coef_, local.shared_coef_)
    assert secret.privacy_spent_.pop("against_coordinator") is True
    assert secret.privacy_spent_ == local.privacy_spent_
    assert_same_communication(secret.communication_, local.communication_)


def test_personalized_parts_stay_on_the_sites():
    remote = flower_fit(lambda: PersonalizedTensorRegressor(**BASE, rank=2))
    for name in ("deviations_", "coef_", "penalty_", "noise_std_", "tau_x_", "tau_e_",
                 "intercept_"):
        assert getattr(remote, name) is None, name
    assert remote.clients_.tolist() == [0, 1, 2] and remote.coef_shape_ == (2, 2, 3, 4)
    # the population intercept comes from the set-up's pooled means, also on Flower
    shared = X[:4] @ remote.shared_coef_.reshape(4, 12).T + remote.shared_intercept_.ravel()
    np.testing.assert_allclose(remote.predict(X[:4]), shared)
    np.testing.assert_allclose(remote.predict(X[:4], groups=[9] * 4), shared)  # unseen
    with pytest.raises(ValueError, match="distributed engine.*groups=None"):
        remote.predict(X[:4], groups=[1] * 4)
    common = flower_fit(lambda: FedCommonTensorRegressor(**BASE, rank=2))
    np.testing.assert_allclose(common.predict(X[:4], groups=[1] * 4),
                               X[:4] @ common.shared_coef_.reshape(4, 12).T
                               + common.shared_intercept_.ravel())


def test_cv_and_bad_site_data_are_named():
    with pytest.raises(ValueError, match=r"cv=2 .*in-process.*\(cv\)"):
        flower_fit(lambda: PersonalizedTensorRegressor(**BASE, cv=2))
    # the coordinator learns which check failed, not the site's values (its log has them)
    with pytest.raises(RuntimeError, match=r"site 0: validating its rows failed \(ValueError"):
        flower_fit(lambda: PersonalizedTensorRegressor(**{**BASE, "tensor_shape": (5, 5)}))

    def one_site_nd(node_config):
        Xk, Yk = load_data(node_config)
        return (Xk.reshape(-1, 4, 3) if node_config["client-id"] == 1 else Xk), Yk

    with pytest.raises(ValueError, match=r"disagree on tensor_shape.*\(tensor_shape\)"):
        flower_fit(lambda: PersonalizedTensorRegressor(
            **{**BASE, "tensor_shape": None, "rank": 2}), one_site_nd)


def test_fed_avg_baseline_on_flower_and_local_fits_stay_on_the_sites():
    params = dict(tensor_shape=(3, 4), output_shape=(2, 2), rank=2, n_iter=10,
                  init_max_iter=30)
    local = FedAvgTensorRegressor(**params).fit(X, Y, groups=GROUPS)
    remote = flower_fit(lambda: FedAvgTensorRegressor(**params))
    np.testing.assert_allclose(remote.average_coef_, local.average_coef_, atol=1e-8)
    np.testing.assert_allclose(remote.predict(X[:3], groups=[0] * 3),
                               local.predict(X[:3], groups=[0] * 3), atol=1e-8)
    assert remote.coef_ is None and remote.ranks_ is None
    assert_same_communication(remote.communication_, local.communication_)
    alone = flower_fit(lambda: LocalTwoStageTensorRegressor(**params))
    np.testing.assert_allclose(alone.client_weights_, [40 / 150, 60 / 150, 50 / 150])
    with pytest.raises(ValueError, match="distributed engine"):
        alone.predict(X[:3])


def test_site_model_gives_each_site_its_personalized_tensor(tmp_path):
    """A site's kept state + the released fit: the in-process personalized prediction."""
    from skfed.federated.flower import site_model

    params = dict(BASE, rank=(2, 2, 2, 2), epsilon=20.0, delta=0.1, fit_intercept=False,
                  tau_x=4.0, tau_e=2.0)  # strict: the noisy moment starts A_0
    configs = [{"client-id": k, "model-path": str(tmp_path / f"site{k}.pkl")} for k in range(3)]
    app = FlowerFederation(lambda run_config: PersonalizedTensorRegressor(**params), load_data,
                           site_noise="shared")  # to compare with the in-process fit
    with pytest.warns(UserWarning, match="site_noise='shared'"):
        remote = InMemoryGrid(app, configs, {"min-nodes": 3}).run()
    local = PersonalizedTensorRegressor(**params).fit(X, Y, groups=GROUPS)
    for k in range(3):
        mine = site_model(remote, tmp_path / f"site{k}.pkl")
        rows = X[GROUPS == k]
        np.testing.assert_allclose(mine.predict(rows, groups=[k] * len(rows)),
                                   local.predict(rows, groups=[k] * len(rows)), atol=1e-8)
        np.testing.assert_allclose(mine.deviations_[0], local.deviations_[k], atol=1e-8)
        np.testing.assert_array_equal(mine.noise_std_[0], local.noise_std_[k])


@pytest.mark.parametrize("centring", ["means", "pairs"])
def test_flower_private_intercept_equals_in_process_fit(centring):
    # a private fit_intercept=True on raw data: the noisy sums (or pair differences) run on
    # the sites, whose later releases see rows centred on their own released means
    Xr, Yr = X + 3.0, Y - 2.0

    def make():
        return PersonalizedTensorRegressor(
            **{**BASE, "rank": (2, 2, 2, 2)}, epsilon=20.0, delta=0.1, tau_x=6.0, tau_e=3.0,
            intercept_tau_x=15.0, intercept_tau_y=10.0, private_centring=centring)

    def load(node_config):
        rows = GROUPS == node_config["client-id"]
        return Xr[rows], Yr[rows]

    local = make().fit(Xr, Yr, groups=GROUPS)
    with pytest.warns(UserWarning, match="site_noise='shared'"):  # the in-process noise
        remote = flower_fit(make, load=load, site_noise="shared")
    np.testing.assert_allclose(remote.shared_coef_, local.shared_coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.shared_intercept_, local.shared_intercept_, rtol=0,
                               atol=1e-8)
    assert remote.privacy_spent_["releases"] == local.privacy_spent_["releases"]
    assert_same_communication(remote.communication_, local.communication_)
