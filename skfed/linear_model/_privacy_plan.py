"""Privacy plans of the federated linear classifiers.

The per-round budgets of an estimator (given per round, or calibrated from a
total target), their noise multipliers and the epsilon spent over the rounds.
"""

import functools
import math
from types import SimpleNamespace
from typing import NamedTuple

from ..privacy import (
    PFTR_ACCOUNTANTS,
    calibrate_noise_multiplier,
    check_epsilon,
    check_privacy_budget,
    classical_gaussian_sigma,
    dpfeddro_epsilon,
    dpfeddro_per_round_epsilon,
    epsilon_spent,
    gaussian_event,
    split_round_budget,
)
from ..privacy._accounting import dp
from ..privacy._pftr_bound import check_accountant

# the paper's closed-form bound, or one of dp-accounting's accountants
PRIVACY_ACCOUNTANTS = PFTR_ACCOUNTANTS


#: the releases of every round (privacy_spent_["releases"] names), in the order of a
#: plan's epsilons: the local model, then the DRO variable (DP-Fed DRO's Algorithm 2)
ROUND_RELEASES = ("model", "dro_variable")
#: what a one-off release of a fit is
ONE_OFF_RELEASES = {
    "scaling": "feature-scaling histograms",
    "temperature": "temperature: summed log losses of the released model",
}


class Plan(NamedTuple):
    """A private fit's per-round budgets and its one-off releases.

    ``epsilons`` holds the classical per-round budget of each release of a
    round (zeros are skipped), ``delta`` the per-release delta, ``delta_bar``
    the total delta and ``extras`` a ``(name, noise multiplier)`` pair per
    Gaussian release made once (keys of :data:`ONE_OFF_RELEASES`).
    """

    epsilons: tuple
    delta: float
    delta_bar: float
    extras: tuple = ()

    def multiplier(self, name):
        """Noise multiplier of the one-off release ``name`` (None: not made)."""
        return dict(self.extras).get(name)


def one_off_multipliers(round_multipliers, n_rounds, shares):
    """Noise multipliers of one-off releases that take ``shares`` of the fit's zCDP budget.

    A Gaussian release of multiplier ``z`` costs ``rho = 1 / (2 z^2)`` in
    zero-concentrated DP and costs add up; with ``shares`` ``s_x`` the rounds
    keep ``1 - sum s`` of the total, so release ``x`` gets ``rho_x = s_x / (1 -
    sum s) * n_rounds * sum(1 / (2 z_i^2))``.
    """
    rho_rounds = n_rounds * sum(0.5 / (z * z) for z in round_multipliers)
    rest = 1.0 - sum(share for _, share in shares)
    return tuple((name, math.sqrt(0.5 / (share / rest * rho_rounds))) for name, share in shares)


def classical_multiplier(epsilon, delta):
    """Noise multiplier ``sqrt(2 ln(1.25/delta)) / epsilon`` of the classical calibration.

    The classical Gaussian mechanism's sigma at unit sensitivity
    (:func:`skfed.privacy.classical_gaussian_sigma`).
    """
    return classical_gaussian_sigma(epsilon, delta)


def privacy_spent(n_rounds, epsilons, delta, delta_bar, accountant, extras=()):
    """Total epsilon of ``n_rounds`` rounds of classical Gaussian releases.

    ``epsilons`` holds the per-round budget of each release in a round (zeros
    are skipped); ``extras`` the ``(name, noise multiplier)`` of one-off
    releases composed with them. ``"paper"`` is the closed-form
    moments-accountant bound (rounds only); ``"rdp"``/``"pld"`` run
    dp-accounting on the same noise multipliers.
    """
    return _privacy_spent(int(n_rounds), tuple(float(e) for e in epsilons if e > 0),
                          float(delta), float(delta_bar), accountant,
                          tuple((str(n), float(z)) for n, z in extras))


