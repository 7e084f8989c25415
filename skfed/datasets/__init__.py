"""Data generators that reproduce federated simulation settings, and real grouped data sets."""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._faults": [
        "dirichlet_client_split", "flip_labels", "make_correlated_faults", "make_pump_faults",
    ],
    "._gp": ["make_hierarchical_gp", "make_monitoring_stations", "make_press_tonnage"],
    "._multilevel": ["MULTILEVEL_DATASETS", "load_multilevel"],
    "._regression": ["make_federated_regression"],
    "._tensor": ["make_tensor_image_regression", "make_tensor_regression"],
    "._uci": ["available_uci", "load_uci"],
})
