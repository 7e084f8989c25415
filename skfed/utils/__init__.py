"""Utilities: client-label validation and array checks."""

from ._validation import check_groups, map_clients

__all__ = ["check_groups", "map_clients"]
