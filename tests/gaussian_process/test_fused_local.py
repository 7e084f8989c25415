"""The fused closed-form local loop and the numba marginal statistics against
their numpy/LAPACK references (the code paths they replace at small sizes)."""

import numpy as np
import pytest

from skfed.gaussian_process import _closed_form
from skfed.gaussian_process._closed_form import ClosedFormClient
from skfed.gaussian_process._elbo import ModelConfig, global_basis, local_basis
from skfed.gaussian_process._adam import adam_ascent, adam_init

COMPONENTS = [(True, True, True), (True, False, True), (False, True, True),
              (False, False, True)]


def make_client(rng, cfg, d, M=6, Mi=4, n=30):
    X, y = rng.uniform(-1, 1, size=(n, d)), rng.normal(size=n)
    p = d if cfg.ard else 1
    g = dict(Zg=rng.uniform(-1, 1, size=(M, d)), ls_g=rng.normal(size=p) + 0.5,
             var_g=np.array(0.3), phi=np.array(-0.5), noise=np.array(-1.0),
             mg=rng.normal(size=M), Lg=np.eye(M))
    loc = dict(Zl=rng.uniform(-1, 1, size=(Mi, d)), ls_l=rng.normal(size=p),
               var_l=np.array(-0.2), md=np.zeros(M), Ld=np.eye(M), mu=np.zeros(Mi),
               Lu=np.eye(Mi))
    if not cfg.use_deviation:
        del loc["md"], loc["Ld"]
    return X, y, g, loc


def start(X, y, g, loc, cfg):
    gb = global_basis(X, g, cfg) if cfg.global_basis else None
    cf = ClosedFormClient(y, g, cfg, gb)
    cf.set_local(local_basis(X, loc, cfg))
    return cf, cf.solve(loc)


@pytest.mark.parametrize("use", COMPONENTS)
@pytest.mark.parametrize("kind, ard, learn", [(0, False, True), (1, True, True),
                                              (2, True, False)])
def test_fused_local_steps_match_the_step_by_step_loop(use, kind, ard, learn):
    rng = np.random.default_rng(3)
    d, steps, lr = 2, 4, 0.1
    cfg = ModelConfig(kind=kind, ard=ard, n_features=d, use_global=use[0],
                      use_deviation=use[1], use_local=use[2], learn_inducing=learn)
    X, y, g, loc = make_client(rng, cfg, d)
    hyper = ["ls_l", "var_l"] + (["Zl"] if learn else [])
    zscale = {"Zl": np.array([0.3, 0.2])}
    # the reference: _optimizers.ClosedForm.local_steps's loop, one numpy/LAPACK call at a time
    cf, ref = start(X, y, g, loc, cfg)
    adam_ref = adam_init(ref, hyper)
    _, adam_ref = adam_ascent(ref, {k: np.ones_like(ref[k], dtype=float) for k in hyper},
                              adam_ref, lr, hyper)  # a warm Adam state (t = 1)
    adam_fused = {"t": adam_ref["t"], "m": dict(adam_ref["m"]), "v": dict(adam_ref["v"])}
    for _ in range(steps):
        gl = cf.local_hyper_grad(X, ref)
        ref, adam_ref = adam_ascent(ref, gl, adam_ref, lr, hyper, scale=zscale)
        cf.set_local(local_basis(X, ref, cfg))
        ref = cf.solve(ref)
    msg_ref = cf.message(ref)
    # fused
    cf2, out = start(X, y, g, loc, cfg)
    assert cf2.fusable(cf2.lb.L.shape[0])
    out, adam_out, jit = cf2.fused_local_steps(X, out, adam_fused, steps, lr, zscale["Zl"])
    assert jit == cfg.jitter and adam_out["t"] == adam_ref["t"]
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-9, atol=1e-12, err_msg=k)
        assert np.shape(out[k]) == np.shape(ref[k])
    for w in ("m", "v"):
        for k in hyper:
            np.testing.assert_allclose(adam_out[w][k], adam_ref[w][k], rtol=1e-9, atol=1e-14)
    msg = cf2.message(out)
    for k in msg_ref:
        np.testing.assert_allclose(msg[k], msg_ref[k], rtol=1e-9, atol=1e-12, err_msg=k)
    # the last basis (the rest of the round uses it) equals a fresh one
    fresh = local_basis(X, out, cfg)
    kept = cf2.lb
    np.testing.assert_allclose(kept.W, fresh.W, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(kept.gram, fresh.W @ fresh.W.T, rtol=1e-9, atol=1e-12)
    if cfg.global_basis:
        np.testing.assert_allclose(cf2.gb.cross(kept), cf2.gb.W @ fresh.W.T, rtol=1e-9,
                                   atol=1e-12)


def test_fused_local_steps_escalate_the_jitter_like_the_basis():
    """A local kernel matrix that needs more jitter: the fused loop escalates it as
    ``chol_jitter`` does and reports the jitter used."""
    rng = np.random.default_rng(5)
    # a negative jitter (variance 0.6 - 1) fails the first factorization for sure;
    # the escalation then tries max(10 * jitter, 1e-12)
    cfg = ModelConfig(n_features=1, jitter=-1.0)
    X, y, g, loc = make_client(rng, cfg, 1, Mi=6)
    cf, out = start(X, y, g, loc, cfg)
    adam = adam_init(out, ["ls_l", "var_l", "Zl"])
    out, _, jit = cf.fused_local_steps(X, out, adam, 1, 1e-12, np.ones(1))
    assert jit == cf.lb.jitter == 1e-12
    assert local_basis(X, out, cfg).jitter == 1e-12


@pytest.mark.parametrize("use_local", [True, False])
def test_marginal_statistics_numba_and_lapack_paths_agree(monkeypatch, use_local):
    rng = np.random.default_rng(8)
    cfg = ModelConfig(ard=True, n_features=2, use_local=use_local)
    X, y, g, loc = make_client(rng, cfg, 2)
    gb = global_basis(X, g, cfg)
    cf = ClosedFormClient(y, g, cfg, gb)
    if use_local:
        cf.set_local(local_basis(X, loc, cfg))
    A, a = cf.marginal_global_stats()
    monkeypatch.setattr(_closed_form, "SMALL_JOINT", 0)
    A_ref, a_ref = cf.marginal_global_stats()
    np.testing.assert_allclose(A, A_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a, a_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(A, A.T)


@pytest.mark.parametrize("use", COMPONENTS)
def test_fused_local_basis_and_products_match_the_lapack_ones(use):
    rng = np.random.default_rng(4)
    cfg = ModelConfig(kind=1, ard=True, n_features=2, use_global=use[0],
                      use_deviation=use[1], use_local=use[2])
    X, y, g, loc = make_client(rng, cfg, 2)
    ref, _ = start(X, y, g, loc, cfg)
    cf = ClosedFormClient(y, g, cfg, ref.gb)
    cf.set_local_fused(_closed_form.fused_local_basis(X, loc, cfg))
    for a, b in ((cf.lb.W, ref.lb.W), (cf.lb.L, ref.lb.L), (cf.lb.K, ref.lb.K),
                 (cf.lb.gram, ref.lb.gram), (cf.vy, ref.vy), (cf.lb.ls, ref.lb.ls)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    assert cf.lb.var == pytest.approx(ref.lb.var, rel=1e-14)
    if cfg.global_basis:
        np.testing.assert_allclose(cf.C, ref.C, rtol=1e-10, atol=1e-13)
