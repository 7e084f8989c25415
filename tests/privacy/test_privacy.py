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
