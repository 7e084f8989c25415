"""One "no noise" rule for every private estimator: ``epsilon=None``, or its alias ``inf``.

Every estimator that takes ``epsilon`` reads it through
:func:`skfed.privacy.check_epsilon`: ``None`` and ``float("inf")`` give the
same (non-private) fitted model and the same ``privacy_spent_``; 0, negative,
NaN, ``-inf`` are a ``ValueError`` and non-numbers a ``TypeError``, both
naming ``epsilon``.
"""

import math

import numpy as np
import pytest
from sklearn.preprocessing import Normalizer

from skfed.datasets import make_tensor_regression
from skfed.linear_model import DPFedDROClassifier, DPFedERMClassifier, DPFedSGDClassifier
from skfed.privacy import check_epsilon, check_privacy_budget
from skfed.tensor import FedCommonTensorRegressor, PersonalizedTensorRegressor

LINEAR = {
    "DPFedDROClassifier": (DPFedDROClassifier, dict(n_rounds=3)),
    "DPFedERMClassifier": (DPFedERMClassifier, dict(n_rounds=3)),
    "DPFedSGDClassifier": (DPFedSGDClassifier, dict(n_rounds=3)),
}
TENSOR = {
    "PersonalizedTensorRegressor": (PersonalizedTensorRegressor,
                                    dict(tensor_shape=(4, 3), rank=(2, 2), n_rounds=3)),
    "FedCommonTensorRegressor": (FedCommonTensorRegressor,
                                 dict(tensor_shape=(4, 3), rank=(2, 2), n_rounds=3)),
}
ESTIMATORS = {**LINEAR, **TENSOR}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 90)
    # rows of norm 3: a private fit (norm_bound=1) would refuse them, a non-private one not
    X = 3 * Normalizer().fit_transform(np.eye(3, 4)[y] + 0.15 * rng.standard_normal((90, 4)))
    linear = (X, y, rng.integers(0, 3, 90))
    tensor = make_tensor_regression(n_clients=2, n_samples=40, tensor_shape=(4, 3),
                                    output_shape=None, rank=(2, 2), n_nonzero=2,
                                    random_state=0)
    return {name: linear if name in LINEAR else tensor for name in ESTIMATORS}


def _fit(name, data, **params):
    cls, kw = ESTIMATORS[name]
    X, y, groups = data[name]
    return cls(**kw, **params, random_state=0).fit(X, y, groups=groups)


def _fitted_arrays(model):
    return {k: v for k, v in vars(model).items()
            if k.endswith("_") and not k.startswith("_") and isinstance(v, np.ndarray)}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_infinite_epsilon_is_the_non_private_fit(name, data):
    a = _fit(name, data, epsilon=None)
    b = _fit(name, data, epsilon=float("inf"))
    arrays_a, arrays_b = _fitted_arrays(a), _fitted_arrays(b)
    assert arrays_a.keys() == arrays_b.keys() and arrays_a
    for key, value in arrays_a.items():
        np.testing.assert_array_equal(value, arrays_b[key], err_msg=key)
    assert a.privacy_spent_ == b.privacy_spent_
    # no guarantee is claimed, in the same report for every private estimator
    spent = b.privacy_spent_
    assert spent["epsilon"] == math.inf and spent["noise_multiplier"] == 0.0
    assert not spent["strict"] and spent["covers"].startswith("nothing")
    if name in LINEAR:
        assert b.privacy_unit_ is None
        assert b.noise_multiplier_ is None and b.epsilon_round_ is None
    else:
        assert spent["epsilon_rdp"] == math.inf
        np.testing.assert_array_equal(b.noise_std_, 0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), -math.inf])
def test_bad_epsilon_is_a_value_error_naming_epsilon(name, data, bad):
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0, or None"):
        _fit(name, data, epsilon=bad)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("bad", ["0.5", True, [0.5]])
def test_non_number_epsilon_is_a_type_error_naming_epsilon(name, data, bad):
    with pytest.raises(TypeError, match="epsilon must be a finite number > 0 or None"):
        _fit(name, data, epsilon=bad)


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_finite_epsilon_stays_private(name, data):
    # the rows of norm 3 exceed norm_bound=1: only the non-private fits accept them
    # as given (a private DP-Fed DRO fit scales them itself unless standardize=False)
    kw = {"standardize": False} if name == "DPFedDROClassifier" else {}
    with pytest.raises(ValueError, match="norm_bound"):
        _fit(name, data, epsilon=0.5, **kw)


def test_check_epsilon():
    assert check_epsilon(None) is None and check_epsilon(math.inf) is None
    assert check_epsilon(np.float64(0.5)) == 0.5 and type(check_epsilon(1)) is float
    with pytest.raises(ValueError, match="target_epsilon must be a finite number > 0, got inf"):
        check_epsilon(math.inf, name="target_epsilon", allow_none=False)
    with pytest.raises(TypeError, match="eps"):
        check_epsilon("1", name="eps")
    assert check_privacy_budget(math.inf, "ignored") == (None, None)
    with pytest.raises(ValueError, match="epsilon"):
        check_privacy_budget(np.nan, 1e-6)


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_infinite_target_epsilon_is_refused(name, data):
    # a total target has no "no noise" alias: target_epsilon=None (and epsilon=None) is
    with pytest.raises(ValueError, match="target_epsilon must be a finite number > 0"):
        _fit(name, data, target_epsilon=math.inf, target_delta=1e-6)
