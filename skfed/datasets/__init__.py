"""Data generators that reproduce federated simulation settings."""

from ._regression import make_federated_regression

__all__ = ["make_federated_regression"]
