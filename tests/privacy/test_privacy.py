import math

import dp_accounting
import numpy as np
import pytest

from skfed.privacy import (
    calibrate_noise_multiplier,
    check_privacy_budget,
    classical_gaussian_sigma,
    epsilon_spent,
    gaussian_event,
    gaussian_mechanism,
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
