"""Strict privacy of PersonalizedTensorRegressor (Definition 1 of the paper: one pair replaced).

A private fit is strict by default: every release is a Gaussian mechanism whose
sensitivity ``2 tau_e tau_x / n_k`` does not depend on the data. The neighbouring-data
tests replace one row of a client (by an adversarial, large one) and check that each
release's change before noise stays within that sensitivity. The paper's protocol stays
available as ``privacy_mode="paper"``, with a warning and no guarantee reported.
"""

import math
import warnings

import numpy as np
import pytest

from skfed.datasets import make_tensor_regression
from skfed.federated import Federation
from skfed.privacy import pftr_noise_multiplier
from skfed.tensor import PersonalizedTensorRegressor, retract
from skfed.tensor._stages import MomentInit, StageOne, clipped_moment

SHAPE = dict(tensor_shape=(4, 3), output_shape=(2,))
COEF_SHAPE = (2, 4, 3)
PRIVATE = dict(epsilon=8.0, delta=1e-5, fit_intercept=False, n_rounds=4, step_size=0.5,
               random_state=0)
TAUS = dict(tau_x=3.0, tau_e=1.5)


@pytest.fixture(scope="module")
def data():
    return make_tensor_regression(n_clients=3, n_samples=[30, 40, 50], rank=(2, 2, 2),
                                  n_nonzero=2, random_state=0, **SHAPE)


def _neighbours(rng, n=25, p=12, q=2, scale=1.0):
    """A client's rows and the same rows with row 0 replaced by a large, opposite one."""
    X = rng.standard_normal((n, p))
    Y = rng.standard_normal((n, q))
    X2, Y2 = X.copy(), Y.copy()
    X2[0] = -scale * 50 * X[0]
    Y2[0] = scale * 50 * rng.standard_normal(q) - Y[0]
    return X, Y, X2, Y2


# -- neighbouring data: each release's change is within the declared sensitivity ---------

@pytest.mark.parametrize("seed", range(5))
def test_initial_moment_change_is_within_the_sensitivity(seed):
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    tau_x, tau_e = 2.0, 0.7
    m1, tx, te = clipped_moment(X, Y, tau_x, tau_e)
    m2, *_ = clipped_moment(X2, Y2, tau_x, tau_e)
    assert (tx, te) == (tau_x, tau_e)
    sensitivity = 2 * tau_e * tau_x / X.shape[0]
    change = np.linalg.norm(m1 - m2)
    assert 0 < change <= sensitivity * (1 + 1e-12)
    # the noisy release of MomentInit is this moment plus Gaussian noise (none without
    # privacy), the noise scale a function of tau_x, tau_e, n_k and the budget only
    init = MomentInit((2, 12), (2, 2), n_releases=5, epsilon=None,
                      delta=None, tau_x=tau_x, tau_e=tau_e)
    fed = Federation.from_arrays(X, Y)
    _, msg = init.client_step(fed.clients[0], None, {}, rng)
    np.testing.assert_allclose(msg["moment"], m1)
    private = MomentInit((2, 12), (2, 2), n_releases=5, epsilon=2.0,
                         delta=1e-5, tau_x=tau_x, tau_e=tau_e)
    state, _ = private.client_step(fed.clients[0], None, {}, rng)
    assert state["sigma"] == pytest.approx(sensitivity * pftr_noise_multiplier(2.0, 1e-5, 5))


@pytest.mark.parametrize("tangent_rank", [(2, 3, 4), (1, 2, 2)])
@pytest.mark.parametrize("seed", range(4))
def test_stage_one_gradient_change_is_within_the_sensitivity(seed, tangent_rank):
    # rank (2, 3, 4) is full: the tangent space is everything and the message is the
    # clipped gradient itself; at a lower rank the projection is orthogonal, so the sent
    # message changes by no more than the gradient does
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    shape = (2, 3, 4)
    A, core, factors = retract(rng.standard_normal(shape), tangent_rank)
    broadcast = {"coef": A, "core": core, **{f"factor_{j}": U for j, U in enumerate(factors)}}
    tau_x, tau_e = 2.0, 0.7
    sensitivity = 2 * tau_e * tau_x / X.shape[0]
    sent = []
    for Xk, Yk in ((X, Y), (X2, Y2)):
        alg = StageOne(shape, tangent_rank, A, step_size=0.1, n_rounds=3, epsilon=None,
                       delta=None, tau_x=tau_x, tau_e=tau_e)
        client = Federation.from_arrays(Xk, Yk).clients[0]
        state = alg.client_init(client, rng)
        _, msg = alg.client_step(client, state, broadcast, rng)
        sent.append(msg["grad"])
    change = np.linalg.norm(sent[0] - sent[1])
    assert 0 < change <= sensitivity * (1 + 1e-10)


