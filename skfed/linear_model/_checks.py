"""Parameter and input checks of the federated linear classifiers."""

import numpy as np

NORM_RTOL = 1e-9  # rows scaled to norm L in floating point may exceed L by a few ulps


def _label_array(labels, name):
    """Class labels as an array that may cross in a message (numbers or text)."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "biufU":
        return labels
    if all(isinstance(v, str) for v in labels.ravel()):
        return labels.astype(str)
    raise ValueError(
        f"{name}: class labels must be numbers or strings to be federated, got "
        f"{sorted({type(v).__name__ for v in labels.ravel()})}."
    )


def check_known_classes(classes):
    """The public ``classes``: sorted unique labels (numbers or strings), at least 2."""
    try:
        arr = np.asarray(classes)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"classes must be a 1-d array-like of class labels: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"classes must be a 1-d array-like of class labels, got shape "
                         f"{arr.shape}.")
    arr = _label_array(arr, "classes")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValueError(f"classes must be finite labels, got {classes!r}.")
    arr = np.unique(arr)
    if arr.size < 2:
        raise ValueError(f"classes must hold at least 2 distinct labels, got {classes!r}.")
    return arr


def check_norm_bound(X, bound):
    """Refuse rows with ``||x||_2 > bound`` (never clip silently)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))  # no n x p temporary
    worst = int(np.argmax(norms))
    if norms[worst] > bound * (1.0 + NORM_RTOL):
        raise ValueError(
            f"row {worst} of X has l2 norm {norms[worst]:.6g} > norm_bound={bound:g}; "
            "the privacy guarantee needs ||x|| <= norm_bound for every row. Scale the "
            "rows first (e.g. skfed.preprocessing.NormClipper); they are never clipped "
            "silently."
        )


def client_weights(alpha, sizes):
    """``alpha_g`` from "uniform", "size" or an explicit array."""
    g = sizes.size
    if isinstance(alpha, str):
        if alpha == "uniform":
            return np.full(g, 1.0 / g)
        if alpha == "size":
            return sizes / sizes.sum()
        raise ValueError(f"alpha must be 'uniform', 'size' or an array, got {alpha!r}.")
    arr = np.asarray(alpha, dtype=float)
    if arr.shape != (g,) or np.any(arr < 0) or not np.isclose(arr.sum(), 1.0):
        raise ValueError(
            f"alpha must hold {g} non-negative client weights summing to 1, got {alpha!r}."
        )
    return arr


def per_client(value, n_clients, name):
    """A scalar >= 0 broadcast to every client, or one value per client."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(n_clients, float(arr))
    if arr.shape != (n_clients,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(
            f"{name} must be a number >= 0 or one per client ({n_clients}), got {value!r}."
        )
    return arr
