"""Linear mixed model fitting around statsmodels ``MixedLM`` (math for MixedLMRegressor).

The model is ``y = intercept + X coef + b0[g] + X[:, S] b[g] + noise`` with
``(b0, b)[g] ~ N(0, Sigma)`` for each group ``g`` and ``noise ~ N(0, sigma^2)``
(Laird & Ware, 1982). statsmodels estimates ``Sigma`` and ``sigma^2`` by
(restricted) maximum likelihood. Around it this module

* standardizes ``X`` and ``y`` (an exact reparametrization: the unstructured
  ``Sigma`` is closed under the linear change of random-effect coordinates),
  so the optimizer's absolute tolerances mean the same thing at any scale;
* drops constant and collinear columns from the fixed and the random design
  (statsmodels inverts ``X' V^-1 X`` and fails on a singular design);
* tries the optimizers one after the other, keeping going when one raises
  (statsmodels' own method list stops at the first exception);
* computes the BLUPs ``E[b_g | y]`` in a form that needs no inverse of
  ``Sigma`` (statsmodels' ``random_effects`` refuses a singular ``Sigma``,
  which is the usual estimate on the boundary).
"""

import warnings

import numpy as np

from ..utils._threads import quiet_warnings

__all__ = ["MixedLMFit", "fit_mixedlm", "independent_columns"]

# a column whose residual on the previous ones is below this fraction of its
# norm is treated as a linear combination of them
_COLLINEAR_TOL = 1e-7
# residual variance below this fraction of Var(y): an exact fit, no noise left
_EXACT_FIT_TOL = 1e-12


class MixedLMFit:
    """Plain container of a fitted mixed model in the original units."""

    def __init__(self, coef, intercept, slopes, random_effects, random_effects_cov,
                 noise_variance, converged, method, collinear_slopes, criterion,
                 n_iter):
        self.coef = coef
        self.intercept = intercept
        self.slopes = slopes
        self.random_effects = random_effects
        self.random_effects_cov = random_effects_cov
        self.noise_variance = noise_variance
        self.converged = converged
        self.method = method
        self.collinear_slopes = collinear_slopes  # requested, dropped as collinear
        # statsmodels' (RE)ML log-likelihood of the standardized problem: compares
        # optimizers on one data set, not models across data sets
        self.criterion = criterion
        self.n_iter = n_iter


class MixedLMError(ValueError):
    """Every optimizer failed on this data (a clear error instead of statsmodels' traceback)."""


def independent_columns(A, first=None):
    """Indices of the columns of ``A`` kept by Gram-Schmidt in column order.

    A column is dropped when its residual on the columns kept before it is
    below ``_COLLINEAR_TOL`` times its norm (all-zero columns are dropped).
    ``first`` is an optional column (e.g. the intercept) that every column is
    orthogonalized against first and that is always kept.

    Parameters
    ----------
    A : ndarray of shape (n_samples, n_columns)
    first : ndarray of shape (n_samples,) or None

    Returns
    -------
    keep : ndarray of int
    """
    basis = []
    if first is not None:
        basis.append(first / np.linalg.norm(first))
    keep = []
    for j in range(A.shape[1]):
        col = A[:, j]
        norm = np.linalg.norm(col)
        if norm == 0:
            continue
        r = col.copy()
        for _ in range(2):  # twice is enough (Giraud et al., 2005)
            for q in basis:
                r -= (q @ r) * q
        rn = np.linalg.norm(r)
        if rn > _COLLINEAR_TOL * norm:
            basis.append(r / rn)
            keep.append(j)
    return np.asarray(keep, dtype=np.intp)


