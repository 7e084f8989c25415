"""The pFedHGP evidence lower bound: closed forms and analytic gradients.

Notation follows the paper (Sec. 3); the closed forms and analytic gradients
are derived here (the paper uses automatic differentiation, Sec. 3.7).
Everything is in whitened coordinates: the global block ``u_g = L_g v_g``
(``K_gg = L_g L_g^T``), the deviation block under "W2" (``delta_i = L_g
v_delta`` with prior ``v_delta ~ N(0, phi I)``) and the local block ``u_i =
L_l v_u``. A variational factor ``N(m, S)`` of a whitened variable is stored
as its mean ``m`` and the lower Cholesky factor ``L`` of ``S``. Positive
hyperparameters are stored as softplus pre-images ("raw" values).

The model per client ``i`` (scalar output)::

    y = f_g(x) + f_delta_i(x) + f_l_i(x) + eps,   eps ~ N(0, sigma^2)

with ``W = L_g^{-1} K_g(Z_g, X_i)`` and ``V = L_l^{-1} K_l(Z_i, X_i)``::

    mu = W^T (m_g + m_delta) + V^T m_u
    E  = |y - mu|^2 + |L_g^T W|^2 + |L_delta^T W|^2 + |L_u^T V|^2
         + kappa * t_g + t_l,     kappa = 1 + phi
    t_g = n s_g - |W|_F^2,  t_l = n s_l - |V|_F^2   (residual traces)
    ELL = -n/2 log(2 pi sigma^2) - E / (2 sigma^2)
    ELBO = sum_i (ELL_i - KL_delta_i - KL_u_i) - KL_g      (paper eq. 19)

Gradients with respect to kernel hyperparameters and inducing inputs go
through ``W`` by the adjoint method (derived here): ``W = L^{-1} C``
gives ``C_bar = L^{-T} W_bar`` and ``L_bar = -L^{-T} W_bar W^T``, then the
Cholesky reverse mode gives ``K_zz_bar`` and :func:`kernel_adjoint` the
kernel parameters.
"""

import weakref
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg.blas import dtrsm

from ._covariance import (
    inducing_cholesky,
    kernel_adjoint_cross,
    kernel_adjoint_sym,
    kernel_args,
    kernel_matrix,
)
from ._linalg import chol_backward, chol_jitter, solve_triangular

LOG2PI = np.log(2.0 * np.pi)


# ----------------------------------------------------------------------------
# scalar helpers
# ----------------------------------------------------------------------------
def softplus(x):
    """``log(1 + exp(x))``, stable."""
    return np.logaddexp(0.0, x)


def softplus_inv(y):
    """Inverse of :func:`softplus` (paper Sec. 3.7) for ``y > 0``, in a stable form."""
    y = np.asarray(y, dtype=float)
    return y + np.log(-np.expm1(-y))


