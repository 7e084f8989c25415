"""PFedHGPRegressor's stopping rule (``tol``) and its optimizer-dependent ``server_lr``."""

import numpy as np
import pytest

from skfed import PFedHGPRegressor
from skfed.gaussian_process import PFedGPRegressor
from skfed.gaussian_process._steps import CONVERGENCE_WINDOW


def _data(n_outputs=None):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 5, (72, 1))
    groups = np.repeat([0, 1, 2], 24)
    y = np.sin(X[:, 0]) + 0.4 * groups + 0.1 * rng.normal(size=72)
    if n_outputs:
        y = np.column_stack([y, np.cos(X[:, 0]) - 0.2 * groups + 0.1 * rng.normal(size=72)])
    return X, y, groups


# the tolerances below were set for the constant prior mean on these data
SMALL = dict(inference="variational",
             n_inducing_global=6, n_inducing_local=4, local_steps=3, random_state=0,
             mean_function="constant")


@pytest.mark.parametrize("n_outputs", [None, 2])
@pytest.mark.parametrize("optimizer", ["cavi", "paper"])
def test_tol_stops_with_the_fit_of_that_many_rounds(n_outputs, optimizer):
    # stopping after k rounds runs the k-th as the last round (population release,
    # blockwise m_g, kernel kept): the same fit as n_rounds=k without tol
    X, y, groups = _data(n_outputs)
    kw = dict(SMALL, optimizer=optimizer)
    tol = 1e-2 if optimizer == "cavi" else 5e-2
    stopped = PFedHGPRegressor(n_rounds=100, tol=tol, **kw).fit(X, y, groups=groups)
    k = stopped.n_iter_
    assert CONVERGENCE_WINDOW < k < 100
    assert stopped.elbo_.shape == (k,)
    # the stop is decided on the window before the last round
    e = stopped.elbo_
    assert abs(e[-2] - e[-2 - CONVERGENCE_WINDOW]) <= tol * X.shape[0]
    assert stopped.communication_.n_rounds == k + 1  # the set-up round and k rounds
    fixed = PFedHGPRegressor(n_rounds=k, **kw).fit(X, y, groups=groups)
    assert fixed.n_iter_ == k
    np.testing.assert_array_equal(stopped.elbo_, fixed.elbo_)
    np.testing.assert_array_equal(stopped.predict(X, groups=groups),
                                  fixed.predict(X, groups=groups))
    # the population prediction uses the release of the last round
    np.testing.assert_array_equal(stopped.predict(X[:5]), fixed.predict(X[:5]))
    assert stopped.communication_.bytes_up == fixed.communication_.bytes_up


def test_tol_none_or_zero_runs_every_round():
    X, y, groups = _data()
    for tol in (None, 0.0):
        model = PFedHGPRegressor(n_rounds=12, tol=tol, **SMALL).fit(X, y, groups=groups)
        assert model.n_iter_ == 12 and model.elbo_.shape == (12,)


def test_tol_with_client_sampling_releases_from_every_client():
    X, y, groups = _data()
    model = PFedHGPRegressor(n_rounds=100, tol=1e-2, client_fraction=0.5, **SMALL)
    model.fit(X, y, groups=groups)
    assert model.n_iter_ < 100
    # the last round asks every client (population release)
    last = model.n_iter_  # ledger round of the last training round (0 is the set-up)
    up = {r.client for r in model.communication_.records
          if r.round == last and r.direction == "up"}
    assert up == {0, 1, 2}
    assert any(len({r.client for r in model.communication_.records
                    if r.round == k and r.direction == "up"}) < 3 for k in range(1, last))
    assert model._released["ls_l"].shape[0] == 3
    assert np.all(np.isfinite(model.predict(X[:4])))


def test_server_lr_default_depends_on_the_optimizer():
    from skfed.gaussian_process._pfedhgp import DEFAULT_SERVER_LR

    X, y, groups = _data()
    for optimizer in ("cavi", "paper"):
        kw = dict(SMALL, optimizer=optimizer, n_rounds=4)
        default = PFedHGPRegressor(**kw).fit(X, y, groups=groups)
        explicit = PFedHGPRegressor(server_lr=DEFAULT_SERVER_LR[optimizer], **kw).fit(
            X, y, groups=groups)
        np.testing.assert_array_equal(default.elbo_, explicit.elbo_)
    assert DEFAULT_SERVER_LR["paper"] == 0.1  # the paper's protocol (Sec. 4.2)


@pytest.mark.parametrize("tol", [-1e-3, np.nan, np.inf, "small", True])
def test_bad_tol(tol):
    X, y, groups = _data()
    with pytest.raises(ValueError, match="tol"):
        PFedHGPRegressor(tol=tol, **SMALL).fit(X, y, groups=groups)


@pytest.mark.parametrize("server_lr", [0.0, -0.1, np.nan, "fast"])
def test_bad_server_lr(server_lr):
    X, y, groups = _data()
    with pytest.raises(ValueError, match="server_lr"):
        PFedHGPRegressor(server_lr=server_lr, **SMALL).fit(X, y, groups=groups)


def test_pfedgp_reports_rounds_run():
    X, y, groups = _data()
    model = PFedGPRegressor(n_inducing=4, optimizer="cavi", n_rounds=3, local_steps=2,
                            random_state=0).fit(X, y, groups=groups)
    assert model.n_iter_ == 3
