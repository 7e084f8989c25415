"""The ADMM initializer (paper Sec. 4.1) and the ratio criterion (Sec. 4.2, eq. 12)."""

import math

import numpy as np
import pytest
import tensorly as tl

from skfed.datasets import make_tensor_regression
from skfed.tensor._rank import ratio_rank, ridge_constant
from skfed.tensor._stages import admm_init


def _objective(X, Y, A, D, lam, omega):
    """Spec 3.1: (1/(2n)) sum ||y_i - (A + D) x_i||^2 + lam ||A||_* + omega ||D||_1."""
    R = Y - X @ (A + D).T
    return (0.5 * np.sum(R**2) / X.shape[0] + lam * np.linalg.svd(A, compute_uv=False).sum()
            + omega * np.abs(D).sum())


def _fista_reference(X, Y, lam, omega, n_iter=1500):
    """Accelerated proximal gradient on the same objective without the operator-norm bound.

    The prox of ``lam ||.||_* + omega ||.||_1`` over the pair (A, D) is separable
    (SVT, soft threshold), so this is an independent solver of the problem
    whenever the bound on ``||D||_op`` is inactive at the solution.
    """
    n = X.shape[0]
    G, C = X.T @ X / n, Y.T @ X / n
    L = 2.0 * np.linalg.eigvalsh(G)[-1]  # the loss is L-smooth in (A, D) jointly
    A = D = yA = yD = np.zeros((Y.shape[1], X.shape[1]))
    t = 1.0
    for _ in range(n_iter):
        grad = (yA + yD) @ G - C
        U, s, Vt = np.linalg.svd(yA - grad / L, full_matrices=False)
        A_new = (U * np.maximum(s - lam / L, 0.0)) @ Vt
        M = yD - grad / L
        D_new = np.sign(M) * np.maximum(np.abs(M) - omega / L, 0.0)
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        yA = A_new + (t - 1.0) / t_new * (A_new - A)
        yD = D_new + (t - 1.0) / t_new * (D_new - D)
        A, D, t = A_new, D_new, t_new
    return A, D


def test_admm_init_minimizes_the_spec_objective():
    # the loss scaling 1/(2n) and the weights of both penalties are pinned by
    # comparing optimal values with an independent solver
    rng = np.random.default_rng(3)
    n, q, p = 40, 4, 12
    W = rng.standard_normal((q, 2)) @ rng.standard_normal((2, p)) / 3.0
    X = rng.standard_normal((n, p))
    Y = X @ W.T + 0.1 * rng.standard_normal((n, q))
    lam, omega = 0.05, 0.02
    A, D, n_iter = admm_init(X, Y, lam=lam, omega=omega, zeta=5.0, max_iter=3000, tol=1e-5)
    assert n_iter < 3000
    assert np.linalg.svd(D, compute_uv=False)[0] < 5.0  # the bound is inactive
    A_ref, D_ref = _fista_reference(X, Y, lam, omega)
    f, f_ref = _objective(X, Y, A, D, lam, omega), _objective(X, Y, A_ref, D_ref, lam, omega)
    assert f == pytest.approx(f_ref, rel=1e-5)
    # a doubled loss (the authors' 1/n scaling elsewhere) would give another optimum
    half = _fista_reference(X, Y, lam / 2, omega / 2)
    assert _objective(X, Y, A, D, lam / 2, omega / 2) > _objective(
        X, Y, *half, lam / 2, omega / 2) + 1e-4


def test_admm_init_default_iterations_reach_the_optimum_on_the_figure_2_design():
    # at n_k = 50 = p the default 150 iterations stop short of tol = 1e-4, but
    # the estimate (and so the rank criterion) is that of the converged solver
    X, Y, groups = make_tensor_regression(n_samples=50, coef_random_state=2026,
                                          random_state=2026)
    Xk, Yk = X[groups == 0], Y[groups == 0]
    A, _, n_iter = admm_init(Xk, Yk)
    A_long, _, n_long = admm_init(Xk, Yk, max_iter=5000)
    assert n_iter == 150 and n_long < 5000
    assert np.linalg.norm(A - A_long) < 0.01 * np.linalg.norm(A_long)
    assert ratio_rank(A.reshape(5, 5, 10, 5), 50) == ratio_rank(A_long.reshape(5, 5, 10, 5), 50)


def _matrix_with_spectrum(s, seed=0):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((len(s), len(s))))[0]
    V = np.linalg.qr(rng.standard_normal((len(s), len(s))))[0]
    return (U * s) @ V.T


def test_ratio_rank_is_equation_12_with_the_code_ridge_constant():
    # the shape of the Figure 2 truth's hard mode: true rank 3, a small third
    # singular value, estimation noise in the tail
    s = np.array([0.73, 0.60, 0.32, 0.15, 0.14])
    M = _matrix_with_spectrum(s)

    def by_hand(c):
        return int(np.argmin((s[1:] + c) / (s[:-1] + c))) + 1

    for n, scale in [(45, 1.0), (100, 1.0), (10**6, 1.0), (45, 0.25), (45, 4.0)]:
        c = scale * math.sqrt(math.log(25) / n)  # D = number of entries (5 x 5)
        assert ridge_constant(M.shape, n, scale) == pytest.approx(c)
        assert ratio_rank(M, n, scale=scale) == (by_hand(c),) * 2
    # the ridge constant decides between the 2-to-3 and the 3-to-4 gap
    assert ratio_rank(M, 10**6) == (3, 3)
    assert ratio_rank(M, 45) == (2, 2)
    assert ratio_rank(M, 45, scale=0.25) == (3, 3)


def test_truth_spectra_are_those_of_the_normalized_gaussian_core():
    # the authors' simulation design: orthonormal factors, so every unfolding of A_0 has the singular
    # values of the core's unfolding; the core alone sets the difficulty of rank selection
    _, _, _, truth = make_tensor_regression(n_samples=2, return_truth=True,
                                            coef_random_state=2026, random_state=0)
    assert np.linalg.norm(truth.core) == pytest.approx(1.0)
    for U in truth.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-12)
    for s in range(4):
        sv_A = np.linalg.svd(tl.unfold(truth.shared_coef, s), compute_uv=False)[:3]
        sv_core = np.linalg.svd(tl.unfold(truth.core, s), compute_uv=False)
        np.testing.assert_allclose(sv_A, sv_core, atol=1e-12)
