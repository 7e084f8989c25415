"""The Gaussian mechanism and the validation of privacy budgets."""

import math
import numbers

import numpy as np

__all__ = [
    "check_privacy_budget",
    "classical_gaussian_sigma",
    "gaussian_mechanism",
]


def check_privacy_budget(epsilon, delta, *, allow_none=True, eps_name="epsilon",
                         delta_name="delta"):
    """Validate an ``(epsilon, delta)`` budget and return it as floats.

    Parameters
    ----------
    epsilon : float or None
        Privacy loss; must be finite and > 0. ``None`` or ``inf`` means
        "no privacy" (no noise) when ``allow_none`` is true; both return
        ``None``.
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
    if epsilon is None or (isinstance(epsilon, numbers.Real) and math.isinf(epsilon)
                           and epsilon > 0):
        if not allow_none:
            raise ValueError(f"{eps_name} must be a finite number > 0, got {epsilon!r}.")
        return None, None
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not (
        math.isfinite(epsilon) and epsilon > 0
    ):
        raise ValueError(f"{eps_name} must be a finite number > 0 (or None), got {epsilon!r}.")
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
    if not (sensitivity >= 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}.")
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
        (:func:`skfed.federated.round_rng`) so runs are reproducible.

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
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}.")
    if sigma == 0:
        return value.copy()
    return value + sigma * rng.standard_normal(value.shape)
