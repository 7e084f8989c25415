"""Federated linear classifiers: DP-Fed DRO and the baselines of its paper."""

from ._baselines import (
    CentralizedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedOvADROClassifier,
)
from ._dp_fed_dro import DPFedDROClassifier

__all__ = [
    "CentralizedDROClassifier",
    "DPFedDROClassifier",
    "DPFedERMClassifier",
    "DPFedSGDClassifier",
    "FedOvADROClassifier",
]
