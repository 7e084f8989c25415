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
    DPFedDROClassifier(n_rounds=2).fit(Xt, y)
    with pytest.raises(ValueError, match="norm_bound"):
        DPFedDROClassifier(n_rounds=2).fit(X, y)


@pytest.mark.parametrize("params", [dict(max_norm=0), dict(max_norm=-1.0), dict(mode="x")])
def test_bad_parameters(params):
    with pytest.raises(ValueError):
        NormClipper(**params).fit(np.ones((3, 2)))
