import math

import dp_accounting
import numpy as np
import pytest

from skfed.privacy import (
    calibrate_noise_multiplier,
    check_privacy_budget,
    classical_gaussian_sigma,
    dpfeddro_epsilon,
    dpfeddro_per_round_epsilon,
    epsilon_spent,
    gaussian_epsilon,
    gaussian_event,
    gaussian_mechanism,
    gaussian_noise,
    pftr_noise_multiplier,
    pftr_noise_std,
    pftr_privacy_spent,
    pftr_release_plan,
    split_round_budget,
)


def test_noise_std_matches_sigma():
    rng = np.random.default_rng(0)
    noisy = gaussian_mechanism(np.full(200_000, 3.0), 0.7, rng)
    assert abs(noisy.mean() - 3.0) < 0.01
    assert abs(noisy.std() - 0.7) < 0.005
    again = gaussian_mechanism(np.full(5, 3.0), 0.7, np.random.default_rng(0))
    np.testing.assert_array_equal(again, noisy[:5])


def test_classical_sigma_formula():
    assert classical_gaussian_sigma(0.5, 1e-6, sensitivity=2.0) == pytest.approx(
        2.0 * math.sqrt(2 * math.log(1.25e6)) / 0.5
    )


@pytest.mark.parametrize(
    "eps, delta, match",
    [(0, 1e-5, "epsilon"), (-1, 1e-5, "epsilon"), (float("nan"), 1e-5, "epsilon"),
     (1.0, 0, "delta"), (1.0, 1, "delta"), (1.0, 1.5, "delta"), ("1", 1e-5, "epsilon")],
)
def test_invalid_budgets(eps, delta, match):
    with pytest.raises(ValueError, match=match):
        check_privacy_budget(eps, delta)


def test_no_privacy_spellings():
    assert check_privacy_budget(None, 0.1) == (None, None)
    assert check_privacy_budget(float("inf"), 0.1) == (None, None)
    with pytest.raises(ValueError):
        check_privacy_budget(None, 0.1, allow_none=False)


def test_accountants_against_closed_forms():
    event = gaussian_event(1.0, count=100)
    # T Gaussian releases with multiplier z equal one release with z / sqrt(T)
    exact = dp_accounting.get_epsilon_gaussian(1.0 / math.sqrt(100), 1e-5)
    rdp = epsilon_spent(event, 1e-5, "rdp")
    assert rdp >= exact and rdp == pytest.approx(96.12, abs=0.01)
    single = gaussian_event(2.0)
    assert epsilon_spent(single, 1e-5, "pld") == pytest.approx(
        dp_accounting.get_epsilon_gaussian(2.0, 1e-5), rel=1e-2
    )


def test_calibration_round_trip():
    z = calibrate_noise_multiplier(2.0, 1e-5, count=20)
    assert epsilon_spent(gaussian_event(z, count=20), 1e-5) == pytest.approx(2.0, rel=1e-3)
    z_sub = calibrate_noise_multiplier(2.0, 1e-5, count=20, sampling_probability=0.1)
    assert z_sub < z  # amplification by sampling needs less noise
    with pytest.raises(ValueError, match="accountant"):
        calibrate_noise_multiplier(2.0, 1e-5, count=20, accountant="moments")
    with pytest.raises(ValueError, match="target_delta"):
        calibrate_noise_multiplier(2.0, 2.0, count=20)


# ---------------------------------------------------------------- calibration (issue 16)


def _direct_epsilon(event, delta, accountant):
    """Epsilon by a dp-accounting accountant built here, at its default settings."""
    acc = (dp_accounting.rdp.RdpAccountant() if accountant == "rdp"
           else dp_accounting.pld.PLDAccountant())
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize(
    "target, count, q",
    [(1.0, 1, 1.0), (10.0, 1, 1.0), (3.0, 5, 1.0), (2.0, 20, 1.0), (4.0, 100, 0.05)],
)
def test_calibration_meets_target_tightly(target, count, q, accountant):
    # (x, 1, 1.0) with "pld" crashed before: the search probed a multiplier of 1e-12
    z = calibrate_noise_multiplier(target, 1e-5, count, q, accountant=accountant)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(z) if q == 1 else
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), count)
    eps = _direct_epsilon(event, 1e-5, accountant)
    assert eps <= target
    assert eps >= target * (1 - 1e-4)


