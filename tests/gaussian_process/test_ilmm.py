"""The multi-output (ILMM) ELBO: gradients, exact expectations, reductions, closed forms."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from skfed.gaussian_process._elbo import ModelConfig, client_terms, server_kl, softplus, softplus_inv
from skfed.gaussian_process._closed_form import LATENT_Q_SMALL, _local_sweeps_lapack
from skfed.gaussian_process._ilmm import (
    IlmmClientGram,
    IlmmConfig,
    global_bases,
    ilmm_terms,
    local_bases,
    solve_local_ilmm,
)
from skfed.gaussian_process._closed_form_kernels import latent_sweeps
from skfed.gaussian_process._covariance import kernel_matrix

TRIL = ("Lg", "Ld", "Lu")


def random_ilmm(rng, d, M, Mi, Q, Rg, Rl, p, cfg):
    def chols(R, m):
        return np.stack([np.tril(rng.normal(size=(m, m))) * 0.3 + np.eye(m) for _ in range(R)])

    g = dict(Zg=rng.normal(size=(M, d)), ls_g=rng.normal(size=(Rg, p)) + 0.5, phi=np.array(0.2),
             noise=np.array(-1.0), mg=rng.normal(size=(Rg, M)), Lg=chols(Rg, M),
             Bg=rng.normal(size=(Q, Rg)))
    loc = dict(Zl=rng.normal(size=(Mi, d)), ls_l=rng.normal(size=(Rl, p)),
               md=rng.normal(size=(Rg, M)), Ld=chols(Rg, M), Bd=rng.normal(size=(Q, Rg)),
               mu=rng.normal(size=(Rl, Mi)), Lu=chols(Rl, Mi), Bl=rng.normal(size=(Q, Rl)))
    drop_g = {"use_global": ("mg", "Lg", "Bg"), "use_deviation": ("phi",)}
    drop_l = {"use_deviation": ("md", "Ld", "Bd"), "use_local": ("Zl", "ls_l", "mu", "Lu", "Bl")}
    for flag, keys in drop_g.items():
        if not getattr(cfg, flag):
            for k in keys:
                g.pop(k)
    if not cfg.global_basis:
        for k in ("Zg", "ls_g"):
            g.pop(k)
    for flag, keys in drop_l.items():
        if not getattr(cfg, flag):
            for k in keys:
                loc.pop(k)
    return g, loc


COMPONENTS = [(True, True, True), (True, False, True), (True, True, False), (True, False, False),
              (False, False, True)]


@pytest.mark.parametrize("use", COMPONENTS)
@pytest.mark.parametrize("kind,ard", [(0, False), (2, True)])
def test_ilmm_gradients_match_finite_differences(use, kind, ard):
    rng = np.random.default_rng(sum(use) + kind)
    n, d, M, Mi, Q, Rg, Rl = 9, 2, 4, 3, 3, 2, 2
    cfg = IlmmConfig(kind=kind, ard=ard, n_features=d, use_global=use[0], use_deviation=use[1],
                     use_local=use[2], n_outputs=Q, rank_global=Rg, rank_local=Rl,
                     variance_global=0.8, variance_local=1.3)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(n, Q))
    g, loc = random_ilmm(rng, d, M, Mi, Q, Rg, Rl, d if ard else 1, cfg)
    _, gl, gg, _ = ilmm_terms(X, Y, g, loc, cfg, want_local=True, want_global=True)
    h = 1e-6
    for params, grads in ((loc, gl), (g, gg)):
        assert set(grads) == set(params)
        for key, grad in grads.items():
            base = np.array(params[key], dtype=float)
            assert grad.shape == base.shape, key
            for idx in np.ndindex(base.shape):
                if key in TRIL and idx[-1] > idx[-2]:
                    assert grad[idx] == 0.0
                    continue
                vals = []
                for sign in (1, -1):
                    p = base.copy()
                    p[idx] += sign * h
                    params[key] = p
                    vals.append(ilmm_terms(X, Y, g, loc, cfg)[0])
                params[key] = base
                fd = (vals[0] - vals[1]) / (2 * h)
                assert grad[idx] == pytest.approx(fd, rel=1e-5, abs=1e-6), (key, idx)


@pytest.mark.parametrize("use", COMPONENTS)
def test_kernel_gradients_alone_are_the_full_ones(use):
    # the closed-form client's local steps and message skip the value and variance terms
    rng = np.random.default_rng(5)
    n, d, M, Mi, Q, Rg, Rl = 9, 2, 4, 3, 3, 2, 2
    cfg = IlmmConfig(n_features=d, use_global=use[0], use_deviation=use[1], use_local=use[2],
                     n_outputs=Q, rank_global=Rg, rank_local=Rl)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(n, Q))
    g, loc = random_ilmm(rng, d, M, Mi, Q, Rg, Rl, 1, cfg)
    _, full, full_g, _ = ilmm_terms(X, Y, g, loc, cfg, want_local=True, want_global=True)
    value, alone, alone_g, _ = ilmm_terms(X, Y, g, loc, cfg, want_local_hyper=True,
                                          want_global=True, want_value=False)
    assert np.isnan(value)
    assert set(alone) == ({"ls_l", "Zl"} if use[2] else set())
    assert set(alone_g) == ({"ls_g", "Zg"} if use[0] or use[1] else set())
    for grads, reference in ((alone, full), (alone_g, full_g)):
        for key, grad in grads.items():
            np.testing.assert_array_equal(grad, reference[key])


def test_server_kl_sums_the_latents():
    rng = np.random.default_rng(0)
    cfg = IlmmConfig(n_outputs=2, rank_global=2, rank_local=1)
    g, _ = random_ilmm(rng, 1, 4, 3, 2, 2, 1, 1, cfg)
    kl, grads = server_kl(g, cfg)
    h = 1e-6
    for key in ("mg", "Lg"):
        for idx in np.ndindex(g[key].shape):
            p, m = dict(g), dict(g)
            p[key], m[key] = g[key].copy(), g[key].copy()
            p[key][idx] += h
            m[key][idx] -= h
            fd = (server_kl(p, cfg)[0] - server_kl(m, cfg)[0]) / (2 * h)
            assert grads[key][idx] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def _unwhitened(X, Z, ls, var, m, L, prior=1.0):
    """Mean and covariance at X of a latent with whitened q(v) = N(m, L L^T), u = chol(K) v."""
    Kzz = kernel_matrix(Z, Z, np.atleast_1d(ls), var, 0) + 1e-10 * np.eye(len(Z))
    Kxz = kernel_matrix(X, Z, np.atleast_1d(ls), var, 0)
    Lk = np.linalg.cholesky(Kzz)
    mu, S = Lk @ m, Lk @ L @ L.T @ Lk.T
    A = Kxz @ np.linalg.inv(Kzz)
    Kxx = kernel_matrix(X, X, np.atleast_1d(ls), var, 0)
    return A @ mu, A @ S @ A.T + prior * (Kxx - A @ Kzz @ A.T)


def test_expected_log_likelihood_matches_a_dense_expectation():
    """E_q log N(Y; sum_c B_c h_c, s2 I) from unwhitened dense moments, point by point."""
    rng = np.random.default_rng(3)
    n, M, Mi, Q, R = 7, 4, 3, 3, 2
    cfg = IlmmConfig(n_outputs=Q, rank_global=R, rank_local=R, variance_global=0.9,
                     variance_local=1.1, jitter=1e-10)
    X, Y = rng.normal(size=(n, 1)), rng.normal(size=(n, Q))
    g, loc = random_ilmm(rng, 1, M, Mi, Q, R, R, 1, cfg)
    value, _, _, _ = ilmm_terms(X, Y, g, loc, cfg)
    s2, phi = float(softplus(g["noise"])), float(softplus(g["phi"]))
    mean = np.zeros((n, Q))
    cov = np.zeros((n, Q, Q))  # per point
    for r in range(R):
        ls = softplus(g["ls_g"][r])
        for m, L, B, prior in ((g["mg"][r], g["Lg"][r], g["Bg"][:, r], 1.0),
                               (loc["md"][r], loc["Ld"][r], loc["Bd"][:, r], phi)):
            # W2: delta = L_g v with v ~ N(0, phi I); its residual is phi (K - Q)
            mu, S = _unwhitened(X, g["Zg"], ls, 0.9, m, L, prior)
            mean += np.outer(mu, B)
            cov += np.diag(S)[:, None, None] * np.outer(B, B)
        mu, S = _unwhitened(X, loc["Zl"], softplus(loc["ls_l"][r]), 1.1, loc["mu"][r], loc["Lu"][r])
        mean += np.outer(mu, loc["Bl"][:, r])
        cov += np.diag(S)[:, None, None] * np.outer(loc["Bl"][:, r], loc["Bl"][:, r])
    ell = np.sum(-0.5 * Q * np.log(2 * np.pi * s2)
                 - (np.sum((Y - mean) ** 2, 1) + np.trace(cov, axis1=1, axis2=2)) / (2 * s2))
    kl = 0.0
    for r in range(R):
        for m, L, p in ((loc["md"][r], loc["Ld"][r], phi), (loc["mu"][r], loc["Lu"][r], 1.0)):
            S = L @ L.T
            kl += multivariate_normal_kl(m, S, p)
    assert value == pytest.approx(ell - kl, rel=1e-7)


def multivariate_normal_kl(m, S, p):
    """KL(N(m, S) || N(0, p I)) by the textbook formula."""
    k = len(m)
    return 0.5 * (np.trace(S) / p + m @ m / p - k + k * np.log(p) - np.linalg.slogdet(S)[1])


def test_monte_carlo_expectation_agrees():
    rng = np.random.default_rng(4)
    n, M, Q, R = 5, 3, 2, 2
    cfg = IlmmConfig(n_outputs=Q, rank_global=R, use_deviation=False, use_local=False,
                     jitter=1e-10)
    X, Y = rng.normal(size=(n, 1)), rng.normal(size=(n, Q))
    g, loc = random_ilmm(rng, 1, M, 3, Q, R, 1, 1, cfg)
    value = ilmm_terms(X, Y, g, loc, cfg)[0]
    s2 = float(softplus(g["noise"]))
    draws = 200_000
    f = np.zeros((draws, n, Q))
    for r in range(R):
        mu, S = _unwhitened(X, g["Zg"], softplus(g["ls_g"][r]), 1.0, g["mg"][r], g["Lg"][r])
        h = mu + rng.standard_normal((draws, n)) * np.sqrt(np.diag(S))  # marginals suffice
        f += h[:, :, None] * g["Bg"][:, r]
    logp = -0.5 * n * Q * np.log(2 * np.pi * s2) - np.sum((Y - f) ** 2, axis=(1, 2)) / (2 * s2)
    se = logp.std() / np.sqrt(draws)
    assert abs(logp.mean() - value) < 5 * se


def test_one_output_unit_loading_is_the_scalar_elbo():
    rng = np.random.default_rng(5)
    n, M, Mi = 8, 4, 3
    X, y = rng.normal(size=(n, 1)), rng.normal(size=n)
    scfg = ModelConfig()
    icfg = IlmmConfig(n_outputs=1, rank_global=1, rank_local=1, variance_global=1.7,
                      variance_local=0.6)
    gi, li = random_ilmm(rng, 1, M, Mi, 1, 1, 1, 1, icfg)
    for B in ("Bg",):
        gi[B] = np.ones((1, 1))
    li["Bd"], li["Bl"] = np.ones((1, 1)), np.ones((1, 1))
    gs = dict(Zg=gi["Zg"], ls_g=gi["ls_g"][0], var_g=softplus_inv(1.7), phi=gi["phi"],
              noise=gi["noise"], mg=gi["mg"][0], Lg=gi["Lg"][0])
    ls = dict(Zl=li["Zl"], ls_l=li["ls_l"][0], var_l=softplus_inv(0.6), md=li["md"][0],
              Ld=li["Ld"][0], mu=li["mu"][0], Lu=li["Lu"][0])
    a = client_terms(X, y, gs, ls, scfg)[0]
    b = ilmm_terms(X, y[:, None], gi, li, icfg)[0]
    assert b == pytest.approx(a, rel=1e-12)


def _optimal_global_only(X, Y, g, cfg, n_sweeps):
    """Coordinate ascent on q(u_g^(r)) with B_g fixed (server closed form, one client)."""
    from skfed.gaussian_process._closed_form import block_cov_gram, joint_means_gram

    s2 = float(softplus(g["noise"]))
    gbs = global_bases(X, g, cfg)
    beta = np.sum(g["Bg"] ** 2, axis=0)
    g["Lg"] = np.stack([block_cov_gram(b.W @ b.W.T, beta[r], s2) for r, b in enumerate(gbs)])
    W = np.vstack([b.W for b in gbs])
    for _ in range(n_sweeps):
        g["mg"] = np.array(joint_means_gram(W @ W.T, W @ Y, list(g["Bg"].T), [1.0] * len(gbs),
                                            [b.W.shape[0] for b in gbs], s2))
    return ilmm_terms(X, Y, g, {}, cfg, gbs=gbs)[0] - server_kl(g, cfg)[0]


def test_exact_multi_output_evidence_when_z_is_x():
    """Z = X, one client, global only, orthogonal known B: the bound is the exact evidence.

    With orthogonal columns of B the likelihood separates over the latents, so
    the mean-field q over latents loses nothing and the optimal ELBO equals
    log N(vec Y; 0, sum_r K_r kron b_r b_r^T + s2 I).
    """
    rng = np.random.default_rng(6)
    n, Q, R = 9, 3, 2
    X = np.linspace(0, 6, n)[:, None]
    B = np.linalg.qr(rng.normal(size=(Q, R)))[0] * np.array([1.3, 0.7])
    ls, noise = np.array([1.1, 2.3]), 0.05
    Y = rng.normal(size=(n, Q))
    cfg = IlmmConfig(n_outputs=Q, rank_global=R, use_deviation=False, use_local=False,
                     jitter=1e-12)
    g = dict(Zg=X.copy(), ls_g=softplus_inv(ls)[:, None], noise=softplus_inv(noise), Bg=B,
             mg=np.zeros((R, n)), Lg=np.stack([np.eye(n)] * R))
    elbo = _optimal_global_only(X, Y, g, cfg, n_sweeps=1)
    cov = noise * np.eye(n * Q)
    for r in range(R):
        cov += np.kron(kernel_matrix(X, X, ls[r:r + 1], 1.0, 0), np.outer(B[:, r], B[:, r]))
    exact = multivariate_normal(np.zeros(n * Q), cov).logpdf(Y.ravel())  # point-major vec
    assert elbo == pytest.approx(exact, abs=1e-6)
    # non-orthogonal loadings: mean field over latents is a strict lower bound
    g["Bg"] = rng.normal(size=(Q, R))
    cov = noise * np.eye(n * Q)
    for r in range(R):
        b = g["Bg"][:, r]
        cov += np.kron(kernel_matrix(X, X, ls[r:r + 1], 1.0, 0), np.outer(b, b))
    exact = multivariate_normal(np.zeros(n * Q), cov).logpdf(Y.ravel())
    assert _optimal_global_only(X, Y, g, cfg, n_sweeps=3) < exact


def test_local_coordinate_ascent_is_monotone_and_stationary():
    rng = np.random.default_rng(7)
    n, M, Mi, Q, R = 20, 5, 4, 3, 2
    cfg = IlmmConfig(n_outputs=Q, rank_global=R, rank_local=R)
    X, Y = rng.uniform(0, 5, (n, 1)), rng.normal(size=(n, Q))
    g, loc = random_ilmm(rng, 1, M, Mi, Q, R, R, 1, cfg)
    g["Zg"], loc["Zl"] = np.linspace(0, 5, M)[:, None], np.linspace(0, 5, Mi)[:, None]
    gbs, lbs = global_bases(X, g, cfg), local_bases(X, loc, cfg)
    before = ilmm_terms(X, Y, g, loc, cfg)[0]
    for _ in range(30):
        loc = solve_local_ilmm(X, Y, g, loc, cfg, gbs, lbs, n_sweeps=1)
        now = ilmm_terms(X, Y, g, loc, cfg)[0]
        assert now >= before - 1e-8
        before = now
    _, gl, _, _ = ilmm_terms(X, Y, g, loc, cfg, want_local=True, want_local_hyper=False)
    for key in ("md", "mu"):  # q is solved last: exactly stationary
        assert np.abs(gl[key]).max() < 1e-8, key


@pytest.mark.parametrize("use", [(True, True, True), (True, False, True), (True, True, False)])
def test_closed_form_server_step_from_sufficient_statistics(use):
    """The server's closed-form update (q(u_g), B_g, noise, phi) from the clients' statistics.

    The ELBO the server reports equals the one computed from the raw data with
    the new global block, and it is no lower than before the update.
    """
    from skfed.gaussian_process._ilmm_steps import _IlmmSteps
    from skfed.gaussian_process._steps import InitialValues

    rng = np.random.default_rng(8)
    T, n, M, Mi, Q, R = 3, 15, 5, 4, 3, 2
    cfg = IlmmConfig(use_global=use[0], use_deviation=use[1], use_local=use[2], n_outputs=Q,
                     rank_global=R, rank_local=R, learn_inducing=False)
    steps = _IlmmSteps(cfg, optimizer="cavi", n_inducing_global=M, n_inducing_local=Mi,
                       init=InitialValues(lengthscale_local=0.5, noise=0.1), local_steps=0,
                       local_lr=0.1, server_lr=0.1, normalize_y=False, n_rounds=1)
    Xs = [rng.uniform(0, 5, (n, 1)) for _ in range(T)]
    Ys = [rng.normal(size=(n, Q)) for _ in range(T)]
    g, _ = random_ilmm(rng, 1, M, Mi, Q, R, R, 1, cfg)
    g["Zg"] = np.linspace(0, 5, M)[:, None]
    locs = []
    for X, Y in zip(Xs, Ys):
        _, loc = random_ilmm(rng, 1, M, Mi, Q, R, R, 1, cfg)
        if cfg.use_local:
            loc["Zl"] = np.linspace(0, 5, Mi)[:, None]
        locs.append(solve_local_ilmm(X, Y, g, loc, cfg, global_bases(X, g, cfg),
                                     local_bases(X, loc, cfg) if cfg.use_local else None))

    def elbo(g):
        return sum(ilmm_terms(X, Y, g, lc, cfg)[0] for X, Y, lc in zip(Xs, Ys, locs)) \
            - server_kl(g, cfg)[0]

    before = elbo(g)
    msgs = {}
    for i, (X, Y, lc) in enumerate(zip(Xs, Ys, locs)):
        gbs = global_bases(X, g, cfg)
        lbs = local_bases(X, lc, cfg) if cfg.use_local else None
        msgs[i] = steps.strategy.message(X, Y, g, lc, gbs, IlmmClientGram(Y, gbs, lbs, cfg))
    state = {"g": dict(g), "elbo": [], "round": 0, "hyper_adam": None,
             "z_scale": np.ones(1)}
    state = steps.strategy.server_round(state, msgs)
    after = elbo(state["g"])
    assert state["elbo"][-1] == pytest.approx(after, rel=1e-9)
    assert after >= before - 1e-8


@pytest.mark.parametrize("sizes", [[5, 5, 4, 4], [6, 3], [7]])
def test_latent_sweeps_kernel_matches_lapack(sizes):
    """The numba sweeps equal the LAPACK ones (the path beyond LATENT_Q_SMALL)."""
    rng = np.random.default_rng(3)
    sizes = np.array(sizes, dtype=np.int64)
    N, Q, K = int(sizes.sum()), 3, len(sizes)
    S = rng.normal(size=(N, 40))
    G, C = S @ S.T, S @ rng.normal(size=(40, Q))
    prior, kt, B0 = rng.uniform(0.5, 2, K), rng.uniform(0.1, 1, K), rng.normal(size=(Q, K))
    assert N <= LATENT_Q_SMALL
    for n_sweeps in (0, 1, 3):
        info, m, Lpad, B = latent_sweeps(G, C, sizes, prior, kt, B0, 0.3, n_sweeps,
                                             np.ones(K, dtype=bool))
        means, Ls, B_ref = _local_sweeps_lapack(G, C, sizes, prior, kt, B0, 0.3, n_sweeps)
        assert info == 0
        np.testing.assert_allclose(m, np.concatenate(means), rtol=1e-10, atol=1e-12)
        for k, q in enumerate(sizes):
            np.testing.assert_allclose(Lpad[k, :q, :q], Ls[k], rtol=1e-10, atol=1e-12)
            assert not Lpad[k, q:].any() and not Lpad[k, :, q:].any()
        np.testing.assert_allclose(B, B_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("use", COMPONENTS)
def test_client_gram_statistics_match_the_rows(use):
    """IlmmClientGram's S R and the message's |R|^2, W R equal the row computations."""
    rng = np.random.default_rng(5)
    n, M, Mi, Q, Rg, Rl = 12, 4, 3, 3, 2, 2
    cfg = IlmmConfig(use_global=use[0], use_deviation=use[1], use_local=use[2], n_outputs=Q,
                     rank_global=Rg, rank_local=Rl)
    g, loc = random_ilmm(rng, 1, M, Mi, Q, Rg, Rl, 1, cfg)
    X, Y = rng.normal(size=(n, 1)), rng.normal(size=(n, Q))
    gbs = global_bases(X, g, cfg) if cfg.global_basis else None
    lbs = local_bases(X, loc, cfg) if cfg.use_local else None
    gram = IlmmClientGram(Y, gbs, lbs, cfg)
    stack = (list(gbs) if cfg.use_deviation else []) + (list(lbs) if cfg.use_local else [])
    R = Y.copy()
    if cfg.use_global:
        R -= np.column_stack([b.W.T @ m for b, m in zip(gbs, g["mg"])]) @ g["Bg"].T
    if stack:
        np.testing.assert_allclose(gram.global_residual(g, gbs),
                                   np.vstack([b.W @ R for b in stack]), atol=1e-12)
    P = Y.copy()
    if cfg.use_deviation:
        P -= np.column_stack([b.W.T @ m for b, m in zip(gbs, loc["md"])]) @ loc["Bd"].T
    if cfg.use_local:
        P -= np.column_stack([b.W.T @ m for b, m in zip(lbs, loc["mu"])]) @ loc["Bl"].T
    rr, WR = gram.partial_residual(loc, gbs)
    np.testing.assert_allclose(rr, np.sum(P * P), rtol=1e-12)
    if cfg.use_global:
        np.testing.assert_allclose(WR, np.vstack([b.W @ P for b in gbs]), atol=1e-12)
    else:
        assert WR is None


def test_latent_q_dispatch_numba_small_lapack_large(monkeypatch):
    """latent_q gives the same q and loadings on both sides of LATENT_Q_SMALL."""
    from skfed.gaussian_process import _closed_form

    rng = np.random.default_rng(4)
    sizes = [6, 6, 3]
    S = rng.normal(size=(15, 30))
    G, C = S @ S.T, S @ rng.normal(size=(30, 2))
    args = (G, C, sizes, [0.5, 0.5, 1.0], rng.normal(size=(2, 3)), 0.2, [0.3, 0.2, 0.1], 2)
    small = _closed_form.latent_q(*args)
    monkeypatch.setattr(_closed_form, "LATENT_Q_SMALL", 0)
    large = _closed_form.latent_q(*args)
    for a, b in zip(small[0] + small[1] + [small[2]], large[0] + large[1] + [large[2]]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_latent_q_want_cov_skips_only_the_final_covariances():
    """Unwanted covariances are zeros; the wanted ones, the means and loadings unchanged."""
    from skfed.gaussian_process import _closed_form

    rng = np.random.default_rng(6)
    S = rng.normal(size=(9, 25))
    args = (S @ S.T, S @ rng.normal(size=(25, 2)), [4, 5], [2.0, 1.0], rng.normal(size=(2, 2)),
            0.5, [0.1, 0.2], 2)
    full = _closed_form.latent_q(*args)
    part = _closed_form.latent_q(*args, want_cov=[False, True])
    assert not part[1][0].any()
    np.testing.assert_array_equal(part[1][1], full[1][1])
    np.testing.assert_array_equal(np.concatenate(part[0]), np.concatenate(full[0]))
    np.testing.assert_array_equal(part[2], full[2])
