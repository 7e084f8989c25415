"""DPFedDROClassifier on raw rows: private scaling, private temperature, site adaptation."""

import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from skfed.linear_model import DPFedDROClassifier
from skfed.linear_model._personalize import fit_site_adaptation


def _raw_sites(seed=0, n=600, n_sites=3):
    """Three classes in raw units (an age, an income, a dummy), with site-specific class shares."""
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_sites, n)
    # each site favours another class: what a site adaptation can learn
    y = np.where(rng.uniform(size=n) < 0.6, groups % 3, rng.integers(0, 3, n))
    X = np.column_stack([
        40 + 12 * y + 8 * rng.standard_normal(n),
        3e4 * (1 + (y == 2)) * rng.lognormal(0, 0.3, n),
        (rng.uniform(size=n) < 0.3 + 0.2 * (y == 1)).astype(float),
    ])
    return X, y, groups


@pytest.fixture(scope="module")
def raw():
    return _raw_sites()


@pytest.fixture(scope="module")
def private_fit(raw):
    X, y, groups = raw
    return DPFedDROClassifier(target_epsilon=4.0, classes=[0, 1, 2], n_rounds=20,
                              random_state=0).fit(X, y, groups=groups)


def test_site_adaptation_is_logistic_regression_without_shared_scores():
    # with no shared scores the adaptation is an L2-penalized multinomial logistic
    # regression on the standardized features: scikit-learn's, C = 1 / (lam n)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 3)) * [1.0, 10.0, 0.1] + [0.0, 5.0, 1.0]
    y = (X[:, 0] + X[:, 1] / 10 + rng.standard_normal(200) > 0).astype(int) + (X[:, 2] > 1.1)
    _, coef, intercept, lam = fit_site_adaptation(np.zeros((200, 3)), X, y, penalties=[0.05])
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    ref = LogisticRegression(C=1 / (0.05 * 200), tol=1e-10, max_iter=10000).fit(Z, y)
    ours = log_softmax(X @ coef.T + intercept, axis=1)
    np.testing.assert_allclose(np.exp(ours), ref.predict_proba(Z), atol=2e-3)
    assert lam == 0.05


def test_site_adaptation_keeps_the_shared_model_under_a_strong_penalty():
    rng = np.random.default_rng(4)
    F = rng.standard_normal((300, 3))
    y = np.argmax(2 * F + rng.gumbel(size=(300, 3)), axis=1)
    scale, coef, _, _ = fit_site_adaptation(F, rng.standard_normal((300, 2)), y, penalties=[1e3])
    assert np.abs(coef).max() < 1e-2 and 1.2 < scale < 3.0  # the shared scores, sharpened


def test_private_default_fits_raw_rows_and_reports_every_share(raw, private_fit):
    X, y, groups = raw
    clf = private_fit
    spent = clf.privacy_spent_
    assert spent["strict"] and spent["epsilon"] <= 4.0 + 1e-9
    assert spent["epsilon"] == pytest.approx(4.0, rel=1e-3)
    assert spent["calibration"] == "pld"
    assert [r["name"] for r in spent["releases"]] == [
        "model", "dro_variable", "scaling", "temperature"]
    assert spent["n_releases"] == 2 * 20 + 2
    shares = [r["share"] for r in spent["releases"]]
    assert sum(shares[:2]) == pytest.approx(0.85) and shares[2:] == pytest.approx([0.1, 0.05])
    # each release alone spends less than all of them together
    assert all(r["epsilon"] < spent["epsilon"] for r in spent["releases"])
    # the scaling: each feature's range (age around 40-90, income in the 1e4-1e5s)
    low, high = clf.feature_range_
    assert 10 < low[0] < 40 < 70 < high[0] < 150
    assert 5e3 < low[1] < 3e4 and 6e4 < high[1] < 5e5
    # coef_ acts on the rows clipped to feature_range_, in raw units
    clipped = np.clip(X, low, high)
    np.testing.assert_allclose(clf.decision_function(X), clipped @ clf.coef_.T + clf.intercept_)
    assert clf.score(X, y) > 0.5  # chance is 1/3; 40% of the labels are noise
    # the temperature was fitted (noisily), not left at 1
    assert clf.temperature_ != 1.0
    assert log_loss(y, clf.predict_proba(X), labels=[0, 1, 2]) < log_loss(
        y, np.exp(log_softmax(clf.decision_function(X), axis=1)), labels=[0, 1, 2])


def test_releases_are_the_planned_ones(private_fit):
    records = private_fit.communication_.records
    ups = [r for r in records if r.direction == "up" and r.round >= 0]
    rounds = sorted({r.round for r in ups})
    assert rounds == list(range(22))  # histograms, 20 rounds, temperature
    assert {r.names for r in ups if r.round == 0} == {("histogram",)}
    assert {r.names for r in ups if 1 <= r.round <= 20} == {("coef",)}
    assert {r.names for r in ups if r.round == 21} == {("log_loss",)}
    assert {r.shapes for r in ups if r.round == 21} == {((8,),)}
    # the site adaptation sends nothing: the final broadcast has no reply
    assert max(r.round for r in records) == 22
    assert not [r for r in records if r.round == 22 and r.direction == "up"]


