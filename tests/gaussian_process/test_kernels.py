"""Numba kernels and the Cholesky helpers against plain numpy references."""

import numpy as np
import pytest
from scipy.linalg import cholesky

from skfed.gaussian_process._linalg import chol_jitter
from skfed.gaussian_process._adam import adam_update
from skfed.gaussian_process._closed_form_kernels import closed_form_q
from skfed.gaussian_process._covariance import (
    KERNEL_KINDS,
    inducing_cholesky,
    kernel_adjoint,
    kernel_adjoint_cross,
    kernel_adjoint_sym,
    kernel_matrix,
)
from skfed.gaussian_process._linalg import _chol_in_place, factor_stats
from skfed.gaussian_process._linalg import chol_backward_small as chol_backward


def reference_kernel(X, Z, ls, var, kind):
    r = np.sqrt((((X[:, None, :] - Z[None, :, :]) / ls) ** 2).sum(-1))
    if kind == 0:
        return var * np.exp(-0.5 * r**2)
    if kind == 1:
        return var * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    return var * (1 + np.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-np.sqrt(5) * r)


@pytest.mark.parametrize("kind", KERNEL_KINDS.values())
def test_kernel_matrix_matches_numpy(kind):
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(7, 3)), rng.normal(size=(5, 3))
    ls = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(
        kernel_matrix(X, Z, ls, 1.7, kind), reference_kernel(X, Z, ls, 1.7, kind), rtol=1e-12
    )
    # diagonal of k(X, X) is the variance, including coincident points
    np.testing.assert_allclose(np.diag(kernel_matrix(X, X, ls, 1.7, kind)), 1.7)


def test_kernel_names_match_sklearn():
    from sklearn.gaussian_process.kernels import RBF, Matern

    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, 2))
    ls = np.array([0.7, 1.4])
    np.testing.assert_allclose(kernel_matrix(X, X, ls, 1.0, 0), RBF(ls)(X), rtol=1e-12)
    np.testing.assert_allclose(kernel_matrix(X, X, ls, 1.0, 1), Matern(ls, nu=1.5)(X), rtol=1e-12)
    np.testing.assert_allclose(kernel_matrix(X, X, ls, 1.0, 2), Matern(ls, nu=2.5)(X), rtol=1e-12)


