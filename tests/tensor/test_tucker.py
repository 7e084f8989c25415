"""Tucker machinery: tangent-space projection, retractions, rank checks."""

import numpy as np
import pytest
import tensorly as tl

from skfed.tensor import check_tucker_rank, retract, st_hosvd, t_hosvd, tangent_project
from skfed.tensor._tucker import multilinear_rank, tangent_project_surrogate, tucker_to_tensor

CASES = [
    ((5, 5, 10, 5), (3, 3, 3, 3)), ((6, 4, 5), (2, 3, 2)), ((7, 6), (2, 2)), ((4, 3, 2), (1, 1, 1))
]


def _base_point(shape, rank, seed=0):
    rng = np.random.default_rng(seed)
    return retract(rng.standard_normal(shape), rank)


@pytest.mark.parametrize("shape, rank", CASES)
def test_projection_is_idempotent_self_adjoint_and_fixes_base_point(shape, rank):
    A, core, factors = _base_point(shape, rank)
    rng = np.random.default_rng(1)
    G, H = rng.standard_normal(shape), rng.standard_normal(shape)
    PG = tangent_project(G, core, factors)
    np.testing.assert_allclose(tangent_project(PG, core, factors), PG, atol=1e-12)
    lhs = np.sum(PG * H)
    rhs = np.sum(G * tangent_project(H, core, factors))
    assert abs(lhs - rhs) < 1e-12 * max(1.0, abs(lhs))
    np.testing.assert_allclose(tangent_project(A, core, factors), A, atol=1e-12)
    # a projection never increases the norm, and leaves G - PG orthogonal to PG
    assert np.linalg.norm(PG) <= np.linalg.norm(G) + 1e-12
    assert abs(np.sum((G - PG) * PG)) < 1e-10


def test_projection_keeps_tangent_directions_and_kills_normal_ones():
    shape, rank = (6, 5, 4), (2, 2, 2)
    A, core, factors = _base_point(shape, rank)
    rng = np.random.default_rng(3)
    # a tangent direction: core perturbation plus factor perturbation orthogonal to U_1
    W = rng.standard_normal((shape[0], rank[0]))
    W -= factors[0] @ (factors[0].T @ W)
    T = tucker_to_tensor(rng.standard_normal(rank), factors) + tucker_to_tensor(
        core, [W, factors[1], factors[2]]
    )
    np.testing.assert_allclose(tangent_project(T, core, factors), T, atol=1e-12)
    # a direction orthogonal to every U_j on two modes is normal to the manifold
    perps = []
    for s in range(3):
        Q, _ = np.linalg.qr(np.hstack([factors[s], rng.standard_normal((shape[s], 2))]))
        perps.append(Q[:, rank[s]:rank[s] + 2])
    N = tucker_to_tensor(rng.standard_normal((2, 2, rank[2])), [perps[0], perps[1], factors[2]])
    assert np.linalg.norm(tangent_project(N, core, factors)) < 1e-12


@pytest.mark.parametrize("method", ["st_hosvd", "t_hosvd"])
@pytest.mark.parametrize("shape, rank", CASES)
def test_retraction_has_the_requested_rank(shape, rank, method):
    rng = np.random.default_rng(2)
    T = rng.standard_normal(shape)
    A, core, factors = retract(T, rank, method)
    assert multilinear_rank(A) == rank
    assert core.shape == rank
    for U, n, r in zip(factors, shape, rank):
        assert U.shape == (n, r)
        np.testing.assert_allclose(U.T @ U, np.eye(r), atol=1e-12)
    # a tensor already of that rank is left unchanged
    np.testing.assert_allclose(retract(A, rank, method)[0], A, atol=1e-10)


def test_t_hosvd_matches_tensorly():
    rng = np.random.default_rng(4)
    T = rng.standard_normal((5, 4, 6))
    rank = (2, 3, 2)
    core, factors = tl.decomposition.tucker(T, rank=rank, init="svd", n_iter_max=0)
    ref = tl.tucker_to_tensor((core, factors))
    np.testing.assert_allclose(tucker_to_tensor(*t_hosvd(T, rank)), ref, atol=1e-10)


def test_st_hosvd_error_bound():
    # sequential truncation: squared error <= sum of discarded squared singular values
    rng = np.random.default_rng(5)
    T = rng.standard_normal((6, 5, 4))
    rank = (3, 2, 2)
    approx = tucker_to_tensor(*st_hosvd(T, rank))
    bound = sum(
        np.sum(np.linalg.svd(tl.unfold(T, s), compute_uv=False)[r:] ** 2)
        for s, r in enumerate(rank)
    )
    assert np.sum((T - approx) ** 2) <= bound + 1e-10


def test_surrogate_returns_rank_r():
    rng = np.random.default_rng(6)
    G = rng.standard_normal((5, 4, 3))
    assert multilinear_rank(tangent_project_surrogate(G, (2, 2, 2))) == (2, 2, 2)


