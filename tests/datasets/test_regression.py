import numpy as np
import pytest

from skfed.datasets import make_federated_regression


def test_shapes_truth_and_reproducibility():
    X, y, groups, coef, intercept = make_federated_regression(
        n_clients=3, n_samples=[5, 6, 7], n_features=4, noise=0.0, return_coef=True,
        random_state=0,
    )
    assert X.shape == (18, 4) and y.shape == (18,) and coef.shape == (3, 4)
    assert np.bincount(groups).tolist() == [5, 6, 7]
    np.testing.assert_allclose(y, np.sum(X * coef[groups], axis=1) + intercept[groups])
    X2, y2, g2 = make_federated_regression(n_clients=3, n_samples=[5, 6, 7], n_features=4,
                                           noise=0.0, random_state=0)
    np.testing.assert_array_equal(X, X2)


def test_heterogeneity_zero_means_one_model():
    _, _, _, coef, intercept = make_federated_regression(
        heterogeneity=0.0, return_coef=True, random_state=1
    )
    assert np.ptp(coef, axis=0).max() == 0 and np.all(intercept == 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_samples": [1, 2]}, "one entry per client"),
        ({"n_samples": 0}, ">= 1"),
        ({"n_clients": 0}, "n_clients"),
        ({"noise": -1.0}, "noise"),
        ({"n_samples": 2.5}, "integers"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_federated_regression(**kwargs)
