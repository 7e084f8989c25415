"""Generators of the pFedHGP studies."""

import numpy as np
import pytest

from skfed.datasets import make_hierarchical_gp, make_monitoring_stations, make_press_tonnage


@pytest.mark.parametrize("scenario", ["A", "B", "C", "D"])
def test_hierarchical_gp_shapes_and_structure(scenario):
    d = make_hierarchical_gp(n_train=20, n_test=50, scenario=scenario, random_state=0)
    assert d.X_train.shape == (120, 1) and d.y_train.shape == (120, 4)
    assert d.X_test.shape == (300, 1) and d.y_test.shape == (300, 4)
    assert np.all((d.X_train >= 0) & (d.X_train <= 10))
    np.testing.assert_allclose(d.X_test[:50, 0], np.linspace(0, 10, 50))
    resid = d.y_test - d.y_test_clean
    assert resid.std() == pytest.approx(0.05, rel=0.15)
    if scenario in ("A", "B", "D"):
        parts = d.components_test
        np.testing.assert_allclose(parts["global"] + parts["deviation"] + parts["local"],
                                   d.y_test_clean)
    # the global part is shared: identical on the test grid across clients
    g = d.components_test["global"]
    np.testing.assert_allclose(g[:50], g[50:100])


def test_hierarchical_gp_variances_match_the_kernels():
    # scalar model: Var f_g = 1, Var f_delta = phi, Var f_l = 1 (first latent scales)
    draws = [make_hierarchical_gp(n_clients=2, n_outputs=None, n_train=5, n_test=3, random_state=s)
             for s in range(300)]
    for name, target in (("global", 1.0), ("deviation", 1.2), ("local", 1.0)):
        v = np.var(np.concatenate([d.components_test[name] for d in draws]))
        assert v == pytest.approx(target, rel=0.2)


def test_hierarchical_gp_errors_and_reproducibility():
    with pytest.raises(ValueError, match="scenario"):
        make_hierarchical_gp(scenario="E")
    with pytest.raises(ValueError, match="n_clients"):
        make_hierarchical_gp(n_clients=0)
    a = make_hierarchical_gp(n_train=10, n_test=10, random_state=3)
    b = make_hierarchical_gp(n_train=10, n_test=10, random_state=3)
    np.testing.assert_array_equal(a.y_train, b.y_train)


def test_press_and_monitoring_generators():
    X, y, t = make_press_tonnage(n_cycles=(5, 5, 5), n_points=50, random_state=0)
    assert X.shape == (15, 50) and t.shape == (50,)
    # a fault lowers its station's peak
    at = np.argmin(np.abs(t - 0.2))
    assert X[y == 1].mean(0)[at] < X[y == 0].mean(0)[at]
    X, y, groups, zones = make_monitoring_stations(n_stations=6, n_times=40, random_state=0)
    assert X.shape == (240, 1) and zones.tolist() == [0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="n_cycles"):
        make_press_tonnage(n_cycles=(1,) * 6)
