"""Personalized federated hierarchical Gaussian processes (pFedHGP)."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._baselines": ["PFedGPRegressor"],
    "._classifier": ["PFedHGPClassifier"],
    "._clustering": ["client_dissimilarity", "cluster_clients"],
    "._pfedhgp": ["PFedHGPRegressor"],
})