def sigmoid(x):
    """Logistic function, the derivative of :func:`softplus`."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=float)))


# ----------------------------------------------------------------------------
# model configuration
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelConfig:
    """Structural choices shared by clients and server (never data)."""

    kind: int = 0
    ard: bool = False
    n_features: int = 1
    use_global: bool = True
    use_deviation: bool = True
    use_local: bool = True
    jitter: float = 1e-6
    learn_inducing: bool = True

    @property
    def global_basis(self):
        """Whether the shared basis ``Z_g`` (global or deviation component) exists."""
        return self.use_global or self.use_deviation

    @property
    def kappa_fixed(self):
        return 1.0 if self.use_global else 0.0

    def lengthscale(self, raw):
        ls = softplus(np.asarray(raw, dtype=float))
        if ls.shape == (self.n_features,):  # ARD (or one feature): already the vector
            return ls
        if ls.size == 1:  # one shared lengthscale
            return np.repeat(ls.reshape(-1), self.n_features)
        return np.broadcast_to(ls, (self.n_features,)).astype(float)

    def fold_lengthscale_grad(self, g_ls, raw):
        """Gradient with respect to the raw lengthscale(s) from the ARD gradient."""
        g = g_ls if self.ard else np.array([g_ls.sum()])
        return g * sigmoid(raw)


# ----------------------------------------------------------------------------
# one sparse basis: W = L^{-1} K(Z, X)
# ----------------------------------------------------------------------------
@dataclass
class Basis:
    """``W = L^{-1} K(Z, X)`` with the factor ``L`` and the cross-covariance kept.

    ``K`` is ``k(X, Z)`` (shape ``(n, M)``, the transpose of ``K(Z, X)``): the
    adjoint reads it instead of evaluating the kernel again. ``gram`` is
    ``W W^T``, formed on first use: the quadratic terms of the ELBO and the
    closed forms all reduce to it, an ``M x M`` matrix instead of ``M x n``
    products. ``sqnorm`` (``|W|_F^2``) and ``cross`` (``W W_other^T``) are
    kept the same way: a client reuses its bases over a round and across
    rounds (see ``_steps.BasisCache``).
    """

    L: np.ndarray  # chol(K_zz + jitter)
    W: np.ndarray  # (M, n)
    jitter: float
    K: np.ndarray = None  # k(X, Z), (n, M)
    ls: np.ndarray = None  # the kernel's lengthscales and variance (constrained)
    var: float = None
    _gram: np.ndarray = None
    _sqnorm: float = None
    _cross: list = field(default_factory=list)  # [(weak ref to other basis, W W_other^T)]
    # (s2, phi, chol of the optimal q(delta) covariance, and terms of it: see _closed_form)
    _dev_cov: tuple = None
    _proj: tuple = None  # (y, W y) of the last projected target vector
    # (y, and the contiguous arrays of this basis _closed_form.small_round reads)
    _small: tuple = None

    def project(self, y):
        """``W y``, kept for the last ``y`` (compared by identity: a client's
        targets are one array across rounds, see ``_steps.BasisCache.targets``)."""
        if self._proj is None or self._proj[0] is not y:
            self._proj = (y, self.W @ y)
        return self._proj[1]

    @property
    def gram(self):
        if self._gram is None:
            self._gram = self.W @ self.W.T
        return self._gram

    @property
    def sqnorm(self):
        if self._sqnorm is None:
            self._sqnorm = float(np.trace(self.gram))  # the Gram matrix is needed anyway
        return self._sqnorm

    def cross(self, other):
        """``W W_other^T``, kept per ``other`` basis (compared by identity).

        Weak references: a kept global basis must not keep every local basis
        of its rounds alive.
        """
        self._cross = [(ref, C) for ref, C in self._cross if ref() is not None]
        for ref, C in self._cross:
            if ref() is other:
                return C
        C = self.W @ other.W.T
        self._cross.append((weakref.ref(other), C))
        return C

    def quad(self, L):
        """``|L^T W|_F^2 = sum(L * (W W^T) L)``."""
        return float((L * (self.gram @ L)).sum())


def stacked_gram(bases):
    """Gram matrix ``B B^T`` of the stacked bases ``B = [W_1; W_2; ...]``.

    Diagonal blocks are the bases' own Gram matrices, the block below the
    diagonal the transpose of the one above (exactly symmetric).
    """
    edges = [0]
    for b in bases:
        edges.append(edges[-1] + b.W.shape[0])
    G = np.empty((edges[-1], edges[-1]))
    for i, bi in enumerate(bases):
        for j, bj in enumerate(bases):
            G[edges[i]:edges[i + 1], edges[j]:edges[j + 1]] = (
                bi.gram if i == j else (bi.cross(bj) if i < j else bj.cross(bi).T))
    return G


#: up to this many inducing inputs their Cholesky factor is one numba pass (no
#: LAPACK call overhead); beyond, LAPACK's blocked factorization is faster
SMALL_INDUCING = 128


def basis_forward(X, Z, ls, var, kind, jitter):
    """Whitened interpolation basis of inputs ``X`` on inducing inputs ``Z``."""
    info = 1
    X, Z = kernel_args(X, Z)
    if Z.shape[0] <= SMALL_INDUCING:
        info, L = inducing_cholesky(Z, ls, var, kind, jitter)
        used = jitter
    if info != 0:  # large Z, or the jitter must escalate
        L, used = chol_jitter(kernel_matrix(Z, Z, ls, var, kind), jitter)
    Kxz = kernel_matrix(X, Z, ls, var, kind)
    # W^T = K(X, Z) L^{-T}: the right-sided solve on the row-major (n, M) block
    # is about twice as fast as the left-sided one on K(Z, X)
    Wt = dtrsm(1.0, L, Kxz, side=1, lower=1, trans_a=1)
    return Basis(L=L, W=Wt.T, jitter=used, K=Kxz, ls=ls, var=float(var))


def basis_backward(X, Z, ls, var, kind, basis, A, P, E, var_direct=0.0, WE=None):
    """Gradients (variance, ARD lengthscales, Z) of a function of ``W``.

    The adjoint of ``W`` comes in the factored form ``W_bar = A W + P E^T``
    (``A`` of shape ``(M, M)`` or None for zero, ``P`` of shape ``(M, k)``,
    ``E`` of shape ``(n, k)``), which every caller's adjoint has. Then
    ``C_bar^T = W^T (L^{-T} A)^T + E (L^{-T} P)^T``: one ``(n, M) x (M, M)``
    product, the low-rank part handed to the kernel adjoint unformed, and
    ``L_bar = -C_bar W^T`` only ``M x M`` products with the Gram matrix.
    ``var_direct`` adds a direct derivative with respect to the variance
    (from the trace of ``diag k(X, X) = var``). ``WE`` is ``W E`` if the
    caller has it (saves a pass over ``W``).
    """
    L, W = basis.L, basis.W
    M = L.shape[0]
    if A is not None:  # L^{-T} [A, P] in one solve
        LAP = solve_triangular(L, np.concatenate((A, P), axis=1), lower=True, trans=1)
        LA, LP = LAP[:, :M], np.ascontiguousarray(LAP[:, M:])
    else:
        LP = solve_triangular(L, P, lower=True, trans=1, check_finite=False)
    L_bar = -LP @ (W @ E if WE is None else WE).T
    if A is not None:
        G = W.T @ LA.T  # (n, M)
        L_bar -= LA @ basis.gram
    else:
        G = np.zeros_like(basis.K)
    Kzz_bar = chol_backward(L, L_bar)
    X, Z = kernel_args(X, Z)
    gv1, gl1, gZ1 = kernel_adjoint_sym(Z, ls, var, kind, Kzz_bar)
    gv2, gl2, gZc = kernel_adjoint_cross(X, Z, ls, var, kind, basis.K, G, E, LP)
    return gv1 + gv2 + var_direct, gl1 + gl2, gZ1 + gZc


# ----------------------------------------------------------------------------
# the ELBO's terms and gradient pieces every model shares (scalar and
# multi-output, paper mode and closed form): one latent's block at a time
# ----------------------------------------------------------------------------
def basis_adjoint(kappa, blocks, s2, m):
    """``(kappa I - sum_c beta_c L_c L_c^T) / s2``, the part of a basis's adjoint
    that multiplies ``W`` (``blocks``: ``(beta_c, L_c)`` pairs of the components
    using the basis, ``beta_c`` the squared norm of the latent's loading column,
    1 in the scalar model; ``kappa`` the weight of the residual trace)."""
    A = kappa * np.eye(m)
    for beta, L in blocks:
        A -= L @ L.T if beta == 1.0 else beta * (L @ L.T)  # the same bits, one pass less
    A /= s2
    return A


def kernel_grads(X, Z, ls_raw, cfg, basis, A, P, E, var_direct=0.0, WE=None):
    """:func:`basis_backward` at the kernel that formed ``basis``: the gradients
    with respect to its variance (constrained), its raw lengthscales ``ls_raw``
    and ``Z`` (zero when the inducing inputs are fixed)."""
    gv, gls, gZ = basis_backward(X, Z, basis.ls, basis.var, cfg.kind, basis, A, P, E,
                                 var_direct=var_direct, WE=WE)
    return (gv, cfg.fold_lengthscale_grad(gls, ls_raw),
            gZ if cfg.learn_inducing else np.zeros_like(gZ))


def block_grads(basis, We, L, s2, beta=1.0, m=None, prior_var=1.0):
    """Gradients of a block's expected log-likelihood (minus its KL when the mean
    ``m`` is given) with respect to its whitened mean and covariance factor:
    ``W e / s2`` and ``-beta tril(W W^T L) / s2`` (``We = W e``, ``e`` the
    residual times the loading column)."""
    gm = We / s2
    T = np.tril(basis.gram @ L)
    gL = (-T if beta == 1.0 else -beta * T) / s2  # the same bits, one pass less
    if m is not None:
        km, kL = kl_whitened_grads(m, L, prior_var)
        gm -= km
        gL -= kL
    return gm, gL


def expected_log_lik(n_values, E, s2):
    """``E_q[log N(y | f, s2 I)]`` of ``n_values`` targets with expected squared error ``E``."""
    return -0.5 * n_values * (LOG2PI + np.log(s2)) - E / (2.0 * s2)


def noise_grad(n_values, E, s2, raw):
    """Gradient of ``-n/2 log s2 - E / (2 s2)`` with respect to the raw noise."""
    return np.asarray((-n_values / (2 * s2) + E / (2 * s2 * s2)) * sigmoid(raw))


def phi_grad(a, D, n_coef, s2, phi, raw):
    """Gradient with respect to the raw ``phi`` of ``-phi a / (2 s2)`` (the
    deviation's residual trace ``a``) minus ``KL(q(delta_i) || N(0, phi I))``
    (``D = |m_delta|^2 + tr S_delta`` over ``n_coef`` coefficients)."""
    return np.asarray((-a / (2 * s2) + 0.5 * (D / phi**2 - n_coef / phi)) * sigmoid(raw))


def deviation_kl(D, logdet, n_coef, phi):
    """``KL(q(delta) || N(0, phi I))`` summed over blocks from their totals: ``D``,
    the log-determinant of the covariances and the number of coefficients."""
    return 0.5 * (D / phi - n_coef + n_coef * np.log(phi) - logdet)


# ----------------------------------------------------------------------------
# KL terms (whitened)
# ----------------------------------------------------------------------------
def kl_whitened(m, L, prior_var=1.0):
    """``KL(N(m, L L^T) || N(0, prior_var I))``."""
    dim = m.shape[0]
    quad = ((L * L).sum() + m @ m) / prior_var
    return 0.5 * (quad - dim + dim * np.log(prior_var) - 2.0 * np.log(np.abs(np.diag(L))).sum())


def kl_whitened_grads(m, L, prior_var=1.0):
    """Gradients of :func:`kl_whitened` with respect to ``m`` and ``L``."""
    gL = L / prior_var - np.diag(1.0 / np.diag(L))
    return m / prior_var, gL


# ----------------------------------------------------------------------------
# the client's part of the ELBO
# ----------------------------------------------------------------------------
def unpack_global(g, cfg):
    """Constrained global quantities from the raw global parameters."""
    out = {"noise": float(softplus(g["noise"]))}
    if cfg.global_basis:
        out["ls"] = cfg.lengthscale(g["ls_g"])
        out["var"] = float(softplus(g["var_g"]))
    out["phi"] = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
    return out


def global_basis(X, g, cfg):
    """The client's basis on ``Z_g`` at the broadcast global parameters."""
    c = unpack_global(g, cfg)
    return basis_forward(X, g["Zg"], c["ls"], c["var"], cfg.kind, cfg.jitter)


def local_basis(X, loc, cfg):
    ls = cfg.lengthscale(loc["ls_l"])
    return basis_forward(X, loc["Zl"], ls, float(softplus(loc["var_l"])), cfg.kind, cfg.jitter)


def client_terms(X, y, g, loc, cfg, gb=None, lb=None, want_local=False, want_global=False,
                 want_local_hyper=None):
    """The client's ELBO contribution ``ELL_i - KL_delta_i - KL_u_i`` and gradients.

    Parameters
    ----------
    X, y : ndarray
        The client's rows (never leave the client).
    g : dict
        Raw global parameters (broadcast): ``Zg, ls_g, var_g, phi, noise, mg, Lg``.
    loc : dict
        Raw local parameters: ``Zl, ls_l, var_l, md, Ld, mu, Lu``.
    cfg : ModelConfig
    gb, lb : Basis or None
        Precomputed global / local basis (recomputed if None).
    want_local : bool
        Gradients with respect to every local parameter.
    want_global : bool
        Gradients with respect to the global parameters (the message of Alg. 1).
    want_local_hyper : bool or None
        Gradients of the local kernel (``Zl, ls_l, var_l``); defaults to
        ``want_local``.

    Returns
    -------
    value : float
    grads_local : dict
    grads_global : dict
    stats : dict
        ``E`` (expected squared error), ``t_g``, ``t_l``, ``D`` and the
        bases, for closed-form updates.
    """
    if want_local_hyper is None:
        want_local_hyper = want_local
    c = unpack_global(g, cfg)
    s2, phi = c["noise"], c["phi"]
    n = y.shape[0]
    mu_vec = np.zeros(n)
    mbar = None
    if cfg.global_basis:
        if gb is None:
            gb = global_basis(X, g, cfg)
        W = gb.W
        M = W.shape[0]
        mbar = np.zeros(M)
        if cfg.use_global:
            mbar = mbar + g["mg"]
        if cfg.use_deviation:
            mbar = mbar + loc["md"]
        mu_vec += W.T @ mbar
    if cfg.use_local:
        if lb is None:
            lb = local_basis(X, loc, cfg)
        V = lb.W
        mu_vec += V.T @ loc["mu"]
    e = y - mu_vec
    E = float(e @ e)
    stats = {"gb": gb, "lb": lb, "t_g": 0.0, "t_l": 0.0, "D": 0.0}
    kappa = 0.0
    if cfg.global_basis:
        kappa = cfg.kappa_fixed + (phi if cfg.use_deviation else 0.0)
        t_g = n * c["var"] - gb.sqnorm
        stats["t_g"] = t_g
        E += kappa * t_g
        if cfg.use_global:
            E += gb.quad(g["Lg"])
        if cfg.use_deviation:
            E += gb.quad(loc["Ld"])
    if cfg.use_local:
        var_l = float(softplus(loc["var_l"]))
        t_l = n * var_l - lb.sqnorm
        stats["t_l"] = t_l
        E += lb.quad(loc["Lu"]) + t_l
    value = expected_log_lik(n, E, s2)
    if cfg.use_deviation:
        stats["D"] = float(np.sum(loc["Ld"] ** 2) + loc["md"] @ loc["md"])
        value -= kl_whitened(loc["md"], loc["Ld"], phi)
    if cfg.use_local:
        value -= kl_whitened(loc["mu"], loc["Lu"])
    stats["E"] = E
    stats["n"] = n
    stats["e"] = e

    gl, gg = {}, {}
    # the projections of the residual every gradient below shares (one pass each)
    We = W @ e if cfg.global_basis and (want_local or want_global) else None
    Ve = V @ e if cfg.use_local and (want_local or want_local_hyper) else None
    if want_local or want_local_hyper:
        if cfg.use_deviation and want_local:
            gl["md"], gl["Ld"] = block_grads(gb, We, loc["Ld"], s2, m=loc["md"], prior_var=phi)
        if cfg.use_local:
            if want_local:
                gl["mu"], gl["Lu"] = block_grads(lb, Ve, loc["Lu"], s2, m=loc["mu"])
            if want_local_hyper:
                # V_bar = (mu e^T - S_u V + V) / s2
                A = basis_adjoint(1.0, [(1.0, loc["Lu"])], s2, V.shape[0])
                gv, gl["ls_l"], gl["Zl"] = kernel_grads(
                    X, loc["Zl"], loc["ls_l"], cfg, lb, A, loc["mu"][:, None] / s2,
                    e[:, None], var_direct=-n / (2 * s2), WE=Ve[:, None])
                gl["var_l"] = np.asarray(gv * sigmoid(loc["var_l"]))
    if want_global:
        gg["noise"] = noise_grad(n, E, s2, g["noise"])
        if cfg.use_global:
            gg["mg"], gg["Lg"] = block_grads(gb, We, g["Lg"], s2)
        if cfg.use_deviation:
            gg["phi"] = phi_grad(stats["t_g"], stats["D"], M, s2, phi, g["phi"])
        if cfg.global_basis:
            # W_bar = (mbar e^T - (S_g + S_delta) W + kappa W) / s2
            blocks = [(1.0, src[k]) for on, src, k in ((cfg.use_global, g, "Lg"),
                                                       (cfg.use_deviation, loc, "Ld")) if on]
            A = basis_adjoint(kappa, blocks, s2, M)
            gv, gg["ls_g"], gg["Zg"] = kernel_grads(
                X, g["Zg"], g["ls_g"], cfg, gb, A, mbar[:, None] / s2, e[:, None],
                var_direct=-kappa * n / (2 * s2), WE=We[:, None])
            gg["var_g"] = np.asarray(gv * sigmoid(g["var_g"]))
    return float(value), gl, gg, stats


def server_kl(g, cfg):
    """``KL_g = sum_r KL(q(u_g^(r)) || p(u_g^(r)))`` and its gradients (``mg``,
    ``Lg``): one block in the scalar model, one per latent (stacked) in the
    multi-output one; zero without a global component."""
    if not cfg.use_global:
        return 0.0, {}
    mg, Lg = g["mg"], g["Lg"]
    ms, Ls = mg.reshape(-1, mg.shape[-1]), Lg.reshape((-1,) + Lg.shape[-2:])
    gm, gL = np.empty_like(ms), np.empty_like(Ls)
    kl = 0.0
    for r in range(ms.shape[0]):
        kl += kl_whitened(ms[r], Ls[r])
        gm[r], gL[r] = kl_whitened_grads(ms[r], Ls[r])
    return kl, {"mg": gm.reshape(mg.shape), "Lg": gL.reshape(Lg.shape)}


# ----------------------------------------------------------------------------
# closed forms (CAVI mode, derived here; not in the paper)
# ----------------------------------------------------------------------------


def optimal_phi(D, t_g, n_clients, M, s2):
    """Closed-form deviation scale: the positive zero of eq. 28 summed over clients.

    Derived here; the paper takes gradient steps on ``phi``.
    """
    a = t_g / s2
    if D <= 0:
        return 1e-8
    return 2.0 * D / (n_clients * M + np.sqrt((n_clients * M) ** 2 + 4.0 * a * D))
