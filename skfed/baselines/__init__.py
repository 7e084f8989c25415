"""Baselines with the skfed API, for drop-in benchmarking."""

from ._fedavg import FedAvgRegressor
from ._local import LocalEstimator, PooledEstimator
from ._mixedlm import MixedLMRegressor

__all__ = ["FedAvgRegressor", "LocalEstimator", "MixedLMRegressor", "PooledEstimator"]
