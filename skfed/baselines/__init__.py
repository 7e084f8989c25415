"""Baselines with the skfed API, for drop-in benchmarking."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._fedavg": ["FedAvgRegressor"],
    "._gpboost": ["GPBoostRegressor"],
    "._local": ["LocalEstimator", "PooledEstimator"],
    "._merf": ["MERFRegressor"],
    "._mixedlm": ["MixedLMRegressor"],
})