@functools.lru_cache(maxsize=256)
def _privacy_spent(n_rounds, epsilons, delta, delta_bar, accountant, extras):
    # cached: a PLD composition takes a fraction of a second, and a fit reports the
    # same releases more than once (its claim to the sites, privacy_spent_)
    if accountant == "paper":
        if extras:
            raise ValueError("the paper's bound covers its rounds only, not a one-off release.")
        e = list(epsilons) + [0.0]
        return dpfeddro_epsilon(n_rounds, e[0], math.sqrt(sum(x * x for x in e[1:])), delta,
                                delta_bar)
    return epsilon_spent(_rounds_event(n_rounds, epsilons, delta, extras), delta_bar,
                         accountant)


def privacy_report(n_rounds, plan, accountant, outside=()):
    """``privacy_spent_``: the guarantee of everything a client released, or none.

    The keys are those of :class:`skfed.tensor.PersonalizedTensorRegressor`'s
    report: ``epsilon``, ``delta`` (total, per client, replace-one record
    level), ``n_releases``, ``noise_multiplier`` (one per release of a round),
    ``calibration`` (the accountant), ``strict``, ``covers``, ``outside`` and
    ``releases`` (one dict per kind of release: ``name``, ``count``,
    ``noise_multiplier``, ``share`` of the zCDP cost, ``epsilon`` of those
    releases alone). Without privacy (``plan`` None) ``epsilon`` is ``inf``: no guarantee.
    ``outside`` lists what a client released without noise (as the tensor
    estimator's, ``"name: what"``); ``strict`` is then false, and ``epsilon``
    still bounds the noisy releases alone.
    """
    if plan is None:
        return {"epsilon": math.inf, "delta": 0.0, "n_releases": 0, "noise_multiplier": 0.0,
                "calibration": accountant, "strict": False,
                "covers": "nothing: no noise was added", "outside": []}
    eps, delta, delta_bar, extras = plan
    per_round = [e for e in eps if e > 0]
    outside = list(outside)
    released = (f"its noisy local model(s) of each of {n_rounds} rounds (Gaussian mechanism, "
                "sensitivity from the norm bound and the client's row count)")
    multipliers = tuple(classical_multiplier(e, delta) for e in eps)
    # one entry per kind of release, as PersonalizedTensorRegressor's "releases": its
    # share of the zCDP cost (rho = 1 / (2 z^2) per release; a reading aid) and what
    # it alone spends; epsilon itself is the accountant's composition of them all
    releases = [dict(name=name, count=n_rounds, noise_multiplier=z,
                     epsilon=privacy_spent(n_rounds, (e,), delta, delta_bar, accountant))
                for name, e, z in zip(ROUND_RELEASES, eps, multipliers) if e > 0]
    for name, z in extras:
        released += "; " + {
            "scaling": "its feature histograms on the public grid, once (Gaussian mechanism, "
                       "sensitivity sqrt(2 n_features))",
            "temperature": "its summed log losses of the released model at a grid of "
                           "temperatures, once (Gaussian mechanism, sensitivity from the "
                           "released model and the norm bound)",
        }[name]
        releases.append(dict(name=name, count=1, noise_multiplier=z,
                             epsilon=privacy_spent(0, (), delta, delta_bar, accountant,
                                                   ((name, z),))))
    rho = [r["count"] * 0.5 / r["noise_multiplier"] ** 2 for r in releases]
    for release, r in zip(releases, rho):
        release["share"] = r / sum(rho)
    if outside:
        covers = f"{released}; its row count is public; not what 'outside' lists"
    else:
        covers = (f"everything a client releases: {released}; its row count is public and "
                  "the class labels are the public classes given")
    return {
        "epsilon": privacy_spent(n_rounds, eps, delta, delta_bar, accountant, extras),
        "delta": delta_bar,
        "n_releases": n_rounds * len(per_round) + len(extras),
        "noise_multiplier": multipliers,
        "calibration": accountant,
        "strict": not outside,
        "covers": covers,
        "outside": outside,
        "releases": releases,
    }


