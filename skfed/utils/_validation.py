"""Validation of client labels (``groups``) and of wrapped estimators."""

import math
import numbers
import re
import sys
import warnings
from typing import NamedTuple

import numpy as np

# scikit-learn is imported by the functions that use it: the federated engine and a Flower
# site's process import this module, and a site's round needs no scikit-learn (its import
# is most of what a Flower message costs a site's new process)

UNKNOWN_CLIENT_OPTIONS = ("global", "error")


def user_stacklevel():
    """The ``stacklevel`` at which a warning raised by the caller points to user code.

    Counts the frames from the function calling this one up to the first
    frame outside the ``skfed`` package (e.g. the user's ``fit`` call), so a
    warning names the user's line however deep inside skfed it is raised.
    scikit-learn's ``_fit_context`` wrapper around a scikit-learn
    meta-estimator's ``fit`` is skipped too, and so is a splitter's
    ``split`` of ``BaseCrossValidator`` around its ``_iter_test_indices``.
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_globals.get("__name__", "").split(".")[0] == "skfed"
        or (frame.f_globals.get("__name__"), frame.f_code.co_name)
        in {("sklearn.base", "wrapper"), ("sklearn.model_selection._split", "split"),
            ("sklearn.model_selection._split", "_iter_test_masks")}
    ):
        frame, level = frame.f_back, level + 1
    del frame
    return level


def install_hint(extra):
    """How to install one of skfed's extras, as the README does: from the skfed clone.

    Parameters
    ----------
    extra : str
        The extra's name in ``pyproject.toml`` (``"bench"``, ``"flower"``, ...).

    Returns
    -------
    hint : str
        E.g. ``python -m pip install -e ".[bench]" in the skfed clone``.
    """
    return f'python -m pip install -e ".[{extra}]" in the skfed clone'


def check_unknown_client(unknown_client):
    """Validate the ``unknown_client`` parameter shared by the federated estimators.

    ``"global"``: a client not seen in ``fit`` gets the population prediction;
    ``"error"``: it is refused with a ``ValueError``.
    """
    if not isinstance(unknown_client, str) or unknown_client not in UNKNOWN_CLIENT_OPTIONS:
        raise ValueError(
            f"unknown_client must be one of {UNKNOWN_CLIENT_OPTIONS}, got {unknown_client!r}."
        )
    return unknown_client


def check_params(estimator):
    """Check an estimator's hyperparameters as its ``fit`` does; return it.

    First scikit-learn's ``_parameter_constraints`` (unless parameter
    validation is switched off, as in ``sklearn.config_context(
    skip_parameter_validation=True)``), then the estimator's own
    ``_check_params`` (checks that tie several parameters together). The
    ``fit`` of an estimator with constraints calls it once, before anything
    else (:func:`skfed.base.checked_fit`); a Flower node calls it outside
    any fit.

    Parameters
    ----------
    estimator : skfed estimator
        Unfitted or fitted; only its parameters are read.

    Returns
    -------
    estimator : skfed estimator
        The same object.
    """
    import sklearn

    if not sklearn.get_config()["skip_parameter_validation"]:
        estimator._validate_params()  # the one call of scikit-learn's private check
    estimator._check_params()
    return estimator


class ClientSplit(NamedTuple):
    """Client labels split once (by :func:`split_groups`); :func:`check_groups` takes it as is.

    ``FederatedEstimator.fit`` splits ``groups`` once and hands this to site
    validation and to the federation, so no step of a fit splits the labels again.
    """

    labels: np.ndarray
    index: np.ndarray


def split_groups(groups, X=None):
    """``groups`` validated and split into a :class:`ClientSplit`.

    The row count is checked later, against the validated rows, by
    :func:`check_groups`. ``None`` is one client of all the rows of ``X`` (its
    no-routing warning given here, once a fit), or stays ``None`` without ``X``
    or when ``X`` has no row count (its validation names the problem).
    """
    if isinstance(groups, ClientSplit):
        return groups
    if groups is None:
        try:
            n_samples = X.shape[0] if hasattr(X, "shape") else len(X)
        except (TypeError, IndexError):  # no rows: not an array (validation says so)
            return None
        return ClientSplit(*check_groups(None, int(n_samples)))
    labels = _as_label_array(groups, "groups")
    return ClientSplit(*check_groups(labels, labels.shape[0]))


def check_groups(groups, n_samples):
    """Validate client labels and map them to client indices.

    Parameters
    ----------
    groups : array-like of shape (n_samples,) or None
        Client label of every row, all of one kind (see :func:`label_kind`):
        numbers (ints or floats), strings (``str``, ``numpy.str_``, object
        arrays of them, a pandas categorical of them) or bools. ``None`` means
        that every row belongs to a single client. A :class:`ClientSplit`
        (``fit``'s one split) is returned as it is, its row count checked.
    n_samples : int
        Number of rows of ``X``.

    Returns
    -------
    clients : ndarray of shape (n_clients,)
        Sorted unique client labels (``clients_`` of a fitted estimator).
    client_index : ndarray of shape (n_samples,), dtype=intp
        Position of each row's client in ``clients``.

    Warns
    -----
    UserWarning
        ``groups=None`` while scikit-learn's metadata routing is off, inside
        a ``GridSearchCV``/``cross_validate`` call that was given ``groups``:
        scikit-learn then passed ``groups`` to the splitter only, so this fit
        sees all its rows as one client.

    Examples
    --------
    >>> from skfed.utils import check_groups
    >>> clients, idx = check_groups(["b", "a", "b"], 3)
    >>> clients.tolist(), idx.tolist()
    (['a', 'b'], [1, 0, 1])
    """
    if groups is None:
        _warn_if_groups_not_routed()
        return np.array([0]), np.zeros(n_samples, dtype=np.intp)
    if isinstance(groups, ClientSplit):  # split already: only the row count is checked
        if groups.index.shape[0] != n_samples:
            raise ValueError(
                f"groups has {groups.index.shape[0]} labels but X has {n_samples} rows; "
                "pass one client label per row."
            )
        return groups.labels, groups.index
    groups = _as_label_array(groups, "groups")
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups has {groups.shape[0]} labels but X has {n_samples} rows; "
            "pass one client label per row."
        )
    if n_samples == 0:
        raise ValueError("groups is empty: at least one row is required.")
    label_kind(groups, "groups")  # a mix of kinds is an error
    try:
        clients, client_index = np.unique(groups, return_inverse=True)
    except TypeError as exc:  # e.g. objects of one type that do not order
        raise ValueError(
            "groups must hold labels of one comparable type (all ints or all "
            f"strings); got a mix: {exc}"
        ) from None
    return clients, client_index.astype(np.intp, copy=False)


_ROUTING_HINT = (
    "fit received no groups: all rows are one client. scikit-learn passes the groups given "
    "to GridSearchCV.fit / cross_validate to the CV splitter only while metadata routing "
    "is off. To fit one client per label, enable metadata routing: "
    "sklearn.set_config(enable_metadata_routing=True) (then GridSearchCV.fit(X, y, "
    "groups=groups), or cross_validate(est, X, y, params={'groups': groups})). To fit a "
    "single client on purpose, do not pass groups to the search."
)


def _warn_if_groups_not_routed():
    """Warn when scikit-learn's model selection dropped ``groups`` on the way to ``fit``.

    With metadata routing off, ``GridSearchCV.fit(X, y, groups=g)`` and
    ``cross_validate(est, X, y, groups=g)`` give ``g`` to the splitter only
    and call ``est.fit(X_train, y_train)``: a federated estimator then
    silently fits one client. The caller frames tell it apart from a direct
    ``fit(X, y)``: a frame of ``sklearn.model_selection`` holding a ``groups``
    argument (``cross_validate``, ``learning_curve``, ...) or a ``params``
    dict with ``"groups"`` (``BaseSearchCV.fit``). When only the inner frames
    are visible (a worker process of ``n_jobs > 1``), whether groups were
    given is unknown and the warning is given.
    """
    import sklearn

    if sklearn.get_config().get("enable_metadata_routing", False):
        return
    frame = sys._getframe(2)
    inside, given = False, None
    while frame is not None and given is None:
        if frame.f_globals.get("__name__", "").startswith("sklearn.model_selection"):
            inside = True
            local = frame.f_locals
            if "groups" in local:
                given = local["groups"] is not None
            params = local.get("params")
            if isinstance(params, dict) and "groups" in params:
                given = params["groups"] is not None
            elif given is None and isinstance(params, dict) and "self" in local:
                given = False  # a search's fit(X, y, **params) without groups
        frame = frame.f_back
    del frame
    if inside and given is not False:
        unknown = (
            "" if given else
            " (This fit runs where the caller's arguments are not visible, e.g. in a worker "
            "of n_jobs > 1, so whether groups were given could not be checked.)"
        )
        warnings.warn(_ROUTING_HINT + unknown, UserWarning, stacklevel=user_stacklevel())


def map_clients(groups, clients, n_samples, unknown_client="global"):
    """Map client labels at predict time to indices into fitted ``clients``.

    Parameters
    ----------
    groups : array-like of shape (n_samples,) or None
        Client label of every row; ``None`` asks for the population
        (new-client) prediction for every row.
    clients : ndarray of shape (n_clients,)
        The fitted ``clients_``.
    n_samples : int
        Number of rows of ``X``.
    unknown_client : {"global", "error"}
        What to do with labels not seen in ``fit``: use the population model
        (index ``-1``) or raise a ``ValueError``.

    Returns
    -------
    client_index : ndarray of shape (n_samples,), dtype=intp
        Index into ``clients`` for each row, ``-1`` for the population model.

    Raises
    ------
    ValueError
        If ``groups`` mixes kinds of labels, or holds labels of another kind
        than ``clients`` (see :func:`label_kind`: e.g. strings ``"0"`` for
        clients fitted as ints ``0``), whatever ``unknown_client`` says: such
        labels can never match a fitted client, so they are a mistake rather
        than new clients.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.utils import map_clients
    >>> map_clients(["b", "new"], np.array(["a", "b"]), 2).tolist()
    [1, -1]
    """
    check_unknown_client(unknown_client)
    if groups is None:
        return np.full(n_samples, -1, dtype=np.intp)
    groups = _as_label_array(groups, "groups")
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups has {groups.shape[0]} labels but X has {n_samples} rows; "
            "pass one client label per row."
        )
    kind, fitted_kind = label_kind(groups, "groups"), label_kind(clients, "clients_")
    if kind is not None and fitted_kind is not None and kind != fitted_kind:
        raise ValueError(
            f"groups holds {kind} labels but the clients were fitted with {fitted_kind} "
            f"labels (clients_[:5]={clients[:5].tolist()}): no row could match a fitted "
            f"client. Pass labels of the same kind as in fit (e.g. convert them with "
            f"astype(clients_.dtype))."
        )
    try:
        pos = np.searchsorted(clients, groups)
    except TypeError:
        raise ValueError(
            f"groups labels of type {groups.dtype} cannot be compared with the "
            f"fitted client labels of type {clients.dtype}."
        ) from None
    pos = np.minimum(pos, len(clients) - 1)
    known = clients[pos] == groups
    if not np.all(known):
        if unknown_client == "error":
            unseen = np.unique(groups[~known])
            raise ValueError(
                f"groups contains clients not seen in fit: {unseen[:10].tolist()}; "
                "set unknown_client='global' to predict them with the population "
                "model."
            )
        pos = np.where(known, pos, -1)
    return pos.astype(np.intp, copy=False)


def label_kind(labels, name="groups"):
    """The kind of a 1-D array of client labels: numbers, strings, bools...

    Labels compare only within a kind, so ``fit`` refuses a mix and
    ``predict`` refuses labels of another kind than ``clients_``. Kinds:
    ``"number"`` (Python and numpy ints and floats), ``"string"`` (``str``,
    ``numpy.str_``, object arrays of them), ``"bool"`` (kept apart from
    numbers: ``True == 1`` would otherwise match silently), ``"bytes"``, or
    the type name of any other label. A pandas categorical has the kind of
    its categories' values (``numpy.asarray`` gives them).

    Parameters
    ----------
    labels : ndarray of shape (n,)
        Labels (as returned by ``numpy.asarray``).
    name : str, default="groups"
        Argument name used in the error message.

    Returns
    -------
    kind : str or None
        ``None`` for an empty array.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.utils import label_kind
    >>> label_kind(np.array([3, 1])), label_kind(np.array(["a", np.str_("b")], dtype=object))
    ('number', 'string')
    """
    if labels.size == 0:
        return None
    dtype_kind = labels.dtype.kind
    if dtype_kind in "iufc":
        return "number"
    if dtype_kind != "O":
        return {"b": "bool", "U": "string", "S": "bytes"}.get(dtype_kind, str(labels.dtype))
    kinds = sorted({_type_kind(t) for t in set(map(type, labels.ravel().tolist()))})
    if len(kinds) > 1:
        raise ValueError(
            f"{name} must hold labels of one comparable type (all ints or all strings); "
            f"got a mix of {' and '.join(kinds)}."
        )
    return kinds[0]


def _type_kind(t):
    if issubclass(t, (bool, np.bool_)):
        return "bool"
    if issubclass(t, str):
        return "string"
    if issubclass(t, bytes):
        return "bytes"
    if issubclass(t, numbers.Number):
        return "number"
    return t.__name__


def _as_label_array(groups, name):
    groups = np.asarray(groups)
    if groups.dtype.kind == "T":  # numpy's StringDType: strings, as '<U' and object arrays
        groups = groups.astype(object)
    if groups.ndim != 1:
        if groups.ndim == 2 and groups.shape[1] == 1:
            groups = groups.ravel()
        else:
            raise ValueError(
                f"{name} must be 1-D (one client label per row), got shape "
                f"{groups.shape}."
            )
    if groups.dtype.kind == "f" and not np.all(np.isfinite(groups)):
        raise ValueError(f"{name} contains NaN or infinity; client labels must be finite.")
    if groups.dtype.kind == "O":
        values = groups.tolist()
        if any(g is None for g in values):
            raise ValueError(f"{name} contains None; every row needs a client label.")
        if any(isinstance(g, numbers.Real) and g != g for g in values):
            raise ValueError(f"{name} contains NaN; every row needs a client label.")
    return groups


def check_estimator_param(estimator, name="estimator", methods=("fit",)):
    """Raise ``TypeError`` unless ``estimator`` is an unfitted-style estimator.

    Parameters
    ----------
    estimator : object
        The value passed by the user.
    name : str
        Parameter name used in the error message.
    methods : tuple of str
        Methods the object must provide.
    """
    missing = [m for m in (*methods, "get_params") if not hasattr(estimator, m)]
    if isinstance(estimator, type) or missing:
        what = "a class" if isinstance(estimator, type) else type(estimator).__name__
        raise TypeError(
            f"{name} must be a scikit-learn estimator instance with "
            f"{', '.join(methods)} and get_params; got {what}"
            + (f" (missing {', '.join(missing)})." if missing else ".")
        )


def check_positive_int(value, name, minimum=1):
    """Return ``value`` as int if it is an integer ``>= minimum``, else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_n_jobs(n_jobs):
    """``n_jobs`` as joblib reads it (``None``, a count ``>= 1``, or ``-1``, ``-2``, ...:
    all cores, all but one, ...); return the number of workers it means (``None``: 1)."""
    from ._param_validation import N_JOBS  # the estimators' constraint, one rule

    if n_jobs is None:
        return 1
    if not any(c.is_satisfied_by(n_jobs) for c in N_JOBS if c is not None):
        raise ValueError(f"n_jobs must be None, an integer >= 1 or a negative integer "
                         f"(-1: all cores), got {n_jobs!r}.")
    from joblib import effective_n_jobs

    return int(effective_n_jobs(int(n_jobs)))


def check_param_grid(param_grid, default, name="param_grid"):
    """``{parameter: non-empty list of values}`` (``None``: ``default``), as a dict of lists."""
    if param_grid is None:
        return {key: list(values) for key, values in default.items()}
    if not isinstance(param_grid, dict):
        raise ValueError(f"{name} must be a dict of parameter name to a list of values, "
                         f"got {param_grid!r}.")
    grid = {}
    for key, values in param_grid.items():
        if not isinstance(key, str):
            raise ValueError(f"{name} keys must be parameter names, got {key!r}.")
        if (isinstance(values, (str, bytes)) or not hasattr(values, "__iter__")
                or (isinstance(values, np.ndarray) and values.ndim == 0)):
            raise ValueError(f"{name}[{key!r}] must be a list of values, got {values!r}.")
        values = list(values)
        if not values:
            raise ValueError(f"{name}[{key!r}] is empty.")
        grid[key] = values
    return grid


def check_fraction(value, name, *, allow_zero=False, allow_one=True):
    """Return ``value`` as float if it is a real fraction, else raise ``ValueError``.

    The interval is ``(0, 1]`` by default; ``allow_zero`` closes it at 0 and
    ``allow_one=False`` opens it at 1. Booleans and non-numbers are refused.

    Examples
    --------
    >>> from skfed.utils._validation import check_fraction
    >>> check_fraction(0.5, "client_fraction")
    0.5
    >>> check_fraction(0, "flip_fraction", allow_zero=True, allow_one=False)
    0.0
    """
    low, high = ("[" if allow_zero else "("), ("]" if allow_one else ")")
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (0 <= value if allow_zero else 0 < value)
        or not (value <= 1 if allow_one else value < 1)
    ):
        raise ValueError(f"{name} must be in {low}0, 1{high}, got {value!r}.")
    return float(value)


