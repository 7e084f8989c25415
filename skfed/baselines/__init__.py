"""Baselines with the skfed API, for drop-in benchmarking."""

from ._local import LocalEstimator, PooledEstimator

__all__ = ["LocalEstimator", "PooledEstimator"]