@pytest.mark.parametrize("kind", KERNEL_KINDS.values())
def test_kernel_adjoint_matches_finite_differences(kind):
    rng = np.random.default_rng(2)
    X, Z = rng.normal(size=(6, 2)), rng.normal(size=(4, 2))
    ls, var = np.array([0.8, 1.3]), 1.5
    Kbar = rng.normal(size=(6, 4))

    def f(X, Z, ls, var):
        return np.sum(Kbar * reference_kernel(X, Z, ls, var, kind))

    g_var, g_ls, g_X, g_Z = kernel_adjoint(X, Z, ls, var, kind, Kbar)
    h = 1e-6
    assert g_var == pytest.approx((f(X, Z, ls, var + h) - f(X, Z, ls, var - h)) / (2 * h), rel=1e-6)
    for k in range(2):
        e = np.eye(2)[k] * h
        assert g_ls[k] == pytest.approx(
            (f(X, Z, ls + e, var) - f(X, Z, ls - e, var)) / (2 * h), rel=1e-6)
    for A, G, which in ((X, g_X, 0), (Z, g_Z, 1)):
        for idx in np.ndindex(A.shape):
            Ap, Am = A.copy(), A.copy()
            Ap[idx] += h
            Am[idx] -= h
            args_p = (Ap, Z) if which == 0 else (X, Ap)
            args_m = (Am, Z) if which == 0 else (X, Am)
            fd = (f(*args_p, ls, var) - f(*args_m, ls, var)) / (2 * h)
            assert G[idx] == pytest.approx(fd, rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("kind", KERNEL_KINDS.values())
def test_kernel_adjoint_sym_matches_finite_differences_and_general(kind):
    """The symmetric inducing-inducing adjoint: finite differences in Z (moving
    both arguments), and the general adjoint with its two Z gradients summed."""
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(7, 2))
    Z[3] = Z[1]  # a coincident pair
    ls, var = np.array([0.8, 1.3]), 1.5
    A = rng.normal(size=(7, 7))
    Kbar = A + A.T

    def f(Z, ls, var):
        return np.sum(Kbar * reference_kernel(Z, Z, ls, var, kind))

    g_var, g_ls, g_Z = kernel_adjoint_sym(Z, ls, var, kind, Kbar)
    ref_var, ref_ls, ref_X, ref_Z = kernel_adjoint(Z, Z, ls, var, kind, Kbar)
    np.testing.assert_allclose(g_var, ref_var, rtol=1e-12)
    np.testing.assert_allclose(g_ls, ref_ls, rtol=1e-12)
    np.testing.assert_allclose(g_Z, ref_X + ref_Z, rtol=1e-11, atol=1e-13)
    h = 1e-6
    assert g_var == pytest.approx((f(Z, ls, var + h) - f(Z, ls, var - h)) / (2 * h), rel=1e-6)
    for k in range(2):
        e = np.eye(2)[k] * h
        assert g_ls[k] == pytest.approx((f(Z, ls + e, var) - f(Z, ls - e, var)) / (2 * h),
                                        rel=1e-6)
    for idx in np.ndindex(Z.shape):
        Zp, Zm = Z.copy(), Z.copy()
        Zp[idx] += h
        Zm[idx] -= h
        fd = (f(Zp, ls, var) - f(Zm, ls, var)) / (2 * h)
        assert g_Z[idx] == pytest.approx(fd, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("kind", KERNEL_KINDS.values())
def test_kernel_adjoint_cross_matches_finite_differences(kind):
    """The fused adjoint (reads the formed K, no gradient for X) against the numpy kernel."""
    rng = np.random.default_rng(4)
    X, Z = rng.normal(size=(9, 2)), rng.normal(size=(4, 2))
    X[0] = Z[1]  # a coincident pair
    ls, var = np.array([0.8, 1.3]), 1.5
    # the adjoint in factored form: a dense part plus a rank-2 part
    G, E, P = rng.normal(size=(9, 4)), rng.normal(size=(9, 2)), rng.normal(size=(4, 2))
    Kbar = G + E @ P.T

    def f(Z, ls, var):
        return np.sum(Kbar * reference_kernel(X, Z, ls, var, kind))

    K = reference_kernel(X, Z, ls, var, kind)
    g_var, g_ls, g_Z = kernel_adjoint_cross(X, Z, ls, var, kind, K, G, E, P)
    h = 1e-6
    assert g_var == pytest.approx((f(Z, ls, var + h) - f(Z, ls, var - h)) / (2 * h), rel=1e-6)
    for k in range(2):
        e = np.eye(2)[k] * h
        assert g_ls[k] == pytest.approx((f(Z, ls + e, var) - f(Z, ls - e, var)) / (2 * h), rel=1e-6)
    for idx in np.ndindex(Z.shape):
        Zp, Zm = Z.copy(), Z.copy()
        Zp[idx] += h
        Zm[idx] -= h
        assert g_Z[idx] == pytest.approx((f(Zp, ls, var) - f(Zm, ls, var)) / (2 * h),
                                         rel=1e-5, abs=1e-8)
    # and the same numbers as the general adjoint
    ref = kernel_adjoint(X, Z, ls, var, kind, Kbar)
    np.testing.assert_allclose(g_var, ref[0], rtol=1e-12)
    np.testing.assert_allclose(g_ls, ref[1], rtol=1e-12)
    np.testing.assert_allclose(g_Z, ref[3], rtol=1e-12, atol=1e-14)


def test_kernel_adjoint_at_coincident_points_is_finite():
    X = np.zeros((3, 2))
    for kind in KERNEL_KINDS.values():
        out = kernel_adjoint(X, X, np.ones(2), 1.0, kind, np.ones((3, 3)))
        assert all(np.all(np.isfinite(o)) for o in out)


def test_cholesky_backward_matches_finite_differences():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    K = A @ A.T + np.eye(4)
    L_bar = np.tril(rng.normal(size=(4, 4)))
    G = chol_backward(cholesky(K, lower=True), L_bar)
    h = 1e-6
    for i in range(4):
        for j in range(4):
            E = np.zeros((4, 4))
            E[i, j] += h
            E[j, i] += h
            fd = (np.sum(L_bar * cholesky(K + E, lower=True))
                  - np.sum(L_bar * cholesky(K - E, lower=True))) / (4 * h)
            assert G[i, j] == pytest.approx(fd, abs=1e-7)


def test_jitter_escalates_on_singular_matrix():
    X = np.zeros((5, 1))  # five identical inducing inputs: rank one, made indefinite
    K = kernel_matrix(X, X, np.ones(1), 1.0, 0) - 1e-9 * np.eye(5)
    L, used = chol_jitter(K, 1e-12)
    assert used >= 1e-9
    np.testing.assert_allclose(L @ L.T, K + used * np.eye(5), atol=1e-10)


def reference_chol_backward(L, L_bar):
    """Murray (2016) in plain numpy: K_bar = L^{-T} Phi(L^T tril(L_bar)) L^{-1}, symmetrized."""
    from scipy.linalg import solve_triangular

    P = np.tril(L.T @ np.tril(L_bar))
    P[np.diag_indices_from(P)] *= 0.5
    K_bar = solve_triangular(L, solve_triangular(L, P.T, lower=True, trans=1).T, lower=True,
                             trans=1)
    return 0.5 * (K_bar + K_bar.T)


@pytest.mark.parametrize("n", [1, 4, 23])
def test_chol_backward_matches_numpy_reference(n):
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    L = np.linalg.cholesky(A @ A.T + n * np.eye(n))
    L_bar = rng.normal(size=(n, n))  # the upper triangle must be ignored
    np.testing.assert_allclose(chol_backward(L, L_bar), reference_chol_backward(L, L_bar),
                               rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("k, nu", [(6, 4), (0, 4), (6, 0)])
def test_closed_form_q_matches_numpy(k, nu):
    """Joint means and the per-block covariance factors against dense numpy."""
    rng = np.random.default_rng(k + nu)
    B = rng.normal(size=(k + nu, 15))
    G = B @ B.T
    Gw, C, Gv = G[:k, :k], G[:k, k:], G[k:, k:]
    r = rng.normal(size=k + nu)
    s2, phi = 0.4, 1.7
    P = G / s2 + np.diag(np.r_[np.full(k, 1 / phi), np.ones(nu)])
    info, means, Lu, Ld = closed_form_q(Gw, np.ascontiguousarray(C), Gv, r[:k], r[k:], s2,
                                        1 / phi, True)
    assert info == 0
    np.testing.assert_allclose(means, np.linalg.solve(P, r / s2), rtol=1e-10, atol=1e-13)
    for F, block in ((Ld, P[:k, :k]), (Lu, P[k:, k:])):
        if F.size:
            np.testing.assert_allclose(F @ F.T, np.linalg.inv(block), rtol=1e-10, atol=1e-13)
            np.testing.assert_array_equal(np.triu(F, 1), 0.0)
            assert np.all(np.diag(F) > 0)
    # not positive definite: reported, not raised
    assert closed_form_q(-np.eye(3), np.empty((3, 0)), np.empty((0, 0)), np.ones(3),
                         np.empty(0), 1.0, 0.0, True)[0] != 0


@pytest.mark.parametrize("kind", KERNEL_KINDS.values())
def test_inducing_cholesky_matches_lapack(kind):
    rng = np.random.default_rng(kind)
    Z, ls = rng.uniform(size=(12, 2)), np.array([0.4, 0.7])
    info, L = inducing_cholesky(Z, ls, 1.3, kind, 1e-6)
    assert info == 0
    K = reference_kernel(Z, Z, ls, 1.3, kind) + 1e-6 * np.eye(12)
    np.testing.assert_allclose(L, cholesky(K, lower=True), rtol=1e-9, atol=1e-12)
    # coincident inducing inputs without jitter: not positive definite, reported
    assert inducing_cholesky(np.zeros((3, 2)), ls, 1.0, kind, 0.0)[0] != 0


@pytest.mark.parametrize("n", [10, 150])
def test_chol_backward_dispatch_numba_small_blas_large(n):
    from skfed.gaussian_process._linalg import SMALL_ADJOINT
    from skfed.gaussian_process._linalg import chol_backward as dispatched

    assert (n <= SMALL_ADJOINT) == (n == 10)  # one size on each side
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    L = np.linalg.cholesky(A @ A.T + n * np.eye(n))
    L_bar = rng.normal(size=(n, n))
    np.testing.assert_allclose(dispatched(L, L_bar), reference_chol_backward(L, L_bar),
                               rtol=1e-10, atol=1e-13)


def test_factor_stats_matches_numpy():
    rng = np.random.default_rng(3)
    L = np.tril(rng.normal(size=(9, 9)))
    sq, logdet = factor_stats(L)
    assert sq == pytest.approx(np.sum(L * L), rel=1e-13)
    assert logdet == pytest.approx(2 * np.log(np.abs(np.diag(L))).sum(), rel=1e-13)


def test_adam_update_matches_numpy_exactly():
    """The numba Adam step repeats the numpy expression operation by operation."""
    rng = np.random.default_rng(6)
    p, g = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    m, v = rng.normal(size=(5, 3)), rng.uniform(size=(5, 3))
    scale = rng.uniform(size=3)
    b1, b2, eps, lr, t = 0.9, 0.999, 1e-8, 0.1, 4
    m_ref = b1 * m + (1 - b1) * g
    v_ref = b2 * v + (1 - b2) * g * g
    p_ref = p + lr * (m_ref / (1 - b1**t)) / (np.sqrt(v_ref / (1 - b2**t)) + eps) * scale
    out = adam_update(p.ravel(), g.ravel(), m.ravel(), v.ravel(), lr, b1, b2, eps,
                      1 - b1**t, 1 - b2**t, scale)
    for got, ref in zip(out, (p_ref, m_ref, v_ref)):
        np.testing.assert_array_equal(got.reshape(5, 3), ref)


def test_no_kernel_reassociates():
    # Reassociation made results depend on memory addresses: LLVM guards a
    # vectorized loop with a runtime overlap check of its arrays and falls back
    # to the scalar loop, which then sums in another order. Only FMA
    # contraction is allowed (the same in both loops).
    from numba.core.registry import CPUDispatcher

    from skfed.gaussian_process import _adam, _closed_form_kernels, _covariance, _linalg

    kernels = [f for module in (_adam, _closed_form_kernels, _covariance, _linalg)
               for f in vars(module).values() if isinstance(f, CPUDispatcher)]
    assert len(kernels) >= 10
    for f in kernels:
        flags = f.targetoptions.get("fastmath") or set()
        assert set(flags) <= {"contract"}, (f.__name__, flags)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33])
def test_chol_in_place_matches_lapack_and_reports_the_failing_minor(n):
    """The right-looking numba factor equals LAPACK's to rounding; info as LAPACK's."""
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, 2 * n))
    A = A @ A.T + 0.1 * np.eye(n)
    L = np.tril(A) + np.triu(rng.normal(size=(n, n)), 1)  # the upper triangle is ignored
    assert _chol_in_place(L) == 0
    np.testing.assert_allclose(L, cholesky(A, lower=True), rtol=1e-12, atol=1e-13)
    for bad in range(n):
        for value in (-1.0, np.nan):
            B = np.eye(n)
            B[bad, bad] = value
            assert _chol_in_place(B) == bad + 1
