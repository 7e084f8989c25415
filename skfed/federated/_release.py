"""Which aggregates of its own rows a client may send in the clear.

No message may carry a raw value of any row (``doc/releases.md``). A sum of
one nonzero value is that value, and from the sum and the sum of squares of
two numbers both numbers follow (they are the roots of
``t^2 - s t + (s^2 - q) / 2``). Zeros add nothing to a sum: a column that is
nonzero on a single row of a client (an indicator, a rare category, a mostly
zero measurement) has that row's value as its sum however many rows the
client has. So the rule counts *nonzero entries* per column, and rows:

* per-column sums (:func:`sends_sums`): at least :data:`MIN_ROWS_SUM` rows,
  and every column of every array sent is a sum of no nonzero entries (it is
  then 0) or of at least :data:`MIN_ROWS_SUM`;
* sums together with sums of squares (:func:`sends_moments`): the same with
  :data:`MIN_ROWS_MOMENTS`.

The arrays are all that is summed: ``X`` and ``y`` alike. A client that
fails sends its row count alone and is left out of the pooled statistic.
Clients send sums, not means (a mean of a constant column is a raw value;
the sum of ``n >= 2`` equal values is not).

Sums of products (``X^T X``, ``X^T y``) count the rows whose *product* is
nonzero: where an indicator column is 1 on a single row, ``sum_i x_ij y_i``
is that row's ``y``. A client sends them only if every entry is a sum of no
or of at least :data:`MIN_ROWS_MOMENTS` nonzero products
(:func:`sends_products`).

The rule covers what the sums determine, too. A least-squares model fitted
to a client's rows, or a gradient step of one from a broadcast model, is a
function of the Gram matrix of ``[1, X, y]``, and a client's steps from
several broadcast models give that matrix back: such a message is sent only
under :func:`sends_gram` (the sums, sums of squares and products above
together). A message that sums a nonlinear function of each row at several
points (a loss curve) can give each row's arguments back whatever its
zeros: :func:`sends_curve` counts the unknowns against the values sent.
"""

import warnings
from dataclasses import dataclass

import numpy as np

from ..utils._validation import user_stacklevel
from ._protocol import ClientData

__all__ = ["MIN_ROWS_MOMENTS", "MIN_ROWS_SUM", "GramGatedData", "gram_gated", "sends_curve",
           "sends_gram", "sends_moments", "sends_products", "sends_sums",
           "too_few_rows_warning"]

MIN_ROWS_SUM = 2
MIN_ROWS_MOMENTS = 3


def _columns(a):
    """``a`` as a 2-D array of rows (a 1-D array is one column)."""
    arr = np.asarray(a)
    if arr.ndim == 0:
        raise TypeError(
            "the release checks take the arrays a client would sum (rows first), not a "
            f"row count; got the scalar {a!r}")
    return arr.reshape(arr.shape[0], -1)


def _every_column_has(minimum, arrays):
    """Whether the arrays share a row count of ``minimum`` or more and each of their
    columns has no nonzero entry or ``minimum`` or more."""
    if not arrays:
        raise TypeError("the release checks need at least one array")
    cols = [_columns(a) for a in arrays]
    n_rows = {c.shape[0] for c in cols}
    if len(n_rows) != 1:
        raise ValueError(f"the arrays of one client differ in row count: {sorted(n_rows)}")
    if n_rows.pop() < minimum:
        return False
    return all(bool(np.all((counts == 0) | (counts >= minimum)))
               for counts in (np.count_nonzero(c, axis=0) for c in cols))


def sends_sums(*arrays):
    """Whether a client may send the per-column sums of ``arrays`` (its ``X``, ``y``).

    It needs :data:`MIN_ROWS_SUM` rows or more, and every column a sum of no
    nonzero entries or of :data:`MIN_ROWS_SUM` or more.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated._release import sends_sums
    >>> X = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 5.0]])
    >>> sends_sums(X)  # column 1's sum would be the third row's 5.0
    False
    >>> sends_sums(X[:, :1], np.array([0.5, 0.7, 0.2]))
    True
    """
    return _every_column_has(MIN_ROWS_SUM, arrays)


def sends_moments(*arrays):
    """Whether a client may send the per-column sums and sums of squares of ``arrays``.

    As :func:`sends_sums` with :data:`MIN_ROWS_MOMENTS`: two nonzero values
    follow from their sum and sum of squares.
    """
    return _every_column_has(MIN_ROWS_MOMENTS, arrays)


