"""A small client's closed-form round in one numba call (``_closed_form.small_round``)
and the row-ordered kernels of its local steps, against the numpy/LAPACK code paths
they replace."""

import numpy as np
import pytest

from skfed.gaussian_process import _closed_form_kernels as kn
from skfed.gaussian_process._closed_form import (
    ClosedFormClient,
    round_fusable,
    small_round,
)
from skfed.gaussian_process._elbo import (
    ModelConfig,
    basis_backward,
    basis_forward,
    global_basis,
    local_basis,
)
from skfed.gaussian_process._linalg import tril_pack
from skfed.gaussian_process._adam import adam_ascent, adam_init


def make_client(rng, cfg, d, M=6, Mi=4, n=30):
    X, y = rng.uniform(-1, 1, size=(n, d)), rng.normal(size=n)
    p = d if cfg.ard else 1
    Lg = np.tril(0.3 * rng.normal(size=(M, M)))
    Lg[np.diag_indices(M)] = rng.uniform(0.5, 1.0, size=M)
    g = dict(Zg=rng.uniform(-1, 1, size=(M, d)), ls_g=rng.normal(size=p) + 0.5,
             var_g=np.array(0.3), phi=np.array(-0.5), noise=np.array(-1.0),
             mg=rng.normal(size=M), Lg=Lg)
    loc = dict(Zl=rng.uniform(-1, 1, size=(Mi, d)), ls_l=rng.normal(size=p),
               var_l=np.array(-0.2), md=np.zeros(M), Ld=np.eye(M), mu=np.zeros(Mi),
               Lu=np.eye(Mi))
    return X, y, g, loc


def small_sizes(rng, d=2, n=30, M=6, m=4):
    X = rng.uniform(-1, 1, size=(n, d))
    Z = rng.uniform(-1, 1, size=(m, d))
    Zg = rng.uniform(-1, 1, size=(M, d))
    return X, Z, Zg, rng.normal(size=n)


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_row_ordered_basis_and_products_match_lapack(kind):
    """The numba local basis and its products equal the LAPACK/BLAS ones to rounding."""
    rng = np.random.default_rng(0)
    X, Z, Zg, y = small_sizes(rng)
    ls_raw, var_raw = np.array([0.2, -0.3]), -0.1
    info, L, K, Vt, jit, ls, var = kn.local_basis_rows(X, Z, ls_raw, var_raw, kind, 1e-6)
    ref = basis_forward(X, Z, ls, var, kind, 1e-6)
    assert info == 0 and jit == ref.jitter
    np.testing.assert_allclose(L, ref.L, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Vt, ref.W.T, rtol=1e-10, atol=1e-12)
    Wt = np.ascontiguousarray(kn.local_basis_rows(X, Zg, ls_raw, 0.4, kind, 1e-6)[3])
    Gv, C, vy = kn.local_products_rows(Wt, Vt, y)
    np.testing.assert_allclose(Gv, Vt.T @ Vt, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(Gv, Gv.T)
    np.testing.assert_allclose(C, Wt.T @ Vt, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vy, Vt.T @ y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [0, 6])
@pytest.mark.parametrize("s2, inv_prior", [(0.05, 2.0), (0.7, 0.3)])
def test_joint_solve_with_the_cached_block_equals_closed_form_q_to_the_bit(k, s2, inv_prior):
    rng = np.random.default_rng(1)
    n, nu = 30, 5
    B = rng.normal(size=(k + nu, n))
    G = B @ B.T
    Gw, C, Gv = G[:k, :k].copy(), G[:k, k:].copy(), G[k:, k:].copy()
    rw, rv = rng.normal(size=k), rng.normal(size=nu)
    info, means, Lu, _ = kn.closed_form_q(Gw, C, Gv, rw, rv, s2, inv_prior, False)
    info1, L11 = kn.prior_block_factor(Gw, s2, inv_prior)
    info2, means2, Lu2 = kn.joint_solve_cached(L11, C, Gv, rw, rv, s2)
    assert info == info1 == info2 == 0
    np.testing.assert_array_equal(means, means2)
    np.testing.assert_array_equal(Lu, Lu2)


def test_joint_solve_cached_reports_a_precision_that_is_not_positive_definite():
    L11 = np.eye(2)
    C = np.zeros((2, 2))
    Gv = -10.0 * np.eye(2)  # Gv / s2 + I is negative definite
    info, _, _ = kn.joint_solve_cached(L11, C, Gv, np.zeros(2), np.zeros(2), 1.0)
    assert info != 0


@pytest.mark.parametrize("kind", [0, 2])
def test_basis_grad_small_matches_basis_backward(kind):
    rng = np.random.default_rng(2)
    cfg = ModelConfig(kind=kind, ard=True, n_features=2)
    X, y, g, loc = make_client(rng, cfg, 2)
    gb = global_basis(X, g, cfg)
    M = gb.L.shape[0]
    A = rng.normal(size=(M, M))
    P, e = rng.normal(size=M), rng.normal(size=X.shape[0])
    ref = basis_backward(X, g["Zg"], gb.ls, gb.var, kind, gb, A, P[:, None], e[:, None],
                         WE=(gb.W @ e)[:, None])
    out = kn.basis_grad_small(X, g["Zg"], gb.ls, gb.var, kind, gb.L, gb.K,
                              np.ascontiguousarray(gb.W.T), gb.gram, A, P, e, gb.W @ e)
    for u, v in zip(out, ref):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)


