"""Multi-output pFedHGP (ILMM, paper Sec. 3.9, 4.2): ELBO, analytic gradients, closed forms.

Client ``i`` observes ``Y_i`` of shape ``(n_i, Q)``::

    y_i(x) = B_g h_g(x) + B_delta_i h_delta_i(x) + B_l_i h_l_i(x) + eps,  eps ~ N(0, s2 I_Q)

Every latent coordinate ``r`` of every component is an independent sparse GP
with its own kernel hyperparameters: global latent ``r`` has kernel
``k_g^(r)`` on the shared inducing inputs ``Z_g``, deviation latent ``r`` has
``phi k_g^(r)`` on the same ``Z_g`` (so ``R_delta = R_g``) and local latent
``r`` has ``k_l^(r)`` on the client's ``Z_i``. The latent output variances
are fixed (the loadings carry the scale; the paper learns both, which is
redundant). Variational blocks are whitened as in :mod:`._elbo` (W2 for the
deviations) and stored stacked over latents: ``mg`` of shape ``(R_g, M)``,
``Lg`` of shape ``(R_g, M, M)`` and so on.

With ``H_c[:, r] = W_r^T m_c^(r)`` (latent means at the data) and
``V_c[:, r]`` the latent variances (``diag(W^T S W)`` plus ``kappa_c`` times
the residual ``k(x, x) - q(x, x)``; ``kappa = 1, phi, 1``), the expected
squared error is (derived here; the paper only says "federated ELBO")::

    E = |Y - H_g B_g^T - H_d B_d^T - H_l B_l^T|_F^2 + sum_c sum_r |B_c[:, r]|^2 1^T V_c[:, r]

since the latents are independent under ``q``; ``ELL = -nQ/2 log(2 pi s2) -
E / (2 s2)`` and the KL terms are those of the scalar model, one per latent.
Gradients with respect to kernel hyperparameters and inducing inputs are the
scalar adjoints per latent with ``e -> (Y - Y_hat) b`` and ``S -> |b|^2 S``
(derived here; the paper uses automatic differentiation).
"""

from dataclasses import dataclass

import numpy as np

from ._closed_form import latent_q
from ._elbo import (
    ModelConfig,
    basis_adjoint,
    basis_forward,
    block_grads,
    expected_log_lik,
    kernel_grads,
    kl_whitened,
    noise_grad,
    phi_grad,
    softplus,
    stacked_gram,
)


@dataclass(frozen=True)
class IlmmConfig(ModelConfig):
    """:class:`ModelConfig` plus the output dimension and the latent ranks."""

    n_outputs: int = 1
    rank_global: int = 1  # R_g = R_delta
    rank_local: int = 1
    variance_global: float = 1.0  # fixed latent output variances
    variance_local: float = 1.0

    @property
    def R_g(self):
        return self.rank_global if self.global_basis else 0

    @property
    def R_l(self):
        return self.rank_local if self.use_local else 0


def bases(X, Z, ls_raw, variance, cfg):
    """One whitened basis per latent: ``W_r = L_r^{-1} k_r(Z, X)`` (``k_r`` own lengthscale)."""
    return [basis_forward(X, Z, cfg.lengthscale(ls_raw[r]), variance, cfg.kind, cfg.jitter)
            for r in range(ls_raw.shape[0])]


def global_bases(X, g, cfg):
    return bases(X, g["Zg"], g["ls_g"], cfg.variance_global, cfg)


def local_bases(X, loc, cfg):
    return bases(X, loc["Zl"], loc["ls_l"], cfg.variance_local, cfg)


def _colsq(A):
    return float(np.sum(A * A))


def _local_hyper_grads(X, loc, cfg, lbs, Eres, s2):
    """Gradients with respect to the local kernel (``ls_l``, ``Zl``) given the residual."""
    if not cfg.use_local:
        return {}
    Bl = loc["Bl"]
    beta = np.sum(Bl * Bl, axis=0)
    g_ls = np.empty_like(np.asarray(loc["ls_l"], dtype=float))
    g_Z = np.zeros_like(loc["Zl"])
    for r, b in enumerate(lbs):
        # V_bar = (mu_r (E b_r)^T - beta_r S_u V + beta_r V) / s2
        A = basis_adjoint(beta[r], [(beta[r], loc["Lu"][r])], s2, b.W.shape[0])
        _, g_ls[r], gZ = kernel_grads(X, loc["Zl"], loc["ls_l"][r], cfg, b, A,
                                      loc["mu"][r][:, None] / s2, (Eres @ Bl[:, r])[:, None])
        g_Z += gZ
    return {"ls_l": g_ls, "Zl": g_Z}