def _blups(Z, resid, group_index, n_groups, cov, scale):
    """Conditional means ``E[b_g | y] = (s2 I + Sigma Z_g'Z_g)^-1 Sigma Z_g' r_g``.

    Equal to ``Sigma Z_g' V_g^-1 r_g`` (push-through identity) with
    ``V_g = Z_g Sigma Z_g' + s2 I``, without inverting ``Sigma``.
    """
    q = Z.shape[1]
    ztz = np.zeros((n_groups, q, q))
    np.add.at(ztz, group_index, Z[:, :, None] * Z[:, None, :])
    ztr = np.zeros((n_groups, q))
    np.add.at(ztr, group_index, Z * resid[:, None])
    lhs = scale * np.eye(q) + cov @ ztz
    rhs = ztr @ cov.T
    try:
        return np.linalg.solve(lhs, rhs[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:  # only with scale == 0 and a singular Sigma
        return np.einsum("gij,gj->gi", np.linalg.pinv(lhs), rhs)


def _n_iter(result):
    """Iterations of the optimizer behind a statsmodels result (``full_output=True``)."""
    retvals = result.hist[-1] if result.hist else {}
    if "iterations" in retvals:
        return int(retvals["iterations"])
    if retvals.get("allvecs") is not None:  # bfgs, cg: one vector per iterate
        return max(len(retvals["allvecs"]) - 1, 1)
    return int(retvals.get("fcalls", 1))


def _fit_statsmodels(y, Xf, Z, group_index, reml, methods, max_iter, fit_options=None):
    """Run statsmodels with each method until one converges.

    ``fit_options`` are passed on to ``MixedLM.fit`` (e.g. a tighter ``gtol``).

    Returns ``(result, method, converged, n_iter)`` (``n_iter`` summed over
    the methods run), or ``(None, errors, False, n_iter)`` when every method
    raised.
    """
    from statsmodels.regression.mixed_linear_model import MixedLM

    model = MixedLM(y, Xf, groups=group_index, exog_re=Z)
    best, best_method, errors, n_iter = None, None, [], 0
    for method in methods:
        start = None if best is None else best.params_object
        try:
            # boundary, singular-Hessian and retry warnings (statsmodels' ModelWarning
            # subclasses, scipy's OptimizeWarning: UserWarning; line-search and numpy
            # RuntimeWarning) concern statsmodels' standard errors or its internal
            # retries; convergence is reported through ``converged``
            with quiet_warnings(UserWarning, RuntimeWarning), np.errstate(all="ignore"):
                result = model.fit(reml=reml, method=[method], maxiter=max_iter,
                                   start_params=start, full_output=True,
                                   **(fit_options or {}))
        except (np.linalg.LinAlgError, ValueError, FloatingPointError, OverflowError) as exc:
            errors.append(f"{method}: {type(exc).__name__}: {exc}")
            continue
        n_iter += _n_iter(result)
        params = np.concatenate([np.ravel(result.fe_params), np.ravel(result.cov_re),
                                 [result.scale]])
        if not np.all(np.isfinite(params)):
            errors.append(f"{method}: non-finite estimates")
            continue
        if result.converged:
            return result, method, True, n_iter
        if best is None or result.llf > best.llf:
            best, best_method = result, method
    if best is None:
        return None, errors, False, n_iter
    return best, best_method, False, n_iter


def fit_mixedlm(X, y, group_index, n_groups, slopes, *, fit_intercept, reml, methods,
                max_iter, fit_options=None):
    """Fit the mixed model; return a :class:`MixedLMFit` in the units of ``X`` and ``y``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    group_index : ndarray of int of shape (n_samples,)
        Group of each row, in ``range(n_groups)``.
    n_groups : int
    slopes : ndarray of int
        Features with a random slope (the random intercept is always there).
    fit_intercept, reml : bool
    methods : list of str
        scipy optimizers tried in turn by statsmodels.
    max_iter : int
        Iterations per optimizer.
    fit_options : dict or None, default=None
        Further keyword arguments of statsmodels' ``MixedLM.fit`` (e.g.
        ``{"gtol": 1e-12}`` for a tightly converged reference).
    """
    n, p = X.shape
    # standardize: center only with an intercept (otherwise centering changes the model)
    x_center = X.mean(axis=0) if fit_intercept else np.zeros(p)
    Xc = X - x_center
    x_scale = np.sqrt(np.mean(Xc**2, axis=0))
    x_scale[x_scale == 0] = 1.0  # constant columns: dropped below
    Xs = Xc / x_scale
    y_center = y.mean() if fit_intercept else 0.0
    y_scale = np.sqrt(np.mean((y - y_center) ** 2))
    if y_scale == 0:
        y_scale = 1.0
    ys = (y - y_center) / y_scale

    ones = np.ones(n)
    fixed = independent_columns(Xs, first=ones if fit_intercept else None)
    Xf = np.column_stack([ones, Xs[:, fixed]]) if fit_intercept else Xs[:, fixed]
    rank = Xf.shape[1]
    if n <= rank:
        raise ValueError(
            f"A mixed model needs more rows than fixed-effect parameters: X has "
            f"n_samples={n} rows for {rank} independent fixed-effect columns"
            + (" (intercept included)." if fit_intercept else ".")
        )
    kept_slopes = slopes[independent_columns(Xs[:, slopes], first=ones)] if len(slopes) else slopes
    collinear = np.setdiff1d(slopes, kept_slopes)

    # exact fit: nothing for the variance components to explain
    beta_ols = np.linalg.lstsq(Xf, ys, rcond=None)[0]
    resid_ols = ys - Xf @ beta_ols
    if np.mean(resid_ols**2) <= _EXACT_FIT_TOL:
        q = 1 + len(kept_slopes)
        return _to_original(beta_ols, np.zeros((n_groups, q)), np.zeros((q, q)), 0.0,
                            fixed, kept_slopes, p, fit_intercept, x_center, x_scale,
                            y_center, y_scale, True, "exact", collinear, np.inf, 0)

    result, info, converged, n_iter = None, None, False, 0
    for slope_set in [kept_slopes] + ([slopes[:0]] if len(kept_slopes) else []):
        Z = np.column_stack([ones, Xs[:, slope_set]])
        result, info, converged, iters = _fit_statsmodels(ys, Xf, Z, group_index, reml,
                                                          methods, max_iter, fit_options)
        n_iter += iters
        if result is not None:
            break
        if len(slope_set):
            warnings.warn(
                f"Every optimizer failed with random slopes on features "
                f"{slope_set.tolist()} ({'; '.join(info)}); falling back to a random "
                "intercept only.",
                UserWarning,
                stacklevel=4,
            )
    if result is None:
        raise MixedLMError(
            "statsmodels MixedLM failed with every optimizer tried "
            f"({'; '.join(info)}). Check for degenerate data (e.g. groups that "
            "determine y exactly) or try another `method`."
        )
    kept_slopes = slope_set
    beta = np.asarray(result.fe_params, dtype=float)
    cov = np.asarray(result.cov_re, dtype=float)
    scale = float(result.scale)
    b = _blups(Z, ys - Xf @ beta, group_index, n_groups, cov, scale)
    return _to_original(beta, b, cov, scale, fixed, kept_slopes, p, fit_intercept, x_center,
                        x_scale, y_center, y_scale, converged, info, collinear,
                        float(result.llf), n_iter)


def _to_original(beta, b, cov, scale, fixed, slopes, p, fit_intercept, x_center, x_scale,
                 y_center, y_scale, converged, method, collinear, criterion, n_iter):
    """Undo the standardization of ``X`` and ``y`` on every estimate."""
    coef = np.zeros(p)
    beta_x = beta[1:] if fit_intercept else beta
    coef[fixed] = y_scale * beta_x / x_scale[fixed]
    intercept = y_center + (y_scale * beta[0] if fit_intercept else 0.0) - coef @ x_center
    # random effects: (b0, b_S) in standardized units -> original units, b = T b_std
    q = 1 + len(slopes)
    T = np.zeros((q, q))
    T[0, 0] = 1.0
    T[0, 1:] = -x_center[slopes] / x_scale[slopes]
    T[1:, 1:] = np.diag(1.0 / x_scale[slopes])
    T *= y_scale
    return MixedLMFit(
        coef=coef,
        intercept=float(intercept),
        slopes=np.asarray(slopes, dtype=np.intp),
        random_effects=b @ T.T,
        random_effects_cov=T @ cov @ T.T,
        noise_variance=float(y_scale**2 * scale),
        converged=bool(converged),
        method=method,
        collinear_slopes=np.asarray(collinear, dtype=np.intp),
        criterion=criterion,
        n_iter=n_iter,
    )