@pytest.mark.parametrize("target, count", [(1.0, 1), (3.0, 5), (2.0, 50)])
def test_pld_needs_no_more_noise_than_rdp(target, count):
    z_rdp = calibrate_noise_multiplier(target, 1e-6, count, accountant="rdp")
    z_pld = calibrate_noise_multiplier(target, 1e-6, count, accountant="pld")
    assert z_pld <= z_rdp
    # without sampling PLD is (almost) exact: compare with the analytic Gaussian
    exact = dp_accounting.get_epsilon_gaussian(z_pld / math.sqrt(count), 1e-6)
    assert exact == pytest.approx(target, rel=1e-3)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_never_probes_degenerate_multipliers(accountant):
    seen = []

    def make_event(z):
        seen.append(z)
        return gaussian_event(z, 3)

    z = calibrate_noise_multiplier(20.0, 1e-5, 3, accountant=accountant,
                                   make_event=make_event)
    assert all(math.isfinite(s) and s >= 1e-3 for s in seen)
    assert z == pytest.approx(calibrate_noise_multiplier(20.0, 1e-5, 3, accountant=accountant),
                              rel=1e-6)


def test_calibration_of_a_composed_event():
    # two releases per round with multipliers z / sqrt(0.95) and z / sqrt(0.05)
    def make_event(z):
        return dp_accounting.ComposedDpEvent([
            gaussian_event(z / math.sqrt(0.95), 20), gaussian_event(z / math.sqrt(0.05), 20)])

    for accountant in ("rdp", "pld"):
        z = calibrate_noise_multiplier(2.0, 1e-6, 20, accountant=accountant,
                                       make_event=make_event)
        eps = _direct_epsilon(make_event(z), 1e-6, accountant)
        assert 2.0 * (1 - 1e-4) <= eps <= 2.0
    # the two releases compose to one Gaussian of multiplier z (1/z^2 adds up)
    assert z == pytest.approx(calibrate_noise_multiplier(2.0, 1e-6, 20, accountant="pld"),
                              rel=1e-3)


def test_calibration_unreachable_targets_are_clear_errors():
    with pytest.raises(ValueError, match="too large to calibrate"):
        calibrate_noise_multiplier(1e7, 1e-5, count=1)
    with pytest.raises(ValueError, match="out of reach"):
        calibrate_noise_multiplier(1e-8, 1e-5, count=10**6)
    with pytest.raises(ValueError, match="count"):
        calibrate_noise_multiplier(1.0, 1e-5, count=0)
    with pytest.raises(ValueError, match="sampling_probability"):
        calibrate_noise_multiplier(1.0, 1e-5, count=2, sampling_probability=0.0)
    with pytest.raises(TypeError, match="make_event"):
        calibrate_noise_multiplier(1.0, 1e-5, count=2, make_event=3)


def test_pld_refines_when_the_search_grid_is_coarse(monkeypatch):
    # on a 1e-2 grid the search's epsilon overshoots by ~1e-3: the check on the
    # reporting grid must then refine to within 1e-4 of the target
    from skfed.privacy import _accounting

    monkeypatch.setattr(_accounting, "_SEARCH_INTERVAL", 1e-2)
    z = calibrate_noise_multiplier(4.0, 1e-5, 100, 0.05, accountant="pld")
    event = gaussian_event(z, 100, 0.05)
    eps = _direct_epsilon(event, 1e-5, "pld")
    assert 4.0 * (1 - 1e-4) <= eps <= 4.0


