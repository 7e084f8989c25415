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
``Lam = blkdiag(0, K) + sum_i H_i^T C_i^{-1} H_i`` (the 0 is :data:`BETA_PRECISION`)
and ``b = sum_i H_i^T C_i^{-1} y_i``, the negative log marginal likelihood is

    NLL = 1/2 [sum_i log|C_i| + log|Lam| - log|K| + sum_i y_i^T C_i^{-1} y_i - b^T Lam^{-1} b]

(up to a constant; with a Gaussian prior ``N(0, tau2 I)`` on the slopes,
``Lam``'s slope block adds ``I / tau2`` and ``-log|K|`` becomes
``-log|K| + p_s log tau2``): sums of what each site computes from its own rows, plus
the server's ``m + p``-square terms. With a noise variance per site
(``Layout(n_sites=...)``, ``noise="per_client"``), site ``i``'s is ``s2 exp(e_i)``, and the
NLL adds the offsets' prior ``sum_i e_i^2 / (2 NOISE_SPREAD^2)``. Its gradient splits the
same way once the server broadcasts ``w = Lam^{-1} b`` and ``Lam^{-1}``
(:func:`site_gradient`). ``H^T C^{-1} H`` (up) and ``K^{-1}`` (down) cross as their lower
triangles: the server's factorization reads no other entry of the one, and the other is
symmetric to the bit.
With the GP parts switched off it is exactly the linear mixed model's REML
criterion, so the model nests it.

Each site's covariance is dense: ``O(n_i^3)`` per evaluation, meant for sites
of up to a few hundred rows (panels, clinics, schools).
"""

import copy

import numpy as np

from ..federated import FederatedAlgorithm
from ..federated._engine import blas_threads
from ..federated._protocol import lower_indices, pack_lower, unpack_lower
from ..federated._release import MIN_ROWS_MOMENTS, too_few_rows_warning
from ..utils._optimize import AskTellLBFGS
from ._setup import check_pooled_scale, input_setup, input_summary, target_summary

__all__ = ["Layout", "design", "site_statistics", "site_gradient", "server_objective",
           "server_gradient", "fit_collapsed", "site_posterior", "posterior_moments",
           "predict_collapsed", "scattered_starts", "CollapsedProtocol", "PFedHGPCollapsed"]

#: the slopes' prior variance where a start gives none (standardized inputs and target)
SLOPE_PRIOR_START = 1.0
#: relative jitter on the inducing covariance
JITTER = 1e-6
#: prior precision of the fixed effects (standardized units): a flat prior up to a
#: variance of 1e8, so that a fixed-effect column of zeros (a constant feature) is
#: estimated as 0 instead of making Lam singular; negligible beside any data's precision
BETA_PRECISION = 1e-8
#: accepted optimizer steps per start, at most
MAX_ITER = 500
#: accepted optimizer steps of each start when there are several (the best is then
#: continued to ``MAX_ITER``)
RESTART_ITER = 60
#: ``n_restarts="auto"``: this many restarts when the sites hold at most
#: ``AUTO_RESTART_ROWS`` rows in all, none above (a fit with restarts costs 4-8 times
#: one without; doc/results/pfedhgp_start.md, "Start dependence")
AUTO_RESTARTS = 8
AUTO_RESTART_ROWS = 1000
#: restarts run side by side in the same rounds while the largest site's blocks at all
#: their points hold at most this many entries (about 80 MB a copy; a site keeps three
#: n x n arrays a point between the two exchanges of an evaluation)
PARALLEL_CELLS = 10_000_000
#: bounds of every log-scale hyperparameter (lengthscales, variances, phi, noise)
LOG_BOUNDS = (-7.0, 7.0)
#: bounds of the random-effect covariance's factor: log diagonal, off-diagonal entries
LOG_DIAG_BOUNDS = (-7.0, 3.0)
OFFDIAG_BOUNDS = (-20.0, 20.0)
#: with a noise variance per site (``noise="per_client"``), ``log s2_i = log s2 + e_i`` with
#: ``e_i ~ N(0, NOISE_SPREAD**2)``: the spread of the sites' log noise variances about the
#: population's (1: a site's noise standard deviation within a factor of about 1.6 of the
#: population's for one standard deviation of the prior)
NOISE_SPREAD = 1.0
#: bounds of each site's offset ``e_i``
NOISE_OFFSET_BOUNDS = (-10.0, 10.0)
#: bounds of ``log NOISE_SPREAD**2`` where the spread is learned (``Layout(site_rows=...)``):
#: from offsets held near 0 to a spread of about 4.5
SPREAD_BOUNDS = (-12.0, 3.0)
#: a site block of at most this many rows is factorized by numpy (Cholesky, then the
#: inverse by LU; :func:`_site_factor`): 2-3 times the flops of LAPACK's Cholesky
#: routines, at most about 2 ms more per evaluation here, whereas a Flower site's
#: process, which handles one message, saves importing scipy.linalg (about 0.18 s CPU)
NUMPY_ROWS = 256


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


#: entries of a cached per-feature distance array, at most (a site of 200 rows and 10
#: features, 3 MB); larger sites compute their kernels' distances each time
MAX_CACHED = 400_000


class Pairs:
    """Rows ``A`` against rows ``B`` for :func:`rbf` and :func:`rbf_adjoint`, with the
    per-feature squared differences kept: a site's rows and ``Z`` do not change
    during a fit, so every evaluation's kernels are a product and an ``exp``."""

    def __init__(self, A, B):
        self.A, self.B = A, B
        diff = None
        if A.shape[0] * B.shape[0] * A.shape[1] <= MAX_CACHED:
            diff = ((A[:, None, :] - B[None, :, :]) ** 2).reshape(-1, A.shape[1])
        self.diff = diff

    def kernel(self, lengthscale, variance):
        if self.diff is None:
            return rbf(self.A, self.B, lengthscale, variance)
        d2 = (self.diff @ lengthscale ** -2.0).reshape(self.A.shape[0], self.B.shape[0])
        return variance * np.exp(-0.5 * d2)

    def kernels(self, lengthscales, variances):
        """Several kernels on the same pairs (one product for all their distances)."""
        if self.diff is None:
            return [rbf(self.A, self.B, ls, v) for ls, v in zip(lengthscales, variances)]
        d2 = (self.diff @ np.column_stack(lengthscales) ** -2.0).T
        K = np.exp(-0.5 * d2).reshape(len(variances), self.A.shape[0], self.B.shape[0])
        return K * np.asarray(variances)[:, None, None]

    def adjoint(self, lengthscale, variance, G, K=None):
        """As :func:`rbf_adjoint`."""
        if self.diff is None:
            return rbf_adjoint(self.A, self.B, lengthscale, variance, G, K)
        GK = G * (self.kernel(lengthscale, variance) if K is None else K)
        return np.concatenate([[GK.sum()], (GK.ravel() @ self.diff) / lengthscale**2])

    def adjoints(self, lengthscales, GK):
        """:meth:`adjoint` of several kernels given their ``G * K`` (stacked): an
        array of one row per kernel."""
        if self.diff is None:
            return np.array([rbf_adjoint(self.A, self.B, ls, 1.0, 1.0, gk)
                             for ls, gk in zip(lengthscales, GK)])
        flat = np.reshape(GK, (len(lengthscales), -1))
        return np.column_stack([flat.sum(1),
                                (flat @ self.diff) / np.stack(lengthscales) ** 2])


