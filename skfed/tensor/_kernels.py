"""numba kernels: the Stage-I per-row work (residual norms, truncation level,
row clipping), the Tucker tangent projection, the (ST-)HOSVD retraction, the
Stage-I server step and the Stage-II lasso (FISTA with entrywise
soft-thresholding)."""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice

_install_compile_notice()  # a notice while these kernels compile on first use

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
def _partition(x, k):
    """A copy of ``x`` (1-D, no NaN) with its ``k``-th order statistic at ``k``, smaller
    or equal values before it and larger or equal after (``np.partition(x, k)``).

    Quickselect with a median-of-three pivot: numba's ``np.partition`` compiles its
    general sorting machinery (seconds on a first use); the order statistics, and so
    every value read from them, are the same.
    """
    a = x.copy()
    lo, hi = 0, a.shape[0] - 1
    while hi > lo:
        mid = (lo + hi) // 2
        # median of three to a[hi], then a Lomuto partition around it
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[mid] < a[hi]:
            a[mid], a[hi] = a[hi], a[mid]
        pivot = a[hi]
        store = lo
        for i in range(lo, hi):
            if a[i] < pivot:
                a[i], a[store] = a[store], a[i]
                store += 1
        a[store], a[hi] = a[hi], a[store]
        if store == k:
            break
        if store < k:
            lo = store + 1
        else:
            hi = store - 1
    return a


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
    part = _partition(x, lo + 1)
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
# Tucker tangent-space projection, any order N: the paper's P_T (Sec. 3.1) names the
# operator without its formula; the formula is the standard one (Koch and Lubich 2010).
#
# Tensors are passed flat (C order) with their shape as an int64 array, so one
# compiled kernel serves every order. ``dims`` is the coefficient shape
# ``(p_1, ..., p_N)``, ``ranks`` the Tucker rank ``(r_1, ..., r_N)``, and
# ``U_j`` the orthonormal ``p_j x r_j`` factor of mode ``j``.


@njit(cache=True, nogil=True)
def _prod(shape, lo, hi):
    out = 1
    for k in range(lo, hi):
        out *= shape[k]
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
def pinv_rows(a, tol):
    """``pinv(a)`` of a ``m x n`` matrix, ``m <= n``, by QR of ``a^T`` when well conditioned.

    With ``a^T = Q R`` (Gram-Schmidt, each column orthogonalized twice, so
    ``Q`` is orthonormal to rounding), ``pinv(a) = Q R^{-T}``: accurate to
    about ``eps cond(a)`` like the SVD, at a fraction of its cost. If some
    ``|R_kk| <= tol max_k |R_kk|`` (rank deficient or nearly so), :func:`pinv`
    (the SVD, singular values below ``1e-15 max(s)`` dropped) decides.
    """
    m, n = a.shape
    q = np.zeros((n, m))
    rr = np.zeros((m, m))
    big = 0.0
    small = np.inf
    for k in range(m):
        for i in range(n):
            q[i, k] = a[k, i]
        for _ in range(2):
            for j in range(k):
                s = 0.0
                for i in range(n):
                    s += q[i, j] * q[i, k]
                rr[j, k] += s
                for i in range(n):
                    q[i, k] -= s * q[i, j]
        s = 0.0
        for i in range(n):
            s += q[i, k] * q[i, k]
        s = np.sqrt(s)
        rr[k, k] = s
        big = max(big, s)
        small = min(small, s)
        if s > 0:
            for i in range(n):
                q[i, k] /= s
    if m == 0 or not small > tol * big:
        return pinv(a)
    # X R^T = Q row by row: R x = q_i (R upper triangular), back substitution
    out = np.empty((n, m))
    for i in range(n):
        for k in range(m - 1, -1, -1):
            s = q[i, k]
            for j in range(k + 1, m):
                s -= rr[k, j] * out[i, j]
            out[i, k] = s / rr[k, k]
    return out


