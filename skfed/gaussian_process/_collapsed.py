"""PFedHGP's hierarchy with each site's blocks integrated out exactly (collapsed inference).

The model is the paper's hierarchy (global GP ``g``, per-site deviation GP
``d_i ~ GP(0, phi k_g)`` and local GP ``l_i ~ GP(0, k_l)``, Gaussian noise),
optionally with the linear mixed model's parts: fixed effects ``F beta``
(``beta`` under a flat prior, so the likelihood is the restricted one, REML)
and per-site random effects ``R_i b_i``, ``b_i ~ N(0, Sigma)`` on ``[1, x]``.
The global GP enters through ``m`` inducing inputs ``Z``: with ``K = k_g(Z,
Z)``, ``Phi_i = k_g(X_i, Z)`` and ``c = K^{-1} u ~ N(0, K^{-1})``, a site's
rows are

    y_i = F_i beta + Phi_i c + s_i,   s_i ~ N(0, C_i),
    C_i = (1 + phi) K_g,ii - Phi_i K^{-1} Phi_i^T + K_l,ii + R_i Sigma R_i^T + s2 I,

the site's own blocks and the part of the global GP that ``Z`` misses kept
exactly within the site (the partially independent conditional, PITC, with
one block per site). Unlike the paper's mean-field posterior (Assumption 2),
nothing is factorized: with ``w = [beta, c]``, ``H_i = [F_i, Phi_i]``,
``Lam = blkdiag(0, K) + sum_i H_i^T C_i^{-1} H_i`` and ``b = sum_i H_i^T
C_i^{-1} y_i``, the negative log marginal likelihood is

    NLL = 1/2 [sum_i log|C_i| + log|Lam| - log|K| + sum_i y_i^T C_i^{-1} y_i - b^T Lam^{-1} b]

(up to a constant): sums of what each site computes from its own rows, plus
the server's ``m + p``-square terms. Its gradient splits the same way once the
server broadcasts ``w = Lam^{-1} b`` and ``Lam^{-1}`` (:func:`site_gradient`).
With the GP parts switched off it is exactly the linear mixed model's REML
criterion, so the model nests it.

Each site's covariance is dense: ``O(n_i^3)`` per evaluation, meant for sites
of up to a few hundred rows (panels, clinics, schools).
"""

import copy

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import OptimizeResult

from ..federated import FederatedAlgorithm
from ..utils._optimize import AskTellLBFGS

__all__ = ["Layout", "design", "site_statistics", "site_gradient", "server_objective",
           "server_gradient", "fit_collapsed", "predict_collapsed", "CollapsedProtocol"]

#: relative jitter on the inducing covariance
JITTER = 1e-6
#: bounds of every log-scale hyperparameter (lengthscales, variances, phi, noise)
LOG_BOUNDS = (-7.0, 7.0)
#: bounds of the random-effect covariance's factor: log diagonal, off-diagonal entries
LOG_DIAG_BOUNDS = (-7.0, 3.0)
OFFDIAG_BOUNDS = (-20.0, 20.0)


def rbf(A, B, lengthscale, variance):
    """The RBF (squared exponential) covariance with ARD lengthscales."""
    A = A / lengthscale
    B = B / lengthscale
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return variance * np.exp(-0.5 * np.maximum(d2, 0.0))


def rbf_adjoint(A, B, lengthscale, variance, G, K=None):
    """``<G, dK/dlog variance>`` and ``<G, dK/dlog lengthscale_j>`` of ``K = rbf(A, B)``
    (``K`` if already computed)."""
    GK = G * (rbf(A, B, lengthscale, variance) if K is None else K)
    out = np.empty(1 + A.shape[1])
    out[0] = GK.sum()
    for j in range(A.shape[1]):
        d2 = (A[:, j][:, None] - B[:, j][None, :]) ** 2 / lengthscale[j] ** 2
        out[1 + j] = (GK * d2).sum()
    return out


def design(X, kind):
    """Columns of the fixed or random effects: ``[1, x]``, ``[1]`` or none."""
    one = np.ones((X.shape[0], 1))
    if kind == "linear":
        return np.hstack([one, X])
    if kind == "intercept":
        return one
    return np.zeros((X.shape[0], 0))


