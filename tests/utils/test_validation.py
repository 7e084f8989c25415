import numpy as np
import pytest

from skfed.utils import check_groups, map_clients


def test_check_groups_labels():
    clients, idx = check_groups(["b", "a", "b", "c"], 4)
    assert clients.tolist() == ["a", "b", "c"] and idx.tolist() == [1, 0, 1, 2]
    clients, idx = check_groups(None, 3)
    assert clients.tolist() == [0] and idx.tolist() == [0, 0, 0]
    clients, idx = check_groups(np.array([[3], [1]]), 2)  # column vector is accepted
    assert clients.tolist() == [1, 3]


@pytest.mark.parametrize(
    "groups, n, match",
    [
        ([0, 1], 3, "groups has 2 labels but X has 3 rows"),
        ([[0, 1], [1, 0]], 2, "groups must be 1-D"),
        ([0.0, np.nan], 2, "NaN"),
        (np.array([None, 1], dtype=object), 2, "None"),
        (np.array([1, "a"], dtype=object), 2, "one comparable type"),
    ],
)
def test_check_groups_errors(groups, n, match):
    with pytest.raises(ValueError, match=match):
        check_groups(groups, n)


def test_map_clients():
    clients = np.array(["a", "b"])
    assert map_clients(["b", "z", "a"], clients, 3).tolist() == [1, -1, 0]
    assert map_clients(None, clients, 2).tolist() == [-1, -1]
    with pytest.raises(ValueError, match=r"not seen in fit: \['z'\]"):
        map_clients(["b", "z"], clients, 2, unknown_client="error")
    with pytest.raises(ValueError, match="unknown_client"):
        map_clients(["b"], clients, 1, unknown_client="drop")
    assert map_clients([5, 1], np.array([1, 2]), 2).tolist() == [-1, 0]
