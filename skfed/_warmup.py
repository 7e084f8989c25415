"""Compile the numba kernels of the headline estimators' default fits ahead of use.

``skfed warmup`` (``python -m skfed warmup``) fits each estimator at its defaults on
small generated data and predicts, so that numba compiles and caches the kernels a
default fit and prediction use (installers, CI images). Nothing needs it: a first
fit compiles what it uses anyway, once per install (``benchmarks/speed/cold_start.py``
measures that first fit on the same problems).
"""

import time
import warnings

__all__ = ["CASES", "problem", "warmup"]

#: the warm-up problems: estimator and data (``skfed.datasets`` generators)
CASES = {
    "pfedhgp": "PFedHGPRegressor() on make_hierarchical_gp() (6 sites x 50 rows, 4 outputs)",
    "pfedhgp-scalar": "PFedHGPRegressor() on make_hierarchical_gp(n_outputs=None)",
    "tensor": "PersonalizedTensorRegressor() on make_tensor_regression() (5 sites x 250 rows)",
    "dro": "DPFedDROClassifier(epsilon=None) on make_correlated_faults(n_train=(100, 30, 30, "
           "30)) (4 sites, 8 features)",
}


def problem(name):
    """``(make_estimator, X, y, groups)`` of the warm-up problem ``name`` (see ``CASES``)."""
    from . import datasets
    from .gaussian_process import PFedHGPRegressor
    from .linear_model import DPFedDROClassifier
    from .tensor import PersonalizedTensorRegressor

    if name in ("pfedhgp", "pfedhgp-scalar"):
        data = datasets.make_hierarchical_gp(
            **({"n_outputs": None} if name == "pfedhgp-scalar" else {}), random_state=0)
        return PFedHGPRegressor, data.X_train, data.y_train, data.groups_train
    if name == "tensor":
        X, y, groups = datasets.make_tensor_regression(random_state=0)
        return PersonalizedTensorRegressor, X, y, groups
    if name == "dro":
        X, y, groups, _, _ = datasets.make_correlated_faults(n_train=(100, 30, 30, 30),
                                                             random_state=0)
        return (lambda: DPFedDROClassifier(epsilon=None)), X, y, groups
    raise ValueError(f"unknown warm-up problem {name!r}; known: {', '.join(CASES)}")


def warmup(names=None, out=print):
    """Fit and predict every warm-up problem in ``names`` (default: all); return seconds."""
    seconds = {}
    for name in names or CASES:
        make, X, y, groups = problem(name)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make().fit(X, y, groups=groups)
            model.predict(X[:5], groups=groups[:5])
        seconds[name] = time.perf_counter() - start
        if out is not None:
            out(f"{name:16s} {seconds[name]:6.1f} s  {CASES[name]}")
    return seconds
