"""Thin wrappers over dp-accounting's RDP and PLD accountants.

The event an estimator composes is built from the mechanism it actually ran
(noise multiplier, number of releases, sampling), so the reported epsilon is
the epsilon of what was released.
"""

import logging
import math

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from ._mechanisms import check_privacy_budget

__all__ = [
    "ACCOUNTANTS",
    "gaussian_event",
    "epsilon_spent",
    "calibrate_noise_multiplier",
]

ACCOUNTANTS = ("rdp", "pld")
_RELATIONS = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}

# RDP logs harmless convergence warnings for fractional orders of subsampled events
logging.getLogger("absl").setLevel(logging.ERROR)


def _check_accountant(accountant):
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}.")


def _make(accountant, neighboring_relation):
    _check_accountant(accountant)
    if neighboring_relation not in _RELATIONS:
        raise ValueError(
            f"neighboring_relation must be one of {tuple(_RELATIONS)}, "
            f"got {neighboring_relation!r}."
        )
    relation = _RELATIONS[neighboring_relation]
    if accountant == "rdp":
        return RdpAccountant(neighboring_relation=relation)
    return PLDAccountant(neighboring_relation=relation)


def gaussian_event(noise_multiplier, count=1, sampling_probability=1.0):
    """The dp-accounting event of ``count`` Gaussian releases.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity (> 0).
    count : int, default=1
        Number of releases (rounds) composed.
    sampling_probability : float, default=1.0
        Poisson sampling probability of the privacy unit per release (1: no
        amplification by sampling).

    Returns
    -------
    event : dp_accounting.DpEvent

    Examples
    --------
    >>> from skfed.privacy import gaussian_event
    >>> gaussian_event(1.0, count=3)
    SelfComposedDpEvent(event=GaussianDpEvent(noise_multiplier=1.0), count=3)
    """
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"noise_multiplier must be finite and > 0, got {noise_multiplier!r}.")
    if not 0 < sampling_probability <= 1:
        raise ValueError(
            f"sampling_probability must be in (0, 1], got {sampling_probability!r}."
        )
    event = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling_probability < 1:
        event = dp_accounting.PoissonSampledDpEvent(sampling_probability, event)
    return dp_accounting.SelfComposedDpEvent(event, int(count))


def epsilon_spent(event, delta, accountant="rdp", neighboring_relation="add_or_remove_one"):
    """Epsilon of ``event`` at ``delta`` by dp-accounting's RDP or PLD accountant.

    Parameters
    ----------
    event : dp_accounting.DpEvent
        What was released (e.g. from :func:`gaussian_event`).
    delta : float
        Target delta, in (0, 1).
    accountant : {"rdp", "pld"}, default="rdp"
        RDP is fast and a valid upper bound; PLD is tight but takes seconds.
    neighboring_relation : {"add_or_remove_one", "replace_one"}
        Which datasets count as neighbours.

    Returns
    -------
    epsilon : float

    Examples
    --------
    >>> from skfed.privacy import epsilon_spent, gaussian_event
    >>> round(epsilon_spent(gaussian_event(1.0, count=100), 1e-5), 2)
    96.12
    """
    check_privacy_budget(1.0, delta)
    acc = _make(accountant, neighboring_relation)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def calibrate_noise_multiplier(target_epsilon, target_delta, count, sampling_probability=1.0,
                               accountant="rdp", neighboring_relation="add_or_remove_one"):
    """Smallest noise multiplier whose ``count`` releases cost ``target_epsilon``.

    A bisection by :func:`dp_accounting.calibrate_dp_mechanism`.

    Parameters
    ----------
    target_epsilon : float
        Total budget, > 0.
    target_delta : float
        In (0, 1).
    count : int
        Number of Gaussian releases composed.
    sampling_probability : float, default=1.0
        Poisson sampling probability per release.
    accountant : {"rdp", "pld"}, default="rdp"
        Accountant used for the calibration.
    neighboring_relation : {"add_or_remove_one", "replace_one"}
        Which datasets count as neighbours.

    Returns
    -------
    noise_multiplier : float

    Examples
    --------
    >>> from skfed.privacy import calibrate_noise_multiplier
    >>> round(calibrate_noise_multiplier(1.0, 1e-5, count=100), 1)
    40.5
    """
    target_epsilon, target_delta = check_privacy_budget(
        target_epsilon, target_delta, allow_none=False,
        eps_name="target_epsilon", delta_name="target_delta",
    )
    _make(accountant, neighboring_relation)  # validates both names
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: _make(accountant, neighboring_relation),
            # the bisection probes 0, where epsilon is infinite
            lambda z: gaussian_event(max(z, 1e-12), count, sampling_probability),
            target_epsilon,
            target_delta,
        )
    )