def sends_products(A, B=None):
    """Whether a client may send ``A^T B`` (``A^T A`` if ``B`` is None).

    Every entry must be a sum of no nonzero products (it is then exactly 0 and
    carries no row's value) or of at least :data:`MIN_ROWS_MOMENTS` of them.
    """
    nz_a = (np.asarray(A) != 0).reshape(len(A), -1).astype(np.float64)
    nz_b = nz_a if B is None else (np.asarray(B) != 0).reshape(len(B), -1).astype(np.float64)
    counts = nz_a.T @ nz_b
    return bool(np.all((counts == 0) | (counts >= MIN_ROWS_MOMENTS)))


def sends_gram(*arrays):
    """Whether a client may send what the Gram matrix of its rows ``[1, X, y]`` determines.

    That is the sums, sums of squares and cross products of the columns of
    ``arrays`` together, and whatever is computed from them alone: a
    least-squares model fitted to the rows, or a gradient step of one from a
    broadcast model (a client's steps from ``d + 2`` broadcast models give all
    of it back but ``y^T y``). The matrix fixes the centred rows up to a
    rotation of the ``n - 1`` dimensions orthogonal to the ones vector: a
    one-row client's row exactly, a two-row client's two rows up to their
    order, and three or more only up to a continuum. So the client needs
    :data:`MIN_ROWS_MOMENTS` rows, every column a sum of no or of that many
    nonzero values (:func:`sends_moments`) and every product of two columns,
    of any of the arrays, a sum of no or of that many nonzero products
    (:func:`sends_products`).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated._release import sends_gram
    >>> X = np.array([[1.0, 0.5], [2.0, 0.0], [3.0, 0.0], [4.0, 0.7]])
    >>> y = np.array([0.3, 0.1, 0.4, 0.2])
    >>> sends_gram(X, y)  # column 1 has two nonzero values
    False
    >>> sends_gram(X[:, :1], y)
    True
    """
    if not _every_column_has(MIN_ROWS_MOMENTS, arrays):
        return False
    return sends_products(np.hstack([_columns(a) for a in arrays]))


def sends_curve(n_rows, unknowns_per_row, n_values):
    """Whether a client may send ``n_values`` sums over its rows of one nonlinear function.

    Each row enters the sums through ``unknowns_per_row`` numbers (e.g. its
    score margins), at ``n_values`` points (e.g. temperatures). A generic
    smooth map from more unknowns than values has a continuum of solutions,
    while ``n_values`` sums of fewer unknowns can determine them (two rows'
    log losses at many temperatures give both rows' margins). So the rows'
    unknowns must outnumber the values sent. Zeros are not special here:
    every row adds its own term.

    Examples
    --------
    >>> from skfed.federated._release import sends_curve
    >>> sends_curve(2, 1, 61), sends_curve(62, 1, 61), sends_curve(31, 2, 61)
    (False, True, True)
    """
    for name, value in (("n_rows", n_rows), ("unknowns_per_row", unknowns_per_row),
                        ("n_values", n_values)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}.")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}.")
    return int(n_rows) * int(unknowns_per_row) > int(n_values)


def too_few_rows_warning(what, minimum, fallback, sent="sums"):
    """Warn that no client passed the ``minimum`` rule to contribute to ``what``.

    ``sent`` names the message: ``"sums"`` (:func:`sends_sums`,
    :func:`sends_moments`) or, under :func:`sends_gram`, e.g. ``"model updates"``
    (then the products of two columns count too).
    """
    columns = "column" if sent == "sums" else "column and product of two columns"
    warnings.warn(
        f"no client has {minimum} or more rows with {minimum} or more nonzero values in each "
        f"{columns} that is not all zero, so none sent the {sent} {what} needs (a smaller "
        f"client's {sent} would give its raw values); {fallback}.",
        UserWarning, stacklevel=user_stacklevel(),
    )


@dataclass(frozen=True, eq=False)
class GramGatedData(ClientData):
    """A client's rows and whether it may send what its Gram matrix determines
    (:func:`sends_gram`), decided once on the site."""

    sends_gram: bool = False


def gram_gated(data):
    """``data`` as :class:`GramGatedData` (a ``prepare_client`` of a Gram-gated protocol)."""
    return GramGatedData(X=data.X, y=data.y, sample_weight=data.sample_weight,
                         label=data.label, index=data.index,
                         sends_gram=sends_gram(data.X, data.y))

