"""Every numba twin of :mod:`skfed.gaussian_process._linalg` against its numpy/LAPACK pair."""

import numpy as np
import pytest

from skfed.gaussian_process import _linalg as la


def _spd(rng, n):
    A = rng.normal(size=(n, 2 * n))
    return A @ A.T + 0.1 * np.eye(n)


def _factor(rng, n):
    return np.linalg.cholesky(_spd(rng, n))


def _in_place(kernel, first, *rest):
    """Run an in-place kernel on a copy of ``first``; return the copy."""
    out = np.array(first, dtype=float)
    kernel(out, *rest)
    return out


# name -> (inputs from (rng, n), the numba twin, its numpy/LAPACK pair)
TWINS = {
    "cholesky": (
        lambda rng, n: (_spd(rng, n),),
        lambda A: _in_place(la._chol_in_place, A),
        la.cholesky,
    ),
    "solve_lower_transposed": (
        lambda rng, n: (_factor(rng, n), rng.normal(size=(n, 3))),
        lambda L, B: _in_place(lambda X: la._solve_lower_t_rows(L, X), B),
        lambda L, B: la.solve_triangular(L, B, trans=1),
    ),
    "cho_solve": (
        lambda rng, n: (_factor(rng, n), rng.normal(size=n)),
        lambda L, b: _in_place(lambda x: la._chol_solve_in_place(L, x), b),
        la.cho_solve,
    ),
    "inverse_factor": (
        lambda rng, n: (np.eye(n) + _spd(rng, n),),
        lambda P: la._inv_chol_block(P, 0, P.shape[0])[1],
        lambda P: la._inv_chol_spd(P)[1],
    ),
    "chol_backward": (
        lambda rng, n: (_factor(rng, n), rng.normal(size=(n, n))),
        la.chol_backward_small,
        la.chol_backward_blas,
    ),
    "factor_stats": (
        lambda rng, n: (_factor(rng, n),),
        lambda L: np.array(la.factor_stats(L)),
        lambda L: np.array([np.sum(L * L), 2.0 * np.sum(np.log(np.diag(L)))]),
    ),
    "tril_pack": (
        lambda rng, n: (rng.normal(size=(n, n)),),
        la._tril_pack,
        la.tril_pack,
    ),
    "transposed": (
        lambda rng, n: (rng.normal(size=(n, n + 2)),),
        la._transposed,
        lambda A: A.T,
    ),
    "block": (
        lambda rng, n: (rng.normal(size=(n + 2, n + 3)),),
        lambda A: la._block(A, 1, A.shape[0] - 2, 2, A.shape[1] - 3),
        lambda A: A[1:-1, 2:-1],
    ),
    "dot": (
        lambda rng, n: (rng.normal(size=n), rng.normal(size=n)),
        la._dot,
        np.dot,
    ),
    "matvec": (
        lambda rng, n: (rng.normal(size=(n + 1, n)), rng.normal(size=n)),
        la._matvec,
        lambda A, x: A @ x,
    ),
    "matvec_t": (
        lambda rng, n: (rng.normal(size=(n, n + 1)), rng.normal(size=n)),
        la._matvec_t,
        lambda A, x: A.T @ x,
    ),
}


@pytest.mark.parametrize("n", [1, 2, 7, 33])
@pytest.mark.parametrize("name", TWINS)
def test_numba_twin_matches_its_pair(name, n):
    make, twin, pair = TWINS[name]
    args = make(np.random.default_rng(n), n)
    np.testing.assert_allclose(twin(*args), pair(*args), rtol=1e-11, atol=1e-12)


def test_axpy_adds_the_scaled_row_in_place():
    rng = np.random.default_rng(0)
    y, x = rng.normal(size=7), rng.normal(size=7)
    expected = y + 0.3 * x
    la._axpy(y, 0.3, x)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-15)
