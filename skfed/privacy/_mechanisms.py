"""The Gaussian mechanism and the validation of privacy budgets."""

import math
import numbers

import numpy as np

__all__ = [
    "check_epsilon",
    "check_privacy_budget",
    "classical_gaussian_sigma",
    "gaussian_mechanism",
    "gaussian_noise",
]


class _ParameterTypeError(TypeError, ValueError):
    """A parameter of the wrong type; also a ValueError, like scikit-learn's
    ``InvalidParameterError``, so callers catching ValueError keep working."""


def _is_real(value):
    """Whether ``value`` is a real number (a 0-d real array too), not a boolean."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, numbers.Real) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf")


def _is_count(value):
    """Whether ``value`` is an integer (a Python or numpy one), not a boolean."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Integral)


def _check_real(value, name, *, positive=False, allow_inf=False):
    """Raise unless ``value`` is a real number ``>= 0`` (``> 0`` if ``positive``), finite
    unless ``allow_inf``; a non-number (a string, None, a bool) is a ``TypeError``.

    Returns ``value`` unchanged (results stay those of the value as given).
    """
    what = f"a {'' if allow_inf else 'finite '}number {'> 0' if positive else '>= 0'}"
    if not _is_real(value):
        raise _ParameterTypeError(
            f"{name} must be {what}, got {value!r} of type {type(value).__name__}.")
    if not ((value > 0 if positive else value >= 0) and (allow_inf or math.isfinite(value))):
        raise ValueError(f"{name} must be {what}, got {value!r}.")
    return value


def _check_count(value, name, minimum=1):
    """``value`` as an int if it is an integer ``>= minimum``, else raise.

    A number of releases (or of rows) is never rounded: ``2.5`` (and ``2.0``)
    or a boolean is a ``TypeError`` (also a ``ValueError``), as a string is;
    an integer below ``minimum`` a ``ValueError``. Numpy integers are accepted.
    """
    if not _is_count(value):
        raise _ParameterTypeError(
            f"{name} must be an integer >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _check_rng(rng):
    """Raise a ``TypeError`` unless ``rng`` is a numpy random generator."""
    if not isinstance(rng, (np.random.Generator, np.random.RandomState)):
        raise _ParameterTypeError(
            "rng must be a numpy.random.Generator (the per-client, per-round stream, e.g. "
            f"skfed.federated.round_rng), got {rng!r} of type {type(rng).__name__}.")
    return rng


def check_epsilon(epsilon, *, name="epsilon", allow_none=True):
    """Validate a privacy loss ``epsilon``: the one "no noise" rule of skfed.

    Every private estimator reads its ``epsilon`` through this function:
    ``None`` means a non-private fit (no noise, no guarantee) and
    ``float("inf")`` is accepted as an alias of ``None`` (an infinite budget
    calls for no noise), so the two give the same fitted model and the same
    ``privacy_spent_``. Anything else must be a finite real number > 0.

    Parameters
    ----------
    epsilon : float or None
        The value to check.
    name : str, default="epsilon"
        Parameter name used in error messages.
    allow_none : bool, default=True
        Whether "no privacy" (``None`` or ``inf``) is acceptable; when false
        (e.g. a total target budget or a mechanism's own budget) it is an
        error.

    Returns
    -------
    epsilon : float or None
        ``None`` for no privacy, else ``float(epsilon)``.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number (nor None), e.g. a string or a
        bool (the exception is also a ``ValueError``).
    ValueError
        If ``epsilon`` is 0, negative, NaN or ``-inf`` (or "no privacy" when
        ``allow_none`` is false).

    Examples
    --------
    >>> from skfed.privacy import check_epsilon
    >>> check_epsilon(0.5), check_epsilon(None), check_epsilon(float("inf"))
    (0.5, None, None)
    """
    if isinstance(epsilon, bool) or not (epsilon is None or isinstance(epsilon, numbers.Real)):
        raise _ParameterTypeError(
            f"{name} must be a finite number > 0 or None (no privacy), got {epsilon!r} "
            f"of type {type(epsilon).__name__}."
        )
    if epsilon is None or (math.isinf(epsilon) and epsilon > 0):
        if not allow_none:
            raise ValueError(
                f"{name} must be a finite number > 0, got {epsilon!r} (no privacy is not "
                f"accepted for {name})."
            )
        return None
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(
            f"{name} must be a finite number > 0, or None (or inf) for a non-private fit, "
            f"got {epsilon!r}."
        )
    return float(epsilon)


def check_privacy_budget(epsilon, delta, *, allow_none=True, eps_name="epsilon",
                         delta_name="delta"):
    """Validate an ``(epsilon, delta)`` budget and return it as floats.

    Parameters
    ----------
    epsilon : float or None
        Privacy loss; must be finite and > 0. ``None`` or ``inf`` means
        "no privacy" (no noise) when ``allow_none`` is true; both return
        ``None`` (see :func:`check_epsilon`).
    delta : float
        Failure probability, in (0, 1) (ignored when ``epsilon`` means no
        privacy).
    allow_none : bool, default=True
        Whether "no privacy" is acceptable.
    eps_name, delta_name : str
        Parameter names used in error messages.

    Returns
    -------
    epsilon, delta : float or None
        ``(None, None)`` for no privacy.

    Examples
    --------
    >>> from skfed.privacy import check_privacy_budget
    >>> check_privacy_budget(0.5, 1e-6)
    (0.5, 1e-06)
    >>> check_privacy_budget(None, 1e-6)
    (None, None)
    """
    epsilon = check_epsilon(epsilon, name=eps_name, allow_none=allow_none)
    if epsilon is None:
        return None, None
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"{delta_name} must be in the open interval (0, 1), got {delta!r}.")
    return float(epsilon), float(delta)


