"""Numba kernels of the closed-form (``optimizer="cavi"``) round (:mod:`._closed_form`).

The optimal ``q`` of latents sharing a residual and the coordinate ascent on
their loadings (:func:`latent_sweeps`, :func:`closed_form_q`), a small
client's basis and its products (:func:`basis_rows`, :func:`local_products_rows`),
the fused local steps (:func:`cavi_local_steps`) and a small client's whole
round in one call (:func:`cavi_round_small`): many small clients, where a
round's cost is otherwise the Python and call overhead of its many small
operations. Each is tested against the step-by-step numpy/LAPACK round.
"""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice
from ._adam import adam_update
from ._covariance import (
    inducing_cholesky,
    kernel_adjoint_cross,
    kernel_adjoint_sym,
    kernel_matrix,
)
from ._linalg import (
    FASTMATH,
    _axpy,
    _block,
    _chol_in_place,
    _chol_solve_in_place,
    _dot,
    _inv_chol_block,
    _matvec,
    _matvec_t,
    _solve_lower_t_rows,
    _transposed,
    _tril_pack,
    chol_backward_small,
    factor_stats,
)

_install_compile_notice()  # a notice while these kernels compile on first use


# ----------------------------------------------------------------------------
# the optimal q of latents sharing a residual
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _latent_q_step(G, C, off, prior, B, s2, want_cov, P, Ls, means):
    """Optimal covariances and joint means of latents sharing a residual (one ``q`` step).

    The latents' stacked bases ``S`` give ``G = S S^T`` (lower triangle read)
    and ``C = S R``; latent ``k`` holds coefficients ``off[k]:off[k + 1]``,
    has prior precision ``prior[k]`` and loading column ``B[:, k]``. Each
    covariance wanted is ``(prior_k I + |b_k|^2 G_kk / s2)^{-1}`` (its lower
    factor into ``Ls[k]``), the means solve ``(b^T b o G / s2 + diag(prior))
    m = [C_k b_k] / s2`` (into ``means``; the factors of the others are
    zeroed); ``P`` is ``N x N`` workspace.
    Returns 0, or nonzero if a precision was not positive definite.
    """
    K = off.shape[0] - 1
    Q = C.shape[1]
    for k in range(K):
        if not want_cov[k]:
            Ls[k] = 0.0
            continue
        a, m = off[k], off[k + 1] - off[k]
        beta = 0.0
        for q in range(Q):
            beta += B[q, k] * B[q, k]
        for i in range(m):
            for j in range(i + 1):
                P[a + i, a + j] = beta * G[a + i, a + j] / s2
            P[a + i, a + i] += prior[k]
        info, Lk = _inv_chol_block(P, a, a + m)
        if info != 0:
            return info
        for i in range(m):  # loops: a slice assignment compiles numba's error formatting
            for j in range(m):
                Ls[k, i, j] = Lk[i, j]
    # the joint precision of all means: coupling (b_k . b_l) G_kl / s2
    for k in range(K):
        for l in range(k + 1):
            cpl = 0.0
            for q in range(Q):
                cpl += B[q, k] * B[q, l]
            for i in range(off[k], off[k + 1]):
                stop = off[l + 1] if l < k else i + 1
                for j in range(off[l], stop):
                    P[i, j] = cpl * G[i, j] / s2
                if l == k:
                    P[i, i] += prior[k]
        for i in range(off[k], off[k + 1]):
            t = 0.0
            for q in range(Q):
                t += C[i, q] * B[q, k]
            means[i] = t / s2
    info = _chol_in_place(P)
    if info != 0:
        return info
    _chol_solve_in_place(P, means)
    return 0


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH, inline="always")
def _prior_block_rows(P, Gw, s2, inv_prior):
    """Rows ``:k`` (lower triangle) of the joint precision ``[[Gw, .], [., .]] / s2 +
    diag(inv_prior I, .)`` of ``(m_delta, m_u)``."""
    for i in range(Gw.shape[0]):
        for j in range(i + 1):
            P[i, j] = Gw[i, j] / s2
        P[i, i] += inv_prior


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _local_precision_rows(P, k, C, Gv, s2):
    """Rows ``k:`` (lower triangle) of the joint precision ``[[., C], [C^T, Gv]] /
    s2 + diag(., I)`` of ``(m_delta, m_u)``."""
    for i in range(Gv.shape[0]):
        for j in range(k):
            P[k + i, j] = C[j, i] / s2
        for j in range(i + 1):
            P[k + i, k + j] = Gv[i, j] / s2
        P[k + i, k + i] += 1.0


