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


def test_uci_loaders():
    X, y = load_uci("iris")
    assert X.shape == (150, 4)
    assert {"iris", "wine"} <= set(available_uci())
    with pytest.raises(ValueError, match="not available offline"):
        load_uci("seeds")
    with pytest.raises(ValueError, match="name"):
        load_uci("mnist")
