"""PFedHGPRegressor with multi-output y (ILMM): training, prediction, federation, errors."""

import numpy as np
import pytest

from skfed import PFedHGPRegressor
from skfed.datasets import make_hierarchical_gp
from skfed.gaussian_process import PFedGPRegressor

# the old defaults (raw inputs and targets): the pinned behaviour of these tests
SMALL = dict(inference="variational",
             n_inducing_global=8, n_inducing_local=5, random_state=0, normalize_y=False,
             normalize_X=False)


@pytest.fixture(scope="module")
def data():
    return make_hierarchical_gp(n_clients=3, n_outputs=3, n_train=25, n_test=15,
                                local_lengthscales=(1.0, 1.5), local_scales=(0.5, 0.4),
                                noise=0.1, random_state=0)


@pytest.fixture(scope="module")
def fitted(data):
    return PFedHGPRegressor(optimizer="cavi", n_rounds=8, **SMALL).fit(
        data.X_train, data.y_train, groups=data.groups_train)


def test_shapes_and_learned_loadings(fitted, data):
    T, Q = 3, 3
    assert fitted.n_outputs_ == Q
    assert fitted.loadings_global_.shape == (Q, 2)
    assert fitted.loadings_deviation_.shape == (T, Q, 2)
    assert fitted.loadings_local_.shape == (T, Q, 2)
    assert fitted.lengthscale_global_.shape == (2, 1)
    assert fitted.lengthscales_local_.shape == (T, 2, 1)
    assert fitted.noise_variance_.shape == (Q,)
    assert np.all(np.isfinite(fitted.elbo_)) and fitted.elbo_[-1] > fitted.elbo_[0]
    mean = fitted.predict(data.X_test, groups=data.groups_test)
    assert mean.shape == data.y_test.shape
    assert fitted.score(data.X_test, data.y_test, groups=data.groups_test) > 0.7


def test_predictive_covariance_per_point(fitted, data):
    Xt, gt = data.X_test, data.groups_test
    mean, std = fitted.predict(Xt, groups=gt, return_std=True)
    mean2, cov = fitted.predict(Xt, groups=gt, return_cov=True)
    np.testing.assert_allclose(mean, mean2)
    assert cov.shape == (len(Xt), 3, 3)
    np.testing.assert_allclose(cov, np.swapaxes(cov, 1, 2))
    np.testing.assert_allclose(np.sqrt(np.diagonal(cov, axis1=1, axis2=2)), std, rtol=1e-10)
    # at least the noise sigma^2 I_Q, and the outputs are correlated (shared latents)
    eig = np.linalg.eigvalsh(cov)
    assert np.all(eig >= fitted.noise_variance_[0] * (1 - 1e-8))
    corr = cov[:, 0, 1] / np.sqrt(cov[:, 0, 0] * cov[:, 1, 1])
    assert np.abs(corr).max() > 0.05
    with pytest.raises(RuntimeError, match="At most one"):
        fitted.predict(Xt, groups=gt, return_std=True, return_cov=True)


