"""PFedHGPRegressor on a Flower federation (in-memory grid, real Flower messages).

The Flower fit must equal the in-process fit with the same ``random_state``:
the global model, the ELBO history, the population prediction and the
ledger. The personalized parts stay on the sites.
"""

import functools

import numpy as np
import pytest

pytest.importorskip("flwr")

from sklearn.base import clone  # noqa: E402

from skfed import PFedHGPRegressor  # noqa: E402
from skfed.datasets import make_hierarchical_gp  # noqa: E402
from skfed.federated import Ledger  # noqa: E402
from skfed.federated.flower import FlowerFederation, InMemoryGrid  # noqa: E402
from skfed.gaussian_process import PFedGPRegressor  # noqa: E402

SMALL = dict(inference="variational",
             n_inducing_global=6, n_inducing_local=4, n_rounds=3, local_steps=3, random_state=0,
             normalize_X=False)
GLOBAL_ATTRS = ("phi_", "noise_variance_", "lengthscale_global_", "variance_global_",
                "inducing_global_", "loadings_global_", "y_mean_", "y_std_", "elbo_")
LEDGER_ATTRS = ("bytes_up", "bytes_down", "bytes_setup", "bytes_up_per_round",
                "bytes_down_per_round", "n_messages")


@pytest.fixture(scope="module")
def scalar_data():
    return make_hierarchical_gp(n_clients=3, n_outputs=None, n_train=20, n_test=10,
                                local_lengthscales=(1.0,), local_scales=(0.5,), noise=0.1,
                                random_state=0)


@pytest.fixture(scope="module")
def multi_data():
    return make_hierarchical_gp(n_clients=3, n_outputs=3, n_train=20, n_test=10,
                                local_lengthscales=(1.0, 1.5), local_scales=(0.5, 0.4),
                                noise=0.1, random_state=0)


def flower_fit(estimator, X, y, groups):
    """Fit a clone of ``estimator`` with one Flower SuperNode per client."""
    def load_data(node_config):
        rows = groups == node_config["client-id"]
        return X[rows], y[rows]

    app = FlowerFederation(lambda run_config: estimator.__class__(**estimator.get_params()),
                           load_data, round_timeout=60)
    labels = np.unique(groups)
    grid = InMemoryGrid(app, [{"client-id": int(c)} for c in labels],
                        {"min-nodes": len(labels)})
    return grid.run()


