"""Predictive moments of pFedHGP: the per-latent terms of both models, the multi-output sums.

Each sparse latent (global, deviation or local, one of each in the scalar
model, one per latent coordinate in the multi-output model) contributes at
test rows the mean ``W^T m`` and the covariance ``A^T A + kappa (K - W^T W)``
with ``W = L_z^{-1} k(Z, X_*)`` and ``A = L^T W`` (paper eq. 30 for the
scalar model): :func:`prediction_basis` and :func:`latent_moments`, which
:func:`scalar_moments` adds up with unit loadings (plus a site's random
effects and linear trend, :mod:`._random_effects`, :mod:`._site_trend`).

Multi-output (ILMM, paper Sec. 4.2, eqs. 38-39): for client ``i`` at a test input ``x``::

    mu_i(x)    = B_g h_g(x) + B_delta_i h_delta_i(x) + B_l_i h_l_i(x)
    Sigma_i(x) = sum_c B_c diag_r(a_r^T S_r a_r + kappa_c res_r(x)) B_c^T + s2 I_Q

``res_r(x) = k_r(x, x) - q_r(x, x)`` is the sparse-GP residual of latent ``r``
(``kappa = 1, phi, 1`` for the global, deviation and local components): the
``R_i(x)`` term of eq. 39 mapped through the loadings. The same sums with
full latent covariances over the rows give the joint covariance of all rows
and outputs (used by ``sample_y``).

A population row (``groups=None`` or an unseen client) has no deviation or
local loadings of its own. Its deviation and local latents follow their
priors (``phi k_g^(r)``, and ``k_l^(r)`` with the clients' median local
lengthscale of latent ``r``), mapped through the clients' average loading
outer product ``mean_i b_i^(r) b_i^(r)T``: the covariance of ``b h`` when the
new client's loading column is drawn from the fitted clients' loadings. The
outer products and lengthscales are those the clients released in the last
round (the server state's ``released``); without them (``population_local=
"none"``) both terms are left out.
"""

import numpy as np
from scipy.linalg import solve_triangular

from ._covariance import kernel_args
from ._elbo import softplus
from ._linalg import chol_jitter, tril_unpack
from ._covariance import kernel_matrix
from ._random_effects import effects_design, effects_moments
from ._site_trend import site_trend_moments


def prediction_basis(Xs, Z, ls, var, kind, jitter):
    """``W = L_z^{-1} k(Z, X_*)`` at the test rows ``Xs`` (``L_z``: the jittered
    Cholesky factor of ``k(Z, Z)``)."""
    Zr, Z = kernel_args(Z, Z)  # the kernels' one specialization (see kernel_args)
    L, _ = chol_jitter(kernel_matrix(Zr, Z, ls, var, kind), jitter)
    return solve_triangular(L, kernel_matrix(*kernel_args(Xs, Z), ls, var, kind).T, lower=True)


def prior_cov(Xs, ls, var, kind, joint):
    """The kernel over the rows ``Xs``: ``k(X_*, X_*)`` if ``joint``, else its diagonal."""
    if not joint:
        return np.full(Xs.shape[0], var)
    return kernel_matrix(*kernel_args(Xs, Xs), ls, var, kind)


def sparse_residual(W, K, joint):
    """``K - W^T W`` (or its diagonal): the prior covariance the inducing inputs miss."""
    return K - (W.T @ W if joint else np.sum(W * W, axis=0))


def latent_moments(W, m, L, res, joint, kappa=1.0):
    """Mean ``W^T m`` and covariance ``A^T A + kappa res`` (``A = L^T W``) of one latent.

    ``W`` is the latent's basis at the test rows, ``m`` and ``L`` its
    whitened posterior mean and covariance factor, ``res`` its
    :func:`sparse_residual` and ``kappa`` the scale of its prior (``phi`` for
    a deviation). Diagonal covariances unless ``joint``.
    """
    A = L.T @ W
    return W.T @ m, (A.T @ A if joint else np.sum(A * A, axis=0)) + kappa * res


def gaussian_draws(rng, mean, cov, n_samples, jitter):
    """``n_samples`` draws of ``N(mean, cov)`` (normalized scale), shape ``(n_samples, n)``.

    Through the Cholesky factor, which is unique: two fits equal to rounding
    give draws equal to rounding. (``multivariate_normal`` factors by SVD,
    whose eigenvectors turn freely in a repeated eigenvalue's eigenspace.)
    """
    L, _ = chol_jitter(np.asarray(cov, dtype=float), jitter)
    return mean + rng.standard_normal((n_samples, mean.shape[0])) @ L.T