_NO_Y = "no_validation"


def validate_data(estimator, X=_NO_Y, y=_NO_Y, **kwargs):
    """:func:`sklearn.utils.validation.validate_data` whose errors name the bad argument.

    Some of scikit-learn's messages do not say which argument they are about
    ("Expected 2D array, got 1D array instead", "Found array with 0
    sample(s)", "could not convert string to float", "Found input variables
    with inconsistent numbers of samples"); this wrapper prefixes them with
    the argument (``X`` or ``y``). With ``y_numeric=True`` a text ``y`` is
    converted to floats, or refused naming ``y`` (scikit-learn converts only
    object arrays, so other strings would reach the estimator's arithmetic).

    Parameters
    ----------
    estimator : estimator instance
        Passed to scikit-learn's ``validate_data``.
    X, y : array-like or "no_validation"
        The inputs.
    **kwargs : dict
        Passed to scikit-learn's ``validate_data``.

    Returns
    -------
    out : ndarray or tuple of ndarray
        As scikit-learn's ``validate_data``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skfed.utils._validation import validate_data
    >>> try:
    ...     validate_data(Ridge(), np.ones(3), np.ones(3))
    ... except ValueError as exc:
    ...     print(str(exc).splitlines()[0])
    X: Expected 2D array, got 1D array instead:
    """
    from sklearn.utils.validation import validate_data as _sklearn_validate_data

    has_y = not (isinstance(y, str) and y == _NO_Y) and y is not None
    if has_y:
        _refuse_missing_targets(y)
    if has_y and kwargs.get("y_numeric") and np.asarray(y).dtype.kind in "US":
        try:  # numbers written as text are read like scikit-learn's regressors do
            y = np.asarray(y).astype(np.float64)
        except ValueError as exc:
            raise ValueError(f"y must hold numbers (a regression target): {exc}") from None
    try:
        return _sklearn_validate_data(estimator, X, y, **kwargs)
    except (ValueError, TypeError) as exc:
        if type(exc) not in (ValueError, TypeError) or _names_argument(str(exc)):
            raise
        raise type(exc)(f"{_culprit(X, y, has_y, kwargs)}: {exc}") from exc


