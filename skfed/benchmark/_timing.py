"""Fit times without compilation: one untimed warm-up run per configuration and process."""

import time

__all__ = ["timed"]

# estimator configurations (repr: class and non-default parameters) already run in this
# process: their numba kernels are compiled (or loaded from the cache) by now
_WARM = set()


def timed(model, run):
    """Seconds ``run()`` takes, after one untimed ``run()`` for an unseen configuration.

    The first fit of an estimator in a process compiles its numba kernels (a
    minute on a fresh install), which is not what a fit-time column should
    report; so the first call per configuration of ``model`` runs ``run``
    once untimed, then times a second run (a refit: ``run`` must be
    repeatable, e.g. ``lambda: model.fit(X, y, groups=groups)``).

    Returns
    -------
    seconds : float
    result : object
        What the timed ``run()`` returned.
    """
    key = repr(model)
    if key not in _WARM:
        run()
        _WARM.add(key)
    tic = time.perf_counter()
    result = run()
    return time.perf_counter() - tic, result
