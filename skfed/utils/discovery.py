"""Find every public skfed estimator (for the common tests and the docs)."""

import inspect
import pkgutil
from importlib import import_module

from sklearn.base import BaseEstimator

__all__ = ["all_estimators", "construct_instances"]

_SKIP_MODULES = ("tests", "benchmark", "_cli", "__main__", "federated.flower")


def all_estimators():
    """Return ``(name, class)`` of every public estimator in skfed, sorted by name.

    Returns
    -------
    estimators : list of tuple
        Pairs of class name and class, for every public non-abstract subclass
        of :class:`sklearn.base.BaseEstimator` defined in skfed.

    Examples
    --------
    >>> from skfed.utils.discovery import all_estimators
    >>> "LocalEstimator" in dict(all_estimators())
    True
    """
    import skfed

    found = {}
    for info in pkgutil.walk_packages(skfed.__path__, prefix="skfed."):
        if any(part in info.name for part in _SKIP_MODULES):
            continue
        module = import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, BaseEstimator)
                and cls.__module__.startswith("skfed.")
                and not name.startswith("_")
                and not inspect.isabstract(cls)
            ):
                found[name] = cls
    return sorted(found.items())


def construct_instances(cls):
    """Instances of ``cls`` to run the common checks on.

    Meta-estimators that need an ``estimator`` are built around both a
    regressor and a classifier; other estimators with their defaults (and the
    extra settings they declare in ``_test_instances``).

    Parameters
    ----------
    cls : type
        An estimator class.

    Returns
    -------
    instances : list of estimator
    """
    if hasattr(cls, "_test_instances"):
        return list(cls._test_instances())
    return [cls()]
