"""Every estimator with ``_parameter_constraints`` declares all its parameters and
refuses each invalid value with scikit-learn's ``InvalidParameterError`` naming it."""

import warnings

import pytest
from sklearn.utils.estimator_checks import check_param_validation

import skfed

ESTIMATORS = [
    getattr(module, name)
    for module in (skfed.gaussian_process, skfed.linear_model, skfed.tensor, skfed.baselines)
    for name in module.__all__
    if hasattr(getattr(module, name), "_parameter_constraints")
]


def test_every_federated_estimator_declares_constraints():
    names = {cls.__name__ for cls in ESTIMATORS}
    for module in (skfed.gaussian_process, skfed.linear_model, skfed.tensor, skfed.baselines):
        for name in module.__all__:
            if hasattr(getattr(module, name), "_federated_algorithm"):
                assert name in names


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_param_validation(cls):
    est = cls._test_instances()[0] if hasattr(cls, "_test_instances") else cls()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_param_validation(cls.__name__, est)


@pytest.mark.parametrize("cls", [c for c in ESTIMATORS if "n_jobs" in c._parameter_constraints],
                         ids=lambda c: c.__name__)
def test_n_jobs_zero_is_refused_by_the_constraints(cls):
    # before: admitted, then joblib's "n_jobs == 0 in Parallel has no meaning" inside fit
    from sklearn.utils._param_validation import InvalidParameterError

    est = cls._test_instances()[0] if hasattr(cls, "_test_instances") else cls()
    with pytest.raises(InvalidParameterError, match="n_jobs"):
        est.set_params(n_jobs=0)._validate_params()
    est.set_params(n_jobs=-1)._validate_params()
