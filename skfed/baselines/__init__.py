"""Baselines with the skfed API, for drop-in benchmarking."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._fedavg": ["FedAvgRegressor"],
    "._local": ["LocalEstimator", "PooledEstimator"],
    "._mixedlm": ["MixedLMRegressor"],
})
