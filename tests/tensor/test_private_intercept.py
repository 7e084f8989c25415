"""A private ``fit_intercept=True``: means from an accounted share of the budget.

Each client releases the sums of its rows clipped to ``intercept_tau_x`` and
``intercept_tau_y`` plus Gaussian noise (``PrivateCentring``) and centres the rows of its
later releases on these noisy means. The neighbouring-data tests replace one row of a
client (by an adversarial, large one), as ``test_strict_privacy.py`` does for the other
releases, and check each release's change before noise against its declared sensitivity.
"""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant

from skfed.datasets import make_tensor_regression
from skfed.federated import Federation
from skfed.federated._ledger import keeping_payloads
from skfed.privacy import pftr_noise_multiplier, pftr_privacy_spent, pftr_release_plan
from skfed.tensor import PersonalizedTensorRegressor, retract
from skfed.tensor._stages import (
    MomentInit, PrivateCentring, StageOne, clipped_moment, pair_moment, pair_weights,
)

SHAPE = dict(tensor_shape=(4, 3))
PUBLIC = dict(tau_x=4.0, tau_e=1.5, step_size=0.5, intercept_tau_x=12.0,
              intercept_tau_y=60.0)
KW = dict(**SHAPE, rank=(2, 2), n_rounds=3, random_state=0, delta=0.1)


@pytest.fixture(scope="module")
def raw():
    """Uncentred data: every client's X and y shifted by offsets of its own."""
    X, y, groups = make_tensor_regression(
        n_clients=3, n_samples=[80, 100, 120], output_shape=None, rank=(2, 2),
        n_nonzero=2, noise=0.05, random_state=0, **SHAPE)
    return X + np.array([[2.0], [-1.0], [0.5]])[groups], \
        y + np.array([40.0, -20.0, 5.0])[groups], groups


def _neighbours(rng, n=25):
    """Uncentred rows (means 3 and -5) and the same with row 0 replaced by a large one."""
    X, Y = rng.standard_normal((n, 12)) + 3.0, rng.standard_normal((n, 2)) - 5.0
    row_x, row_y = -50 * X[:1], 50 * rng.standard_normal((1, 2)) - Y[:1]
    return X, Y, np.vstack([row_x, X[1:]]), np.vstack([row_y, Y[1:]])


# -- neighbouring data: each release's change is within the declared sensitivity ---------

@pytest.mark.parametrize("seed", range(5))
def test_private_sums_change_is_within_the_sensitivity(seed):
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    tau_x, tau_y = 20.0, 6.0
    sent = []
    for Xk, Yk in ((X, Y), (X2, Y2)):
        alg = PrivateCentring(tau_x=tau_x, tau_y=tau_y, noise_multiplier=0.0)
        _, msg = alg.client_step(Federation.from_arrays(Xk, Yk).clients[0], None, {}, rng)
        sent.append(msg)
    change_x = np.linalg.norm(sent[0]["x_sum"] - sent[1]["x_sum"])
    change_y = np.linalg.norm(sent[0]["y_sum"] - sent[1]["y_sum"])
    assert 0 < change_x <= 2 * tau_x * (1 + 1e-12)
    assert 0 < change_y <= 2 * tau_y * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_rows_of_later_releases_depend_on_their_own_row_and_the_released_means(seed):
    # a later release sees the rows centred on the released noisy means: given these
    # (released) values, replacing one row changes one centred row, so the moment and
    # Stage-I sensitivities 2 tau_e tau_x / n_k hold (adaptive composition)
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    alg = PrivateCentring(tau_x=20.0, tau_y=6.0, noise_multiplier=0.7)
    client = Federation.from_arrays(X, Y).clients[0]
    state, msg = alg.client_step(client, None, {}, np.random.default_rng(1))
    n = X.shape[0]
    cx, cy = msg["x_sum"] / n, msg["y_sum"] / n
    np.testing.assert_allclose(state["train"].X, X - cx, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state["train"].y, Y - cy, rtol=0, atol=1e-12)
    # noise was added: the released means are not the exact ones
    assert state["sigma"] == {"x": 2 * 20.0 * 0.7, "y": 2 * 6.0 * 0.7}
    assert not np.allclose(cx, X.mean(axis=0))
    # Stage II and the personal intercept (nothing sent) see the exact means
    np.testing.assert_allclose(state["local"].x_mean, X.mean(axis=0))
    tau_x, tau_e = 2.0, 0.7
    m1, *_ = clipped_moment(X - cx, Y - cy, tau_x, tau_e)
    m2, *_ = clipped_moment(X2 - cx, Y2 - cy, tau_x, tau_e)
    assert 0 < np.linalg.norm(m1 - m2) <= 2 * tau_e * tau_x / n * (1 + 1e-12)


