"""Exact (RE)ML of a linear mixed model from per-group sufficient statistics.

The model of :class:`skfed.baselines.MixedLMRegressor` (Laird & Ware, 1982):
for the rows of group ``i``

    y_i = X_i beta + Z_i b_i + e_i,   b_i ~ N(0, Sigma),   e_i ~ N(0, sigma^2 I),

with ``Z_i = [1, X_i[:, S]]``. Write ``Sigma = sigma^2 L L'`` with ``L`` lower
triangular (the relative covariance factor, ``Lambda_theta`` of Bates et al.,
2015). Then ``V_i = sigma^2 (I + Z_i L L' Z_i')`` and, with the ``q x q`` matrix

    M_i = I + L' Z_i'Z_i L                      (positive definite for any L),

Sylvester's determinant identity and Woodbury's formula give

    log|I + Z_i L L' Z_i'| = log|M_i|,
    (I + Z_i L L' Z_i')^-1 = I - Z_i L M_i^-1 L' Z_i'.

So every quantity of the likelihood is a function of the group's cross
products ``Z_i'Z_i``, ``Z_i'[X_i, y_i]`` and the pooled ``[X, y]'[X, y]``:
with ``B_i = Z_i'[X_i, y_i]`` the generalized cross products are

    Q = sum_i [X_i, y_i]' (I + Z_i L L' Z_i')^-1 [X_i, y_i]
      = [X, y]'[X, y] - sum_i B_i' L M_i^-1 L' B_i,

whose blocks ``A = X'W X``, ``c = X'W y``, ``d = y'W y`` give the GLS
estimate ``beta = A^-1 c`` and the residual sum ``RSS = d - c' beta``.
Profiling out ``beta`` and ``sigma^2`` (``sigma^2 = RSS / n_eff``) leaves the
deviance (Bates et al., 2015, eqs. 34 and 41)

    ML:   -2 l(L)   = sum_i log|M_i| + N (1 + log(2 pi RSS / N)),
    REML: -2 l_R(L) = sum_i log|M_i| + log|A| + (N - p)(1 + log(2 pi RSS / (N - p))),

a smooth function of the entries of ``L``, minimized here by BFGS without
bounds (``L`` singular is a variance component on the boundary, an interior
point of the unconstrained problem) and polished by Newton steps. The
gradient is analytic: ``d log|M_i| / dL = 2 S_i L M_i^-1`` and, with
``T_i = M_i^-1 L' B_i`` and ``R_i = B_i - S_i L T_i``,
``dQ = -sum_i (R_i' dL T_i + T_i' dL' R_i)``, from which the derivatives of
``RSS`` (at the GLS ``beta``, by the envelope theorem) and of ``log|A|`` follow.

The statistics arrive per site as the row count, the column sums of
``[X, y]`` and the cross products of ``[X, y]`` about the site's own means
(the same information as the Gram matrix of ``[1, X, y]``, numerically
stable); the server pools them (Chan, Golub & LeVeque, 1983) and
standardizes by the pooled means and scales before optimizing, as
:mod:`skfed.baselines._mixedlm_core` does with the rows.

References
----------
N. M. Laird and J. H. Ware, "Random-effects models for longitudinal data",
Biometrics 38(4), 1982.
D. Bates, M. Maechler, B. Bolker and S. Walker, "Fitting linear mixed-effects
models using lme4", Journal of Statistical Software 67(1), 2015.
S. Burer and R. D. C. Monteiro, "Local minima and convergence in low-rank
semidefinite programming", Mathematical Programming 103(3), 2005.
"""

import numpy as np
from scipy.optimize import OptimizeWarning, minimize

from ..baselines._mixedlm_core import _EXACT_FIT_TOL, _COLLINEAR_TOL, _to_original
from ..federated._protocol import pack_lower, unpack_lower
from ..utils._threads import quiet_warnings

__all__ = ["MixedLMStats", "fit_from_stats", "site_statistics", "pack_lower", "unpack_lower",
           "deviance"]