def _refuse_missing_targets(y):
    """Refuse ``None`` (or a float NaN) among the values of an object ``y``.

    scikit-learn checks an object array's finiteness before converting it to
    floats, so a ``None`` target passes and becomes NaN (a silent NaN fit or a
    misleading error far from its cause).
    """
    try:
        values = y if hasattr(y, "dtype") else np.asarray(y)
    except ValueError:  # ragged: scikit-learn names it
        return
    if getattr(values, "dtype", None) != object:
        return
    flat = np.asarray(values, dtype=object).ravel()
    missing = [i for i, v in enumerate(flat) if v is None or (isinstance(v, float) and v != v)]
    if missing:
        raise ValueError(
            f"y contains {len(missing)} missing value(s) (None or NaN) at flat positions "
            f"{missing[:10]}; drop or impute those rows."
        )


def _names_argument(message):
    return re.search(r"(?<![A-Za-z0-9_])(X|y)(?![A-Za-z0-9_])", message) is not None


def _culprit(X, y, has_y, kwargs):
    """Which of ``X`` and ``y`` scikit-learn refused (``X`` is checked first)."""
    if not has_y or (isinstance(X, str) and X == _NO_Y):
        return "X" if not (isinstance(X, str) and X == _NO_Y) else "y"
    from sklearn.utils.validation import check_array

    try:
        check_array(
            X, accept_sparse=kwargs.get("accept_sparse", False),
            dtype=kwargs.get("dtype", "numeric"), ensure_2d=kwargs.get("ensure_2d", True),
            allow_nd=kwargs.get("allow_nd", False),
            ensure_min_samples=kwargs.get("ensure_min_samples", 1),
            ensure_min_features=kwargs.get("ensure_min_features", 1),
            ensure_all_finite=kwargs.get("ensure_all_finite", True),
        )
    except (ValueError, TypeError):
        return "X"
    if hasattr(X, "shape") and hasattr(y, "__len__") and len(y) != X.shape[0]:
        return f"X and y (X has {X.shape[0]} rows, y has {len(y)})"
    return "y"


