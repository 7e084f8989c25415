"""Metrics and scorers for personalized federated models."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._regression": [
        "calibration_error", "covariance_error", "crps_gaussian", "gaussian_nll",
        "interval_coverage", "interval_width",
    ],
    "._scorer": ["PersonalizedScorer", "make_personalized_scorer"],
})
