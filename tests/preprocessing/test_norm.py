import numpy as np
import pytest

from skfed import DPFedDROClassifier
from skfed.preprocessing import NormClipper, make_minmax_l2_pipeline


def test_clip_only_shrinks_long_rows():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 6)) * rng.uniform(0, 3, (500, 1))
    Xt = NormClipper(max_norm=1.5).fit_transform(X)
    norms, new = np.linalg.norm(X, axis=1), np.linalg.norm(Xt, axis=1)
    assert np.all(new <= 1.5)
    np.testing.assert_allclose(Xt[norms <= 1.5], X[norms <= 1.5])
    np.testing.assert_allclose(new[norms > 1.5], 1.5)
    # direction is kept
    cos = np.sum(X * Xt, axis=1) / (norms * new)
    np.testing.assert_allclose(cos, 1.0)


def test_normalize_mode_and_zero_rows():
    X = np.array([[0.0, 0.0], [0.3, 0.4], [30.0, 40.0]])
    Xt = NormClipper(mode="normalize").fit_transform(X)
    np.testing.assert_allclose(np.linalg.norm(Xt, axis=1), [0.0, 1.0, 1.0])


def test_output_feeds_the_private_estimator():
    rng = np.random.default_rng(1)
    X = rng.uniform(-50, 50, (60, 4))
    y = rng.integers(0, 3, 60)
    Xt = make_minmax_l2_pipeline().fit_transform(X)
    assert np.all(np.linalg.norm(Xt, axis=1) <= 1.0)
    # the paper's protocol takes the rows as given (standardize=False): only the scaled ones
    DPFedDROClassifier(n_rounds=2, standardize=False).fit(Xt, y)
    with pytest.raises(ValueError, match="norm_bound"):
        DPFedDROClassifier(n_rounds=2, standardize=False).fit(X, y)


@pytest.mark.parametrize("params", [dict(max_norm=0), dict(max_norm=-1.0), dict(mode="x")])
def test_bad_parameters(params):
    with pytest.raises(ValueError):
        NormClipper(**params).fit(np.ones((3, 2)))


def _scaled_norm(X):
    peak = np.max(np.abs(X), axis=1)
    return peak * np.linalg.norm(X / np.where(peak > 0, peak, 1)[:, None], axis=1)


@pytest.mark.parametrize("dtype, big", [(np.float64, 1e300), (np.float64, 1.7e308),
                                        (np.float32, 3e38)])
@pytest.mark.parametrize("mode", ["clip", "normalize"])
def test_huge_finite_rows_are_scaled_not_zeroed(dtype, big, mode):
    # the plain norm of [1e300, 1e300] overflows; the row used to become [0, 0]
    X = np.array([[big, big], [big, -big / 2], [3.0, 4.0]], dtype=dtype)
    Xt = NormClipper(max_norm=1.0, mode=mode).fit_transform(X)
    assert Xt.dtype == dtype
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(Xt[0], [2 ** -0.5, 2 ** -0.5], rtol=rtol)
    np.testing.assert_allclose(Xt[1], np.array([2.0, -1.0]) / 5 ** 0.5, rtol=rtol)
    np.testing.assert_allclose(Xt[2], [0.6, 0.8], rtol=rtol)
    assert np.all(np.linalg.norm(Xt.astype(np.float64), axis=1) <= 1.0)


def test_tiny_rows_and_huge_bounds():
    # the plain norm of [1e-300, 1e-300] underflows to 0: normalize used to leave it
    tiny = np.array([[1e-300, 1e-300], [5e-324, 0.0]])
    Xt = NormClipper(mode="normalize").fit_transform(tiny)
    np.testing.assert_allclose(Xt, [[2 ** -0.5, 2 ** -0.5], [1.0, 0.0]], rtol=1e-12)
    np.testing.assert_array_equal(NormClipper().fit_transform(tiny), tiny)  # clip: unchanged
    # a bound near the float range is respected by the (overflow-free) norm
    X = np.array([[1e308, 1e308], [1e300, 0.0]])
    Xt = NormClipper(max_norm=1e308).fit_transform(X)
    assert np.all(_scaled_norm(Xt) <= 1e308)
    np.testing.assert_allclose(Xt[0], [1e308 * 2 ** -0.5] * 2, rtol=1e-12)
    np.testing.assert_array_equal(Xt[1], X[1])