def check_scale(A, name, label=None):
    """Refuse an array whose sum of squares overflows float64 (|values| near 1e154 or more).

    Such values pass scikit-learn's finiteness checks, but every Gram matrix,
    norm or residual computed from them is ``inf`` or ``nan`` (a silent NaN
    prediction or a deep solver error).

    Parameters
    ----------
    A : ndarray
        Float array (``X`` or ``y``).
    name : str
        Argument name used in the error message.
    label : object, default=None
        Client label, named in the message when given.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.utils._validation import check_scale
    >>> check_scale(np.array([[1e300, 0.0]]), "X")
    Traceback (most recent call last):
    ...
    ValueError: X is out of range: its largest absolute value is 1e+300 and ...
    """
    A = np.asarray(A, dtype=float)
    peak = float(np.max(np.abs(A))) if A.size else 0.0
    if peak == 0.0 or not math.isfinite(peak):
        return  # empty, all zero, or non-finite (refused by the finiteness checks)
    scaled = A / peak  # no overflow: the sum of squares is peak**2 * sum(scaled**2)
    if not math.isfinite(peak * peak * float(np.vdot(scaled, scaled))):
        where = "" if label is None else f" of client {label!r}"
        raise ValueError(
            f"{name}{where} is out of range: its largest absolute value is {peak:.3g} and "
            f"the sum of its squares overflows float64; rescale {name} (e.g. divide it by "
            "a constant or use StandardScaler)."
        )
