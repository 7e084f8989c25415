"""Cross-validation splitters for federated data."""

from ._split import WithinClientKFold

__all__ = ["WithinClientKFold"]
