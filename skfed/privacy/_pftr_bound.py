"""The noise formula and composition of personalized federated tensor regression.

Chen, Wei and Zhu, "Personalized Federated Learning for Tensor Regression"
(Section 4.3): in each of ``T_g`` Stage-I rounds client ``k`` releases its
truncated gradient plus Gaussian noise of standard deviation

.. math:: \\sigma_k^{(t)} = \\frac{2\\tau_{E,k}^{(t)}\\tau_{X,k}}{n_k}
          \\frac{T_g\\sqrt{2\\log(1.25\\,T_g/\\delta)}}{\\varepsilon}.

Read as a classical Gaussian mechanism with L2 sensitivity
``2 tau_E tau_X / n_k`` (one pair replaced; loss scaled by ``1/(2 n_k)``) at
per-round budget ``(epsilon/T_g, delta/T_g)``, basic composition over the
``T_g`` rounds gives ``(epsilon, delta)`` per client. The ratio of sigma to
the sensitivity, the noise multiplier, is the same every round, so the
transcript is also a ``T_g``-fold Gaussian mechanism that dp-accounting's
RDP accountant can bound more tightly.

The classical calibration is proven only for a per-release ``epsilon / T_g
< 1``; beyond it the releases may spend more than ``epsilon`` (one release at
``epsilon = 10, delta = 1e-5`` spends 10.39). :func:`pftr_privacy_spent`
then reports the exact epsilon of the releases instead of the budget.

The multiplier can instead be calibrated by an accountant
(``accountant="rdp"`` or ``"pld"``): the smallest one whose ``T_g`` Gaussian
releases cost exactly ``(epsilon, delta)`` under it
(:func:`~skfed.privacy.calibrate_noise_multiplier`), less noise for the same
budget.
"""

import functools
import math

from ._accounting import (
    ACCOUNTANTS, _check_accountant, calibrate_noise_multiplier, epsilon_spent, gaussian_epsilon,
    gaussian_event,
)
from ._mechanisms import _check_count, _check_real, _is_count, _is_real, check_privacy_budget

__all__ = [
    "PFTR_ACCOUNTANTS", "pftr_noise_multiplier", "pftr_noise_std", "pftr_privacy_spent",
    "pftr_release_plan",
]

PFTR_ACCOUNTANTS = ("paper",) + ACCOUNTANTS


def check_accountant(accountant, name="accountant"):
    """``accountant`` if it is ``"paper"`` (the paper's own bound) or one of
    dp-accounting's :data:`ACCOUNTANTS`, else a ``ValueError`` naming ``name``.

    The ``accountant`` parameter of every private estimator
    (:data:`PFTR_ACCOUNTANTS`; DP-Fed DRO and its baselines take the same values).
    """
    if not isinstance(accountant, str) or accountant not in PFTR_ACCOUNTANTS:
        raise ValueError(
            f"{name} must be one of {PFTR_ACCOUNTANTS}, got {accountant!r}."
        )
    return accountant


@functools.lru_cache(maxsize=256)
def _calibrated(epsilon, delta, n_rounds, accountant):
    # cached: every client step of a fit asks for the same multiplier, and a PLD
    # calibration takes a fraction of a second
    try:
        return calibrate_noise_multiplier(epsilon, delta, count=n_rounds,
                                          accountant=accountant)
    except ValueError as exc:
        raise ValueError(
            f"epsilon={epsilon!r}, delta={delta!r} cannot be calibrated over {n_rounds} "
            f"releases with accountant={accountant!r}: {exc}"
        ) from exc


def pftr_noise_multiplier(epsilon, delta, n_rounds, accountant="paper"):
    """Noise standard deviation over L2 sensitivity of each of ``n_rounds`` releases.

    ``accountant="paper"``: the paper's ``T_g sqrt(2 log(1.25 T_g/delta)) /
    epsilon`` (basic composition of classical Gaussian mechanisms).
    ``"rdp"``/``"pld"``: the smallest multiplier whose ``n_rounds`` Gaussian
    releases spend at most ``epsilon`` at ``delta`` under dp-accounting's RDP
    or PLD accountant (within a relative 1e-4 of it).
    ``epsilon=None`` or ``inf`` (no privacy) gives 0. ``n_rounds`` is an
    integer >= 1 (a fractional count of releases is an error).

    Examples
    --------
    >>> from skfed.privacy import pftr_noise_multiplier
    >>> round(pftr_noise_multiplier(20.0, 0.1, 20), 4)
    3.3231
    >>> round(pftr_noise_multiplier(20.0, 0.1, 20, accountant="rdp"), 2)
    0.93
    """
    check_accountant(accountant)
    epsilon, delta = check_privacy_budget(epsilon, delta)
    _check_count(n_rounds, "n_rounds")
    if epsilon is None:
        return 0.0
    if accountant != "paper":
        return _calibrated(float(epsilon), float(delta), int(n_rounds), accountant)
    return n_rounds * math.sqrt(2.0 * math.log(1.25 * n_rounds / delta)) / epsilon


