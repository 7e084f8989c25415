"""scikit-learn's common estimator checks over every public skfed estimator.

New estimators join by appearing in :func:`skfed.utils.discovery.all_estimators`;
meta-estimators are instantiated from ``_INSTANCES``. Expected failures are
listed in ``EXPECTED_FAILED_CHECKS`` with their reason.
"""

from sklearn.utils.estimator_checks import parametrize_with_checks

from skfed.utils.discovery import all_estimators, construct_instances

# estimator class name -> {check name: reason}; empty means every check passes
EXPECTED_FAILED_CHECKS = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


ESTIMATORS = [inst for _, cls in all_estimators() for inst in construct_instances(cls)]


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_every_public_estimator_is_checked():
    names = {type(e).__name__ for e in ESTIMATORS}
    assert {"LocalEstimator", "PooledEstimator"} <= names