class SiteGeometry:
    """What a site's kernels need that does not change during a fit: its rows
    (standardized), their fixed- and random-effect columns, and the
    :class:`Pairs` of rows with rows and with ``Z``. Built once, kept on the site."""

    def __init__(self, X, Z, layout, y=None, source=None):
        self.X, self.y, self.Z, self.source = X, y, Z, source
        self.F = design(X, layout.fixed_effects)
        self.R = design(X, layout.random_effects)
        # [F, Phi, y]: site_statistics writes each evaluation's Phi (and y) into it
        self.Hy = np.zeros((X.shape[0], layout.f + Z.shape[0] + 1))
        self.Hy[:, :layout.f] = self.F
        self.XX = Pairs(X, X)
        self.XZ = Pairs(X, Z)
        self.ZZ = Pairs(Z, Z)

    def matches(self, source, Z):
        """Whether it was built from the rows ``source`` (the same array) and ``Z``."""
        return source is self.source and (Z is self.Z or np.array_equal(Z, self.Z))


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

    ``[log ls_g (d), log var_g, log phi, log ls_l (d), log var_l, log s2, L (tril),
    log tau2 (with slope_prior), e (n_sites, with per-site noise)]`` with ``Sigma = L L^T``
    and ``L``'s diagonal stored as logs.

    Parameters
    ----------
    n_features : int
    random_effects, fixed_effects : {"linear", "intercept", "none"}
    deviation, local, global_gp : bool
        Whether the deviation, local and global GPs are in the model (without
        any of them it is the linear mixed model; without the global GP, pass
        ``Z`` with no rows).
    slope_prior : bool
        The linear fixed effects' slopes ``beta_s ~ N(0, tau2 I)`` with
        ``log tau2`` an entry of its own (a linear kernel beside the global GP),
        instead of a flat prior; the intercept stays flat.
    n_sites : int, default=0
        With ``n_sites > 0``, a noise variance per site: site ``i``'s is ``s2 exp(e_i)``
        with ``e_i ~ N(0, NOISE_SPREAD**2)`` (estimated with the hyperparameters, a
        penalized likelihood), and ``s2`` is the population's (a new site's). With 0,
        one noise variance ``s2`` for every site (the paper's model).
    ard : bool, default=True
        One lengthscale per feature in each kernel; with ``False`` the ``d``
        entries of a kernel's lengthscales are kept equal (:meth:`tie`: the starts
        and the optimizer's gradient), one shared lengthscale per kernel.
    site_rows : array-like of shape (n_sites,) or None, default=None
        With per-site noise, the rows each site's likelihood holds (0 for a site that
        sends no statistics): the spread ``v = NOISE_SPREAD**2`` is then learned, its log
        the last entry, from the offsets' marginal likelihood in the Laplace
        approximation with each offset's information taken as ``h_i = n_i / 2`` (the
        Fisher information of a log variance from ``n_i`` Gaussian rows): the NLL adds
        ``sum_i [e_i^2 / (2 v) + log(1 + v h_i) / 2]``, which pulls the offsets of
        sites with few rows towards 0 unless the sites' precisions really differ.
    """

    def __init__(self, n_features, random_effects="linear", fixed_effects="linear",
                 deviation=True, local=True, global_gp=True, slope_prior=False, n_sites=0,
                 site_rows=None, ard=True):
        self.d = int(n_features)
        self.ard = bool(ard)
        self.global_gp = bool(global_gp)
        self.random_effects = random_effects
        self.fixed_effects = fixed_effects
        self.deviation = bool(deviation)
        self.local = bool(local)
        one = np.zeros((1, self.d))
        self.q = design(one, random_effects).shape[1]
        self.f = design(one, fixed_effects).shape[1]
        self.tril = np.tril_indices(self.q)
        # a learned Gaussian prior on the slopes (the linear fixed effects but the
        # intercept): its log variance is the last entry
        self.slope_prior = bool(slope_prior) and self.f > 1
        self.n_slopes = self.f - 1 if self.slope_prior else 0
        self.re_end = 2 * self.d + 4 + self.tril[0].size
        self.tau_index = self.re_end if self.slope_prior else None
        self.n_sites = int(n_sites)
        start = self.re_end + int(self.slope_prior)
        self.noise_offsets = slice(start, start + self.n_sites)
        self.size = start + self.n_sites
        # the learned spread of the offsets: each offset's information, and its entry
        self.offset_info = None
        self.spread_index = None
        if self.n_sites and site_rows is not None:
            rows = np.asarray(site_rows, dtype=float)
            if rows.shape != (self.n_sites,):
                raise ValueError(f"site_rows has shape {rows.shape}; expected ({self.n_sites},)")
            self.offset_info = rows / 2.0
            self.spread_index = self.size
            self.size += 1

    def unpack(self, theta):
        """Hyperparameters as a dict of arrays and floats."""
        d = self.d
        p = {"ls_g": np.exp(theta[:d]), "var_g": float(np.exp(theta[d])),
             "phi": float(np.exp(theta[d + 1])) if self.deviation else 0.0,
             "ls_l": np.exp(theta[d + 2:2 * d + 2]),
             "var_l": float(np.exp(theta[2 * d + 2])) if self.local else 0.0,
             "s2": float(np.exp(theta[2 * d + 3]))}
        L = np.zeros((self.q, self.q))
        L[self.tril] = theta[2 * d + 4:self.re_end]
        L.flat[::self.q + 1] = np.exp(L.diagonal())
        p["L"] = L
        p["tau2"] = float(np.exp(theta[self.tau_index])) if self.slope_prior else np.inf
        p["noise_offsets"] = np.array(theta[self.noise_offsets], dtype=float)
        p["spread2"] = (float(np.exp(theta[self.spread_index])) if self.spread_index is not None
                        else NOISE_SPREAD**2)
        return p

    def site(self, p, index):
        """``p`` as site ``index`` sees it: ``s2`` its own noise variance (``p`` itself
        with one noise variance for every site)."""
        if not self.n_sites:
            return p
        return {**p, "s2": float(self.noise_variances(p)[index])}

    def noise_variances(self, p):
        """Each site's noise variance (standardized units), shape ``(n_sites,)``."""
        return p["s2"] * np.exp(p["noise_offsets"])

    def pack(self, p):
        """The inverse of :meth:`unpack` (``phi`` and ``var_l`` must be positive)."""
        L = np.array(p["L"], dtype=float).reshape(self.q, self.q)
        L[np.diag_indices(self.q)] = np.log(np.diag(L))
        return np.concatenate([
            np.log(np.broadcast_to(p["ls_g"], self.d)), [np.log(p["var_g"]), np.log(p["phi"])],
            np.log(np.broadcast_to(p["ls_l"], self.d)), [np.log(p["var_l"]), np.log(p["s2"])],
            L[self.tril], [np.log(p.get("tau2", SLOPE_PRIOR_START))] if self.slope_prior else [],
            np.broadcast_to(p.get("noise_offsets", 0.0), self.n_sites),
            [np.log(p.get("spread2", NOISE_SPREAD**2))] if self.spread_index is not None else []])

    def tie(self, v):
        """``v`` (a point or a gradient) with each kernel's ``d`` lengthscale entries
        replaced by their mean where ``ard=False``: the gradient of the likelihood
        restricted to equal lengthscales, so that the optimizer, started there, stays
        there (its box bounds are the same for every entry)."""
        if self.ard or self.d == 1:
            return v
        v = np.array(v, dtype=float)
        for block in (slice(0, self.d), slice(self.d + 2, 2 * self.d + 2)):
            v[..., block] = v[..., block].mean(axis=-1, keepdims=True)
        return v

    def bounds(self):
        """Box bounds of the optimizer (switched-off parts pinned at their start)."""
        out = [LOG_BOUNDS] * (2 * self.d + 4)
        for i, j in zip(*self.tril):
            out.append(LOG_DIAG_BOUNDS if i == j else OFFDIAG_BOUNDS)
        if self.slope_prior:
            out.append(LOG_BOUNDS)
        return (out + [NOISE_OFFSET_BOUNDS] * self.n_sites
                + [SPREAD_BOUNDS] * (self.spread_index is not None))

    def mask(self):
        """Which entries the model uses (the others get a zero gradient)."""
        if getattr(self, "_mask", None) is None:  # the parts do not change after __init__
            self._mask = self._build_mask()
        return self._mask

    def _build_mask(self):
        m = np.ones(self.size, dtype=bool)
        d = self.d
        m[:d + 1] = self.global_gp or self.deviation
        m[d + 1] = self.deviation
        m[d + 2:2 * d + 3] = self.local
        return m

    def global_weight(self, p):
        """Coefficient of ``k_g`` in a site's block: the global GP's (1) plus ``phi``."""
        return float(self.global_gp) + p["phi"]


