"""numba kernels: the Stage-I per-row work (residual norms, truncation level,
row clipping) and the Stage-II lasso (FISTA with entrywise soft-thresholding)."""

import numpy as np
from numba import njit

__all__ = ["row_norms", "quantile_linear", "clip_rows_inplace", "clip_residuals",
           "noisy_gradient", "soft_threshold", "fista_lasso_gram"]


@njit(cache=True, nogil=True)
def row_norms(M):
    """Euclidean norm of every row of a 2-D array (``np.linalg.norm(M, axis=1)``)."""
    n, m = M.shape
    out = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(m):
            v = M[i, j]
            s += v * v
        out[i] = np.sqrt(s)
    return out


@njit(cache=True, nogil=True)
def quantile_linear(x, q):
    """``np.quantile(x, q)`` (method ``"linear"``) of a non-empty 1-D array, ``0 <= q <= 1``.

    The same arithmetic as numpy: virtual index ``(n - 1) q``, the
    two order statistics around it (found by partial sorting, ``O(n)``) and
    numpy's two-sided linear interpolation. NaN if ``x`` holds a NaN.
    """
    n = x.shape[0]
    for i in range(n):
        if np.isnan(x[i]):
            return np.nan
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return np.max(x)
    if virtual < 0:
        return np.min(x)
    lo = int(np.floor(virtual))
    # order statistic lo + 1; everything before it in the partition is <= it
    part = np.partition(x, lo + 1)
    b = part[lo + 1]
    a = part[0]
    for i in range(1, lo + 1):
        if part[i] > a:
            a = part[i]
    gamma = virtual - lo
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1.0 - gamma)
    return a + diff * gamma


@njit(cache=True, nogil=True)
def clip_rows_inplace(M, norms, tau):
    """Row-wise ``T_tau``: rows with ``norms[i] > tau`` are scaled by ``tau / norms[i]``."""
    for i in range(M.shape[0]):
        if norms[i] > tau:
            s = tau / norms[i]
            for j in range(M.shape[1]):
                M[i, j] *= s


@njit(cache=True, nogil=True)
def clip_residuals(R, q, tau):
    """Row-wise ``T_tau`` of ``R`` in place, at ``tau`` or, if ``tau`` is NaN, its ``q`` quantile.

    :func:`row_norms`, :func:`quantile_linear` and :func:`clip_rows_inplace`
    in one call (a client's Stage-I step makes one per round). Returns the
    level used (NaN if a norm is NaN; then nothing is clipped).
    """
    norms = row_norms(R)
    if np.isnan(tau):
        tau = quantile_linear(norms, q)
    clip_rows_inplace(R, norms, tau)
    return tau


@njit(cache=True, nogil=True)
def noisy_gradient(m, n, sigma, z):
    """``-m / n + sigma * z`` (flat, new array): the Stage-I gradient and its noise.

    ``m`` is the contraction ``R^T X`` and ``z`` the standard normal draw of
    the Gaussian mechanism, both flat; with ``sigma == 0`` the noise is left
    out (``z`` may then be empty). Elementwise, in the order numpy evaluates
    ``-(m) / n`` and ``grad + sigma * z``, so the result is bitwise the same.
    """
    out = np.empty(m.shape[0])
    for i in range(m.shape[0]):
        out[i] = -m[i] / n
    if sigma != 0:
        for i in range(m.shape[0]):
            out[i] = out[i] + sigma * z[i]
    return out


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


# ----------------------------------------------------------------------------
# Tucker tangent-space projection (spec section 2.0), any order N.
#
# Tensors are passed flat (C order) with their shape as an int64 array, so one
# compiled kernel serves every order. ``dims`` is the coefficient shape
# ``(p_1, ..., p_N)``, ``ranks`` the Tucker rank ``(r_1, ..., r_N)``, and
# ``factors[j]`` the orthonormal ``p_j x r_j`` factor ``U_j`` (tuples of arrays).


@njit(cache=True, nogil=True)
def _prod(shape, lo, hi):
    out = 1
    for k in range(lo, hi):
        out *= shape[k]
    return out


@njit(cache=True, nogil=True)
def _mode_product_add(out, t, shape, mode, m):
    """``out += T x_mode M`` (all flat, C order); see :func:`mode_product_flat`."""
    n = shape[mode]
    a = m.shape[0]
    left = _prod(shape, 0, mode)
    right = _prod(shape, mode + 1, shape.shape[0])
    if right == 1:  # last mode: a small matrix product T (left x n) M^T
        for b in range(left):
            for i in range(a):
                s = 0.0
                for k in range(n):
                    s += m[i, k] * t[b * n + k]
                out[b * a + i] += s
        return
    for b in range(left):
        for i in range(a):
            o = (b * a + i) * right
            for k in range(n):
                c = m[i, k]
                s = (b * n + k) * right
                for r in range(right):
                    out[o + r] += c * t[s + r]