# the optimizer works on the standardized problem (entries of the factor of order 1,
# the deviance of order n_samples): BFGS stops at a gradient of _GTOL_BFGS, Newton steps
# follow until a step is below _STEP_TOL relative to the entries (quadratic convergence:
# the estimates are then exact to rounding); a fit is converged if the last Newton step
# was below _STEP_TOL_CONVERGED or the gradient below _GTOL_CONVERGED
_GTOL_BFGS = 1e-6
_STEP_TOL = 1e-12
_STEP_TOL_CONVERGED = 1e-7
_GTOL_CONVERGED = 1e-5
_NEWTON_STEPS = 8


def site_statistics(X, y):
    """One site's statistics: ``(n, sums of [X, y], cross products of [X, y] about its means)``.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)

    Returns
    -------
    n : int
    sums : ndarray of shape (p + 1,)
    cross : ndarray of shape ((p + 1) (p + 2) / 2,)
        Packed lower triangle of ``(W - mean W)'(W - mean W)`` with ``W = [X, y]``.
    """
    W = np.column_stack([X, y])
    sums = W.sum(axis=0)
    Wc = W - sums / W.shape[0]
    return W.shape[0], sums, pack_lower(Wc.T @ Wc)


class MixedLMStats:
    """Pooled statistics of the sites that sent them, in standardized coordinates.

    ``grams[k]`` is the Gram matrix of ``[1, Xs, ys]`` of site ``k`` where
    ``Xs = (X - x_center) / x_scale`` and ``ys = (y - y_center) / y_scale``
    (centres are the pooled means with ``fit_intercept``, else 0; scales the
    pooled root mean squares about the centres, 1 for a constant column).

    Parameters
    ----------
    n : array-like of shape (n_sites,)
    sums : array-like of shape (n_sites, p + 1)
    cross : array-like of shape (n_sites, (p + 1) (p + 2) / 2)
    fit_intercept : bool
    """

    def __init__(self, n, sums, cross, fit_intercept):
        n = np.asarray(n, dtype=float)
        sums = np.asarray(sums, dtype=float)
        width = sums.shape[1]
        cross = unpack_lower(np.asarray(cross, dtype=float).reshape(n.size, -1), width)
        N = n.sum()
        means = sums / n[:, None]
        center = sums.sum(axis=0) / N if fit_intercept else np.zeros(width)
        dev = means - center
        # pooled second moments about the centre (Chan, Golub & LeVeque)
        moment = cross.sum(axis=0) + np.einsum("k,ki,kj->ij", n, dev, dev)
        scale = np.sqrt(np.maximum(np.diag(moment), 0.0) / N)
        scale[scale == 0] = 1.0
        a = dev / scale
        grams = np.empty((n.size, width + 1, width + 1))
        grams[:, 0, 0] = n
        grams[:, 0, 1:] = grams[:, 1:, 0] = n[:, None] * a
        grams[:, 1:, 1:] = (cross / np.outer(scale, scale)
                            + np.einsum("k,ki,kj->kij", n, a, a))
        self.n = n
        self.n_total = N
        self.grams = grams
        self.x_center, self.y_center = center[:-1], float(center[-1])
        self.x_scale, self.y_scale = scale[:-1], float(scale[-1])
        self.fit_intercept = fit_intercept

    @property
    def n_features(self):
        return self.grams.shape[1] - 2

    def relative_factor(self, cov, noise_variance, slopes):
        """A factor ``L`` of ``Sigma / sigma^2`` in standardized units, from original units.

        The inverse of the map of :func:`skfed.baselines._mixedlm_core._to_original`
        (for comparing the likelihood at another fit's estimates).
        """
        slopes = np.asarray(slopes, dtype=np.intp)
        q = 1 + slopes.size
        T = np.eye(q)
        T[0, 1:] = -self.x_center[slopes] / self.x_scale[slopes]
        T[1:, 1:] = np.diag(1.0 / self.x_scale[slopes])
        T_inv = np.linalg.inv(T)
        D = T_inv @ np.asarray(cov) @ T_inv.T / noise_variance
        w, U = np.linalg.eigh(0.5 * (D + D.T))
        return U * np.sqrt(np.maximum(w, 0.0))

    def pooled(self):
        return self.grams.sum(axis=0)


