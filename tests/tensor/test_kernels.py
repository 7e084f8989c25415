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


# ----------------------------------------------------------------------------
# Stage-I per-row kernels and the Tucker tangent projection kernels

from skfed.tensor._kernels import (  # noqa: E402
    clip_residuals,
    clip_rows_inplace,
    noisy_gradient,
    noisy_tangent_gradient,
    pinv,
    pinv_rows,
    quantile_linear,
    row_norms,
    tangent_apply,
    tangent_setup,
)
from skfed.tensor._stages import clip_rows  # noqa: E402
from skfed.tensor._tucker import TangentProjector, retract, tangent_project  # noqa: E402


def test_row_norms_matches_numpy():
    M = np.random.default_rng(0).standard_normal((37, 6))
    np.testing.assert_allclose(row_norms(M), np.linalg.norm(M, axis=1), rtol=1e-15)
    assert row_norms(np.zeros((0, 3))).shape == (0,)


@pytest.mark.parametrize("n", [1, 2, 5, 16, 40])
def test_partition_is_numpy_partition(n):
    """The quickselect behind quantile_linear: np.partition's order statistic and sides."""
    from skfed.tensor._kernels import _partition

    rng = np.random.default_rng(n)
    for x in (rng.standard_normal(n), np.round(rng.random(n), 1), np.arange(n) * 1.0,
              np.arange(n)[::-1] * 1.0, np.ones(n)):
        for k in range(n):
            part = _partition(x, k)
            assert part[k] == np.partition(x, k)[k]
            assert np.all(part[:k] <= part[k]) and np.all(part[k + 1:] >= part[k])
            np.testing.assert_array_equal(np.sort(part), np.sort(x))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 251])