@njit(cache=True, nogil=True)
def mode_product_flat(t, shape, mode, m):
    """``T x_mode M`` of a C-order tensor stored flat.

    Parameters
    ----------
    t : ndarray of shape (prod(shape),)
    shape : int64 ndarray
        Shape of ``T``.
    mode : int
    m : ndarray of shape (a, shape[mode])

    Returns
    -------
    out : ndarray of shape (prod(shape) // shape[mode] * a,)
        Flat, C order; its shape is ``shape`` with ``shape[mode]`` replaced by ``a``.
    """
    out = np.zeros(t.shape[0] // shape[mode] * m.shape[0])
    _mode_product_add(out, t, shape, mode, m)
    return out


@njit(cache=True, nogil=True)
def pinv(a):
    """``np.linalg.pinv(a)`` (singular values below ``1e-15 max(s)`` dropped) of a 2-D array."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    cutoff = 1e-15 * s.max() if s.size else 0.0
    m, n = a.shape
    k = s.shape[0]
    scaled_ut = np.zeros((k, m))
    for t in range(k):
        if s[t] > cutoff:
            inv = 1.0 / s[t]
            for i in range(m):
                scaled_ut[t, i] = inv * u[i, t]
    return np.ascontiguousarray(vt.T) @ scaled_ut


@njit(cache=True, nogil=True)
def tangent_setup(core, dims, ranks, factors):
    """Base-point quantities of the tangent projection at ``A = S x_1 U_1 ... x_N U_N``.

    Returns three lists over the modes ``j``:

    * ``core_pinv[j] = pinv(S_(j))`` (``r_{-j} x r_j``, C-order unfolding);
    * ``z[j]``: ``pinv(S_(j))`` seen as a tensor ``(prod r_{<j}, r_{j+1}, ...,
      r_N, r_j)`` times ``U_k`` on the modes ``k > j``, reshaped to
      ``(prod r_{<j}, prod p_{>j}, r_j)``;
    * ``horner[j] = S x_{k<j} U_k`` (flat), the shared part of the terms whose
      special mode is ``j`` or later.
    """
    N = dims.shape[0]
    core_pinv = []
    z = []
    horner = []
    flat = core.ravel()
    for j in range(N):
        rj = ranks[j]
        left = _prod(ranks, 0, j)
        right = _prod(ranks, j + 1, N)
        # mode-j unfolding of the core: column index (b, r) -> b * right + r
        unf = np.empty((rj, left * right))
        for b in range(left):
            for i in range(rj):
                for r in range(right):
                    unf[i, b * right + r] = flat[(b * rj + i) * right + r]
        sp = pinv(unf)
        core_pinv.append(sp)
        # z[j]: U_k on the middle modes of sp as (left, r_{j+1}, ..., r_N, r_j)
        shape = np.empty(N - j + 1, dtype=np.int64)
        shape[0] = left
        for k in range(j + 1, N):
            shape[k - j] = ranks[k]
        shape[N - j] = rj
        t = sp.ravel()
        for k in range(j + 1, N):
            t = mode_product_flat(t, shape, k - j, factors[k])
            shape[k - j] = dims[k]
        z.append(t.reshape((left, _prod(dims, j + 1, N), rj)))
    shape = ranks.copy()
    t = flat.copy()
    for j in range(N):
        horner.append(t)
        t = mode_product_flat(t, shape, j, factors[j])
        shape[j] = dims[j]
    return core_pinv, z, horner


@njit(cache=True, nogil=True)
def tangent_apply(g, dims, ranks, factors, factors_t, core_pinv, z, horner):
    """The tangent projection ``P(G)`` (flat, C order) from :func:`tangent_setup`'s output.

    ``P(G) = C x_k U_k + sum_j S x_j W_j x_{k != j} U_k`` with ``C = G x_k
    U_k^T`` and ``W_j = (I - U_j U_j^T) [G x_{k != j} U_k^T]_(j) pinv(S_(j))``:

    * prefix contractions ``pre_j = G x_{k<j} U_k^T`` (``N`` mode products,
      ``pre_N = C``);
    * ``[G x_{k != j} U_k^T]_(j) pinv(S_(j))`` is ``pre_j`` contracted with
      ``z[j]``, and ``U_j^T [.]_(j) = C_(j)``;
    * Horner over the modes: ``D_0 = C``, ``D_{j+1} = D_j x_j U_j +
      (S x_{k<j} U_k) x_j W_j``, ``P(G) = D_N``.
    """
    N = dims.shape[0]
    shape = dims.copy()
    pre = [g]
    t = g
    for j in range(N):
        t = mode_product_flat(t, shape, j, factors_t[j])
        shape[j] = ranks[j]
        pre.append(t)
    C = pre[N]
    out = C
    # shape of D_j: (p_{<j}, r_{>=j}); now equal to ranks
    for j in range(N):
        pj = dims[j]
        rj = ranks[j]
        left = _prod(ranks, 0, j)
        right_p = _prod(dims, j + 1, N)
        right_r = _prod(ranks, j + 1, N)
        pre_j = pre[j]
        zj = z[j]
        sp = core_pinv[j]
        W = np.zeros((pj, rj))
        for b in range(left):
            for i in range(pj):
                base = (b * pj + i) * right_p
                for r in range(right_p):
                    v = pre_j[base + r]
                    for c in range(rj):
                        W[i, c] += v * zj[b, r, c]
        csp = np.zeros((rj, rj))
        for b in range(left):
            for i in range(rj):
                base = (b * rj + i) * right_r
                for r in range(right_r):
                    v = C[base + r]
                    row = b * right_r + r
                    for c in range(rj):
                        csp[i, c] += v * sp[row, c]
        U = factors[j]
        for i in range(pj):
            for c in range(rj):
                s = 0.0
                for k in range(rj):
                    s += U[i, k] * csp[k, c]
                W[i, c] -= s
        new = mode_product_flat(out, shape, j, U)
        _mode_product_add(new, horner[j], shape, j, W)
        out = new
        shape[j] = pj
    return out
