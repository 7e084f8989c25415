"""Privacy-aware transformers."""

from ._norm import NormClipper, make_minmax_l2_pipeline

__all__ = ["NormClipper", "make_minmax_l2_pipeline"]
