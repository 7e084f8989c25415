"""Probabilistic regression metrics: Gaussian NLL, CRPS, interval coverage and width.

The definitions follow the pFedHGP paper (sec. 4.5, eqs. 43-50). Every
function takes the targets and a Gaussian predictive (mean and standard
deviation, or mean and a ``Q x Q`` covariance per row for the multivariate
NLL) and returns a float; lower is better except for coverage, which should
be close to the nominal level.
"""

import numbers

import numpy as np
from scipy.stats import norm

from ..utils._validation import check_fraction

__all__ = [
    "gaussian_nll",
    "crps_gaussian",
    "interval_coverage",
    "interval_width",
    "covariance_error",
    "calibration_error",
]


def _join(words):
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _check_arrays(**arrays):
    """The arrays as float64, refusing non-numbers, unequal shapes, empty and non-finite ones."""
    out = []
    for name, a in arrays.items():
        try:
            out.append(np.asarray(a, dtype=float))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be an array of real numbers: {exc}") from None
    names, shapes = _join(arrays), [a.shape for a in out]
    if len(set(shapes)) > 1:
        raise ValueError(
            f"{names} must have the same shape, got {_join(str(s) for s in shapes)}."
        )
    if out[0].size == 0:
        raise ValueError(f"{names} must not be empty, got shape {shapes[0]}.")
    for name, a in zip(arrays, out):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite (no NaN or infinity).")
    return out


def _check(**arrays):
    """:func:`_check_arrays` for a Gaussian predictive; the last array, ``y_std``, must be > 0."""
    out = _check_arrays(**arrays)
    if np.any(out[-1] <= 0):
        raise ValueError("y_std must be > 0 everywhere.")
    return out


def _check_level(level):
    """A nominal level: a real number in the open interval (0, 1)."""
    check_fraction(level, "level", allow_one=False)


def _check_noise_var(noise_var):
    """A variance: a finite real number >= 0 (not a boolean); a 0-d array is fine."""
    value = noise_var
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        or not 0 <= value < np.inf
    ):
        raise ValueError(f"noise_var must be a finite real number >= 0, got {noise_var!r}.")


