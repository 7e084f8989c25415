"""Thin wrappers over dp-accounting's RDP and PLD accountants.

The event an estimator composes is built from the mechanism it actually ran
(noise multiplier, number of releases, sampling), so the reported epsilon is
the epsilon of what was released.
"""

import functools
import logging
import math

import numpy as np
from scipy.optimize import brentq

from ._mechanisms import (
    _check_count, _check_real, _is_real, _ParameterTypeError, check_privacy_budget,
)

__all__ = [
    "ACCOUNTANTS",
    "gaussian_event",
    "epsilon_spent",
    "calibrate_noise_multiplier",
    "gaussian_epsilon",
]

ACCOUNTANTS = ("rdp", "pld")
_RELATIONS = ("add_or_remove_one", "replace_one")  # dp_accounting.NeighboringRelation's


@functools.cache
def dp():
    """The ``dp_accounting`` package, imported on first use (about 0.3 s, with absl)."""
    import dp_accounting
    import dp_accounting.pld
    import dp_accounting.rdp

    # RDP logs harmless convergence warnings for fractional orders of subsampled events
    logging.getLogger("absl").setLevel(logging.ERROR)
    return dp_accounting


def _check_accountant(accountant):
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}.")


def _make(accountant, neighboring_relation, value_discretization_interval=None):
    _check_accountant(accountant)
    if neighboring_relation not in _RELATIONS:
        raise ValueError(
            f"neighboring_relation must be one of {tuple(_RELATIONS)}, "
            f"got {neighboring_relation!r}."
        )
    relation = getattr(dp().NeighboringRelation, neighboring_relation.upper())
    if accountant == "rdp":
        return dp().rdp.RdpAccountant(neighboring_relation=relation)
    if value_discretization_interval is None:
        return dp().pld.PLDAccountant(neighboring_relation=relation)
    return dp().pld.PLDAccountant(neighboring_relation=relation,
                         value_discretization_interval=value_discretization_interval)


