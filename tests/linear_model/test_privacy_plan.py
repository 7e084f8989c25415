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
