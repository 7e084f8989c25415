"""Differential privacy: the Gaussian mechanism, calibration and accountants.

Generic pieces live here; each paper's own composition bound sits in a module
of its own beside them.
"""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._accounting": [
        "ACCOUNTANTS", "calibrate_noise_multiplier", "epsilon_spent", "gaussian_epsilon",
        "gaussian_event",
    ],
    "._dpfeddro_bound": ["dpfeddro_epsilon", "dpfeddro_per_round_epsilon", "split_round_budget"],
    "._mechanisms": [
        "check_epsilon", "check_privacy_budget", "classical_gaussian_sigma", "gaussian_mechanism",
        "gaussian_noise",
    ],
    "._pftr_bound": [
        "PFTR_ACCOUNTANTS", "pftr_noise_multiplier", "pftr_noise_std", "pftr_privacy_spent",
        "pftr_release_plan",
    ],
})