def _kzz(p, Z, pairs=None):
    K = rbf(Z, Z, p["ls_g"], p["var_g"]) if pairs is None else pairs.kernel(p["ls_g"],
                                                                              p["var_g"])
    return K + JITTER * p["var_g"] * np.eye(Z.shape[0])


# LAPACK's Cholesky routines called directly: a site's blocks are small, and
# scipy.linalg's checks and wrappers cost more than the factorization there
def _cholesky(A):
    """Lower Cholesky factor as ``(L, True)`` (the form of ``cho_factor``)."""
    from scipy.linalg.lapack import dpotrf

    L, info = dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("the matrix is not positive definite")
    return L, True


def _solve(cf, B):
    from scipy.linalg.lapack import dpotrs

    return dpotrs(cf[0], B, lower=1)[0]


def _inverse(cf):
    """``A^{-1}`` from its factor."""
    from scipy.linalg.lapack import dpotri

    inv = dpotri(cf[0], lower=1)[0]  # the lower triangle; the upper one stays 0 (clean=1)
    inv += inv.T
    inv.flat[::inv.shape[0] + 1] *= 0.5
    # C order, as a message delivers it on every engine: products round the same
    return np.ascontiguousarray(inv)


def _site_factor(C):
    """A site block's factor ``(L, True)`` and, up to :data:`NUMPY_ROWS` rows, its
    inverse (else None: solves use the factor). Raises ``LinAlgError`` if ``C`` is not
    positive definite."""
    if C.shape[0] > NUMPY_ROWS:
        return _cholesky(C), None
    L = np.linalg.cholesky(C)
    C_inv = np.linalg.inv(C)
    C_inv += C_inv.T  # symmetric up to rounding: make it exactly so
    C_inv *= 0.5
    return (L, True), C_inv


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


def site_statistics(X, y, p, layout, Z, K_inv, geom=None):
    """A site's message at hyperparameters ``p`` and its cache for the gradient.

    Returns ``(message, cache)``; the message holds ``H^T C^{-1} H`` (its lower
    triangle, packed: the server reads no more), ``H^T C^{-1} y``, ``log|C|``
    and ``y^T C^{-1} y``. ``geom`` is the site's
    :class:`SiteGeometry` (built here if not given).
    """
    geom = SiteGeometry(X, Z, layout) if geom is None else geom
    if layout.local:
        Kg, Kl = geom.XX.kernels([p["ls_g"], p["ls_l"]], [p["var_g"], p["var_l"]])
    else:
        Kg, Kl = geom.XX.kernel(p["ls_g"], p["var_g"]), None
    Phi = geom.XZ.kernel(p["ls_g"], p["var_g"])
    B = Phi @ K_inv
    C = layout.global_weight(p) * Kg - B @ Phi.T
    if layout.local:
        C += Kl
    if layout.q:
        RL = geom.R @ p["L"]
        C += RL @ RL.T
    C.flat[::C.shape[0] + 1] += p["s2"]
    cf, C_inv = _site_factor(C)
    # [F, Phi, y] in one array: one solve, and one product gives H^T C^-1 H, H^T C^-1 y
    # and y^T C^-1 y
    Hy = geom.Hy
    Hy[:, layout.f:-1] = Phi
    Hy[:, -1] = y
    CiHy = _solve(cf, Hy) if C_inv is None else C_inv @ Hy
    S = Hy.T @ CiHy
    H, CiH, Ciy = Hy[:, :-1].copy(), CiHy[:, :-1], CiHy[:, -1]
    message = {"HCH": pack_lower(S[:-1, :-1]), "HCy": S[:-1, -1],
               "logdet": 2.0 * np.log(cf[0].diagonal()).sum(), "yCy": float(S[-1, -1])}
    return message, (cf, C_inv, H, CiH, Ciy, B, Phi, Kg, Kl, geom)


