"""make_tensor_regression and make_tensor_image_regression."""

import numpy as np
import pytest
import tensorly as tl

from skfed.datasets import make_tensor_image_regression, make_tensor_regression


def test_paper_design():
    X, y, groups, truth = make_tensor_regression(
        n_samples=[50, 100, 150, 200, 250], return_truth=True, random_state=0, coef_random_state=1
    )
    assert X.shape == (750, 50) and y.shape == (750, 25)
    assert np.bincount(groups).tolist() == [50, 100, 150, 200, 250]
    A0 = truth.shared_coef
    assert A0.shape == (5, 5, 10, 5)
    assert np.linalg.norm(A0) == pytest.approx(1.0)
    for s in range(4):
        assert np.linalg.matrix_rank(tl.unfold(A0, s)) == 3
    for B in truth.deviations:
        assert np.count_nonzero(B) == 50
        assert np.linalg.norm(B) == pytest.approx(0.5)
    # the responses follow the model with noise sd 0.1
    k = groups == 2
    resid = y[k] - X[k] @ truth.coef[2].reshape(25, 50).T
    assert np.std(resid) == pytest.approx(0.1, rel=0.05)
    # a fixed coefficient seed keeps the truth and redraws the rows
    _, _, _, same = make_tensor_regression(n_samples=10, return_truth=True, random_state=5,
                                           coef_random_state=1)
    np.testing.assert_array_equal(same.shared_coef, A0)


def test_scalar_response_and_errors():
    X, y, groups = make_tensor_regression(n_clients=2, n_samples=5, tensor_shape=(4, 3),
                                          output_shape=None, rank=(2, 2), n_nonzero=3,
                                          random_state=0)
    assert X.shape == (10, 12) and y.shape == (10,)
    with pytest.raises(ValueError, match="rank"):
        make_tensor_regression(tensor_shape=(4, 3), output_shape=None, rank=(1, 2))
    with pytest.raises(ValueError, match="n_nonzero"):
        make_tensor_regression(tensor_shape=(2, 2), output_shape=None, rank=(1, 1), n_nonzero=5)
    with pytest.raises(ValueError, match="n_samples"):
        make_tensor_regression(n_clients=2, n_samples=[3, 4, 5])


@pytest.mark.parametrize("kwargs, match", [
    ({"rank": (1.5, 1)}, "rank"),  # not truncated to (1, 1)
    ({"rank": ("a", 1)}, "rank"),
    ({"tensor_shape": (2.5, 3)}, "tensor_shape"),
    ({"noise": "a"}, "noise"),
    ({"noise": np.nan}, "noise"),
])
def test_tensor_regression_refuses_fractional_ranks_and_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_tensor_regression(**{"n_clients": 2, "n_samples": 10, "tensor_shape": (3, 3),
                                  "output_shape": None, "rank": (1, 1), "n_nonzero": 2,
                                  **kwargs}, random_state=0)


def test_tensor_regression_takes_integral_floats():
    kw = dict(n_clients=2, n_samples=10, output_shape=None, n_nonzero=2, random_state=0)
    a = make_tensor_regression(tensor_shape=(3.0, 3), rank=(1.0, 1), **kw)
    b = make_tensor_regression(tensor_shape=(3, 3), rank=(1, 1), **kw)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_image_setting():
    X, y, groups, truth = make_tensor_image_regression(return_truth=True, random_state=0)
    assert X.shape == (555, 1024) and y.shape == (555,)
    assert np.bincount(groups).tolist() == [80, 220, 255]
    assert np.linalg.matrix_rank(truth.shared_coef) == 2
    for B in truth.deviations:
        assert np.count_nonzero(B) == 16
        assert np.linalg.norm(B) == pytest.approx(0.5)
