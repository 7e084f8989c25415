"""skfed: personalized federated learning estimators with the scikit-learn API.

Every estimator is fitted with ``fit(X, y, groups=client_labels)``: the rows of
each client stay with that client, and training runs as rounds of client and
server steps (:mod:`skfed.federated`).

``import skfed`` is light: the estimators and the subpackages are imported on
first use (``skfed.PFedHGPRegressor``, ``from skfed import PFedHGPRegressor``,
``skfed.datasets``), each with only what it needs.
"""

from ._lazy import attach

__version__ = "0.1.0.dev0"

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".baselines._local": ["LocalEstimator", "PooledEstimator"],
        ".gaussian_process._pfedhgp": ["PFedHGPRegressor"],
        ".linear_model._dp_fed_dro": ["DPFedDROClassifier"],
        ".tensor._pftr": ["PersonalizedTensorRegressor"],
    },
    submodules=["base", "baselines", "benchmark", "datasets", "federated", "gaussian_process",
                "linear_model", "metrics", "model_selection", "preprocessing", "privacy",
                "tensor", "utils"],
)
__all__ += ["__version__"]