def test_check_tucker_rank():
    assert check_tucker_rank(2, (4, 3, 5)) == (2, 2, 2)
    assert check_tucker_rank((1, 2, 2), (4, 3, 5)) == (1, 2, 2)
    with pytest.raises(ValueError, match=r"rank\[1\] = 4 is not in \[1, 3\]"):
        check_tucker_rank((2, 4, 2), (4, 3, 5))
    with pytest.raises(ValueError, match="infeasible"):
        check_tucker_rank((1, 1, 3), (4, 3, 5))
    with pytest.raises(ValueError, match="3 integers"):
        check_tucker_rank((1, 1), (4, 3, 5))
    with pytest.raises(ValueError, match="rank"):
        check_tucker_rank(0, (4, 3))
    with pytest.raises(ValueError, match="retraction"):
        retract(np.zeros((3, 3)), (1, 1), "hooi")


T43 = np.random.default_rng(9).standard_normal((4, 3))


@pytest.mark.parametrize("helper", [st_hosvd, t_hosvd, retract])
@pytest.mark.parametrize("rank, match", [
    ((9, 2), r"rank\[0\] = 9 is not in \[1, 4\]"),  # the kernel read out of bounds
    ((2, 5), r"rank\[1\] = 5 is not in \[1, 3\]"),
    ((0, 2), r"rank\[0\] = 0 is not in \[1, 4\]"),
    ((2,), r"rank must hold 2 integers \(one per mode of T"),
    ((2, 2, 2), "rank must hold 2 integers"),
    ((2.0, 2), "rank must hold 2 integers"),
    ((3, 1), r"rank = \(3, 1\) is infeasible"),
    (True, "rank must be an int or a tuple of ints"),
    (None, "rank must be an int or a tuple of ints"),
])
def test_hosvd_helpers_refuse_a_bad_rank(helper, rank, match):
    with pytest.raises(ValueError, match=match):
        helper(T43, rank)


@pytest.mark.parametrize("helper", [st_hosvd, t_hosvd, retract])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_hosvd_helpers_refuse_a_non_finite_tensor(helper, bad):
    T = T43.copy()
    T[1, 2] = bad
    with pytest.raises(ValueError, match=r"T must be finite, got 1 NaN or infinite entries"):
        helper(T, (2, 2))
    with pytest.raises(ValueError, match="T must be an array of real numbers"):
        helper([["a", "b"], ["c", "d"]], 1)


def test_retract_refuses_a_non_finite_tensor_as_a_numerical_failure():
    # retract runs on every Stage-I step: the kernel finds the NaN (no extra pass), and the
    # error stays a LinAlgError, which the estimators report as the client's numerical failure
    with pytest.raises(np.linalg.LinAlgError, match="T must be finite"):
        retract(T43 * np.nan, (2, 2), "t_hosvd")
    with pytest.raises(np.linalg.LinAlgError, match="T must be finite"):
        tangent_project_surrogate(T43 * np.inf, (2, 2))


def test_hosvd_helpers_take_any_integer_rank():
    expected = retract(T43, (2, 2))
    for rank in (2, np.int64(2), np.array([2, 2]), [2, 2], (np.int32(2), 2)):
        A, core, factors = retract(T43, rank)
        np.testing.assert_array_equal(A, expected[0])
        assert core.shape == (2, 2)
        np.testing.assert_array_equal(st_hosvd(T43.tolist(), rank)[0], st_hosvd(T43, 2)[0])


def test_leading_singular_vectors_are_numpys_up_to_sign():
    from skfed.tensor._tucker import _leading_left_singular_vectors

    rng = np.random.default_rng(7)
    deficient = rng.standard_normal((6, 1)) @ rng.standard_normal((1, 40))  # SVD fallback
    for M in (rng.standard_normal((5, 250)), rng.standard_normal((10, 4)),
              np.zeros((3, 6)), rng.standard_normal((4, 9)).astype(np.float32),
              np.asfortranarray(rng.standard_normal((6, 8))), deficient):
        ref = np.linalg.svd(M.astype(float), full_matrices=False)[0][:, :2]
        U = _leading_left_singular_vectors(M, 2)
        np.testing.assert_allclose(U.T @ U, np.eye(2), atol=1e-14)
        # the spanned subspace (the leading one; for ``deficient`` the first vector)
        k = 1 if M is deficient else 2
        np.testing.assert_allclose(U[:, :k] @ U[:, :k].T, ref[:, :k] @ ref[:, :k].T,
                                   atol=1e-12)
        if M.any():
            # deterministic signs: the largest-magnitude entry of each column is positive
            idx = np.argmax(np.abs(U), axis=0)
            assert np.all(U[idx, np.arange(2)] > 0)
            if M is not deficient:
                np.testing.assert_allclose(U, ref * np.sign(ref[idx, np.arange(2)]),
                                           atol=1e-12)


def test_unfold_is_tensorlys():
    import tensorly as tl

    from skfed.tensor._tucker import _unfold

    T = np.random.default_rng(8).standard_normal((3, 4, 2, 5))
    for mode in range(T.ndim):
        assert np.array_equal(_unfold(T, mode), tl.unfold(T, mode))