def test_noise_scale_does_not_depend_on_the_data_when_strict(data):
    X, y, groups = data
    X2, y2 = X.copy(), y.copy()
    X2[0] *= 100.0  # one row of client 0 replaced
    y2[0] = -50.0
    strict = [PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), **PRIVATE, **TAUS)
              .fit(Xk, yk, groups=groups) for Xk, yk in ((X, y), (X2, y2))]
    np.testing.assert_array_equal(strict[0].noise_std_, strict[1].noise_std_)
    np.testing.assert_array_equal(strict[0].tau_x_, strict[1].tau_x_)
    # the paper's quantile levels move with the data, and so does its noise
    with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
        paper = [PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), **PRIVATE,
                                             privacy_mode="paper").fit(Xk, yk, groups=groups)
                 for Xk, yk in ((X, y), (X2, y2))]
    assert not np.array_equal(paper[0].noise_std_, paper[1].noise_std_)


# -- the strict default and its refusals ---------------------------------------------

def test_default_private_fit_refuses_data_dependent_levels(data):
    X, y, groups = data
    model = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), **PRIVATE)
    with pytest.raises(ValueError, match=r"(?s)privacy_mode='strict'.*tau_x.*tau_e"):
        model.fit(X, y, groups=groups)
    assert not hasattr(model, "coef_")


@pytest.mark.parametrize("params, name", [
    (dict(init="admm"), "init"),
    (dict(init="admm", rank="auto"), "rank"),
    (dict(step_size="auto"), "step_size"),
    (dict(cv=2), "cv"),
])
def test_strict_refuses_each_release_outside_the_guarantee(data, params, name):
    X, y, groups = data
    kw = {**PRIVATE, "rank": (2, 2, 2), **TAUS, **params}
    with pytest.raises(ValueError, match=rf"{name}: .*privacy_mode='paper'"):
        PersonalizedTensorRegressor(**SHAPE, **kw).fit(X, y, groups=groups)


def test_bad_privacy_mode_and_init_are_refused(data):
    X, y, groups = data
    with pytest.raises(ValueError, match="'privacy_mode' parameter"):
        PersonalizedTensorRegressor(**SHAPE, privacy_mode="loose").fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="'init' parameter"):
        PersonalizedTensorRegressor(**SHAPE, init="zeros").fit(X, y, groups=groups)


@pytest.mark.parametrize("rank", [(2, 2, 2), "auto"])
def test_strict_private_fit_releases_only_noisy_gradients(data, rank):
    X, y, groups = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict: no warning
        model = PersonalizedTensorRegressor(**SHAPE, rank=rank, **PRIVATE, **TAUS)
        model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["strict"] and spent["mode"] == "strict" and spent["outside"] == []
    assert spent["epsilon"] == 8.0 and spent["delta"] == 1e-5
    assert spent["n_releases"] == PRIVATE["n_rounds"] + 1
    assert 0 < spent["epsilon_rdp"] < math.inf
    assert "initial clipped moment" in spent["covers"]
    assert model.init_client_ == -1 and model.local_ranks_ == {}
    assert np.all(np.isfinite(model.coef_)) and len(model.rank_) == 3
    # what went up: the set-up's counts, one noisy moment, then the noisy gradients
    ups = [r for r in model.communication_.records if r.direction == "up"]
    sent = {name for r in ups if r.round >= 0 for name in r.names}
    assert sent == {"moment", "grad", "n_samples"}
    assert all(set(r.names) == {"moment", "n_samples"} for r in ups if r.round == 0)


def test_paper_mode_warns_and_reports_no_guarantee(data):
    X, y, groups = data
    model = PersonalizedTensorRegressor(**SHAPE, rank="auto", **PRIVATE, privacy_mode="paper")
    with pytest.warns(UserWarning, match=r"no differential-privacy guarantee.*tau_x"):
        model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert not spent["strict"] and spent["mode"] == "paper"
    assert spent["epsilon"] == math.inf and spent["epsilon_rdp"] == math.inf
    assert spent["delta"] == 0.0
    assert spent["epsilon_nominal"] == 8.0 and spent["delta_nominal"] == 1e-5
    assert 0 < spent["epsilon_rdp_nominal"] < math.inf
    assert spent["n_releases"] == PRIVATE["n_rounds"]  # the paper's noise, unchanged
    names = [item.split(":")[0] for item in spent["outside"]]
    assert names == ["tau_x", "tau_e", "init", "rank"]
    assert model.init_client_ == 2  # the largest client's unperturbed estimate


def test_paper_mode_with_covered_settings_is_strict(data):
    X, y, groups = data
    init = np.zeros(COEF_SHAPE)
    init[0, 0, 0], init[1, 1, 1] = 1.0, 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), init=init, **PRIVATE,
                                            **TAUS, privacy_mode="paper")
        model.fit(X, y, groups=groups)
    assert model.privacy_spent_["strict"] and model.privacy_spent_["epsilon"] == 8.0
    assert model.privacy_spent_["n_releases"] == PRIVATE["n_rounds"]


