"""Collapsed inference of PFedHGP's hierarchy: likelihood, gradient, the nested mixed model."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from skfed.gaussian_process import _collapsed as col
from skfed.linear_model import FedMixedLMRegressor


def _sites(seed, n_sites=4, n=12, d=2):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_sites):
        X = rng.normal(size=(n, d))
        b = rng.normal(size=d + 1) * 0.5
        y = np.sin(X[:, 0]) + b[0] + X @ b[1:] + 0.3 * rng.normal(size=n)
        out.append((X, y))
    return out


def _nll_and_grad(theta, sites, layout, Z):
    p = layout.unpack(theta)
    K_inv = col._inverse_kzz(p, Z)[0]
    out = [col.site_statistics(X, y, p, layout, Z, K_inv) for X, y in sites]
    nll, w, Lam_inv, K_inv = col.server_objective(p, layout, Z, [m for m, _ in out])
    grads = [col.site_gradient(X, p, layout, Z, c, w, Lam_inv)
             for (X, _), (_, c) in zip(sites, out)]
    return nll, col.server_gradient(p, layout, Z, w, Lam_inv, K_inv, grads)


def _dense_reml(theta, sites, layout, Z):
    """1/2 [log|V| + log|F^T V^-1 F| + y^T P y] from the full covariance of all rows."""
    p = layout.unpack(theta)
    X = np.vstack([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    g = np.repeat(np.arange(len(sites)), [len(s[1]) for s in sites])
    Kg = col.rbf(X, X, p["ls_g"], p["var_g"])
    Phi = col.rbf(X, Z, p["ls_g"], p["var_g"])
    Q = Phi @ np.linalg.solve(col._kzz(p, Z), Phi.T)
    same = g[:, None] == g[None, :]
    R = col.design(X, layout.random_effects)
    site = (layout.global_weight(p) * Kg - Q + col.rbf(X, X, p["ls_l"], p["var_l"])
            + R @ p["L"] @ p["L"].T @ R.T)
    V = Q + same * site + p["s2"] * np.eye(len(y))
    F = col.design(X, layout.fixed_effects)
    Vi = np.linalg.inv(V)
    A = F.T @ Vi @ F
    P = Vi - Vi @ F @ np.linalg.solve(A, F.T @ Vi)
    return 0.5 * (np.linalg.slogdet(V)[1] + np.linalg.slogdet(A)[1] + y @ P @ y)


@pytest.mark.parametrize("random_effects, deviation, local",
                         [("linear", True, True), ("intercept", False, True),
                          ("none", True, False)])
def test_likelihood_and_gradient_match_dense_references(random_effects, deviation, local):
    sites = _sites(0)
    layout = col.Layout(2, random_effects, "linear", deviation, local)
    Z = np.random.default_rng(1).normal(size=(5, 2))
    theta = np.random.default_rng(2).normal(scale=0.4, size=layout.size)
    nll, grad = _nll_and_grad(theta, sites, layout, Z)
    assert nll == pytest.approx(_dense_reml(theta, sites, layout, Z), rel=1e-9)
    fd = approx_fprime(theta, lambda t: _nll_and_grad(t, sites, layout, Z)[0], 1e-7)
    np.testing.assert_allclose(grad, fd * layout.mask(), atol=2e-5 * max(1, abs(fd).max()))


def test_without_the_gps_it_is_the_linear_mixed_model():
    # random intercept and slope, no GP: the REML fit of FedMixedLMRegressor (exact, one round)
    sites = _sites(3, n_sites=12, n=15, d=1)
    layout = col.Layout(1, "linear", "linear", deviation=False, local=False, global_gp=False)
    Z = np.zeros((0, 1))
    start = layout.pack({"ls_g": 1.0, "var_g": 1.0, "phi": 1.0, "ls_l": 1.0, "var_l": 1.0,
                         "s2": 0.5, "L": 0.3 * np.eye(2)})
    res = col.fit_collapsed(sites, layout, Z, start)
    p = layout.unpack(res.x)
    X = np.vstack([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    groups = np.repeat(np.arange(12), 15)
    lmm = FedMixedLMRegressor(random_slopes=[0]).fit(X, y, groups=groups)
    np.testing.assert_allclose(p["s2"], lmm.noise_variance_, rtol=1e-4)
    np.testing.assert_allclose(p["L"] @ p["L"].T, lmm.random_effects_cov_, rtol=1e-3,
                               atol=1e-5)
    K_inv = np.zeros((0, 0))
    msgs = [col.site_statistics(Xi, yi, p, layout, Z, K_inv)[0] for Xi, yi in sites]
    _, w, Lam_inv, _ = col.server_objective(p, layout, Z, msgs)
    np.testing.assert_allclose(w, [lmm.intercept_, lmm.coef_[0]], rtol=1e-4)
    # seen-site predictions are the BLUPs'
    Xn = np.linspace(-1, 1, 5)[:, None]
    mean, _ = col.predict_collapsed(p, layout, Z, w, Lam_inv, Xn, site=sites[4])
    np.testing.assert_allclose(mean, lmm.predict(Xn, groups=np.full(5, 4)), rtol=1e-4,
                               atol=1e-6)


def test_predictive_variance_is_positive_and_shrinks_at_seen_sites():
    sites = _sites(5)
    layout = col.Layout(2)
    Z = np.random.default_rng(1).normal(size=(6, 2))
    res = col.fit_collapsed(sites, layout, Z, np.zeros(layout.size), max_iter=50)
    p = layout.unpack(res.x)
    K_inv = col._inverse_kzz(p, Z)[0]
    msgs = [col.site_statistics(X, y, p, layout, Z, K_inv)[0] for X, y in sites]
    _, w, Lam_inv, _ = col.server_objective(p, layout, Z, msgs)
    X0 = sites[0][0][:5]
    _, v_new = col.predict_collapsed(p, layout, Z, w, Lam_inv, X0)
    _, v_seen = col.predict_collapsed(p, layout, Z, w, Lam_inv, X0, site=sites[0])
    assert np.all(v_seen > p["s2"] * 0.999) and np.all(v_seen < v_new)


def test_federated_rounds_give_the_in_process_fit():
    from skfed.federated import Federation, run_federation

    sites = _sites(7, n_sites=5, n=10)
    layout = col.Layout(2, "intercept")
    Z = np.random.default_rng(1).normal(size=(6, 2))
    theta0 = np.zeros(layout.size)
    direct = col.fit_collapsed(sites, layout, Z, theta0, max_iter=40)
    X = np.vstack([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    fed = Federation.from_arrays(X, y, np.repeat(np.arange(5), 10))
    algo = col.CollapsedProtocol(layout, Z, theta0, max_iter=40)
    res = run_federation(algo, fed, n_rounds=algo.max_rounds(), random_state=0)
    state = res.server_state
    assert state["stage"] == 3
    np.testing.assert_allclose(state["opt"].x, direct.x, rtol=1e-9, atol=1e-12)
    assert state["nll"] == pytest.approx(direct.fun, rel=1e-10)
    # two rounds per evaluation and the final statistics round
    assert res.n_rounds == 2 * direct.nfev + 1
    sent = {name for rec in res.ledger.records if rec.direction == "up" for name in rec.names}
    assert "grad" in sent and "HCy" in sent
