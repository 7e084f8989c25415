"""Stationary covariance functions of pFedHGP and their adjoint gradients (numba).

Every covariance here is ``k(x, z) = variance * f(r)`` with the scaled distance
``r^2 = sum_d (x_d - z_d)^2 / lengthscale_d^2`` (ARD lengthscales; pass a
vector of ``d`` equal values for one shared lengthscale). ``f`` is the radial
profile of the squared-exponential (``kind=0``), Matern 3/2 (``kind=1``) or
Matern 5/2 (``kind=2``) kernel. The gradients use ``g(r) = f'(r) / r``, which
is finite at ``r = 0`` for all three, so coincident points need no special
case.
"""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice
from ._linalg import FASTMATH, _chol_in_place, _transposed

_install_compile_notice()  # a notice while these kernels compile on first use

#: public kernel names -> the ``kind`` code of the numba functions
KERNEL_KINDS = {"rbf": 0, "matern32": 1, "matern52": 2}


_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


def kernel_args(X, Z):
    """``X`` and ``Z`` as the numba kernels take them: C-contiguous float64, ``X``
    read-only (a view; a copy only if of another type or layout), ``Z`` a writable copy.

    The kernels compile one specialization per combination of argument types, and
    a read-only array (the engine's broadcast, a site's data) is of another type
    than a writable one. The fused kernels' own calls pass the rows read-only and
    the inducing inputs writable (their Adam steps move them); every call from
    Python does the same, so that each kernel compiles once (``Z`` has a few rows).
    """
    X = np.ascontiguousarray(X, dtype=float)
    if X.flags.writeable:
        X = X.view()
        X.flags.writeable = False
    return X, np.array(Z, dtype=float, order="C")



@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
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


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _r2(X, i, Z, j, inv):
    """Scaled squared distance between ``X[i]`` and ``Z[j]`` (``inv`` = 1 / lengthscale).

    Inlined by numba: as a call per pair it doubles the time of a kernel matrix.
    """
    r2 = 0.0
    for k in range(X.shape[1]):
        t = (X[i, k] - Z[j, k]) * inv[k]
        r2 += t * t
    return r2


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _r2_row(X, i, Zt, inv, r2, n):
    """``r2[j] = _r2(X, i, Z, j, inv)`` for ``j < n``, from ``Zt = Z^T`` (inner loops over ``j``).

    Inlined by numba, so each caller lowers it with its own fastmath flags:
    the same bits as the loop written in.
    """
    r2[:n] = 0.0
    for k in range(X.shape[1]):
        x = X[i, k]
        zk = Zt[k]
        for j in range(n):
            t = (x - zk[j]) * inv[k]
            r2[j] += t * t


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _slope_from_value(kval, r2, kind):
    """``variance * f'(r) / r`` from ``kval = variance * f(r)`` without an ``exp``."""
    if kind == 0:
        return -kval
    r = np.sqrt(r2)
    if kind == 1:
        return -3.0 * kval / (1.0 + _SQRT3 * r)
    s = 1.0 + _SQRT5 * r
    return -(5.0 / 3.0) * s * kval / (s + (5.0 / 3.0) * r2)



# ----------------------------------------------------------------------------
# covariance matrices
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
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


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def inducing_cholesky(Z, lengthscale, variance, kind, jitter):
    """Lower Cholesky factor of ``k(Z, Z) + jitter I`` in one pass (small ``Z``).

    Returns ``(info, L)``; ``info`` is nonzero if the matrix is not positive
    definite (the caller then escalates the jitter).
    """
    m = Z.shape[0]
    inv = 1.0 / lengthscale
    L = np.empty((m, m))
    for i in range(m):
        for j in range(i):
            f, _ = _profile(_r2(Z, i, Z, j, inv), kind)
            L[i, j] = variance * f
        L[i, i] = variance + jitter  # f(0) = 1 for every kind
    return _chol_in_place(L), L



