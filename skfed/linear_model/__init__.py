"""Federated linear models: DP-Fed DRO and the baselines of its paper, the mixed model."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._baselines": [
        "CentralizedDROClassifier", "DPFedERMClassifier", "DPFedSGDClassifier",
        "FedOvADROClassifier",
    ],
    "._dp_fed_dro": ["DPFedDROClassifier"],
    "._fed_mixedlm": ["FedMixedLMRegressor"],
})