def assert_same_fit(remote, local, X_test):
    for name in GLOBAL_ATTRS:
        a, b = getattr(remote, name), getattr(local, name)
        if b is None:
            assert a is None, name
        else:
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=name)
    np.testing.assert_array_equal(remote.clients_, local.clients_)
    mean_r, std_r = remote.predict(X_test, return_std=True)
    mean_l, std_l = local.predict(X_test, return_std=True)
    np.testing.assert_allclose(mean_r, mean_l, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(std_r, std_l, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(remote.sample_y(X_test[:4], n_samples=3),
                               local.sample_y(X_test[:4], n_samples=3), rtol=1e-6, atol=1e-8)
    for name in LEDGER_ATTRS:
        np.testing.assert_array_equal(getattr(remote.communication_, name),
                                      getattr(local.communication_, name), err_msg=name)
    assert remote.communication_.wire_bytes is not None


@pytest.mark.parametrize("case", [
    ("scalar", dict(optimizer="paper", ard=True, normalize_y=True, normalize_X=True)),
    ("scalar", dict(optimizer="cavi")),
    ("multi", dict(optimizer="cavi", normalize_y=True, normalize_X=True)),
    ("multi", dict(optimizer="paper")),
])
def test_flower_fit_equals_in_process_fit(case, scalar_data, multi_data):
    kind, params = case
    d = scalar_data if kind == "scalar" else multi_data
    est = PFedHGPRegressor(**{**SMALL, **params})
    local = est.__class__(**est.get_params()).fit(d.X_train, d.y_train, groups=d.groups_train)
    remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    assert_same_fit(remote, local, d.X_test)
    # the personalized parts stay on the sites
    for name in ("lengthscales_local_", "variances_local_", "inducing_local_",
                 "loadings_deviation_", "loadings_local_"):
        assert getattr(remote, name) is None, name
    assert local.lengthscales_local_ is not None
    with pytest.raises(ValueError, match="lives on its site"):
        remote.predict(d.X_test[:2], groups=d.groups_test[:2])
    # an unseen client gets the population prediction
    np.testing.assert_allclose(remote.predict(d.X_test[:2], groups=[99, 99]),
                               local.predict(d.X_test[:2]))


def test_population_local_none_sends_less(scalar_data, multi_data):
    for d in (scalar_data, multi_data):
        X, y, g = d.X_train, d.y_train, d.groups_train
        median = PFedHGPRegressor(optimizer="cavi", **SMALL).fit(X, y, groups=g)
        est = PFedHGPRegressor(optimizer="cavi", population_local="none", **SMALL)
        none = est.__class__(**est.get_params()).fit(X, y, groups=g)
        remote = flower_fit(est, X, y, g)
        assert_same_fit(remote, none, d.X_test)
        # only the last round's messages differ; the global model does not
        up_m = median.communication_.bytes_up_per_round
        up_n = none.communication_.bytes_up_per_round
        np.testing.assert_array_equal(up_m[:-1], up_n[:-1])
        assert up_m[-1] > up_n[-1]
        np.testing.assert_array_equal(median.elbo_, none.elbo_)
        # seen clients predict the same; a new client's prediction drops the local term
        np.testing.assert_array_equal(median.predict(d.X_test, groups=d.groups_test),
                                      none.predict(d.X_test, groups=d.groups_test))
        _, sd_m = median.predict(d.X_test, return_std=True)
        _, sd_n = none.predict(d.X_test, return_std=True)
        assert np.all(sd_n < sd_m)


def test_pfedgp_on_flower(scalar_data):
    d = scalar_data
    est = PFedGPRegressor(n_inducing=4, optimizer="cavi", n_rounds=2, random_state=0)
    local = est.__class__(**est.get_params()).fit(d.X_train, d.y_train, groups=d.groups_train)
    remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    assert_same_fit(remote, local, d.X_test)


def test_small_sites_get_fewer_local_inducing_inputs(scalar_data):
    d = scalar_data
    est = PFedHGPRegressor(optimizer="cavi", **{**SMALL, "n_inducing_local": 30})
    with pytest.warns(UserWarning, match="n_inducing_local=30 is more than the 20 distinct"):
        remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    local = est.__class__(**est.get_params()).fit(d.X_train, d.y_train, groups=d.groups_train)
    assert_same_fit(remote, local, d.X_test)
    assert all(Z.shape == (20, 1) for Z in local.inducing_local_)


def test_raw_rows_never_cross_in_process(monkeypatch, multi_data):
    """No message of the in-process fit holds a target value or an input row.

    (``tests/test_ledger.py`` checks every number against every raw value,
    with one- and two-row clients.)
    """
    import skfed.federated._fit as fit_module

    monkeypatch.setattr(fit_module, "Ledger", functools.partial(Ledger, keep_payloads=True))
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (60, 2))
    groups = np.repeat([0, 1, 2], 20)
    for y in (np.sin(X[:, 0]) + 0.1 * rng.normal(size=60),
              np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 0] * 0.1])):
        for opt in ("paper", "cavi"):
            m = PFedHGPRegressor(optimizer=opt, ard=True, **SMALL).fit(X, y, groups=groups)
            ledger = m.communication_
            assert len(ledger.payloads) == len(ledger.records) > 0
            for record, payload in zip(ledger.records, ledger.payloads):
                rows = groups == record.client
                for name, arr in payload.items():
                    values = np.asarray(arr, dtype=float)
                    assert not np.isin(values, y).any(), (record.round, name)
                    assert name not in ("x_min", "x_max")
                    assert not np.isin(values, X[rows]).any(), (record.round, name)
                    flat = values.reshape(-1, X.shape[1]) if values.size % 2 == 0 else values
                    if flat.ndim == 2:
                        hits = (flat[:, None, :] == X[None, :, :]).all(-1)
                        assert not hits.any(), (record.round, name)


