"""The Bayes oracle of benchmarks/papers/pfedhgp_oracle.py against draws of its generator."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "papers" / "pfedhgp_oracle.py"
_spec = importlib.util.spec_from_file_location("pfedhgp_oracle", _path)
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

# tiny and on a short domain, so that every kernel correlates the points
TINY = dict(n_clients=2, n_outputs=2, n_train=3, n_test=2, domain=(0.0, 1.5))
N_DRAWS = 600


def _whitened_second_moment(scenario, as_scenario=None):
    """Mean over seeds of z z^T, z the whitened (train, test) vector of each draw.

    Each seed has its own loadings and inputs; whitening by that seed's true
    covariance makes z ~ N(0, I) (second moments only in C) if it is right.
    """
    S = 0.0
    for seed in range(N_DRAWS):
        truth = oracle.generator_truth(**TINY, scenario=scenario, random_state=seed)
        if as_scenario is not None:
            truth.scenario = as_scenario
        T = TINY["n_clients"]
        P = oracle._cat([oracle._points(truth, c, "train") for c in range(T)]
                        + [oracle._points(truth, c, "test") for c in range(T)])
        K = oracle.true_covariance(truth, P, P) + truth.noise**2 * np.eye(2 * len(P.x))
        y = np.concatenate([truth.data.y_train.ravel(), truth.data.y_test.ravel()])
        z = np.linalg.solve(np.linalg.cholesky(K), y)
        S = S + np.outer(z, z)
    return S / N_DRAWS


@pytest.mark.parametrize("scenario", ["A", "B", "C", "D"])
def test_true_covariance_whitens_generator_draws(scenario):
    # 20-dim vector, 600 draws: entries of the mean have sd 0.04-0.06 (observed max
    # deviation 0.13-0.15 at 500 draws, 0.07-0.09 at 1500)
    S = _whitened_second_moment(scenario)
    assert np.max(np.abs(S - np.eye(len(S)))) < 0.25
    assert np.trace(S) / len(S) == pytest.approx(1.0, abs=0.04)


def test_whitening_check_detects_a_wrong_covariance():
    # D's data under A's covariance (correlation of f_l with f_delta ignored)
    # (observed max deviation 0.47 at 500 and 1500 draws); B's under A's: ~6
    S = _whitened_second_moment("D", as_scenario="A")
    assert np.max(np.abs(S - np.eye(len(S)))) > 0.35


@pytest.mark.parametrize("pooled", [True, False])
def test_oracle_predictive_is_calibrated(pooled):
    # the standardized test errors of the posterior are N(0, I_Q) over draws
    S, errs = 0.0, 0
    for seed in range(300):
        truth = oracle.generator_truth(**TINY, scenario="D", random_state=seed)
        mean, cov, _ = oracle.oracle_predict(truth, pooled=pooled)
        z = np.linalg.solve(np.linalg.cholesky(cov), (truth.data.y_test - mean)[..., None])[..., 0]
        S = S + np.einsum("jq,jp->qp", z, z)
        errs += len(z)
    S = S / errs
    np.testing.assert_allclose(S, np.eye(2), atol=0.15)


def test_generator_truth_is_the_generators():
    truth = oracle.generator_truth(n_clients=3, n_outputs=4, n_train=20, n_test=30, scenario="C",
                                   random_state=7)
    assert truth.B_d.shape == (3, 4, 2) and np.all((truth.gamma >= 0.35) & (truth.gamma <= 0.6))
    np.testing.assert_array_equal(np.concatenate(truth.X), truth.data.X_train[:, 0])
