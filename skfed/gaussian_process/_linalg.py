"""Dense linear algebra of pFedHGP: LAPACK for the general case, numba twins for the
many small matrices of a round, each twin beside its pair.

A round factors, solves and differentiates many matrices of 20 x 20 to 70 x 70,
where a numba pass costs less than a dozen LAPACK calls from Python, and a few
large ones, where LAPACK's blocked routines win. Each section below holds one
operation: its numpy/LAPACK form (the general case, called from Python) and its
numba form (called from the fused kernels of :mod:`._closed_form_kernels` and
:mod:`._covariance`, or by the dispatching numpy form for small sizes).
``tests/gaussian_process/test_linalg.py`` checks every numba twin against its pair.
"""

import functools

import numpy as np
from numba import njit
from scipy.linalg import LinAlgError
from scipy.linalg.blas import dtrmm, dtrsm
from scipy.linalg.lapack import dpotrf, dpotrs, dtrtrs

from ..utils._compile_notice import install as _install_compile_notice

_install_compile_notice()  # a notice while these kernels compile on first use


#: fastmath flags of the dense kernels: FMA contraction only. Never ``reassoc``:
#: LLVM vectorizes a loop that stores to one array and reads another behind a
#: runtime overlap check on their addresses, falling back to the scalar loop
#: when they lie close in memory; with reassociation the two loops sum in
#: different orders, so a result depended on where the allocator put the
#: arrays (fits differed in the last bits within one process). Without it the
#: vector and scalar loops do the same operations in the same order.
#: Contraction fuses the same multiply-adds in both; no flag assumes finite
#: values, so NaN checks stay valid.
FASTMATH = {"contract"}


# ----------------------------------------------------------------------------
# row-major copies the kernels make
# ----------------------------------------------------------------------------

# The transposes and slices the kernels copy to row-major: a plain loop, not
# np.ascontiguousarray, whose general copy compiled once per argument type (five
# types in the scalar round) and each into every caller's library.
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _transposed(A):
    """``A.T`` as a new row-major array."""
    n, m = A.shape
    out = np.empty((m, n))
    for i in range(n):
        for j in range(m):
            out[j, i] = A[i, j]
    return out


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _block(A, start, n, j0, m):
    """``A[start:start + n, j0:j0 + m]`` as a new row-major array."""
    out = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = A[start + i, j0 + j]
    return out


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _axpy(y, a, x):
    """``y += a * x`` in place, one element after another.

    The innermost loop of the row-ordered products (``W^T (L^{-T} A)^T``, ``X^T X``);
    inlined, so each caller lowers it with its own fastmath flags.
    """
    for j in range(x.shape[0]):
        y[j] += a * x[j]


# ----------------------------------------------------------------------------
# Cholesky factor: LAPACK dpotrf | right-looking numba factor in place
# ----------------------------------------------------------------------------