# -- the budget's shares ------------------------------------------------------------------

def _composed_epsilon(groups, delta):
    acc = PLDAccountant()
    acc.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), c)
        for z, c in groups]))
    return acc.get_epsilon(delta)


def test_release_plan_splits_the_precision_and_spends_the_budget():
    groups = [(2, 0.1), (1, 0.3), (3, 0.6)]
    zs = pftr_release_plan(20.0, 0.1, groups, "pld")
    precision = np.array([c / z ** 2 for (c, _), z in zip(groups, zs)])
    np.testing.assert_allclose(precision / precision.sum(), [0.1, 0.3, 0.6], rtol=1e-12)
    eps = _composed_epsilon([(z, c) for (c, _), z in zip(groups, zs)], 0.1)
    assert eps <= 20.0 * (1 + 1e-12) and eps == pytest.approx(20.0, rel=1e-3)
    # one group is the multiplier of its equal releases, bit for bit
    assert pftr_release_plan(20.0, 0.1, [(3, 1.0)], "pld") == (
        pftr_noise_multiplier(20.0, 0.1, 3, "pld"),)
    # basic composition: each group is the paper's noise at its share of (epsilon, delta)
    z_paper = pftr_release_plan(20.0, 0.1, [(2, 0.25), (4, 0.75)])
    assert z_paper == (pftr_noise_multiplier(5.0, 0.025, 2),
                       pftr_noise_multiplier(15.0, 0.075, 4))
    assert pftr_release_plan(None, 0.1, groups) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("groups", [[(2, 0.5)], [(2, 0.5), (1, 0.6)], [(0, 1.0)],
                                    [(1, 0.0), (1, 1.0)], "ab", []])
def test_release_plan_refuses_bad_groups(groups):
    with pytest.raises(ValueError, match="groups must be pairs"):
        pftr_release_plan(20.0, 0.1, groups)


def test_raw_data_private_fit_with_intercept_reports_every_share(raw):
    X, y, groups = raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict: no warning
        model = PersonalizedTensorRegressor(epsilon=20.0, accountant="pld", **PUBLIC, **KW)
        model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["strict"] and spent["outside"] == [] and spent["mode"] == "strict"
    shares = [(r["name"], r["count"], r["share"]) for r in spent["releases"]]
    assert shares == [("intercept", 2, 0.5), ("init_and_stage_one", 4, 0.5)]
    assert spent["n_releases"] == 6
    assert "sums of clipped X and y rows" in spent["covers"]
    # the total is the composition of every share, recomputed directly by dp-accounting
    eps = _composed_epsilon([(r["noise_multiplier"], r["count"]) for r in spent["releases"]],
                            0.1)
    assert spent["epsilon"] == pytest.approx(eps, rel=1e-9)
    assert eps <= 20.0 * (1 + 1e-12) and eps == pytest.approx(20.0, rel=1e-3)
    for r in spent["releases"]:  # each share alone spends less than the whole
        assert 0 < r["epsilon"] < spent["epsilon"]
        assert r["epsilon"] == pytest.approx(_composed_epsilon(
            [(r["noise_multiplier"], r["count"])], 0.1), rel=1e-9)
    assert spent["noise_multiplier"] == spent["releases"][-1]["noise_multiplier"]
    z_train = spent["releases"][-1]["noise_multiplier"]
    n_k = np.bincount(groups)
    np.testing.assert_allclose(model.noise_std_[:, 0], 2 * 1.5 * 4.0 / n_k * z_train)
    # the fit recovers the raw offsets: personal intercepts from the exact local means,
    # the population one from the noisy pooled means
    pred = model.predict(X, groups=groups)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 1.0
    assert abs(model.shared_intercept_ - (y.mean() - model.shared_coef_.ravel()
                                          @ X.mean(axis=0))) < 5.0
    # what went up: the counts, the noisy sums (first round), the moment, the gradients
    ups = [r for r in model.communication_.records if r.direction == "up" and r.round >= 0]
    assert all(set(r.names) == {"x_sum", "y_sum", "n_samples"} for r in ups if r.round == 0)
    assert {name for r in ups if r.round > 0 for name in r.names} == {
        "moment", "grad", "n_samples"}


