"""Parameter constraints shared by the federated estimators.

The estimators declare ``_parameter_constraints`` in scikit-learn's language
(:mod:`sklearn.utils._param_validation`) and ``fit`` validates them once
(``skfed.base.checked_fit``). Two differences from scikit-learn's own
constraints: a number parameter refuses booleans (``n_rounds=True`` is a
mistake, not 1) and NaN; and the options every federated estimator shares
come in blocks, so they are written once.
"""

import numbers

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

__all__ = ["FEDERATION_CONSTRAINTS", "FEDERATION_DEFAULTS", "N_JOBS", "Number", "PRIVACY_CONSTRAINTS",
           "UNKNOWN_CLIENT", "positive_int", "positive_real", "nonnegative_real"]


class Number(Interval):
    """``Interval`` that refuses booleans (scikit-learn's counts ``True`` as 1)."""

    def is_satisfied_by(self, val):
        if isinstance(val, (bool, np.bool_)):
            return False
        return super().is_satisfied_by(val)


#: ``n_jobs`` as joblib reads it: ``None``, a positive count, or ``-1``, ``-2``, ... (all
#: cores, all but one, ...); 0 means nothing (joblib refuses it inside ``fit``)
N_JOBS = [Number(numbers.Integral, None, -1, closed="right"),
          Number(numbers.Integral, 1, None, closed="left"), None]


def positive_int(minimum=1):
    """An integer ``>= minimum`` (not a boolean)."""
    return Number(numbers.Integral, minimum, None, closed="left")


def positive_real(allow_inf=False):
    """A real number ``> 0``, finite unless ``allow_inf``."""
    return Number(numbers.Real, 0, None if allow_inf else np.inf, closed="neither")


def nonnegative_real():
    """A finite real number ``>= 0``."""
    return Number(numbers.Real, 0, np.inf, closed="left")


#: ``unknown_client``: what ``predict`` does with a client not seen in ``fit``.
UNKNOWN_CLIENT = {"unknown_client": [StrOptions({"global", "error"})]}

#: The options of the federated protocol (rounds, sampling, failures, randomness).
FEDERATION_CONSTRAINTS = {
    "n_rounds": [positive_int()],
    "client_fraction": [Number(numbers.Real, 0, 1, closed="right")],
    "on_client_error": [StrOptions({"raise", "skip"})],
    "random_state": ["random_state"],
    "n_jobs": N_JOBS,
    "verbose": ["verbose"],
    **UNKNOWN_CLIENT,
}

#: The defaults of those options but ``n_rounds`` (whose default is each estimator's), for
#: ``skfed.base.keyword_init``.
FEDERATION_DEFAULTS = dict(client_fraction=1.0, on_client_error="raise", unknown_client="global",
                           n_jobs=None, random_state=None, verbose=0)

#: The privacy budget ``(epsilon, delta)``; ``epsilon=None`` (or ``inf``) is no noise.
PRIVACY_CONSTRAINTS = {
    "epsilon": [Number(numbers.Real, 0, None, closed="neither"), None],
    "delta": [Number(numbers.Real, 0, 1, closed="neither")],
}