def site_gradient(X, p, layout, Z, cache, w, Lam_inv, index=None, loo=False):
    """The site's part of the NLL's gradient given the server's ``w`` and ``Lam^{-1}``.

    ``p`` is the site's (:meth:`Layout.site`) and ``index`` its position in the
    noise offsets (with a noise variance per site). With ``loo=True`` returns
    ``(gradient, lpd)``, ``lpd`` the sum over the site's rows of each row's
    leave-one-out log predictive density (:func:`loo_log_density`).

    Adjoints: ``G_C = 1/2 (C^{-1} - C^{-1} H Lam^{-1} H^T C^{-1} - a a^T)`` with
    the residual ``a = C^{-1} (y - H w)``; ``G_H = C^{-1} H Lam^{-1} - a w^T``;
    ``C`` holds ``-Phi K^{-1} Phi^T`` and ``H`` holds ``Phi``, so ``Phi``'s
    adjoint is ``G_H[:, f:] - 2 G_C B`` and ``K``'s is ``B^T G_C B``; all are
    mapped to the hyperparameters here (``Z`` and the hyperparameters are
    public), so the site sends one vector.
    """
    cf, C_inv, H, CiH, Ciy, B, Phi, Kg, Kl, geom = cache
    d, f = layout.d, layout.f
    a = Ciy - CiH @ w
    M = CiH @ Lam_inv
    Gc = _inverse(cf) if C_inv is None else C_inv.copy()
    Gc -= M @ CiH.T
    Gc -= a[:, None] * a
    Gc *= 0.5
    G_phi = M[:, f:] - a[:, None] * w[f:] - 2.0 * Gc @ B
    G_K = B.T @ Gc @ B
    g = np.zeros(layout.size)
    # the rows' own kernels (k_g with weight 1 + phi, k_l) in one product
    if layout.local:
        GK = np.empty((2,) + Gc.shape)
        np.multiply(Gc, Kg, out=GK[0])
        np.multiply(Gc, Kl, out=GK[1])
        own = geom.XX.adjoints([p["ls_g"], p["ls_l"]], GK)
    else:
        own = geom.XX.adjoints([p["ls_g"]], (Gc * Kg)[None])
    wg = layout.global_weight(p)
    glob = (wg * own[0] + geom.XZ.adjoint(p["ls_g"], p["var_g"], G_phi, Phi)
            + geom.ZZ.adjoint(p["ls_g"], p["var_g"], G_K))
    glob[0] += JITTER * p["var_g"] * G_K.trace()
    g[d] = glob[0]
    g[:d] = glob[1:]
    if layout.deviation:
        g[d + 1] = p["phi"] * own[0, 0]
    if layout.local:
        g[2 * d + 2] = own[1, 0]
        g[d + 2:2 * d + 2] = own[1, 1:]
    g[2 * d + 3] = p["s2"] * Gc.trace()
    if layout.n_sites:  # log s2_i = log s2 + e_i: the same derivative for both
        g[layout.noise_offsets.start + index] = g[2 * d + 3]
    if layout.q:
        R = geom.R
        G_L = 2.0 * (R.T @ Gc @ R) @ p["L"]
        G_L.flat[::layout.q + 1] *= p["L"].diagonal()
        g[2 * d + 4:layout.re_end] = G_L[layout.tril]
    if loo:  # P's diagonal from G_C = (P - a a^T) / 2
        return g * layout.mask(), loo_log_density(a, 2.0 * Gc.diagonal() + a * a)
    return g * layout.mask()


def loo_log_density(a, p_diag):
    """The summed leave-one-out log predictive density of a site's rows.

    With every other row observed (the other sites through ``w`` and
    ``Lam^{-1}``, the fixed effects and global weights integrated out), row
    ``j``'s predictive is Gaussian with variance ``1 / P_jj`` and residual
    ``a_j / P_jj``, where ``P = V^{-1} - V^{-1} F (F^T V^{-1} F)^{-1} F^T V^{-1}``
    restricted to the site is ``C^{-1} - C^{-1} H Lam^{-1} H^T C^{-1}`` and ``a =
    P y`` (Rasmussen & Williams, *Gaussian Processes for Machine Learning*, 2006,
    Section 5.4.2, with the mean's weights integrated out): no refit.
    """
    p_diag = np.maximum(p_diag, np.finfo(float).tiny)
    return float(-0.5 * np.sum(np.log(2 * np.pi) - np.log(p_diag) + a * a / p_diag))


def _inverse_kzz(p, Z, pairs=None):
    """``(K^{-1}, log|K|)`` of the inducing covariance (empty without a global GP)."""
    if Z.shape[0] == 0:
        return np.zeros((0, 0)), 0.0
    kf = _cholesky(_kzz(p, Z, pairs))
    return _inverse(kf), 2.0 * np.log(np.diag(kf[0])).sum()


def server_objective(p, layout, Z, messages, pairs=None):
    """The NLL and the server's ``(w, Lam^{-1}, K^{-1})`` from the sites' messages
    (``pairs``: ``Pairs(Z, Z)``, to compute ``K`` as the sites do)."""
    K_inv, logdet_prior = _inverse_kzz(p, Z, pairs)  # log|prior precision of w|
    f = layout.f
    Lam = np.zeros((f + Z.shape[0],) * 2)
    Lam[f:, f:] = _kzz(p, Z, pairs)
    Lam[:f, :f] += BETA_PRECISION * np.eye(f)
    if layout.slope_prior:  # beta_s ~ N(0, tau2 I): its precision, and -log|prior precision|
        Lam[1:f, 1:f] += np.eye(f - 1) / p["tau2"]
        logdet_prior -= layout.n_slopes * np.log(p["tau2"])
    # the sites' packed lower triangles: the factorization reads no other entry
    Lam[lower_indices(Lam.shape[0])] += sum(m["HCH"] for m in messages)
    b = sum(m["HCy"] for m in messages)
    from scipy.linalg import cho_factor, cho_solve

    lf = cho_factor(Lam, lower=True)
    w = cho_solve(lf, b)
    nll = 0.5 * (sum(m["logdet"] for m in messages) + 2.0 * np.log(np.diag(lf[0])).sum()
                 - logdet_prior + sum(m["yCy"] for m in messages) - b @ w)
    return float(nll + offsets_prior(p, layout)[0]), w, cho_solve(lf, np.eye(Lam.shape[0])), K_inv


def offsets_prior(p, layout):
    """The noise offsets' term of the NLL and its gradient (zero with one noise variance).

    ``e^T e / (2 v)`` with the spread ``v``; where ``v`` is learned (``layout.offset_info``
    ``h``), plus the Laplace approximation's ``sum_i log(1 + v h_i) / 2`` (the log
    determinant of the offsets' posterior precision ``h_i + 1/v`` and the prior's
    normalization): without it the joint optimum would send ``v`` and the offsets to 0.
    """
    e, v = p["noise_offsets"], p["spread2"]
    g = np.zeros(layout.size)
    g[layout.noise_offsets] = e / v
    nll = 0.5 * float(e @ e) / v
    if layout.spread_index is not None:
        h = layout.offset_info
        nll += 0.5 * float(np.log1p(v * h).sum())
        g[layout.spread_index] = -0.5 * float(e @ e) / v + 0.5 * float((v * h / (1 + v * h)).sum())
    return nll, g