def _kernel_basis(Xs, Z, ls_raw, var_raw, cfg, jitter):
    """:func:`prediction_basis` at a scalar latent's raw kernel parameters, with its
    lengthscales and variance."""
    ls = cfg.lengthscale(ls_raw)
    var = float(softplus(var_raw))
    return prediction_basis(Xs, Z, ls, var, cfg.kind, jitter), ls, var


def population_local(cfg, released):
    """The prior of a new client's local GP: the clients' median released kernel,
    ``(lengthscales, variance)``.

    ``None`` if the clients released nothing (``population_local="none"``).
    """
    if released is None or "var_l" not in released:
        return None
    ls = np.median(softplus(released["ls_l"]), axis=0)
    var = float(np.median(softplus(released["var_l"])))
    return cfg.lengthscale(np.log(np.expm1(ls))), var


def scalar_moments(Xs, index, cfg, g, locs, jitter, phi, full, latent=False, released=None,
                   random_effects=None, effects_cov=None):
    """Predictive mean and variance (diagonal) or covariance of the scalar model,
    normalized scale.

    Rows of one client share its deviation and local functions; rows of
    the population (index -1) are treated as one new client, whose
    deviation and local functions follow their priors.

    Parameters
    ----------
    Xs, index, g, locs, jitter, latent
        As :func:`ilmm_moments` (``Xs`` in the model's units).
    cfg : ModelConfig
    phi : float
        The deviation's scale.
    full : bool
        The joint ``(n, n)`` covariance, else its diagonal.
    released : dict or None
        The clients' last-round release (:func:`population_local`).
    random_effects : str or None
        The random effects' design (:func:`._random_effects.effects_design`).
    effects_cov : ndarray or None
        The random effects' covariance (a new client's prior), or None.
    """
    n = Xs.shape[0]
    mean = np.zeros(n)
    cov = np.zeros((n, n)) if full else np.zeros(n)
    s2 = float(softplus(g["noise"]))
    if cfg.global_basis:
        Ws, ls_g, var_g = _kernel_basis(Xs, g["Zg"], g["ls_g"], g["var_g"], cfg, jitter)
        Kg = prior_cov(Xs, ls_g, var_g, cfg.kind, full)
        res_g = sparse_residual(Ws, Kg, full)
        if cfg.use_global:
            m, c = latent_moments(Ws, g["mg"], g["Lg"], res_g, full)
            mean += m
            cov += c
    for k in np.unique(index):
        rows = np.flatnonzero(index == k)
        blk = np.ix_(rows, rows) if full else rows
        part = 0.0
        if k >= 0:
            loc = locs[k]
            # the multi-output model's terms with unit loadings
            if cfg.use_deviation:
                m, c = latent_moments(Ws[:, rows], loc["md"], loc["Ld"], res_g[blk], full, phi)
                mean[rows] += m
                part = part + c
            if cfg.use_local:
                V, ls_l, var_l = _kernel_basis(Xs[rows], loc["Zl"], loc["ls_l"], loc["var_l"],
                                               cfg, jitter)
                Kl = prior_cov(Xs[rows], ls_l, var_l, cfg.kind, full)
                res_l = sparse_residual(V, Kl, full)
                m, c = latent_moments(V, loc["mu"], loc["Lu"], res_l, full)
                mean[rows] += m
                part = part + c
            if "re_mean" in loc:  # random_effects: q(b_i) = N(re_mean, re_cov)
                m_t, v_t = effects_moments(effects_design(Xs[rows], random_effects),
                                           loc["re_mean"], loc["re_cov"], full)
                mean[rows] += m_t
                part = part + v_t
            if "site_coef" in loc:  # site_trend="linear": b_i ~ N(coef, s2 cov)
                m_t, v_t = site_trend_moments(Xs[rows], loc["site_coef"], loc["site_cov"],
                                              full)
                mean[rows] += m_t
                part = part + s2 * v_t
        else:
            if cfg.use_deviation:
                part = part + phi * (Kg[np.ix_(rows, rows)] if full else Kg[rows])
            # a new client's random effects: b ~ N(0, Sigma)
            if effects_cov is not None:
                part = part + effects_moments(
                    effects_design(Xs[rows], random_effects),
                    np.zeros(len(effects_cov)), effects_cov, full)[1]
            prior = population_local(cfg, released) if cfg.use_local else None
            if prior is not None:
                ls_l, var_l = prior
                part = part + prior_cov(Xs[rows], ls_l, var_l, cfg.kind, full)
        cov[blk] += part
    if not latent:
        if full:
            cov[np.diag_indices(n)] += s2
        else:
            cov += s2
    return mean, cov