def test_site_adaptation_predicts_seen_sites(raw, private_fit):
    X, y, groups = raw
    clf = private_fit
    assert clf.personal_coef_.shape == (3, 3, 3) and clf.personal_penalty_.shape == (3,)
    seen = np.mean(clf.predict(X, groups=groups) == y)
    assert seen > clf.score(X, y) + 0.05  # each site's own class shares help
    # a new site gets the shared model; probabilities sum to one
    np.testing.assert_array_equal(clf.predict(X, groups=np.full(y.size, 99)), clf.predict(X))
    proba = clf.predict_proba(X, groups=groups)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)],
                                  clf.predict(X, groups=groups))


def test_public_bounds_release_nothing_for_the_scaling(raw):
    X, y, groups = raw
    bounds = [[0.0, 0.0, 0.0], [120.0, 3e5, 1.0]]
    clf = DPFedDROClassifier(target_epsilon=4.0, classes=[0, 1, 2], n_rounds=5,
                             feature_bounds=bounds, random_state=0).fit(X, y, groups=groups)
    assert "scaling" not in [
        r["name"] for r in clf.privacy_spent_["releases"]]
    assert not [r for r in clf.communication_.records if "histogram" in r.names]
    np.testing.assert_array_equal(clf.feature_range_, bounds)
    with pytest.raises(ValueError, match=r"feature_bounds must have shape \(2, n_features\)"):
        DPFedDROClassifier(target_epsilon=4.0, feature_bounds=[[0, 1]]).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="low < high"):
        DPFedDROClassifier(target_epsilon=4.0, feature_bounds=[[1, 0, 0], [0, 1, 1]]).fit(
            X, y, groups=groups)


def test_the_papers_protocol_is_kept(raw):
    X, y, groups = raw
    # accountant="paper": no scaling, rows above the norm bound refused, the paper's total
    with pytest.raises(ValueError, match="norm_bound"):
        DPFedDROClassifier(accountant="paper").fit(X, y, groups=groups)
    paper = DPFedDROClassifier(accountant="paper", n_rounds=3).fit(X / 1e6, y, groups=groups)
    assert paper.temperature_ == 1.0 and len(paper.privacy_spent_["releases"]) == 2
    with pytest.raises(ValueError, match="accountant='paper'"):
        DPFedDROClassifier(accountant="paper", standardize=True).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="scaling_share \\+ temperature_share"):
        DPFedDROClassifier(scaling_share=0.6, temperature_share=0.5).fit(X, y, groups=groups)


def test_non_private_fit_adapts_too(raw):
    X, y, groups = raw
    shared = DPFedDROClassifier(epsilon=None, personalize=False, n_rounds=10).fit(
        X, y, groups=groups)
    adapted = DPFedDROClassifier(epsilon=None, n_rounds=10).fit(X, y, groups=groups)
    np.testing.assert_allclose(adapted.coef_, shared.coef_)  # the same shared model
    assert shared.personal_coef_ is None
    assert (np.mean(adapted.predict(X, groups=groups) == y)
            > np.mean(shared.predict(X, groups=groups) == y))


def test_a_site_makes_each_one_off_release_once(raw, private_fit):
    # a server asking again gets an error, not a second release beyond the plan
    from skfed.federated import Federation
    from skfed.linear_model._admm import DPFedDROAlgorithm

    X, y, groups = raw
    clf = DPFedDROClassifier(target_epsilon=4.0, classes=[0, 1, 2], n_rounds=2,
                             random_state=0)
    clf._check_params()
    setup = {"classes": np.array([0, 1, 2]), "n_samples": np.bincount(groups),
             "n_features": 3}
    algorithm = clf._federated_algorithm(setup)
    assert isinstance(algorithm, DPFedDROAlgorithm)
    fed = Federation.from_arrays(X, y, groups, min_samples=2)
    data = algorithm.prepare_client(fed.clients[0])
    state = algorithm.client_init(data, None)
    rng = np.random.default_rng(0)
    state, _ = algorithm.client_step(data, state, {"coef": np.zeros((3, 3)),
                                                   "histogram": np.int64(1)}, rng)
    with pytest.raises(ValueError, match="'histogram' twice"):
        algorithm.client_step(data, state, {"coef": np.zeros((3, 3)),
                                            "histogram": np.int64(1)}, rng)
    ranges = {"feature_center": np.zeros(3), "feature_half_range": np.ones(3)}
    ask = {"coef": np.ones((3, 3)), "calibrate": np.int64(1), **ranges}
    state, _ = algorithm.client_step(data, state, ask, rng)
    with pytest.raises(ValueError, match="'calibrate' twice"):
        algorithm.client_step(data, state, ask, rng)