def _check_groups(groups):
    """``groups`` as a tuple of ``(count, share)``: counts >= 1, shares in (0, 1] summing to 1."""
    try:
        pairs = tuple((c, s) for c, s in groups)
    except (TypeError, ValueError):
        raise ValueError(f"groups must be pairs (count, share), got {groups!r}.") from None
    if not all(_is_count(c) and _is_real(s) for c, s in pairs):
        # a count is never rounded: 2.5 releases are not 2
        raise ValueError(
            f"groups must be pairs (count, share) of an integer and a number, got {groups!r}.")
    out = tuple((int(c), float(s)) for c, s in pairs)
    if not out or any(c < 1 or not 0 < s <= 1 for c, s in out) \
            or not math.isclose(sum(s for _, s in out), 1.0, rel_tol=1e-9):
        raise ValueError(
            f"groups must be pairs (count >= 1, share in (0, 1]) whose shares sum to 1, got "
            f"{groups!r}.")
    return out


def _check_named_groups(groups):
    """``groups`` as a tuple of ``(name, count, share)``, counts integers (never rounded)."""
    try:
        named = tuple((g, c, s) for g, c, s in groups)
    except (TypeError, ValueError):
        raise ValueError(
            f"groups must be triples (name, count, share), got {groups!r}.") from None
    if not all(_is_count(c) and _is_real(s) for _, c, s in named):
        raise ValueError(
            f"groups must be triples (name, count, share) of an integer count and a number "
            f"share, got {groups!r}.")
    return tuple((str(g), int(c), float(s)) for g, c, s in named)


def _plan_event(u, groups):
    """The releases of a plan at scale ``u``: group ``g`` has ``c_g`` releases of multiplier
    ``u sqrt(c_g / s_g)``, so its precision ``c_g / z_g^2`` is the share ``s_g`` of ``1/u^2``."""
    from ._accounting import dp
    return dp().ComposedDpEvent([gaussian_event(u * math.sqrt(c / s), count=c)
                                 for c, s in groups])


@functools.lru_cache(maxsize=256)
def _calibrated_plan(epsilon, delta, groups, accountant):
    try:
        u = calibrate_noise_multiplier(epsilon, delta, count=1, accountant=accountant,
                                       make_event=lambda u: _plan_event(u, groups))
    except ValueError as exc:
        raise ValueError(
            f"epsilon={epsilon!r}, delta={delta!r} cannot be calibrated over the release "
            f"groups {groups} with accountant={accountant!r}: {exc}") from exc
    return tuple(u * math.sqrt(c / s) for c, s in groups)