def classical_gaussian_sigma(epsilon, delta, sensitivity=1.0):
    """Noise standard deviation of the classical Gaussian mechanism.

    .. math:: \\sigma = \\Delta \\sqrt{2 \\ln(1.25 / \\delta)} / \\varepsilon

    (Dwork and Roth, 2014, Theorem A.1). The theorem is stated for
    ``epsilon < 1``; papers often use the formula beyond that range, so it is
    computed for any ``epsilon > 0``. For the tight value at any epsilon use
    :func:`dp_accounting.get_sigma_gaussian` (analytic Gaussian mechanism).

    Parameters
    ----------
    epsilon : float
        Privacy loss of one release, > 0.
    delta : float
        In (0, 1).
    sensitivity : float, default=1.0
        L2 sensitivity of the released quantity.

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> from skfed.privacy import classical_gaussian_sigma
    >>> round(classical_gaussian_sigma(1.0, 1e-5), 4)
    4.8448
    """
    epsilon, delta = check_privacy_budget(epsilon, delta, allow_none=False)
    _check_real(sensitivity, "sensitivity")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gaussian_mechanism(value, sigma, rng):
    """Release ``value + N(0, sigma^2 I)`` drawn from ``rng``.

    Parameters
    ----------
    value : array-like
        The quantity to privatize.
    sigma : float
        Noise standard deviation (0 returns a copy of ``value``).
    rng : numpy.random.Generator
        The random stream; pass a per-client, per-round stream
        (:func:`skfed.federated.round_rng`) so runs are reproducible. Not
        a seed (an int is a ``TypeError``); unused when ``sigma == 0``.

    Returns
    -------
    noisy : ndarray
        A new array of the shape of ``value``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.privacy import gaussian_mechanism
    >>> gaussian_mechanism(np.zeros(3), 0.0, np.random.default_rng(0)).tolist()
    [0.0, 0.0, 0.0]
    """
    value = np.asarray(value, dtype=float)
    noise = gaussian_noise(value.shape, sigma, rng)
    return value.copy() if noise is None else value + noise


def gaussian_noise(shape, sigma, rng):
    """The noise of the Gaussian mechanism: ``sigma * N(0, I)`` of ``shape``, from ``rng``.

    For releases whose noise is added inside a compiled kernel (e.g. in one
    pass with a projection): every private estimator draws its noise here,
    so the draw (one ``standard_normal`` call of ``shape``, C order) and the
    check of ``sigma`` are the same everywhere.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the released quantity.
    sigma : float
        Noise standard deviation, finite and >= 0.
    rng : numpy.random.Generator
        The random stream (a per-client, per-round stream; not a seed). Only
        used, and so only checked, when ``sigma > 0``.

    Returns
    -------
    noise : ndarray of shape ``shape`` or None
        ``None`` when ``sigma == 0`` (nothing is drawn, the stream is left
        untouched).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.privacy import gaussian_noise
    >>> gaussian_noise(3, 0.0, np.random.default_rng(0)) is None
    True
    >>> gaussian_noise(3, 2.0, np.random.default_rng(0)).shape
    (3,)
    """
    _check_real(sigma, "sigma")
    if sigma == 0:
        return None
    return sigma * _check_rng(rng).standard_normal(shape)
