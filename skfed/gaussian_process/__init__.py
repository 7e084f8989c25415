"""Personalized federated hierarchical Gaussian processes (pFedHGP)."""

from ._baselines import PFedGPRegressor
from ._classifier import PFedHGPClassifier
from ._clustering import client_dissimilarity, cluster_clients
from ._pfedhgp import PFedHGPRegressor

__all__ = ["PFedGPRegressor", "PFedHGPClassifier", "PFedHGPRegressor", "client_dissimilarity",
           "cluster_clients"]