# inlined into cavi_round_small (no arithmetic of its own, so the caller's fastmath
# flags change nothing): one compiled library fewer for the round to link
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH, inline="always")
def closed_form_q(Gw, C, Gv, rw, rv, s2, inv_prior_w, want_ld):
    """Optimal ``q(delta_i)``, ``q(u_i)`` from the Gram statistics (derived here).

    The scalar model's case of :func:`_latent_q_step`: two latents (either
    may be empty) with unit loadings, ``G = [[Gw, C], [C^T, Gv]]`` and ``S R
    = [rw; rv]``. The joint precision is ``P = G / s2 + diag(inv_prior_w I,
    I)``; the means solve ``P m = [rw; rv] / s2``; each covariance is the
    inverse of its own precision block (the factorized ``q``).

    Returns
    -------
    info : int
        0, or nonzero if a precision was not positive definite.
    means : ndarray of shape (k + nu,)
    Lu : ndarray of shape (nu, nu)
        Lower Cholesky factor of the ``q(u_i)`` covariance.
    Ld : ndarray of shape (k, k)
        Lower Cholesky factor of the ``q(delta_i)`` covariance (zeros unless
        ``want_ld``).
    """
    k = Gw.shape[0]
    nu = Gv.shape[0]
    N = k + nu
    G = np.empty((N, N))  # the lower triangle is what the step reads
    r = np.empty((N, 1))
    for i in range(k):
        for j in range(i + 1):
            G[i, j] = Gw[i, j]
        r[i, 0] = rw[i]
    for i in range(nu):
        for j in range(k):
            G[k + i, j] = C[j, i]
        for j in range(i + 1):
            G[k + i, k + j] = Gv[i, j]
        r[k + i, 0] = rv[i]
    blocks = (1 if k > 0 else 0) + (1 if nu > 0 else 0)
    off = np.zeros(blocks + 1, dtype=np.int64)
    prior = np.empty(blocks)
    want = np.empty(blocks, dtype=np.bool_)
    b = 0
    if k > 0:
        off[1], prior[0], want[0] = k, inv_prior_w, want_ld
        b = 1
    if nu > 0:
        off[b + 1], prior[b], want[b] = N, 1.0, True
    mx = max(k, nu)
    Ls = np.zeros((blocks, mx, mx))
    means = np.empty(N)
    info = _latent_q_step(G, r, off, prior, np.ones((1, blocks)), s2, want, np.empty((N, N)),
                          Ls, means)
    Ld = _block(Ls[0], 0, k, 0, k) if k > 0 else np.zeros((0, 0))
    Lu = _block(Ls[b], 0, nu, 0, nu) if nu > 0 else np.zeros((0, 0))
    return info, means, Lu, Ld


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def latent_sweeps(G, C, sizes, prior, kt, B0, s2, n_sweeps, want_cov):
    """Coordinate ascent on the ``q`` and loadings of latents sharing a residual.

    The multi-output client's sweeps (``_ilmm.solve_local_ilmm``) and, with
    ``n_sweeps=0``, the ``q`` step of the multi-output server and (through
    :func:`closed_form_q`'s :func:`_latent_q_step`) of the scalar model.
    ``K`` independent latents (a client's deviation latents, then its local
    ones) with stacked bases ``W = [W_1; ...; W_K]`` share the partial
    residual ``R`` (``n x Q``). ``G = W W^T`` (both triangles) and ``C = W R``
    carry all the sweeps need (derived here): with ``b_k`` the loading columns and ``beta_k
    = |b_k|^2``, each sweep sets every covariance to ``(p_k I + beta_k G_kk /
    s2)^{-1}``, the means by one joint solve of ``(b^T b o G / s2 +
    diag(p)) m = [C_k b_k] / s2`` and then the loadings to ``R^T H (H^T H +
    diag(v))^{-1}`` with ``H^T H = [m_k^T G_kl m_l]``, ``H^T R = [m_k^T
    C_k]`` and ``v_k = tr(G_kk S_k) + kt_k``; ``n_sweeps`` times, then the
    covariances and means once more, the covariances of the latents marked
    in ``want_cov`` only (the others' factors stay zeros).

    Returns
    -------
    info : int
        0, or nonzero if a precision was not positive definite.
    means : ndarray of shape (sum(sizes),)
    Ls : ndarray of shape (K, max(sizes), max(sizes))
        Covariance factors, latent ``k``'s in ``Ls[k, :sizes[k], :sizes[k]]``.
    B : ndarray of shape (Q, K)
        The loadings.
    """
    K = sizes.shape[0]
    N = G.shape[0]
    Q = C.shape[1]
    off = np.zeros(K + 1, dtype=np.int64)
    for k in range(K):
        off[k + 1] = off[k] + sizes[k]
    mx = 0
    for k in range(K):
        mx = max(mx, sizes[k])
    B = B0.copy()
    Ls = np.zeros((K, mx, mx))
    means = np.zeros(N)
    P = np.empty((N, N))
    every = np.ones(K, dtype=np.bool_)  # the ridge steps need every covariance
    for sweep in range(n_sweeps + 1):
        want = want_cov if sweep == n_sweeps else every
        info = _latent_q_step(G, C, off, prior, B, s2, want, P, Ls, means)
        if info != 0:
            return info, means, Ls, B
        if sweep == n_sweeps:  # end with q optimal for the final loadings
            break
        # the loadings: ridge regression of R on H, all from G and C
        A = np.zeros((K, K))
        HtR = np.zeros((K, Q))
        for k in range(K):
            for l in range(K):
                t = 0.0
                for i in range(off[k], off[k + 1]):
                    gi = 0.0
                    for j in range(off[l], off[l + 1]):
                        gi += G[i, j] * means[j]
                    t += means[i] * gi
                A[k, l] = t
            # tr(G_kk S_k) = sum(L * (G_kk L)), the rows of G_kk L as sums of
            # rows of L (contiguous, vectorized)
            a, m = off[k], sizes[k]
            GL = np.zeros((m, m))
            for i in range(m):
                gl = GL[i]
                for q in range(m):
                    gq = G[a + i, a + q]
                    lq = Ls[k, q]
                    for j in range(q + 1):
                        gl[j] += gq * lq[j]
            v = kt[k]
            for i in range(m):
                for j in range(i + 1):
                    v += Ls[k, i, j] * GL[i, j]
            A[k, k] += v
            for q in range(Q):
                t = 0.0
                for i in range(off[k], off[k + 1]):
                    t += means[i] * C[i, q]
                HtR[k, q] = t
        info = _chol_in_place(A)
        if info != 0:
            return info, means, Ls, B
        col = np.empty(K)
        for q in range(Q):
            for k in range(K):
                col[k] = HtR[k, q]
            _chol_solve_in_place(A, col)
            for k in range(K):
                B[q, k] = col[k]
    return 0, means, Ls, B