def gaussian_nll(y_true, y_mean, y_std=None, *, y_cov=None):
    """Mean negative log density of Gaussian predictives (paper eq. 44).

    Parameters
    ----------
    y_true : array-like of shape (n,) or (n, Q)
    y_mean : array-like, same shape
    y_std : array-like, same shape, optional
        Marginal standard deviations (independent outputs).
    y_cov : array-like of shape (n, Q, Q), optional
        A full covariance per row (the multivariate NLL of eq. 44), symmetric
        positive definite. Give exactly one of ``y_std`` and ``y_cov``.

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
        if y_std is not None:
            raise ValueError("pass y_std or y_cov, not both (y_cov holds the variances).")
        y_true, mean = _check_arrays(y_true=y_true, y_mean=y_mean)
        if y_true.ndim not in (1, 2):
            raise ValueError(f"y_true must be of shape (n,) or (n, Q), got {y_true.shape}.")
        (cov,) = _check_arrays(y_cov=y_cov)
        if y_true.ndim == 1:
            y_true, mean = y_true[:, None], mean[:, None]
        if cov.shape != (*y_true.shape, y_true.shape[1]):
            raise ValueError(
                f"y_cov must have shape {(*y_true.shape, y_true.shape[1])}, got {cov.shape}."
            )
        L = _cholesky(cov)
        z = np.linalg.solve(L, (y_true - mean)[..., None])[..., 0]
        logdet = 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(1)
        Q = y_true.shape[1]
        return float(np.mean(0.5 * (Q * np.log(2 * np.pi) + logdet + (z * z).sum(1))))
    if y_std is None:
        raise ValueError("gaussian_nll needs y_std or y_cov, got neither.")
    y_true, mean, std = _check(y_true=y_true, y_mean=y_mean, y_std=y_std)
    nll = 0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y_true - mean) / std) ** 2
    return float(np.mean(nll.sum(1)) if nll.ndim == 2 else np.mean(nll))


def _cholesky(cov):
    """Cholesky factors of a stack of covariances, refusing non-symmetric or non-PD ones."""
    swapped = np.swapaxes(cov, 1, 2)
    asym = np.abs(cov - swapped).max(axis=(1, 2))
    bad = np.flatnonzero(asym > 1e-8 * np.abs(cov).max(axis=(1, 2)))
    if bad.size:
        raise ValueError(
            f"y_cov must be symmetric; the covariance of row(s) {bad[:10].tolist()} is not "
            f"(largest |C - C.T| = {asym[bad].max():.3g})."
        )
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        bad = np.flatnonzero(np.linalg.eigvalsh(cov)[:, 0] <= 0)
        rows = f"; row(s) {bad[:10].tolist()} are not" if bad.size else ""
        raise ValueError(f"y_cov must be positive definite{rows}.") from None


def crps_gaussian(y_true, y_mean, y_std):
    """Mean continuous ranked probability score of Gaussian predictives (eq. 45).

    Examples
    --------
    >>> from skfed.metrics import crps_gaussian
    >>> round(crps_gaussian([0.0], [0.0], [1.0]), 4)
    0.2337
    """
    y_true, mean, std = _check(y_true=y_true, y_mean=y_mean, y_std=y_std)
    z = (y_true - mean) / std
    crps = std * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    return float(np.mean(crps))


def interval_coverage(y_true, y_mean, y_std, level=0.95):
    """Share of targets inside the central ``level`` interval (eq. 46)."""
    _check_level(level)
    y_true, mean, std = _check(y_true=y_true, y_mean=y_mean, y_std=y_std)
    z = norm.ppf(0.5 + level / 2)
    return float(np.mean(np.abs(y_true - mean) <= z * std))


def interval_width(y_mean, y_std, level=0.95):
    """Mean width of the central ``level`` interval (eq. 47)."""
    _check_level(level)
    _, std = _check(y_mean=y_mean, y_std=y_std)
    return float(np.mean(2 * norm.ppf(0.5 + level / 2) * std))


def calibration_error(y_true, y_mean, y_std, levels=None):
    """Mean ``|coverage(p) - p|`` over nominal levels (ECE; default 0.05, ..., 0.95).

    ``levels``, if given, is a non-empty 1-D array-like of levels in (0, 1).
    """
    levels = np.arange(0.05, 0.951, 0.05) if levels is None else np.asarray(levels)
    if (
        levels.ndim != 1 or levels.size == 0 or levels.dtype.kind not in "iuf"
        or not np.all((levels > 0) & (levels < 1))
    ):
        raise ValueError(
            "levels must be a non-empty 1-D array of nominal levels in (0, 1), "
            f"got {levels.tolist()!r}."
        )
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
    y_clean, mean = _check_arrays(y_clean=y_clean, y_mean=y_mean)
    if y_clean.ndim != 2:
        raise ValueError(
            f"y_clean and y_mean must be of shape (n, Q), got {y_clean.shape}; "
            "pass one output as a column (n, 1)."
        )
    _check_noise_var(noise_var)
    (cov,) = _check_arrays(y_cov=y_cov)
    if cov.shape != (*y_clean.shape, y_clean.shape[1]):
        raise ValueError(
            f"y_cov must have shape {(*y_clean.shape, y_clean.shape[1])}, got {cov.shape}."
        )
    Q = y_clean.shape[1]
    true = np.cov(y_clean, rowvar=False, bias=True).reshape(Q, Q) + noise_var * np.eye(Q)
    est = np.cov(mean, rowvar=False, bias=True).reshape(Q, Q) + np.mean(np.asarray(y_cov), axis=0)
    return float(np.linalg.norm(est - true) / np.linalg.norm(true))
