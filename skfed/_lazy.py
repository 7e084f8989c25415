"""Lazy package attributes (PEP 562), as scipy and scikit-learn load theirs.

``import skfed`` imports none of its subpackages; ``skfed.PFedHGPRegressor``
(or ``from skfed import PFedHGPRegressor``) imports the module defining it,
and only that one, on first use. Pickled and skops-saved estimators are
unaffected: their classes keep their defining module (``__module__``).
"""

import importlib
import sys

__all__ = ["attach"]


def attach(package, attributes, submodules=()):
    """``__getattr__``, ``__dir__`` and ``__all__`` of a package that loads its contents lazily.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    attributes : dict
        Relative module name (``"._pfedhgp"`` or ``".gaussian_process"``) to
        the public names it defines; each is imported on first access.
    submodules : sequence of str, default=()
        Subpackages reachable as attributes (``skfed.datasets``), imported on
        first access.

    Returns
    -------
    __getattr__, __dir__ : callable
        The package's module-level hooks.
    __all__ : list of str
        The public names, sorted.
    """
    where = {name: module for module, names in attributes.items() for name in names}
    submodules = frozenset(submodules)

    def __getattr__(name):
        if name in where:
            value = getattr(importlib.import_module(where[name], package), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # once: later lookups skip this hook
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(where) | submodules)

    return __getattr__, __dir__, sorted(where)