# ----------------------------------------------------------------------------
# a small basis and its products, by rows
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def basis_rows(X, Z, ls, var, kind, jitter):
    """``_elbo.basis_forward`` for small ``Z`` in one call (constrained kernel
    parameters): ``(info, L, K, Vt, jitter used)``.

    The jitter escalates as in ``_linalg.chol_jitter`` (x10, at least 1e-12, 8
    tries); ``info`` is nonzero if every try failed. The substitution ``V =
    L^{-1} K(Z, X)`` runs by rows of ``V`` (row ``a`` minus ``L[a, b]`` times
    row ``b``, ``b < a`` in order, then divided by ``L[a, a]``): long loops
    over independent entries, which vectorize."""
    jit = jitter
    info = 1
    L = np.empty((0, 0))
    for _ in range(8):
        info, L = inducing_cholesky(Z, ls, var, kind, jit)
        if info == 0:
            ok = True
            for i in range(L.shape[0]):
                if not np.isfinite(L[i, i]):
                    ok = False
            if ok:
                break
            info = 1
        jit = max(jit * 10.0, 1e-12)
    K = kernel_matrix(X, Z, ls, var, kind)
    n, m = K.shape
    Vt = np.empty((n, m))
    if info != 0:
        return info, L, K, Vt, jit
    V = np.empty((m, n))
    for a in range(m):
        va = V[a]
        for i in range(n):
            va[i] = K[i, a]
        for b in range(a):
            lab = L[a, b]
            vb = V[b]
            for i in range(n):
                va[i] -= lab * vb[i]
        d = L[a, a]
        for i in range(n):
            va[i] = va[i] / d
    for i in range(n):
        for a in range(m):
            Vt[i, a] = V[a, i]
    return 0, L, K, Vt, jit


# inlined (numba IR; two calls, no arithmetic): as a function of its own it was one
# more compiled library, which its callers link in and optimize again
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def local_basis_rows(X, Z, ls_raw, var_raw, kind, jitter):
    """A small local basis from raw kernel parameters, as :func:`cavi_local_steps` forms it.

    Returns ``(info, L, K, Vt, jitter used, lengthscales, variance)``.
    """
    ls, var = _constrained(ls_raw, var_raw, X.shape[1])
    info, L, K, Vt, jit = basis_rows(X, Z, ls, var, kind, jitter)
    return info, L, K, Vt, jit, ls, var


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def local_products_rows(Wt, Vt, y):
    """``V V^T``, ``W V^T`` and ``V y`` from the row-major ``W^T``, ``V^T``.

    ``W V^T`` is accumulated transposed, so the inner loop runs over the
    ``M`` shared-basis rows instead of the ``m`` local ones, and ``V V^T``
    over full rows (the upper triangle then copied from the lower, as
    there); each entry's sum still runs over the rows in order.
    """
    n, m = Vt.shape
    M = Wt.shape[1]
    Gv = np.zeros((m, m))
    Ct = np.zeros((m, M))
    vy = np.zeros(m)
    for i in range(n):
        vi = Vt[i]
        wi = Wt[i]
        yi = y[i]
        for a in range(m):
            va = vi[a]
            vy[a] += va * yi
            ga = Gv[a]
            for b in range(m):
                ga[b] += va * vi[b]
            ca = Ct[a]
            for b in range(M):
                ca[b] += va * wi[b]
    for a in range(m):
        for b in range(a):
            Gv[b, a] = Gv[a, b]
    C = np.empty((M, m))
    for a in range(M):
        for b in range(m):
            C[a, b] = Ct[b, a]
    return Gv, C, vy



# ----------------------------------------------------------------------------
# the closed-form client's local loop, fused (many small clients: a round's cost
# is then the Python and call overhead of its many small operations)
# ----------------------------------------------------------------------------