class Layout:
    """Where each hyperparameter sits in the optimizer's vector (log scales).

    ``[log ls_g (d), log var_g, log phi, log ls_l (d), log var_l, log s2, L (tril)]``
    with ``Sigma = L L^T`` and ``L``'s diagonal stored as logs.

    Parameters
    ----------
    n_features : int
    random_effects, fixed_effects : {"linear", "intercept", "none"}
    deviation, local, global_gp : bool
        Whether the deviation, local and global GPs are in the model (without
        any of them it is the linear mixed model; without the global GP, pass
        ``Z`` with no rows).
    """

    def __init__(self, n_features, random_effects="linear", fixed_effects="linear",
                 deviation=True, local=True, global_gp=True):
        self.d = int(n_features)
        self.global_gp = bool(global_gp)
        self.random_effects = random_effects
        self.fixed_effects = fixed_effects
        self.deviation = bool(deviation)
        self.local = bool(local)
        one = np.zeros((1, self.d))
        self.q = design(one, random_effects).shape[1]
        self.f = design(one, fixed_effects).shape[1]
        self.tril = np.tril_indices(self.q)
        self.size = 2 * self.d + 4 + self.tril[0].size

    def unpack(self, theta):
        """Hyperparameters as a dict of arrays and floats."""
        d = self.d
        p = {"ls_g": np.exp(theta[:d]), "var_g": float(np.exp(theta[d])),
             "phi": float(np.exp(theta[d + 1])) if self.deviation else 0.0,
             "ls_l": np.exp(theta[d + 2:2 * d + 2]),
             "var_l": float(np.exp(theta[2 * d + 2])) if self.local else 0.0,
             "s2": float(np.exp(theta[2 * d + 3]))}
        L = np.zeros((self.q, self.q))
        L[self.tril] = theta[2 * d + 4:]
        L[np.diag_indices(self.q)] = np.exp(np.diag(L))
        p["L"] = L
        return p

    def pack(self, p):
        """The inverse of :meth:`unpack` (``phi`` and ``var_l`` must be positive)."""
        L = np.array(p["L"], dtype=float).reshape(self.q, self.q)
        L[np.diag_indices(self.q)] = np.log(np.diag(L))
        return np.concatenate([
            np.log(np.broadcast_to(p["ls_g"], self.d)), [np.log(p["var_g"]), np.log(p["phi"])],
            np.log(np.broadcast_to(p["ls_l"], self.d)), [np.log(p["var_l"]), np.log(p["s2"])],
            L[self.tril]])

    def bounds(self):
        """Box bounds of the optimizer (switched-off parts pinned at their start)."""
        out = [LOG_BOUNDS] * (2 * self.d + 4)
        for i, j in zip(*self.tril):
            out.append(LOG_DIAG_BOUNDS if i == j else OFFDIAG_BOUNDS)
        return out

    def mask(self):
        """Which entries the model uses (the others get a zero gradient)."""
        m = np.ones(self.size, dtype=bool)
        d = self.d
        m[:d + 1] = self.global_gp or self.deviation
        m[d + 1] = self.deviation
        m[d + 2:2 * d + 3] = self.local
        return m

    def global_weight(self, p):
        """Coefficient of ``k_g`` in a site's block: the global GP's (1) plus ``phi``."""
        return float(self.global_gp) + p["phi"]


def _kzz(p, Z):
    return rbf(Z, Z, p["ls_g"], p["var_g"]) + JITTER * p["var_g"] * np.eye(Z.shape[0])


def _site_cov(p, layout, Xa, Xb, Za_Kinv, Zb):
    """The site block's covariance between rows ``Xa`` and ``Xb`` (no noise).

    ``Za_Kinv`` is ``Phi_a K^{-1}`` and ``Zb`` is ``Phi_b``.
    """
    Kg = rbf(Xa, Xb, p["ls_g"], p["var_g"])
    C = layout.global_weight(p) * Kg - Za_Kinv @ Zb.T
    if layout.local:
        C += rbf(Xa, Xb, p["ls_l"], p["var_l"])
    if layout.q:
        C += design(Xa, layout.random_effects) @ (p["L"] @ p["L"].T) @ design(
            Xb, layout.random_effects).T
    return C