def test_paper_accountant_splits_the_budget_by_basic_composition(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20.0, intercept_share=0.2, **PUBLIC, **KW)
    model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["epsilon"] == 20.0 and spent["calibration"] == "paper"
    assert [r["epsilon"] for r in spent["releases"]] == pytest.approx([4.0, 16.0])
    assert spent["noise_multiplier"] == pytest.approx(pftr_noise_multiplier(16.0, 0.08, 4),
                                                      rel=1e-12)
    expected = pftr_privacy_spent(20.0, 0.1, 6, calibration="paper",
                                  groups=[("intercept", 2, 0.2),
                                          ("init_and_stage_one", 4, 0.8)])
    assert {k: spent[k] for k in expected} == expected


def test_init_share_splits_the_start_from_the_rounds(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20.0, accountant="rdp", init_share=0.5,
                                        **PUBLIC, **KW).fit(X, y, groups=groups)
    names = [(r["name"], r["count"]) for r in model.privacy_spent_["releases"]]
    assert names == [("intercept", 2), ("init", 1), ("stage_one", 3)]
    shares = [r["share"] for r in model.privacy_spent_["releases"]]
    assert shares == pytest.approx([0.5, 0.25, 0.25])
    z = [r["noise_multiplier"] for r in model.privacy_spent_["releases"]]
    # the start's one release carries the precision of the three rounds together
    assert 1 / z[1] ** 2 == pytest.approx(3 / z[2] ** 2, rel=1e-9)


def test_no_private_means_without_privacy_or_intercept(raw):
    X, y, groups = raw
    plain = PersonalizedTensorRegressor(**PUBLIC, **KW).fit(X, y, groups=groups)
    assert plain.privacy_spent_["releases"][0]["name"] == "stage_one"
    first = [r for r in plain.communication_.records if r.direction == "up" and r.round == -1]
    assert all({"x_sum", "y_sum"} <= set(r.names) for r in first)  # exact, not private
    flat = PersonalizedTensorRegressor(epsilon=20.0, fit_intercept=False, **PUBLIC, **KW)
    flat.fit(X, y, groups=groups)
    assert [r["name"] for r in flat.privacy_spent_["releases"]] == ["init_and_stage_one"]


def test_paper_mode_lists_data_dependent_levels_of_the_means(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20.0, privacy_mode="paper", init="moment",
                                        tau_x=4.0, tau_e=1.5, step_size=0.5, **KW)
    with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
        model.fit(X, y, groups=groups)
    names = [item.split(":")[0] for item in model.privacy_spent_["outside"]]
    assert names == ["intercept_tau_x", "intercept_tau_y"]
    assert model.privacy_spent_["epsilon"] == math.inf


@pytest.mark.parametrize("name, value, error", [
    ("intercept_share", 0.0, ValueError), ("intercept_share", 1.0, ValueError),
    ("intercept_share", "half", ValueError), ("intercept_share", True, ValueError),
    ("init_share", 1.5, ValueError), ("init_share", 0, ValueError),
    ("intercept_tau_x", -1.0, ValueError), ("intercept_tau_y", 0.0, ValueError),
    ("intercept_tau_y", "big", ValueError),
])
def test_bad_shares_and_levels_name_the_argument(raw, name, value, error):
    X, y, groups = raw
    with pytest.raises(error, match=f"'{name}' parameter"):
        PersonalizedTensorRegressor(epsilon=20.0, **{**PUBLIC, **KW, name: value}).fit(
            X, y, groups=groups)


def test_no_raw_value_in_messages_or_errors(raw):
    X, y, groups = raw
    model = PersonalizedTensorRegressor(epsilon=20.0, **PUBLIC, **KW)
    with keeping_payloads():
        model.fit(X, y, groups=groups)
    values = np.concatenate([X.ravel(), y.ravel()])
    ledger = model.communication_
    assert len(ledger.payloads) == len(ledger.records) > 0
    for record, payload in zip(ledger.records, ledger.payloads):
        for name, value in payload.items():
            arr = np.asarray(value)
            if arr.dtype.kind in "iuf":
                assert not np.isin(arr.astype(float).ravel(), values).any(), (record.round, name)
    # the strict refusal names parameters, never a value of the data
    with pytest.raises(ValueError) as info:
        PersonalizedTensorRegressor(epsilon=20.0, **{**PUBLIC, "intercept_tau_y": None},
                                    **KW).fit(X, y, groups=groups)
    assert "intercept_tau_y" in str(info.value)
    assert not any(f"{v:.3g}" in str(info.value) for v in y[:20])