_LOG2 = np.log(2.0)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def _softplus(x):
    """``np.logaddexp(0.0, x)`` (the same branches as numpy's ``npy_logaddexp``)."""
    if x == 0.0:
        return _LOG2
    if x < 0.0:
        return np.log1p(np.exp(x))
    return x + np.log1p(np.exp(-x))


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def _sigmoid(x):
    """``0.5 (1 + tanh(x / 2))``, as ``_elbo.sigmoid``."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _fold_ls_grad(gl, ls_raw, ard):
    """Gradient of the raw lengthscales from that of the ``d`` per-feature ones
    (``ModelConfig.fold_lengthscale_grad``): one each with ARD, else their sum
    for the one shared lengthscale."""
    n_ls = ls_raw.shape[0]
    out = np.empty(n_ls)
    if ard:
        for j in range(n_ls):
            out[j] = gl[j] * _sigmoid(ls_raw[j])
    else:
        t = 0.0
        for j in range(gl.shape[0]):
            t += gl[j]
        out[0] = t * _sigmoid(ls_raw[0])
    return out


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def _constrained(ls_raw, var_raw, d):
    """Lengthscales (one per feature; a shared one repeated) and variance from raw values."""
    ls = np.empty(d)
    n_ls = ls_raw.shape[0]
    for j in range(d):
        ls[j] = _softplus(ls_raw[j if n_ls == d else 0])
    return ls, _softplus(var_raw)


# inlined (numba IR): called with a read-only and a writable first argument and a
# transposed view, a compiled function had two specializations
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH, inline="always")
def _minus_products(r, A, x, B, z):
    """``(r - A x) - B z``, each product summed in order."""
    out = np.empty(r.shape[0])
    for i in range(r.shape[0]):
        t = 0.0
        for a in range(x.shape[0]):
            t += A[i, a] * x[a]
        u = 0.0
        for a in range(z.shape[0]):
            u += B[i, a] * z[a]
        out[i] = (r[i] - t) - u
    return out


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def _local_adjoint(y, Wt, mbar, Vt, mu, Gv, C, vy, Lu, s2):
    """The local basis's adjoint ``W_bar = A V + P e^T`` in the terms
    :func:`basis_grad_small` takes: ``(A, P, e, V e)`` with ``A = (I - S_u) / s2``,
    ``P = m_u / s2`` and the residual ``e = y - W^T mbar - V^T m_u`` (``mbar`` the
    shared-basis mean, length 0 without one).

    With :func:`basis_grad_small`, ``ClosedFormClient.local_hyper_grad`` before
    the softplus chain rule and the ``-n / (2 s2)`` of the variance. The global
    basis's backward pass serves both bases: one compiled copy, not two (each
    compiled function is linked into, and optimized again in, every caller).
    """
    m = Vt.shape[1]
    e = _minus_products(y, Wt, mbar, Vt, mu)
    # V e = V y - V V^T m_u - (W V^T)^T mbar
    Ve = _minus_products(vy, Gv, mu, C.T, mbar)
    A = np.empty((m, m))
    P = np.empty(m)
    for a in range(m):
        la = Lu[a]
        for b in range(m):
            lb = Lu[b]
            t = 0.0
            for c in range(min(a, b) + 1):
                t += la[c] * lb[c]
            A[a, b] = ((1.0 if a == b else 0.0) - t) / s2
        P[a] = mu[a] / s2
    return A, P, e, Ve


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def basis_grad_small(X, Z, ls, var, kind, L, K, Wt, gram, A, P, e, WE):
    """``_elbo.basis_backward`` for a small basis with a rank-one adjoint part.

    Gradients (variance, ARD lengthscales, ``Z``) of a function of ``W``
    whose adjoint is ``W_bar = A W + P e^T`` (``A`` of shape ``(m, m)``,
    ``P`` of shape ``(m,)``, ``e`` of shape ``(n,)``), given ``Wt = W^T``,
    ``gram = W W^T`` and ``WE = W e``: ``C_bar^T = W^T (L^{-T} A)^T + e
    (L^{-T} P)^T`` and ``L_bar = -(L^{-T} P) WE^T - (L^{-T} A) W W^T``, the
    same products as ``basis_backward``, in loops (the local basis's too:
    :func:`_local_adjoint`).
    """
    n, m = Wt.shape
    LAP = np.empty((m, m + 1))
    for a in range(m):
        for b in range(m):
            LAP[a, b] = A[a, b]
        LAP[a, m] = P[a]
    _solve_lower_t_rows(L, LAP)
    # row updates (independent multiply-adds; each sum in the order of a dot product)
    L_bar = np.empty((m, m))
    T = np.empty(m)
    for a in range(m):
        T[:] = 0.0
        for c in range(m):
            lac = LAP[a, c]
            gc = gram[c]
            for b in range(m):
                T[b] += lac * gc[b]
        for b in range(m):
            L_bar[a, b] = -LAP[a, m] * WE[b] - T[b]
    LAt = np.empty((m, m))
    for a in range(m):
        for c in range(m):
            LAt[c, a] = LAP[a, c]
    G = np.zeros((n, m))
    for i in range(n):
        wi = Wt[i]
        gi = G[i]
        for c in range(m):
            _axpy(gi, wi[c], LAt[c])
    LP = _block(LAP, 0, m, m, 1)
    Kzz_bar = chol_backward_small(L, L_bar)
    gv1, gl1, gZ1 = kernel_adjoint_sym(Z, ls, var, kind, Kzz_bar)
    gv2, gl2, gZ2 = kernel_adjoint_cross(X, Z, ls, var, kind, K, G, e.reshape(n, 1), LP)
    return gv1 + gv2, gl1 + gl2, gZ1 + gZ2


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def cavi_local_steps(X, y, Wt, mbase, Gw, rw, md0, mu0, Lu0, Z0, ls_raw0, var_raw, adam_m0,
                     adam_v0, c1s, c2s, lr, b1, b2, eps, z_scale, s2, inv_prior, kind, jitter,
                     ard, learn_inducing, L0, K0, Vt0, Gv0, C0, vy0):
    """The local steps of a closed-form client round, fused
    (``_optimizers.ClosedForm.local_steps``).

    Each step: the gradient of the client's ELBO terms with respect to the
    local kernel (``Z``, raw lengthscales, raw variance), one Adam ascent step
    on them (bias corrections ``c1s[s]``, ``c2s[s]``; the inducing inputs'
    step scaled by ``z_scale``), the new local basis and its products, and
    the joint closed-form solve of ``q(delta_i)``, ``q(u_i)`` (the
    ``q(delta_i)`` covariance is the round's, not recomputed). The starting
    basis (``L, K, Vt, Gv, C, vy``) and solve (``md, mu, Lu``) are the
    round's first. ``Wt`` is ``W^T`` of the shared basis (``(n, 0)`` without
    one), ``mbase`` the global mean ``m_g`` (zeros without the global
    component), ``Gw, rw`` the deviation block's Gram matrix and right-hand
    side (empty without a deviation). Adam's moments are flat in the order
    raw lengthscales, raw variance, ``Z`` (if ``learn_inducing``).

    Returns
    -------
    info : int
        0; 1 if a local kernel matrix stayed not positive definite after
        every jitter retry; 2 if a closed-form precision was not positive
        definite (the caller raises).
    Z, ls_raw, var_raw, adam_m, adam_v
        The new local kernel parameters and Adam moments.
    ls, var
        The constrained lengthscales and variance of the last basis.
    md, mu, Lu
        The last solve.
    L, K, Vt, Gv, C, vy, jitter_last, jitter_max
        The last basis, its products, its jitter and the largest jitter used.
    """
    return _local_steps(X, y, Wt, mbase, Gw, rw, md0, mu0, Lu0, Z0, ls_raw0, var_raw,
                        adam_m0, adam_v0, c1s, c2s, (lr, b1, b2, eps), z_scale, s2, inv_prior,
                        kind, jitter, ard, learn_inducing, (L0, K0, Vt0, Gv0, C0, vy0))


# inlined (numba IR) into its two callers: called as a function, it was a compiled
# library of its own that cavi_round_small linked in and optimized again (a sixth of
# the LLVM IR the first fit optimized). Arguments packed in tuples: a call with more than
# 30 arguments is a call with *args in the bytecode, which numba does not inline.
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def _local_steps(X, y, Wt, mbase, Gw, rw, md0, mu0, Lu0, Z0, ls_raw0, var_raw, adam_m0,
                 adam_v0, c1s, c2s, adam_hp, z_scale, s2, inv_prior, kind, jitter, ard,
                 learn_inducing, basis0):
    """:func:`cavi_local_steps` with ``adam_hp = (lr, b1, b2, eps)`` and ``basis0 =
    (L0, K0, Vt0, Gv0, C0, vy0)``."""
    lr, b1, b2, eps = adam_hp
    L0, K0, Vt0, Gv0, C0, vy0 = basis0
    # the inputs are read only (they may be the caller's kept arrays)
    md, mu, Lu, Z, ls_raw = md0.copy(), mu0.copy(), Lu0.copy(), Z0.copy(), ls_raw0.copy()
    adam_m, adam_v = adam_m0.copy(), adam_v0.copy()
    L, K, Vt, Gv, C, vy = L0.copy(), K0.copy(), Vt0.copy(), Gv0.copy(), C0.copy(), vy0.copy()
    n, d = X.shape
    m = Z.shape[0]
    M = Wt.shape[1]
    k = Gw.shape[0]
    n_ls = ls_raw.shape[0]
    jit_max = jitter
    jit = jitter
    ls, var = _constrained(ls_raw, var_raw, d)
    # the deviation block of the joint precision stays put over the steps
    info, L11 = prior_block_factor(Gw, s2, inv_prior)
    if info != 0:
        return (2, Z, ls_raw, var_raw, adam_m, adam_v, ls, var, md, mu, Lu, L, K, Vt, Gv, C,
                vy, jit, jit_max)
    for s in range(c1s.shape[0]):
        # constrained parameters the current basis was formed with
        ls, var = _constrained(ls_raw, var_raw, d)
        mbar = mbase.copy()
        for a in range(k):
            mbar[a] += md[a]
        A, P, e, Ve = _local_adjoint(y, Wt, mbar, Vt, mu, Gv, C, vy, Lu, s2)
        gv, gl, gZ = basis_grad_small(X, Z, ls, var, kind, L, K, Vt, Gv, A, P, e, Ve)
        gv = gv - n / (2.0 * s2)
        # Adam (ascent) on [raw lengthscales, raw variance, Z]
        size = n_ls + 1 + (m * d if learn_inducing else 0)
        g = np.empty(size)
        p = np.empty(size)
        unit = np.ones(size)
        g_ls = _fold_ls_grad(gl, ls_raw, ard)
        for j in range(n_ls):
            g[j] = g_ls[j]
            p[j] = ls_raw[j]
        g[n_ls] = gv * _sigmoid(var_raw)
        p[n_ls] = var_raw
        if learn_inducing:
            o = n_ls + 1
            for a in range(m):
                for j in range(d):
                    g[o + a * d + j] = gZ[a, j]
                    p[o + a * d + j] = Z[a, j]
                    unit[o + a * d + j] = z_scale[j % z_scale.shape[0]]
        p, adam_m, adam_v = adam_update(p, g, adam_m, adam_v, lr, b1, b2, eps, c1s[s],
                                        c2s[s], unit)
        ls_raw = p[:n_ls].copy()
        var_raw = p[n_ls]
        if learn_inducing:
            Z = p[n_ls + 1:].copy().reshape(m, d)
        # the new local basis and its products
        info, L, K, Vt, jit, ls, var = local_basis_rows(X, Z, ls_raw, var_raw, kind, jitter)
        if info != 0:
            return (1, Z, ls_raw, var_raw, adam_m, adam_v, ls, var, md, mu, Lu, L, K, Vt,
                    Gv, C, vy, jit, jit_max)
        jit_max = max(jit_max, jit)
        Gv, C, vy = local_products_rows(Wt, Vt, y)
        # the joint closed-form solve at the new basis
        rv = vy.copy()
        for b in range(m):
            t = 0.0
            for a in range(M):
                t += C[a, b] * mbase[a]
            rv[b] -= t
        Cq = C if k > 0 else np.empty((0, m))
        info, means, Lu = joint_solve_cached(L11, Cq, Gv, rw, rv, s2)
        if info != 0:
            return (2, Z, ls_raw, var_raw, adam_m, adam_v, ls, var, md, mu, Lu, L, K, Vt,
                    Gv, C, vy, jit, jit_max)
        md = means[:k].copy()
        mu = means[k:].copy()
    return (0, Z, ls_raw, var_raw, adam_m, adam_v, ls, var, md, mu, Lu, L, K, Vt, Gv, C, vy,
            jit, jit_max)



# ----------------------------------------------------------------------------
# the local step's algebra with fewer dependent operations (the same results to
# the bit: each sum is taken in the same order, only the loops run in another order)
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def prior_block_factor(Gw, s2, inv_prior):
    """Lower Cholesky factor of ``Gw / s2 + inv_prior I``: the leading block of the
    factor :func:`closed_form_q` forms (the same operations, so the same bits).

    Returns ``(info, L11)``. Within a round ``Gw``, ``s2`` and the prior stay
    put while the local kernel moves, so the local steps factor it once
    (:func:`joint_solve_cached`).
    """
    k = Gw.shape[0]
    P = np.empty((k, k))
    _prior_block_rows(P, Gw, s2, inv_prior)
    info = _chol_in_place(P)
    return info, P


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def joint_solve_cached(L11, C, Gv, rw, rv, s2):
    """:func:`closed_form_q` (without ``Ld``) given the factor of its leading block.

    ``L11`` is :func:`prior_block_factor`'s factor of ``Gw / s2 + inv_prior
    I``; the rest of the joint factor is formed as ``_chol_in_place`` forms
    it (left-looking, each sum in the same order), so means and ``Lu`` are
    those of :func:`closed_form_q` to the bit, without the ``k x k`` block's
    divisions and factorization. Returns ``(info, means, Lu)``.
    """
    k = L11.shape[0]
    nu = Gv.shape[0]
    N = k + nu
    P = np.empty((N, N))
    for i in range(k):
        for j in range(i + 1):
            P[i, j] = L11[i, j]
    _local_precision_rows(P, k, C, Gv, s2)
    Lu = np.zeros((nu, nu))
    x = np.empty(N)
    if nu > 0:
        info, Lu = _inv_chol_block(P, k, N)
        if info != 0:
            return info, x, Lu
    # columns of the leading block: only the rows below it are new
    for j in range(k):
        d = P[j, j]
        for i in range(k, N):
            t = P[i, j]
            for p in range(j):
                t -= P[i, p] * P[j, p]
            P[i, j] = t / d
    for j in range(k, N):
        s = P[j, j]
        for p in range(j):
            s -= P[j, p] * P[j, p]
        if not s > 0.0:  # also catches NaN
            return j + 1, x, Lu
        d = np.sqrt(s)
        P[j, j] = d
        for i in range(j + 1, N):
            t = P[i, j]
            for p in range(j):
                t -= P[i, p] * P[j, p]
            P[i, j] = t / d
    for i in range(k):
        x[i] = rw[i] / s2
    for i in range(nu):
        x[k + i] = rv[i] / s2
    _chol_solve_in_place(P, x)
    return 0, x, Lu



# ----------------------------------------------------------------------------
# a small closed-form client's whole round in one call
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=FASTMATH)
def marginal_dev_stats(Gw, C, Gv, wy, vy, s2, phi):
    """``(A_i, a_i)`` of ``ClosedFormClient.marginal_global_stats`` with a deviation.

    ``P = [[Gw, C], [C^T, Gv]] / s2 + diag(I / phi, I)`` (the local block
    may be empty), ``s_0 = [P^{-1} [wy; vy] / s2]_s``, ``A = (I -
    [P^{-1}]_ss / phi) / phi`` symmetrized, ``a = s_0 / phi``; ``info`` is
    nonzero if ``P`` is not positive definite.
    """
    k = Gw.shape[0]
    nu = Gv.shape[0]
    N = k + nu
    P = np.zeros((N, N))
    _prior_block_rows(P, Gw, s2, 1.0 / phi)
    _local_precision_rows(P, k, C, Gv, s2)
    A = np.zeros((k, k))
    a = np.zeros(k)
    info = _chol_in_place(P)
    if info != 0:
        return info, A, a
    x = np.empty(N)
    for i in range(k):
        x[i] = wy[i] / s2
    for i in range(nu):
        x[k + i] = vy[i] / s2
    _chol_solve_in_place(P, x)
    # Xs = L^{-1} [I_k; 0], by rows: row i depends on the rows above it
    Xs = np.zeros((N, k))
    for i in range(N):
        xi = Xs[i]
        if i < k:
            xi[i] = 1.0
        for p in range(i):
            lip = P[i, p]
            xp = Xs[p]
            for j in range(k):
                xi[j] -= lip * xp[j]
        d = 1.0 / P[i, i]
        for j in range(k):
            xi[j] *= d
    # [P^{-1}]_ss = Xs^T Xs
    for i in range(N):
        xi = Xs[i]
        for r in range(k):
            _axpy(A[r], xi[r], xi)
    for r in range(k):
        for c in range(k):
            A[r, c] = ((1.0 if r == c else 0.0) - A[r, c] / phi) / phi
    for r in range(k):
        for c in range(r):
            v = 0.5 * (A[r, c] + A[c, r])
            A[r, c] = v
            A[c, r] = v
        a[r] = x[r] / phi
    return 0, A, a


@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def cavi_round_small(X, y, Wt, Kg, Lkg, Gw, wy, mg, Lg, Zg, ls_g, ls_g_raw, Zl, ls_raw,
                     adam_m, adam_v, z_scale, L0, K0, Vt0, sc, ints):
    """A small client's closed-form round with all three components, in one call.

    The round of ``_optimizers.ClosedForm.local_steps`` and ``ClosedForm.message`` (plus
    ``ClosedFormClient.marginal_global_stats``) when the client fuses its
    local steps: the products of the local basis with the round's shared
    basis (:func:`local_products_rows`), the joint solve of ``q(delta_i)``,
    ``q(u_i)`` with the ``q(delta_i)`` covariance (:func:`closed_form_q`),
    the local steps (:func:`cavi_local_steps`), the message's sufficient
    statistics (``ClosedFormClient.message``), the joint-mean statistics
    (:func:`marginal_dev_stats`) and the gradient with respect to the global
    kernel (``ClosedFormClient.global_kernel_grad``, :func:`basis_grad_small`).

    Parameters
    ----------
    X, y : the client's scaled inputs and normalized targets.
    Wt, Kg, Lkg, Gw, wy : the shared basis: ``W^T``, ``k(X, Z_g)``, the factor of
        ``k(Z_g, Z_g) + jitter``, ``W W^T`` and ``W y``.
    mg, Lg : the global mean and the factor of its covariance (broadcast).
    Zg, ls_g, ls_g_raw : global inducing inputs, lengthscales (one per feature)
        and their raw values.
    Zl, ls_raw : the local inducing inputs and raw lengthscales.
    adam_m, adam_v : Adam's moments, flat (raw lengthscales, raw variance, ``Z``).
    z_scale : step unit of the inducing inputs per feature.
    L0, K0, Vt0 : the local basis at the current local kernel (``ints[5]`` set), or
        anything (formed here as :func:`local_basis_rows`).
    sc : float64 array ``[var_raw, var_g, var_g_raw, s2, phi, lr, b1, b2, eps,
        jitter, jitter of L0]``.
    ints : int64 array ``[kind, ard, learn_inducing, n_steps, t0, have_basis,
        want_grad, want_joint]`` (``t0`` Adam's step count before the round).

    Returns
    -------
    info : 0, 1 (a local kernel matrix not positive definite with any jitter)
        or 2 (a closed-form precision not positive definite).
    Zl, ls_raw, var_raw, adam_m, adam_v : the new local kernel and Adam's moments.
    md, mu, Lu, Ld : the new ``q(delta_i)``, ``q(u_i)``.
    L, K, Vt, ls, var, jit_last, jit_max : the last local basis, its kernel's
        constrained parameters, its jitter, the round's largest local jitter.
    stats : ``[rr, c, t_g, D, logdet_d, kl_u]`` of the message.
    b, Phi : ``W r`` and the packed ``W W^T``.
    A_packed, a : the joint-mean statistics (empty unless ``want_joint``).
    g_ls, g_var, g_Z : the global kernel gradient, raw lengthscales (one, or
        one per feature with ARD), raw variance, ``Z_g`` (zeros unless
        ``learn_inducing``; empty unless ``want_grad``).
    """
    var_raw, var_g, var_g_raw, s2, phi = sc[0], sc[1], sc[2], sc[3], sc[4]
    lr, b1, b2, eps, jitter = sc[5], sc[6], sc[7], sc[8], sc[9]
    kind, ard, learn, n_steps, t0 = ints[0], ints[1] != 0, ints[2] != 0, ints[3], ints[4]
    have_basis, want_grad, want_joint = ints[5] != 0, ints[6] != 0, ints[7] != 0
    n, d = X.shape
    M = Wt.shape[1]
    m = Zl.shape[0]
    inv_phi = 1.0 / phi
    empty2, empty1 = np.empty((0, 0)), np.empty(0)
    # copies: the inputs may be the caller's kept (read-only) arrays
    Zl, ls_raw, adam_m, adam_v = Zl.copy(), ls_raw.copy(), adam_m.copy(), adam_v.copy()
    # the round's first local basis and its products with the shared basis
    if have_basis:
        L, K, Vt, jit0 = L0.copy(), K0.copy(), Vt0.copy(), sc[10]
        ls, var = _constrained(ls_raw, var_raw, d)
    else:
        info, L, K, Vt, jit0, ls, var = local_basis_rows(X, Zl, ls_raw, var_raw, kind, jitter)
        if info != 0:
            return (1, Zl, ls_raw, var_raw, adam_m, adam_v, empty1, empty1, empty2, empty2,
                    L, K, Vt, ls, var, jit0, jit0, empty1, empty1, empty1, empty1, empty1,
                    empty1, 0.0, empty2)
    Gv, C, vy = local_products_rows(Wt, Vt, y)
    # the first joint solve, with the q(delta) covariance of the round
    Gmg = _matvec(Gw, mg)
    rw = np.empty(M)
    for a in range(M):
        rw[a] = wy[a] - Gmg[a]
    Cmg = _matvec_t(C, mg)
    rv = np.empty(m)
    for a in range(m):
        rv[a] = vy[a] - Cmg[a]
    info, means, Lu, Ld = closed_form_q(Gw, C, Gv, rw, rv, s2, inv_phi, True)
    if info != 0:
        return (2, Zl, ls_raw, var_raw, adam_m, adam_v, empty1, empty1, Lu, Ld,
                L, K, Vt, ls, var, jit0, jit0, empty1, empty1, empty1, empty1, empty1,
                empty1, 0.0, empty2)
    md = means[:M].copy()
    mu = means[M:].copy()
    jit_last, jit_max = jit0, jit0
    if n_steps > 0:
        c1s = np.empty(n_steps)
        c2s = np.empty(n_steps)
        for s in range(n_steps):
            t = float(t0 + s + 1)  # a float power: libm's pow, as Python's b1**t
            c1s[s] = 1 - b1**t
            c2s[s] = 1 - b2**t
        (info, Zl, ls_raw, var_raw, adam_m, adam_v, ls, var, md, mu, Lu, L, K, Vt, Gv, C,
         vy, jit_last, jit_f) = _local_steps(
            X, y, Wt, mg, Gw, rw, md, mu, Lu, Zl, ls_raw, var_raw, adam_m, adam_v, c1s, c2s,
            (lr, b1, b2, eps), z_scale, s2, inv_phi, kind, jitter, ard, learn,
            (L, K, Vt, Gv, C, vy))
        if info != 0:
            return (info, Zl, ls_raw, var_raw, adam_m, adam_v, md, mu, Lu, Ld, L, K, Vt,
                    ls, var, jit_last, jit_f, empty1, empty1, empty1, empty1, empty1,
                    empty1, 0.0, empty2)
        jit_max = max(jit0, jit_f)
    # the message (ClosedFormClient.message, in its order of operations)
    sqnorm_w = 0.0
    for a in range(M):
        sqnorm_w += Gw[a, a]
    sqnorm_v = 0.0
    for a in range(m):
        sqnorm_v += Gv[a, a]
    t_g = n * var_g - sqnorm_w
    sq_d, logdet_d = factor_stats(Ld)
    quad_d = s2 * (M - inv_phi * sq_d)
    sq_u, logdet_u = factor_stats(Lu)
    quad_u = s2 * (m - 1.0 * sq_u)
    Gmd = _matvec(Gw, md)
    Cmu = _matvec(C, mu)
    rr = _dot(y, y)
    rr += _dot(md, Gmd) - 2.0 * _dot(md, wy)
    c = quad_d
    Gvmu = _matvec(Gv, mu)
    rr += _dot(mu, Gvmu) - 2.0 * _dot(mu, vy)
    t_l = n * var - sqnorm_v
    c += quad_u + t_l
    rr += 2.0 * _dot(md, Cmu)
    b = np.empty(M)
    for a in range(M):
        b[a] = (wy[a] - Gmd[a]) - Cmu[a]
    stats = np.empty(6)
    stats[0], stats[1], stats[2] = rr, c, t_g
    stats[3] = sq_d + _dot(md, md)
    stats[4] = logdet_d
    stats[5] = 0.5 * (sq_u + _dot(mu, mu) - m - logdet_u)
    Phi = _tril_pack(Gw)
    A_packed, a_joint = empty1, empty1
    if want_joint:
        info, A, a_joint = marginal_dev_stats(Gw, C, Gv, wy, vy, s2, phi)
        if info != 0:
            return (2, Zl, ls_raw, var_raw, adam_m, adam_v, md, mu, Lu, Ld, L, K, Vt,
                    ls, var, jit_last, jit_max, empty1, empty1, empty1, empty1, empty1,
                    empty1, 0.0, empty2)
        A_packed = _tril_pack(A)
    g_ls, g_var, g_Z = empty1, 0.0, empty2
    if want_grad:
        # ClosedFormClient.global_kernel_grad: W_bar = (mbar e^T - (S_g + S_delta) W
        # + kappa W) / s2 with the residual e = y - W^T mbar - V^T m_u
        kappa = 1.0 + phi
        mbar = np.empty(M)
        for a in range(M):
            mbar[a] = mg[a] + md[a]
        e = np.empty(n)
        for i in range(n):
            e[i] = (y[i] - _dot(Wt[i], mbar)) - _dot(Vt[i], mu)
        Gmbar = _matvec(Gw, mbar)
        We = np.empty(M)
        for a in range(M):
            We[a] = (wy[a] - Gmbar[a]) - Cmu[a]
        # A = (kappa I - Lg Lg^T - Ld Ld^T) / s2, the products of the lower factors
        # by rows (entry (a, c) sums over q <= min(a, c))
        LgT = _transposed(Lg)
        LdT = _transposed(Ld)
        A = np.empty((M, M))
        P = np.empty(M)
        T1 = np.empty(M)
        T2 = np.empty(M)
        for a in range(M):
            T1[:] = 0.0
            T2[:] = 0.0
            for q in range(a + 1):
                lq, dq = Lg[a, q], Ld[a, q]
                gq, hq = LgT[q], LdT[q]
                for c2 in range(q, M):
                    T1[c2] += lq * gq[c2]
                    T2[c2] += dq * hq[c2]
            for c2 in range(M):
                A[a, c2] = (((kappa if a == c2 else 0.0) - T1[c2]) - T2[c2]) / s2
            P[a] = mbar[a] / s2
        gv, gl, gZ = basis_grad_small(X, Zg, ls_g, var_g, kind, Lkg, Kg, Wt, Gw, A, P, e, We)
        gv += -kappa * n / (2 * s2)
        g_var = gv * _sigmoid(var_g_raw)
        g_ls = _fold_ls_grad(gl, ls_g_raw, ard)
        g_Z = gZ if learn else np.zeros_like(gZ)
    return (0, Zl, ls_raw, var_raw, adam_m, adam_v, md, mu, Lu, Ld, L, K, Vt, ls, var,
            jit_last, jit_max, stats, b, Phi, A_packed, a_joint, g_ls, g_var, g_Z)