def independent_columns_gram(G, candidates, base=()):
    """Columns of ``candidates`` kept by Gram-Schmidt in order, from the Gram matrix ``G``.

    The criterion of :func:`skfed.baselines._mixedlm_core.independent_columns`
    (a column whose residual on the ``base`` columns and the columns kept
    before it is below ``_COLLINEAR_TOL`` times its norm is dropped; zero
    columns too), computed from inner products instead of rows.
    """
    basis = list(base)
    kept = []
    for j in candidates:
        norm2 = G[j, j]
        if norm2 <= 0:
            continue
        if basis:
            Gb = G[np.ix_(basis, basis)]
            v = G[basis, j]
            resid2 = norm2 - v @ np.linalg.solve(Gb, v)
        else:
            resid2 = norm2
        if resid2 > _COLLINEAR_TOL**2 * norm2:
            basis.append(j)
            kept.append(j)
    return kept


class _Deviance:
    """The profiled (RE)ML deviance of the relative covariance factor and its gradient.

    Parameters
    ----------
    S : ndarray of shape (n_groups, q, q)
        ``Z_i'Z_i``.
    B : ndarray of shape (n_groups, q, p + 1)
        ``Z_i'[X_i, y_i]``.
    P : ndarray of shape (p + 1, p + 1)
        ``[X, y]'[X, y]`` pooled over the groups.
    n_total : float
    reml : bool
    """

    def __init__(self, S, B, P, n_total, reml):
        self.S, self.B, self.P = S, B, P
        self.q = S.shape[1]
        self.p = P.shape[0] - 1
        self.n_total = n_total
        self.reml = reml
        self.n_eff = n_total - self.p if reml else n_total
        self._lower = np.tril_indices(self.q)
        self._square = tuple(np.indices((self.q, self.q)).reshape(2, -1))
        self.full = False

    @property
    def entries(self):
        """``(rows, cols)`` of the factor's free entries: lower triangle, or all when ``full``."""
        return self._square if self.full else self._lower

    def factor(self, theta):
        L = np.zeros((self.q, self.q))
        L[self.entries] = theta
        return L

    def parts(self, theta=None, L=None):
        """``(L, M^-1, T, Q, A, beta, rss, logdet M)`` at ``theta`` (or any factor ``L``)."""
        if L is None:
            L = self.factor(theta)
        M = np.eye(self.q) + L.T @ self.S @ L
        chol = np.linalg.cholesky(M)
        logdet_m = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum()
        M_inv = np.linalg.inv(M)
        T = M_inv @ (L.T @ self.B)  # M_i^-1 L' B_i
        p1 = self.p + 1  # sum_i B_i' L T_i, the groups stacked
        Q = self.P - self.B.reshape(-1, p1).T @ (L @ T).reshape(-1, p1)
        Q = 0.5 * (Q + Q.T)
        p = self.p
        A = Q[:p, :p]
        beta = np.linalg.solve(A, Q[:p, p]) if p else np.zeros(0)
        rss = float(Q[p, p] - Q[:p, p] @ beta)
        return L, M_inv, T, Q, A, beta, rss, logdet_m

    def __call__(self, theta):
        """Deviance ``-2 log-likelihood`` (constants included) and its gradient in ``theta``."""
        value, grad = self.at_factor(self.factor(theta))
        return value, grad[self.entries]

    def at_factor(self, L):
        """Deviance and its gradient (a ``q x q`` matrix) at the factor ``L``."""
        L, M_inv, T, Q, A, beta, rss, logdet_m = self.parts(L=L)
        if not rss > 0:
            return np.inf, np.zeros_like(L)
        n_eff, p = self.n_eff, self.p
        value = logdet_m + n_eff * (1.0 + np.log(2.0 * np.pi * rss / n_eff))
        w = np.append(-beta, 1.0)
        K = (n_eff / rss) * np.outer(w, w)
        if self.reml and p:
            value += np.linalg.slogdet(A)[1]
            K[:p, :p] += np.linalg.inv(A)
        R = self.B - self.S @ (L @ T)  # B_i - S_i L T_i
        grad = 2.0 * (self.S @ L @ M_inv).sum(axis=0)
        grad -= 2.0 * (R @ K @ T.transpose(0, 2, 1)).sum(axis=0)
        return float(value), grad