# ---------------------------------------------------------------- argument validation


@pytest.mark.parametrize("call, match", [
    # a count of releases is never rounded: 1.9 releases are not 1 (epsilon under-reported)
    (lambda: gaussian_event(1.0, count=1.9), "count"),
    (lambda: gaussian_event(1.0, count=2.0), "count"),
    (lambda: pftr_privacy_spent(1.0, 1e-5, 2.5), "n_rounds"),
    (lambda: pftr_privacy_spent(None, 1e-5, 2.5), "n_rounds"),
    (lambda: pftr_noise_multiplier(1.0, 1e-5, 1.5), "n_rounds"),
    (lambda: pftr_noise_multiplier(1.0, 1e-5, 1.5, accountant="rdp"), "n_rounds"),
    (lambda: dpfeddro_epsilon(2.5, 0.1, 0.1, 1e-5), "n_rounds"),
    (lambda: dpfeddro_per_round_epsilon(1.0, 2.5, 1e-5), "n_rounds"),
    (lambda: pftr_noise_std(1.0, 1.0, 10.5, 10, 1.0, 1e-5), "n_samples"),
    # strings, None and booleans name the argument
    (lambda: gaussian_event("a"), "noise_multiplier"),
    (lambda: gaussian_event(1.0, count="2"), "count"),
    (lambda: gaussian_event(1.0, count=True), "count"),
    (lambda: gaussian_event(1.0, sampling_probability="a"), "sampling_probability"),
    (lambda: classical_gaussian_sigma(1.0, 1e-5, True), "sensitivity"),
    (lambda: classical_gaussian_sigma(1.0, 1e-5, "a"), "sensitivity"),
    (lambda: gaussian_mechanism(np.zeros(2), "a", np.random.default_rng(0)), "sigma"),
    (lambda: gaussian_noise(2, None, np.random.default_rng(0)), "sigma"),
    (lambda: pftr_noise_std(1.0, "a", 100, 10, 1.0, 1e-5), "tau_x"),
    (lambda: pftr_noise_std(None, 1.0, 100, 10, 1.0, 1e-5), "tau_e"),
    (lambda: split_round_budget(None), "epsilon"),
    (lambda: split_round_budget(0.5, "a"), "budget_split"),
    (lambda: dpfeddro_epsilon("a", 0.1, 0.1, 1e-5), "n_rounds"),
    (lambda: dpfeddro_epsilon(10, "a", 0.1, 1e-5), "epsilon_M"),
    (lambda: dpfeddro_epsilon(10, 0.1, None, 1e-5), "epsilon_lambda"),
    (lambda: pftr_noise_multiplier(1.0, 1e-5, "a"), "n_rounds"),
    (lambda: pftr_noise_multiplier(None, 1e-5, "a"), "n_rounds"),
    (lambda: gaussian_epsilon(["a"], 1e-5), "noise_multipliers"),
    (lambda: gaussian_epsilon([1.0], 1e-5, counts=["a"]), "counts"),
    # a seed is not a random stream
    (lambda: gaussian_mechanism(np.zeros(2), 1.0, 0), "rng"),
    (lambda: gaussian_noise(2, 1.0, None), "rng"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_wrong_types_are_type_errors_naming_the_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()
    with pytest.raises(ValueError, match=match):  # also a ValueError, as before
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: gaussian_event(1.0, count=0), "count"),
    (lambda: gaussian_event(1.0, count=-1), "count"),
    (lambda: gaussian_event(np.nan), "noise_multiplier"),
    (lambda: gaussian_event(1.0, sampling_probability=np.nan), "sampling_probability"),
    (lambda: dpfeddro_epsilon(10, np.nan, 0.1, 1e-5), "epsilon_M"),
    (lambda: dpfeddro_epsilon(10, 0.1, -0.1, 1e-5), "epsilon_lambda"),
    (lambda: dpfeddro_epsilon(0, 0.1, 0.1, 1e-5), "n_rounds"),
    (lambda: dpfeddro_per_round_epsilon(1.0, 0, 1e-5), "n_rounds"),
    (lambda: dpfeddro_per_round_epsilon(1.0, -1, 1e-5), "n_rounds"),
    (lambda: split_round_budget(-1.0), "epsilon"),
    (lambda: split_round_budget(0), "epsilon"),
    (lambda: split_round_budget(np.nan), "epsilon"),
    (lambda: pftr_noise_std(1.0, 1.0, -1, 10, 1.0, 1e-5), "n_samples"),
    (lambda: pftr_noise_std(1.0, 1.0, 0, 10, 1.0, 1e-5), "n_samples"),
    (lambda: pftr_noise_std(np.nan, 1.0, 100, 10, 1.0, 1e-5), "tau_e"),
    (lambda: pftr_noise_multiplier(None, 1e-5, 0), "n_rounds"),
    (lambda: pftr_privacy_spent(None, 1e-5, 10, accountant="x"), "accountant"),
    (lambda: pftr_privacy_spent(1.0, 1e-5, 10, calibration="x"), "calibration"),
    (lambda: pftr_privacy_spent(1.0, 1e-5, 0), "n_rounds"),
    (lambda: gaussian_epsilon([1.0, 2.0, 3.0], 1e-5, counts=[1, 2]), "counts"),
    # a group's count is never rounded either
    (lambda: pftr_privacy_spent(1.0, 1e-5, 3, groups=[("a", 2.5, 0.5), ("b", 1, 0.5)]),
     "groups"),
    (lambda: pftr_release_plan(1.0, 1e-5, [(2.5, 1.0)]), "groups"),
    (lambda: classical_gaussian_sigma(1.0, 1e-5, -1.0), "sensitivity"),
    (lambda: gaussian_mechanism(np.zeros(2), np.inf, np.random.default_rng(0)), "sigma"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_values_are_value_errors_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_calibration_names_calibration_not_accountant():
    with pytest.raises(ValueError, match=r"^calibration must be one of"):
        pftr_privacy_spent(1.0, 1e-5, 10, calibration="x")
    with pytest.raises(ValueError, match=r"^n_rounds must be an integer >= 1, got 0"):
        pftr_privacy_spent(1.0, 1e-5, 0)


def test_valid_arguments_are_still_accepted():
    # numpy integers and floats, a RandomState, inf as "no privacy" per round
    z = 2.0
    assert epsilon_spent(gaussian_event(np.float64(z), count=np.int64(3)), 1e-5) == \
        epsilon_spent(gaussian_event(z, count=3), 1e-5)
    assert gaussian_mechanism(np.zeros(2), 0.0, None).tolist() == [0.0, 0.0]  # nothing drawn
    assert gaussian_mechanism(np.zeros(3), 1.0, np.random.RandomState(0)).shape == (3,)
    assert gaussian_noise(2, np.float64(1.0), np.random.default_rng(0)).shape == (2,)
    assert split_round_budget(math.inf) == (math.inf, math.inf)
    assert dpfeddro_epsilon(np.int64(50), 0.5, 0.0, 1e-6) == dpfeddro_epsilon(50, 0.5, 0.0, 1e-6)
    assert pftr_noise_std(0.0, 1.0, np.int64(7), 3, 1.0, 1e-5) == 0.0
    assert pftr_noise_multiplier(None, 1e-5, 3) == 0.0
    spent = pftr_privacy_spent(1.0, 1e-5, np.int64(3), groups=[("a", np.int64(1), 0.25),
                                                              ("b", 2, 0.75)])
    assert spent["n_releases"] == 3 and [r["count"] for r in spent["releases"]] == [1, 2]
    assert gaussian_epsilon([1.0, 2.0], 1e-5, counts=[1.0, 2]) == gaussian_epsilon(
        [1.0, 2.0], 1e-5, counts=[1, 2])
