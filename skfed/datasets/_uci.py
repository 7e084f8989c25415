"""Offline loaders of the UCI data sets of the DP-Fed DRO benchmark."""

from sklearn.datasets import load_iris, load_wine

from ..utils._validation import install_hint

__all__ = ["UCI_DATASETS", "available_uci", "load_uci"]

UCI_DATASETS = ("iris", "wine", "penguins", "dermatology", "seeds")
_UNAVAILABLE = {
    "dermatology": "UCI id 33 (366 x 34, 6 classes, CC BY 4.0)",
    "seeds": "UCI id 236 (210 x 7, 3 classes, CC BY 4.0)",
}


def load_uci(name):
    """Load one of the paper's UCI data sets as ``(X, y)``, without network access.

    * ``"iris"`` and ``"wine"``: bundled with scikit-learn.
    * ``"penguins"``: from the ``palmerpenguins`` package (CC0) if installed;
      the four numeric measurements, rows with a missing measurement dropped
      (the paper does not say which features or how NAs were handled).
    * ``"dermatology"``, ``"seeds"``: not available offline (neither
      scikit-learn nor an installed package ships them); a ``ValueError``.

    Parameters
    ----------
    name : str
        One of ``UCI_DATASETS``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)

    Examples
    --------
    >>> from skfed.datasets import load_uci
    >>> X, y = load_uci("wine")
    >>> X.shape
    (178, 13)
    """
    if name == "iris":
        data = load_iris()
        return data.data, data.target
    if name == "wine":
        data = load_wine()
        return data.data, data.target
    if name == "penguins":
        try:
            import palmerpenguins
        except ImportError:
            raise ImportError(
                "the Palmer Penguins data need the 'palmerpenguins' package (CC0), which "
                f"is not installed; {install_hint('bench')}, or pip install palmerpenguins."
            ) from None
        df = palmerpenguins.load_penguins()
        cols = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
        df = df.dropna(subset=cols + ["species"])
        return df[cols].to_numpy(dtype=float), df["species"].to_numpy()
    if name in _UNAVAILABLE:
        raise ValueError(
            f"{name!r} ({_UNAVAILABLE[name]}) is not available offline: neither scikit-learn "
            "nor an installed package ships it."
        )
    raise ValueError(f"name must be one of {UCI_DATASETS}, got {name!r}.")


def available_uci():
    """Names of the UCI data sets that :func:`load_uci` can load here."""
    out = []
    for name in UCI_DATASETS:
        try:
            load_uci(name)
        except (ImportError, ValueError):
            continue
        out.append(name)
    return out
