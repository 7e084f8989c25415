"""Parameter checks shared by the data generators.

The generators check their arguments at entry and never alter them: the data
they draw for valid arguments are those of the papers' reproductions.
"""

import math
import numbers

import numpy as np

__all__ = ["check_counts", "check_labels", "check_number", "check_numbers", "is_integral"]


def check_number(value, name, *, minimum=None, strict=False):
    """Refuse ``value`` unless it is a finite real number ``>= minimum`` (``>`` if ``strict``).

    Booleans and non-numbers are refused; ``minimum=None`` only asks for a
    finite number.

    Examples
    --------
    >>> from skfed.datasets._checks import check_number
    >>> check_number(-1.0, "noise", minimum=0)
    Traceback (most recent call last):
    ...
    ValueError: noise must be a finite number >= 0, got -1.0.
    """
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()  # a 0-d array holding a number
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or (minimum is not None and not (value > minimum if strict else value >= minimum))
    ):
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}.")


def check_numbers(values, name, *, strict=True, first_only=False):
    """Refuse ``values`` unless it is one number or a 1-D sequence of finite numbers > 0.

    ``strict=False`` admits 0 (``>= 0``); ``first_only`` checks the first
    entry only (the one a caller uses).
    """
    try:
        a = np.atleast_1d(np.asarray(values))
    except (TypeError, ValueError):  # ragged
        a = None
    if a is not None and first_only:
        a = a[:1]
    if (
        a is None
        or a.ndim != 1
        or a.size == 0
        or a.dtype.kind not in "iuf"
        or not np.all(np.isfinite(a))
        or not np.all(a > 0 if strict else a >= 0)
    ):
        raise ValueError(
            f"{name} must hold finite numbers {'>' if strict else '>='} 0, got {values!r}."
        )


def is_integral(a):
    """Whether the array ``a`` holds integers (integral floats such as 20.0 count; bools not)."""
    return a.dtype.kind in "iu" or (
        a.dtype.kind == "f" and bool(np.all(np.isfinite(a))) and bool(np.all(a == np.round(a)))
    )


def check_counts(values, name, *, length=None, minimum=1):
    """Refuse ``values`` unless it is a 1-D sequence of integers ``>= minimum``.

    As ``n_samples`` of :func:`~skfed.datasets.make_federated_regression`,
    integral floats (``20.0``) are accepted; fractions (``2.5``, which used
    to be truncated), booleans, strings and a single number are not.
    ``length`` fixes the number of entries.

    Examples
    --------
    >>> from skfed.datasets._checks import check_counts
    >>> check_counts((30, 2.5), "n_cycles")
    Traceback (most recent call last):
    ...
    ValueError: n_cycles must be a sequence of integers >= 1, got (30, 2.5).
    """
    try:
        a = np.asarray(values)
    except (TypeError, ValueError):  # ragged
        a = None
    if (
        a is None
        or a.ndim != 1
        or a.size == 0
        or (length is not None and a.size != length)
        or not is_integral(a)
        or not np.all(a >= minimum)
    ):
        count = "" if length is None else f" {length}"
        raise ValueError(
            f"{name} must be a sequence of{count} integers >= {minimum}, got {values!r}."
        )


def check_labels(y, name="y"):
    """``y`` as a 1-D, non-empty array of labels without missing values (NaN, None).

    Returns
    -------
    y : ndarray of shape (n_samples,)
        ``np.asarray(y)``.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one label per row), got an array of shape {y.shape}."
        )
    if y.size == 0:
        raise ValueError(f"{name} is empty: at least one label is required.")
    if y.dtype.kind == "f":
        missing = bool(np.isnan(y).any())
    elif y.dtype.kind == "O":
        missing = any(v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))
                      for v in y)
    else:
        missing = False
    if missing:
        raise ValueError(f"{name} contains missing labels (NaN or None); every row needs a class.")
    return y
