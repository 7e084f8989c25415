"""Numba kernels of the generic federated baselines."""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice

_install_compile_notice()  # a notice while these kernels compile on first use


@njit(cache=True, nogil=True)
def sgd_squared_epochs(X, y, coef, intercept, order, learning_rate, alpha, batch_size,
                       fit_intercept):
    """Mini-batch SGD on ``0.5 * mean((X w + b - y)^2) + 0.5 * alpha * ||w||^2``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    coef : ndarray of shape (n_features,)
        Start point; updated in place.
    intercept : float
        Start point.
    order : ndarray of shape (n_epochs, n_samples), int
        Row order of each epoch (drawn by the caller from its random stream).
    learning_rate, alpha : float
    batch_size : int
    fit_intercept : bool

    Returns
    -------
    intercept : float
        The final intercept (``coef`` is updated in place).
    """
    n_epochs, n = order.shape
    p = X.shape[1]
    grad = np.empty(p)
    for e in range(n_epochs):
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            grad[:] = 0.0
            grad_b = 0.0
            for t in range(start, stop):
                i = order[e, t]
                r = intercept - y[i]
                for j in range(p):
                    r += X[i, j] * coef[j]
                for j in range(p):
                    grad[j] += r * X[i, j]
                grad_b += r
            m = stop - start
            for j in range(p):
                coef[j] -= learning_rate * (grad[j] / m + alpha * coef[j])
            if fit_intercept:
                intercept -= learning_rate * grad_b / m
    return intercept
