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


Y3, M3, S3 = np.array([1.0, 2, 3]), np.array([1.1, 2, 2.9]), np.array([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: interval_width(M3, -S3), "y_std"),
        (lambda: interval_width(M3, S3[:2]), "y_mean and y_std"),
        (lambda: interval_width(M3, S3, level=2), "level"),
        (lambda: interval_width([], []), "empty"),
        (lambda: interval_coverage(Y3, M3, S3, level=1.5), "level"),
        (lambda: interval_coverage(Y3, M3, S3, level=np.nan), "level"),
        (lambda: interval_coverage(Y3, M3, S3, level="a"), "level"),
        (lambda: interval_coverage(Y3, M3, S3, level=True), "level"),
        (lambda: interval_coverage(Y3, M3, S3, level=0), "level"),
        (lambda: calibration_error(Y3, M3, S3, levels=[0, 1.5]), "levels"),
        (lambda: calibration_error(Y3, M3, S3, levels=0.5), "levels"),
        (lambda: calibration_error(Y3, M3, S3, levels=[]), "levels"),
        (lambda: calibration_error(Y3, M3, S3, levels=["a"]), "levels"),
        (lambda: crps_gaussian([], [], []), "empty"),
        (lambda: gaussian_nll([], [], []), "empty"),
        (lambda: interval_coverage([], [], []), "empty"),
        (lambda: calibration_error([], [], []), "empty"),
        (lambda: crps_gaussian(["a"], [0.0], [1.0]), "y_true"),
    ],
)
def test_interval_metrics_refuse_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _multi():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(5, 2))
    return y, y + 0.1, np.tile(np.eye(2), (5, 1, 1)) * 0.1


@pytest.mark.parametrize(
    "args, match",
    [
        (lambda y, m, c: dict(y_true=y, y_mean=m, y_cov=c * np.nan), "y_cov"),
        (lambda y, m, c: dict(y_true=y, y_mean=m, y_cov=-c), "y_cov must be positive definite"),
        (lambda y, m, c: dict(y_true=y, y_mean=m, y_cov=c + [[0, 5.0], [0, 0]]), "symmetric"),
        (lambda y, m, c: dict(y_true=y, y_mean=m, y_cov=c[:, :1]), "y_cov"),
        (lambda y, m, c: dict(y_true=y * np.nan, y_mean=m, y_cov=c), "y_true"),
        (lambda y, m, c: dict(y_true=y, y_mean=m[:3], y_cov=c), "y_true and y_mean"),
        (lambda y, m, c: dict(y_true=y[:0], y_mean=m[:0], y_cov=c[:0]), "empty"),
        (lambda y, m, c: dict(y_true=y, y_mean=m, y_std=np.ones_like(y), y_cov=c),
         "y_std or y_cov"),
    ],
)
def test_gaussian_nll_with_cov_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        gaussian_nll(**args(*_multi()))


def test_gaussian_nll_needs_std_or_cov():
    with pytest.raises(ValueError, match="y_std or y_cov"):
        gaussian_nll([0.0], [0.0])


@pytest.mark.parametrize(
    "args, match",
    [
        (lambda y, m, c: (y[:, 0], 0.1, m[:, 0], c[:, :1, :1]), "y_clean and y_mean"),
        (lambda y, m, c: (y, 0.1, m[:3], c), "y_clean and y_mean"),
        (lambda y, m, c: (y, 0.1, m, c[:3]), "y_cov"),
        (lambda y, m, c: (y, 0.1, m, c * np.nan), "y_cov"),
        (lambda y, m, c: (y * np.nan, 0.1, m, c), "y_clean"),
        (lambda y, m, c: (y[:0], 0.1, m[:0], c[:0]), "empty"),
        (lambda y, m, c: (y, -0.1, m, c), "noise_var"),
        (lambda y, m, c: (y, np.nan, m, c), "noise_var"),
        (lambda y, m, c: (y, "a", m, c), "noise_var"),
        (lambda y, m, c: (y, True, m, c), "noise_var"),
        (lambda y, m, c: (y, np.full(2, 0.1), m, c), "noise_var"),
    ],
)
def test_covariance_error_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        covariance_error(*args(*_multi()))


def test_covariance_error_accepts_numpy_noise_var():
    y, mu, cov = _multi()
    ref = covariance_error(y, 0.1, mu, cov)
    assert covariance_error(y, np.float32(0.1), mu, cov) == pytest.approx(ref, abs=1e-6)
    assert covariance_error(y, np.array(0.1), mu, cov) == ref
    assert covariance_error(y, 0, mu, cov) >= 0
