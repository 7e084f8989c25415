"""Validation of client labels (``groups``) and of wrapped estimators."""

import numbers

import numpy as np

UNKNOWN_CLIENT_OPTIONS = ("global", "error")


def check_groups(groups, n_samples):
    """Validate client labels and map them to client indices.

    Parameters
    ----------
    groups : array-like of shape (n_samples,) or None
        Client label of every row: any hashable labels (ints, strings).
        ``None`` means that every row belongs to a single client.
    n_samples : int
        Number of rows of ``X``.

    Returns
    -------
    clients : ndarray of shape (n_clients,)
        Sorted unique client labels (``clients_`` of a fitted estimator).
    client_index : ndarray of shape (n_samples,), dtype=intp
        Position of each row's client in ``clients``.

    Examples
    --------
    >>> from skfed.utils import check_groups
    >>> clients, idx = check_groups(["b", "a", "b"], 3)
    >>> clients.tolist(), idx.tolist()
    (['a', 'b'], [1, 0, 1])
    """
    if groups is None:
        return np.array([0]), np.zeros(n_samples, dtype=np.intp)
    groups = _as_label_array(groups, "groups")
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups has {groups.shape[0]} labels but X has {n_samples} rows; "
            "pass one client label per row."
        )
    if n_samples == 0:
        raise ValueError("groups is empty: at least one row is required.")
    try:
        clients, client_index = np.unique(groups, return_inverse=True)
    except TypeError as exc:
        raise ValueError(
            "groups must hold labels of one comparable type (all ints or all "
            f"strings); got a mix: {exc}"
        ) from None
    return clients, client_index.astype(np.intp, copy=False)


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
    """
    if unknown_client not in UNKNOWN_CLIENT_OPTIONS:
        raise ValueError(
            f"unknown_client must be one of {UNKNOWN_CLIENT_OPTIONS}, "
            f"got {unknown_client!r}."
        )
    if groups is None:
        return np.full(n_samples, -1, dtype=np.intp)
    groups = _as_label_array(groups, "groups")
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups has {groups.shape[0]} labels but X has {n_samples} rows; "
            "pass one client label per row."
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


def _as_label_array(groups, name):
    groups = np.asarray(groups)
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
    if groups.dtype.kind == "O" and any(g is None for g in groups):
        raise ValueError(f"{name} contains None; every row needs a client label.")
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