def cholesky(A):
    """Lower Cholesky factor of a symmetric positive definite ``A``.

    LAPACK ``dpotrf`` directly (the same routine and result as
    :func:`scipy.linalg.cholesky`, without its per-call overhead, which
    dominates for the many small factorizations of a round).
    """
    L, info = dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise LinAlgError(f"matrix not positive definite (dpotrf info={info}).")
    return L


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _chol_column(A, j, col):
    """Finish column ``j`` of :func:`_chol_in_place` (its entries fully updated):
    scale it, copy it into ``col`` and zero the column above the diagonal.
    Returns False if the pivot is not positive (or NaN)."""
    s = A[j, j]
    if not s > 0.0:  # also catches NaN
        return False
    d = np.sqrt(s)
    A[j, j] = d
    for i in range(j + 1, A.shape[0]):
        A[i, j] = A[i, j] / d
        col[i] = A[i, j]
    for i in range(j):
        A[i, j] = 0.0
    return True


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _chol_in_place(A):
    """Lower Cholesky factor of the SPD matrix whose lower triangle is ``A`` (in place).

    The strict upper triangle is zeroed. Returns 0, or ``j + 1`` if the
    leading minor of order ``j + 1`` is not positive definite (as LAPACK).
    Right-looking, two columns at a time: once columns ``j`` and ``j + 1``
    are final, the trailing rows take both updates in one pass of contiguous
    row operations, which vectorize (the left-looking dot products are
    reductions, which do not without reassociation, see ``FASTMATH``). Each
    entry still gets the same subtractions in the same order, so the factor
    is the left-looking one to the bit (tested).
    """
    n = A.shape[0]
    c0 = np.empty(n)
    c1 = np.empty(n)
    for j in range(0, n, 2):
        if not _chol_column(A, j, c0):
            return j + 1
        if j + 1 == n:
            break
        j1 = j + 1
        for i in range(j1, n):  # column j + 1 takes column j's update first
            A[i, j1] -= A[i, j] * c0[j1]
        if not _chol_column(A, j1, c1):
            return j1 + 1
        for i in range(j1 + 1, n):
            a0, a1 = A[i, j], A[i, j1]
            # slices, not range(j1 + 1, i + 1): a loop from a variable start
            # does not vectorize (numba's index wraparound check stays in it)
            row, x0, x1 = A[i, j1 + 1:i + 1], c0[j1 + 1:i + 1], c1[j1 + 1:i + 1]
            for k in range(row.shape[0]):
                row[k] = (row[k] - a0 * x0[k]) - a1 * x1[k]
    return 0


class CholeskyError(np.linalg.LinAlgError):
    """A covariance stayed non positive definite after every jitter retry."""


def chol_jitter(K, jitter, max_tries=8):
    """Lower Cholesky factor of ``K + jitter I``; jitter x10 on each failure.

    Returns
    -------
    L : ndarray
    used : float
        The jitter that succeeded (reported by the estimator as ``jitter_``).
    """
    n = K.shape[0]
    jit = float(jitter)
    for _ in range(max_tries):
        A = K + K.T
        A *= 0.5
        A.flat[:: n + 1] += jit
        L, info = dpotrf(A, lower=1, clean=1, overwrite_a=1)
        if info == 0 and np.isfinite(L.trace()):  # a NaN or inf reaches the diagonal
            return L, jit
        jit = max(jit * 10.0, 1e-12)
    raise CholeskyError(
        f"a kernel matrix is not positive definite even with jitter {jit / 10:.1e}; "
        "check for NaN hyperparameters or raise jitter."
    )


# ----------------------------------------------------------------------------
# triangular solves: LAPACK dtrtrs, dpotrs | numba, in place
# ----------------------------------------------------------------------------

def solve_triangular(L, B, lower=True, trans=0, check_finite=False):
    """``L^{-1} B`` (``trans=0``) or ``L^{-T} B`` (``trans=1``) for lower ``L``.

    LAPACK ``dtrtrs`` directly: these solves are small and many, so the
    wrapper overhead of :func:`scipy.linalg.solve_triangular` dominates.
    """
    x, info = dtrtrs(L, B, lower=1, trans=trans)
    if info != 0:
        raise LinAlgError(f"singular triangular factor (dtrtrs info={info}).")
    return x


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _solve_lower_t_rows(L, B):
    """``B <- L^{-T} B`` in place for lower ``L``, by whole rows of ``B``.

    Back substitution as row updates (``B[m] -= L[i, m] B[i]``): every inner
    loop is a contiguous axpy over the columns, which vectorizes; the
    dot-product form reads ``L`` down a column.
    """
    n = L.shape[0]
    for i in range(n - 1, -1, -1):
        bi = B[i]
        d = 1.0 / L[i, i]
        for c in range(bi.shape[0]):
            bi[c] *= d
        for m in range(i):
            lim = L[i, m]
            bm = B[m]
            for c in range(bi.shape[0]):
                bm[c] -= lim * bi[c]


