"""Personalized federated tensor regression (shared low-Tucker-rank + sparse deviations).

:class:`PersonalizedTensorRegressor` implements Chen, Wei and Zhu,
"Personalized Federated Learning for Tensor Regression": a differentially
private federated Stage I for the shared tensor and a local lasso Stage II for
each client's deviation. The Tucker machinery (retraction, tangent-space
projection) and the rank criterion are exposed as functions.
"""

from .._lazy import attach

# loaded on first use: a name imports only the module defining it
__getattr__, __dir__, __all__ = attach(__name__, {
    "._baselines": [
        "FedAvgTensorRegressor", "FedCommonTensorRegressor", "LocalTwoStageTensorRegressor",
        "TensorlyTuckerRegressor",
    ],
    "._pftr": ["PersonalizedTensorRegressor"],
    "._rank": ["ratio_rank", "vote_ranks"],
    "._tucker": ["check_tucker_rank", "retract", "st_hosvd", "t_hosvd", "tangent_project"],
})
