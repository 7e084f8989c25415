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


HGP = dict(n_clients=2, n_outputs=2, n_train=5, n_test=5)


@pytest.mark.parametrize("kwargs, match", [
    ({"global_lengthscales": (0, 1)}, "global_lengthscales"),  # NaN data otherwise
    ({"global_lengthscales": (-1, 1)}, "global_lengthscales"),
    ({"local_lengthscales": (np.nan, 0.45)}, "local_lengthscales"),
    ({"local_lengthscales": ("a", 0.45)}, "local_lengthscales"),
    ({"global_scales": (-1.0, 0.7)}, "global_scales"),
    ({"local_scales": (1.0, np.inf)}, "local_scales"),
    ({"n_outputs": None, "global_lengthscales": (0.0, 2.5)}, "global_lengthscales"),
    ({"domain": (0, np.inf)}, "domain"),
    ({"domain": (5.0, 1.0)}, "domain"),
    ({"domain": (0.0,)}, "domain"),
    ({"noise": np.nan}, "noise"),
    ({"noise": "a"}, "noise"),
    ({"phi": -1.0}, "phi"),
])
def test_hierarchical_gp_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_hierarchical_gp(**{**HGP, **kwargs}, random_state=0)


def test_hierarchical_gp_scalar_output_ignores_the_unused_latents():
    # n_outputs=None uses the first entry of each tuple: the others are not checked
    d = make_hierarchical_gp(**{**HGP, "n_outputs": None}, global_lengthscales=(1.8, -1.0),
                             random_state=0)
    assert np.all(np.isfinite(d.y_train))


@pytest.mark.parametrize("kwargs, match", [
    ({"n_cycles": 5}, "n_cycles"),
    ({"n_cycles": (2.5, 3)}, "n_cycles"),  # not truncated to 2 cycles
    ({"n_cycles": (3, 0)}, "n_cycles"),
    ({"n_cycles": ()}, "n_cycles"),
    ({"fault_depth": np.nan}, "fault_depth"),
    ({"fault_depth": 1.5}, "fault_depth"),
    ({"cycle_variation": -1.0}, "cycle_variation"),
    ({"noise": -1.0}, "noise"),
    ({"noise": np.inf}, "noise"),
])
def test_press_tonnage_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_press_tonnage(**{"n_cycles": (3, 2), "n_points": 10, **kwargs}, random_state=0)


@pytest.mark.parametrize("noise", [np.nan, -1.0, "a"])
def test_monitoring_stations_refuses_bad_noise(noise):
    with pytest.raises(ValueError, match="noise"):
        make_monitoring_stations(n_stations=4, n_zones=2, n_times=10, noise=noise)


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


@pytest.mark.parametrize("scenario", ["A", "B", "C", "D"])
@pytest.mark.parametrize("n_outputs", [None, 3])
def test_hierarchical_gp_truth_reproduces_the_clean_targets(scenario, n_outputs):
    kw = dict(n_clients=3, n_outputs=n_outputs, n_train=12, n_test=9, scenario=scenario,
              random_state=5)
    plain = make_hierarchical_gp(**kw)
    d = make_hierarchical_gp(**kw, return_truth=True)
    assert "truth" not in plain
    np.testing.assert_array_equal(d.y_train, plain.y_train)  # the same draws either way
    t, n, nt = d.truth, 12, 9
    R = t.h_g.shape[1]
    assert t.h_g.shape == (3 * n + nt, R) and t.h_d.shape == t.h_l.shape == (3, n + nt, R)
    np.testing.assert_array_equal(t.x_train.ravel(), d.X_train[:, 0])
    assert np.all(t.jit_g > 0) and np.all(t.jit_d > 0) and np.all(t.jit_l > 0)
    assert np.all(t.gamma > 0) if scenario == "C" else np.all(t.gamma == 0)
    for i in range(3):
        idx = np.r_[i * n:(i + 1) * n, 3 * n:3 * n + nt]
        f_g, f_d, f_l = t.h_g[idx] @ t.B_g.T, t.h_d[i] @ t.B_d[i].T, t.h_l[i] @ t.B_l[i].T
        if scenario == "D":
            f_l = 0.5 * f_d + np.sqrt(0.75) * f_l
        clean = f_g + f_d + f_l + (t.gamma[i] * f_g * f_d if scenario == "C" else 0.0)
        clean = clean[:, 0] if n_outputs is None else clean
        np.testing.assert_allclose(clean[n:], d.y_test_clean[i * nt:(i + 1) * nt], rtol=1e-12,
                                   atol=1e-12)
        assert np.abs(clean[:n] - d.y_train[i * n:(i + 1) * n]).max() < 6 * d.noise
