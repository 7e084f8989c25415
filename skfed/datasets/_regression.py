"""Generators of heterogeneous federated regression problems."""

import numpy as np
from sklearn.utils import check_random_state

from ..utils._validation import check_positive_int

__all__ = ["make_federated_regression"]


def _client_sizes(n_samples, n_clients):
    sizes = np.atleast_1d(np.asarray(n_samples))
    if sizes.dtype.kind not in "iu" and not (
        sizes.dtype.kind == "f" and np.all(sizes == np.round(sizes))
    ):
        raise ValueError(f"n_samples must hold integers, got {n_samples!r}.")
    sizes = sizes.astype(np.int64)
    if sizes.size == 1:
        sizes = np.full(n_clients, sizes[0])
    if sizes.shape != (n_clients,):
        raise ValueError(
            f"n_samples must be an int or have one entry per client ({n_clients}), "
            f"got {sizes.size} entries."
        )
    if np.any(sizes < 1):
        raise ValueError(f"n_samples must be >= 1 for every client, got {sizes.tolist()}.")
    return sizes


def make_federated_regression(
    n_clients=10,
    n_samples=100,
    n_features=5,
    *,
    heterogeneity=0.5,
    covariate_shift=0.0,
    noise=0.5,
    shuffle=True,
    return_coef=False,
    random_state=None,
):
    """Generate a linear regression problem whose clients differ.

    Client ``k`` draws rows ``x ~ N(mu_k, I)`` and targets

    .. math:: y = x^\\top (w_0 + \\delta_k) + b_k + \\varepsilon,

    with a shared coefficient ``w_0 ~ N(0, I)``, a client deviation
    ``delta_k ~ N(0, heterogeneity^2 I)``, a client offset
    ``b_k ~ N(0, heterogeneity^2)``, covariate shift
    ``mu_k ~ N(0, covariate_shift^2 I)`` and noise
    ``epsilon ~ N(0, noise^2)``. With ``heterogeneity=0`` all clients share
    one model and pooling is optimal; as it grows, local models win.

    Parameters
    ----------
    n_clients : int, default=10
        Number of clients.
    n_samples : int or array-like of shape (n_clients,), default=100
        Rows per client (one number for all, or one per client).
    n_features : int, default=5
        Number of features.
    heterogeneity : float, default=0.5
        Standard deviation of the client deviations and offsets.
    covariate_shift : float, default=0.0
        Standard deviation of the client means of ``x``.
    noise : float, default=0.5
        Standard deviation of the Gaussian noise on ``y``.
    shuffle : bool, default=True
        Shuffle the rows (otherwise they are grouped by client).
    return_coef : bool, default=False
        Also return the true coefficients and offsets.
    random_state : int, RandomState instance or None, default=None
        Seed of the generator.

    Returns
    -------
    X : ndarray of shape (n_total, n_features)
        Covariates.
    y : ndarray of shape (n_total,)
        Targets.
    groups : ndarray of shape (n_total,)
        Client index (0 to ``n_clients - 1``) of each row.
    coef : ndarray of shape (n_clients, n_features)
        True coefficients ``w_0 + delta_k`` (if ``return_coef``).
    intercept : ndarray of shape (n_clients,)
        True offsets ``b_k`` (if ``return_coef``).

    Examples
    --------
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=4, n_samples=[10, 20, 30, 40],
    ...                                          random_state=0)
    >>> X.shape, sorted(set(groups.tolist()))
    ((100, 5), [0, 1, 2, 3])
    """
    n_clients = check_positive_int(n_clients, "n_clients")
    n_features = check_positive_int(n_features, "n_features")
    for name, value in (("heterogeneity", heterogeneity), ("covariate_shift", covariate_shift),
                        ("noise", noise)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    sizes = _client_sizes(n_samples, n_clients)
    rng = check_random_state(random_state)

    shared = rng.standard_normal(n_features)
    coef = shared + heterogeneity * rng.standard_normal((n_clients, n_features))
    intercept = heterogeneity * rng.standard_normal(n_clients)
    means = covariate_shift * rng.standard_normal((n_clients, n_features))

    groups = np.repeat(np.arange(n_clients), sizes)
    X = rng.standard_normal((groups.size, n_features)) + means[groups]
    y = np.einsum("ij,ij->i", X, coef[groups]) + intercept[groups]
    y += noise * rng.standard_normal(groups.size)
    if shuffle:
        perm = rng.permutation(groups.size)
        X, y, groups = X[perm], y[perm], groups[perm]
    if return_coef:
        return X, y, groups, coef, intercept
    return X, y, groups