def deviance(stats, fixed, slopes, theta, reml):
    """Profiled deviance and gradient (for tests): see :class:`_Deviance`.

    ``theta`` is the lower triangle of the factor, row by row, or the
    ``q x q`` factor itself (then the gradient is a matrix too).
    """
    problem = _problem(stats, fixed, slopes, reml)
    theta = np.asarray(theta, dtype=float)
    return problem.at_factor(theta) if theta.ndim == 2 else problem(theta)


def _problem(stats, fixed, slopes, reml):
    """The deviance of the standardized problem with these fixed and random columns."""
    p = stats.n_features
    y_col = p + 1
    fi = ([0] if stats.fit_intercept else []) + [1 + j for j in fixed] + [y_col]
    zi = [0] + [1 + j for j in slopes]
    G = stats.grams
    S = G[:, zi][:, :, zi]
    B = G[:, zi][:, :, fi]
    P = G.sum(axis=0)[np.ix_(fi, fi)]
    return _Deviance(S, B, P, stats.n_total, reml)


def fit_from_stats(stats, slopes, *, reml, max_iter):
    """Fit the mixed model from the pooled statistics; a ``MixedLMFit`` in original units.

    Parameters
    ----------
    stats : MixedLMStats
    slopes : ndarray of int
        Features with a random slope (before dropping collinear ones).
    reml : bool
    max_iter : int
        Iterations of BFGS.

    Returns
    -------
    fit : skfed.baselines._mixedlm_core.MixedLMFit
        ``random_effects`` is empty (the BLUPs are computed at the sites);
        ``criterion`` is the maximized (RE)ML log-likelihood of the
        standardized problem.
    """
    p = stats.n_features
    G = stats.pooled()
    fixed_cols = independent_columns_gram(G, range(1, p + 1),
                                          base=[0] if stats.fit_intercept else [])
    fixed = np.asarray([j - 1 for j in fixed_cols], dtype=np.intp)
    rank = len(fixed) + int(stats.fit_intercept)
    N = stats.n_total
    if N <= rank:
        raise ValueError(
            f"A mixed model needs more rows than fixed-effect parameters: X has "
            f"n_samples={int(N)} rows (of the clients that sent their statistics) for {rank} "
            "independent fixed-effect columns"
            + (" (intercept included)." if stats.fit_intercept else ".")
        )
    kept_cols = independent_columns_gram(G, [1 + j for j in slopes], base=[0])
    kept = np.asarray([j - 1 for j in kept_cols], dtype=np.intp)
    collinear = np.setdiff1d(slopes, kept)
    q = 1 + kept.size

    # exact fit: the fixed effects explain y, nothing is left for the variances
    fi = ([0] if stats.fit_intercept else []) + list(fixed_cols)
    A = G[np.ix_(fi, fi)]
    c = G[fi, p + 1]
    beta_ols = np.linalg.solve(A, c)
    if (G[p + 1, p + 1] - c @ beta_ols) / N <= _EXACT_FIT_TOL:
        return _to_original(beta_ols, np.zeros((0, q)), np.zeros((q, q)), 0.0, fixed, kept, p,
                            stats.fit_intercept, stats.x_center, stats.x_scale,
                            stats.y_center, stats.y_scale, True, "exact", collinear, np.inf, 0)

    problem = _problem(stats, fixed, kept, reml)
    # lme4's parametrization first (the lower triangle, well conditioned), then the full
    # factor from there: see _minimize
    theta, value, converged, n_iter = _minimize(problem, pack_lower(np.eye(q)), max_iter)
    if q > 1:  # (a 1 x 1 factor is both)
        start = problem.factor(theta).ravel()
        problem.full = True
        theta, value, converged, more = _minimize(problem, start, max_iter)
        n_iter += more
    L, _, _, _, _, beta, rss, _ = problem.parts(theta)
    scale = rss / problem.n_eff
    cov = scale * (L @ L.T)
    return _to_original(beta, np.zeros((0, q)), cov, scale, fixed, kept, p,
                        stats.fit_intercept, stats.x_center, stats.x_scale, stats.y_center,
                        stats.y_scale, converged, "bfgs", collinear, -0.5 * value, n_iter)