# ----------------------------------------------------------------------------
# adjoints: gradients of sum(Kbar * k(X, Z))
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
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


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def kernel_adjoint_sym(Z, lengthscale, variance, kind, Kbar):
    """Gradients of ``sum(Kbar * k(Z, Z))`` for a symmetric ``Kbar``.

    :func:`kernel_adjoint` with ``X = Z`` and the two ``Z`` gradients
    summed, over the pairs ``i > j`` only (each counted twice; the diagonal
    adds to the variance only, as ``f(0) = 1``): half the kernel
    evaluations, and the inner loops run over contiguous rows. Only the
    lower triangle of ``Kbar`` is read.

    Returns
    -------
    g_variance : float
    g_lengthscale : ndarray of shape (d,)
    g_Z : ndarray of shape (m, d)
    """
    m, d = Z.shape
    inv = 1.0 / lengthscale
    Zt = _transposed(Z)  # (d, m)
    g_var = 0.0
    g_ls = np.zeros(d)
    gZt = np.zeros((d, m))
    r2 = np.empty(m)
    c = np.empty(m)
    for i in range(m):
        g_var += Kbar[i, i]
        if i == 0:
            continue
        ki = Kbar[i]
        _r2_row(Z, i, Zt, inv, r2, i)
        for j in range(i):
            f, g = _profile(r2[j], kind)
            a = 2.0 * ki[j]
            g_var += a * f
            c[j] = a * variance * g
        for k in range(d):
            zi = Zt[k, i]
            zk = Zt[k]
            gk = gZt[k]
            i2 = inv[k] * inv[k]
            s_ls = 0.0
            s_i = 0.0
            for j in range(i):
                diff = zi - zk[j]
                gx = c[j] * diff * i2
                s_ls += gx * diff
                s_i += gx
                gk[j] -= gx
            gk[i] += s_i
            g_ls[k] -= s_ls * inv[k]
    return g_var, g_ls, _transposed(gZt)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def kernel_adjoint_cross(X, Z, lengthscale, variance, kind, K, G, E, P):
    """Gradients of ``sum(Kbar * k(X, Z))`` with ``Kbar = G + E P^T``, given ``K = k(X, Z)``.

    The adjoint of the large cross-covariance of a sparse basis: it reads the
    formed ``K`` instead of evaluating the kernel again (no ``exp``), skips
    the gradient with respect to ``X`` (data, not a parameter), and takes the
    adjoint in the factored form every caller has (a dense part plus a low
    rank part), so the low-rank part is never formed as an ``(n, m)`` matrix.
    One pass over the rows; the squared exponential needs no distances at all
    (its slope is ``-K``).

    Parameters
    ----------
    X : ndarray of shape (n, d)
    Z : ndarray of shape (m, d)
    lengthscale, variance, kind
        As in :func:`kernel_matrix`.
    K : ndarray of shape (n, m)
        ``kernel_matrix(X, Z, lengthscale, variance, kind)``.
    G : ndarray of shape (n, m)
        Dense part of the adjoint of ``K``.
    E : ndarray of shape (n, k)
    P : ndarray of shape (m, k)
        Low-rank part of the adjoint of ``K``.

    Returns
    -------
    g_variance, g_lengthscale, g_Z
        As :func:`kernel_adjoint_sym`.
    """
    n, d = X.shape
    m = Z.shape[0]
    rank = P.shape[1]
    inv = 1.0 / lengthscale
    Zt = _transposed(Z)  # (d, m): the inner loops run over inducing inputs
    s_var = 0.0
    acc = np.zeros((d, m))  # sum_i c_ij (x_ik - z_jk)
    acc2 = np.zeros((d, m))  # sum_i c_ij (x_ik - z_jk)^2
    a = np.empty(m)
    c = np.empty(m)
    r2 = np.empty(m)
    for i in range(n):
        Gi = G[i]
        Ki = K[i]
        for j in range(m):
            a[j] = Gi[j]
        for q in range(rank):
            eq = E[i, q]
            for j in range(m):
                a[j] += eq * P[j, q]
        for j in range(m):
            s_var += a[j] * Ki[j]
        if kind == 0:
            for j in range(m):
                c[j] = -a[j] * Ki[j]
        else:
            _r2_row(X, i, Zt, inv, r2, m)
            for j in range(m):
                c[j] = a[j] * _slope_from_value(Ki[j], r2[j], kind)
        for k in range(d):
            x = X[i, k]
            zk = Zt[k]
            ak = acc[k]
            a2k = acc2[k]
            for j in range(m):
                diff = x - zk[j]
                gx = c[j] * diff
                ak[j] += gx
                a2k[j] += gx * diff
    # dk/dz = -variance g diff / l^2 ; dk/dl = -variance g diff^2 / l^3
    g_Z = np.empty((m, d))
    g_ls = np.zeros(d)
    for k in range(d):
        i2 = inv[k] * inv[k]
        for j in range(m):
            g_Z[j, k] = -acc[k, j] * i2
            g_ls[k] -= acc2[k, j] * i2 * inv[k]
    # d k / d variance = f = K / variance
    return s_var / variance, g_ls, g_Z