def _global_kernel_grads(X, g, loc, cfg, gbs, Eres, s2, phi):
    """Gradients with respect to the global kernel (``ls_g``, ``Zg``) given the residual."""
    if not cfg.global_basis:
        return {}
    bg = np.sum(g["Bg"] ** 2, axis=0) if cfg.use_global else np.zeros(cfg.R_g)
    bd = np.sum(loc["Bd"] ** 2, axis=0) if cfg.use_deviation else np.zeros(cfg.R_g)
    M = gbs[0].W.shape[0]
    g_ls = np.empty_like(np.asarray(g["ls_g"], dtype=float))
    g_Z = np.zeros_like(g["Zg"])
    on = [(src, m, L, B, beta) for use, src, m, L, B, beta in (
        (cfg.use_global, g, "mg", "Lg", "Bg", bg),
        (cfg.use_deviation, loc, "md", "Ld", "Bd", bd)) if use]
    for r, b in enumerate(gbs):
        # W_bar = (sum_c m_c (E b_c)^T - beta_c S_c W + kappa W) / s2 over the
        # global and deviation components: A W + P E^T
        A = basis_adjoint(bg[r] + phi * bd[r],
                          [(beta[r], src[L][r]) for src, _, L, _, beta in on], s2, M)
        P = np.column_stack([src[m][r] for src, m, _, _, _ in on])
        Ecols = np.column_stack([Eres @ src[B][:, r] for src, _, _, B, _ in on])
        _, g_ls[r], gZ = kernel_grads(X, g["Zg"], g["ls_g"][r], cfg, b, A, P / s2, Ecols)
        g_Z += gZ
    return {"ls_g": g_ls, "Zg": g_Z}


def ilmm_terms(X, Y, g, loc, cfg, gbs=None, lbs=None, want_local=False, want_global=False,
               want_local_hyper=None, want_global_kernel=True, want_value=True):
    """Client ``i``'s ILMM ELBO contribution ``ELL_i - KL_delta_i - KL_u_i`` and gradients.

    Parameters and returns as :func:`skfed.gaussian_process._elbo.client_terms`,
    with ``Y`` of shape ``(n, Q)``, stacked per-latent blocks and the loadings
    ``Bg`` (global), ``Bd``, ``Bl`` (local). ``stats`` also holds the latent
    means ``H`` and variance sums ``v`` per component for the closed forms.
    With ``want_value=False`` and ``want_local=False`` only the kernels'
    gradients asked for are formed (``want_local_hyper``; ``want_global``
    with ``want_global_kernel``): they need the residual alone, not the
    value (NaN), ``E``, ``v``, the block gradients, the noise's or phi's.
    """
    if want_local_hyper is None:
        want_local_hyper = want_local
    s2 = float(softplus(g["noise"]))
    phi = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
    n, Q = Y.shape
    Yhat = np.zeros((n, Q))
    stats = {"gbs": None, "lbs": None, "n": n, "H": {}, "v": {}, "t_g": None, "t_l": None,
             "D": 0.0}
    # the bases and their residual traces tr(K - Q), one per latent
    if cfg.global_basis:
        gbs = global_bases(X, g, cfg) if gbs is None else gbs
        t_g = np.array([n * cfg.variance_global - b.sqnorm for b in gbs])
        stats.update(gbs=gbs, t_g=t_g)
    if cfg.use_local:
        lbs = local_bases(X, loc, cfg) if lbs is None else lbs
        t_l = np.array([n * cfg.variance_local - b.sqnorm for b in lbs])
        stats.update(lbs=lbs, t_l=t_l)
    # (component, bases, mean, chol, loading, residual multiplier)
    comps = []
    if cfg.use_global:
        comps.append(("g", gbs, g["mg"], g["Lg"], g["Bg"], 1.0, t_g))
    if cfg.use_deviation:
        comps.append(("d", gbs, loc["md"], loc["Ld"], loc["Bd"], phi, t_g))
    if cfg.use_local:
        comps.append(("l", lbs, loc["mu"], loc["Lu"], loc["Bl"], 1.0, t_l))
    for c, bs, m, _, B, _, _ in comps:
        H = np.column_stack([b.W.T @ m[r] for r, b in enumerate(bs)])
        stats["H"][c] = H
        Yhat += H @ B.T
    Eres = Y - Yhat
    stats["Eres"] = Eres
    if not (want_value or want_local):  # the kernels' gradients alone
        gl = _local_hyper_grads(X, loc, cfg, lbs, Eres, s2) if want_local_hyper else {}
        gg = (_global_kernel_grads(X, g, loc, cfg, gbs, Eres, s2, phi)
              if want_global and want_global_kernel else {})
        return np.nan, gl, gg, stats
    E = _colsq(Eres)
    for c, bs, m, L, B, kappa, t in comps:
        v = np.array([b.quad(L[r]) for r, b in enumerate(bs)]) + kappa * t
        stats["v"][c] = v
        E += float(np.sum(B * B, axis=0) @ v)
    value = expected_log_lik(n * Q, E, s2)
    if cfg.use_deviation:
        D = np.array([_colsq(loc["Ld"][r]) + loc["md"][r] @ loc["md"][r] for r in range(cfg.R_g)])
        stats["D"] = float(D.sum())
        value -= sum(kl_whitened(loc["md"][r], loc["Ld"][r], phi) for r in range(cfg.R_g))
    if cfg.use_local:
        value -= sum(kl_whitened(loc["mu"][r], loc["Lu"][r]) for r in range(cfg.R_l))
    stats["E"] = E

    gl, gg = {}, {}
    owners = {"g": gg, "d": gl, "l": gl}
    names = {"g": ("mg", "Lg", "Bg"), "d": ("md", "Ld", "Bd"), "l": ("mu", "Lu", "Bl")}
    prior = {"g": 1.0, "d": phi, "l": 1.0}
    for c, bs, m, L, B, _, _ in comps:
        if (c == "g" and not want_global) or (c != "g" and not want_local):
            continue
        out = owners[c]
        beta = np.sum(B * B, axis=0)
        km_name, kL_name, kB_name = names[c]
        gm, gL = np.empty_like(m), np.empty_like(L)
        for r, b in enumerate(bs):
            # the client's KLs; KL_g is the server's
            gm[r], gL[r] = block_grads(b, b.W @ (Eres @ B[:, r]), L[r], s2, beta[r],
                                       m=None if c == "g" else m[r], prior_var=prior[c])
        out[km_name], out[kL_name] = gm, gL
        out[kB_name] = (Eres.T @ stats["H"][c] - B * stats["v"][c][None, :]) / s2

    if want_local_hyper:
        gl.update(_local_hyper_grads(X, loc, cfg, lbs, Eres, s2))

    if want_global:
        gg["noise"] = noise_grad(n * Q, E, s2, g["noise"])
        if cfg.use_deviation:
            bd = np.sum(loc["Bd"] ** 2, axis=0)
            gg["phi"] = phi_grad(float(bd @ t_g), stats["D"], cfg.R_g * gbs[0].W.shape[0], s2,
                                 phi, g["phi"])
        if want_global_kernel:
            gg.update(_global_kernel_grads(X, g, loc, cfg, gbs, Eres, s2, phi))
    return float(value), gl, gg, stats


