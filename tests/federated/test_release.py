"""The release rules of :mod:`skfed.federated._release` on small arrays."""

import numpy as np
import pytest

from skfed.federated._release import (
    MIN_ROWS_MOMENTS,
    MIN_ROWS_SUM,
    sends_moments,
    sends_products,
    sends_sums,
)


def _column(n_rows, n_nonzero):
    col = np.zeros(n_rows)
    col[:n_nonzero] = np.arange(1.0, n_nonzero + 1.0)
    return col


@pytest.mark.parametrize("check, minimum", [(sends_sums, MIN_ROWS_SUM),
                                            (sends_moments, MIN_ROWS_MOMENTS)])
def test_each_column_needs_no_or_enough_nonzero_values(check, minimum):
    dense = np.linspace(0.5, 1.5, 10)
    for n_nonzero in range(11):
        X = np.column_stack([dense, _column(10, n_nonzero)])
        assert check(X) == (n_nonzero == 0 or n_nonzero >= minimum), n_nonzero
        # y is checked alike, 1-D or 2-D, and any failing array fails the client
        assert check(dense, X[:, 1]) == check(X)
        assert check(X[:, 1:], dense) == check(X)


def test_row_count_still_counts():
    assert not sends_sums(np.zeros((1, 3)))  # a zero row is still a row's value
    assert sends_sums(np.zeros((2, 3)))
    assert not sends_moments(np.ones((2, 1)))
    assert sends_moments(np.ones((3, 1)))


def test_products_include_the_columns():
    # the diagonal of X^T X counts each column's nonzero values
    X = np.column_stack([np.ones(6), _column(6, 2)])
    assert not sends_products(X) and not sends_moments(X)


def test_bad_arguments():
    with pytest.raises(TypeError, match="not a row count"):
        sends_sums(5)
    with pytest.raises(TypeError, match="at least one array"):
        sends_moments()
    with pytest.raises(ValueError, match="row count"):
        sends_sums(np.ones((3, 1)), np.ones(4))
