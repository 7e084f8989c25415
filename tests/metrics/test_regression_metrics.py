"""Probabilistic regression metrics against scipy references."""

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import multivariate_normal, norm

from skfed.metrics import (
    calibration_error,
    covariance_error,
    crps_gaussian,
    gaussian_nll,
    interval_coverage,
    interval_width,
)


def test_nll_matches_scipy():
    rng = np.random.default_rng(0)
    y, mu, sd = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.uniform(0.5, 2, (5, 3))
    ref = -np.mean(norm.logpdf(y, mu, sd).sum(1))
    assert gaussian_nll(y, mu, sd) == pytest.approx(ref)
    A = rng.normal(size=(5, 3, 3))
    cov = A @ A.transpose(0, 2, 1) + np.eye(3)
    ref = -np.mean([multivariate_normal(mu[i], cov[i]).logpdf(y[i]) for i in range(5)])
    assert gaussian_nll(y, mu, y_cov=cov) == pytest.approx(ref)


def test_crps_matches_its_integral_definition():
    y, mu, sd = 0.7, 0.2, 1.3
    ref = integrate.quad(lambda t: (norm.cdf(t, mu, sd) - (t >= y)) ** 2, -20, 20, points=[y])[0]
    assert crps_gaussian([y], [mu], [sd]) == pytest.approx(ref, rel=1e-6)


def test_coverage_width_calibration():
    rng = np.random.default_rng(1)
    y = rng.normal(size=20000)
    mu, sd = np.zeros_like(y), np.ones_like(y)
    assert interval_coverage(y, mu, sd) == pytest.approx(0.95, abs=0.01)
    assert interval_width(mu, sd) == pytest.approx(2 * 1.959964, rel=1e-5)
    assert calibration_error(y, mu, sd) < 0.01
    assert calibration_error(y, mu, 0.3 * sd) > 0.2
    with pytest.raises(ValueError, match="y_std"):
        interval_coverage(y, mu, -sd)


def test_covariance_error_zero_for_exact_covariance():
    rng = np.random.default_rng(2)
    clean = rng.normal(size=(200, 2))
    cov = np.broadcast_to(0.01 * np.eye(2), (200, 2, 2))
    assert covariance_error(clean, 0.01, clean, cov) == pytest.approx(0.0, abs=1e-12)