# ----------------------------------------------------------------------------
# closed forms (CAVI mode)
# ----------------------------------------------------------------------------
class IlmmClientGram:
    """Gram statistics of a client's stacked deviation and local bases (closed form).

    With ``S = [W_1; ...; W_Rg; V_1; ...; V_Rl]`` (a deviation latent shares
    its global latent's basis) the client keeps ``G = S S^T`` and ``S Y``
    (each basis keeps its projection of ``Y``, one array across rounds).
    The coordinate ascent of :func:`solve_local_ilmm` needs ``S R`` for the
    residual ``R = Y - H_g B_g^T`` and the message the partial residual
    ``Y - H_delta B_delta^T - H_l B_l^T``; both follow from ``G`` and ``S Y``
    when ``S`` holds the global bases (a deviation component), without
    another pass over the rows (derived here, as the scalar model's
    :class:`._closed_form.ClosedFormClient`).
    """

    def __init__(self, Y, gbs, lbs, cfg):
        self.cfg = cfg
        self.Y = Y
        self.dev = list(gbs) if cfg.use_deviation else []
        self.local = list(lbs) if cfg.use_local else []
        self.stack = self.dev + self.local
        self.sizes = np.array([b.W.shape[0] for b in self.stack], dtype=np.int64)
        self.off = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        if self.stack:
            self.G = stacked_gram(self.stack)
            self.SY = np.vstack([b.project(Y) for b in self.stack])
        else:  # the global component alone: nothing to stack
            self.G, self.SY = np.empty((0, 0)), np.empty((0, Y.shape[1]))

    def _blocks(self, k):
        return slice(self.off[k], self.off[k + 1])

    def _minus_fitted(self, means, B):
        """``S Y - sum_k (S S_k^T m_k) b_k^T`` over the first ``len(means)`` stacked
        latents: ``S`` times the residual of their fit."""
        C = self.SY.copy()
        for k, (m, b) in enumerate(zip(means, B.T)):
            C -= np.outer(self.G[:, self._blocks(k)] @ m, b)
        return C

    def global_residual(self, g, gbs):
        """``S R`` for ``R = Y - H_g B_g^T``."""
        if not self.cfg.use_global:
            return self.SY.copy()
        if self.cfg.use_deviation:  # S W_r^T is a block column of G
            return self._minus_fitted(g["mg"], g["Bg"])
        Hg = np.column_stack([b.W.T @ g["mg"][r] for r, b in enumerate(gbs)])
        R = self.Y - Hg @ g["Bg"].T
        return np.vstack([b.W @ R for b in self.stack])

    def partial_residual(self, loc, gbs):
        """``|R|^2`` and ``W R`` (global bases stacked) for the partial residual
        ``R = Y - H_delta B_delta^T - H_l B_l^T`` of the message."""
        cfg = self.cfg
        means = ([loc["md"][r] for r in range(len(self.dev))] if cfg.use_deviation else []) + \
            ([loc["mu"][r] for r in range(loc["mu"].shape[0])] if cfg.use_local else [])
        Y = self.Y
        if not means:
            WR = np.vstack([b.project(Y) for b in gbs]) if cfg.use_global else None
            return float(np.sum(Y * Y)), WR
        B = np.hstack(([loc["Bd"]] if cfg.use_deviation else [])
                      + ([loc["Bl"]] if cfg.use_local else []))
        SR = self._minus_fitted(means, B)
        # |R|^2 = |Y|^2 - 2 sum_k b_k^T Y^T H_k + sum_kl (b_k . b_l) m_k^T G_kl m_l, where
        # Y^T H_k = (S_k Y)^T m_k and sum_l G_kl m_l b_l^T is block k of S Y - S R
        fitted = self.SY - SR
        rr = float(np.sum(Y * Y))
        for k, mk in enumerate(means):
            blk = self._blocks(k)
            rr += float(mk @ (fitted[blk] - 2.0 * self.SY[blk]) @ B[:, k])
        if not cfg.use_global:
            return rr, None
        if cfg.use_deviation:
            return rr, SR[:self.off[len(self.dev)]]
        Hl = np.column_stack([b.W.T @ mk for b, mk in zip(self.stack, means)])
        R = Y - Hl @ B.T
        return rr, np.vstack([b.W @ R for b in gbs])