def gaussian_event(noise_multiplier, count=1, sampling_probability=1.0):
    """The dp-accounting event of ``count`` Gaussian releases.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity (> 0).
    count : int, default=1
        Number of releases (rounds) composed, >= 1 (an integer: 2.5 is an
        error, not 2 releases).
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
    _check_real(noise_multiplier, "noise_multiplier", positive=True)
    _check_count(count, "count")
    if not _is_real(sampling_probability):
        raise _ParameterTypeError(
            f"sampling_probability must be a number in (0, 1], got {sampling_probability!r} "
            f"of type {type(sampling_probability).__name__}.")
    if not 0 < sampling_probability <= 1:
        raise ValueError(
            f"sampling_probability must be in (0, 1], got {sampling_probability!r}."
        )
    event = dp().GaussianDpEvent(noise_multiplier)
    if sampling_probability < 1:
        event = dp().PoissonSampledDpEvent(sampling_probability, event)
    return dp().SelfComposedDpEvent(event, int(count))


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


# absolute tolerance of the root search of the analytic Gaussian mechanism's epsilon
_EXACT_TOL = 1e-12


def gaussian_epsilon(noise_multipliers, delta, counts=None):
    """Exact epsilon at ``delta`` of a composition of Gaussian mechanisms.

    Releases of noise multipliers ``z_i`` (noise standard deviation over L2
    sensitivity), composed, are exactly one Gaussian mechanism of multiplier
    ``(sum_i z_i^-2)^-1/2`` (Dong, Roth and Su, "Gaussian differential
    privacy", Cor. 3.3); its epsilon is that of the analytic Gaussian
    mechanism (Balle and Wang, 2018), by
    :func:`dp_accounting.get_epsilon_gaussian`. No accountant is tighter: this
    is what dp-accounting's PLD accountant converges to as its grid is
    refined. The value is rounded up by the root search's tolerance
    (``1e-12``), so it is never below the true epsilon.

    Parameters
    ----------
    noise_multipliers : float or array-like of float
        Multiplier of each release (or of each group of releases), > 0.
    delta : float
        In (0, 1).
    counts : int or array-like of int or None, default=None
        Number of releases at each multiplier (``None``: one each).

    Returns
    -------
    epsilon : float

    Examples
    --------
    >>> from skfed.privacy import gaussian_epsilon
    >>> round(gaussian_epsilon(0.4845, 1e-5), 2)
    10.39
    >>> gaussian_epsilon(2.0, 1e-5, counts=4) == gaussian_epsilon(1.0, 1e-5)
    True
    """
    check_privacy_budget(1.0, delta)
    try:
        z = np.asarray(noise_multipliers, dtype=float).ravel()
    except (TypeError, ValueError):
        raise _ParameterTypeError(
            f"noise_multipliers must be finite numbers > 0, got {noise_multipliers!r}."
        ) from None
    if z.size == 0 or not np.all((z > 0) & np.isfinite(z)):
        raise ValueError(
            f"noise_multipliers must be finite and > 0, got {noise_multipliers!r}.")
    if counts is None:
        n = np.ones(z.size)
    else:
        try:
            n = np.asarray(counts, dtype=float).ravel()
        except (TypeError, ValueError):
            raise _ParameterTypeError(
                f"counts must be integers >= 0, got {counts!r}.") from None
        if n.size not in (1, z.size):
            raise ValueError(
                f"counts must be one count or one per noise multiplier ({z.size}), got "
                f"{n.size}: {counts!r}.")
        n = np.broadcast_to(n, z.shape)
    if not np.all((n >= 0) & (n == np.round(n))):
        raise ValueError(f"counts must be integers >= 0, got {counts!r}.")
    precision = float(np.sum(n / z ** 2))
    if precision == 0.0:  # nothing released
        return 0.0
    eps = float(dp().get_epsilon_gaussian(1.0 / math.sqrt(precision), delta, tol=_EXACT_TOL))
    # brentq's root is within xtol + 4 ulp-relative of the true one: round up past it
    return eps + _EXACT_TOL + 1e-15 * eps if eps > 0 else 0.0


# Calibration searches on log(noise multiplier) inside these bounds: below
# _Z_MIN the PLD grid of a Gaussian (privacy losses up to ~1/(2 z^2)) no longer
# fits in memory, above _Z_MAX the target is out of reach.
_Z_MIN, _Z_MAX = 1e-3, 1e7
# PLD grid of the search; coarser than the reporting accountant's 1e-4 (a
# pessimistic grid that divides into this one gives a smaller epsilon, so the
# search's epsilon is an upper bound of the reported one) and about 10x faster.
_SEARCH_INTERVAL = 1e-3
_RTOL = 1e-4  # relative gap between the target and the calibrated epsilon


class _Search:
    """``epsilon(z) - target`` on log z, remembering the smallest feasible z."""

    def __init__(self, make_event, target_epsilon, target_delta, make_accountant):
        self.make_event, self.make_accountant = make_event, make_accountant
        self.target, self.delta = target_epsilon, target_delta
        self.best = math.inf  # smallest z evaluated with epsilon <= target
        self.values = {}

    def epsilon(self, z):
        if z not in self.values:
            acc = self.make_accountant()
            acc.compose(self.make_event(z))
            self.values[z] = float(acc.get_epsilon(self.delta))
            if self.values[z] <= self.target:
                self.best = min(self.best, z)
        return self.values[z]

    def __call__(self, log_z):
        # finite for brentq: epsilon may be inf at a small multiplier
        return min(self.epsilon(math.exp(log_z)), 1e300) - self.target

    def bracket(self, z0, z_min, z_max, factor=2.0):
        """``(lo, hi)`` with epsilon(lo) > target >= epsilon(hi), stepping by ``factor``."""
        z0 = min(max(z0, z_min), z_max)
        if self.epsilon(z0) > self.target:
            lo, hi = z0, min(z0 * factor, z_max)
            while self.epsilon(hi) > self.target:
                if hi >= z_max:
                    raise ValueError(
                        f"target_epsilon={self.target} is out of reach: a noise multiplier "
                        f"of {z_max:g} still spends epsilon={self.epsilon(hi):.6g}."
                    )
                lo, hi = hi, min(hi * factor, z_max)
        else:
            lo, hi = max(z0 / factor, z_min), z0
            while self.epsilon(lo) <= self.target:
                if lo <= z_min:
                    raise ValueError(
                        f"target_epsilon={self.target} is too large to calibrate: a noise "
                        f"multiplier of {z_min:g} spends only epsilon="
                        f"{self.epsilon(lo):.6g}; lower target_epsilon."
                    )
                lo, hi = max(lo / factor, z_min), lo
        return lo, hi

    def solve(self, lo, hi):
        """Smallest feasible z evaluated by brentq on [lo, hi] (relative xtol 1e-7)."""
        if hi - lo > 1e-7 * hi:
            brentq(self, math.log(lo), math.log(hi), xtol=1e-7, rtol=1e-12)
        return self.best


def _zcdp_guess(target_epsilon, target_delta, count):
    """Multiplier of ``count`` Gaussian releases by the zCDP bound (an upper bound)."""
    log_inv = math.log(1.0 / target_delta)
    rho = (math.sqrt(log_inv + target_epsilon) - math.sqrt(log_inv)) ** 2
    return math.sqrt(count / (2.0 * rho))


def calibrate_noise_multiplier(target_epsilon, target_delta, count, sampling_probability=1.0,
                               accountant="rdp", neighboring_relation="add_or_remove_one",
                               *, make_event=None):
    """Smallest noise multiplier whose ``count`` releases cost at most ``target_epsilon``.

    A bracketed root search on the logarithm of the multiplier that only
    evaluates multipliers in ``[1e-3, 1e7]``. The RDP accountant is solved
    first (milliseconds, an upper bound on epsilon, so its multiplier is an
    upper bound for PLD); with ``accountant="pld"`` the search then brackets
    below it on a PLD grid of 1e-3 and checks the result once with the PLD
    accountant of :func:`epsilon_spent` (grid 1e-4), refining there only if
    the gap exceeds 1e-4 relative. The returned multiplier satisfies
    ``epsilon_spent(event, target_delta, accountant) <= target_epsilon``,
    within a relative 1e-4 of it.

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
    make_event : callable or None, default=None
        ``make_event(z)`` returns the :class:`dp_accounting.DpEvent` released
        with noise multiplier ``z`` (epsilon must decrease as ``z`` grows), for
        a mechanism other than ``count`` equal Gaussian releases, e.g. several
        releases per round whose multipliers are fixed multiples of ``z``.
        ``None``: ``gaussian_event(z, count, sampling_probability)``.

    Returns
    -------
    noise_multiplier : float

    Raises
    ------
    ValueError
        If the budget or a name is invalid, or if the target needs a
        multiplier outside ``[1e-3, 1e7]`` (message says which end).

    Examples
    --------
    >>> from skfed.privacy import calibrate_noise_multiplier
    >>> round(calibrate_noise_multiplier(1.0, 1e-5, count=100), 1)
    40.5
    >>> round(calibrate_noise_multiplier(1.0, 1e-5, count=100, accountant="pld"), 1)
    37.3
    """
    target_epsilon, target_delta = check_privacy_budget(
        target_epsilon, target_delta, allow_none=False,
        eps_name="target_epsilon", delta_name="target_delta",
    )
    _make(accountant, neighboring_relation)  # validates both names
    if make_event is None:
        _check_count(count, "count")
        gaussian_event(1.0, count, sampling_probability)  # validates sampling_probability

        def make_event(z):
            return gaussian_event(z, count, sampling_probability)

        z0 = _zcdp_guess(target_epsilon, target_delta, count)
    elif not callable(make_event):
        raise TypeError(f"make_event must be callable or None, got {make_event!r}.")
    else:
        z0 = 1.0

    rdp = _Search(make_event, target_epsilon, target_delta,
                  lambda: _make("rdp", neighboring_relation))
    z_rdp = rdp.solve(*rdp.bracket(z0, _Z_MIN, _Z_MAX))
    if accountant == "rdp":
        return float(z_rdp)

    # PLD: bracket below the RDP multiplier on the coarse grid
    coarse = _Search(make_event, target_epsilon, target_delta,
                     lambda: _make("pld", neighboring_relation, _SEARCH_INTERVAL))
    z_floor = max(z_rdp / 64.0, _Z_MIN)
    z = coarse.solve(*coarse.bracket(z_rdp, z_floor, _Z_MAX, factor=1.25))
    # check (and if needed refine) with the accountant that reports epsilon
    fine = _Search(make_event, target_epsilon, target_delta,
                   lambda: _make("pld", neighboring_relation))
    eps = fine.epsilon(z)
    if eps <= target_epsilon and target_epsilon - eps <= _RTOL * target_epsilon:
        return float(z)
    # epsilon moves about as fast as z in relative terms: step by twice the gap
    factor = 1.0 + 2.0 * abs(target_epsilon - eps) / target_epsilon + 1e-6
    return float(fine.solve(*fine.bracket(z, z_floor, _Z_MAX, factor)))