def site_statistics(X, y, p, layout, Z, K_inv):
    """A site's message at hyperparameters ``p`` and its cache for the gradient.

    Returns ``(message, cache)``; the message holds ``H^T C^{-1} H``, ``H^T
    C^{-1} y``, ``log|C|`` and ``y^T C^{-1} y``.
    """
    Phi = rbf(X, Z, p["ls_g"], p["var_g"])
    B = Phi @ K_inv
    C = _site_cov(p, layout, X, X, B, Phi)
    C[np.diag_indices_from(C)] += p["s2"]
    cf = cho_factor(C, lower=True)
    H = np.hstack([design(X, layout.fixed_effects), Phi])
    CiH = cho_solve(cf, H)
    Ciy = cho_solve(cf, y)
    message = {"HCH": H.T @ CiH, "HCy": H.T @ Ciy,
               "logdet": 2.0 * np.log(np.diag(cf[0])).sum(), "yCy": float(y @ Ciy)}
    return message, (cf, H, CiH, Ciy, B, Phi)


def site_gradient(X, p, layout, Z, cache, w, Lam_inv):
    """The site's part of the NLL's gradient given the server's ``w`` and ``Lam^{-1}``.

    Adjoints: ``G_C = 1/2 (C^{-1} - C^{-1} H Lam^{-1} H^T C^{-1} - a a^T)`` with
    the residual ``a = C^{-1} (y - H w)``; ``G_H = C^{-1} H Lam^{-1} - a w^T``;
    ``C`` holds ``-Phi K^{-1} Phi^T`` and ``H`` holds ``Phi``, so ``Phi``'s
    adjoint is ``G_H[:, f:] - 2 G_C B`` and ``K``'s is ``B^T G_C B``; all are
    mapped to the hyperparameters here (``Z`` and the hyperparameters are
    public), so the site sends one vector.
    """
    cf, H, CiH, Ciy, B, Phi = cache
    d, f = layout.d, layout.f
    a = Ciy - CiH @ w
    M = CiH @ Lam_inv
    Gc = 0.5 * (cho_solve(cf, np.eye(X.shape[0])) - M @ CiH.T - np.outer(a, a))
    G_phi = (M - np.outer(a, w))[:, f:] - 2.0 * Gc @ B
    G_K = B.T @ Gc @ B
    g = np.zeros(layout.size)
    Kg = rbf(X, X, p["ls_g"], p["var_g"])
    glob = (rbf_adjoint(X, X, p["ls_g"], p["var_g"], layout.global_weight(p) * Gc, Kg)
            + rbf_adjoint(X, Z, p["ls_g"], p["var_g"], G_phi, Phi)
            + rbf_adjoint(Z, Z, p["ls_g"], p["var_g"], G_K))
    glob[0] += JITTER * p["var_g"] * np.trace(G_K)
    g[d] = glob[0]
    g[:d] = glob[1:]
    if layout.deviation:
        g[d + 1] = p["phi"] * np.sum(Gc * Kg)
    if layout.local:
        loc = rbf_adjoint(X, X, p["ls_l"], p["var_l"], Gc)
        g[2 * d + 2] = loc[0]
        g[d + 2:2 * d + 2] = loc[1:]
    g[2 * d + 3] = p["s2"] * np.trace(Gc)
    if layout.q:
        R = design(X, layout.random_effects)
        G_L = 2.0 * (R.T @ Gc @ R) @ p["L"]
        G_L[np.diag_indices(layout.q)] *= np.diag(p["L"])
        g[2 * d + 4:] = G_L[layout.tril]
    return g * layout.mask()


def _inverse_kzz(p, Z):
    """``(K^{-1}, log|K|)`` of the inducing covariance (empty without a global GP)."""
    if Z.shape[0] == 0:
        return np.zeros((0, 0)), 0.0
    kf = cho_factor(_kzz(p, Z), lower=True)
    return cho_solve(kf, np.eye(Z.shape[0])), 2.0 * np.log(np.diag(kf[0])).sum()


def server_objective(p, layout, Z, messages):
    """The NLL and the server's ``(w, Lam^{-1}, K^{-1})`` from the sites' messages."""
    K_inv, logdet_K = _inverse_kzz(p, Z)
    f = layout.f
    Lam = np.zeros((f + Z.shape[0],) * 2)
    Lam[f:, f:] = _kzz(p, Z)
    Lam += sum(m["HCH"] for m in messages)
    b = sum(m["HCy"] for m in messages)
    lf = cho_factor(Lam, lower=True)
    w = cho_solve(lf, b)
    nll = 0.5 * (sum(m["logdet"] for m in messages) + 2.0 * np.log(np.diag(lf[0])).sum()
                 - logdet_K + sum(m["yCy"] for m in messages) - b @ w)
    return float(nll), w, cho_solve(lf, np.eye(Lam.shape[0])), K_inv


