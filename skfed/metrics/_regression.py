"""Probabilistic regression metrics: Gaussian NLL, CRPS, interval coverage and width.

The definitions follow the pFedHGP paper (sec. 4.5, eqs. 43-50). Every
function takes the targets and a Gaussian predictive (mean and standard
deviation, or mean and a ``Q x Q`` covariance per row for the multivariate
NLL) and returns a float; lower is better except for coverage, which should
be close to the nominal level.
"""

import numpy as np
from scipy.stats import norm

__all__ = [
    "gaussian_nll",
    "crps_gaussian",
    "interval_coverage",
    "interval_width",
    "covariance_error",
    "calibration_error",
]


def _check(y_true, mean, std):
    y_true, mean, std = (np.asarray(a, dtype=float) for a in (y_true, mean, std))
    if y_true.shape != mean.shape or mean.shape != std.shape:
        raise ValueError(
            f"y_true, y_mean and y_std must have the same shape, got {y_true.shape}, "
            f"{mean.shape} and {std.shape}."
        )
    if not (np.all(np.isfinite(y_true)) and np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise ValueError("y_true, y_mean and y_std must be finite (no NaN or infinity).")
    if np.any(std <= 0):
        raise ValueError("y_std must be > 0 everywhere.")
    return y_true, mean, std


def gaussian_nll(y_true, y_mean, y_std=None, *, y_cov=None):
    """Mean negative log density of Gaussian predictives (paper eq. 44).

    Parameters
    ----------
    y_true : array-like of shape (n,) or (n, Q)
    y_mean : array-like, same shape
    y_std : array-like, same shape, optional
        Marginal standard deviations (independent outputs).
    y_cov : array-like of shape (n, Q, Q), optional
        A full covariance per row (the multivariate NLL of eq. 44).

    Returns
    -------
    nll : float
        Average over rows of the negative log density of the row's targets
        (summed over the ``Q`` outputs).

    Examples
    --------
    >>> from skfed.metrics import gaussian_nll
    >>> round(gaussian_nll([0.0], [0.0], [1.0]), 4)
    0.9189
    """
    if y_cov is not None:
        y_true = np.asarray(y_true, dtype=float)
        mean = np.asarray(y_mean, dtype=float)
        cov = np.asarray(y_cov, dtype=float)
        if y_true.ndim == 1:
            y_true, mean = y_true[:, None], mean[:, None]
        if cov.shape != (*y_true.shape, y_true.shape[1]):
            raise ValueError(
                f"y_cov must have shape {(*y_true.shape, y_true.shape[1])}, got {cov.shape}."
            )
        L = np.linalg.cholesky(cov)
        z = np.linalg.solve(L, (y_true - mean)[..., None])[..., 0]
        logdet = 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(1)
        Q = y_true.shape[1]
        return float(np.mean(0.5 * (Q * np.log(2 * np.pi) + logdet + (z * z).sum(1))))
    y_true, mean, std = _check(y_true, y_mean, y_std)
    nll = 0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y_true - mean) / std) ** 2
    return float(np.mean(nll.sum(1)) if nll.ndim == 2 else np.mean(nll))


def crps_gaussian(y_true, y_mean, y_std):
    """Mean continuous ranked probability score of Gaussian predictives (eq. 45).

    Examples
    --------
    >>> from skfed.metrics import crps_gaussian
    >>> round(crps_gaussian([0.0], [0.0], [1.0]), 4)
    0.2337
    """
    y_true, mean, std = _check(y_true, y_mean, y_std)
    z = (y_true - mean) / std
    crps = std * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    return float(np.mean(crps))


def interval_coverage(y_true, y_mean, y_std, level=0.95):
    """Share of targets inside the central ``level`` interval (eq. 46)."""
    y_true, mean, std = _check(y_true, y_mean, y_std)
    z = norm.ppf(0.5 + level / 2)
    return float(np.mean(np.abs(y_true - mean) <= z * std))


def interval_width(y_mean, y_std, level=0.95):
    """Mean width of the central ``level`` interval (eq. 47)."""
    std = np.asarray(y_std, dtype=float)
    return float(np.mean(2 * norm.ppf(0.5 + level / 2) * std))


def calibration_error(y_true, y_mean, y_std, levels=None):
    """Mean ``|coverage(p) - p|`` over nominal levels (ECE; default 0.05, ..., 0.95)."""
    levels = np.arange(0.05, 0.951, 0.05) if levels is None else np.asarray(levels)
    return float(np.mean([abs(interval_coverage(y_true, y_mean, y_std, p) - p) for p in levels]))


def covariance_error(y_clean, noise_var, y_mean, y_cov):
    """Relative Frobenius error of the implied output covariance (eqs. 48-50).

    Parameters
    ----------
    y_clean : array-like of shape (n, Q)
        Noise-free targets of one client on the test grid.
    noise_var : float
        The simulator's noise variance.
    y_mean : array-like of shape (n, Q)
        Predictive means.
    y_cov : array-like of shape (n, Q, Q)
        Predictive covariances.

    Returns
    -------
    err : float
        ``|Sigma_hat - Sigma_true|_F / |Sigma_true|_F`` with ``Sigma_true`` the
        empirical covariance (``1/n``) of the clean targets plus the noise, and
        ``Sigma_hat`` that of the predictive means plus the mean predictive
        covariance.
    """
    y_clean = np.asarray(y_clean, dtype=float)
    mean = np.asarray(y_mean, dtype=float)
    Q = y_clean.shape[1]
    true = np.cov(y_clean, rowvar=False, bias=True).reshape(Q, Q) + noise_var * np.eye(Q)
    est = np.cov(mean, rowvar=False, bias=True).reshape(Q, Q) + np.mean(np.asarray(y_cov), axis=0)
    return float(np.linalg.norm(est - true) / np.linalg.norm(true))