# -- private_centring="pairs": pair differences, no mean released ------------------------

def test_pair_moment_is_the_centred_moment_without_truncation():
    rng = np.random.default_rng(0)
    R, X = rng.standard_normal((20, 3)) + 5.0, rng.standard_normal((20, 4)) - 2.0
    W = np.ones((20, 20))
    np.fill_diagonal(W, 0.0)
    centred = (R - R.mean(axis=0)).T @ (X - X.mean(axis=0))
    np.testing.assert_allclose(pair_moment(R, X, W), centred.reshape(-1), rtol=1e-12)
    # large levels truncate nothing
    np.testing.assert_array_equal(pair_weights(R, X, 1e6, 1e6), W)


@pytest.mark.parametrize("seed", range(4))
def test_pair_releases_change_is_within_the_sensitivity(seed):
    rng = np.random.default_rng(seed)
    X, Y, X2, Y2 = _neighbours(rng)
    n, tau_x, tau_e, tau_grad = X.shape[0], 30.0, 8.0, 40.0
    shape, rank = (2, 3, 4), (1, 2, 2)
    A, core, factors = retract(rng.standard_normal(shape), rank)
    broadcast = {"coef": A, "core": core, **{f"factor_{j}": U for j, U in enumerate(factors)}}
    moments, grads, capped = [], [], []
    for Xk, Yk in ((X, Y), (X2, Y2)):
        client = Federation.from_arrays(Xk, Yk).clients[0]
        start = MomentInit((2, 12), (2, 2), n_releases=3, epsilon=None, delta=None,
                           tau_x=tau_x, tau_e=tau_e, pairs=True)
        moments.append(start.client_step(client, None, {}, rng)[1]["moment"])
        for level, out in ((None, grads), (tau_grad, capped)):
            alg = StageOne(shape, rank, A, step_size=0.1, n_rounds=3, epsilon=None,
                           delta=None, tau_x=tau_x, tau_e=tau_e, tau_grad=level, pairs=True)
            state = alg.client_init(client, rng)
            out.append(alg.client_step(client, state, broadcast, rng)[1]["grad"])
    bound = 2 * tau_e * tau_x / n
    assert 0 < np.linalg.norm(moments[0] - moments[1]) <= bound * (1 + 1e-12)
    assert 0 < np.linalg.norm(grads[0] - grads[1]) <= bound * (1 + 1e-10)
    assert 0 < np.linalg.norm(capped[0] - capped[1]) <= 2 * tau_grad / n * (1 + 1e-10)


def test_pairs_fit_is_invariant_to_client_offsets_and_sends_no_mean(raw):
    X, y, groups = raw
    kw = dict(epsilon=20.0, private_centring="pairs", **{**PUBLIC, "tau_x": 6.0}, **KW)
    with keeping_payloads():
        model = PersonalizedTensorRegressor(**kw).fit(X, y, groups=groups)
    shifted = PersonalizedTensorRegressor(**kw).fit(
        X + np.array([[3.0], [0.0], [-1.0]])[groups], y + np.array([7.0, 1.0, -2.0])[groups],
        groups=groups)
    # the releases see pair differences only: a client's offsets cancel
    np.testing.assert_allclose(shifted.shared_coef_, model.shared_coef_, atol=1e-8)
    spent = model.privacy_spent_
    assert spent["strict"] and [r["name"] for r in spent["releases"]] == ["init_and_stage_one"]
    names = {n for r in model.communication_.records if r.direction == "up" for n in r.names}
    assert not names & {"x_sum", "y_sum", "x_mean", "y_mean"}
    assert np.all(model.shared_intercept_ == 0.0)
    # the personal intercepts come from the exact local means (never sent)
    for k in range(3):
        rows = groups == k
        expected = y[rows].mean() - model.coef_[k].ravel() @ X[rows].mean(axis=0)
        assert model.intercept_[k] == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"private_centring='pairs'.*\(private_centring\)"):
        PersonalizedTensorRegressor(**{**kw, "tau_e": None, "privacy_mode": "paper"}).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match="'private_centring' parameter"):
        PersonalizedTensorRegressor(**{**kw, "private_centring": "median"}).fit(
            X, y, groups=groups)
