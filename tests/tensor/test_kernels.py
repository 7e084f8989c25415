"""numba kernels against plain numpy references."""

import numpy as np
import pytest
from sklearn.linear_model import Lasso

from skfed.tensor._kernels import fista_lasso_gram, soft_threshold
from skfed.tensor._stages import fit_deviation


def _soft_ref(x, t):
    return np.sign(x) * np.maximum(np.abs(x) - t, 0.0)


def _fista_ref(gram, c, b0, step, penalty, n_iter):
    b, yk, t = b0.copy(), b0.copy(), 1.0
    for _ in range(n_iter):
        b_new = _soft_ref(yk - step * (yk @ gram - c), step * penalty)
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        yk = b_new + (t - 1) / t_new * (b_new - b)
        b, t = b_new, t_new
    return b


def test_soft_threshold_matches_numpy():
    x = np.random.default_rng(0).standard_normal((7, 5))
    for t in (0.0, 0.3, 5.0):
        np.testing.assert_array_equal(soft_threshold(x, t), _soft_ref(x, t))


@pytest.mark.parametrize("n_iter", [0, 1, 30])
def test_fista_matches_numpy_reference(n_iter):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 8))
    gram = X.T @ X / 40
    c = rng.standard_normal((3, 8))
    b0 = rng.standard_normal((3, 8))
    step = 1 / np.linalg.eigvalsh(gram)[-1]
    np.testing.assert_allclose(
        fista_lasso_gram(gram, c, b0, step, 0.1, n_iter),
        _fista_ref(gram, c, b0, step, 0.1, n_iter),
        rtol=1e-12, atol=1e-12,
    )


def test_stage_two_converges_to_the_lasso_solution():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((60, 10))
    W = rng.standard_normal((10, 2)) * (rng.random((10, 2)) < 0.3)
    R = X @ W + 0.1 * rng.standard_normal((60, 2))
    B, omega = fit_deviation(X, R, 0.05, 3000, scaling="none")
    assert omega == 0.05
    for j in range(2):
        lasso = Lasso(alpha=0.05, fit_intercept=False, tol=1e-12, max_iter=100000)
        ref = lasso.fit(X, R[:, j]).coef_
        np.testing.assert_allclose(B[j], ref, atol=1e-6)