def pftr_release_plan(epsilon, delta, groups, accountant="paper"):
    """Noise multipliers of groups of Gaussian releases that share one budget.

    A private fit releases several kinds of values (e.g. the private means
    that centre the data, the moment start, the Stage-I gradients); group
    ``g`` is ``count_g`` releases that get the share ``share_g`` of the
    budget, split equally among them.

    ``accountant="paper"``: basic composition (the paper's Sec. 4.3), group
    ``g`` spends ``(share_g epsilon, share_g delta)``, each of its releases a
    classical Gaussian mechanism at ``(share_g epsilon / count_g, share_g
    delta / count_g)``. ``"rdp"``/``"pld"``: Gaussian releases compose
    through the sum of their precisions ``sum_i 1 / z_i^2`` (exactly, as one
    Gaussian mechanism: Dong, Roth and Su, Cor. 3.3; additively in RDP), so a
    share is a share of that sum, and one scale is calibrated so that the
    composition of all groups spends ``epsilon`` at ``delta`` under the
    accountant. One group of share 1 is :func:`pftr_noise_multiplier`.

    Parameters
    ----------
    epsilon, delta : float
        The total budget (``epsilon=None`` or ``inf``: no noise).
    groups : sequence of (int, float)
        ``(count, share)`` per group; counts >= 1, shares in (0, 1] summing
        to 1.
    accountant : {"paper", "rdp", "pld"}, default="paper"

    Returns
    -------
    multipliers : tuple of float
        Noise standard deviation over L2 sensitivity of each group's
        releases (zeros without privacy).

    Examples
    --------
    >>> from skfed.privacy import pftr_noise_multiplier, pftr_release_plan
    >>> pftr_release_plan(20.0, 0.1, [(3, 1.0)]) == (pftr_noise_multiplier(20.0, 0.1, 3),)
    True
    >>> z_mean, z_train = pftr_release_plan(20.0, 0.1, [(2, 0.1), (3, 0.9)], "rdp")
    >>> round(2 / z_mean ** 2 / (2 / z_mean ** 2 + 3 / z_train ** 2), 6)
    0.1
    """
    check_accountant(accountant)
    groups = _check_groups(groups)
    epsilon, delta = check_privacy_budget(epsilon, delta)
    if epsilon is None:
        return (0.0,) * len(groups)
    if len(groups) == 1:
        return (pftr_noise_multiplier(epsilon, delta, groups[0][0], accountant),)
    if accountant == "paper":
        return tuple(pftr_noise_multiplier(s * epsilon, s * delta, c, "paper")
                     for c, s in groups)
    return _calibrated_plan(float(epsilon), float(delta), groups, accountant)


def pftr_noise_std(tau_e, tau_x, n_samples, n_rounds, epsilon, delta, accountant="paper"):
    """The paper's per-round noise standard deviation ``sigma_k^(t)``.

    Parameters
    ----------
    tau_e : float
        Truncation level of the residual tensors in this round, >= 0.
    tau_x : float
        Truncation level of the covariate tensors, >= 0.
    n_samples : int
        Rows of the client, ``n_k`` (>= 1).
    n_rounds : int
        Number of Stage-I rounds ``T_g`` (>= 1).
    epsilon : float or None
        Total budget of the client; ``None``/``inf`` gives 0.
    delta : float
        Total delta of the client.
    accountant : {"paper", "rdp", "pld"}, default="paper"
        Calibration of the noise multiplier (:func:`pftr_noise_multiplier`).

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> from skfed.privacy import pftr_noise_std
    >>> pftr_noise_std(1.0, 1.0, 100, 20, float("inf"), 0.1)
    0.0
    """
    _check_real(tau_e, "tau_e")  # the truncation levels
    _check_real(tau_x, "tau_x")
    _check_count(n_samples, "n_samples")
    return 2.0 * tau_e * tau_x / n_samples * pftr_noise_multiplier(
        epsilon, delta, n_rounds, accountant)


