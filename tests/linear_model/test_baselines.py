import math

import numpy as np
import pytest
from sklearn.preprocessing import Normalizer

from skfed import DPFedDROClassifier
from skfed.linear_model import (
    CentralizedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedOvADROClassifier,
)
from skfed.linear_model._admm import cs_dro_objective, phi
from skfed.privacy import dpfeddro_epsilon

# tests about other things fit private models without the public classes=: each site's
# label set is then sent outside the guarantee, which fit warns about
# (tests/linear_model/test_known_classes.py)
pytestmark = pytest.mark.filterwarnings("ignore:.*set of class labels:UserWarning")


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 240)
    X = Normalizer().fit_transform(np.eye(3, 4)[y] + 0.15 * rng.standard_normal((240, 4)))
    return X, y, rng.integers(0, 4, 240)


def test_dp_erm_privacy_and_noise(blobs):
    X, y, groups = blobs
    clf = DPFedERMClassifier(epsilon=0.5, delta=1e-6, n_rounds=50, c_w=5.0,
                             classes=[0, 1, 2], random_state=0).fit(X, y, groups=groups)
    assert clf.privacy_spent_["epsilon"] == pytest.approx(dpfeddro_epsilon(50, 0.5, 0.0, 1e-6))
    n_g = np.bincount(groups)
    z = math.sqrt(2 * math.log(1.25e6)) / 0.5
    np.testing.assert_allclose(clf.noise_sigma_,
                               2 * math.sqrt(2) / (n_g * (0.8 + 1 / clf.eta_)) * z)
    ups = [r for r in clf.communication_.records if r.direction == "up" and r.round >= 0]
    assert all(r.names == ("coef",) for r in ups)
    assert clf.score(X, y) > 0.8


def test_dp_sgd_privacy_and_learning(blobs):
    X, y, groups = blobs
    clf = DPFedSGDClassifier(epsilon=0.5, n_rounds=30, learning_rate=2.0, accountant="rdp",
                             classes=[0, 1, 2], random_state=0).fit(X, y, groups=groups)
    z = math.sqrt(2 * math.log(1.25e6)) / 0.5
    np.testing.assert_allclose(clf.noise_sigma_, 2 * math.sqrt(2) / np.bincount(groups) * z)
    assert clf.privacy_spent_["epsilon"] < dpfeddro_epsilon(30, 0.5, 0.0, 1e-6)
    assert clf.score(X, y) > 0.9
    target = DPFedSGDClassifier(target_epsilon=1.0, target_delta=1e-5, n_rounds=10,
                                classes=[0, 1, 2], random_state=0).fit(X, y, groups=groups)
    assert target.privacy_spent_["epsilon"] == pytest.approx(1.0, rel=1e-4)


def test_ova_and_centralized_separate(blobs):
    X, y, groups = blobs
    ova = FedOvADROClassifier(n_rounds=3).fit(X[:80], y[:80], groups=groups[:80])
    assert ova.score(X, y) > 0.95
    assert ova.coef_.shape == (3, 4)
    cen = CentralizedDROClassifier(radius=1e-3, kappa=0.5).fit(X, y)
    assert cen.score(X, y) > 0.95


def test_centralized_is_optimal(blobs):
    X, y, _ = blobs
    X, y = X[:60], y[:60]
    cen = CentralizedDROClassifier(radius=0.01, kappa=0.5, feature_norm="l1").fit(X, y)
    # lambda >= phi(M) with phi over the l_inf dual norm of feature_norm="l1"
    assert cen.dro_lambda_ >= phi(cen.coef_, "linf") - 1e-7
    best = cs_dro_objective(X, y, cen.coef_, cen.dro_lambda_, radius=0.01, kappa=0.5)
    rng = np.random.default_rng(1)
    for _ in range(50):  # no nearby feasible point does better
        M = cen.coef_ + 0.05 * rng.standard_normal(cen.coef_.shape)
        lam = max(phi(M, "linf"), cen.dro_lambda_)
        assert cs_dro_objective(X, y, M, lam, radius=0.01, kappa=0.5) >= best - 1e-7


@pytest.mark.parametrize("cls", [DPFedERMClassifier, DPFedSGDClassifier])
def test_private_baselines_refuse_unbounded_rows(blobs, cls):
    X, y, _ = blobs
    with pytest.raises(ValueError, match="norm_bound"):
        cls(n_rounds=2).fit(X * 2, y)
    with pytest.raises(ValueError, match="epsilon"):
        cls(epsilon=0).fit(X, y)


def test_same_api_string_labels():
    rng = np.random.default_rng(3)
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 60)]
    X = Normalizer().fit_transform(rng.standard_normal((60, 3)))
    for est in (DPFedDROClassifier(n_rounds=2), DPFedERMClassifier(n_rounds=2),
                DPFedSGDClassifier(n_rounds=2), FedOvADROClassifier(n_rounds=1),
                CentralizedDROClassifier()):
        pred = est.fit(X, y).predict(X)
        assert set(pred) <= {"a", "b", "c"}
        assert est.decision_function(X).shape == (60, 3)


# -- found by tests/test_properties.py ------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: FedOvADROClassifier(n_rounds=2),
                                  CentralizedDROClassifier])
def test_overflowing_X_is_refused_by_name(make):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (12, 2))
    X[:, 0] *= 1e300  # before: LocalSolveError (a RuntimeError) from the QP solver
    with pytest.raises(ValueError, match="X is out of range"):
        make().fit(X, np.arange(12) % 2, groups=np.repeat([0, 1], 6))
