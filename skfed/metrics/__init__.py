"""Metrics and scorers for personalized federated models."""

from ._regression import (
    calibration_error,
    covariance_error,
    crps_gaussian,
    gaussian_nll,
    interval_coverage,
    interval_width,
)
from ._scorer import PersonalizedScorer, make_personalized_scorer

__all__ = [
    "PersonalizedScorer",
    "calibration_error",
    "covariance_error",
    "crps_gaussian",
    "gaussian_nll",
    "interval_coverage",
    "interval_width",
    "make_personalized_scorer",
]
