"""The ELBO pieces: analytic gradients, bounds, closed forms."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from skfed.gaussian_process._closed_form import ClosedFormClient
from skfed.gaussian_process._elbo import (
    ModelConfig,
    client_terms,
    global_basis,
    local_basis,
    optimal_phi,
    server_kl,
    softplus,
    softplus_inv,
)
from skfed.gaussian_process._linalg import _inv_chol_spd
from skfed.gaussian_process._covariance import kernel_matrix


def random_params(rng, d, M, Mi, p):
    g = dict(
        Zg=rng.normal(size=(M, d)), ls_g=rng.normal(size=p) + 0.5, var_g=np.array(0.3),
        phi=np.array(0.2), noise=np.array(-1.0), mg=rng.normal(size=M),
        Lg=np.tril(rng.normal(size=(M, M))) * 0.3 + np.eye(M),
    )
    loc = dict(
        Zl=rng.normal(size=(Mi, d)), ls_l=rng.normal(size=p), var_l=np.array(-0.2),
        md=rng.normal(size=M), Ld=np.tril(rng.normal(size=(M, M))) * 0.3 + np.eye(M),
        mu=rng.normal(size=Mi), Lu=np.tril(rng.normal(size=(Mi, Mi))) * 0.3 + np.eye(Mi),
    )
    return g, loc


@pytest.mark.parametrize("kind", [0, 1, 2])
@pytest.mark.parametrize("ard", [False, True])
def test_analytic_gradients_match_finite_differences(kind, ard):
    rng = np.random.default_rng(kind + 3 * ard)
    n, d, M, Mi = 10, 2, 4, 3
    X, y = rng.normal(size=(n, d)), rng.normal(size=n)
    cfg = ModelConfig(kind=kind, ard=ard, n_features=d)
    g, loc = random_params(rng, d, M, Mi, d if ard else 1)
    _, gl, gg, _ = client_terms(X, y, g, loc, cfg, want_local=True, want_global=True)
    h = 1e-6
    for params, grads in ((loc, gl), (g, gg)):
        assert set(grads) == set(params)
        for key, grad in grads.items():
            base = np.array(params[key], dtype=float)
            for idx in np.ndindex(base.shape):
                if key in ("Lg", "Ld", "Lu") and idx[1] > idx[0]:
                    assert grad[idx] == 0.0  # lower-triangular parameterization
                    continue
                vals = []
                for sign in (1, -1):
                    p = base.copy()
                    p[idx] += sign * h
                    params[key] = p
                    vals.append(client_terms(X, y, g, loc, cfg)[0])
                params[key] = base
                fd = (vals[0] - vals[1]) / (2 * h)
                assert grad[idx] == pytest.approx(fd, rel=1e-5, abs=1e-6), (key, idx)


def test_server_kl_gradient():
    rng = np.random.default_rng(0)
    g, _ = random_params(rng, 1, 4, 3, 1)
    cfg = ModelConfig()
    _, grads = server_kl(g, cfg)
    h = 1e-6
    for key in ("mg", "Lg"):
        for idx in np.ndindex(g[key].shape):
            if key == "Lg" and idx[1] > idx[0]:
                continue
            p, m = dict(g), dict(g)
            p[key] = g[key].copy()
            p[key][idx] += h
            m[key] = g[key].copy()
            m[key][idx] -= h
            fd = (server_kl(p, cfg)[0] - server_kl(m, cfg)[0]) / (2 * h)
            assert grads[key][idx] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def optimal_global_only_elbo(X, y, Z, ls, var, noise, jitter):
    cfg = ModelConfig(use_deviation=False, use_local=False, jitter=jitter)
    g = dict(Zg=Z, ls_g=np.array([softplus_inv(ls)]), var_g=softplus_inv(var),
             noise=softplus_inv(noise))
    gb = global_basis(X, g, cfg)
    S, L = _inv_chol_spd(np.eye(Z.shape[0]) + gb.W @ gb.W.T / noise)
    g["mg"], g["Lg"] = S @ gb.W @ y / noise, L
    value = client_terms(X, y, g, {}, cfg, gb=gb)[0]
    return value - server_kl(g, cfg)[0]


def test_elbo_equals_exact_evidence_when_inducing_inputs_are_training_inputs():
    rng = np.random.default_rng(0)
    X = np.linspace(0, 10, 12)[:, None]
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=12)
    ls, var, noise = 1.2, 0.8, 0.05
    K = kernel_matrix(X, X, np.array([ls]), var, 0) + noise * np.eye(12)
    exact = multivariate_normal(np.zeros(12), K).logpdf(y)
    elbo = optimal_global_only_elbo(X, y, X.copy(), ls, var, noise, jitter=1e-12)
    assert elbo == pytest.approx(exact, abs=1e-6)
    # fewer inducing inputs: a strict lower bound
    assert optimal_global_only_elbo(X, y, X[::3].copy(), ls, var, noise, 1e-12) < exact - 1e-3


def closed_form_q(X, y, g, loc, cfg):
    """The optimal q(delta_i), q(u_i) of one client (the closed-form round's solve)."""
    cf = ClosedFormClient(y, g, cfg, global_basis(X, g, cfg) if cfg.global_basis else None)
    if cfg.use_local:
        cf.set_local(local_basis(X, loc, cfg))
    return cf.solve(loc)


COMPONENTS = [(True, True, True), (True, False, True), (True, True, False), (False, True, True),
              (True, False, False), (False, False, True)]


@pytest.mark.parametrize("kind", [0, 2])
@pytest.mark.parametrize("use", COMPONENTS)
def test_closed_form_round_matches_the_general_client_terms(kind, use):
    """The closed-form round works from Gram statistics; the same numbers as client_terms
    (and as plain numpy) for every set of components."""
    rng = np.random.default_rng(11 + kind)
    n, d, M, Mi = 25, 2, 5, 4
    X, y = rng.uniform(size=(n, d)), rng.normal(size=n)
    cfg = ModelConfig(kind=kind, ard=True, n_features=d, use_global=use[0],
                      use_deviation=use[1], use_local=use[2])
    g, loc = random_params(rng, d, M, Mi, d)
    gb = global_basis(X, g, cfg) if cfg.global_basis else None
    lb = local_basis(X, loc, cfg) if cfg.use_local else None
    cf = ClosedFormClient(y, g, cfg, gb)
    if lb is not None:
        cf.set_local(lb)
    loc = cf.solve(loc)
    s2, phi = float(softplus(g["noise"])), float(softplus(g["phi"]))

    # the means solve the joint normal equations, the covariances are the inverse blocks
    # (brute force)
    if cfg.use_deviation or cfg.use_local:
        B = np.vstack(([gb.W] if cfg.use_deviation else []) + ([lb.W] if cfg.use_local else []))
        prior = np.concatenate(([np.full(M, phi)] if cfg.use_deviation else [])
                               + ([np.ones(Mi)] if cfg.use_local else []))
        r0 = y - gb.W.T @ g["mg"] if cfg.use_global else y
        A = B @ B.T / s2 + np.diag(1 / prior)
        means = np.linalg.solve(A, B @ r0 / s2)
        k = 0
        if cfg.use_deviation:
            np.testing.assert_allclose(loc["md"], means[:M], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(loc["Ld"] @ loc["Ld"].T, np.linalg.inv(A[:M, :M]),
                                       rtol=1e-9)
            k = M
        if cfg.use_local:
            np.testing.assert_allclose(loc["mu"], means[k:], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(loc["Lu"] @ loc["Lu"].T, np.linalg.inv(A[k:, k:]),
                                       rtol=1e-9)

    _, gl, gg, st = client_terms(X, y, g, loc, cfg, gb=gb, lb=lb, want_global=True,
                                 want_local_hyper=True)
    if cfg.use_local:
        for key, val in cf.local_hyper_grad(X, loc).items():
            np.testing.assert_allclose(val, gl[key], rtol=1e-9, atol=1e-12)
    if cfg.global_basis:
        for key, val in cf.global_kernel_grad(X, loc).items():
            np.testing.assert_allclose(val, gg[key], rtol=1e-9, atol=1e-12)

    msg = cf.message(loc)
    r = y.copy()
    if cfg.use_deviation:
        r -= gb.W.T @ loc["md"]
    if cfg.use_local:
        r -= lb.W.T @ loc["mu"]
    assert msg["rr"] == pytest.approx(r @ r, rel=1e-10)
    assert msg["t_g"] == pytest.approx(st["t_g"], rel=1e-10, abs=1e-12)
    c = st["t_l"]
    if cfg.use_deviation:
        c += np.sum((loc["Ld"].T @ gb.W) ** 2)
        assert msg["D"] == pytest.approx(st["D"], rel=1e-12)
    if cfg.use_local:
        c += np.sum((loc["Lu"].T @ lb.W) ** 2)
    assert msg["c"] == pytest.approx(c, rel=1e-10)
    if cfg.use_global:
        np.testing.assert_allclose(msg["b"], gb.W @ r, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(msg["Phi"], gb.W @ gb.W.T, rtol=1e-12)


def hierarchy_evidence(Xs, ys, cfg, g, locs):
    """Exact log marginal likelihood of the pFedHGP prior (all clients jointly)."""
    ls_g, var_g = cfg.lengthscale(g["ls_g"]), float(softplus(g["var_g"]))
    phi, noise = float(softplus(g["phi"])), float(softplus(g["noise"]))
    X = np.vstack(Xs)
    K = kernel_matrix(X, X, ls_g, var_g, cfg.kind)
    start = 0
    for Xi, loc in zip(Xs, locs):
        sl = slice(start, start + len(Xi))
        K[sl, sl] += phi * kernel_matrix(Xi, Xi, ls_g, var_g, cfg.kind)
        K[sl, sl] += kernel_matrix(Xi, Xi, cfg.lengthscale(loc["ls_l"]),
                                   float(softplus(loc["var_l"])), cfg.kind)
        start += len(Xi)
    K += noise * np.eye(len(X))
    return multivariate_normal(np.zeros(len(X)), K).logpdf(np.concatenate(ys))


def test_hierarchical_elbo_never_exceeds_exact_evidence():
    rng = np.random.default_rng(1)
    cfg = ModelConfig()
    T, n, M, Mi = 3, 15, 6, 5
    Xs = [rng.uniform(0, 5, (n, 1)) for _ in range(T)]
    ys = [np.sin(X[:, 0]) + 0.3 * rng.normal(size=n) for X in Xs]
    g, _ = random_params(rng, 1, M, Mi, 1)
    g["Zg"] = np.linspace(0, 5, M)[:, None]
    locs = []
    for X in Xs:
        _, loc = random_params(rng, 1, M, Mi, 1)
        loc["Zl"] = np.linspace(0, 5, Mi)[:, None]
        locs.append(loc)
    exact = hierarchy_evidence(Xs, ys, cfg, g, locs)

    def elbo():
        return (sum(client_terms(X, y, g, l, cfg)[0] for X, y, l in zip(Xs, ys, locs))
                - server_kl(g, cfg)[0])

    assert elbo() < exact  # random q
    for _ in range(30):  # CAVI: closed-form blocks, the bound rises and stays below
        before = elbo()
        locs = [closed_form_q(X, y, g, l, cfg) for X, y, l in zip(Xs, ys, locs)]
        s2 = float(softplus(g["noise"]))
        P, b = np.eye(M), np.zeros(M)
        for X, y, l in zip(Xs, ys, locs):
            W, V = global_basis(X, g, cfg).W, local_basis(X, l, cfg).W
            P += W @ W.T / s2
            b += W @ (y - W.T @ l["md"] - V.T @ l["mu"]) / s2
        S, g["Lg"] = _inv_chol_spd(P)
        g["mg"] = S @ b
        assert elbo() >= before - 1e-8
        assert elbo() <= exact
    # at the CAVI fixed point the variational gradients vanish
    for X, y, l in zip(Xs, ys, locs):
        _, gl, gg, _ = client_terms(X, y, g, l, cfg, want_local=True, want_global=False)
        assert np.abs(gl["md"]).max() < 1e-3 and np.abs(gl["mu"]).max() < 1e-3


def test_closed_form_phi_maximizes_the_elbo():
    rng = np.random.default_rng(2)
    D, t_g, T, M, s2 = 7.3, 2.1, 4, 5, 0.3

    def objective(phi):
        return -phi * t_g / (2 * s2) - 0.5 * (D / phi + T * M * np.log(phi))

    best = optimal_phi(D, t_g, T, M, s2)
    grid = np.exp(np.linspace(-6, 4, 4001))
    assert objective(best) >= objective(grid).max() - 1e-9
    assert rng is not None


def test_basis_products_match_plain_numpy():
    """Gram, squared norm, cross products and the stacked Gram the closed forms use."""
    import gc

    from skfed.gaussian_process._elbo import basis_forward, stacked_gram

    rng = np.random.default_rng(5)
    X = rng.uniform(size=(30, 2))
    a = basis_forward(X, X[:6], np.array([0.4, 0.6]), 1.2, 0, 1e-8)
    b = basis_forward(X, X[10:14], np.array([0.3, 0.3]), 0.7, 2, 1e-8)
    np.testing.assert_allclose(a.gram, a.W @ a.W.T, rtol=1e-12)
    assert a.sqnorm == pytest.approx(np.sum(a.W**2), rel=1e-12)
    L = np.tril(rng.normal(size=(6, 6)))
    assert a.quad(L) == pytest.approx(np.sum((L.T @ a.W) ** 2), rel=1e-12)
    B = np.vstack([a.W, b.W])
    G = stacked_gram([a, b])
    np.testing.assert_allclose(G, B @ B.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(G, G.T)
    assert a.cross(b) is a.cross(b)  # kept
    del b
    gc.collect()
    c = basis_forward(X, X[20:23], np.array([0.3, 0.3]), 0.7, 1, 1e-8)
    np.testing.assert_allclose(a.cross(c), a.W @ c.W.T, rtol=1e-12)
    assert len(a._cross) == 1  # the dead basis's entry was dropped


@pytest.mark.parametrize("Z_rows", ["distinct", "coincident"])
def test_basis_forward_numba_and_lapack_factorizations_agree(monkeypatch, Z_rows):
    """Small M: one numba pass; large M or a failed first try: LAPACK with jitter escalation."""
    from skfed.gaussian_process import _elbo

    rng = np.random.default_rng(6)
    X = rng.uniform(size=(40, 2))
    Z = X[:8].copy() if Z_rows == "distinct" else np.repeat(X[:1], 8, axis=0)
    jitter = 1e-6 if Z_rows == "distinct" else 0.0  # coincident: the jitter must escalate
    args = (X, Z, np.array([0.5, 0.7]), 1.1, 1, jitter)
    small = _elbo.basis_forward(*args)
    assert (small.jitter > 0) if Z_rows == "coincident" else (small.jitter == jitter)
    monkeypatch.setattr(_elbo, "SMALL_INDUCING", 0)
    large = _elbo.basis_forward(*args)
    assert small.jitter == large.jitter
    np.testing.assert_allclose(small.L, large.L, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(small.W, large.W, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("use", COMPONENTS)
def test_closed_form_solve_numba_and_lapack_paths_agree(monkeypatch, use):
    """Small M + M_i: one numba pass; large: LAPACK (forced here with a zero threshold)."""
    from skfed.gaussian_process import _closed_form

    rng = np.random.default_rng(13)
    X, y = rng.uniform(size=(30, 2)), rng.normal(size=30)
    cfg = ModelConfig(ard=True, n_features=2, use_global=use[0], use_deviation=use[1],
                      use_local=use[2])
    g, loc = random_params(rng, 2, 6, 4, 2)

    def solve():
        gb = global_basis(X, g, cfg) if cfg.global_basis else None
        cf = ClosedFormClient(y, g, cfg, gb)
        if cfg.use_local:
            cf.set_local(local_basis(X, loc, cfg))
        return cf.solve(loc)

    small = solve()
    monkeypatch.setattr(_closed_form, "LATENT_Q_SMALL", 0)
    large = solve()
    for key in ("md", "Ld", "mu", "Lu"):
        if key in small:
            np.testing.assert_allclose(small[key], large[key], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("use", [(True, True, True), (True, True, False), (True, False, True)])
def test_joint_global_mean_is_the_joint_optimum_of_all_the_means(use):
    """``mean_update="joint"``: the server's ``m_g`` from the clients' reduced statistics,
    with each client's conditional solve, is the maximizer of the ELBO in all the means
    jointly (one dense solve of the whole quadratic)."""
    rng = np.random.default_rng(21)
    cfg = ModelConfig(ard=True, n_features=2, use_global=use[0], use_deviation=use[1],
                      use_local=use[2])
    M, Mi, T = 5, 4, 3
    g, _ = random_params(rng, 2, M, Mi, 2)
    s2, phi = float(softplus(g["noise"])), float(softplus(g["phi"]))
    clients = []
    for _ in range(T):
        X, y = rng.uniform(-2, 2, size=(15, 2)), rng.normal(size=15)
        loc = random_params(rng, 2, M, Mi, 2)[1]
        gb = global_basis(X, g, cfg)
        cf = ClosedFormClient(y, g, cfg, gb)
        lb = local_basis(X, loc, cfg) if cfg.use_local else None
        if lb is not None:
            cf.set_local(lb)
        clients.append((y, gb.W, lb.W if lb is not None else np.zeros((0, 15)), cf, loc))
    # dense: the means (m_g, then per client m_delta and m_u) maximize a quadratic
    k = (M if cfg.use_deviation else 0) + (Mi if cfg.use_local else 0)
    N = M + T * k
    H, h = np.eye(N), np.zeros(N)
    for i, (y, W, V, _, _) in enumerate(clients):
        B = np.zeros((N, y.shape[0]))
        B[:M] = W
        o = M + i * k
        if cfg.use_deviation:
            B[o:o + M] = W
            H[o:o + M, o:o + M] = np.eye(M) / phi
            o += M
        if cfg.use_local:
            B[o:o + Mi] = V
        H += B @ B.T / s2
        h += B @ y / s2
    means = np.linalg.solve(H, h)
    A = np.eye(M) + sum(cf.marginal_global_stats()[0] for *_, cf, _ in clients)
    a = sum(cf.marginal_global_stats()[1] for *_, cf, _ in clients)
    mg = np.linalg.solve(A, a)
    np.testing.assert_allclose(mg, means[:M], rtol=1e-8, atol=1e-10)
    g_new = dict(g, mg=mg)
    for i, (y, _, _, cf, loc) in enumerate(clients):
        cf2 = ClosedFormClient(y, g_new, cfg, cf.gb)
        if cfg.use_local:
            cf2.set_local(cf.lb)
        sol = cf2.solve(loc)
        keys = ["md"] * cfg.use_deviation + ["mu"] * cfg.use_local
        part = np.concatenate([sol[key] for key in keys])
        np.testing.assert_allclose(part, means[M + i * k:M + (i + 1) * k], rtol=1e-8,
                                   atol=1e-10)
