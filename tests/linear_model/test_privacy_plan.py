"""The privacy-plan helpers of the linear classifiers (skfed.linear_model._privacy_plan)."""

import math

import pytest

from skfed.linear_model import DPFedDROClassifier
from skfed.linear_model._privacy_plan import PRIVACY_ACCOUNTANTS, classical_multiplier


def test_accountants_are_the_paper_bound_and_dp_accountings():
    assert PRIVACY_ACCOUNTANTS == ("paper", "rdp", "pld")


@pytest.mark.parametrize("epsilon, delta", [(0.5, 1e-6), (0.2, 1e-8), (3.0, 0.1), (1e-3, 1e-5)])
def test_classical_multiplier_is_the_classical_formula_to_the_bit(epsilon, delta):
    # pinned fits depend on the exact value, not only on a close one
    assert classical_multiplier(epsilon, delta) == math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def test_unknown_accountant_is_refused_naming_the_choices():
    clf = DPFedDROClassifier(epsilon=0.5, accountant="moments")
    with pytest.raises(ValueError, match=r"accountant must be one of \('paper', 'rdp', 'pld'\)"):
        clf._privacy_plan()


@pytest.mark.parametrize("params", [
    dict(epsilon=0.5), dict(epsilon=2.0, accountant="rdp"), dict(epsilon=1.0, accountant="paper"),
    dict(epsilon=0.5, n_rounds=7, standardize=False),
])
def test_privacy_claim_is_the_reports_total_and_least_multiplier(params):
    # a site checks the claim against its limits: it must be what privacy_spent_ reports,
    # computed without the report's per-release compositions
    from skfed.linear_model._privacy_plan import privacy_report

    clf = DPFedDROClassifier(**params)
    clf._check_params()
    report = privacy_report(int(clf.n_rounds), clf._plan, clf.accountant)
    assert clf._privacy_claim() == {
        "epsilon": report["epsilon"], "delta": report["delta"],
        "noise_multiplier": min(r["noise_multiplier"] for r in report["releases"])}


def test_privacy_claim_of_a_fit_without_noise_is_none():
    clf = DPFedDROClassifier(epsilon=None)
    clf._check_params()
    assert clf._privacy_claim() is None
