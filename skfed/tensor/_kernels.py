"""numba kernels of the Stage-II lasso (FISTA with entrywise soft-thresholding)."""

import numpy as np
from numba import njit

__all__ = ["soft_threshold", "fista_lasso_gram"]


@njit(cache=True, nogil=True)
def soft_threshold(x, threshold):
    """Entrywise ``sign(x) * max(|x| - threshold, 0)`` of a 2-D array (new array)."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            if v > threshold:
                out[i, j] = v - threshold
            elif v < -threshold:
                out[i, j] = v + threshold
            else:
                out[i, j] = 0.0
    return out


@njit(cache=True, nogil=True)
def fista_lasso_gram(gram, c, b0, step, penalty, n_iter):
    """FISTA for ``min_B 0.5 tr(B G B^T) - <C, B> + penalty ||B||_1``.

    With ``G = X^T X / n`` and ``C = R^T X / n`` (``R`` the residuals of the
    fixed shared part) this is the Stage-II objective (7) of the paper up to a
    constant; its gradient is ``B G - C``.

    Parameters
    ----------
    gram : ndarray of shape (p, p)
    c : ndarray of shape (q, p)
    b0 : ndarray of shape (q, p)
        Starting point.
    step : float
        Step size, ``1 / ||G||_op`` or smaller.
    penalty : float
        The l1 weight ``omega_k``.
    n_iter : int
        Number of FISTA iterations ``T_l``.

    Returns
    -------
    b : ndarray of shape (q, p)
    """
    b = b0.copy()
    y = b0.copy()
    t = 1.0
    for _ in range(n_iter):
        grad = np.dot(y, gram) - c
        b_new = soft_threshold(y - step * grad, step * penalty)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = b_new + ((t - 1.0) / t_new) * (b_new - b)
        b = b_new
        t = t_new
    return b