def _rounds_event(n_rounds, epsilons, delta, extras=()):
    """dp-accounting event of ``n_rounds`` rounds of the classical releases ``epsilons``
    and of the one-off releases ``extras`` (``(name, noise multiplier)`` pairs)."""
    events = [gaussian_event(classical_multiplier(e, delta), n_rounds)
              for e in epsilons if e > 0]
    events += [gaussian_event(z, 1) for _, z in extras]
    return events[0] if len(events) == 1 else dp().ComposedDpEvent(events)


def privacy_plan(est, split, shares=()):
    """The :class:`Plan` of an estimator, or None without privacy.

    ``split`` is the share of ``epsilon^2`` of the first release (None: one
    release per round); ``shares`` a ``(name, share)`` pair per one-off
    release, each taking that share of the fit's zCDP budget. Reads
    ``epsilon``, ``delta``, ``target_epsilon``, ``target_delta``,
    ``accountant`` and ``n_rounds`` from ``est``. Results are cached:
    calibrating a total budget with the PLD accountant takes about a second,
    and a fit needs the plan more than once.
    """
    key = (est.epsilon, est.delta, est.target_epsilon, est.target_delta, est.accountant,
           est.n_rounds, split, tuple(shares))
    try:
        return _cached_plan(*key)
    except TypeError:  # unhashable parameters: validate and compute without the cache
        return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, key[:-2]))), split,
                             tuple(shares))


_PLAN_KEYS = ("epsilon", "delta", "target_epsilon", "target_delta", "accountant", "n_rounds")


@functools.lru_cache(maxsize=32)
def _cached_plan(epsilon, delta, target_epsilon, target_delta, accountant, n_rounds, split,
                 shares):
    values = (epsilon, delta, target_epsilon, target_delta, accountant, n_rounds)
    return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, values))), split,
                         shares)


def _privacy_plan(est, split, shares=()):
    check_accountant(est.accountant)
    if shares and est.accountant == "paper":
        raise ValueError(
            "accountant='paper' is the paper's closed-form bound of its rounds alone; "
            f"{', '.join(ONE_OFF_RELEASES[n] for n, _ in shares)} would be further releases "
            "(use accountant='pld' or 'rdp')."
        )
    n_rounds = int(est.n_rounds)

    def split_eps(eps):
        return split_round_budget(eps, split) if split is not None else (eps,)

    def extras(eps, delta):
        if not shares:
            return ()
        zs = [classical_multiplier(e, delta) for e in eps if e > 0]
        return one_off_multipliers(zs, n_rounds, shares)

    if est.target_epsilon is not None:
        # without its own target_delta, a total target is at the fit's delta
        target_delta = est.delta if est.target_delta is None else est.target_delta
        target, delta = check_privacy_budget(
            est.target_epsilon, target_delta, allow_none=False,
            eps_name="target_epsilon", delta_name="target_delta",
        )
        if est.accountant == "paper":
            eps = split_eps(dpfeddro_per_round_epsilon(target, n_rounds, delta))
        else:
            # Calibrate the round's noise multiplier z = sqrt(2 ln(1.25/delta)) / eps
            # (the releases' multipliers are fixed multiples of it) by the one
            # bracketed search of skfed.privacy, on the very events privacy_spent
            # composes, so the spent epsilon is <= target.
            scale = classical_multiplier(1.0, delta)

            def event(z):
                eps = split_eps(scale / z)
                return _rounds_event(n_rounds, eps, delta, extras(eps, delta))

            try:
                z = calibrate_noise_multiplier(target, delta, n_rounds,
                                               accountant=est.accountant, make_event=event)
            except ValueError as exc:
                raise ValueError(
                    f"target_epsilon={target} cannot be calibrated in {est.n_rounds} rounds "
                    f"with accountant={est.accountant!r}: {exc}"
                ) from exc
            eps = split_eps(scale / z)
        return Plan(eps, delta, delta, extras(eps, delta))
    # one "no noise" rule for every private estimator: None, or its alias inf
    if check_epsilon(est.epsilon) is None:
        return None
    eps, delta = check_privacy_budget(est.epsilon, est.delta, allow_none=False)
    eps = split_eps(eps)
    return Plan(eps, delta, delta, extras(eps, delta))
