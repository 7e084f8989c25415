"""Federated linear models: DP-Fed DRO and the baselines of its paper, the mixed model."""

from ._baselines import (
    CentralizedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedOvADROClassifier,
)
from ._dp_fed_dro import DPFedDROClassifier
from ._fed_mixedlm import FedMixedLMRegressor

__all__ = [
    "CentralizedDROClassifier",
    "DPFedDROClassifier",
    "DPFedERMClassifier",
    "DPFedSGDClassifier",
    "FedMixedLMRegressor",
    "FedOvADROClassifier",
]
