"""A strict private PersonalizedTensorRegressor on raw data with no user constant (issue 29).

With finite ``epsilon`` and none of the levels or the step given, each site releases once
its noisy histograms of its X and y entries (``scaling_share`` of the budget), the server
reads one range of each, and the sites fit in the scaled space where the levels are public
functions of the shapes; the fitted tensors and intercepts are mapped back to raw units.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from skfed.datasets import make_tensor_regression
from skfed.federated import ClientData
from skfed.tensor import PersonalizedTensorRegressor
from skfed.tensor._scaling import (
    CENTER,
    HALF_RANGE,
    RANGE_SD,
    RESPONSE_MARGIN,
    TensorScaling,
    entry_histogram,
    read_range,
)
from skfed.tensor._stages import PersonalizedTensorPhases

SHAPE = dict(tensor_shape=(5, 4))
finite = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)


@pytest.fixture(scope="module")
def raw():
    """Standardized-design rows made raw: X times 50, y scaled by 30 and shifted by 1000."""
    X, y, groups = make_tensor_regression(n_clients=5, n_samples=100, rank=(2, 2),
                                          n_nonzero=2, output_shape=None, random_state=0,
                                          **SHAPE)
    return 50.0 * X, 1000.0 + 30.0 * y, groups


def _r2(model, X, y, groups):
    return 1.0 - np.mean((model.predict(X, groups=groups) - y) ** 2) / np.var(y)


def test_default_private_fit_on_raw_data_is_strict(raw):
    X, y, groups = raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict, and the budget is met: no warning
        model = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0)
        model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["strict"] and spent["outside"] == []
    assert spent["epsilon"] == pytest.approx(20.0, rel=1e-6)  # the PLD accountant's
    scaling = spent["releases"][0]
    assert scaling["name"] == "scaling" and scaling["count"] == 2  # raw, then refined
    assert scaling["share"] == pytest.approx(0.2) and scaling["noise_multiplier"] > 0
    assert sum(r["share"] for r in spent["releases"]) == pytest.approx(1.0)
    assert spent["n_releases"] == 2 + 2 + 1 + 3  # histograms, sums, moment and 3 rounds
    assert "histograms" in spent["covers"]
    # the ranges cover the raw entries' bulk and are not much wider than their 2%-98% range
    # (at this noise the coarse-to-fine reading can lose part of one tail of X)
    for (low, high), values in ((model.feature_range_, X), (model.target_range_, y)):
        q02, q25, q75, q98 = np.quantile(values, [0.02, 0.25, 0.75, 0.98])
        assert low < q25 and high > q75 and high - low < 3 * (q98 - q02)
    pred = model.predict(X, groups=groups)
    assert pred.shape == y.shape and abs(pred.mean() - 1000) < 50  # raw units
    # what went up: the histograms first (every site once), and no raw value of a row
    ups = [r for r in model.communication_.records if r.direction == "up"]
    assert {name for r in ups if r.round in (0, 1) for name in r.names} == {"histogram"}
    assert not {"lipschitz", "x_sum", "y_sum"} & {n for r in ups if r.round < 0 for n in r.names}


def test_a_default_strict_scaled_fit_uses_the_tuned_recipe(raw):
    # "auto" n_rounds, init_share, tau_grad and accountant: the recipe only when scaled
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0).fit(
        X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["calibration"] == "pld" and len(model.grad_norm_) == 3
    shares = {r["name"]: (r["count"], r["share"]) for r in spent["releases"]}
    assert shares["init"] == (1, pytest.approx(0.8 * 0.5 * 0.4))  # of what scaling, sums left
    assert shares["stage_one"][0] == 3
    assert "min(tau_grad, tau_e tau_x)" in spent["covers"]
    # above PLD_MAX_EPSILON the recipe's accountant is RDP
    big = PersonalizedTensorRegressor(epsilon=1e4, **SHAPE, random_state=0).fit(
        X, y, groups=groups)
    assert big.privacy_spent_["calibration"] == "rdp"
    # given levels switch the scaling off, and with it the recipe: the paper's defaults
    levels = dict(tau_x=400.0, tau_e=60.0, intercept_tau_x=500.0, intercept_tau_y=1200.0,
                  step_size=1e-4)
    given = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0, **levels).fit(
        X, y, groups=groups)
    assert given.privacy_spent_["calibration"] == "paper" and len(given.grad_norm_) == 20
    assert "tau_grad" not in given.privacy_spent_["covers"]
    # and an explicit value wins over "auto"
    five = PersonalizedTensorRegressor(epsilon=20, n_rounds=5, accountant="rdp", **SHAPE,
                                       random_state=0).fit(X, y, groups=groups)
    assert len(five.grad_norm_) == 5 and five.privacy_spent_["calibration"] == "rdp"


def test_large_budget_predicts_in_raw_units_better_than_the_mean(raw):
    X, y, groups = raw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # accountant='paper' beyond its range
        model = PersonalizedTensorRegressor(epsilon=1e4, **SHAPE, random_state=0)
        model.fit(X, y, groups=groups)
    assert model.privacy_spent_["strict"]
    assert _r2(model, X, y, groups) > 0.8
    assert _r2(model, X, y, None) > 0.5  # A_0 and the shared intercept, raw units too
    # the raw tensors are the scaled ones times h_y / h_x: the Tucker rank is kept
    np.testing.assert_allclose(
        model.shared_coef_,
        np.einsum("ab,ia,jb->ij", model.core_, model.factors_[0], model.factors_[1]),
        atol=1e-10 * np.abs(model.shared_coef_).max())


def test_random_state_determinism(raw):
    X, y, groups = raw
    fits = [PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=seed)
            .fit(X, y, groups=groups) for seed in (3, 3, 4)]
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)
    np.testing.assert_array_equal(fits[0].intercept_, fits[1].intercept_)
    assert fits[0].feature_range_ == fits[1].feature_range_
    assert fits[0].feature_range_ != fits[2].feature_range_


def test_public_bounds_skip_the_release(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0,
                                        feature_bounds=(-150, 150), target_bounds=(800, 1200))
    model.fit(X, y, groups=groups)
    assert model.privacy_spent_["strict"]
    assert [r["name"] for r in model.privacy_spent_["releases"]] == [
        "intercept", "init", "stage_one"]  # the strict recipe's own share of the start
    assert model.feature_range_ == (-150.0, 150.0) and model.target_range_ == (800.0, 1200.0)
    assert "histogram" not in {n for r in model.communication_.records for n in r.names}
    # one bound public, the other released
    half = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0,
                                       target_bounds=(800, 1200)).fit(X, y, groups=groups)
    assert half.privacy_spent_["releases"][0]["name"] == "scaling"
    assert half.target_range_ == (800.0, 1200.0) and half.feature_range_ != (-150.0, 150.0)


@pytest.mark.parametrize("bounds", [(1.0,), (2.0, 1.0), (0.0, np.inf), [[0, 1], [0, 1]]])
def test_bad_public_bounds_are_refused(raw, bounds):
    X, y, groups = raw
    with pytest.raises(ValueError, match=r"feature_bounds must be two finite numbers"):
        PersonalizedTensorRegressor(epsilon=20, feature_bounds=bounds, **SHAPE).fit(
            X, y, groups=groups)


def test_given_levels_keep_the_unscaled_fit(raw):
    X, y, groups = raw
    levels = dict(tau_x=400.0, tau_e=60.0, intercept_tau_x=500.0, intercept_tau_y=1200.0,
                  step_size=1e-4)
    model = PersonalizedTensorRegressor(epsilon=20, **SHAPE, random_state=0, **levels)
    model.fit(X, y, groups=groups)
    assert model.feature_range_ is None and model.target_range_ is None
    assert [r["name"] for r in model.privacy_spent_["releases"]] == [
        "intercept", "init_and_stage_one"]
    assert np.all(model.tau_x_ == 400.0)
    # standardize=False: the former refusal, naming the missing constants
    with pytest.raises(ValueError, match=r"(?s)privacy_mode='strict'.*tau_x.*tau_e.*step_size"):
        PersonalizedTensorRegressor(epsilon=20, standardize=False, **SHAPE).fit(
            X, y, groups=groups)
    # a step in the user's units without levels: no scaling either; the message offers it
    with pytest.raises(ValueError, match=r"standardize='auto'"):
        PersonalizedTensorRegressor(epsilon=20, step_size=0.1, **SHAPE).fit(X, y, groups=groups)


def test_standardize_true_scales_with_given_levels(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20, standardize=True, tau_x=3.0, tau_e=1.0,
                                        step_size=0.5, **SHAPE, random_state=0)
    model.fit(X, y, groups=groups)
    assert model.feature_range_ is not None and np.all(model.tau_x_ == 3.0)


def test_non_private_fit_ignores_the_scaling(raw):
    X, y, groups = raw
    kw = dict(**SHAPE, rank=(2, 2), n_rounds=3, random_state=0)
    a = PersonalizedTensorRegressor(**kw).fit(X, y, groups=groups)
    b = PersonalizedTensorRegressor(standardize=True, feature_bounds=(-1, 1), **kw).fit(
        X, y, groups=groups)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.feature_range_ is None and b.feature_range_ is None
    assert a.privacy_spent_["epsilon"] == math.inf


# -- ranges at few rows: coarse-to-fine, fall back, or warn --------------------------

def _two_passes(scaling, sites, rng):
    first = scaling.combine([scaling.site_release(X, Y, rng) for X, Y in sites])
    return scaling.combine([scaling.site_release(X, Y, rng, first) for X, Y in sites], first)


@pytest.mark.parametrize("seed", range(10))
def test_few_rows_give_ranges_holding_most_entries_or_warn(seed):
    # 5 sites of 20 rows (50 entries each) at about the noise of a default fit's scaling:
    # a fine bin holds a few rows' worth of entries, under the noise threshold
    rng = np.random.default_rng(seed)
    sites = [(50.0 * rng.standard_normal((20, 50)), 1000.0 + 100.0 * rng.standard_normal((20, 1)))
             for _ in range(5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranges = _two_passes(TensorScaling(0.9), sites, rng)
    if any("feature_bounds" in str(w.message) for w in caught):
        return
    for i in range(2):
        entries = np.concatenate([site[i].ravel() for site in sites])
        lo = ranges[CENTER][i] - ranges[HALF_RANGE][i]
        hi = ranges[CENTER][i] + ranges[HALF_RANGE][i]
        q02, q98 = np.quantile(entries, [0.02, 0.98])
        assert np.mean((entries >= lo) & (entries <= hi)) >= 0.8
        # not a range unrelated to the bulk (100 responses 10 sd from 0 read about 3 wide;
        # the response's read range is then widened RESPONSE_MARGIN times)
        assert hi - lo <= 4.0 * (RESPONSE_MARGIN if i else 1.0) * (q98 - q02)


def test_a_spread_histogram_is_read_at_a_coarser_merge():
    edges = np.linspace(-2.0, 2.0, 129)
    counts = np.zeros(130)
    counts[33:97] = 5.0  # 320 entries spread evenly over [-1, 1): each bin under 4 x 2
    assert read_range(counts, edges, 2.0) is None
    center, half = read_range(counts, edges, 2.0, merges=(1, 2, 4, 8, 16))
    assert abs(center) < 0.1 and 0.8 < half < 1.1


def test_unreadable_ranges_warn_and_a_silent_second_pass_keeps_the_first():
    scaling = TensorScaling(1e6)  # noise no count stands above
    zeros = np.zeros((2, scaling.edges.size + 1))
    with pytest.warns(UserWarning, match=r"covariate \(feature_bounds\) and response"):
        first = scaling.combine([zeros] * 3)
    np.testing.assert_array_equal(first[CENTER], 0.0)
    np.testing.assert_array_equal(first[HALF_RANGE], 1.0)
    known = {CENTER: np.array([3.0, 1000.0]), HALF_RANGE: np.array([50.0, 70.0])}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refined = scaling.combine([np.zeros((2, 130))] * 3, known)
    np.testing.assert_allclose(refined[CENTER], known[CENTER])
    # the first range kept, the response's widened RESPONSE_MARGIN times
    np.testing.assert_allclose(refined[HALF_RANGE], known[HALF_RANGE] * [1, RESPONSE_MARGIN])


# -- the site's guarantees, whatever the server sends --------------------------------

@given(arrays(np.float64, (6, 4), elements=finite), arrays(np.float64, (6, 2), elements=finite),
       arrays(np.float64, (4,), elements=finite), arrays(np.float64, (2,), elements=finite),
       st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_replacing_a_row_moves_the_histograms_by_at_most_the_sensitivity(X, Y, x, y, i):
    edges = TensorScaling().edges
    X2, Y2 = X.copy(), Y.copy()
    X2[i], Y2[i] = x, y
    before = np.stack([entry_histogram(X, edges), entry_histogram(Y, edges)])
    after = np.stack([entry_histogram(X2, edges), entry_histogram(Y2, edges)])
    assert np.linalg.norm(before - after) <= 2.0 + 1e-12  # the release's L2 sensitivity
    np.testing.assert_allclose(before.sum(axis=1), 6.0)  # each row weighs 1


@given(arrays(np.float64, (5, 6), elements=finite), arrays(np.float64, (5, 1), elements=finite),
       st.floats(-1e9, 1e9), st.floats(1e-9, 1e9), st.floats(-1e9, 1e9), st.floats(1e-9, 1e9))
@settings(max_examples=100, deadline=None)
def test_scaled_rows_obey_the_levels_whatever_the_server_sends(X, Y, cx, hx, cy, hy):
    scaling = TensorScaling(1.0)
    broadcast = {CENTER: np.array([cx, cy]), HALF_RANGE: np.array([hx, hy])}
    Xs, Ys = scaling.transform(X, Y, broadcast)
    # every entry within RANGE_SD: the row norms within RANGE_SD sqrt(p) and sqrt(q)
    assert np.all(np.abs(Xs) <= RANGE_SD) and np.all(np.abs(Ys) <= RANGE_SD)
    assert np.all(np.linalg.norm(Xs, axis=1) <= RANGE_SD * math.sqrt(6) * (1 + 1e-12))


@pytest.mark.parametrize("broadcast", [
    {},
    {CENTER: np.zeros(1), HALF_RANGE: np.ones(1)},
    {CENTER: np.zeros(2), HALF_RANGE: np.array([1.0, 0.0])},
    {CENTER: np.array([0.0, np.nan]), HALF_RANGE: np.ones(2)},
    {CENTER: np.zeros(2), HALF_RANGE: np.array([1.0, np.inf])},
    {CENTER: "0 0", HALF_RANGE: np.ones(2)},
])
def test_bad_broadcast_ranges_raise(broadcast):
    with pytest.raises(ValueError, match="the server's entry ranges are malformed"):
        TensorScaling(1.0).transform(np.zeros((2, 3)), np.zeros((2, 1)), broadcast)


def _phases():
    stage_one = dict(step_size=1.0, n_rounds=2, epsilon=20.0, delta=1e-5, tau_x=2.0,
                     tau_e=1.0, noise_multiplier=1.0)
    return PersonalizedTensorPhases(
        (1, 4), (1, 1), None, {}, stage_one, dict(alpha=0.01, n_iter=5), fit_intercept=True,
        moment_init=True, init_noise_multiplier=1.0, scaling=TensorScaling(1.0),
        centring=dict(tau_x=2.0, tau_y=1.0, noise_multiplier=1.0))


def test_each_one_off_release_is_made_once_and_ranges_are_checked():
    algorithm = _phases()
    assert algorithm.phases == ("scale", "centre", "init", "stage_one", "stage_two")
    rng = np.random.default_rng(0)
    data = ClientData(X=rng.standard_normal((8, 4)) * 50, y=rng.standard_normal((8, 1)) + 9,
                      label="a", index=0)
    data = algorithm.prepare_client(data)
    state = algorithm.client_init(data, rng)
    _, first = algorithm.server_init(rng)
    ranges = {CENTER: np.array([0.0, 9.0]), HALF_RANGE: np.array([100.0, 2.0])}
    state, message = algorithm.client_step(data, state, first, rng)
    assert set(message) == {"histogram"} and message["histogram"].shape == (2, 83)
    with pytest.raises(ValueError, match="entry ranges are malformed"):  # the second pass
        algorithm.client_step(data, state, first, rng)
    state, message = algorithm.client_step(data, state, {**first, **ranges}, rng)
    assert set(message) == {"histogram"}
    with pytest.raises(ValueError, match="one-off release of phase 'scale' again"):
        algorithm.client_step(data, state, {**first, **ranges}, rng)
    centre = {"phase": np.int64(1), **ranges}
    state, message = algorithm.client_step(data, state, centre, rng)
    assert set(message) == {"n_samples", "x_sum", "y_sum"}
    # the private sums are of the scaled rows: within the levels before noise
    with pytest.raises(ValueError, match="one-off release of phase 'centre' again"):
        algorithm.client_step(data, state, centre, rng)
    with pytest.raises(ValueError, match="one-off release of phase 'scale' again"):
        algorithm.client_step(data, state, first, rng)
    bad = {"phase": np.int64(2), CENTER: np.zeros(2), HALF_RANGE: np.array([1.0, -1.0])}
    with pytest.raises(ValueError, match="entry ranges are malformed"):
        algorithm.client_step(data, state, bad, rng)
