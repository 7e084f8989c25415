import numpy as np
import pytest

from skfed.datasets import (
    available_uci,
    dirichlet_client_split,
    flip_labels,
    load_uci,
    make_correlated_faults,
    make_pump_faults,
)


def test_flip_labels_exact_count_and_always_different():
    y = np.repeat(np.array(["a", "b", "c"]), 100)
    y_noisy, flipped = flip_labels(y, 0.15, random_state=0)
    assert flipped.sum() == 45
    assert np.all(y_noisy[flipped] != y[flipped])
    np.testing.assert_array_equal(y_noisy[~flipped], y[~flipped])
    with pytest.raises(ValueError, match="fraction"):
        flip_labels(y, 1.5)


def test_dirichlet_split_keeps_every_class_on_every_client():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 120)
    groups = dirichlet_client_split(y, 4, concentration=0.5, random_state=1)
    assert groups.shape == y.shape
    counts = np.array([[np.sum((groups == g) & (y == k)) for k in range(3)] for g in range(4)])
    assert counts.min() >= 1
    assert counts.sum() == 120
    # imbalanced: the class shares differ across clients
    shares = counts / counts.sum(axis=0)
    assert shares.std() > 0.05
    with pytest.raises(ValueError, match="fewer than"):
        dirichlet_client_split(np.array([0, 0, 1, 1]), 4, random_state=0)


def test_pump_faults_shapes_counts_and_dominance():
    X, y, groups, X_test, y_test = make_pump_faults(random_state=0)
    assert X.shape == (1600, 13) and X_test.shape == (400, 13)
    assert np.bincount(groups).tolist() == [400] * 4
    assert np.bincount(np.r_[y_test, y]).sum() == 2000
    # each client is dominated by one class (before the 15% label flips)
    for g in range(4):
        assert np.bincount(y[groups == g], minlength=4).max() / 400 > 0.55
    again = make_pump_faults(random_state=0)
    np.testing.assert_array_equal(again[0], X)


def test_correlated_faults_overlap_controls_difficulty():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    scores = {}
    for overlap in ("strong", "low"):
        X, y, groups, X_test, y_test = make_correlated_faults(overlap, random_state=0)
        assert X.shape == (860, 8) and np.bincount(y_test).tolist() == [54] * 4
        assert set(groups.tolist()) == {0, 1, 2, 3}
        scores[overlap] = LinearDiscriminantAnalysis().fit(X, y).score(X_test, y_test)
    assert scores["low"] > scores["strong"]
    with pytest.raises(ValueError, match="overlap"):
        make_correlated_faults("none")


@pytest.mark.parametrize("y, match", [
    (np.array([0.0, 1, 2, np.nan] * 5), "y contains missing labels"),
    (np.array([0, 1, None, 1] * 5, dtype=object), "y contains missing labels"),
    (np.c_[np.arange(6) % 3, np.arange(6) % 3], "y must be 1-D"),
    (np.array([]), "y is empty"),
])
def test_label_tools_refuse_bad_y(y, match):
    with pytest.raises(ValueError, match=match):
        flip_labels(y, 0.5, random_state=0)
    with pytest.raises(ValueError, match=match):
        dirichlet_client_split(y, 2, random_state=0)


@pytest.mark.parametrize("concentration", [np.inf, np.nan, 0, -1.0, "a", True])
def test_dirichlet_split_refuses_bad_concentration(concentration):
    y = np.repeat([0, 1, 2], 10)
    with pytest.raises(ValueError, match="concentration"):
        dirichlet_client_split(y, 3, concentration=concentration)


PUMP = dict(n_per_class=(20, 20, 20, 20), n_test=20)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_per_class": (20, 20.5, 20, 20)}, "n_per_class"),  # not truncated to 20
    ({"n_per_class": (20, 20, 20)}, "n_per_class"),
    ({"n_per_class": (20, 0, 20, 20)}, "n_per_class"),
    ({"test_noise": np.nan}, "test_noise"),
    ({"test_noise": -1.0}, "test_noise"),
    ({"train_noise": -1.0}, "train_noise"),
    ({"train_noise": np.inf}, "train_noise"),
    ({"test_offset": np.nan}, "test_offset"),
    ({"n_offset_features": -1}, "n_offset_features"),
    ({"n_offset_features": 2.5}, "n_offset_features"),
    ({"dominant_fraction": "a"}, "dominant_fraction"),
    ({"n_clients": 100}, r"n_clients must be at most sum\(n_per_class\) - 2 = 78"),
    ({"n_test": 2.5}, "n_test"),
    ({"n_test": 76}, r"n_test must be in \(0, 76\), got 76"),
])
def test_pump_faults_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_pump_faults(**{**PUMP, **kwargs}, random_state=0)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_train": (30, 20)}, "n_train"),
    ({"n_train": (0, 20, 20, 20)}, "n_train"),  # the class would silently vanish
    ({"n_train": (30.5, 20, 20, 20)}, "n_train"),
    ({"n_test": 0}, "n_test"),
    ({"n_test": -4}, "n_test"),
    ({"n_test": 6}, "n_test must be a multiple of 4"),
    ({"n_train": (30, 20, 20, 20), "n_clients": 100}, "n_clients must be at most the 90"),
    ({"label_noise": 1.0}, "label_noise"),
    ({"label_noise": np.nan}, "label_noise"),
])
def test_correlated_faults_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_correlated_faults(**{"n_test": 20, **kwargs}, random_state=0)


def test_uci_loaders():
    X, y = load_uci("iris")
    assert X.shape == (150, 4)
    assert {"iris", "wine"} <= set(available_uci())
    with pytest.raises(ValueError, match="not available offline"):
        load_uci("seeds")
    with pytest.raises(ValueError, match="name"):
        load_uci("mnist")