def test_non_private_fit_is_unchanged_by_the_private_defaults(data):
    X, y, groups = data
    kw = dict(**SHAPE, rank="auto", n_rounds=3, random_state=0)
    a = PersonalizedTensorRegressor(**kw).fit(X, y, groups=groups)  # init="auto"
    b = PersonalizedTensorRegressor(init="admm", **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.init_client_ == b.init_client_ == 2
    assert not a.privacy_spent_["strict"] and a.privacy_spent_["epsilon"] == math.inf


def test_moment_initializer_without_privacy_starts_near_the_truth():
    # with identity-like covariance the clipped moment, unclipped (large levels), is
    # about A; one moment round then Stage I fits as well as from the ADMM start
    X, y, groups, truth = make_tensor_regression(
        n_clients=3, n_samples=200, rank=(2, 2, 2), n_nonzero=2, noise=0.05,
        return_truth=True, random_state=1, **SHAPE)
    kw = dict(**SHAPE, rank=(2, 2, 2), n_rounds=20, step_size=0.5, fit_intercept=False)
    moment = PersonalizedTensorRegressor(init="moment", **kw).fit(X, y, groups=groups)
    admm = PersonalizedTensorRegressor(init="admm", **kw).fit(X, y, groups=groups)
    err_m = np.linalg.norm(moment.shared_coef_ - truth.shared_coef)
    err_a = np.linalg.norm(admm.shared_coef_ - truth.shared_coef)
    assert err_m < 1.5 * err_a + 0.05


# -- tau_grad: the level of each row's projected term ------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_projected_term_level_bounds_the_gradient_change(seed):
    # with tau_grad below tau_e tau_x, replacing one row changes the sent projection by at
    # most 2 tau_grad / n_k, and the noise is scaled to that sensitivity
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    shape, rank = (2, 3, 4), (1, 2, 2)
    A, core, factors = retract(rng.standard_normal(shape), rank)
    broadcast = {"coef": A, "core": core, **{f"factor_{j}": U for j, U in enumerate(factors)}}
    tau_x, tau_e, tau_grad = 2.0, 0.7, 0.3
    sent, sigmas = [], []
    for Xk, Yk in ((X, Y), (X2, Y2)):
        for eps in (None, 3.0):
            alg = StageOne(shape, rank, A, step_size=0.1, n_rounds=3, epsilon=eps,
                           delta=1e-5, tau_x=tau_x, tau_e=tau_e, tau_grad=tau_grad)
            client = Federation.from_arrays(Xk, Yk).clients[0]
            state = alg.client_init(client, rng)
            state, msg = alg.client_step(client, state, broadcast, rng)
            if eps is None:
                sent.append(msg["grad"])
            else:
                sigmas.append(state["sigma"][0])
    change = np.linalg.norm(sent[0] - sent[1])
    assert 0 < change <= 2 * tau_grad / X.shape[0] * (1 + 1e-10)
    z = pftr_noise_multiplier(3.0, 1e-5, 3)
    assert sigmas == pytest.approx([2 * tau_grad / X.shape[0] * z] * 2, rel=1e-12)
    # a level above tau_e tau_x changes nothing: the paper's bound already holds
    alg = StageOne(shape, rank, A, step_size=0.1, n_rounds=3, epsilon=None, delta=None,
                   tau_x=tau_x, tau_e=tau_e, tau_grad=10 * tau_e * tau_x)
    plain = StageOne(shape, rank, A, step_size=0.1, n_rounds=3, epsilon=None, delta=None,
                     tau_x=tau_x, tau_e=tau_e)
    client = Federation.from_arrays(X, Y).clients[0]
    got = [a.client_step(client, a.client_init(client, rng), broadcast, rng)[1]["grad"]
           for a in (alg, plain)]
    np.testing.assert_allclose(got[0], got[1], rtol=0, atol=1e-14)


def test_tau_grad_in_a_fit_and_its_refusals(data):
    X, y, groups = data
    kw = dict(**SHAPE, rank=(2, 2, 2), **PRIVATE, **TAUS)
    model = PersonalizedTensorRegressor(tau_grad=1.0, **kw).fit(X, y, groups=groups)
    plain = PersonalizedTensorRegressor(**kw).fit(X, y, groups=groups)
    # the rounds' noise is scaled by tau_grad / (tau_e tau_x); the start's is not
    np.testing.assert_allclose(model.noise_std_, plain.noise_std_ * 1.0 / (1.5 * 3.0))
    assert "tau_grad" in model.privacy_spent_["covers"] and model.privacy_spent_["strict"]
    with pytest.raises(ValueError, match=r"tau_grad=1\.0 .*\(tau_grad\)"):
        PersonalizedTensorRegressor(tau_grad=1.0, tangent="retract_gradient", **kw).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match="'tau_grad' parameter"):
        PersonalizedTensorRegressor(tau_grad=-1.0, **kw).fit(X, y, groups=groups)
