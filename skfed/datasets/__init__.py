"""Data generators that reproduce federated simulation settings."""

from ._regression import make_federated_regression
from ._tensor import make_tensor_image_regression, make_tensor_regression

__all__ = [
    "make_federated_regression",
    "make_tensor_image_regression",
    "make_tensor_regression",
]