def test_predictive_covariance_matches_eqs_38_39(fitted, data):
    """The Q x Q covariance rebuilt from the stored blocks by dense unwhitened algebra."""
    from skfed.gaussian_process._covariance import kernel_matrix

    x = data.X_test[3:4]
    k = 1
    g, loc, cfg = fitted._global, fitted._locals[k], fitted._cfg
    s2 = float(np.log1p(np.exp(g["noise"])))
    phi = fitted.phi_

    def latent(Z, ls, m, L, var, kappa):
        Kzz = kernel_matrix(Z, Z, ls, var, 0) + fitted.jitter_ * np.eye(len(Z))
        kxz = kernel_matrix(x, Z, ls, var, 0)[0]
        Lk = np.linalg.cholesky(Kzz)
        a = np.linalg.solve(Kzz, kxz)
        S = Lk @ (L @ L.T) @ Lk.T
        res = var - kxz @ a
        return a @ (Lk @ m), a @ S @ a + kappa * res

    mean, cov = np.zeros(3), s2 * np.eye(3)
    for r in range(2):
        ls_g = np.log1p(np.exp(g["ls_g"][r]))
        for m, L, B, kappa in ((g["mg"][r], g["Lg"][r], g["Bg"][:, r], 1.0),
                               (loc["md"][r], loc["Ld"][r], loc["Bd"][:, r], phi)):
            mu, v = latent(g["Zg"], ls_g, m, L, cfg.variance_global, kappa)
            mean += mu * B
            cov += v * np.outer(B, B)
        mu, v = latent(loc["Zl"], np.log1p(np.exp(loc["ls_l"][r])), loc["mu"][r], loc["Lu"][r],
                       cfg.variance_local, 1.0)
        mean += mu * loc["Bl"][:, r]
        cov += v * np.outer(loc["Bl"][:, r], loc["Bl"][:, r])
    m_hat, c_hat = fitted.predict(x, groups=[k], return_cov=True)
    # normalize_y=False: the GP part adds to the (linear) prior mean in units of y
    prior = fitted.y_mean_ + (x[0] - fitted.x_mean_) @ fitted.mean_coef_
    np.testing.assert_allclose(m_hat[0], mean + prior, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(c_hat[0], cov, rtol=1e-5, atol=1e-8)


def test_population_prediction(fitted, data):
    Xt = data.X_test
    _, std = fitted.predict(Xt, groups=data.groups_test, return_std=True)
    pop_mean, pop_std = fitted.predict(Xt, return_std=True)
    assert pop_mean.shape == (len(Xt), 3)
    assert pop_std.mean() > std.mean()  # the deviation and local priors widen it
    np.testing.assert_allclose(fitted.predict(Xt[:4], groups=[99] * 4), pop_mean[:4])


def test_sample_y_is_joint_over_rows_and_outputs(fitted, data):
    Xt, gt = data.X_test[:3], data.groups_test[:3]
    draws = fitted.sample_y(Xt, n_samples=4000, random_state=0, groups=gt)
    assert draws.shape == (3, 3, 4000)
    mean, cov = fitted.predict(Xt, groups=gt, return_cov=True)
    sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
    np.testing.assert_allclose(draws.mean(-1), mean, atol=5 * sd.max() / np.sqrt(4000))
    emp = np.stack([np.cov(draws[j]) for j in range(3)])
    np.testing.assert_allclose(emp, cov, atol=0.1 * np.abs(cov).max())


def test_ledger_carries_only_summaries(data):
    n_rows = {int(g): int(np.sum(data.groups_train == g)) for g in range(3)}
    for opt in ("paper", "cavi"):
        m = PFedHGPRegressor(optimizer=opt, n_rounds=2, local_steps=3, **SMALL).fit(
            data.X_train, data.y_train, groups=data.groups_train)
        up = [r for r in m.communication_.records if r.direction == "up"]
        for r in up:
            for shape in r.shapes:
                assert not shape or shape[0] != n_rows[r.client], (r.names, shape)
            assert not {"md", "mu", "Bd", "Bl", "Ld", "Lu"} & set(r.names)
        names = set(up[-1].names)
        if opt == "paper":  # the gradient of the global block, B_g included
            assert {"g_Bg", "g_mg", "g_Lg", "g_phi", "g_noise"} <= names
            shapes = dict(zip(up[-1].names, up[-1].shapes))
            assert shapes["g_Bg"] == (3, 2) and shapes["g_Lg"] == (2, 8 * 9 // 2)
        else:  # Gram of the stacked global bases, their product with the partial residual
            shapes = dict(zip(up[-1].names, up[-1].shapes))
            assert shapes["Phi"] == (16 * 17 // 2,) and shapes["WR"] == (16, 3)
        setup = dict(zip(up[3].names, up[3].shapes))  # round 0, after the set-up exchange
        assert setup["sum_y"] == (3,) and setup["yty"] == (6,)


@pytest.mark.parametrize("comps", [("global", "local"), ("global", "deviation"), ("global",),
                                   ("local",)])
def test_components_ablations(data, comps):
    for opt in ("cavi", "paper"):
        m = PFedHGPRegressor(components=comps, optimizer=opt, n_rounds=2, local_steps=3, **SMALL)
        m.fit(data.X_train, data.y_train, groups=data.groups_train)
        mean, cov = m.predict(data.X_test, groups=data.groups_test, return_cov=True)
        assert mean.shape == (45, 3) and np.all(np.linalg.eigvalsh(cov) > 0)
        assert (m.loadings_global_ is None) == ("global" not in comps)
        assert (m.loadings_deviation_ is None) == ("deviation" not in comps)
        assert (m.loadings_local_ is None) == ("local" not in comps)
        assert (m.phi_ > 0) == ("deviation" in comps)


def test_ranks_and_paper_optimizer(data):
    m = PFedHGPRegressor(n_latents=(1, 1, 3), optimizer="paper", n_rounds=3, local_steps=5,
                         **SMALL).fit(data.X_train, data.y_train, groups=data.groups_train)
    assert m.loadings_global_.shape == (3, 1) and m.loadings_local_.shape == (3, 3, 3)
    assert m.elbo_[-1] > m.elbo_[0]


def test_normalize_y_is_equivariant(data):
    X, Y, g = data.X_train, data.y_train, data.groups_train
    shift, scale = np.array([5.0, -2.0, 0.0]), np.array([100.0, 0.5, 3.0])
    a = PFedHGPRegressor(optimizer="cavi", n_rounds=3, **{**SMALL, "normalize_y": True}).fit(
        X, Y, groups=g)
    b = PFedHGPRegressor(optimizer="cavi", n_rounds=3, **{**SMALL, "normalize_y": True}).fit(
        X, Y * scale + shift, groups=g)
    ma, ca = a.predict(data.X_test, groups=data.groups_test, return_cov=True)
    mb, cb = b.predict(data.X_test, groups=data.groups_test, return_cov=True)
    np.testing.assert_allclose((mb - shift) / scale, ma, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(cb / np.outer(scale, scale), ca, rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(b.loadings_global_, a.loadings_global_ * scale[:, None], rtol=1e-6)


def test_single_column_y_is_the_scalar_model(data):
    X, y, g = data.X_train, data.y_train[:, 0], data.groups_train
    a = PFedHGPRegressor(optimizer="cavi", n_rounds=3, **SMALL).fit(X, y, groups=g)
    b = PFedHGPRegressor(optimizer="cavi", n_rounds=3, **SMALL).fit(X, y[:, None], groups=g)
    np.testing.assert_array_equal(a.predict(X, groups=g), b.predict(X, groups=g))
    assert b.n_outputs_ == 1 and b.loadings_global_ is None


def test_pfedgp_baseline_is_a_per_client_ilmm(data):
    m = PFedGPRegressor(n_inducing=5, n_latents=2, optimizer="cavi", n_rounds=3, random_state=0)
    m.fit(data.X_train, data.y_train, groups=data.groups_train)
    assert m.loadings_local_.shape == (3, 3, 2) and m.loadings_global_ is None
    up = [r for r in m.communication_.records if r.direction == "up" and r.round > 0]
    assert all("ls_l" in r.names and "Bl" not in r.names for r in up)
    # the shared kernel: every client ends with the average broadcast in the last round
    mean, cov = m.predict(data.X_test, groups=data.groups_test, return_cov=True)
    assert mean.shape == (45, 3) and cov.shape == (45, 3, 3)
    with pytest.raises(ValueError, match="n_latents"):
        PFedGPRegressor(n_inducing=5, n_latents=(2, 2, 2)).fit(
            data.X_train, data.y_train, groups=data.groups_train)


def test_bad_input_errors_and_failed_fit_keeps_the_model(fitted, data):
    X, Y, g = data.X_train, data.y_train, data.groups_train
    for bad in (0, 1.5, (2, 3, 2), (2, 2), "two", True):
        with pytest.raises(ValueError, match="n_latents"):
            PFedHGPRegressor(n_latents=bad, **SMALL).fit(X, Y, groups=g)
    with pytest.raises(ValueError, match="y must be"):
        PFedHGPRegressor(**SMALL).fit(X, Y[:, :, None], groups=g)
    with pytest.raises(ValueError, match="n_outputs_"):
        fitted.score(data.X_test, data.y_test[:, :2], groups=data.groups_test)
    rho = fitted.client_dissimilarity(X, g)  # multi-output fits are supported
    assert rho.shape == (3, 3) and np.allclose(rho, rho.T) and np.all(np.diag(rho) == 0)
    before = fitted.predict(data.X_test, groups=data.groups_test)
    with pytest.raises(ValueError, match="n_latents"):
        fitted.set_params(n_latents=0).fit(X, Y[:, :2], groups=g)
    fitted.set_params(n_latents=2)
    assert fitted.n_outputs_ == 3
    np.testing.assert_array_equal(fitted.predict(data.X_test, groups=data.groups_test), before)


def test_refit_with_other_outputs_is_a_fresh_fit(data):
    # like scikit-learn estimators, a new fit may change Q; predictions follow the new fit
    m = PFedHGPRegressor(optimizer="cavi", n_rounds=2, local_steps=2, **SMALL)
    m.fit(data.X_train, data.y_train, groups=data.groups_train)
    m.fit(data.X_train, data.y_train[:, :2], groups=data.groups_train)
    assert m.n_outputs_ == 2 and m.loadings_global_.shape == (2, 2)
    assert m.predict(data.X_test[:3], groups=[0, 1, 2]).shape == (3, 2)
    m.fit(data.X_train, data.y_train[:, 0], groups=data.groups_train)
    assert m.n_outputs_ == 1 and m.predict(data.X_test[:3]).shape == (3,)
