"""Client clustering from projection operators (pFedHGP paper sec. 3.8.2)."""

import numpy as np
from scipy.linalg import block_diag, cho_factor, cho_solve
from sklearn.cluster import SpectralClustering
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import check_groups, check_positive_int
from ._elbo import softplus
from ._kernels import kernel_matrix

__all__ = ["client_dissimilarity", "cluster_clients"]


def _projection(X, Z, ls, var, kind, noise):
    """``K(Z, X) (K(X, X) + noise I)^{-1} K(X, Z)`` via a Cholesky factorization."""
    Kxx = kernel_matrix(X, X, ls, var, kind)
    Kxx[np.diag_indices_from(Kxx)] += noise
    Kxz = kernel_matrix(X, Z, ls, var, kind)
    return Kxz.T @ cho_solve(cho_factor(Kxx, lower=True), Kxz)


def client_dissimilarity(model, X, groups):
    """The ``T x T`` dissimilarity of the paper's sec. 3.8.2 for a fitted model.

    For client ``i`` with inputs ``X_i`` (only its inputs: no targets and no
    variational parameters enter), the deviation and local projection
    operators are::

        A_delta_i = K_g(Z_g, X_i) (K_g(X_i, X_i) + sigma^2 I)^{-1} K_g(X_i, Z_g)
        A_loc_i   = K_l_i(Z_i, X_i) (K_l_i(X_i, X_i) + sigma^2 I)^{-1} K_l_i(X_i, Z_i)

    ``A_i = blockdiag(A_delta_i, A_loc_i) / trace`` and
    ``rho(i, j) = ||A_i - A_j||_F^2``. Each client computes its ``A_i``
    locally (``O(n_i^3)``); only these ``M + M_i`` square matrices would be
    shared. The local blocks are comparable only if the clients' ``Z_i`` are
    aligned (e.g. the same input grid, as in the paper's stations).

    Parameters
    ----------
    model : PFedHGPRegressor
        Fitted with the deviation and/or local component.
    X : array-like of shape (n_samples, n_features)
        The inputs of the fitted clients.
    groups : array-like of shape (n_samples,)
        Client label of each row (every label must be in ``model.clients_``).

    Returns
    -------
    rho : ndarray of shape (n_clients, n_clients)
        In the order of ``model.clients_``.
    """
    check_is_fitted(model)
    X = np.asarray(X, dtype=float)
    labels, index = check_groups(groups, X.shape[0])
    missing = set(model.clients_.tolist()) - set(labels.tolist())
    if missing:
        raise ValueError(f"groups has no rows for the fitted clients {sorted(missing)[:10]}.")
    cfg, g = model._cfg, model._global
    noise = float(softplus(g["noise"]))
    ops = []
    for k, label in enumerate(model.clients_.tolist()):
        Xi = X[index == int(np.flatnonzero(labels == label)[0])]
        blocks = []
        if cfg.use_deviation:
            blocks.append(_projection(Xi, g["Zg"], cfg.lengthscale(g["ls_g"]),
                                      model.phi_ * float(softplus(g["var_g"])), cfg.kind, noise))
        if cfg.use_local:
            loc = model._locals[k]
            blocks.append(_projection(Xi, loc["Zl"], cfg.lengthscale(loc["ls_l"]),
                                      float(softplus(loc["var_l"])), cfg.kind, noise))
        if not blocks:
            raise ValueError("client_dissimilarity needs the deviation or the local component.")
        A = block_diag(*blocks)
        ops.append(A / np.trace(A))
    T = len(ops)
    rho = np.zeros((T, T))
    for i in range(T):
        for j in range(i + 1, T):
            rho[i, j] = rho[j, i] = np.sum((ops[i] - ops[j]) ** 2)
    return rho


def cluster_clients(rho, n_clusters=3, *, bandwidth=None, random_state=None):
    """Spectral clustering of clients from a dissimilarity matrix.

    The affinity is ``exp(-rho / h)`` with ``h`` the median off-diagonal
    dissimilarity unless ``bandwidth`` is given (spec 3.4; the paper uses
    spectral clustering with 3 clusters for its monitoring stations).

    Parameters
    ----------
    rho : array-like of shape (n_clients, n_clients)
        Symmetric non-negative dissimilarities (e.g. :func:`client_dissimilarity`).
    n_clusters : int, default=3
    bandwidth : float or None, default=None
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    labels : ndarray of shape (n_clients,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.gaussian_process import cluster_clients
    >>> rho = np.array([[0, .1, 5, 5], [.1, 0, 5, 5], [5, 5, 0, .1], [5, 5, .1, 0]])
    >>> labels = cluster_clients(rho, n_clusters=2, random_state=0)
    >>> bool(labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2])
    True
    """
    rho = np.asarray(rho, dtype=float)
    if rho.ndim != 2 or rho.shape[0] != rho.shape[1] or not np.all(np.isfinite(rho)) or np.any(rho < 0):
        raise ValueError("rho must be a square, finite, non-negative dissimilarity matrix.")
    k = check_positive_int(n_clusters, "n_clusters")
    if k > rho.shape[0]:
        raise ValueError(f"n_clusters={k} exceeds the number of clients {rho.shape[0]}.")
    if bandwidth is None:
        off = rho[~np.eye(len(rho), dtype=bool)]
        bandwidth = float(np.median(off)) if off.size and np.median(off) > 0 else 1.0
    elif not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth!r}.")
    affinity = np.exp(-rho / bandwidth)
    return SpectralClustering(n_clusters=k, affinity="precomputed",
                              random_state=random_state).fit_predict(affinity)