def test_local_adjoint_matches_numpy():
    """The local basis's adjoint terms (``W_bar = A V + P e^T``) of the local steps."""
    rng = np.random.default_rng(3)
    n, M, m, s2 = 30, 6, 4, 0.7
    y, Wt, Vt = rng.normal(size=n), rng.normal(size=(n, M)), rng.normal(size=(n, m))
    mbar, mu = rng.normal(size=M), rng.normal(size=m)
    Lu = np.tril(rng.normal(size=(m, m)))
    Gv, C, vy = Vt.T @ Vt, Wt.T @ Vt, Vt.T @ y
    A, P, e, Ve = kn._local_adjoint(y, Wt, mbar, Vt, mu, Gv, C, vy, Lu, s2)
    e_ref = y - Wt @ mbar - Vt @ mu
    np.testing.assert_allclose(A, (np.eye(m) - Lu @ Lu.T) / s2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(P, mu / s2, rtol=1e-12)
    np.testing.assert_allclose(e, e_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Ve, Vt.T @ e_ref, rtol=1e-10, atol=1e-12)


def test_row_major_copies():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(5, 3))
    T = kn._transposed(A)
    assert T.flags.c_contiguous
    np.testing.assert_array_equal(T, A.T)
    np.testing.assert_array_equal(kn._transposed(np.asfortranarray(A)), A.T)
    B = kn._block(A, 1, 3, 1, 2)
    assert B.flags.c_contiguous
    np.testing.assert_array_equal(B, A[1:4, 1:3])


def reference_round(X, y, g, loc, cfg, steps, lr, zscale, adam, want_grad):
    """The round as ``_optimizers.ClosedForm.local_steps``'s step-by-step loop and
    ``ClosedForm.message`` form it: numpy and LAPACK, one call at a time."""
    hyper = ["ls_l", "var_l"] + (["Zl"] if cfg.learn_inducing else [])
    gb = global_basis(X, g, cfg)
    cf = ClosedFormClient(y, g, cfg, gb)
    cf.set_local(local_basis(X, loc, cfg))
    ref = cf.solve(loc)
    for _ in range(steps):
        gl = cf.local_hyper_grad(X, ref)
        ref, adam = adam_ascent(ref, gl, adam, lr, hyper, scale={"Zl": zscale})
        cf.set_local(local_basis(X, ref, cfg))
        ref = cf.solve(ref)
    msg = cf.message(ref)
    msg["Phi"] = tril_pack(msg["Phi"])
    if want_grad:
        gg = cf.global_kernel_grad(X, ref)
        msg.update({"g_" + k: gg[k] for k in ("ls_g", "var_g", "Zg")})
    A, a = cf.marginal_global_stats()
    msg["A_joint"], msg["a_joint"] = tril_pack(A), a
    return gb, ref, adam, msg