def server_gradient(p, layout, Z, w, Lam_inv, K_inv, site_grads):
    """The full gradient: the sites' parts plus the prior's (``K`` in ``Lam`` and ``log|K|``)."""
    f = layout.f
    G_K = 0.5 * (Lam_inv[f:, f:] + np.outer(w[f:], w[f:]) - K_inv)
    glob = rbf_adjoint(Z, Z, p["ls_g"], p["var_g"], G_K)
    glob[0] += JITTER * p["var_g"] * np.trace(G_K)
    g = sum(site_grads)
    g[layout.d] += glob[0]
    g[:layout.d] += glob[1:]
    return g * layout.mask()


def fit_collapsed(sites, layout, Z, theta0, max_iter=500):
    """Maximize the marginal likelihood over the hyperparameters, in process.

    ``sites`` is a list of ``(X_i, y_i)``. Each evaluation is the two
    exchanges the federated protocol makes: the sites' statistics, then (given
    ``w`` and ``Lam^{-1}``) their gradients; the server's optimizer
    (:class:`~skfed.utils._optimize.AskTellLBFGS`) proposes the next point.
    Returns an ``OptimizeResult`` (``x``, ``fun``, ``nit``, ``nfev``).
    """
    def fun(theta):
        p = layout.unpack(theta)
        try:
            K_inv = _inverse_kzz(p, Z)[0]
            out = [site_statistics(X, y, p, layout, Z, K_inv) for X, y in sites]
            nll, w, Lam_inv, K_inv = server_objective(p, layout, Z, [m for m, _ in out])
        except np.linalg.LinAlgError:
            return np.inf, np.zeros(layout.size)
        grads = [site_gradient(X, p, layout, Z, cache, w, Lam_inv)
                 for (X, _), (_, cache) in zip(sites, out)]
        return nll, server_gradient(p, layout, Z, w, Lam_inv, K_inv, grads)

    opt = AskTellLBFGS(theta0, np.array(layout.bounds()), max_iter=max_iter)
    while not opt.done:
        opt.tell(*fun(opt.ask()))
    return OptimizeResult(x=opt.x, fun=opt.f, nit=opt.n_iter, nfev=opt.n_eval,
                          message=opt.message)


def predict_collapsed(p, layout, Z, w, Lam_inv, X, site=None):
    """Predictive mean and variance of noisy targets at ``X`` (standardized units).

    ``site`` is ``(X_i, y_i)`` of the site the rows belong to, or None for a
    new site (the population prediction: fixed effects and global GP).
    """
    K_inv = _inverse_kzz(p, Z)[0]
    Phi = rbf(X, Z, p["ls_g"], p["var_g"])
    B = Phi @ K_inv
    G = np.hstack([design(X, layout.fixed_effects), Phi])
    mean = G @ w
    var = (p["var_g"] * layout.global_weight(p) - np.einsum("ij,ij->i", B, Phi)
           + p["var_l"] + p["s2"])
    if layout.q:
        R = design(X, layout.random_effects)
        var += np.einsum("ij,jk,ik->i", R, p["L"] @ p["L"].T, R)
    if site is not None:
        Xi, yi = site
        _, (cf, Hi, _, _, _, Phi_i) = site_statistics(Xi, yi, p, layout, Z, K_inv)
        Cst = _site_cov(p, layout, X, Xi, B, Phi_i)
        CiCt = cho_solve(cf, Cst.T)
        mean += Cst @ cho_solve(cf, yi - Hi @ w)
        var -= np.einsum("ij,ji->i", Cst, CiCt)
        G = G - CiCt.T @ Hi
    var += np.einsum("ij,ji->i", G, Lam_inv @ G.T)
    return mean, np.maximum(var, 1e-12)