def server_gradient(p, layout, Z, w, Lam_inv, K_inv, site_grads):
    """The full gradient: the sites' parts plus the prior's (``K`` in ``Lam`` and ``log|K|``)."""
    f = layout.f
    G_K = 0.5 * (Lam_inv[f:, f:] + np.outer(w[f:], w[f:]) - K_inv)
    glob = rbf_adjoint(Z, Z, p["ls_g"], p["var_g"], G_K)
    glob[0] += JITTER * p["var_g"] * np.trace(G_K)
    g = sum(site_grads)
    g[layout.d] += glob[0]
    g[:layout.d] += glob[1:]
    if layout.slope_prior:
        s = slice(1, f)
        g[layout.tau_index] = 0.5 * (layout.n_slopes
                                     - (np.trace(Lam_inv[s, s]) + w[s] @ w[s]) / p["tau2"])
    return layout.tie((g + offsets_prior(p, layout)[1]) * layout.mask())


def fit_collapsed(sites, layout, Z, theta0, max_iter=500):
    """Maximize the marginal likelihood over the hyperparameters, in process.

    ``sites`` is a list of ``(X_i, y_i)``. Each evaluation is the two
    exchanges the federated protocol makes: the sites' statistics, then (given
    ``w`` and ``Lam^{-1}``) their gradients; the server's optimizer
    (:class:`~skfed.utils._optimize.AskTellLBFGS`) proposes the next point.
    Returns an ``OptimizeResult`` (``x``, ``fun``, ``nit``, ``nfev``).
    """
    geoms = [SiteGeometry(X, Z, layout) for X, _ in sites]

    def fun(theta):
        p = layout.unpack(theta)
        try:
            K_inv = _inverse_kzz(p, Z, geoms[0].ZZ)[0]
            out = [site_statistics(X, y, layout.site(p, i), layout, Z, K_inv, geom)
                   for i, ((X, y), geom) in enumerate(zip(sites, geoms))]
            nll, w, Lam_inv, K_inv = server_objective(p, layout, Z, [m for m, _ in out],
                                                      geoms[0].ZZ)
        except np.linalg.LinAlgError:
            return np.inf, np.zeros(layout.size)
        grads = [site_gradient(X, layout.site(p, i), layout, Z, cache, w, Lam_inv, i)
                 for i, ((X, _), (_, cache)) in enumerate(zip(sites, out))]
        return nll, server_gradient(p, layout, Z, w, Lam_inv, K_inv, grads)

    opt = AskTellLBFGS(theta0, np.array(layout.bounds()), max_iter=max_iter)
    with blas_threads(CollapsedProtocol.blas_threads):  # as the protocol's steps run
        while not opt.done:
            opt.tell(*fun(opt.ask()))
    # imported here: scipy.optimize (with scipy.sparse) is a third of a second of the
    # import of a Flower site's process, which steps the fit without solving it
    from scipy.optimize import OptimizeResult

    return OptimizeResult(x=opt.x, fun=opt.f, nit=opt.n_iter, nfev=opt.n_eval,
                          message=opt.message)


def site_posterior(X, y, p, layout, Z, w, K_inv=None):
    """What a site keeps to predict its own rows: its rows, factor and residual.

    ``(X, cf, H, r)`` with ``r = C^{-1} (y - H w)``; it never leaves the site.
    """
    K_inv = _inverse_kzz(p, Z)[0] if K_inv is None else K_inv
    _, (cf, _, H, CiH, Ciy, *_) = site_statistics(X, y, p, layout, Z, K_inv)
    return X, cf, H, Ciy - CiH @ w


def posterior_moments(p, layout, Z, w, Lam_inv, X, index, sites, full=False):
    """Predictive mean and variance (or covariance) of noise-free values at ``X``.

    Standardized units. ``index[j]`` is the site of row ``j`` (a key of
    ``sites``, whose values are :func:`site_posterior` tuples) or ``-1``: rows
    of the population, predicted as one new site whose blocks follow their
    prior (fixed effects and global GP only in the mean). Given ``w`` a site's
    block is independent of the other sites' rows, so with ``G~ = G - C_*s
    C^{-1} H`` at seen rows (``G`` at new ones) the covariance is ``G~ Lam^{-1}
    G~^T`` plus each site's conditional block.
    """
    from scipy.linalg import cho_solve

    K_inv = _inverse_kzz(p, Z)[0]
    Phi = rbf(X, Z, p["ls_g"], p["var_g"])
    B = Phi @ K_inv
    G = np.hstack([design(X, layout.fixed_effects), Phi])
    mean = G @ w
    n = X.shape[0]
    cov = np.zeros((n, n)) if full else np.zeros(n)
    for k in np.unique(index):
        rows = np.flatnonzero(index == k)
        if full:
            block = _site_cov(p, layout, X[rows], X[rows], B[rows], Phi[rows])
        else:  # the diagonal of the same block
            block = (p["var_g"] * layout.global_weight(p) + p["var_l"]
                     - np.einsum("ij,ij->i", B[rows], Phi[rows]))
            if layout.q:
                R = design(X[rows], layout.random_effects)
                block = block + np.einsum("ij,jk,ik->i", R, p["L"] @ p["L"].T, R)
        if k >= 0:
            Xi, cf, Hi, r = sites[k]
            Cst = _site_cov(p, layout, X[rows], Xi, B[rows], rbf(Xi, Z, p["ls_g"], p["var_g"]))
            CiCt = cho_solve(cf, Cst.T)
            mean[rows] += Cst @ r
            block = block - (Cst @ CiCt if full else np.einsum("ij,ji->i", Cst, CiCt))
            G[rows] -= CiCt.T @ Hi
        cov[np.ix_(rows, rows) if full else rows] += block
    if full:
        cov += G @ Lam_inv @ G.T
        cov = 0.5 * (cov + cov.T)  # the blocks are symmetric up to rounding
    else:
        cov += np.einsum("ij,ji->i", G, Lam_inv @ G.T)
        cov = np.maximum(cov, 0.0)
    return mean, cov


def predict_collapsed(p, layout, Z, w, Lam_inv, X, site=None):
    """Predictive mean and variance of noisy targets at ``X`` (standardized units).

    ``site`` is ``(X_i, y_i)`` of the site the rows belong to, or None for a
    new site (the population prediction: fixed effects and global GP); ``p`` is
    that site's (:meth:`Layout.site`), or the population's.
    """
    index = np.full(X.shape[0], -1 if site is None else 0)
    sites = {} if site is None else {0: site_posterior(*site, p, layout, Z, w)}
    mean, var = posterior_moments(p, layout, Z, w, Lam_inv, X, index, sites)
    return mean, var + p["s2"]


def scattered_starts(theta0, layout, n, rng):
    """``theta0`` and ``n`` starts about it: each scale (lengthscales, variances,
    ``phi``, noise, the random effects' standard deviations) times ``10**U(-1, 1)``."""
    starts = [np.asarray(theta0, dtype=float)]
    logs = np.zeros(layout.size, dtype=bool)
    logs[:2 * layout.d + 4] = True
    logs[2 * layout.d + 4:layout.re_end] = [i == j for i, j in zip(*layout.tril)]
    logs[layout.re_end:layout.noise_offsets.start] = True  # log tau2; not the offsets
    for _ in range(int(n)):
        shift = rng.uniform(-1.0, 1.0, size=layout.size) * np.log(10.0)
        starts.append(starts[0] + np.where(logs, shift, 0.0))
    return layout.tie(np.array(starts))


