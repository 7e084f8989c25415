"""One ``fit`` of an estimator checks its parameters once and splits ``groups`` once.

Every estimator whose ``fit`` takes ``groups`` (``FederatedEstimatorMixin``): the
federated ones, whose ``fit`` is ``FederatedEstimator``'s, and the others
(``LocalEstimator``, ``PooledEstimator``, the mixed-model anchors,
``CentralizedDROClassifier``). Scikit-learn's constraints are checked once where
the estimator declares them, its own ``_check_params`` once.
"""

import contextlib
import sys
import warnings
from unittest import mock

import numpy as np
import pytest
from sklearn.base import is_classifier

import skfed.utils._validation as validation
from skfed.base import FederatedEstimatorMixin
from skfed.utils.discovery import all_estimators, construct_instances

INSTANCES = [
    pytest.param(est, id=f"{name}-{i}")
    for name, cls in all_estimators() if issubclass(cls, FederatedEstimatorMixin)
    for i, est in enumerate(construct_instances(cls))
]

def _data(estimator):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 4))
    groups = np.repeat(["a", "b", "c"], 30)
    if is_classifier(estimator):
        return X, (X[:, 0] > 0).astype(int), groups
    return X, X @ [1.0, -0.5, 0.2, 0.0] + 0.1 * rng.normal(size=90), groups


@pytest.mark.parametrize("estimator", INSTANCES)
def test_one_fit_checks_parameters_once_and_splits_groups_once(estimator):
    cls = type(estimator)
    splits = []
    original = validation.check_groups

    def counted(groups, n_samples):
        if not isinstance(groups, validation.ClientSplit):  # a split passed on is not split again
            splits.append(1)
        return original(groups, n_samples)

    X, y, groups = _data(estimator)
    with contextlib.ExitStack() as stack:
        # every skfed module that bound check_groups by name splits through its own reference;
        # not the splitters of skfed.model_selection, which an anchor's inner cross-validation
        # calls on the client indices of the one split (a fold of rows, not groups again)
        for module in [m for n, m in list(sys.modules.items())
                       if n.startswith("skfed") and not n.startswith("skfed.model_selection")
                       and getattr(m, "check_groups", None) is original]:
            stack.enter_context(mock.patch.object(module, "check_groups", counted))
        constraints = stack.enter_context(mock.patch.object(
            cls, "_validate_params", autospec=True, side_effect=cls._validate_params))
        joint = stack.enter_context(mock.patch.object(
            cls, "_check_params", autospec=True, side_effect=cls._check_params))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        estimator.fit(X, y, groups=groups)
    assert constraints.call_count == (1 if hasattr(cls, "_parameter_constraints") else 0)
    assert joint.call_count == 1
    assert len(splits) == 1