def pftr_privacy_spent(epsilon, delta, n_rounds, accountant="rdp", calibration="paper", *,
                       groups=None):
    """Per-client privacy of ``n_rounds`` releases calibrated to ``(epsilon, delta)``.

    Parameters
    ----------
    epsilon, delta : float
        The budget the noise was calibrated for (``epsilon=None``: no noise).
    n_rounds : int
        Number of noisy releases (``T_g``), an integer >= 1.
    accountant : {"rdp", "pld"}, default="rdp"
        dp-accounting accountant of the additional ``epsilon_<accountant>``.
    calibration : {"paper", "rdp", "pld"}, default="paper"
        How the noise multiplier was calibrated
        (:func:`pftr_noise_multiplier`'s ``accountant``).
    groups : sequence of (str, int, float) or None, default=None
        The releases as named groups ``(name, count, share)`` sharing the
        budget (:func:`pftr_release_plan`); their counts sum to ``n_rounds``.
        ``None``: one group of the ``n_rounds`` releases.

    Returns
    -------
    spent : dict
        ``epsilon``/``delta``: with ``calibration="paper"`` the paper's basic
        composition (the nominal budget) where it holds, else the exact
        epsilon of the releases (see ``epsilon_exact``); otherwise the
        epsilon of the releases recomputed by the calibrating accountant at
        ``delta`` (at most ``epsilon``, within a relative 1e-4).
        ``calibration``: which. ``classical_valid``: whether the per-round
        ``epsilon/T_g < 1``, the range where the classical Gaussian
        calibration is proven (``None`` when an accountant calibrated the
        noise, no classical step is used); ``noise_multiplier``;
        ``epsilon_exact``: the exact epsilon of the releases at ``delta``
        (:func:`~skfed.privacy.gaussian_epsilon`; above ``epsilon`` only
        where the classical calibration falls short of the budget, and then
        reported as ``epsilon``); ``epsilon_<accountant>``: the accountant's
        epsilon of the same releases at ``delta`` (neighbouring datasets
        differ in one replaced pair, whose sensitivity is built into the
        multiplier). Infinite epsilons when no noise was added.
        With ``groups``: ``noise_multiplier`` is the last group's, the
        composition of all groups gives ``epsilon`` (and the other totals),
        and ``releases`` lists each group as a dict: ``name``, ``count``,
        ``share``, ``noise_multiplier`` and ``epsilon``, what the group's
        releases alone spend at ``delta`` (basic composition: its share of
        ``epsilon``, or its exact epsilon where that is larger; an
        accountant: that accountant's epsilon of the group alone).

    Examples
    --------
    >>> from skfed.privacy import pftr_privacy_spent
    >>> s = pftr_privacy_spent(20.0, 0.1, 20)
    >>> s["epsilon"], s["epsilon_rdp"] < 20
    (20.0, True)
    >>> s = pftr_privacy_spent(20.0, 0.1, 2)  # epsilon / T_g = 10: the classical step fails
    >>> s["classical_valid"], round(s["epsilon"], 2), s["epsilon"] == s["epsilon_exact"]
    (False, 21.78, True)
    >>> s = pftr_privacy_spent(20.0, 0.1, 20, calibration="rdp")
    >>> round(s["epsilon"], 3), round(s["noise_multiplier"], 3)
    (20.0, 0.926)
    """
    check_accountant(calibration, name="calibration")
    _check_accountant(accountant)
    epsilon, delta = check_privacy_budget(epsilon, delta)
    n_rounds = _check_count(n_rounds, "n_rounds")
    named = None if groups is None else _check_named_groups(groups)
    if named is not None and sum(c for _, c, _ in named) != int(n_rounds):
        raise ValueError(f"the counts of groups={groups!r} must sum to n_rounds={n_rounds!r}.")
    plan = ((int(n_rounds), 1.0),) if named is None else tuple((c, s) for _, c, s in named)
    if epsilon is None:
        spent = {
            "epsilon": math.inf, "delta": 0.0, "n_releases": int(n_rounds),
            "noise_multiplier": 0.0, "classical_valid": False, "calibration": calibration,
            "epsilon_exact": math.inf, f"epsilon_{accountant}": math.inf,
        }
        if named is not None:
            spent["releases"] = [dict(name=g, count=c, share=s, noise_multiplier=0.0,
                                      epsilon=math.inf) for g, c, s in named]
        return spent
    zs = pftr_release_plan(epsilon, delta, plan, calibration)
    counts = [c for c, _ in plan]
    if len(plan) == 1:
        event = gaussian_event(zs[0], count=counts[0])
    else:
        from ._accounting import dp
        event = dp().ComposedDpEvent([gaussian_event(z, count=c) for z, c in zip(zs, counts)])
    extra = epsilon_spent(event, delta, accountant)
    exact = gaussian_epsilon(zs, delta, counts=counts)
    if calibration == "paper":
        # Basic composition of classical mechanisms proves (epsilon, delta) only for a
        # per-release epsilon / T_g < 1 (Dwork and Roth, Thm A.1); beyond it the budget is
        # kept where the releases' exact epsilon is within it, else the exact one is the
        # guarantee (the noise itself is the paper's either way).
        spent_epsilon = max(epsilon, exact)
        classical = all(s * epsilon / c < 1.0 for c, s in plan)
    else:
        spent_epsilon = extra if calibration == accountant else epsilon_spent(
            event, delta, calibration)
        classical = None
    spent = {
        "epsilon": spent_epsilon,
        "delta": delta,
        "n_releases": int(n_rounds),
        "noise_multiplier": zs[-1],
        "classical_valid": classical,
        "calibration": calibration,
        "epsilon_exact": exact,
        f"epsilon_{accountant}": extra,
    }
    if named is not None:
        spent["releases"] = []
        for (g, c, s), z in zip(named, zs):
            if calibration == "paper":
                alone = max(s * epsilon, gaussian_epsilon(z, delta, counts=c))
            else:
                alone = epsilon_spent(gaussian_event(z, count=c), delta, calibration)
            spent["releases"].append(dict(name=g, count=c, share=s, noise_multiplier=z,
                                          epsilon=alone))
    return spent