class CollapsedProtocol(FederatedAlgorithm):
    """The collapsed fit as federated rounds: two exchanges per evaluation.

    Round kinds (``broadcast["stage"]``): ``0`` asks every site for its
    :func:`site_statistics` at each row of ``theta`` (a stack of points);
    ``1`` sends the server's ``w`` and ``Lam^{-1}`` at the points whose
    statistics it could combine (``which``: their rows in the last stack) and
    asks for the sites' :func:`site_gradient` at each; one
    :class:`~skfed.utils._optimize.AskTellLBFGS` per start then proposes its
    next point. With one start the optimizer runs to convergence. With
    several, each runs ``restart_iter`` steps and the one of the lowest NLL is
    continued to convergence; the starts run side by side, at most
    ``parallel_starts`` at a time, each point of a stack evaluated as if it
    were alone: the rounds of the restarts are those of the longest start
    (times the batches) instead of their sum, and the fit is the one of
    running the starts one after the other. Then one more statistics round at
    the optimum gives the final ``w``, which reaches every site
    (stage ``2``, :meth:`client_finalize`): a site's posterior needs only
    it and its own rows, which stay with it (:func:`site_posterior`). A
    site whose block is not positive definite at a point says so
    (``failed``, one flag a point), and the server treats the point as
    infinite. A site with fewer than
    :data:`~skfed.federated._release.MIN_ROWS_MOMENTS` rows sends nothing (one
    row's statistics give its kernel features and target) and is left out of
    the likelihood; it still predicts its own rows.

    Parameters
    ----------
    layout : Layout
    Z : ndarray of shape (m, n_features)
        Global inducing inputs (public).
    theta0 : ndarray of shape (layout.size,) or (n_starts, layout.size)
        Start(s).
    max_iter : int, default=500
        Accepted optimizer steps at most, of the fit (the continued start).
    ftol : float, default=1e-10
        Relative decrease below which a start stops (``AskTellLBFGS``).
    restart_iter : int, default=60
        Accepted steps of each start when there are several.
    parallel_starts : int or None, default=None
        Starts evaluated in the same rounds, at most (None: all). A site keeps
        the factorization of its block at each point of a stack between the
        two exchanges of an evaluation, so its memory grows with this number.
    selection : {"likelihood", "loo"}, default="likelihood"
        Which start is continued: the lowest NLL, or the highest leave-one-out
        log predictive density of the rows (each site adds the sum over its
        rows, :func:`loo_log_density`, to its gradient message: one number a
        point), both at each start's last accepted point.
    """

    client_step_draws = False
    finalize_clients = True
    # one BLAS thread wherever a step runs: the same bits on every engine (a Flower run
    # equals the in-process fit), and the steps are many small BLAS calls
    blas_threads = 1

    def __init__(self, layout, Z, theta0, max_iter=MAX_ITER, ftol=1e-10,
                 restart_iter=RESTART_ITER, parallel_starts=None, selection="likelihood"):
        self.layout = layout
        self.Z = None if Z is None else np.asarray(Z, dtype=float)
        self.theta0 = None if theta0 is None else np.atleast_2d(np.asarray(theta0, dtype=float))
        self.max_iter = int(max_iter)
        self.ftol = float(ftol)
        self.restart_iter = int(restart_iter)
        self.parallel_starts = None if parallel_starts is None else int(parallel_starts)
        if selection not in ("likelihood", "loo"):
            raise ValueError(f"selection must be 'likelihood' or 'loo'; got {selection!r}")
        self.selection = selection

    def asks_every_client(self, server_state):
        return True

    def _optimizer(self, theta, short=False):
        return AskTellLBFGS(theta, np.array(self.layout.bounds()),
                            max_iter=self.restart_iter if short else self.max_iter,
                            ftol=self.ftol)

    def _begin(self, Z, starts, extra=None, parallel=None):
        """The first state and broadcast of the optimization from ``starts``."""
        short = len(starts) > 1  # several starts: a short run each, the best continued
        parallel = len(starts) if parallel is None else max(1, min(int(parallel), len(starts)))
        state = {"opts": {}, "pending": list(range(len(starts))), "parallel": parallel,
                 "Z": Z, "zz": Pairs(Z, Z), "starts": starts, "finished": {}, "n_eval": 0,
                 "short": short, "loo": {}, **(extra or {})}
        return self._advance(state)

    def _ask(self, state, stage, theta, **more):
        if stage == 0:  # K^{-1} at each point, the same for every site (NaN if it fails),
            # as its lower triangle (it is symmetric to the bit)
            Z = state["Z"]
            m = Z.shape[0]
            k_inv = np.full((len(theta), m * (m + 1) // 2), np.nan)
            for j, t in enumerate(theta):
                try:
                    K_inv = _inverse_kzz(self.layout.unpack(t), Z, state["zz"])[0]
                    k_inv[j] = pack_lower(K_inv)
                except np.linalg.LinAlgError:
                    pass
            more["k_inv"] = k_inv
        return {"stage": np.int64(stage), "theta": theta, "Z": state["Z"], **more}

    def _statistics_round(self, state, thetas, stage=0):
        """Ask the sites' statistics at the rows of ``thetas``."""
        new = {**state, "stage": stage, "thetas": thetas}
        return new, self._ask(new, 0, thetas)

    def _advance(self, state):
        """Retire the finished starts, start pending ones, and ask the next points."""
        opts, finished = dict(state["opts"]), dict(state["finished"])
        for k in [k for k, opt in opts.items() if opt.done]:
            opt = opts.pop(k)
            score = opt.f if opt.f is not None else np.inf
            if self.selection == "loo" and state["short"]:  # the higher the better
                score = -state["loo"].get(k, -np.inf)
            finished[k] = (score, opt.x)
        pending = list(state["pending"])
        while pending and len(opts) < state["parallel"]:
            k = pending.pop(0)
            opts[k] = self._optimizer(state["starts"][k], state["short"])
        state = {**state, "opts": opts, "pending": pending, "finished": finished}
        if opts:
            state["asked"] = sorted(opts)
            return self._statistics_round(state, np.array([opts[k].ask() for k in state["asked"]]))
        # every start has stopped: the lowest score (the first start of it on a tie)
        f_best, best = min((finished[k] for k in sorted(finished)),
                           key=lambda t: t[0] if np.isfinite(t[0]) else np.inf)
        if state["short"]:  # the best start, continued to convergence
            new = {**state, "opts": {0: self._optimizer(best)}, "pending": [], "parallel": 1,
                   "short": False, "finished": {}, "asked": [0]}
            return self._statistics_round(new, np.array([new["opts"][0].ask()]))
        # the final statistics round, at the best start's optimum
        return self._statistics_round({**state, "best": best}, best[None], stage=2)

    def server_init(self, rng):
        return self._begin(self.Z, self.theta0, parallel=self.parallel_starts)

    def _sends(self, data):
        return data.n_samples >= MIN_ROWS_MOMENTS

    def prepare_client(self, data):
        if data.n_samples > NUMPY_ROWS:
            # this site's factorizations use scipy's LAPACK: load it before the engine
            # limits the BLAS threads (blas_threads), which reaches only loaded libraries
            import scipy.linalg.lapack  # noqa: F401
        return data

    def client_step(self, data, state, broadcast, rng):
        # the state: the site's SiteGeometry, and its last statistics' caches and points
        # (None where its block failed)
        if not self._sends(data):
            return None, {}
        Z = np.asarray(broadcast["Z"])
        geom, caches, points = (None, [], []) if state is None else state
        if geom is None or not geom.matches(data.X, Z):
            X, y = self._site_rows(data, broadcast)
            geom = SiteGeometry(X, Z, self.layout, y=y, source=data.X)
        if int(broadcast["stage"]) == 1:  # the gradients at the last statistics' points
            which = np.asarray(broadcast["which"], dtype=np.int64)
            grads = np.zeros((len(which), self.layout.size))
            loos = np.zeros(len(which))
            failed = np.zeros(len(which), dtype=np.int64)
            for j, i in enumerate(which):
                if i >= len(caches) or caches[i] is None:
                    failed[j] = 1
                    continue
                out = site_gradient(geom.X, points[i], self.layout, Z, caches[i],
                                    broadcast["w"][j], broadcast["lam_inv"][j], data.index,
                                    loo=self._sends_loo(broadcast))
                if self._sends_loo(broadcast):
                    grads[j], loos[j] = out
                else:
                    grads[j] = out
            message = {"grad": grads, "failed": failed}
            if self._sends_loo(broadcast):
                message["loo"] = loos
            return (geom, caches, points), message
        thetas = np.asarray(broadcast["theta"], dtype=float)
        k_inv = unpack_lower(broadcast["k_inv"], Z.shape[0])
        stats, caches, points = [], [], []
        for theta, K_inv in zip(thetas, k_inv):
            p = self.layout.site(self.layout.unpack(theta), data.index)
            try:
                if not np.isfinite(K_inv).all():
                    raise np.linalg.LinAlgError("K(Z, Z) is not positive definite")
                message, cache = site_statistics(geom.X, geom.y, p, self.layout, Z, K_inv,
                                                 geom)
            except np.linalg.LinAlgError:
                message, cache = None, None
            stats.append(message)
            caches.append(cache)
            points.append(p)
        return (geom, caches, points), _stack_statistics(stats)

    def _sends_loo(self, broadcast):
        """Whether the sites add their leave-one-out density to the gradients: when
        it chooses among several starts."""
        return "short" in broadcast and bool(broadcast["short"])

    def _site_rows(self, data, broadcast):
        """The site's rows in the model's units."""
        return data.X, data.y

    def client_finalize(self, data, state, broadcast, rng):
        p = self.layout.site(self.layout.unpack(broadcast["theta"]), data.index)
        X, y = self._site_rows(data, broadcast)
        return site_posterior(X, y, p, self.layout, np.asarray(broadcast["Z"]),
                              np.asarray(broadcast["w"]))

    def _objective(self, state, theta, msgs, j):
        """``(nll, w, Lam^{-1}, K^{-1})`` at the ``j``-th point of the stack, or None if a
        site's block or the server's combination is not positive definite there."""
        if any(int(m["failed"][j]) for m in msgs):
            return None
        at = [{k: m[k][j] for k in _STATISTICS} for m in msgs]
        try:
            return server_objective(self.layout.unpack(theta), self.layout, state["Z"], at,
                                    state["zz"])
        except np.linalg.LinAlgError:
            return None

    def server_step(self, state, messages, rng):
        msgs = [messages[k] for k in sorted(messages) if len(messages[k])]
        if not msgs:
            raise ValueError("no site has enough rows to send its statistics (at least 3).")
        stage = state["stage"]
        opts = {k: copy.deepcopy(opt) for k, opt in state["opts"].items()}
        state = {**state, "opts": opts}
        if stage == 1:  # the gradients: each optimizer told and the next points asked
            for j, (i, (nll, w, lam_inv, K_inv)) in enumerate(state["evals"]):
                k = state["asked"][i]
                if any(int(m["failed"][j]) for m in msgs):
                    opts[k].tell(np.inf, np.zeros(self.layout.size))
                else:
                    p = self.layout.unpack(state["thetas"][i])
                    grad = server_gradient(p, self.layout, state["Z"], w, lam_inv, K_inv,
                                           [m["grad"][j] for m in msgs])
                    opts[k].tell(nll, grad)
                    if "loo" in msgs[0] and np.array_equal(opts[k].x, state["thetas"][i]):
                        # the point was accepted (or is the start): its score
                        state["loo"] = {**state["loo"], k: sum(float(m["loo"][j]) for m in msgs)}
            state["n_eval"] += len(state["evals"])
            return self._advance(state)
        found = [self._objective(state, t, msgs, j) for j, t in enumerate(state["thetas"])]
        if stage == 2:
            if found[0] is None:
                raise ValueError("the collapsed fit's optimum is not positive definite at a "
                                 "site; try other starting values")
            nll, w, lam_inv, _ = found[0]
            theta = state["best"]
            done = {**state, "stage": 3, "theta": theta, "nll": nll, "w": w,
                    "lam_inv": lam_inv}
            return done, self._ask(state, 2, theta, w=w)  # a site's posterior needs w only
        # the statistics: a point that failed is infinite, the others' gradients are asked
        evals = []
        for i, out in enumerate(found):
            if out is None:
                opts[state["asked"][i]].tell(np.inf, np.zeros(self.layout.size))
                state["n_eval"] += 1
            else:
                evals.append((i, out))
        if not evals:
            return self._advance(state)
        which = np.array([i for i, _ in evals], dtype=np.int64)
        new = {**state, "stage": 1, "evals": evals}
        return new, self._ask(new, 1, state["thetas"][which], which=which,
                              w=np.array([out[1] for _, out in evals]),
                              # whole: it is not symmetric to the bit, and a site that
                              # computed it from Lam's factor would import scipy.linalg
                              lam_inv=np.array([out[2] for _, out in evals]),
                              **({"short": np.int64(state["short"])}
                                 if self.selection == "loo" else {}))

    def converged(self, server_state):
        return server_state["stage"] == 3

    def max_rounds(self, n_starts=None):
        """An upper bound on the rounds: two per evaluation, evaluations bounded by
        the optimizer's steps and backtracks, and the final statistics round (the
        bound of running the starts one after the other)."""
        n_starts = len(self.theta0) if n_starts is None else int(n_starts)
        per_step = 2 * (AskTellLBFGS.MAX_BACKTRACKS + 2)
        steps = self.max_iter + 1 + (n_starts * (self.restart_iter + 1) if n_starts > 1 else 0)
        return 2 * per_step * steps + 3


#: the statistics a site sends at each point of a stack (:func:`site_statistics`)
_STATISTICS = ("HCH", "HCy", "logdet", "yCy")


def _stack_statistics(stats):
    """One message from a site's statistics at each point of a stack (None where its
    block failed): each statistic stacked, zeros at the failed points, and ``failed``."""
    failed = np.array([s is None for s in stats], dtype=np.int64)
    ok = [s for s in stats if s is not None]
    if not ok:
        return {"failed": failed}
    return {**{k: np.array([np.zeros_like(np.asarray(ok[0][k], dtype=float)) if s is None
                            else np.asarray(s[k], dtype=float) for s in stats])
               for k in _STATISTICS}, "failed": failed}


class PFedHGPCollapsed(CollapsedProtocol):
    """:class:`CollapsedProtocol` after a set-up round, on standardized rows.

    Round 0 gathers the sites' sums and sums of squares of ``X`` and ``y``
    (under the release rule, as PFedHGP's variational set-up): the server
    standardizes with the pooled moments, places the ``n_inducing`` global
    inducing inputs in the box (:func:`~._steps.input_setup`: a grid for one
    feature, scrambled Halton otherwise; never a site's rows) and draws
    ``n_restarts`` starts about ``restart_center`` (``theta0`` if None;
    :func:`scattered_starts`), so that with a fixed center the starts tried
    besides ``theta0`` do not depend on it; ``"auto"`` is
    :data:`AUTO_RESTARTS` if the sites' row counts sum to at most
    :data:`AUTO_RESTART_ROWS`, else 0; the starts run side by side as far as
    :meth:`parallel_for` allows. Every later broadcast carries the scaling;
    sites apply it to their own rows.

    Parameters
    ----------
    layout : Layout
    theta0 : ndarray of shape (layout.size,)
        The first start, standardized units.
    n_inducing : int
    n_restarts : int or "auto"
    restart_center : ndarray of shape (layout.size,) or None
    max_iter, ftol, selection : see :class:`CollapsedProtocol`
    normalize_X, normalize_y : bool
    input_bounds : tuple of two arrays or None
    init_inducing_global : ndarray or None
    """

    SCALING = ("x_shift", "x_scale", "y_shift", "y_scale")

    def __init__(self, layout, theta0, *, n_inducing=25, n_restarts=0, restart_center=None,
                 max_iter=MAX_ITER,
                 ftol=1e-10, normalize_X=True, normalize_y=True, input_bounds=None,
                 init_inducing_global=None, selection="likelihood"):
        super().__init__(layout, None, theta0, max_iter=max_iter, ftol=ftol,
                         selection=selection)
        self.n_inducing = int(n_inducing)
        self.n_restarts = n_restarts if n_restarts == "auto" else int(n_restarts)
        self.restart_center = restart_center
        self.normalize_X = bool(normalize_X)
        self.normalize_y = bool(normalize_y)
        self.input_bounds = input_bounds
        self.init_inducing_global = init_inducing_global

    def server_init(self, rng):
        return {"stage": -1}, {"stage": np.int64(-1)}

    def _ask(self, state, stage, theta, **more):
        return {**super()._ask(state, stage, theta, **more),
                **{k: np.asarray(state[k], dtype=float) for k in self.SCALING}}

    def _site_rows(self, data, broadcast):
        X = (data.X - broadcast["x_shift"]) / broadcast["x_scale"]
        y = (data.y - float(broadcast["y_shift"])) / float(broadcast["y_scale"])
        return X, y

    def client_step(self, data, state, broadcast, rng):
        if int(broadcast["stage"]) == -1:
            return None, {"n": np.int64(data.n_samples), **target_summary(data.y),
                          **input_summary(data.X)}
        return super().client_step(data, state, broadcast, rng)

    def server_step(self, state, messages, rng):
        if state["stage"] != -1:
            return super().server_step(state, messages, rng)
        msgs = [messages[k] for k in sorted(messages)]
        Z, _, x_shift, x_scale = input_setup(
            msgs, self.normalize_X, self.n_inducing, self.init_inducing_global, rng,
            self.layout.d, self.input_bounds)
        # inputs constant in every feature put the inducing inputs on one point: keep one
        # of each (a repeated row makes K(Z, Z) singular up to the jitter)
        Z = Z[np.sort(np.unique(Z, axis=0, return_index=True)[1])]
        if not self.layout.global_gp:  # the deviation GP alone is exact within each site
            Z = Z[:0]
        y_shift, y_scale = target_scaling(msgs, self.normalize_y)
        center = self.theta0[0] if self.restart_center is None else self.restart_center
        starts = scattered_starts(center, self.layout, self.restarts_for(msgs), rng)
        starts[0] = self.layout.tie(self.theta0[0])
        return self._begin(Z, starts, {"x_shift": x_shift, "x_scale": x_scale,
                                       "y_shift": y_shift, "y_scale": y_scale},
                           parallel=self.parallel_for(msgs))

    @staticmethod
    def parallel_for(msgs):
        """The starts run side by side: as many as keep the largest site's caches of
        its block (one a point) within :data:`PARALLEL_CELLS` entries."""
        largest = max(int(m["n"]) for m in msgs)
        return max(1, PARALLEL_CELLS // max(largest, 1) ** 2)

    def restarts_for(self, msgs):
        """The restarts of a fit whose sites sent the set-up ``msgs``."""
        if self.n_restarts != "auto":
            return self.n_restarts
        n_rows = sum(int(m["n"]) for m in msgs)
        return AUTO_RESTARTS if n_rows <= AUTO_RESTART_ROWS else 0

    def max_rounds(self):
        n = AUTO_RESTARTS if self.n_restarts == "auto" else self.n_restarts
        return super().max_rounds(1 + n) + 1


def target_scaling(msgs, normalize_y=True):
    """The pooled mean and standard deviation of ``y`` from the sites' sums (sites
    with too few rows send none, :mod:`skfed.federated._release`)."""
    sent = [m for m in msgs if "sum_y" in m]
    if not normalize_y:
        return 0.0, 1.0
    if not sent:
        too_few_rows_warning("normalize_y", MIN_ROWS_MOMENTS,
                             "y is left as it is (shift 0, scale 1)")
        return 0.0, 1.0
    n = sum(float(m["n"]) for m in sent)
    s1 = sum(float(m["sum_y"]) for m in sent)
    s2 = sum(float(m["sum_y2"]) for m in sent)
    check_pooled_scale(s2, "y")
    shift = s1 / n
    var = max(s2 / n - shift**2, 0.0)
    return shift, (float(np.sqrt(var)) if var > 0 else 1.0)
