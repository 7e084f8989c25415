"""Metrics and scorers for personalized federated models."""

from ._scorer import PersonalizedScorer, make_personalized_scorer

__all__ = ["PersonalizedScorer", "make_personalized_scorer"]
