"""Differential privacy: the Gaussian mechanism, calibration and accountants.

Generic pieces live here; each paper's own composition bound sits in a module
of its own beside them.
"""

from ._accounting import (
    ACCOUNTANTS, calibrate_noise_multiplier, epsilon_spent, gaussian_epsilon, gaussian_event,
)
from ._dpfeddro_bound import dpfeddro_epsilon, dpfeddro_per_round_epsilon, split_round_budget
from ._mechanisms import (
    check_epsilon, check_privacy_budget, classical_gaussian_sigma, gaussian_mechanism,
    gaussian_noise,
)
from ._pftr_bound import (
    PFTR_ACCOUNTANTS,
    pftr_noise_multiplier,
    pftr_noise_std,
    pftr_privacy_spent,
)

__all__ = [
    "ACCOUNTANTS",
    "PFTR_ACCOUNTANTS",
    "calibrate_noise_multiplier",
    "check_epsilon",
    "check_privacy_budget",
    "classical_gaussian_sigma",
    "dpfeddro_epsilon",
    "dpfeddro_per_round_epsilon",
    "epsilon_spent",
    "gaussian_epsilon",
    "gaussian_event",
    "gaussian_mechanism",
    "gaussian_noise",
    "pftr_noise_multiplier",
    "pftr_noise_std",
    "pftr_privacy_spent",
    "split_round_budget",
]