def solve_local_ilmm(X, Y, g, loc, cfg, gbs, lbs, n_sweeps=3, gram=None):
    """Coordinate ascent on the client's ILMM blocks with the global block fixed.

    Alternates (i) the optimal covariances and the jointly optimal means of
    every deviation and local latent and (ii) the jointly optimal
    ``(B_delta_i, B_l_i)``, ``n_sweeps`` times, then (i) once more; the local
    ELBO never decreases. (``q`` goes first: at ``m = 0`` the optimal loadings
    would be zero.) The bases and the partial residual ``R`` stay fixed over
    the sweeps, so they run on the stacked Gram matrix and ``S R`` alone
    (:func:`._closed_form_kernels.latent_sweeps`), from ``gram``
    (:class:`IlmmClientGram` of the same bases, formed if None).
    """
    s2 = float(softplus(g["noise"]))
    phi = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
    out = dict(loc)
    parts = []  # (mean key, chol key, loading key, bases, prior precision, kappa, t)
    if cfg.use_deviation:
        t_g = np.array([X.shape[0] * cfg.variance_global - b.sqnorm for b in gbs])
        parts.append(("md", "Ld", "Bd", gbs, 1.0 / phi, phi, t_g))
    if cfg.use_local:
        t_l = np.array([X.shape[0] * cfg.variance_local - b.sqnorm for b in lbs])
        parts.append(("mu", "Lu", "Bl", lbs, 1.0, 1.0, t_l))
    if not parts:
        return out
    if gram is None:
        gram = IlmmClientGram(Y, gbs, lbs, cfg)
    G, C, sizes = gram.G, gram.global_residual(g, gbs), gram.sizes
    prior = np.concatenate([np.full(len(part[3]), part[4]) for part in parts])
    kt = np.concatenate([part[5] * part[6] for part in parts])
    B = np.hstack([out[part[2]] for part in parts])
    means, Ls, B = latent_q(G, C, sizes, prior, B, s2, kt, n_sweeps)
    k = 0
    for km, kL, kB, bs, *_ in parts:
        r = len(bs)
        out[km], out[kL], out[kB] = np.array(means[k:k + r]), np.stack(Ls[k:k + r]), B[:, k:k + r]
        k += r
    return out
