import warnings

import numpy as np
import pytest
from sklearn.model_selection import KFold

from skfed.model_selection import WithinClientKFold


def test_every_client_in_every_fold_and_partition():
    groups = np.array(["a"] * 7 + ["b"] * 5 + ["c"] * 9)
    X = np.zeros((groups.size, 2))
    cv = WithinClientKFold(n_splits=3, shuffle=True, random_state=0)
    tests = []
    for train, test in cv.split(X, groups=groups):
        assert set(groups[train]) == set(groups[test]) == {"a", "b", "c"}
        assert np.intersect1d(train, test).size == 0
        assert train.size + test.size == groups.size
        tests.append(test)
    np.testing.assert_array_equal(np.sort(np.concatenate(tests)), np.arange(groups.size))
    # fold sizes per client differ by at most one
    for g in "abc":
        sizes = [np.sum(groups[t] == g) for t in tests]
        assert max(sizes) - min(sizes) <= 1
    assert cv.get_n_splits() == 3


def test_deterministic_and_matches_kfold_for_one_client():
    X = np.zeros((10, 1))
    ours = [te.tolist() for _, te in WithinClientKFold(5).split(X)]
    ref = [te.tolist() for _, te in KFold(5).split(X)]
    assert ours == ref
    a = [te.tolist() for _, te in WithinClientKFold(2, shuffle=True, random_state=3).split(X)]
    b = [te.tolist() for _, te in WithinClientKFold(2, shuffle=True, random_state=3).split(X)]
    assert a == b


def test_client_with_fewer_rows_than_folds():
    groups = np.array([0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="client 1 has 2 row.*small_clients='train'"):
        list(WithinClientKFold(3, small_clients="error").split(np.zeros((5, 1)), groups=groups))
    with pytest.raises(ValueError, match="n_splits"):
        list(WithinClientKFold(1).split(np.zeros((5, 1)), groups=groups))
    # no client can fill every fold: nothing to test, whatever the option
    with pytest.raises(ValueError, match="no client has that many"):
        list(WithinClientKFold(5, small_clients="train").split(np.zeros((5, 1)), groups=groups))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"n_splits": "a"}, ValueError, "n_splits"),
    ({"n_splits": 1}, ValueError, "n_splits"),
    ({"n_splits": 2.5}, ValueError, "n_splits"),
    ({"n_splits": True}, ValueError, "n_splits"),
    ({"shuffle": "no", "random_state": 0}, TypeError, "shuffle must be True or False"),
    ({"shuffle": 1}, TypeError, "shuffle must be True or False"),
    # scikit-learn's KFold message: a seed without shuffling has no effect
    ({"random_state": 0}, ValueError, "Setting a random_state has no effect since shuffle is "
                                      "False. You should leave random_state"),
    ({"small_clients": "drop"}, ValueError, "small_clients"),
])
def test_refuses_bad_parameters_at_construction_as_kfold(kwargs, error, match):
    with pytest.raises(error, match=match):
        WithinClientKFold(**kwargs)
    if "small_clients" not in kwargs:  # scikit-learn's KFold refuses the same, as early
        with pytest.raises(error):
            KFold(**kwargs)


def test_get_n_splits_and_split_revalidate_parameters():
    cv = WithinClientKFold(3)
    cv.n_splits = "a"  # set after construction: get_n_splits (read first by GridSearchCV)
    with pytest.raises(ValueError, match="n_splits"):
        cv.get_n_splits()
    with pytest.raises(ValueError, match="n_splits"):
        list(cv.split(np.zeros((6, 1))))
    cv = WithinClientKFold(3)
    cv.random_state = 0
    with pytest.raises(ValueError, match="random_state"):
        list(cv.split(np.zeros((6, 1))))
    assert WithinClientKFold(np.int64(4), shuffle=np.True_).get_n_splits() == 4


def test_small_clients_train_by_default_with_a_warning():
    groups = np.array([0] * 6 + [1] * 2 + [2] * 5 + [3])
    X = np.zeros((groups.size, 1))
    with pytest.warns(UserWarning, match=r"2 of 4 clients .* n_splits=5.*\[1, 3\]") as record:
        folds = list(WithinClientKFold().split(X, groups=groups))
    assert len(record) == 1 and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        silent = list(WithinClientKFold(small_clients="train").split(X, groups=groups))
    for (train, test), (train_s, test_s) in zip(folds, silent):
        np.testing.assert_array_equal(test, test_s)
        np.testing.assert_array_equal(train, train_s)
        assert set(groups[test]) == {0, 2}
        assert {6, 7, 13} <= set(train.tolist())


def test_requests_groups_by_default():
    routing = WithinClientKFold().get_metadata_routing()
    assert routing.split.requests["groups"] is True


def test_small_clients_train_keeps_them_in_every_training_fold():
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    cv = WithinClientKFold(3, small_clients="train")
    folds = list(cv.split(np.zeros((8, 1)), groups=groups))
    assert len(folds) == 3
    for train, test in folds:
        assert set(groups[test]) == {0, 2}
        assert {3, 4} <= set(train.tolist())
    with pytest.raises(ValueError, match="'warn', 'train' or 'error'"):
        list(WithinClientKFold(3, small_clients="drop").split(np.zeros((8, 1)), groups=groups))