def _minimize(problem, theta0, max_iter):
    """Minimize the deviance over the factor's entries: BFGS, then Newton steps.

    The entries are unconstrained: ``L`` and ``L`` with a column's sign
    flipped give the same covariance, and a variance on the boundary (0) is
    an interior minimum ``L_jj = 0`` with positive curvature, which BFGS
    reaches as any other. (With lme4's bound ``L_jj >= 0`` a gradient method
    can stop at ``L_jj = 0`` where the deviance is even in ``L_jj``: a
    stationary point whether or not a variance there would fit better.)

    A triangular factor of a singular covariance is not continuous in it (a
    small variance ``e^2`` with a covariance ``e c`` needs ``L_kj = c``), so a
    minimum over the triangle with some ``L_jj = 0`` need not be one over the
    covariances. A square factor ``L L'`` has no such points: a rank-deficient
    local minimum of ``f(L L')`` over square ``L`` is a stationary point of
    ``f`` on the positive semi-definite cone (Burer & Monteiro, 2005).
    ``fit_from_stats`` therefore continues over the full factor.

    BFGS stops at the precision of its line search; Newton steps on a
    finite-difference Hessian of the analytic gradient then take the
    gradient down to rounding, so the estimates are converged to many digits.

    Returns
    -------
    theta, value, converged, n_iter
    """
    # "precision loss" (OptimizeWarning), line search (RuntimeWarning): the Newton steps follow
    with np.errstate(all="ignore"), quiet_warnings(OptimizeWarning, RuntimeWarning):
        result = minimize(problem, theta0, jac=True, method="BFGS",
                          options=dict(maxiter=max_iter, gtol=_GTOL_BFGS))
    theta, n_iter = result.x, max(int(result.nit), 1)  # a flat start is one iteration
    value, grad = problem(theta)
    step_size = np.inf
    for _ in range(_NEWTON_STEPS):
        step = _newton_step(problem, theta, grad)
        step_size = np.max(np.abs(step), initial=0.0) / max(1.0, np.max(np.abs(theta)))
        if step_size <= _STEP_TOL:
            break
        # Armijo backtracking; near the optimum a step that leaves the deviance unchanged
        # to rounding is taken (the gradient, not the value, still shows the way)
        for t in 0.5 ** np.arange(12):
            new_value, new_grad = problem(theta + t * step)
            if new_value <= value + min(1e-4 * t * (grad @ step), 1e-13 * abs(value)):
                break
        else:
            break
        theta, value, grad = theta + t * step, new_value, new_grad
        n_iter += 1
    converged = bool(np.isfinite(value)) and (
        step_size <= _STEP_TOL_CONVERGED or np.max(np.abs(grad)) <= _GTOL_CONVERGED)
    return theta, float(value), converged, n_iter


def _newton_step(problem, theta, grad):
    """``-H^+ grad`` with ``H`` the central-difference Hessian (absolute eigenvalues)."""
    k = theta.size
    H = np.empty((k, k))
    for j in range(k):
        h = 1e-5 * max(1.0, abs(theta[j]))
        e = np.zeros(k)
        e[j] = h
        H[:, j] = (problem(theta + e)[1] - problem(theta - e)[1]) / (2 * h)
    w, U = np.linalg.eigh(0.5 * (H + H.T))
    # |eigenvalues|: descent at a saddle; directions of (near) zero curvature (the
    # rotations L -> L O of a square factor leave the deviance unchanged) are left out
    w = np.abs(w)
    keep = w > 1e-8 * max(np.max(w), 1e-300)
    return -U[:, keep] @ ((U[:, keep].T @ grad) / w[keep])
