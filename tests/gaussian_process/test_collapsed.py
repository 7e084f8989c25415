"""Collapsed inference of PFedHGP's hierarchy: likelihood, gradient, the nested mixed model."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from threadpoolctl import threadpool_limits

from skfed.federated._protocol import pack_lower, unpack_lower
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
    out = [col.site_statistics(X, y, layout.site(p, i), layout, Z, K_inv)
           for i, (X, y) in enumerate(sites)]
    nll, w, Lam_inv, K_inv = col.server_objective(p, layout, Z, [m for m, _ in out])
    grads = [col.site_gradient(X, layout.site(p, i), layout, Z, c, w, Lam_inv, i)
             for i, ((X, _), (_, c)) in enumerate(zip(sites, out))]
    return nll, col.server_gradient(p, layout, Z, w, Lam_inv, K_inv, grads)


def _dense_reml(theta, sites, layout, Z):
    """1/2 [log|V| + log|F^T V^-1 F| + y^T P y] from the full covariance of all rows (plus
    the noise offsets' prior with a noise variance per site)."""
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
    noise = [layout.site(p, i)["s2"] for i in g]
    V = Q + same * site + np.diag(noise)
    F = col.design(X, layout.fixed_effects)
    if layout.slope_prior:  # the slopes' prior is a linear kernel; the intercept stays flat
        V += p["tau2"] * F[:, 1:] @ F[:, 1:].T
        F = F[:, :1]
    Vi = np.linalg.inv(V)
    A = F.T @ Vi @ F
    P = Vi - Vi @ F @ np.linalg.solve(A, F.T @ Vi)
    e, v = p["noise_offsets"], p["spread2"]
    laplace = 0.0 if layout.offset_info is None else np.log1p(v * layout.offset_info).sum()
    return 0.5 * (np.linalg.slogdet(V)[1] + np.linalg.slogdet(A)[1] + y @ P @ y
                  + e @ e / v + laplace)


@pytest.mark.parametrize("random_effects, deviation, local, slope_prior, n_sites, rows",
                         [("linear", True, True, False, 0, None),
                          ("intercept", False, True, False, 0, None),
                          ("none", True, False, False, 0, None),
                          ("intercept", True, True, True, 0, None),
                          ("intercept", True, True, True, 4, None),
                          ("intercept", True, True, False, 4, [12, 12, 0, 12])])
def test_likelihood_and_gradient_match_dense_references(random_effects, deviation, local,
                                                        slope_prior, n_sites, rows):
    sites = _sites(0)
    layout = col.Layout(2, random_effects, "linear", deviation, local, slope_prior=slope_prior,
                        n_sites=n_sites, site_rows=rows)
    Z = np.random.default_rng(1).normal(size=(5, 2))
    theta = np.random.default_rng(2).normal(scale=0.4, size=layout.size)
    nll, grad = _nll_and_grad(theta, sites, layout, Z)
    assert nll == pytest.approx(_dense_reml(theta, sites, layout, Z), rel=1e-9)
    fd = approx_fprime(theta, lambda t: _nll_and_grad(t, sites, layout, Z)[0], 1e-7)
    np.testing.assert_allclose(grad, fd * layout.mask(), atol=2e-5 * max(1, abs(fd).max()))



@pytest.mark.parametrize("slope_prior", [False, True])
def test_sites_loo_densities_are_each_rows_conditional_given_all_others(slope_prior):
    """The sites' closed-form leave-one-out densities equal, row by row, the Gaussian
    conditional of the row given every other row under the full covariance (the fixed
    effects' flat prior as a variance of 1 / BETA_PRECISION)."""
    sites = _sites(3, n_sites=3, n=7)
    layout = col.Layout(2, "intercept", "linear", slope_prior=slope_prior)
    Z = np.random.default_rng(4).normal(size=(4, 2))
    theta = np.random.default_rng(5).normal(scale=0.3, size=layout.size)
    p = layout.unpack(theta)
    K_inv = col._inverse_kzz(p, Z)[0]
    out = [col.site_statistics(X, y, p, layout, Z, K_inv) for X, y in sites]
    _, w, Lam_inv, _ = col.server_objective(p, layout, Z, [m for m, _ in out])
    fed = sum(col.site_gradient(X, p, layout, Z, c, w, Lam_inv, loo=True)[1]
              for (X, _), (_, c) in zip(sites, out))
    # the dense reference: V plus the fixed effects' prior, conditioned row by row
    X = np.vstack([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    g = np.repeat(np.arange(3), 7)
    Phi = col.rbf(X, Z, p["ls_g"], p["var_g"])
    Q = Phi @ np.linalg.solve(col._kzz(p, Z), Phi.T)
    R = col.design(X, layout.random_effects)
    site = (layout.global_weight(p) * col.rbf(X, X, p["ls_g"], p["var_g"]) - Q
            + col.rbf(X, X, p["ls_l"], p["var_l"]) + R @ p["L"] @ p["L"].T @ R.T)
    F = col.design(X, layout.fixed_effects)
    prior = np.full(F.shape[1], 1.0 / col.BETA_PRECISION)
    if slope_prior:
        prior[1:] = 1.0 / (1.0 / p["tau2"] + col.BETA_PRECISION)
    V = Q + (g[:, None] == g) * site + p["s2"] * np.eye(21) + (F * prior) @ F.T
    dense = 0.0
    for j in range(21):
        o = np.arange(21) != j
        k = np.linalg.solve(V[np.ix_(o, o)], V[o, j])
        mean, var = k @ y[o], V[j, j] - k @ V[o, j]
        dense += -0.5 * (np.log(2 * np.pi * var) + (y[j] - mean) ** 2 / var)
    assert fed == pytest.approx(dense, rel=1e-6)

def test_small_and_large_site_factorizations_agree(monkeypatch):
    # up to NUMPY_ROWS rows numpy factorizes a site's block, above it LAPACK's Cholesky
    # routines do: the same likelihood and gradient, the same refusal of a block that
    # is not positive definite
    sites = _sites(3)
    layout = col.Layout(2, "linear", "linear", True, True)
    Z = np.random.default_rng(1).normal(size=(5, 2))
    theta = np.random.default_rng(4).normal(scale=0.4, size=layout.size)
    small = _nll_and_grad(theta, sites, layout, Z)
    monkeypatch.setattr(col, "NUMPY_ROWS", 0)
    large = _nll_and_grad(theta, sites, layout, Z)
    assert small[0] == pytest.approx(large[0], rel=1e-12)
    np.testing.assert_allclose(small[1], large[1], rtol=1e-9, atol=1e-12)
    for rows in (0, 256):
        monkeypatch.setattr(col, "NUMPY_ROWS", rows)
        with pytest.raises(np.linalg.LinAlgError):
            col._site_factor(np.array([[1.0, 2.0], [2.0, 1.0]]))


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
    np.testing.assert_allclose(state["theta"], direct.x, rtol=1e-9, atol=1e-12)
    assert state["nll"] == pytest.approx(direct.fun, rel=1e-10)
    # two rounds per evaluation and the final statistics round
    assert res.n_rounds == 2 * direct.nfev + 1
    sent = {name for rec in res.ledger.records if rec.direction == "up" for name in rec.names}
    assert "grad" in sent and "HCy" in sent



def _restart_problem(n_restarts, seed):
    """Four sites of 10 rows, their federation, and ``n_restarts`` starts besides zero."""
    from skfed.federated import Federation

    sites = _sites(8, n_sites=4, n=10)
    layout = col.Layout(2, "intercept")
    Z = np.random.default_rng(2).normal(size=(5, 2))
    starts = col.scattered_starts(np.zeros(layout.size), layout, n_restarts,
                                  np.random.default_rng(seed))
    fed = Federation.from_arrays(np.vstack([s[0] for s in sites]),
                                 np.concatenate([s[1] for s in sites]),
                                 np.repeat(np.arange(4), 10))
    return sites, layout, Z, starts, fed


def test_starts_side_by_side_are_the_starts_one_after_the_other():
    """Restarts evaluated in the same rounds end where the sequential run ends (same
    optimum, same evaluations), in fewer rounds."""
    from skfed.federated import run_federation

    sites, layout, Z, starts, fed = _restart_problem(3, 0)
    runs = {}
    for parallel in (1, 2, None):
        algo = col.CollapsedProtocol(layout, Z, starts, max_iter=40, restart_iter=5,
                                     parallel_starts=parallel)
        runs[parallel] = run_federation(algo, fed, n_rounds=algo.max_rounds(), random_state=0)
    one = runs[1].server_state
    for parallel in (2, None):
        state = runs[parallel].server_state
        np.testing.assert_array_equal(state["theta"], one["theta"])
        assert state["nll"] == one["nll"] and state["n_eval"] == one["n_eval"]
    assert runs[None].n_rounds < runs[2].n_rounds < runs[1].n_rounds


def test_loo_selection_continues_the_start_of_the_highest_loo_density():
    from skfed.federated import run_federation

    sites, layout, Z, starts, fed = _restart_problem(4, 5)

    def loo_at(theta):
        p = layout.unpack(theta)
        K_inv = col._inverse_kzz(p, Z)[0]
        out = [col.site_statistics(Xi, yi, p, layout, Z, K_inv) for Xi, yi in sites]
        _, w, Lam_inv, _ = col.server_objective(p, layout, Z, [m for m, _ in out])
        return sum(col.site_gradient(Xi, p, layout, Z, c, w, Lam_inv, loo=True)[1]
                   for (Xi, _), (_, c) in zip(sites, out))

    ends = {}
    for selection in ("likelihood", "loo"):
        algo = col.CollapsedProtocol(layout, Z, starts, max_iter=40, restart_iter=5,
                                     selection=selection)
        res = run_federation(algo, fed, n_rounds=algo.max_rounds(), random_state=0)
        ends[selection] = res
    # the same short runs; the likelihood picks by NLL, "loo" by the sites' summed density
    short = [col.fit_collapsed(sites, layout, Z, t, max_iter=5).x for t in starts]
    scores = [loo_at(t) for t in short]
    nll = [col.fit_collapsed(sites, layout, Z, t, max_iter=5).fun for t in starts]
    assert np.argmax(scores) != np.argmin(nll)  # here the two criteria disagree
    first = col.fit_collapsed(sites, layout, Z, short[int(np.argmax(scores))], max_iter=40)
    with threadpool_limits(limits=1, user_api="blas"):
        np.testing.assert_allclose(ends["loo"].server_state["theta"], first.x, rtol=1e-8,
                                   atol=1e-10)
    sent = {name for rec in ends["loo"].ledger.records if rec.direction == "up"
            for name in rec.names}
    assert "loo" in sent
    assert "loo" not in {name for rec in ends["likelihood"].ledger.records
                         for name in rec.names}

def test_a_site_flags_each_point_its_block_fails_at():
    sites = _sites(9, n_sites=1, n=8)
    layout = col.Layout(2, "intercept")
    Z = np.random.default_rng(3).normal(size=(4, 2))
    algo = col.CollapsedProtocol(layout, Z, np.zeros(layout.size))
    thetas = col.scattered_starts(np.zeros(layout.size), layout, 2, np.random.default_rng(1))
    k_inv = np.array([col._inverse_kzz(layout.unpack(t), Z)[0] for t in thetas])
    k_inv[1] = np.nan  # the server could not invert K(Z, Z) at the second point
    packed = pack_lower(k_inv)  # as the server sends it

    class Data:
        X, y, n_samples, index = sites[0][0], sites[0][1], 8, 0

    broadcast = {"stage": np.int64(0), "theta": thetas, "Z": Z, "k_inv": packed}
    state, msg = algo.client_step(Data, None, broadcast, None)
    assert msg["failed"].tolist() == [0, 1, 0]
    assert msg["HCH"].shape[0] == 3 and not np.any(msg["HCH"][1])
    alone = col.site_statistics(Data.X, Data.y, layout.site(layout.unpack(thetas[2]), 0),
                                layout, Z, k_inv[2])[0]
    np.testing.assert_array_equal(msg["HCy"][2], alone["HCy"])
    # the gradients of the points asked again, flagged where no cache was kept
    up = {"stage": np.int64(1), "theta": thetas, "Z": Z, "which": np.array([2, 1]),
          "w": np.zeros((2, layout.f + 4)), "lam_inv": np.zeros((2,) + (layout.f + 4,) * 2)}
    _, grads = algo.client_step(Data, state, up, None)
    assert grads["failed"].tolist() == [0, 1] and grads["grad"].shape == (2, layout.size)


def test_parallel_starts_keep_the_largest_sites_blocks_bounded():
    rows = lambda *n: [{"n": np.int64(k)} for k in n]  # noqa: E731
    assert col.PFedHGPCollapsed.parallel_for(rows(40, 200)) >= col.AUTO_RESTARTS + 1
    big = col.PFedHGPCollapsed.parallel_for(rows(40, 2000))
    assert big == col.PARALLEL_CELLS // 2000**2 and big >= 1
    assert col.PFedHGPCollapsed.parallel_for(rows(10**5)) == 1

# --- PFedHGPRegressor(inference="collapsed") -----------------------------------------------

def _pooled(seed=3, n_sites=5, n=12):
    sites = _sites(seed, n_sites=n_sites, n=n)
    X = np.vstack([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    return X, y, np.repeat(np.arange(n_sites), n)


def _collapsed_model(**kw):
    from skfed.gaussian_process import PFedHGPRegressor

    return PFedHGPRegressor(inference="collapsed", n_inducing_global=8, random_state=0, **kw)


def test_estimator_is_the_in_process_collapsed_fit():
    """The estimator's rounds (set-up, then the optimizer) give fit_collapsed on the
    standardized rows and its Z, and predict with predict_collapsed."""
    X, y, groups = _pooled()
    model = _collapsed_model(random_effects="intercept", n_restarts=0).fit(X, y, groups=groups)
    fit = model._fit_collapsed
    Xs = (X - model.x_mean_) / model.x_std_
    ys = (y - model.y_mean_) / model.y_std_
    sites = [(Xs[groups == k], ys[groups == k]) for k in range(5)]
    layout = fit["layout"]
    start = {"ls_g": 2.0, "var_g": 1.0, "phi": 1.0, "ls_l": 0.35, "var_l": 0.1,
             "s2": 0.05**2, "L": np.sqrt(0.1) * np.eye(1)}
    with threadpool_limits(limits=1, user_api="blas"):  # as the estimator's client steps
        direct = col.fit_collapsed(sites, layout, fit["Z"], layout.pack(start))
    np.testing.assert_allclose(layout.pack(fit["p"]), direct.x, rtol=1e-9, atol=1e-12)
    assert model.log_marginal_likelihood_value_ == pytest.approx(-direct.fun, rel=1e-10)
    assert model.n_iter_ == direct.nfev
    mean, std = model.predict(X[:4], groups=groups[:4], return_std=True)
    m_ref, v_ref = col.predict_collapsed(fit["p"], layout, fit["Z"], fit["w"], fit["lam_inv"],
                                         Xs[:4], site=sites[0])
    np.testing.assert_allclose(mean, m_ref * model.y_std_ + model.y_mean_, rtol=1e-10)
    np.testing.assert_allclose(std, np.sqrt(v_ref) * model.y_std_, rtol=1e-10)
    # nothing but statistics crossed: no message carries a row of X or y
    sent = {name for rec in model.communication_.records if rec.direction == "up"
            for name in rec.names}
    assert sent <= {"n_samples", "n_features", "n_outputs", "n", "sum_x", "sum_x2", "sum_y",
                    "sum_y2", "HCH", "HCy", "logdet", "yCy", "grad", "failed", "loo"}


def test_estimator_covariance_samples_and_population():
    X, y, groups = _pooled(seed=4)
    model = _collapsed_model().fit(X, y, groups=groups)
    rows, g = X[[0, 1, 20, 30]], groups[[0, 1, 20, 30]]
    mean, std = model.predict(rows, groups=g, return_std=True)
    mean_c, cov = model.predict(rows, groups=g, return_cov=True)
    np.testing.assert_allclose(mean_c, mean)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-10)
    np.testing.assert_allclose(cov, cov.T, atol=1e-12)
    assert np.linalg.eigvalsh(cov).min() > 0
    draws = model.sample_y(rows, n_samples=2000, groups=g, random_state=1)
    assert draws.shape == (4, 2000)
    np.testing.assert_allclose(draws.mean(1), mean, atol=4 * std.max() / np.sqrt(2000))
    # a new site: the population prediction is wider than a seen site's
    _, std_new = model.predict(rows, return_std=True)
    _, std_unknown = model.predict(rows, groups=[77] * 4, return_std=True)
    np.testing.assert_allclose(std_new, std_unknown)
    assert np.all(std_new > std)
    assert model.variances_local_.shape == (5,) and model.lengthscales_local_.shape == (5, 2)


def test_estimator_restarts_are_reproducible_and_keep_the_best():
    X, y, groups = _pooled(seed=5)
    one = _collapsed_model(random_effects="none", n_restarts=0).fit(X, y, groups=groups)
    a = _collapsed_model(random_effects="none", n_restarts=2).fit(X, y, groups=groups)
    b = _collapsed_model(random_effects="none", n_restarts=2).fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.predict(X, groups=groups), b.predict(X, groups=groups))
    # the best start is continued to convergence: the same optimum up to the stopping rule
    best = one.log_marginal_likelihood_value_
    assert a.log_marginal_likelihood_value_ >= best - 1e-6 * abs(best)


def test_auto_restarts_depend_on_the_rows_the_sites_hold():
    from skfed.gaussian_process._collapsed import (
        AUTO_RESTART_ROWS, AUTO_RESTARTS, Layout, PFedHGPCollapsed)

    def restarts(n_restarts, counts):
        alg = PFedHGPCollapsed(Layout(1), np.zeros(Layout(1).size), n_restarts=n_restarts)
        return alg.restarts_for([{"n": np.int64(n)} for n in counts])

    assert restarts("auto", [AUTO_RESTART_ROWS // 2] * 2) == AUTO_RESTARTS
    assert restarts("auto", [AUTO_RESTART_ROWS // 2, AUTO_RESTART_ROWS // 2 + 1]) == 0
    assert restarts(3, [10 * AUTO_RESTART_ROWS]) == 3
    # the engine's bound on the rounds covers the restarts "auto" may choose
    bound = PFedHGPCollapsed(Layout(1), np.zeros(Layout(1).size), n_restarts="auto")
    assert bound.max_rounds() == PFedHGPCollapsed(
        Layout(1), np.zeros(Layout(1).size), n_restarts=AUTO_RESTARTS).max_rounds()


def test_default_restarts_reach_the_same_optimum_from_starts_a_decade_apart():
    """On these rows three starts end at three optima without restarts, and at the
    highest of them (or higher) with the default's."""
    X, y, groups = _pooled(seed=4)
    starts = [{}, dict(init_lengthscale_global=0.5, init_noise=0.1),
              dict(init_lengthscale_global=8.0, init_variance_global=3.0,
                   init_lengthscale_local=1.0)]
    single = [_collapsed_model(n_restarts=0, **kw).fit(X, y, groups=groups) for kw in starts]
    fits = [_collapsed_model(**kw).fit(X, y, groups=groups) for kw in starts]
    lml = [m.log_marginal_likelihood_value_ for m in single]
    assert max(lml) - min(lml) > 0.5
    assert all(m.n_restarts_ == 8 for m in fits) and single[0].n_restarts_ == 0
    for m in fits:
        assert m.log_marginal_likelihood_value_ >= max(lml)
        np.testing.assert_allclose(m.predict(X, groups=groups),
                                   fits[0].predict(X, groups=groups), rtol=1e-6, atol=1e-8)


def test_learned_slope_prior_shrinks_an_absent_trend_and_keeps_a_strong_one():
    rng = np.random.default_rng(6)
    X = rng.uniform(-2, 2, size=(60, 1))
    groups = np.repeat(np.arange(6), 10)
    noise = 0.2 * rng.normal(size=60) + rng.normal(size=6)[groups]
    flat = _collapsed_model(slope_prior="flat")
    learned = _collapsed_model()
    # a strong linear trend: tau^2 grows and the slope is the flat prior's
    y = 3.0 * X[:, 0] + noise
    a, b = flat.fit(X, y, groups=groups), learned.fit(X, y, groups=groups)
    assert a.slope_prior_variance_ == np.inf and b.slope_prior_variance_ > 1.0
    np.testing.assert_allclose(b.mean_coef_, a.mean_coef_, rtol=0.05)
    # no trend (a bump the global GP models): the learned prior shrinks the slope
    y = np.exp(-X[:, 0] ** 2) + noise
    a, b = flat.fit(X, y, groups=groups), learned.fit(X, y, groups=groups)
    assert abs(b.mean_coef_[0]) < abs(a.mean_coef_[0])


def test_noise_per_client_learns_each_sites_precision():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(6), 25)
    X = rng.uniform(-2, 2, (150, 1))
    sd = np.where(groups < 3, 0.05, 0.5)
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=6)[groups] + sd * rng.normal(size=150)
    model = _collapsed_model(noise="per_client").fit(X, y, groups=groups)
    shared = _collapsed_model().fit(X, y, groups=groups)
    v = model.client_noise_variances_
    assert v[:3].max() < v[3:].min() and v[3:].mean() > 10 * v[:3].mean()
    np.testing.assert_array_equal(shared.client_noise_variances_,
                                  np.full(6, shared.noise_variance_))
    assert model.log_marginal_likelihood_value_ > shared.log_marginal_likelihood_value_
    # seen rows: their client's noise; a new client: the population's
    _, std = model.predict(X, groups=groups, return_std=True)
    assert std[groups < 3].max() < std[groups >= 3].min()
    _, std_new = model.predict(X[:5], return_std=True)
    assert np.all(std_new > np.sqrt(model.noise_variance_))
    # a site's own copy (as on Flower) predicts its rows with its own noise
    rows = groups == 4
    site = model._with_site_state(4, model._locals[4])
    np.testing.assert_allclose(site.predict(X[rows], groups=groups[rows], return_std=True)[1],
                               std[rows], rtol=1e-10)
    with pytest.raises(ValueError, match="noise='per_client' applies to the collapsed fit"):
        _collapsed_model(noise="per_client").set_params(inference="variational").fit(
            X, y, groups=groups)



def test_learned_noise_spread_follows_how_much_the_sites_precisions_differ():
    """Equal noise everywhere: the spread shrinks and with it every offset; a hundredfold
    difference of variances: the spread stays wide (sd of the log variances ~ 2.3)."""
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(8), 12)
    X = rng.uniform(-2, 2, (96, 1))
    base = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=8)[groups]
    eps = rng.normal(size=96)
    equal = _collapsed_model(noise="per_client", n_restarts=0).fit(
        X, base + 0.3 * eps, groups=groups)
    apart = _collapsed_model(noise="per_client", n_restarts=0).fit(
        X, base + np.where(groups % 2, 0.03, 0.3) * eps, groups=groups)
    assert equal.noise_spread_ < 0.3 < 1.0 < apart.noise_spread_
    ratio = equal.client_noise_variances_ / equal.noise_variance_
    assert np.abs(np.log(ratio)).max() < 0.2
    assert _collapsed_model().fit(X, base, groups=groups).noise_spread_ is None

def test_slope_prior_is_the_collapsed_fits():
    X, y, groups = _pooled()
    from skfed.gaussian_process import PFedHGPRegressor

    for prior in ("flat", "learned"):
        with pytest.raises(ValueError, match="slope_prior="):
            PFedHGPRegressor(inference="variational", slope_prior=prior).fit(X, y,
                                                                             groups=groups)
    model = PFedHGPRegressor(inference="variational", n_rounds=2, n_inducing_local=4).fit(
        X, y, groups=groups)
    assert model.slope_prior_variance_ is None


@pytest.mark.parametrize("params, match", [
    ({"kernel": "matern52"}, "kernel='rbf'"),
    ({"site_trend": "linear"}, "site_trend='none'"),
])
def test_estimator_refuses_what_it_does_not_model(params, match):
    X, y, groups = _pooled()
    with pytest.raises(ValueError, match=match):
        _collapsed_model(**params).fit(X, y, groups=groups)


def test_estimator_refuses_several_outputs_and_client_kernels():
    X, y, groups = _pooled()
    with pytest.raises(ValueError, match="1-D y only"):
        _collapsed_model().fit(X, np.column_stack([y, y]), groups=groups)
    model = _collapsed_model().fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="inference='variational'"):
        model.client_kernels(0)
    with pytest.raises(ValueError, match="inference='variational'"):
        model.client_dissimilarity(X, groups)


def test_small_sites_send_nothing_but_predict_their_rows():
    X, y, groups = _pooled(seed=6)
    groups = groups.copy()
    groups[:10] = 99  # site 0 keeps two rows
    model = _collapsed_model(random_effects="intercept").fit(X, y, groups=groups)
    k = list(model.clients_).index(0)
    sent_by = {rec.client for rec in model.communication_.records
               if rec.direction == "up" and "HCy" in rec.names}
    assert 0 not in sent_by and 99 in sent_by
    _, std_seen = model.predict(X[10:12], groups=groups[10:12], return_std=True)
    _, std_new = model.predict(X[10:12], return_std=True)
    assert k >= 0 and np.all(std_seen < std_new)


def test_ard_false_keeps_one_lengthscale_per_kernel():
    """``ard=False``: the optimizer's gradient is the likelihood's along equal lengthscales
    (per entry, the derivative of the tied one over ``d``), the starts are tied, and the
    estimator's fit keeps one lengthscale per kernel; with one feature it changes nothing."""
    sites = _sites(4, d=3)
    Z = np.random.default_rng(1).normal(size=(6, 3))
    layout = col.Layout(3, random_effects="intercept", ard=False)
    theta = layout.pack({"ls_g": 1.3, "var_g": 0.8, "phi": 0.5, "ls_l": 0.6, "var_l": 0.2,
                         "s2": 0.1, "L": 0.3 * np.eye(1)})
    grad = _nll_and_grad(theta, sites, layout, Z)[1]

    def along(t, block):
        th = theta.copy()
        th[block] = t[0]
        return _nll_and_grad(th, sites, layout, Z)[0]

    for block in (slice(0, 3), slice(5, 8)):
        assert np.ptp(grad[block]) == 0.0
        numeric = approx_fprime(theta[block][:1], along, 1e-6, block)[0]
        assert 3 * grad[block][0] == pytest.approx(numeric, rel=1e-4)
    starts = col.scattered_starts(theta, layout, 4, np.random.default_rng(0))
    assert np.ptp(starts[:, 0:3], axis=1).max() == 0.0
    assert np.ptp(starts[:, 5:8], axis=1).max() == 0.0

    X, y, groups = _pooled()
    tied = _collapsed_model(ard=False, n_restarts=2).fit(X, y, groups=groups)
    free = _collapsed_model(ard=True, n_restarts=2).fit(X, y, groups=groups)
    assert np.ptp(tied.lengthscale_global_) == 0.0
    assert np.ptp(tied.lengthscales_local_) == 0.0
    assert np.ptp(free.lengthscale_global_) > 0.0
    one = [_collapsed_model(ard=ard, n_restarts=2).fit(X[:, :1], y, groups=groups)
           for ard in (True, False)]
    np.testing.assert_array_equal(one[0].predict(X[:, :1], groups=groups),
                                  one[1].predict(X[:, :1], groups=groups))


def test_symmetric_matrices_cross_as_half_their_entries_and_give_the_same_bits():
    # the sites send H^T C^-1 H's lower triangle (the server's Cholesky factorization reads
    # no other entry) and get K^-1's, which is symmetric to the bit: the fit is unchanged
    sites = _sites(5, n_sites=3, n=9)
    layout = col.Layout(2, "intercept")
    Z = np.random.default_rng(2).normal(size=(6, 2))
    p = layout.unpack(col.scattered_starts(np.zeros(layout.size), layout, 1,
                                           np.random.default_rng(0))[1])
    K_inv = col._inverse_kzz(p, Z)[0]
    np.testing.assert_array_equal(unpack_lower(pack_lower(K_inv), Z.shape[0]), K_inv)
    k = layout.f + Z.shape[0]
    for i, (X, y) in enumerate(sites):
        msg, (_, _, H, CiH, *_) = col.site_statistics(X, y, layout.site(p, i), layout, Z,
                                                      K_inv)
        assert msg["HCH"].shape == (k * (k + 1) // 2,)
        np.testing.assert_allclose(unpack_lower(msg["HCH"], k), H.T @ CiH, rtol=1e-12)
