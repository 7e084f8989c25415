"""Personalized federated tensor regression (shared low-Tucker-rank + sparse deviations).

:class:`PersonalizedTensorRegressor` implements Chen, Wei and Zhu,
"Personalized Federated Learning for Tensor Regression": a differentially
private federated Stage I for the shared tensor and a local lasso Stage II for
each client's deviation. The Tucker machinery (retraction, tangent-space
projection) and the rank criterion are exposed as functions.
"""

from ._baselines import (
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    TensorlyTuckerRegressor,
)
from ._pftr import PersonalizedTensorRegressor
from ._rank import ratio_rank, vote_ranks
from ._tucker import check_tucker_rank, retract, st_hosvd, t_hosvd, tangent_project

__all__ = [
    "FedAvgTensorRegressor",
    "FedCommonTensorRegressor",
    "LocalTwoStageTensorRegressor",
    "PersonalizedTensorRegressor",
    "TensorlyTuckerRegressor",
    "check_tucker_rank",
    "ratio_rank",
    "retract",
    "st_hosvd",
    "t_hosvd",
    "tangent_project",
    "vote_ranks",
]
