"""Privacy plans of the federated linear classifiers.

The per-round budgets of an estimator (given per round, or calibrated from a
total target), their noise multipliers and the epsilon spent over the rounds.
"""

import functools
import math
from types import SimpleNamespace

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


def classical_multiplier(epsilon, delta):
    """Noise multiplier ``sqrt(2 ln(1.25/delta)) / epsilon`` of the classical calibration.

    The classical Gaussian mechanism's sigma at unit sensitivity
    (:func:`skfed.privacy.classical_gaussian_sigma`).
    """
    return classical_gaussian_sigma(epsilon, delta)


def privacy_spent(n_rounds, epsilons, delta, delta_bar, accountant):
    """Total epsilon of ``n_rounds`` rounds of classical Gaussian releases.

    ``epsilons`` holds the per-round budget of each release in a round (zeros
    are skipped). ``"paper"`` is the closed-form moments-accountant bound;
    ``"rdp"``/``"pld"`` run dp-accounting on the same noise multipliers.
    """
    epsilons = [e for e in epsilons if e > 0]
    if accountant == "paper":
        e = list(epsilons) + [0.0]
        return dpfeddro_epsilon(n_rounds, e[0], math.sqrt(sum(x * x for x in e[1:])), delta,
                                delta_bar)
    return epsilon_spent(_rounds_event(n_rounds, epsilons, delta), delta_bar, accountant)


def privacy_report(n_rounds, plan, accountant, outside=()):
    """``privacy_spent_``: the guarantee of everything a client released, or none.

    The keys are those of :class:`skfed.tensor.PersonalizedTensorRegressor`'s
    report: ``epsilon``, ``delta`` (total, per client, replace-one record
    level), ``n_releases``, ``noise_multiplier`` (one per release of a round),
    ``calibration`` (the accountant), ``strict``, ``covers`` and ``outside``.
    Without privacy (``plan`` None) ``epsilon`` is ``inf``: no guarantee.
    ``outside`` lists what a client released without noise (as the tensor
    estimator's, ``"name: what"``); ``strict`` is then false, and ``epsilon``
    still bounds the noisy releases alone.
    """
    if plan is None:
        return {"epsilon": math.inf, "delta": 0.0, "n_releases": 0, "noise_multiplier": 0.0,
                "calibration": accountant, "strict": False,
                "covers": "nothing: no noise was added", "outside": []}
    eps, delta, delta_bar = plan
    per_round = [e for e in eps if e > 0]
    outside = list(outside)
    released = (f"its noisy local model(s) of each of {n_rounds} rounds (Gaussian mechanism, "
                "sensitivity from the norm bound and the client's row count)")
    if outside:
        covers = f"{released}; its row count is public; not what 'outside' lists"
    else:
        covers = (f"everything a client releases: {released}; its row count is public and "
                  "the class labels are the public classes given")
    return {
        "epsilon": privacy_spent(n_rounds, eps, delta, delta_bar, accountant),
        "delta": delta_bar,
        "n_releases": n_rounds * len(per_round),
        "noise_multiplier": tuple(classical_multiplier(e, delta) for e in eps),
        "calibration": accountant,
        "strict": not outside,
        "covers": covers,
        "outside": outside,
    }


def _rounds_event(n_rounds, epsilons, delta):
    """dp-accounting event of ``n_rounds`` rounds of the classical releases ``epsilons``."""
    events = [gaussian_event(classical_multiplier(e, delta), n_rounds) for e in epsilons]
    return events[0] if len(events) == 1 else dp().ComposedDpEvent(events)


def privacy_plan(est, split):
    """Per-round ``(epsilons, delta, delta_bar)`` of an estimator, or None without privacy.

    ``split`` is the share of ``epsilon^2`` of the first release (None: one
    release per round). Reads ``epsilon``, ``delta``, ``target_epsilon``,
    ``target_delta``, ``accountant`` and ``n_rounds`` from ``est``. Results
    are cached: calibrating a total budget with the PLD accountant takes
    about a second, and a fit needs the plan more than once.
    """
    key = (est.epsilon, est.delta, est.target_epsilon, est.target_delta, est.accountant,
           est.n_rounds, split)
    try:
        return _cached_plan(*key)
    except TypeError:  # unhashable parameters: validate and compute without the cache
        return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, key))), split)


_PLAN_KEYS = ("epsilon", "delta", "target_epsilon", "target_delta", "accountant", "n_rounds")


@functools.lru_cache(maxsize=32)
def _cached_plan(epsilon, delta, target_epsilon, target_delta, accountant, n_rounds, split):
    values = (epsilon, delta, target_epsilon, target_delta, accountant, n_rounds)
    return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, values))), split)


def _privacy_plan(est, split):
    check_accountant(est.accountant)

    def split_eps(eps):
        return split_round_budget(eps, split) if split is not None else (eps,)

    if est.target_epsilon is not None:
        if est.target_delta is None:
            raise ValueError("target_delta must be given with target_epsilon.")
        target, delta = check_privacy_budget(
            est.target_epsilon, est.target_delta, allow_none=False,
            eps_name="target_epsilon", delta_name="target_delta",
        )
        if est.accountant == "paper":
            eps = dpfeddro_per_round_epsilon(target, est.n_rounds, delta)
        else:
            # Calibrate the round's noise multiplier z = sqrt(2 ln(1.25/delta)) / eps
            # (the releases' multipliers are fixed multiples of it) by the one
            # bracketed search of skfed.privacy, on the very events privacy_spent
            # composes, so the spent epsilon is <= target.
            scale = classical_multiplier(1.0, delta)
            try:
                z = calibrate_noise_multiplier(
                    target, delta, est.n_rounds, accountant=est.accountant,
                    make_event=lambda z: _rounds_event(est.n_rounds, split_eps(scale / z),
                                                       delta),
                )
            except ValueError as exc:
                raise ValueError(
                    f"target_epsilon={target} cannot be calibrated in {est.n_rounds} rounds "
                    f"with accountant={est.accountant!r}: {exc}"
                ) from exc
            eps = scale / z
        return split_eps(eps), delta, delta
    # one "no noise" rule for every private estimator: None, or its alias inf
    if check_epsilon(est.epsilon) is None:
        return None
    eps, delta = check_privacy_budget(est.epsilon, est.delta, allow_none=False)
    return split_eps(eps), delta, delta