@pytest.mark.parametrize("kind, ard, learn", [(0, False, True), (1, True, True),
                                              (2, True, False)])
@pytest.mark.parametrize("want_grad", [True, False])
def test_small_round_matches_the_step_by_step_round(kind, ard, learn, want_grad):
    rng = np.random.default_rng(3)
    d, steps, lr = 2, 4, 0.1
    cfg = ModelConfig(kind=kind, ard=ard, n_features=d, learn_inducing=learn)
    X, y, g, loc = make_client(rng, cfg, d)
    zscale = np.array([0.3, 0.2])
    hyper = ["ls_l", "var_l"] + (["Zl"] if learn else [])
    adam0 = adam_init(loc, hyper)
    _, adam0 = adam_ascent(loc, {k: np.ones_like(loc[k], dtype=float) for k in hyper},
                           adam0, lr, hyper)  # a warm Adam state (t = 1)
    gb, ref, adam_ref, msg_ref = reference_round(X, y, g, loc, cfg, steps, lr, zscale,
                                                 adam0, want_grad)
    assert round_fusable(cfg, X.shape[0], gb.W.shape[0], loc["Zl"].shape[0], steps)
    out, adam, jit, msg, lb = small_round(X, y, g, loc, gb, adam0, cfg, steps, lr, zscale,
                                          None, want_grad, True)
    assert jit == cfg.jitter and adam["t"] == adam_ref["t"]
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-9, atol=1e-12, err_msg=k)
        assert np.shape(out[k]) == np.shape(ref[k])
    flat_m = np.concatenate([np.ravel(adam_ref["m"][k]) for k in hyper])
    flat_v = np.concatenate([np.ravel(adam_ref["v"][k]) for k in hyper])
    np.testing.assert_allclose(adam["flat"][0], flat_m, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(adam["flat"][1], flat_v, rtol=1e-9, atol=1e-14)
    expected = set(msg_ref) - {"n"}
    if not want_grad:
        expected -= {"g_ls_g", "g_var_g", "g_Zg"}
    if not learn:  # Z_g is not a parameter: the steps send no gradient for it
        expected -= {"g_Zg"}
    assert set(msg) == expected
    for k in msg:
        np.testing.assert_allclose(msg[k], msg_ref[k], rtol=1e-9, atol=1e-12, err_msg=k)
        assert np.shape(msg[k]) == np.shape(msg_ref[k]), k
    # the kept last basis is the one formed again (a site that dropped it)
    fresh = kn.local_basis_rows(X, out["Zl"], np.ravel(out["ls_l"]), float(out["var_l"]),
                                kind, cfg.jitter)
    for u, v in zip(lb[:3], fresh[1:4]):
        np.testing.assert_array_equal(u, v)
    assert lb[3] == fresh[4]


def test_small_round_with_a_kept_basis_equals_one_formed_again():
    """The in-process round (basis kept from the last round) and a Flower site's
    (basis dropped with the pickled cache) give the same bits."""
    rng = np.random.default_rng(6)
    cfg = ModelConfig(kind=0, ard=True, n_features=1)
    X, y, g, loc = make_client(rng, cfg, 1)
    gb = global_basis(X, g, cfg)
    zs = np.array([0.3])
    out, adam, _, _, lb = small_round(X, y, g, loc, gb, None, cfg, 3, 0.1, zs, None,
                                      True, True)
    a = small_round(X, y, g, out, gb, adam, cfg, 3, 0.1, zs, lb, True, True)
    b = small_round(X, y, g, out, gb, adam, cfg, 3, 0.1, zs, None, True, True)
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k])
    for k in a[3]:
        np.testing.assert_array_equal(a[3][k], b[3][k])
    np.testing.assert_array_equal(a[1]["flat"][0], b[1]["flat"][0])
