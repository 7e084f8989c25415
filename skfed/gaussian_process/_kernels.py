"""Numba kernels: stationary covariance matrices and their adjoint gradients.

Every kernel here is ``k(x, z) = variance * f(r)`` with the scaled distance
``r^2 = sum_d (x_d - z_d)^2 / lengthscale_d^2`` (ARD lengthscales; pass a
vector of ``d`` equal values for one shared lengthscale). ``f`` is the radial
profile of the squared-exponential (``kind=0``), Matern 3/2 (``kind=1``) or
Matern 5/2 (``kind=2``) kernel. The gradients use ``g(r) = f'(r) / r``, which
is finite at ``r = 0`` for all three, so coincident points need no special
case.
"""

import numpy as np
from numba import njit

__all__ = ["KERNEL_KINDS", "kernel_matrix", "kernel_adjoint", "kernel_adjoint_cross"]

#: public kernel names -> the ``kind`` code of the numba functions
KERNEL_KINDS = {"rbf": 0, "matern32": 1, "matern52": 2}

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


@njit(cache=True, nogil=True)
def _profile(r2, kind):
    """Return ``(f(r), f'(r) / r)`` of the radial profile at ``r^2 = r2``."""
    if kind == 0:
        f = np.exp(-0.5 * r2)
        return f, -f
    r = np.sqrt(r2)
    if kind == 1:
        e = np.exp(-_SQRT3 * r)
        return (1.0 + _SQRT3 * r) * e, -3.0 * e
    e = np.exp(-_SQRT5 * r)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * r2) * e, -(5.0 / 3.0) * (1.0 + _SQRT5 * r) * e


@njit(cache=True, nogil=True, inline="always")
def _r2(X, i, Z, j, inv):
    """Scaled squared distance between ``X[i]`` and ``Z[j]`` (``inv`` = 1 / lengthscale).

    Inlined by numba: as a call per pair it doubles the time of a kernel matrix.
    """
    r2 = 0.0
    for k in range(X.shape[1]):
        t = (X[i, k] - Z[j, k]) * inv[k]
        r2 += t * t
    return r2


@njit(cache=True, nogil=True)
def _slope_from_value(kval, r2, kind):
    """``variance * f'(r) / r`` from ``kval = variance * f(r)`` without an ``exp``."""
    if kind == 0:
        return -kval
    r = np.sqrt(r2)
    if kind == 1:
        return -3.0 * kval / (1.0 + _SQRT3 * r)
    s = 1.0 + _SQRT5 * r
    return -(5.0 / 3.0) * s * kval / (s + (5.0 / 3.0) * r2)


@njit(cache=True, nogil=True)
def kernel_matrix(X, Z, lengthscale, variance, kind):
    """Covariance matrix ``K[i, j] = k(X[i], Z[j])``.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    Z : ndarray of shape (m, d)
    lengthscale : ndarray of shape (d,)
    variance : float
    kind : int
        0 squared exponential, 1 Matern 3/2, 2 Matern 5/2.

    Returns
    -------
    K : ndarray of shape (n, m)
    """
    n, d = X.shape
    m = Z.shape[0]
    inv = 1.0 / lengthscale
    K = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            r2 = _r2(X, i, Z, j, inv)
            f, _ = _profile(r2, kind)
            K[i, j] = variance * f
    return K


@njit(cache=True, nogil=True)
def kernel_adjoint(X, Z, lengthscale, variance, kind, Kbar):
    """Gradients of ``sum(Kbar * k(X, Z))`` (reverse mode through the kernel).

    Parameters
    ----------
    X, Z, lengthscale, variance, kind
        As in :func:`kernel_matrix`.
    Kbar : ndarray of shape (n, m)
        Adjoint of the kernel matrix.

    Returns
    -------
    g_variance : float
    g_lengthscale : ndarray of shape (d,)
    g_X : ndarray of shape (n, d)
    g_Z : ndarray of shape (m, d)
    """
    n, d = X.shape
    m = Z.shape[0]
    inv = 1.0 / lengthscale
    g_var = 0.0
    g_ls = np.zeros(d)
    g_X = np.zeros((n, d))
    g_Z = np.zeros((m, d))
    for i in range(n):
        for j in range(m):
            a = Kbar[i, j]
            if a == 0.0:
                continue
            r2 = _r2(X, i, Z, j, inv)
            f, g = _profile(r2, kind)
            g_var += a * f
            c = a * variance * g
            for k in range(d):
                diff = X[i, k] - Z[j, k]
                # dk/dl = -variance g diff^2 / l^3 ; dk/dx = variance g diff / l^2
                g_ls[k] -= c * diff * diff * inv[k] * inv[k] * inv[k]
                gx = c * diff * inv[k] * inv[k]
                g_X[i, k] += gx
                g_Z[j, k] -= gx
    return g_var, g_ls, g_X, g_Z


@njit(cache=True, nogil=True)
def kernel_adjoint_cross(X, Z, lengthscale, variance, kind, K, Kbar):
    """Gradients of ``sum(Kbar * k(X, Z))`` given the formed ``K = k(X, Z)``.

    The adjoint of the large cross-covariance of a sparse basis: it reads
    ``K`` instead of evaluating the kernel again (no ``exp``) and skips the
    gradient with respect to ``X`` (data, not a parameter), so it costs about
    one pass over ``K`` where :func:`kernel_adjoint` costs two.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    Z : ndarray of shape (m, d)
    lengthscale, variance, kind
        As in :func:`kernel_matrix`.
    K : ndarray of shape (n, m)
        ``kernel_matrix(X, Z, lengthscale, variance, kind)``.
    Kbar : ndarray of shape (n, m)
        Adjoint of ``K``.

    Returns
    -------
    g_variance : float
    g_lengthscale : ndarray of shape (d,)
    g_Z : ndarray of shape (m, d)
    """
    n, d = X.shape
    m = Z.shape[0]
    inv = 1.0 / lengthscale
    inv2 = inv * inv
    s_var = 0.0
    g_ls = np.zeros(d)
    g_Z = np.zeros((m, d))
    c = np.empty(n)
    # one inducing input at a time: its gradient sums stay in registers
    for j in range(m):
        for i in range(n):
            r2 = _r2(X, i, Z, j, inv)
            a = Kbar[i, j]
            kv = K[i, j]
            s_var += a * kv
            c[i] = a * _slope_from_value(kv, r2, kind)
        for k in range(d):
            z = Z[j, k]
            gz = 0.0
            gl = 0.0
            for i in range(n):
                diff = X[i, k] - z
                gx = c[i] * diff
                gz += gx
                gl += gx * diff
            # dk/dz = -variance g diff / l^2 ; dk/dl = -variance g diff^2 / l^3
            g_Z[j, k] -= gz * inv2[k]
            g_ls[k] -= gl * inv2[k] * inv[k]
    # d k / d variance = f = K / variance
    return s_var / variance, g_ls, g_Z
