"""Which aggregates of its own rows a client may send in the clear.

No message may carry a raw value of any row (``doc/releases.md``). A sum of
one row is that row, and from the sum and the sum of squares of two numbers
both numbers follow (they are the roots of ``t^2 - s t + (s^2 - q) / 2``).
So a client sends per-column sums only if it has at least
:data:`MIN_ROWS_SUM` rows, and sums together with sums of squares only if it
has at least :data:`MIN_ROWS_MOMENTS`; a smaller client sends its row count
alone and is left out of the pooled statistic. Clients send sums, not means
(a mean of a constant column is a raw value; the sum of ``n >= 2`` equal
values is not).

Sums of products (``X^T X``, ``X^T y``) count the rows whose *product* is
nonzero: where an indicator column is 1 on a single row, ``sum_i x_ij y_i``
is that row's ``y``. A client sends them only if every entry is a sum of no
or of at least :data:`MIN_ROWS_MOMENTS` nonzero products
(:func:`sends_products`).
"""

import warnings

import numpy as np

from ..utils._validation import user_stacklevel

__all__ = ["MIN_ROWS_MOMENTS", "MIN_ROWS_SUM", "sends_moments", "sends_products",
           "sends_sums", "too_few_rows_warning"]

MIN_ROWS_SUM = 2
MIN_ROWS_MOMENTS = 3


def sends_sums(n_rows):
    """Whether a client of ``n_rows`` rows may send per-column sums."""
    return int(n_rows) >= MIN_ROWS_SUM


def sends_moments(n_rows):
    """Whether a client of ``n_rows`` rows may send sums and sums of squares."""
    return int(n_rows) >= MIN_ROWS_MOMENTS


def sends_products(A, B=None):
    """Whether a client may send ``A^T B`` (``A^T A`` if ``B`` is None).

    Every entry must be a sum of no nonzero products (it is then exactly 0 and
    carries no row's value) or of at least :data:`MIN_ROWS_MOMENTS` of them.
    """
    nz_a = (np.asarray(A) != 0).reshape(len(A), -1).astype(np.float64)
    nz_b = nz_a if B is None else (np.asarray(B) != 0).reshape(len(B), -1).astype(np.float64)
    counts = nz_a.T @ nz_b
    return bool(np.all((counts == 0) | (counts >= MIN_ROWS_MOMENTS)))


def too_few_rows_warning(what, minimum, fallback):
    """Warn that no client had ``minimum`` rows to contribute to ``what``."""
    warnings.warn(
        f"no client has {minimum} or more rows, so none sent the sums {what} needs (a "
        f"smaller client's sums would be its raw values); {fallback}.",
        UserWarning, stacklevel=user_stacklevel(),
    )
