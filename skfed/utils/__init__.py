"""Utilities: client-label validation and array checks."""

from ._validation import check_groups, check_params, label_kind, map_clients

__all__ = ["check_groups", "check_params", "label_kind", "map_clients"]
