"""PFedHGPRegressor: out-of-range inputs and numerical failures get clear errors."""

import numpy as np
import pytest

from skfed import PFedHGPRegressor
from skfed.gaussian_process._linalg import CholeskyError
from skfed.gaussian_process._optimizers import ClosedForm
from skfed.gaussian_process._setup import _scaled_sum_of_squares
from skfed.gaussian_process._steps import _PFedHGPSteps

SMALL = dict(inference="variational",
             n_inducing_global=6, n_inducing_local=2, n_rounds=4, random_state=0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    return X, y, np.repeat(["a", "b", "c"], 20)


def test_scaled_sum_of_squares_detects_overflow_without_warning():
    with np.errstate(over="raise", invalid="raise"):
        a, ss = _scaled_sum_of_squares(np.array([1.0, -1e155]))
        assert a == 1e155 and ss == np.inf
        a, ss = _scaled_sum_of_squares(np.array([3.0, -4.0]))
        assert a == 4.0 and ss == pytest.approx(25.0)
        assert _scaled_sum_of_squares(np.zeros(3)) == (0.0, 0.0)


@pytest.mark.parametrize("big", [1e155, 1e300])
@pytest.mark.parametrize("kw", [dict(optimizer="cavi"),  # the defaults: normalize_y/X=True
                                dict(optimizer="paper", local_steps=3, normalize_y=False)])
def test_y_out_of_range_is_refused_naming_y_and_client(data, big, kw):
    # was: NaN predictions (1e155), OverflowError or CholeskyError (1e300)
    X, y, g = data
    y = y.copy()
    y[25] = -big  # a row of client 'b'
    with pytest.raises(ValueError, match=r"^y of client 'b' is out of range: .*"
                                         r"1e\+(155|300).*Rescale y"):
        PFedHGPRegressor(**SMALL, **kw).fit(X, y, groups=g)


def test_X_out_of_range_is_refused_naming_X_column_and_client(data):
    # was: a silent inf in the set-up summary (normalize_X=True)
    X, y, g = data
    X = X.copy()
    X[45, 1] = 1e200  # client 'c'
    with pytest.raises(ValueError, match=r"^X \(column 1\) of client 'c' is out of range: "
                                         r".*1e\+200.*Rescale X"):
        PFedHGPRegressor(optimizer="cavi", **SMALL).fit(X, y, groups=g)


def test_multioutput_y_out_of_range_is_refused(data):
    X, y, g = data
    Y = np.column_stack([y, np.cos(X[:, 1])])
    Y[5, 1] = 1e160
    with pytest.raises(ValueError, match=r"^y \(column 1\) of client 'a' is out of range"):
        PFedHGPRegressor(optimizer="cavi", **SMALL).fit(X, Y, groups=g)


@pytest.mark.parametrize("kw", [dict(optimizer="cavi"),
                                dict(optimizer="cavi", normalize_y=False, normalize_X=False),
                                dict(optimizer="paper", local_steps=3)])
def test_large_but_safe_inputs_still_fit(data, kw):
    X, y, g = data
    est = PFedHGPRegressor(**SMALL, **kw).fit(X * 1e8, y * 1e10, groups=g)
    pred = est.predict(X * 1e8, groups=g)
    assert np.all(np.isfinite(pred)) and np.all(np.isfinite(est.elbo_))
    if kw.get("normalize_y", True):
        # on the normalized scale the fit does not depend on the units
        ref = PFedHGPRegressor(**SMALL, **kw).fit(X, y, groups=g).predict(X, groups=g)
        np.testing.assert_allclose(pred / 1e10, ref, rtol=1e-4, atol=1e-4)


def test_client_cholesky_failure_names_client_round_and_fix(data, monkeypatch):
    X, y, g = data
    original = _PFedHGPSteps.client_inputs

    def failing(self, d, state, broadcast, loc):
        if d.label == "b" and state.get("round") == 3:
            raise CholeskyError("a kernel matrix is not positive definite even with jitter")
        return original(self, d, state, broadcast, loc)

    monkeypatch.setattr(_PFedHGPSteps, "client_inputs", failing)
    with pytest.raises(FloatingPointError, match=r"^client 'b', round 3: .*CholeskyError.*"
                                                 r"rescale y .*increase jitter") as info:
        PFedHGPRegressor(optimizer="cavi", **SMALL).fit(X, y, groups=g)
    assert isinstance(info.value.__cause__, CholeskyError)


def test_client_non_finite_message_is_reported(data, monkeypatch):
    # was: a NaN statistic reached the server silently
    X, y, g = data
    calls = []

    def nan_message(original, take):
        def step(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            calls.append(1)
            if len(calls) == 5:  # clients a, b, c step in order: round 2, client 'b'
                take(out)["rr"] = np.nan
            return out
        return step

    # a client's message comes from ClosedForm.message, or from ClosedForm.small_round
    # for a small client of the default model (its whole round in one call)
    monkeypatch.setattr(ClosedForm, "message",
                        nan_message(ClosedForm.message, lambda msg: msg))
    monkeypatch.setattr(ClosedForm, "small_round",
                        nan_message(ClosedForm.small_round, lambda out: out[3]))
    with pytest.raises(FloatingPointError, match=r"^client 'b', round 2: .*'rr' is not "
                                                 r"finite.*rescale y"):
        PFedHGPRegressor(optimizer="cavi", n_jobs=1, **SMALL).fit(X, y, groups=g)


def test_predict_and_sample_y_refuse_X_out_of_range(data):
    # was: the default (collapsed) fit's std inf, its covariance's diagonal NaN and a
    # CholeskyError in sample_y, for rows fit would refuse
    X, y, g = data
    model = PFedHGPRegressor(n_restarts=0, random_state=0).fit(X, y, groups=g)
    for call in (lambda Xp: model.predict(Xp, groups=g[:2], return_std=True),
                 lambda Xp: model.predict(Xp, groups=g[:2], return_cov=True),
                 lambda Xp: model.sample_y(Xp, groups=g[:2])):
        with pytest.raises(ValueError, match=r"^X is out of range"):
            call(X[:2] * 1e160)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_samples"):
            model.sample_y(X[:2], n_samples=bad)


def test_collapsed_fit_refuses_init_inducing_global_of_another_width(data):
    # was: numpy's broadcast error (the variational fit named the parameter)
    X, y, g = data
    with pytest.raises(ValueError, match=r"init_inducing_global must be a finite array of "
                                         r"shape \(M, 2\), got shape \(3, 5\)"):
        PFedHGPRegressor(init_inducing_global=np.zeros((3, 5)), n_restarts=0).fit(
            X, y, groups=g)