class CollapsedProtocol(FederatedAlgorithm):
    """The collapsed fit as federated rounds: two exchanges per evaluation.

    Round kinds (``broadcast["stage"]``): ``0`` asks every site for its
    :func:`site_statistics` at ``theta``; ``1`` sends the server's ``w`` and
    ``Lam^{-1}`` at that ``theta`` and asks for the sites' :func:`site_gradient`;
    the server's :class:`~skfed.utils._optimize.AskTellLBFGS` then proposes
    the next ``theta``. Once it stops, one more statistics round at the
    optimum gives the final ``w`` and ``Lam^{-1}`` (broadcast with stage
    ``2``); a site's posterior needs only those and its own rows, which stay
    with it (:func:`predict_collapsed`). A site whose block is not positive
    definite at a trial point says so (``failed``), and the server treats the
    point as infinite.

    Parameters
    ----------
    layout : Layout
    Z : ndarray of shape (m, n_features)
        Global inducing inputs (public).
    theta0 : ndarray of shape (layout.size,)
        Start.
    max_iter : int, default=500
        Accepted optimizer steps at most.
    """

    client_step_draws = False

    def __init__(self, layout, Z, theta0, max_iter=500):
        self.layout = layout
        self.Z = np.asarray(Z, dtype=float)
        self.theta0 = np.asarray(theta0, dtype=float)
        self.max_iter = int(max_iter)

    def asks_every_client(self, server_state):
        return True

    def server_init(self, rng):
        opt = AskTellLBFGS(self.theta0, np.array(self.layout.bounds()), max_iter=self.max_iter)
        return {"opt": opt, "stage": 0}, {"stage": np.int64(0), "theta": opt.ask()}

    def client_step(self, data, state, broadcast, rng):
        p = self.layout.unpack(broadcast["theta"])
        if int(broadcast["stage"]) == 1:
            if state is None:  # this site's block failed at this point
                return state, {"failed": np.int64(1)}
            grad = site_gradient(data.X, p, self.layout, self.Z, state, broadcast["w"],
                                 broadcast["lam_inv"])
            return state, {"grad": grad}
        try:
            message, cache = site_statistics(data.X, data.y, p, self.layout, self.Z,
                                             _inverse_kzz(p, self.Z)[0])
        except np.linalg.LinAlgError:
            return None, {"failed": np.int64(1)}
        return cache, {k: np.asarray(v, dtype=float) for k, v in message.items()}

    def server_step(self, state, messages, rng):
        opt = copy.deepcopy(state["opt"])
        msgs = [messages[k] for k in sorted(messages)]
        theta = opt.x if state["stage"] == 2 else opt.ask()
        p = self.layout.unpack(theta)
        failed = any("failed" in m for m in msgs)
        if state["stage"] in (0, 2) and not failed:
            try:
                nll, w, lam_inv, K_inv = server_objective(p, self.layout, self.Z, msgs)
            except np.linalg.LinAlgError:
                failed = True
        if state["stage"] == 2:
            if failed:
                raise ValueError("the collapsed fit's optimum is not positive definite at a "
                                 "site; try other starting values")
            done = {"opt": opt, "stage": 3, "nll": nll, "w": w, "lam_inv": lam_inv}
            return done, {"stage": np.int64(2), "theta": theta, "w": w, "lam_inv": lam_inv}
        if state["stage"] == 0 and not failed:
            new = {"opt": opt, "stage": 1, "nll": nll, "w": w, "lam_inv": lam_inv,
                   "K_inv": K_inv}
            return new, {"stage": np.int64(1), "theta": theta, "w": w, "lam_inv": lam_inv}
        if failed:
            opt.tell(np.inf, np.zeros(self.layout.size))
        else:
            grad = server_gradient(p, self.layout, self.Z, state["w"], state["lam_inv"],
                                   state["K_inv"], [m["grad"] for m in msgs])
            opt.tell(state["nll"], grad)
        if opt.done:  # the final statistics round, at the optimum
            return {"opt": opt, "stage": 2}, {"stage": np.int64(0), "theta": opt.x}
        return {"opt": opt, "stage": 0}, {"stage": np.int64(0), "theta": opt.ask()}

    def converged(self, server_state):
        return server_state["stage"] == 3

    def max_rounds(self):
        """An upper bound on the rounds: two per evaluation, evaluations bounded by
        the optimizer's steps and backtracks, and the final statistics round."""
        per_step = 2 * (AskTellLBFGS.MAX_BACKTRACKS + 2)
        return 2 * per_step * (self.max_iter + 1) + 2
