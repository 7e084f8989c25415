"""Data generators that reproduce federated simulation settings, and real grouped data sets."""

from ._faults import dirichlet_client_split, flip_labels, make_correlated_faults, make_pump_faults
from ._gp import make_hierarchical_gp, make_monitoring_stations, make_press_tonnage
from ._multilevel import MULTILEVEL_DATASETS, load_multilevel
from ._regression import make_federated_regression
from ._tensor import make_tensor_image_regression, make_tensor_regression
from ._uci import available_uci, load_uci

__all__ = [
    "MULTILEVEL_DATASETS",
    "available_uci",
    "dirichlet_client_split",
    "flip_labels",
    "load_multilevel",
    "load_uci",
    "make_correlated_faults",
    "make_pump_faults",
    "make_federated_regression",
    "make_hierarchical_gp",
    "make_monitoring_stations",
    "make_press_tonnage",
    "make_tensor_image_regression",
    "make_tensor_regression",
]