class _Cov:
    """Accumulates ``c(x, x') * P`` terms per point (``(n, Q, Q)``) or jointly."""

    def __init__(self, n, Q, joint):
        self.joint, self.Q = joint, Q
        self.a = np.zeros((n, Q, n, Q)) if joint else np.zeros((n, Q, Q))

    def add(self, rows, c, P):
        """``c``: latent covariance over ``rows`` (joint) or its diagonal; ``P``: Q x Q."""
        q = np.arange(self.Q)
        if self.joint:
            self.a[np.ix_(rows, q, rows, q)] += c[:, None, :, None] * P[None, :, None, :]
        else:
            self.a[rows] += c[:, None, None] * P


def _mean_outer(packed, Q):
    """Mean over clients of the packed ``Q x Q`` outer products ``packed[i]``."""
    return np.mean([tril_unpack(v, Q, symmetric=True) for v in packed], axis=0)


def ilmm_moments(Xs, index, cfg, g, locs, jitter, joint=False, latent=False, released=None):
    """Predictive mean ``(n, Q)`` and covariance (normalized units).

    Parameters
    ----------
    Xs : ndarray of shape (n, d)
    index : ndarray of shape (n,)
        Client index of each row (-1: population).
    cfg : IlmmConfig
    g, locs : dict, list of dict or None
        Raw global and client parameters (``locs`` is only read for rows of
        seen clients).
    jitter : float
    joint : bool
        ``(n, Q, n, Q)`` joint covariance of every row and output (rows of
        different clients are correlated through the global component), else
        ``(n, Q, Q)`` per row.
    latent : bool
        Leave out the observation noise.
    released : dict or None
        The clients' last-round release, stacked over clients: packed outer
        products ``Pd`` ``(T, R_g, Q(Q+1)/2)``, ``Pl`` ``(T, R_l, Q(Q+1)/2)``
        and raw local lengthscales ``ls_l`` ``(T, R_l, 1 or d)``. ``None``:
        population rows get the global part and the noise only.
    """
    n, Q = Xs.shape[0], cfg.n_outputs
    mean = np.zeros((n, Q))
    cov = _Cov(n, Q, joint)
    s2 = float(softplus(g["noise"]))
    phi = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
    everyone = np.arange(n)
    Wg = []
    for r in range(cfg.R_g):
        ls = cfg.lengthscale(g["ls_g"][r])
        W = prediction_basis(Xs, g["Zg"], ls, cfg.variance_global, cfg.kind, jitter)
        K = prior_cov(Xs, ls, cfg.variance_global, cfg.kind, joint)
        res = sparse_residual(W, K, joint)
        Wg.append((W, K, res))
        if cfg.use_global:
            b = g["Bg"][:, r]
            m, c = latent_moments(W, g["mg"][r], g["Lg"][r], res, joint)
            mean += np.outer(m, b)
            cov.add(everyone, c, np.outer(b, b))
    for k in np.unique(index):
        rows = np.flatnonzero(index == k)
        sub = np.ix_(rows, rows) if joint else rows
        if k >= 0:
            loc = locs[k]
            if cfg.use_deviation:
                for r, (W, _, res) in enumerate(Wg):
                    b = loc["Bd"][:, r]
                    m, c = latent_moments(W[:, rows], loc["md"][r], loc["Ld"][r], res[sub], joint,
                                          phi)
                    mean[rows] += np.outer(m, b)
                    cov.add(rows, c, np.outer(b, b))
            if cfg.use_local:
                for r in range(cfg.R_l):
                    ls = cfg.lengthscale(loc["ls_l"][r])
                    V = prediction_basis(Xs[rows], loc["Zl"], ls, cfg.variance_local, cfg.kind,
                                         jitter)
                    res = sparse_residual(V, prior_cov(Xs[rows], ls, cfg.variance_local, cfg.kind,
                                                       joint), joint)
                    b = loc["Bl"][:, r]
                    m, c = latent_moments(V, loc["mu"][r], loc["Lu"][r], res, joint)
                    mean[rows] += np.outer(m, b)
                    cov.add(rows, c, np.outer(b, b))
        elif released is not None:
            if cfg.use_deviation:
                for r, (_, K, _) in enumerate(Wg):
                    cov.add(rows, phi * K[sub], _mean_outer(released["Pd"][:, r], Q))
            if cfg.use_local:
                for r in range(cfg.R_l):
                    ls = np.median(softplus(released["ls_l"][:, r]), axis=0)
                    ls = np.broadcast_to(ls, (cfg.n_features,)).astype(float)
                    P = _mean_outer(released["Pl"][:, r], Q)
                    cov.add(rows, prior_cov(Xs[rows], ls, cfg.variance_local, cfg.kind, joint), P)
    if not latent:
        cov.add(everyone, np.eye(n) if joint else np.ones(n), s2 * np.eye(Q))
    return mean, cov.a