def cho_solve(L, B):
    """``A^{-1} B`` from the lower Cholesky factor ``L`` of ``A`` (LAPACK ``dpotrs``)."""
    x, info = dpotrs(L, B, lower=1)
    if info != 0:
        raise LinAlgError(f"invalid Cholesky solve (dpotrs info={info}).")
    return x


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _chol_solve_in_place(L, x):
    """Overwrite ``x`` with ``(L L^T)^{-1} x``, ``L`` lower triangular (``_chol_in_place``)."""
    n = x.shape[0]
    for i in range(n):  # L z = x
        t = x[i]
        for p in range(i):
            t -= L[i, p] * x[p]
        x[i] = t / L[i, i]
    for i in range(n - 1, -1, -1):  # L^T out = z
        t = x[i]
        for p in range(i + 1, n):
            t -= L[p, i] * x[p]
        x[i] = t / L[i, i]


# ----------------------------------------------------------------------------
# the factor of an inverse: LAPACK | numba (no explicit inverse)
# ----------------------------------------------------------------------------

def _inv_chol_spd(P):
    """``(S, chol(S))`` for ``S = P^{-1}`` with ``P`` SPD (eigenvalues >= 1 here)."""
    Lp = cholesky(0.5 * (P + P.T))
    S = cho_solve(Lp, np.eye(P.shape[0]))
    S = 0.5 * (S + S.T)
    return S, cholesky(S)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _inv_chol_block(P, start, stop):
    """Lower Cholesky factor of ``inv(P[start:stop, start:stop])`` (lower triangle of ``P``).

    With ``J`` the exchange matrix, ``J B J = R R^T`` gives ``B = U U^T`` for
    the upper ``U = J R J``, so ``inv(B) = U^{-T} U^{-1}`` and the lower factor
    is ``U^{-T} = J R^{-T} J``: one factorization and one triangular
    inversion, no explicit inverse. Returns ``(info, factor)``.
    """
    m = stop - start
    R = np.empty((m, m))
    for i in range(m):
        for j in range(i + 1):
            # (J B J)[i, j] = B[m-1-i, m-1-j]: an upper entry of B, read from the lower
            R[i, j] = P[start + m - 1 - j, start + m - 1 - i]
    info = _chol_in_place(R)
    out = np.zeros((m, m))
    if info != 0:
        return info, out
    # Rinv = R^{-1} (lower), row by row: row i is -sum_p R[i, p] Rinv[p] / R[i, i]
    # over p < i, a sum of contiguous rows (the column-wise recurrence reads
    # Rinv with a stride and runs several times slower)
    Rinv = np.zeros((m, m))
    for i in range(m):
        ri = Rinv[i]
        for p in range(i):
            rip = R[i, p]
            rp = Rinv[p]
            for j in range(p + 1):
                ri[j] -= rip * rp[j]
        d = 1.0 / R[i, i]
        for j in range(i):
            ri[j] *= d
        ri[i] = d
    for i in range(m):
        for j in range(i + 1):
            out[i, j] = Rinv[m - 1 - j, m - 1 - i]
    return 0, out


# ----------------------------------------------------------------------------
# the Cholesky adjoint (Murray 2016): BLAS | numba (small sizes)
# ----------------------------------------------------------------------------

#: up to this size the Cholesky adjoint is one numba pass; beyond, three BLAS calls
#: are faster (their blocked kernels win from about 160 x 160 on)
SMALL_ADJOINT = 128


def chol_backward(L, L_bar):
    """Symmetric adjoint of ``K`` given the adjoint of ``L = chol(K)`` (Murray 2016).

    ``K_bar = L^{-T} Phi(L^T tril(L_bar)) L^{-1}``, symmetrized, with ``Phi``
    the lower triangle with its diagonal halved; only the lower triangle of
    ``L_bar`` is read. :func:`chol_backward_small` up to ``SMALL_ADJOINT``,
    else :func:`chol_backward_blas`.
    """
    if L.shape[0] <= SMALL_ADJOINT:
        return chol_backward_small(L, L_bar)
    return chol_backward_blas(L, L_bar)


