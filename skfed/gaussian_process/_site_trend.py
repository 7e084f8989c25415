"""A site's own linear trend (``site_trend="linear"``): fitted on the site, kept there.

Each client fits its affine deviation from the prior mean on its own rows
(:func:`site_trend_fit`, in the first training round) and keeps it: never sent.
Prediction adds the trend's mean and variance at the client's rows
(:func:`site_trend_moments`).
"""

import numpy as np

# ridge penalty of a client's affine deviation (site_trend="linear"), on the model's
# units (standardized inputs, normalized targets): the prior of its intercept and
# slopes is N(0, sigma^2 / SITE_TREND_ALPHA) with sigma^2 the noise variance
SITE_TREND_ALPHA = 1.0


def site_trend_design(X):
    """The affine design ``[1, X]`` of a client's linear trend."""
    X = np.asarray(X, dtype=float)
    return np.column_stack([np.ones(X.shape[0]), X])


def site_trend_fit(X, r, alpha=SITE_TREND_ALPHA):
    """A client's affine deviation from the prior mean: ``(coef, cov)``.

    Ridge regression of the client's normalized residuals ``r`` on ``[1, X]``
    (model units), intercept penalized too: the posterior mean of a random
    intercept and slope ``b ~ N(0, (sigma^2 / alpha) I)`` with noise
    ``sigma^2`` (a random-slope mixed model with the variance ratio fixed).
    ``cov = ([1, X]^T [1, X] + alpha I)^-1``: ``sigma^2 cov`` is the posterior
    covariance of ``b``. Computed on the client, never sent.
    """
    A = site_trend_design(X)
    G = A.T @ A + alpha * np.eye(A.shape[1])
    cov = np.linalg.inv(G)  # (d + 1) x (d + 1), well conditioned for alpha > 0
    cov = 0.5 * (cov + cov.T)
    return cov @ (A.T @ np.asarray(r, dtype=float)), cov


def site_trend_moments(X, coef, cov, full):
    """Mean ``[1, X] @ coef`` and the (diagonal or full) ``[1, X] cov [1, X]^T``
    of a client's linear trend at the rows of ``X`` (model units; the variance
    is to be multiplied by the noise variance)."""
    A = site_trend_design(X)
    AC = A @ cov
    return A @ coef, (AC @ A.T if full else np.sum(AC * A, axis=1))