@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.999, 1.0])
def test_quantile_linear_is_numpy_quantile(n, q):
    rng = np.random.default_rng(n)
    for x in (rng.standard_normal(n) ** 2, np.round(rng.random(n), 1)):
        # the same arithmetic as numpy's default (linear) method: bitwise equal
        assert quantile_linear(x.copy(), q) == np.quantile(x, q)
    x = rng.random(n)
    x[n // 2] = np.nan
    assert np.isnan(quantile_linear(x, q))


def test_clip_rows_inplace_matches_clip_rows():
    rng = np.random.default_rng(1)
    M = rng.standard_normal((50, 4)) * rng.uniform(0, 3, (50, 1))
    M[3] = 0.0
    for tau in (0.0, 0.5, 1.5, 100.0):
        out = M.copy()
        clip_rows_inplace(out, row_norms(out), tau)
        np.testing.assert_allclose(out, clip_rows(M, tau), rtol=1e-15, atol=0)
        assert np.all(np.linalg.norm(out, axis=1) <= tau * (1 + 1e-12))


def test_clip_residuals_is_the_three_kernels():
    rng = np.random.default_rng(2)
    R = rng.standard_normal((40, 6)) * rng.uniform(0, 3, (40, 1))
    for q, tau in ((0.9, np.nan), (1.0, np.nan), (0.3, np.nan), (0.9, 0.7), (0.9, 0.0)):
        ref = R.copy()
        norms = row_norms(ref)
        ref_tau = quantile_linear(norms.copy(), q) if np.isnan(tau) else tau
        clip_rows_inplace(ref, norms, ref_tau)
        out = R.copy()
        assert clip_residuals(out, q, tau) == ref_tau
        assert np.array_equal(out, ref)  # bitwise
    bad = R.copy()
    bad[5, 2] = np.nan
    assert np.isnan(clip_residuals(bad, 0.9, np.nan))


@pytest.mark.parametrize("sigma", [0.0, 0.37, 12.5])
def test_noisy_gradient_is_numpys_gradient_plus_noise(sigma):
    # the numpy expressions of the Stage-I step: -(R^T X) / n, then value + sigma * z
    rng = np.random.default_rng(3)
    m = rng.standard_normal((6, 25)) * 40.0
    z = rng.standard_normal(m.shape)
    n = 251
    ref = -m / n
    if sigma:
        ref = ref + sigma * z
    out = noisy_gradient(m.reshape(-1), float(n), sigma, z.reshape(-1) if sigma else np.zeros(0))
    assert np.array_equal(out, ref.reshape(-1))  # bitwise


def test_stage_one_noise_std_is_pftr_noise_std():
    from skfed.privacy import pftr_noise_std
    from skfed.tensor._stages import StageOne

    for eps, delta in ((20.0, 0.1), (0.7, 1e-5), (None, 1e-5)):
        alg = StageOne((2, 3), (1, 1), np.zeros((2, 3)), step_size=0.1, n_rounds=13,
                       epsilon=eps, delta=delta)
        for tau_e, tau_x, n in ((1.3, 2.1, 250), (0.0, 5.0, 7), (1e-3, 0.4, 25000)):
            assert alg._noise_std(tau_e, tau_x, n) == pftr_noise_std(
                tau_e, tau_x, n, 13, eps, delta)
        with pytest.raises(ValueError, match="truncation levels"):
            alg._noise_std(np.nan, 1.0, 10)


def test_pinv_matches_numpy():
    rng = np.random.default_rng(3)
    full = rng.standard_normal((3, 8))
    deficient = rng.standard_normal((3, 1)) @ rng.standard_normal((1, 8))
    for a in (full, deficient, np.zeros((2, 4)), full.T.copy()):
        np.testing.assert_allclose(pinv(a), np.linalg.pinv(a), rtol=1e-10, atol=1e-12)


def _tangent_project_ref(G, core, factors):
    """Spec 2.0 term by term with numpy (no shared intermediates)."""
    N = G.ndim

    def mdot(T, mats):
        for k, M in mats.items():
            T = np.moveaxis(np.tensordot(M, T, axes=(1, k)), 0, k)
        return T

    C = mdot(G, {k: factors[k].T for k in range(N)})
    out = mdot(C, dict(enumerate(factors)))
    for j in range(N):
        Gj = mdot(G, {k: factors[k].T for k in range(N) if k != j})
        M = np.moveaxis(Gj, j, 0).reshape(G.shape[j], -1)
        M = M - factors[j] @ (factors[j].T @ M)
        Wj = M @ np.linalg.pinv(np.moveaxis(core, j, 0).reshape(core.shape[j], -1))
        out = out + mdot(core, {k: (Wj if k == j else factors[k]) for k in range(N)})
    return out


@pytest.mark.parametrize("shape, rank", [
    ((5, 5, 10, 5), (3, 3, 3, 3)), ((6, 4, 5), (2, 3, 2)), ((7, 6), (2, 2)),
    ((4, 3, 2), (1, 1, 1)), ((1, 10, 5), (1, 3, 3)), ((3, 4, 5, 2, 3), (2, 2, 3, 2, 2)),
    ((4, 3, 5), (4, 3, 5)),
])
def test_tangent_kernels_match_the_term_by_term_reference(shape, rank):
    rng = np.random.default_rng(4)
    _, core, factors = retract(rng.standard_normal(shape), rank)
    projector = TangentProjector(core, factors)
    for _ in range(3):
        G = rng.standard_normal(shape)
        ref = _tangent_project_ref(G, core, factors)
        np.testing.assert_allclose(projector(G), ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(tangent_project(G, core, factors), ref, rtol=0, atol=1e-12)
    # the setup pieces themselves
    dims, ranks = np.array(shape, dtype=np.int64), np.array(rank, dtype=np.int64)
    flat = np.concatenate([U.ravel() for U in factors])
    buffer, offsets = tangent_setup(core.ravel(), dims, ranks, flat)
    for j in range(len(shape)):
        # the cyclically rotated unfolding: modes j, j + 1, ..., N - 1, 0, ..., j - 1
        order = [(j + k) % len(shape) for k in range(len(shape))]
        unf = np.transpose(core, order).reshape(rank[j], -1)
        part = [buffer[offsets[5 * j + i]:offsets[5 * j + i + 1]] for i in range(5)]
        assert np.array_equal(part[0], factors[j].ravel())
        assert np.array_equal(part[1], factors[j].T.ravel())
        np.testing.assert_allclose(part[2], np.linalg.pinv(unf).ravel(), atol=1e-12)
    np.testing.assert_allclose(buffer[offsets[4]:offsets[5]], core.ravel())
    G = rng.standard_normal(shape)
    out = tangent_apply(G.ravel(), dims, ranks, buffer, offsets)
    np.testing.assert_allclose(out.reshape(shape), _tangent_project_ref(G, core, factors),
                               atol=1e-12)
    # gradient, noise and projection fused
    m, z = rng.standard_normal(shape) * 30.0, rng.standard_normal(shape)
    fused = noisy_tangent_gradient(m.ravel(), 37.0, 0.4, z.ravel(), dims, ranks, buffer,
                                   offsets)
    np.testing.assert_allclose(fused.reshape(shape),
                               _tangent_project_ref(-m / 37.0 + 0.4 * z, core, factors),
                               atol=1e-12)


def test_pinv_rows_matches_numpy():
    rng = np.random.default_rng(13)
    full = rng.standard_normal((3, 27))
    deficient = rng.standard_normal((3, 1)) @ rng.standard_normal((1, 8))  # SVD fallback
    square = rng.standard_normal((4, 4))
    for a in (full, deficient, np.zeros((2, 4)), square, full[:1].copy(), np.ones((1, 1))):
        np.testing.assert_allclose(pinv_rows(a, 1e-8), np.linalg.pinv(a), rtol=1e-10,
                                   atol=1e-12)


def test_tangent_projection_at_a_rank_deficient_core():
    # A_0 = 0 (e.g. a zero start): every core unfolding is zero, pinv is zero,
    # and the projection keeps only the core block G x U^T x U
    rng = np.random.default_rng(5)
    factors = [np.linalg.qr(rng.standard_normal((n, 2)))[0] for n in (4, 3, 5)]
    core = np.zeros((2, 2, 2))
    G = rng.standard_normal((4, 3, 5))
    np.testing.assert_allclose(tangent_project(G, core, factors),
                               _tangent_project_ref(G, core, factors), atol=1e-12)


def test_tangent_projection_of_read_only_arrays():
    # a broadcast's arrays are read-only (the engine's copies); results are the same
    rng = np.random.default_rng(6)
    _, core, factors = retract(rng.standard_normal((4, 3, 5)), (2, 2, 2))
    G = rng.standard_normal((4, 3, 5))
    ref = _tangent_project_ref(G, core, factors)
    frozen = [np.array(a) for a in [G, core, *factors]]
    for a in frozen:
        a.setflags(write=False)
    np.testing.assert_allclose(tangent_project(frozen[0], frozen[1], frozen[2:]), ref,
                               atol=1e-12)


def test_projector_apply_flat_is_the_call():
    rng = np.random.default_rng(9)
    _, core, factors = retract(rng.standard_normal((4, 3, 5)), (2, 2, 2))
    G = rng.standard_normal((4, 3, 5))
    projector = TangentProjector(core, factors)
    assert np.array_equal(projector.apply_flat(G.reshape(-1).copy()), projector(G))


# ----------------------------------------------------------------------------
# retraction kernels


def _svd_vectors(M, r):
    U = np.linalg.svd(M, full_matrices=False)[0][:, :r]
    idx = np.argmax(np.abs(U), axis=0)
    return U * np.sign(U[idx, np.arange(r)])


def test_leading_left_vectors_match_the_svd():
    from skfed.tensor._kernels import leading_left_vectors

    rng = np.random.default_rng(11)
    T = rng.standard_normal((5, 6, 7))
    for mode in range(3):
        M = np.moveaxis(T, mode, 0).reshape(T.shape[mode], -1)
        for r in (1, 3, T.shape[mode]):
            U = leading_left_vectors(M, r, 1e-4)
            np.testing.assert_allclose(U, _svd_vectors(M, r), atol=1e-12)
            # a permutation of the columns has the same left singular vectors
            perm = rng.permutation(M.shape[1])
            np.testing.assert_allclose(leading_left_vectors(M[:, perm].copy(), r, 1e-4), U,
                                       atol=1e-12)
    # rank deficient at the cut (rank 1, r = 2) and zero: the SVD's vectors, orthonormal
    M = rng.standard_normal((4, 1)) @ rng.standard_normal((1, 9))
    for A in (M, np.zeros((3, 5))):
        np.testing.assert_allclose(leading_left_vectors(A, 2, 1e-4), _svd_vectors(A, 2),
                                   atol=1e-12)


@pytest.mark.parametrize("sequential", [True, False])
@pytest.mark.parametrize("shape, rank", [((5, 5, 10, 5), (3, 3, 3, 3)), ((6, 4, 5), (2, 3, 2)),
                                         ((7, 6), (2, 2)), ((3, 4, 2), (3, 4, 2))])
def test_hosvd_flat_matches_the_numpy_hosvd(shape, rank, sequential):
    from skfed.tensor._kernels import hosvd_flat

    rng = np.random.default_rng(12)
    T = rng.standard_normal(shape)

    def mdot(X, M, k):
        return np.moveaxis(np.tensordot(M, X, axes=(1, k)), 0, k)

    core, factors = T, []
    for k, r in enumerate(rank):  # the numpy (T-/ST-)HOSVD, SVD signs normalized
        src = core if sequential else T
        factors.append(_svd_vectors(np.moveaxis(src, k, 0).reshape(src.shape[k], -1), r))
        if sequential:
            core = mdot(core, factors[k].T, k)
    if not sequential:
        for k, U in enumerate(factors):
            core = mdot(core, U.T, k)
    recon = core
    for k, U in enumerate(factors):
        recon = mdot(recon, U, k)
    out, c, fs = hosvd_flat(T.ravel(), np.array(shape, dtype=np.int64),
                            np.array(rank, dtype=np.int64), sequential, 1e-4)
    np.testing.assert_allclose(out.reshape(shape), recon, atol=1e-12)
    np.testing.assert_allclose(c.reshape(rank), core, atol=1e-12)
    for U, ref in zip(fs, factors, strict=True):
        np.testing.assert_allclose(U, ref, atol=1e-12)


def test_weighted_step_is_numpys_server_step():
    from skfed.tensor._kernels import weighted_step

    rng = np.random.default_rng(14)
    coef, grads = rng.standard_normal(60), rng.standard_normal((4, 60))
    sizes = np.array([40.0, 250.0, 13.0, 90.0])
    w = sizes / sizes.sum()
    G = sum(wk * g for wk, g in zip(w, grads))
    step, norm, finite = weighted_step(coef, grads, w, 0.3)
    assert np.array_equal(step, coef - 0.3 * G)  # same order of operations: bitwise
    assert norm == pytest.approx(np.linalg.norm(G), rel=1e-14) and finite
    grads[2, 7] = np.inf
    assert not weighted_step(coef, grads, w, 0.3)[2]


def test_stage_one_projector_cache_hits_the_server_broadcast_by_identity():
    from skfed.tensor._stages import StageOne

    rng = np.random.default_rng(15)
    alg = StageOne((4, 3, 5), (2, 2, 2), rng.standard_normal((4, 3, 5)), step_size=0.1,
                   n_rounds=3, epsilon=None, delta=None)
    state, broadcast = alg.server_init(rng)
    for _ in range(2):  # the initial broadcast, then one from a server step
        projector = alg._projector(broadcast)
        objs, _, _ = alg._projector_cache
        sentinel = object()
        alg._projector_cache = (objs, None, sentinel)  # only the identity path returns it
        assert alg._projector(broadcast) is sentinel
        alg._projector_cache = (objs, None, projector)
        G = rng.standard_normal((4, 3, 5))
        ref = tangent_project(G, broadcast["core"], [broadcast[f"factor_{j}"] for j in range(3)])
        np.testing.assert_allclose(alg._projector(broadcast)(G), ref, atol=1e-13)
        msg = {"grad": projector(G), "n_samples": np.int64(10)}
        state, broadcast = alg.server_step(state, {0: msg}, rng)


def test_sym_eig_jacobi_matches_eigh():
    from skfed.tensor._kernels import sym_eig_jacobi

    rng = np.random.default_rng(16)
    cases = [rng.standard_normal((n, 3 * n)) for n in (1, 2, 5, 10, 16)]
    cases.append(rng.standard_normal((6, 2)))  # rank 2: zero eigenvalues
    cases.append(np.diag([3.0, 1.0, 2.0]) @ rng.standard_normal((3, 3)) * 1e-100)  # tiny
    for M in cases:
        A = M @ M.T
        w, V = sym_eig_jacobi(A)
        w_ref, V_ref = np.linalg.eigh(A)
        scale = np.abs(w_ref).max()
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-13 * scale)
        np.testing.assert_allclose(V.T @ V, np.eye(len(A)), atol=1e-14)
        np.testing.assert_allclose(A @ V, V * w, rtol=0, atol=1e-13 * scale)
        # distinct eigenvalues: the same eigenvectors up to sign
        gaps = np.diff(w_ref) > 1e-6 * scale
        for i in range(len(A)):
            if (i == 0 or gaps[i - 1]) and (i == len(A) - 1 or gaps[i]):
                assert abs(abs(V[:, i] @ V_ref[:, i]) - 1) < 1e-12
    w, V = sym_eig_jacobi(np.zeros((4, 4)))
    assert np.array_equal(w, np.zeros(4)) and np.array_equal(V, np.eye(4))