def chol_backward_blas(L, L_bar):
    """:func:`chol_backward` in three BLAS calls (large matrices)."""
    n = L.shape[0]
    P = np.tril(dtrmm(1.0, L, np.tril(L_bar), side=0, lower=1, trans_a=1))
    P.flat[:: n + 1] *= 0.5
    K_bar = dtrsm(1.0, L, dtrsm(1.0, L, P, side=1, lower=1), side=0, lower=1, trans_a=1)
    return 0.5 * (K_bar + K_bar.T)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def chol_backward_small(L, L_bar):
    """Symmetric adjoint of ``K`` given the adjoint of its Cholesky factor ``L``.

    Reverse mode of ``L = chol(K)`` (Murray 2016, "Differentiation of the
    Cholesky decomposition"): ``P = Phi(L^T tril(L_bar))``, ``Phi`` the lower
    triangle with the diagonal halved, then ``K_bar = L^{-T} P L^{-1}``,
    symmetrized. Only the lower triangle of ``L_bar`` is read. Both solves
    are ``L^{-T}`` applied to a matrix: ``Y = L^{-T} P^T``, ``K_bar^T = ... =
    L^{-T} Y^T``.
    """
    n = L.shape[0]
    P = np.zeros((n, n))
    for k in range(n):
        lbk = L_bar[k]
        for i in range(k + 1):
            lki = L[k, i]
            pi = P[i]
            for j in range(i + 1):
                pi[j] += lki * lbk[j]
    for i in range(n):
        P[i, i] *= 0.5
    Y = _transposed(P)
    _solve_lower_t_rows(L, Y)  # Y = L^{-T} P^T = (P L^{-1})^T
    K = _transposed(Y)
    _solve_lower_t_rows(L, K)  # K = L^{-T} P L^{-1}
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = 0.5 * (K[i, j] + K[j, i])
    return out


# ----------------------------------------------------------------------------
# a factor's statistics and packed triangles: numpy | numba
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def factor_stats(L):
    """``(|L|_F^2, log det(L L^T))`` of a lower triangular factor ``L``.

    One call instead of half a dozen numpy reductions: a round needs these
    for every covariance factor it sets.
    """
    n = L.shape[0]
    sq = 0.0
    logdet = 0.0
    for i in range(n):
        li = L[i]
        for j in range(i + 1):
            sq += li[j] * li[j]
        logdet += np.log(np.abs(li[i]))
    return sq, 2.0 * logdet


@functools.lru_cache(maxsize=None)
def _tril_indices(m):
    """``np.tril_indices(m)``, made once per size (read-only; a round packs many)."""
    rows, cols = np.tril_indices(m)
    rows.flags.writeable = False
    cols.flags.writeable = False
    return rows, cols


def tril_pack(A):
    """Lower triangle (with diagonal) of a square matrix as a flat vector."""
    return A[_tril_indices(A.shape[0])]


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _tril_pack(A):
    """Lower triangle (with diagonal) of a square matrix, row by row (:func:`tril_pack`)."""
    m = A.shape[0]
    out = np.empty(m * (m + 1) // 2)
    o = 0
    for i in range(m):
        for j in range(i + 1):
            out[o] = A[i, j]
            o += 1
    return out


def tril_unpack(v, m, symmetric=False):
    """Inverse of :func:`tril_pack` (optionally mirrored to a symmetric matrix)."""
    A = np.zeros((m, m))
    A[_tril_indices(m)] = v
    if symmetric:
        A = A + np.tril(A, -1).T
    return A


# ----------------------------------------------------------------------------
# small products of the fused kernels (each sum in order)
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _dot(a, b):
    t = 0.0
    for i in range(a.shape[0]):
        t += a[i] * b[i]
    return t


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _matvec(A, x):
    """``A @ x`` for a row-major ``A``."""
    out = np.empty(A.shape[0])
    for i in range(A.shape[0]):
        out[i] = _dot(A[i], x)
    return out


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _matvec_t(A, x):
    """``A.T @ x`` for a row-major ``A``, by rows of ``A``."""
    out = np.zeros(A.shape[1])
    for i in range(A.shape[0]):
        xi = x[i]
        ai = A[i]
        for j in range(A.shape[1]):
            out[j] += ai[j] * xi
    return out

