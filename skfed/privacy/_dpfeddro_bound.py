"""The closed-form moments-accountant bound of DP-Fed DRO (its Theorem 2).

Each round of DP-Fed DRO releases two Gaussian mechanisms per client: the
noisy local model (budget ``epsilon_M``) and the noisy DRO variable (budget
``epsilon_lambda``), both with the classical calibration at the same
``delta``. Composing their log-moments over ``T`` rounds and minimising the
tail bound over the moment order gives

.. math::

    \\bar\\varepsilon = A + 2\\sqrt{A \\ln(1/\\bar\\delta)},\\qquad
    A = \\frac{T(\\varepsilon_M^2 + \\varepsilon_\\lambda^2)}{4\\ln(1.25/\\delta)}

(the paper writes the second term as
``sqrt(T (eps_M^2 + eps_l^2) ln(1/delta_bar) / ln(1.25/delta))``, the same
number). ``A`` is the zCDP parameter of the composition, so the bound is also
``rho + 2 sqrt(rho ln(1/delta_bar))`` with ``rho = (T/2) sum 1/z^2`` over the
noise multipliers ``z = sigma / sensitivity``.
"""

import math

from ._mechanisms import (
    _check_count, _check_real, _is_real, _ParameterTypeError, check_privacy_budget,
)

__all__ = [
    "dpfeddro_epsilon",
    "dpfeddro_per_round_epsilon",
    "split_round_budget",
]


def split_round_budget(epsilon, split=0.95):
    """Split a per-round budget as ``eps_M^2 = split eps^2``, ``eps_l^2 = (1-split) eps^2``.

    Parameters
    ----------
    epsilon : float
        Per-round (quadratic) budget, > 0 (``inf``, no privacy, splits into
        two infinite budgets).
    split : float in (0, 1), default=0.95
        Share of ``epsilon**2`` given to the local model (the paper's 0.95).

    Returns
    -------
    epsilon_M, epsilon_lambda : float

    Examples
    --------
    >>> from skfed.privacy import split_round_budget
    >>> [round(e, 4) for e in split_round_budget(0.5)]
    [0.4873, 0.1118]
    """
    _check_real(epsilon, "epsilon", positive=True, allow_inf=True)
    if not _is_real(split):
        raise _ParameterTypeError(
            f"budget_split must be a number in the open interval (0, 1), got {split!r} of "
            f"type {type(split).__name__}.")
    if not 0 < split < 1:
        raise ValueError(f"budget_split must be in the open interval (0, 1), got {split!r}.")
    return math.sqrt(split) * epsilon, math.sqrt(1.0 - split) * epsilon


def _zcdp(n_rounds, epsilons, delta):
    return n_rounds * sum(e * e for e in epsilons) / (4.0 * math.log(1.25 / delta))


def dpfeddro_epsilon(n_rounds, epsilon_M, epsilon_lambda, delta, delta_bar=None):
    """Total epsilon of ``n_rounds`` rounds of DP-Fed DRO (the paper's Theorem 2).

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``T``, >= 1.
    epsilon_M, epsilon_lambda : float
        Per-round budgets of the model release and of the DRO-variable release,
        >= 0 (``epsilon_lambda=0`` for an algorithm with one release per
        round).
    delta : float
        Per-round delta of both releases (classical Gaussian calibration).
    delta_bar : float or None, default=None
        Total delta; ``None`` uses ``delta`` as the paper does.

    Returns
    -------
    epsilon_bar : float

    Examples
    --------
    >>> from skfed.privacy import dpfeddro_epsilon, split_round_budget
    >>> round(dpfeddro_epsilon(50, *split_round_budget(0.5), 1e-6), 4)
    3.7299
    >>> round(dpfeddro_epsilon(120, *split_round_budget(0.2), 1e-8), 4)
    2.2421
    """
    delta_bar = delta if delta_bar is None else delta_bar
    check_privacy_budget(1.0, delta, allow_none=False)
    check_privacy_budget(1.0, delta_bar, allow_none=False, delta_name="delta_bar")
    _check_count(n_rounds, "n_rounds")
    _check_real(epsilon_M, "epsilon_M", allow_inf=True)
    _check_real(epsilon_lambda, "epsilon_lambda", allow_inf=True)
    a = _zcdp(n_rounds, (epsilon_M, epsilon_lambda), delta)
    return a + 2.0 * math.sqrt(a * math.log(1.0 / delta_bar))


def dpfeddro_per_round_epsilon(target_epsilon, n_rounds, delta, delta_bar=None):
    """Per-round (quadratic) epsilon whose ``n_rounds`` rounds cost ``target_epsilon``.

    The inverse of :func:`dpfeddro_epsilon`: with
    ``A* = (sqrt(ln(1/delta_bar) + eps_bar) - sqrt(ln(1/delta_bar)))^2`` the
    per-round budget is ``sqrt(4 ln(1.25/delta) A* / T)``; split it with
    :func:`split_round_budget`.

    Parameters
    ----------
    target_epsilon : float
        Total budget ``eps_bar`` (> 0).
    n_rounds : int
        Number of rounds ``T``, >= 1.
    delta : float
        Per-round delta.
    delta_bar : float or None, default=None
        Total delta; ``None`` uses ``delta``.

    Returns
    -------
    epsilon : float
        Per-round budget with ``eps_M^2 + eps_lambda^2 = epsilon^2``.

    Examples
    --------
    >>> from skfed.privacy import dpfeddro_per_round_epsilon
    >>> round(dpfeddro_per_round_epsilon(3.7299, 50, 1e-6), 4)
    0.5
    """
    delta_bar = delta if delta_bar is None else delta_bar
    target_epsilon, _ = check_privacy_budget(
        target_epsilon, delta_bar, allow_none=False, eps_name="target_epsilon",
        delta_name="target_delta",
    )
    check_privacy_budget(1.0, delta, allow_none=False)
    _check_count(n_rounds, "n_rounds")
    log_inv = math.log(1.0 / delta_bar)
    a_star = (math.sqrt(log_inv + target_epsilon) - math.sqrt(log_inv)) ** 2
    return math.sqrt(4.0 * math.log(1.25 / delta) * a_star / n_rounds)