@pytest.mark.parametrize("kind", ["scalar", "multi"])
def test_site_model_predicts_like_the_in_process_fit(kind, scalar_data, multi_data, tmp_path):
    """``site_model``: a site's kept local state + the released fit = its personalized model."""
    from skfed.federated.flower import site_model

    d = scalar_data if kind == "scalar" else multi_data
    X, y, groups = d.X_train, d.y_train, d.groups_train
    est = PFedHGPRegressor(optimizer="cavi", **SMALL)

    def load_data(node_config):
        rows = groups == node_config["client-id"]
        return X[rows], y[rows]

    labels = np.unique(groups)
    configs = [{"client-id": int(c), "model-path": str(tmp_path / f"site{c}.pkl")}
               for c in labels]
    app = FlowerFederation(lambda run_config: clone(est), load_data, round_timeout=60)
    remote = InMemoryGrid(app, configs, {"min-nodes": len(labels)}).run()
    local = clone(est).fit(X, y, groups=groups)
    X_test = d.X_test[:6]
    for c in labels:
        mine = site_model(remote, tmp_path / f"site{c}.pkl")
        g = np.full(len(X_test), c)
        for a, b in zip(mine.predict(X_test, groups=g, return_std=True),
                        local.predict(X_test, groups=g, return_std=True)):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
        k = int(np.searchsorted(labels, c))
        np.testing.assert_allclose(mine.lengthscales_local_[0], local.lengthscales_local_[k])


def test_default_collapsed_fit_on_flower_equals_in_process(scalar_data):
    # the default for 1-D y (inference="auto": the collapsed fit), two Flower rounds per
    # likelihood evaluation: the same optimum and predictions as in process
    d = scalar_data
    est = PFedHGPRegressor(components=("global", "deviation"), n_inducing_global=4,
                           random_state=0)
    local = clone(est).fit(d.X_train, d.y_train, groups=d.groups_train)
    remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    assert local.inference_ == remote.inference_ == "collapsed"
    np.testing.assert_allclose(remote.log_marginal_likelihood_value_,
                               local.log_marginal_likelihood_value_, rtol=1e-10)
    for name in ("lengthscale_global_", "variance_global_", "noise_variance_", "mean_coef_"):
        np.testing.assert_allclose(getattr(remote, name), getattr(local, name), rtol=1e-6,
                                   err_msg=name)
    # the optimizer's stopping point, not the model, limits the agreement: here phi and
    # var_g trade along a near-flat ridge (phi * var_g is what the data fix), where the
    # engines' rounding moves the last step by about 1e-7 of the hyperparameters
    mean_r, std_r = remote.predict(d.X_test, return_std=True)
    mean_l, std_l = local.predict(d.X_test, return_std=True)
    np.testing.assert_allclose(mean_r, mean_l, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(std_r, std_l, rtol=1e-6, atol=1e-7)
    for name in LEDGER_ATTRS:
        np.testing.assert_array_equal(getattr(remote.communication_, name),
                                      getattr(local.communication_, name), err_msg=name)


def test_default_collapsed_fit_on_flower_is_the_in_process_fit_bit_for_bit():
    # the collapsed fit's optimizer amplifies any last-bit difference into another path:
    # the sites' arithmetic must match exactly (C-ordered messages, one BLAS thread on
    # every engine), here with two BLAS threads around, as on a 2-core site
    from threadpoolctl import threadpool_limits

    d = make_hierarchical_gp(n_clients=3, n_outputs=None, n_train=40, n_test=10,
                             random_state=1)
    est = PFedHGPRegressor(random_state=0)
    with threadpool_limits(limits=2, user_api="blas"):
        local = clone(est).fit(d.X_train, d.y_train, groups=d.groups_train)
        remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    assert remote.inference_ == local.inference_ == "collapsed"
    assert remote.n_iter_ == local.n_iter_
    assert remote.log_marginal_likelihood_value_ == local.log_marginal_likelihood_value_
    np.testing.assert_array_equal(remote.predict(d.X_test, return_std=True),
                                  local.predict(d.X_test, return_std=True))


def test_variational_fit_on_flower_is_the_in_process_fit_bit_for_bit():
    # the variational steps declare one BLAS thread (FederatedAlgorithm.blas_threads),
    # which every engine applies: the same bits with two BLAS threads around
    from threadpoolctl import threadpool_limits

    d = make_hierarchical_gp(n_clients=3, n_outputs=None, n_train=30, n_test=10,
                             random_state=2)
    est = PFedHGPRegressor(inference="variational", n_rounds=4, n_inducing_local=5,
                           random_state=0)
    with threadpool_limits(limits=2, user_api="blas"):
        local = clone(est).fit(d.X_train, d.y_train, groups=d.groups_train)
        remote = flower_fit(est, d.X_train, d.y_train, d.groups_train)
    np.testing.assert_array_equal(remote.predict(d.X_test, return_std=True),
                                  local.predict(d.X_test, return_std=True))
