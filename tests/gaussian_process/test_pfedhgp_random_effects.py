"""PFedHGPRegressor's linear random effects (``random_effects``)."""

import numpy as np
import pytest

from skfed import PFedHGPRegressor
from skfed.gaussian_process._random_effects import (
    effects_design, effects_moments, effects_q, effects_update, sqrt_psd,
)

SMALL = dict(inference="variational",
             n_inducing_global=8, n_inducing_local=4, n_rounds=8, random_state=0)


def _q_reference(Z, r, Sigma, s2):
    """The posterior of b ~ N(0, Sigma) given r = Z b + N(0, s2 I), by the dense joint."""
    n = Z.shape[0]
    V = Z @ Sigma @ Z.T + s2 * np.eye(n)
    K = Sigma @ Z.T @ np.linalg.inv(V)
    return K @ r, Sigma - K @ Z @ Sigma


def _data(seed=0, n_sites=6, n=15):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n_sites * n, 1))
    groups = np.repeat(np.arange(n_sites), n)
    b0 = rng.normal(0, 2.0, n_sites)
    y = np.sin(X[:, 0]) + b0[groups] + 0.3 * rng.normal(size=X.shape[0])
    return X, y, groups


@pytest.mark.parametrize("singular", [False, True])
def test_effects_q_is_the_exact_posterior(singular):
    rng = np.random.default_rng(1)
    Z = effects_design(rng.normal(size=(9, 2)), "linear")
    A = rng.normal(size=(3, 3))
    Sigma = A @ A.T
    if singular:  # an effect estimated at zero: rank 2
        w, U = np.linalg.eigh(Sigma)
        Sigma = (U[:, 1:] * w[1:]) @ U[:, 1:].T
    r, s2 = rng.normal(size=9), 0.7
    m, S, trace, kl = effects_q(Z, r, Sigma, s2)
    m_ref, S_ref = _q_reference(Z, r, Sigma, s2)
    np.testing.assert_allclose(m, m_ref, atol=1e-10)
    np.testing.assert_allclose(S, S_ref, atol=1e-10)
    assert trace == pytest.approx(np.trace(Z.T @ Z @ S_ref), abs=1e-10)
    if not singular:  # KL(N(m, S) || N(0, Sigma)) by its textbook formula
        Si = np.linalg.inv(Sigma)
        ref = 0.5 * (np.trace(Si @ S_ref) + m_ref @ Si @ m_ref - 3
                     + np.linalg.slogdet(Sigma)[1] - np.linalg.slogdet(S_ref)[1])
        assert kl == pytest.approx(ref, rel=1e-8)


def test_sqrt_psd_and_update():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(3, 2))
    S = A @ A.T  # rank 2
    L = sqrt_psd(S)
    np.testing.assert_allclose(L @ L.T, S, atol=1e-12)
    means = rng.normal(size=(4, 3))
    moments = [np.outer(v, v) + np.eye(3) for v in means]
    Sigma, delta = effects_update(moments, list(means))
    np.testing.assert_allclose(delta, means.mean(axis=0))
    # the clients' second moments about their common mean
    centred = means - delta
    np.testing.assert_allclose(Sigma, centred.T @ centred / 4 + np.eye(3))


def test_effects_moments_match_numpy():
    rng = np.random.default_rng(3)
    Z = effects_design(rng.normal(size=(5, 1)), "linear")
    m, A = rng.normal(size=2), rng.normal(size=(2, 2))
    S = A @ A.T
    mean, full = effects_moments(Z, m, S, full=True)
    _, diag = effects_moments(Z, m, S, full=False)
    np.testing.assert_allclose(mean, Z @ m)
    np.testing.assert_allclose(full, Z @ S @ Z.T)
    np.testing.assert_allclose(diag, np.diag(Z @ S @ Z.T))


def test_random_intercepts_are_learned_and_kept_at_the_sites():
    X, y, groups = _data()
    m = PFedHGPRegressor(random_effects="intercept", **SMALL).fit(X, y, groups=groups)
    assert m.random_effects_cov_.shape == (1, 1)
    assert m.random_effects_cov_[0, 0] > 0
    # each site's E[b_i] stays in its own state; nothing per site goes up but E[b b^T]
    up = [r for r in m.communication_.records if r.direction == "up"]
    sent = {name for r in up for name in r.names}
    assert {"re_moment", "re_m"} <= sent and not sent & {"re_mean", "re_cov"}
    assert all(r.shapes[r.names.index("re_moment")] == (1, 1) for r in up
               if "re_moment" in r.names)
    # seen sites get their intercept; a new site only the prior variance
    mean_seen, std_seen = m.predict(X[:3], groups=groups[:3], return_std=True)
    mean_new, std_new = m.predict(X[:3], return_std=True)
    assert np.all(std_new > std_seen)


def test_random_effects_refuse_what_they_do_not_cover():
    X, y, groups = _data()
    with pytest.raises(ValueError, match="needs optimizer='cavi'"):
        PFedHGPRegressor(random_effects="linear", optimizer="paper", **SMALL).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match="site_trend"):
        PFedHGPRegressor(random_effects="linear", site_trend="linear", **SMALL).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match="1-D y only"):
        PFedHGPRegressor(random_effects="linear", **SMALL).fit(
            X, np.column_stack([y, y]), groups=groups)
    with pytest.raises(ValueError, match="'random_effects' parameter"):
        PFedHGPRegressor(random_effects="quadratic", **SMALL).fit(X, y, groups=groups)


def test_global_gp_with_random_intercepts_is_the_linear_mixed_model():
    # y = linear + random intercept + noise: PFedHGP with only its global GP and
    # random_effects="intercept" nests the ML linear mixed model (the global GP over the
    # linear prior mean switches itself off)
    from skfed.linear_model import FedMixedLMRegressor

    rng = np.random.default_rng(0)
    n_sites, n = 20, 20
    X = rng.uniform(0, 10, (n_sites * n, 1))
    groups = np.repeat(np.arange(n_sites), n)
    y = 1 + 0.5 * X[:, 0] + rng.normal(0, 1.0, n_sites)[groups] + 0.5 * rng.normal(size=X.shape[0])
    lmm = FedMixedLMRegressor(reml=False).fit(X, y, groups=groups)
    gp = PFedHGPRegressor(inference="variational",
                          components=("global",), random_effects="intercept",
                          random_state=0).fit(X, y, groups=groups)
    assert gp.random_effects_cov_[0, 0] == pytest.approx(lmm.random_effects_cov_[0, 0], rel=0.05)
    assert gp.noise_variance_ == pytest.approx(lmm.noise_variance_, rel=0.03)
    Xt = rng.uniform(0, 10, (100, 1))
    gt = rng.integers(0, n_sites, 100)
    diff = gp.predict(Xt, groups=gt) - lmm.predict(Xt, groups=gt)
    assert np.sqrt(np.mean(diff ** 2)) < 0.05 * np.std(y)
