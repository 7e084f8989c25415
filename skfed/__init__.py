"""skfed: personalized federated learning estimators with the scikit-learn API.

Every estimator is fitted with ``fit(X, y, groups=client_labels)``: the rows of
each client stay with that client, and training runs as rounds of client and
server steps (:mod:`skfed.federated`).
"""

from .baselines import LocalEstimator, PooledEstimator
from .gaussian_process import PFedHGPRegressor
from .linear_model import DPFedDROClassifier
from .tensor import PersonalizedTensorRegressor

__version__ = "0.1.0.dev0"

__all__ = [
    "DPFedDROClassifier",
    "LocalEstimator",
    "PFedHGPRegressor",
    "PersonalizedTensorRegressor",
    "PooledEstimator",
    "__version__",
]
