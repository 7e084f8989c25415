"""The release rules of :mod:`skfed.federated._release` on small arrays."""

import numpy as np
import pytest

from skfed.federated._release import (
    MIN_ROWS_MOMENTS,
    MIN_ROWS_SUM,
    sends_curve,
    sends_gram,
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


def test_gram_needs_three_rows_and_enough_nonzero_products():
    rng = np.random.default_rng(0)
    for n in range(1, 6):
        X, y = rng.normal(size=(n, 2)), rng.normal(size=n)
        assert sends_gram(X, y) == (n >= MIN_ROWS_MOMENTS), n
    # two indicator columns set together on two rows: their product is a sum of two
    X = np.column_stack([np.linspace(0.5, 1.5, 8), _column(8, 4), np.roll(_column(8, 4), 2)])
    y = np.linspace(-1.0, 1.0, 8) + 0.1
    assert sends_moments(X, y) and not sends_products(X) and not sends_gram(X, y)
    # y nonzero on two rows puts those rows' x_ij y_i in X^T y
    assert not sends_gram(X[:, :1], _column(8, 2))


def test_gram_is_the_linear_mean_rule():
    # the rule the GP linear mean applied before sends_gram, on sparse random rows
    rng = np.random.default_rng(1)
    for _ in range(200):
        n, d = rng.integers(1, 7), rng.integers(1, 4)
        X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.6)
        y = rng.normal(size=(n, 2) if rng.random() < 0.5 else n)
        y = y * (rng.random(y.shape) < 0.8)
        before = (sends_moments(X, y) and sends_products(X) and sends_products(X, y)
                  and (y.ndim == 1 or sends_products(y)))
        assert sends_gram(X, y) == before


def test_curve_counts_unknowns_against_values():
    assert not sends_curve(2, 1, 61) and not sends_curve(61, 1, 61)
    assert sends_curve(62, 1, 61) and sends_curve(31, 2, 61) and not sends_curve(30, 2, 61)
    with pytest.raises(TypeError, match="n_rows"):
        sends_curve(2.0, 1, 61)
    with pytest.raises(ValueError, match="n_values"):
        sends_curve(2, 1, -1)