@njit(cache=True, nogil=True)
def tangent_setup(core, dims, ranks, factors):
    """Base-point quantities of the tangent projection at ``A = S x_1 U_1 ... x_N U_N``.

    ``factors`` holds the ``U_j`` (``p_j x r_j``) flat, one after the other.
    :func:`tangent_apply` works on cyclically rotated tensors: a tensor whose
    mode ``j`` comes first, followed by modes ``j + 1, ..., N, 1, ..., j - 1``
    (C order), so that every mode product is one matrix product on its
    leading mode (a BLAS call) and moves that mode to the end. Everything it
    needs is packed in one flat buffer (one array to pass per call); per mode
    ``j``, at ``offsets[5 j + 0 ... 4]``:

    0. ``U_j`` (``p_j x r_j``) and 1. ``U_j^T``;
    2. ``pinv`` of the rotated core unfolding ``S_<j>`` (``r_{-j} x r_j``;
       :func:`pinv_rows`);
    3. ``z_j``: that pseudo-inverse times ``U_k`` on the modes ``k > j``,
       ``(prod p_{>j} prod r_{<j}) x r_j``;
    4. ``H_j = S x_{k<j} U_k``, rotated to start at mode ``j``.

    Returns
    -------
    buffer : ndarray of shape (offsets[-1],)
    offsets : int64 ndarray of shape (5 N + 1,)
    """
    N = dims.shape[0]
    us = []
    uts = []
    o = 0
    for j in range(N):
        size = dims[j] * ranks[j]
        us.append(factors[o:o + size].reshape((dims[j], ranks[j])))
        uts.append(np.ascontiguousarray(us[j].T))
        o += size
    total = core.shape[0]
    parts = []
    h = core.copy()
    for j in range(N):
        rj = ranks[j]
        # rotated core: (prod r_{<j}, prod r_{>=j}) transposed
        lead = _prod(ranks, 0, j)
        rot = np.ascontiguousarray(core.reshape((lead, total // lead)).T)
        sp = pinv_rows(rot.reshape((rj, total // rj)), 1e-8)
        # sp as (r_{j+1}, ..., r_N, r_1, ..., r_j) times U_k (k > j) on the leading
        # modes, which move to the end: (r_1, ..., r_j, p_{j+1}, ..., p_N); then the
        # two blocks swapped
        z = sp.ravel()
        for k in range(j + 1, N):
            z = np.dot(z.reshape((ranks[k], z.shape[0] // ranks[k])).T, uts[k]).ravel()
        lead = _prod(ranks, 0, j + 1)
        z = np.ascontiguousarray(z.reshape((lead, z.shape[0] // lead)).T).ravel()
        parts.append(us[j].ravel())
        parts.append(uts[j].ravel())
        parts.append(sp.ravel())
        parts.append(z)
        parts.append(h)
        h = np.dot(h.reshape((rj, h.shape[0] // rj)).T, uts[j]).ravel()
    offsets = np.zeros(5 * N + 1, dtype=np.int64)
    for i in range(5 * N):
        offsets[i + 1] = offsets[i] + parts[i].shape[0]
    buffer = np.empty(offsets[5 * N])
    for i in range(5 * N):  # loops: a slice assignment compiles numba's error formatting
        part = parts[i]
        for k in range(part.shape[0]):
            buffer[offsets[i] + k] = part[k]
    return buffer, offsets


@njit(cache=True, nogil=True)
def tangent_apply(g, dims, ranks, buffer, offsets):
    """The tangent projection ``P(G)`` (flat, C order) from :func:`tangent_setup`'s output.

    ``P(G) = C x_k U_k + sum_j S x_j W_j x_{k != j} U_k`` with ``C = G x_k
    U_k^T`` and ``W_j = (I - U_j U_j^T) [G x_{k != j} U_k^T]_(j) pinv(S_(j))``,
    on cyclically rotated tensors (see :func:`tangent_setup`), each step one
    matrix product:

    * prefix contractions ``pre_j = G x_{k<j} U_k^T``, rotated to start at
      mode ``j`` (``pre_N = C``);
    * ``V_j = [G x_{k != j} U_k^T]_<j> pinv(S_<j>)`` is ``pre_j`` (as a
      ``p_j x rest`` matrix) times ``z_j``, and ``W_j = V_j - U_j (U_j^T V_j)``;
    * Horner over the modes: ``D_0 = C``, ``D_{j+1} = D_j x_j U_j + H_j x_j
      W_j`` with ``H_j = S x_{k<j} U_k``, ``P(G) = D_N`` (rotated N times:
      back in C order).
    """
    N = dims.shape[0]
    pre = []
    t = g
    for j in range(N):
        pj = dims[j]
        pre.append(t)
        u = buffer[offsets[5 * j]:offsets[5 * j + 1]].reshape((pj, ranks[j]))
        t = np.dot(t.reshape((pj, t.shape[0] // pj)).T, u).ravel()
    d = t
    for j in range(N):
        pj = dims[j]
        rj = ranks[j]
        u = buffer[offsets[5 * j]:offsets[5 * j + 1]].reshape((pj, rj))
        ut = buffer[offsets[5 * j + 1]:offsets[5 * j + 2]].reshape((rj, pj))
        pre_j = pre[j]
        rest = pre_j.shape[0] // pj
        z = buffer[offsets[5 * j + 3]:offsets[5 * j + 4]].reshape((rest, rj))
        v = np.dot(pre_j.reshape((pj, rest)), z)
        # the r_j x r_j block U_j^T V_j and the Horner step's right factor
        # [U_j^T; W_j^T] (2 r_j x p_j), W_j = V_j - U_j (U_j^T V_j): loops (tiny)
        uv = np.zeros((rj, rj))
        for k in range(rj):
            for i in range(pj):
                c = ut[k, i]
                for m in range(rj):
                    uv[k, m] += c * v[i, m]
        right = np.empty((2 * rj, pj))
        for k in range(rj):
            for i in range(pj):
                right[k, i] = ut[k, i]
        for m in range(rj):
            for i in range(pj):
                s = v[i, m]
                for k in range(rj):
                    s -= u[i, k] * uv[k, m]
                right[rj + m, i] = s
        # D_{j+1} = [D_j; H_j]^T [U_j^T; W_j^T]: one product (D_j and H_j stacked flat)
        h = buffer[offsets[5 * j + 4]:offsets[5 * j + 5]]
        n = d.shape[0]
        stacked = np.empty(2 * n)
        for i in range(n):  # loops, not slice assignments (see tangent_setup)
            stacked[i] = d[i]
            stacked[n + i] = h[i]
        d = np.dot(stacked.reshape((2 * rj, n // rj)).T, right).ravel()
    return d


@njit(cache=True, nogil=True)
def noisy_tangent_gradient(m, n, sigma, z, dims, ranks, buffer, offsets):
    """:func:`noisy_gradient` then :func:`tangent_apply`, in one call (Stage-I client step)."""
    return tangent_apply(noisy_gradient(m, n, sigma, z), dims, ranks, buffer, offsets)


# ----------------------------------------------------------------------------
# Retraction: (ST-)HOSVD with the leading singular vectors of each unfolding
# from the eigen-decomposition of its small Gram matrix.


@njit(cache=True, nogil=True)
def _flip_signs(u):
    """Make the largest-magnitude entry of every column positive (first one on ties)."""
    for c in range(u.shape[1]):
        best = 0
        for i in range(1, u.shape[0]):
            if abs(u[i, c]) > abs(u[best, c]):
                best = i
        if u[best, c] < 0:
            for i in range(u.shape[0]):
                u[i, c] = -u[i, c]


# Gram matrices up to this size are diagonalized by Jacobi rotations, larger by LAPACK
_JACOBI_MAX = 16


@njit(cache=True, nogil=True)
def sym_eig_jacobi(a):
    """Eigen-decomposition of a small symmetric matrix by cyclic Jacobi rotations.

    ``np.linalg.eigh(a)`` for the few-by-few Gram matrices of the retraction
    without a LAPACK call's set-up (several us each, more than the
    arithmetic). Rotations until the off-diagonal part is negligible against
    the diagonal (quadratic convergence, a handful of sweeps); the
    eigenvectors are orthonormal to rounding, the eigenvalues accurate to
    ``eps ||a||``.

    Returns
    -------
    w : ndarray of shape (n,)
        Eigenvalues, ascending.
    v : ndarray of shape (n, n)
        Orthonormal eigenvectors, as columns (column ``i`` for ``w[i]``).
    """
    n = a.shape[0]
    a = a.copy()
    v = np.eye(n)
    for sweep in range(60):
        off = 0.0  # largest off-diagonal magnitude (squares could underflow)
        for p in range(n):
            for q in range(p + 1, n):
                off = max(off, abs(a[p, q]))
        if off == 0.0:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = a[p, q]
                if apq == 0.0:
                    continue
                # negligible against both diagonal entries: exactly zero (ends the sweeps)
                if (sweep > 3 and abs(a[p, p]) + 100.0 * abs(apq) == abs(a[p, p])
                        and abs(a[q, q]) + 100.0 * abs(apq) == abs(a[q, q])):
                    a[p, q] = 0.0
                    a[q, p] = 0.0
                    continue
                theta = (a[q, q] - a[p, p]) / (2.0 * apq)
                if abs(theta) > 1e150:
                    t = 0.5 / theta
                else:
                    t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                    if theta < 0:
                        t = -t
                c = 1.0 / np.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):  # A J
                    akp = a[k, p]
                    akq = a[k, q]
                    a[k, p] = c * akp - s * akq
                    a[k, q] = s * akp + c * akq
                for k in range(n):  # J^T (A J)
                    apk = a[p, k]
                    aqk = a[q, k]
                    a[p, k] = c * apk - s * aqk
                    a[q, k] = s * apk + c * aqk
                a[p, q] = 0.0
                a[q, p] = 0.0
                for k in range(n):  # V J
                    vkp = v[k, p]
                    vkq = v[k, q]
                    v[k, p] = c * vkp - s * vkq
                    v[k, q] = s * vkp + c * vkq
    # ascending order by a stable insertion sort (what np.argsort does below 16 entries;
    # np.argsort and fancy indexing would compile numba's general sort and indexing)
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        j = i
        while j > 0 and a[i, i] < a[order[j - 1], order[j - 1]]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
    w = np.empty(n)
    vs = np.empty((n, n))
    for c in range(n):
        w[c] = a[order[c], order[c]]
        for k in range(n):
            vs[k, c] = v[k, order[c]]
    return w, vs


@njit(cache=True, nogil=True)
def leading_left_vectors(m, r, gap_tol):
    """Top-``r`` left singular vectors of a matrix ``m`` (C order), signs normalized.

    They are the leading eigenvectors of ``m m^T`` (``p x p``; by
    :func:`sym_eig_jacobi` up to ``p = 16``, else LAPACK ``syevd``), far
    cheaper than an SVD of a wide ``m``. Squaring ``m``
    squares its condition, so the Gram is used only when the gap
    ``lambda_r - lambda_{r+1}`` exceeds ``gap_tol lambda_1`` (subspace error
    about ``eps / gap_tol``); else (rank-deficient or nearly tied at the
    cut, zero ``m``) the SVD of ``m`` decides, as before. Column signs: the
    largest-magnitude entry of each column is positive.

    Returns
    -------
    u : ndarray of shape (m.shape[0], r)
    """
    p = m.shape[0]
    g = np.dot(m, m.T)
    if p <= _JACOBI_MAX:
        w, v = sym_eig_jacobi(g)
    else:
        w, v = np.linalg.eigh(g)  # ascending
    top = w[p - 1]
    below = 0.0
    if r < p and w[p - r - 1] > 0:
        below = w[p - r - 1]
    u = np.empty((p, r))
    if top > 0 and w[p - r] - below > gap_tol * top:
        for c in range(r):
            for i in range(p):
                u[i, c] = v[i, p - 1 - c]
    else:
        full, _, _ = np.linalg.svd(m, full_matrices=False)
        for c in range(r):
            for i in range(p):
                u[i, c] = full[i, c]
    _flip_signs(u)
    return u


@njit(cache=True, nogil=True)
def hosvd_flat(t, dims, ranks, sequential, gap_tol):
    """(ST-)HOSVD of a flat C-order tensor and its Tucker reconstruction, in one call.

    ``sequential``: ST-HOSVD (each factor from the already truncated core),
    else T-HOSVD (every factor from ``t``'s own unfoldings). Factors by
    :func:`leading_left_vectors` of the cyclically rotated unfoldings (modes
    ``j, j + 1, ..., N, 1, ..., j - 1``; a permutation of the columns of the
    usual unfolding, so the same left singular vectors); every mode product
    is one matrix product on the leading mode, which then moves to the end.

    Returns
    -------
    recon : ndarray of shape (prod(dims),)
        ``core x_1 U_1 ... x_N U_N``, flat.
    core : ndarray of shape (prod(ranks),)
        Flat, C order.
    factors : list of ndarray of shape (dims[j], ranks[j])
    """
    N = dims.shape[0]
    total = t.shape[0]
    factors = []
    if not sequential:
        for s in range(N):
            lead = _prod(dims, 0, s)
            rot = np.ascontiguousarray(t.reshape((lead, total // lead)).T)
            factors.append(leading_left_vectors(rot.reshape((dims[s], total // dims[s])),
                                                ranks[s], gap_tol))
    core = t
    for s in range(N):
        m = core.reshape((dims[s], core.shape[0] // dims[s]))
        if sequential:
            factors.append(leading_left_vectors(m, ranks[s], gap_tol))
        core = np.dot(m.T, factors[s]).ravel()
    recon = core
    for s in range(N):
        m = recon.reshape((ranks[s], recon.shape[0] // ranks[s]))
        recon = np.dot(m.T, np.ascontiguousarray(factors[s].T)).ravel()
    return recon, core, factors


@njit(cache=True, nogil=True)
def weighted_step(coef, grads, weights, step_size):
    """The Stage-I server's step before the retraction: ``coef - step_size sum_k w_k G_k``.

    ``grads`` holds the clients' gradients as rows (flat), summed in row
    order as ``sum(w * G for ...)`` would. Returns the step (flat, new
    array), ``||sum_k w_k G_k||_F`` and whether every entry of the step is
    finite.
    """
    K, size = grads.shape
    g = np.zeros(size)
    for k in range(K):
        w = weights[k]
        for i in range(size):
            g[i] += w * grads[k, i]
    out = np.empty(size)
    norm2 = 0.0
    finite = True
    for i in range(size):
        norm2 += g[i] * g[i]
        v = coef[i] - step_size * g[i]
        out[i] = v
        if not np.isfinite(v):
            finite = False
    return out, np.sqrt(norm2), finite
